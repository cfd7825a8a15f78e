//! The producer's transaction manager: a sans-IO state machine that decides which requests a
//! transactional (or idempotent) producer sends to its transaction coordinator, and when, and
//! what each answer does to the transaction.
//!
//! The producer's driver owns the sockets and the clock; it calls the application's operations
//! here ([`TransactionManager::init_transactions`], [`begin`](TransactionManager::begin),
//! [`begin_commit`](TransactionManager::begin_commit), ...), sends what
//! [`poll_request`](TransactionManager::poll_request) hands out, one at a time, and feeds the
//! answer to [`on_response`](TransactionManager::on_response). Work that goes elsewhere —
//! produce batches to partition leaders, TxnOffsetCommit to a group coordinator,
//! TxnShareAcknowledge to share-partition leaders — is an *operation*:
//! [`start_operation`](TransactionManager::start_operation) admits it into the transaction
//! and [`finish_operation`](TransactionManager::finish_operation) reports its answer.
//!
//! States, as the Java client names them:
//!
//! ```text
//! Uninitialized ─init─▶ Initializing ─InitProducerId─▶ Ready ─begin─▶ InTransaction
//!      InTransaction ─commit─▶ Committing ─EndTxn─▶ Ready
//!      InTransaction | AbortableError ─abort─▶ Aborting ─EndTxn─▶ Ready
//!      InTransaction | Committing ─abortable error─▶ AbortableError
//!      InTransaction ─prepare─▶ PreparedTransaction ─complete─▶ Committing | Aborting
//!      Initializing ─InitProducerId keeping a prepared transaction─▶ PreparedTransaction
//!      any ─fatal error─▶ FatalError (never left)
//! ```
//!
//! Two-phase commit (KIP-939, `transaction.two.phase.commit.enable`): the application
//! prepares the transaction ([`prepare`](TransactionManager::prepare): everything it holds is
//! registered with the coordinator and answered) and stores the [`PreparedTxnState`] it gets
//! in its own durable state; the transaction is then ended only by
//! [`complete`](TransactionManager::complete) with a token: committed when the token names
//! the prepared transaction, aborted otherwise. A restarted producer that keeps the prepared
//! transaction ([`init_transactions_keep_prepared`](TransactionManager::init_transactions_keep_prepared))
//! finds it in `PreparedTransaction` (named by the InitProducerId answer), or `Ready` when
//! nothing was prepared any more (an earlier completion finished it: completing again is a
//! no-op).
//!
//! Rules (the invariants the property test checks):
//! - A commit is sent only when every operation of the transaction has succeeded and none is
//!   still in flight; one failed operation makes the transaction abortable, and
//!   [`begin_commit`](TransactionManager::begin_commit) then refuses. EndTxn (either way)
//!   waits until no operation is in flight, so that no batch of this transaction can land
//!   after its marker.
//! - EndTxn is sent only for a transaction the coordinator knows about (a partition added, an
//!   offset commit or a share acknowledgement sent); an empty transaction completes at once.
//! - Transaction version 2 (KIP-890): partitions join implicitly with their first produce; the
//!   coordinator bumps the epoch at every EndTxn and the answer carries it. Version 1:
//!   AddPartitionsToTxn before the first produce to a partition, AddOffsetsToTxn before a
//!   TxnOffsetCommit.
//! - KIP-1289 share acknowledgements need version 2 ([`Operation::ShareAcknowledgements`]):
//!   without it they are refused before anything is sent, and the transaction is unchanged.
//! - Misuse (begin twice, commit outside a transaction, ...) is an
//!   [`TxnErrorKind::IllegalState`] error and changes nothing. `FatalError` is never left.
//! - Sequence numbers restart at 0 whenever the producer id or epoch changes.
//!
//! Every answer is untrusted: an EndTxn answer whose producer id or epoch cannot follow the
//! current one is a fatal [`TxnErrorKind::InvalidResponse`], not a silent reset.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

pub use shoal_core::txn_coordinator::TwoPhaseCommit;
use shoal_protocol::ErrorCode;

pub use super::errors::{classify, Handling, TxnApi};

/// A producer id and epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerIdEpoch {
    pub id: i64,
    pub epoch: i16,
}

/// A topic partition by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// The token of a prepared transaction (KIP-939): its producer id and the epoch its records
/// were written with. Stored by the application (in a checkpoint) and given back to
/// [`TransactionManager::complete`]. Its string form is `"<producer id>:<epoch>"`, as
/// Kafka's `PreparedTxnState` writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PreparedTxnState {
    producer_id: i64,
    epoch: i16,
}

impl PreparedTxnState {
    /// The token naming producer id `producer_id` at `epoch`.
    pub fn new(producer_id: i64, epoch: i16) -> PreparedTxnState {
        PreparedTxnState { producer_id, epoch }
    }

    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    pub fn epoch(&self) -> i16 {
        self.epoch
    }
}

impl fmt::Display for PreparedTxnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.producer_id, self.epoch)
    }
}

/// A string that is not a [`PreparedTxnState`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a prepared transaction token (\"<producer id>:<epoch>\"): {0:?}")]
pub struct ParsePreparedTxnStateError(String);

impl FromStr for PreparedTxnState {
    type Err = ParsePreparedTxnStateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParsePreparedTxnStateError(s.to_owned());
        let (id, epoch) = s.trim().split_once(':').ok_or_else(bad)?;
        let producer_id: i64 = id.parse().map_err(|_| bad())?;
        let epoch: i16 = epoch.parse().map_err(|_| bad())?;
        if producer_id < 0 || epoch < 0 {
            return Err(bad());
        }
        Ok(PreparedTxnState { producer_id, epoch })
    }
}

/// How [`TransactionManager::complete`] ends a prepared transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreparedOutcome {
    /// The token named the prepared transaction: it commits.
    Commit,
    /// The token named another transaction: the prepared one aborts.
    Abort,
    /// Nothing is prepared (an earlier completion ended it, or nothing was ever prepared):
    /// nothing to do.
    NothingPrepared,
}

/// The transaction manager's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnState {
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    /// Two-phase commit: prepared, waiting for [`TransactionManager::complete`].
    PreparedTransaction,
    Committing,
    Aborting,
    AbortableError,
    FatalError,
}

impl TxnState {
    /// Whether a transaction is open and not yet completing: it can (InTransaction,
    /// PreparedTransaction) or must (AbortableError) still be ended.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            TxnState::InTransaction | TxnState::PreparedTransaction | TxnState::AbortableError
        )
    }
}

/// Why an operation was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnErrorKind {
    /// The application called an operation the current state does not allow; nothing changed.
    #[error("not allowed in state {state:?}: {reason}")]
    IllegalState {
        state: TxnState,
        reason: &'static str,
    },
    /// The broker answered an error code.
    #[error("{api} answered {code:?} ({handling:?})", api = api.name())]
    Broker {
        api: TxnApi,
        code: ErrorCode,
        handling: Handling,
    },
    /// The cluster does not support what was asked (checked before sending anything).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// An answer that cannot be right (a producer epoch that does not follow ours, ...).
    #[error("invalid response: {0}")]
    InvalidResponse(&'static str),
}

/// An error of the transaction manager, and what it left the transaction in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct TxnError {
    pub kind: TxnErrorKind,
    /// True when the error made the producer unusable for transactions.
    pub fatal: bool,
    /// True when the transaction must be aborted (the producer lives on).
    pub abortable: bool,
}

impl TxnError {
    fn illegal(state: TxnState, reason: &'static str) -> TxnError {
        TxnError {
            kind: TxnErrorKind::IllegalState { state, reason },
            fatal: state == TxnState::FatalError,
            abortable: false,
        }
    }
}

/// A request for the transaction coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorRequest {
    /// `producer` is the current id and epoch when bumping the epoch (KIP-360), else none.
    InitProducerId {
        transactional_id: Option<String>,
        transaction_timeout_ms: i32,
        /// KIP-939's `Enable2Pc` / `KeepPreparedTxn` (InitProducerId v6).
        two_phase_commit: TwoPhaseCommit,
        producer: Option<ProducerIdEpoch>,
    },
    AddPartitionsToTxn {
        transactional_id: String,
        producer: ProducerIdEpoch,
        partitions: Vec<TopicPartition>,
    },
    AddOffsetsToTxn {
        transactional_id: String,
        producer: ProducerIdEpoch,
        group_id: String,
    },
    EndTxn {
        transactional_id: String,
        producer: ProducerIdEpoch,
        commit: bool,
    },
}

/// The coordinator's answer to the request last handed out by `poll_request`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorResponse {
    InitProducerId(Result<ProducerIdEpoch, ErrorCode>),
    /// An InitProducerId that kept a prepared transaction (KIP-939): the producer's new id
    /// and epoch, and the kept transaction's (`OngoingTxnProducerId/Epoch`).
    InitProducerIdKept {
        producer: ProducerIdEpoch,
        ongoing: ProducerIdEpoch,
    },
    /// The code of each partition asked for (a top-level error repeated for each).
    AddPartitionsToTxn(Vec<(TopicPartition, ErrorCode)>),
    AddOffsetsToTxn(ErrorCode),
    /// Transaction version 2 (EndTxn v5+) answers the producer id and epoch to use next.
    EndTxn(Result<Option<ProducerIdEpoch>, ErrorCode>),
}

/// What an answer asks of the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Carry on (poll for the next request, or the operation is complete).
    Continue,
    /// Send the same request again after a backoff (it is handed out again).
    Retry {
        find_coordinator: bool,
        refresh_metadata: bool,
    },
    /// The operation failed; the transaction is now in the error's state.
    Failed(TxnError),
}

/// Work of a transaction sent somewhere other than the transaction coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A produce batch to a partition the transaction has (see
    /// [`TransactionManager::can_send_to`]).
    Produce(TopicPartition),
    /// TxnOffsetCommit of a consumer group's offsets (version 1: after AddOffsetsToTxn, which
    /// starting the operation queues).
    OffsetCommit { group_id: String },
    /// One TxnShareAcknowledge request (KIP-1289): one per acknowledged share partition, as
    /// the draft client sends them.
    ShareAcknowledgements,
}

impl Operation {
    fn api(&self) -> TxnApi {
        match self {
            Operation::Produce(_) => TxnApi::Produce,
            Operation::OffsetCommit { .. } => TxnApi::TxnOffsetCommit,
            Operation::ShareAcknowledgements => TxnApi::TxnShareAcknowledge,
        }
    }
}

/// Handle of an admitted operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperationId(u64);

/// How a commit or abort proceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The transaction is already complete (nothing was sent in it): the state is `Ready`.
    Done,
    /// EndTxn will be handed out by `poll_request` once nothing is in flight.
    Pending,
}

/// Static settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// None: an idempotent producer without transactions.
    pub transactional_id: Option<String>,
    pub transaction_timeout_ms: i32,
    /// `transaction.two.phase.commit.enable` (KIP-939).
    pub two_phase_commit: bool,
}

/// The sans-IO transaction manager (see the module docs).
#[derive(Debug, Clone)]
pub struct TransactionManager {
    config: TxnConfig,
    state: TxnState,
    producer: Option<ProducerIdEpoch>,
    /// Transaction version 2 finalized by the cluster (changes only between transactions).
    v2: bool,
    /// The coordinator knows of this transaction (EndTxn must be sent).
    started: bool,
    /// Partitions the transaction has (version 1: added; version 2: produced to).
    partitions: BTreeSet<TopicPartition>,
    /// Version 1: partitions to add before their batches may be sent.
    to_add: BTreeSet<TopicPartition>,
    /// Version 1: AddPartitionsToTxn sent for these, answer pending.
    adding: Vec<TopicPartition>,
    /// Version 1: groups whose AddOffsetsToTxn must be sent, and those it succeeded for.
    offsets_to_add: Vec<(OperationId, String)>,
    offsets_added: BTreeSet<OperationId>,
    in_flight: BTreeMap<OperationId, Operation>,
    next_operation: u64,
    /// The request handed out and not yet answered.
    outstanding: Option<CoordinatorRequest>,
    /// The EndTxn of the current completion is due.
    end_due: Option<bool>,
    /// An InitProducerId with the current id and epoch is due before `Ready` (version 1 after
    /// an abortable error that lost the producer's state: KIP-360's epoch bump).
    bump_due: bool,
    last_error: Option<TxnError>,
    sequences: BTreeMap<TopicPartition, i32>,
    /// Two-phase commit: the pending InitProducerId keeps a prepared transaction.
    keep_prepared: bool,
    /// Two-phase commit: the token of the transaction in `PreparedTransaction`.
    prepared: Option<PreparedTxnState>,
}

impl TransactionManager {
    pub fn new(config: TxnConfig, transaction_v2: bool) -> TransactionManager {
        TransactionManager {
            config,
            state: TxnState::Uninitialized,
            producer: None,
            v2: transaction_v2,
            started: false,
            partitions: BTreeSet::new(),
            to_add: BTreeSet::new(),
            adding: Vec::new(),
            offsets_to_add: Vec::new(),
            offsets_added: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            next_operation: 0,
            outstanding: None,
            end_due: None,
            bump_due: false,
            last_error: None,
            sequences: BTreeMap::new(),
            keep_prepared: false,
            prepared: None,
        }
    }

    pub fn state(&self) -> TxnState {
        self.state
    }

    pub fn producer(&self) -> Option<ProducerIdEpoch> {
        self.producer
    }

    pub fn is_transactional(&self) -> bool {
        self.config.transactional_id.is_some()
    }

    pub fn transaction_v2(&self) -> bool {
        self.v2
    }

    /// The error that put the manager in `AbortableError` or `FatalError`.
    pub fn last_error(&self) -> Option<&TxnError> {
        self.last_error.as_ref()
    }

    /// Operations admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The cluster's finalized `transaction.version` changed. Taken into account only
    /// between transactions (a transaction ends with the version it began with — a prepared
    /// one too, whose token stays unique only through version 2's epoch bump at its end).
    pub fn set_transaction_v2(&mut self, v2: bool) {
        if !matches!(
            self.state,
            TxnState::InTransaction
                | TxnState::PreparedTransaction
                | TxnState::Committing
                | TxnState::Aborting
                | TxnState::AbortableError
        ) {
            self.v2 = v2;
        }
    }

    // ---- the application's operations ----

    /// Gets a producer id (fencing older instances of the transactional id).
    ///
    /// # Errors
    /// IllegalState unless `Uninitialized`.
    pub fn init_transactions(&mut self) -> Result<(), TxnError> {
        self.refuse_if_fatal()?;
        if self.state != TxnState::Uninitialized {
            return Err(TxnError::illegal(self.state, "already initialized"));
        }
        self.state = TxnState::Initializing;
        Ok(())
    }

    /// As [`init_transactions`](Self::init_transactions), but a prepared (two-phase-commit)
    /// transaction the previous instance left open is kept for this one to complete: the
    /// manager then ends in `PreparedTransaction` rather than `Ready`.
    ///
    /// # Errors
    /// IllegalState unless `Uninitialized` and configured for two-phase commit.
    pub fn init_transactions_keep_prepared(&mut self) -> Result<(), TxnError> {
        if !self.config.two_phase_commit {
            return Err(TxnError::illegal(
                self.state,
                "keeping a prepared transaction needs transaction.two.phase.commit.enable",
            ));
        }
        self.init_transactions()?;
        self.keep_prepared = true;
        Ok(())
    }

    /// The token of the prepared transaction (`PreparedTransaction`), if one is.
    pub fn prepared(&self) -> Option<PreparedTxnState> {
        self.prepared
    }

    /// Prepares the open transaction (KIP-939's first phase): nothing may be left to register
    /// or answered (the driver flushes first), and afterwards nothing joins it. The token
    /// names it for [`complete`](Self::complete), here or in a later instance.
    ///
    /// Tokens are unique because every transaction ends with an epoch bump (transaction
    /// version 2, required here): even an empty prepared transaction is ended with an
    /// EndTxn, so the next one cannot get the same token.
    ///
    /// # Errors
    /// IllegalState unless configured for two-phase commit, in a transaction with nothing
    /// in flight or waiting to join; after an abortable error, that error. Unsupported
    /// without transaction version 2.
    pub fn prepare(&mut self) -> Result<PreparedTxnState, TxnError> {
        self.refuse_if_fatal()?;
        if !self.config.two_phase_commit {
            return Err(TxnError::illegal(
                self.state,
                "prepare needs transaction.two.phase.commit.enable",
            ));
        }
        if !self.v2 {
            return Err(TxnError {
                kind: TxnErrorKind::Unsupported(
                    "prepared transactions need transaction.version 2 (an epoch per transaction)",
                ),
                fatal: false,
                abortable: false,
            });
        }
        self.require_open_transaction("no transaction to prepare")?;
        let pending = !self.in_flight.is_empty()
            || !self.to_add.is_empty()
            || !self.adding.is_empty()
            || !self.offsets_to_add.is_empty()
            || self.outstanding.is_some();
        if pending {
            return Err(TxnError::illegal(
                self.state,
                "prepare needs every operation answered (flush first)",
            ));
        }
        let Some(p) = self.producer else {
            return Err(TxnError::illegal(self.state, "no producer id"));
        };
        let token = PreparedTxnState::new(p.id, p.epoch);
        self.prepared = Some(token);
        self.state = TxnState::PreparedTransaction;
        Ok(token)
    }

    /// Ends the prepared transaction by `token` (KIP-939's second phase): commits when the
    /// token names it, aborts it otherwise; with nothing prepared (`Ready`: an earlier
    /// completion ended it) it does nothing, so completing twice is harmless.
    ///
    /// # Errors
    /// IllegalState in any other state.
    pub fn complete(
        &mut self,
        token: PreparedTxnState,
    ) -> Result<(PreparedOutcome, Completion), TxnError> {
        self.refuse_if_fatal()?;
        match self.state {
            TxnState::Ready if self.is_transactional() => {
                Ok((PreparedOutcome::NothingPrepared, Completion::Done))
            }
            TxnState::PreparedTransaction => {
                let commit = self.prepared == Some(token);
                self.state = if commit {
                    TxnState::Committing
                } else {
                    TxnState::Aborting
                };
                let outcome = if commit {
                    PreparedOutcome::Commit
                } else {
                    PreparedOutcome::Abort
                };
                Ok((outcome, self.end_prepared(commit)))
            }
            s => Err(TxnError::illegal(s, "no prepared transaction to complete")),
        }
    }

    /// An idempotent producer (no transactional id) whose batch failed for good: the
    /// partition's next sequence would leave a gap the broker refuses
    /// (OUT_OF_ORDER_SEQUENCE_NUMBER for ever), so the producer bumps its epoch (KIP-360:
    /// InitProducerId with the current id and epoch) and sequences restart at 0.
    ///
    /// # Errors
    /// IllegalState unless an idempotent producer in `Ready` with a producer id; nothing
    /// changes then.
    pub fn bump_idempotent_epoch(&mut self) -> Result<(), TxnError> {
        self.refuse_if_fatal()?;
        if self.is_transactional() || self.state != TxnState::Ready || self.producer.is_none() {
            return Err(TxnError::illegal(
                self.state,
                "only a ready idempotent producer bumps its own epoch",
            ));
        }
        self.bump_due = true;
        self.state = TxnState::Initializing;
        Ok(())
    }

    /// # Errors
    /// IllegalState unless transactional and `Ready`.
    pub fn begin(&mut self) -> Result<(), TxnError> {
        self.refuse_if_fatal()?;
        if !self.is_transactional() {
            return Err(TxnError::illegal(
                self.state,
                "not a transactional producer",
            ));
        }
        if self.state == TxnState::PreparedTransaction {
            return Err(TxnError::illegal(
                self.state,
                "complete the prepared transaction first",
            ));
        }
        if self.state != TxnState::Ready {
            return Err(TxnError::illegal(
                self.state,
                "begin needs a ready producer",
            ));
        }
        self.state = TxnState::InTransaction;
        Ok(())
    }

    /// Admits work into the open transaction (or, without a transactional id, a produce batch
    /// of the idempotent producer once it has an id).
    ///
    /// # Errors
    /// IllegalState outside a transaction (after an abortable error: that error);
    /// Unsupported for share acknowledgements without transaction version 2, which changes
    /// nothing.
    pub fn start_operation(&mut self, op: Operation) -> Result<OperationId, TxnError> {
        self.check_start(&op)?;
        if !self.is_transactional() {
            return Ok(self.admit(op));
        }
        let id = self.admit(op.clone());
        match op {
            Operation::Produce(tp) => {
                if self.v2 {
                    self.partitions.insert(tp);
                    self.started = true;
                } else if !self.partitions.contains(&tp) && !self.adding.contains(&tp) {
                    self.to_add.insert(tp);
                }
            }
            Operation::OffsetCommit { group_id } => {
                if self.v2 {
                    self.started = true;
                } else {
                    self.offsets_to_add.push((id, group_id));
                }
            }
            Operation::ShareAcknowledgements => self.started = true,
        }
        Ok(id)
    }

    /// Whether [`TransactionManager::start_operation`] would admit `op` now; changes nothing
    /// (a caller that must check more before anything is sent asks first).
    ///
    /// # Errors
    /// As [`TransactionManager::start_operation`].
    pub fn check_start(&self, op: &Operation) -> Result<(), TxnError> {
        self.refuse_if_fatal()?;
        if !self.is_transactional() {
            if !matches!(op, Operation::Produce(_)) {
                return Err(TxnError::illegal(
                    self.state,
                    "not a transactional producer",
                ));
            }
            if self.state != TxnState::Ready {
                return Err(TxnError::illegal(self.state, "no producer id yet"));
            }
            return Ok(());
        }
        self.require_open_transaction("no transaction in progress")?;
        if *op == Operation::ShareAcknowledgements && !self.v2 {
            return Err(TxnError {
                kind: TxnErrorKind::Unsupported(
                    "transactional share acknowledgements need transaction.version 2",
                ),
                fatal: false,
                abortable: false,
            });
        }
        Ok(())
    }

    fn admit(&mut self, op: Operation) -> OperationId {
        let id = OperationId(self.next_operation);
        self.next_operation += 1;
        self.in_flight.insert(id, op);
        id
    }

    /// Whether operation `id` is admitted and not finished (an abort drops the operations
    /// that cannot have been sent).
    pub fn is_in_flight(&self, id: OperationId) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// Whether the batches of admitted operation `id` may be sent now (version 1: its
    /// partition is added, or its offsets' AddOffsetsToTxn succeeded).
    pub fn operation_ready(&self, id: OperationId) -> bool {
        match self.in_flight.get(&id) {
            Some(Operation::Produce(tp)) => !self.is_transactional() || self.can_send_to(tp),
            Some(Operation::OffsetCommit { .. }) => self.v2 || self.offsets_added.contains(&id),
            Some(Operation::ShareAcknowledgements) => true,
            None => false,
        }
    }

    /// Whether a batch for `tp` may be sent (it is in the transaction).
    pub fn can_send_to(&self, tp: &TopicPartition) -> bool {
        self.state != TxnState::FatalError && self.partitions.contains(tp)
    }

    /// The answer of an admitted operation: `ErrorCode::NONE` or its error (for
    /// TxnShareAcknowledge, the top-level code, else the first non-zero partition code).
    pub fn finish_operation(&mut self, id: OperationId, code: ErrorCode) -> Next {
        let Some(op) = self.in_flight.get(&id) else {
            return Next::Continue;
        };
        if code.is_ok() {
            self.in_flight.remove(&id);
            self.offsets_added.remove(&id);
            return Next::Continue;
        }
        let api = op.api();
        let class = classify(api, code);
        if let Some(retry) = retry(class) {
            return retry;
        }
        self.in_flight.remove(&id);
        self.offsets_added.remove(&id);
        self.fail(
            TxnErrorKind::Broker {
                api,
                code,
                handling: class,
            },
            class,
        )
    }

    /// An admitted operation that ended for good without success even though its last
    /// error was retriable (a produce batch past `delivery.timeout.ms`, an offset commit out
    /// of time): the transaction must abort, unless the code is fatal.
    pub fn fail_operation(&mut self, id: OperationId, code: ErrorCode) -> Next {
        let Some(op) = self.in_flight.remove(&id) else {
            return Next::Continue;
        };
        self.offsets_added.remove(&id);
        let api = op.api();
        let handling = match classify(api, code) {
            Handling::Fatal => Handling::Fatal,
            _ => Handling::Abort,
        };
        self.fail(
            TxnErrorKind::Broker {
                api,
                code,
                handling,
            },
            handling,
        )
    }

    /// Commits the open transaction.
    ///
    /// # Errors
    /// IllegalState outside a transaction; after an abortable error, that error (the
    /// transaction can only be aborted).
    pub fn begin_commit(&mut self) -> Result<Completion, TxnError> {
        self.refuse_if_fatal()?;
        if self.state == TxnState::PreparedTransaction {
            self.state = TxnState::Committing;
            return Ok(self.end_prepared(true));
        }
        self.require_open_transaction("no transaction to commit")?;
        self.state = TxnState::Committing;
        Ok(self.complete_with(true))
    }

    /// Aborts the open transaction (also the way out of `AbortableError`).
    ///
    /// # Errors
    /// IllegalState outside a transaction.
    pub fn begin_abort(&mut self) -> Result<Completion, TxnError> {
        self.refuse_if_fatal()?;
        if !self.state.is_open() {
            return Err(TxnError::illegal(self.state, "no transaction to abort"));
        }
        if self.state == TxnState::PreparedTransaction {
            // Nothing is in flight or waiting to join a prepared transaction.
            self.state = TxnState::Aborting;
            return Ok(self.end_prepared(false));
        }
        self.state = TxnState::Aborting;
        // Nothing more joins an aborted transaction, and what was waiting to join cannot
        // have been sent: drop it, so that EndTxn does not wait for it.
        self.to_add.clear();
        self.offsets_to_add.clear();
        let (partitions, adding, added, v2) =
            (&self.partitions, &self.adding, &self.offsets_added, self.v2);
        self.in_flight.retain(|id, op| match op {
            Operation::Produce(tp) => v2 || partitions.contains(tp) || adding.contains(tp),
            Operation::OffsetCommit { .. } => v2 || added.contains(id),
            Operation::ShareAcknowledgements => true,
        });
        Ok(self.complete_with(false))
    }

    /// Ends a prepared transaction, however the application asked. Its token was handed out,
    /// so it must end with an epoch bump even when nothing joined it (then unknown to the
    /// coordinator): an EndTxn is sent anyway, an abort, which bumps the epoch under
    /// transaction version 2 and keeps tokens unique.
    fn end_prepared(&mut self, commit: bool) -> Completion {
        let empty = !self.started;
        self.started = true;
        self.complete_with(commit && !empty)
    }

    fn complete_with(&mut self, commit: bool) -> Completion {
        let known = self.started || !self.partitions.is_empty() || !self.adding.is_empty();
        let joining = !self.to_add.is_empty() || !self.offsets_to_add.is_empty();
        if !known && !joining && self.in_flight.is_empty() {
            self.finish_transaction();
            return Completion::Done;
        }
        self.end_due = Some(commit);
        Completion::Pending
    }

    // ---- the driver's side ----

    /// The next request for the transaction coordinator, if one is due. At most one is out
    /// at a time: the same request is handed out until it is answered.
    pub fn poll_request(&mut self) -> Option<CoordinatorRequest> {
        if let Some(r) = &self.outstanding {
            return Some(r.clone());
        }
        let request = self.due_request()?;
        self.outstanding = Some(request.clone());
        Some(request)
    }

    fn due_request(&mut self) -> Option<CoordinatorRequest> {
        let tid = self.config.transactional_id.clone();
        match self.state {
            TxnState::FatalError => None,
            TxnState::Initializing => Some(self.init_request()),
            _ => {
                let tid = tid?;
                let producer = self.producer?;
                let joining = matches!(self.state, TxnState::InTransaction | TxnState::Committing);
                if joining && !self.to_add.is_empty() {
                    self.adding = std::mem::take(&mut self.to_add).into_iter().collect();
                    return Some(CoordinatorRequest::AddPartitionsToTxn {
                        transactional_id: tid,
                        producer,
                        partitions: self.adding.clone(),
                    });
                }
                if let Some((_, group_id)) = self.offsets_to_add.first().filter(|_| joining) {
                    return Some(CoordinatorRequest::AddOffsetsToTxn {
                        transactional_id: tid,
                        producer,
                        group_id: group_id.clone(),
                    });
                }
                let commit = self.end_due?;
                // No batch of this transaction may land after its marker.
                if !self.in_flight.is_empty() {
                    return None;
                }
                Some(CoordinatorRequest::EndTxn {
                    transactional_id: tid,
                    producer,
                    commit,
                })
            }
        }
    }

    fn init_request(&self) -> CoordinatorRequest {
        let two_phase_commit = match (self.config.two_phase_commit, self.keep_prepared) {
            (false, _) => TwoPhaseCommit::Disabled,
            (true, false) => TwoPhaseCommit::Enabled,
            (true, true) => TwoPhaseCommit::KeepPrepared,
        };
        CoordinatorRequest::InitProducerId {
            transactional_id: self.config.transactional_id.clone(),
            transaction_timeout_ms: self.config.transaction_timeout_ms,
            two_phase_commit,
            producer: if self.bump_due { self.producer } else { None },
        }
    }

    /// The coordinator's answer to the outstanding request.
    pub fn on_response(&mut self, response: CoordinatorResponse) -> Next {
        let Some(request) = self.outstanding.take() else {
            return Next::Continue;
        };
        match (request, response) {
            (CoordinatorRequest::InitProducerId { .. }, CoordinatorResponse::InitProducerId(r)) => {
                self.on_init_producer_id(r)
            }
            (
                CoordinatorRequest::InitProducerId {
                    two_phase_commit: TwoPhaseCommit::KeepPrepared,
                    ..
                },
                CoordinatorResponse::InitProducerIdKept { producer, ongoing },
            ) => self.on_prepared_kept(producer, ongoing),
            (
                CoordinatorRequest::AddPartitionsToTxn { .. },
                CoordinatorResponse::AddPartitionsToTxn(r),
            ) => self.on_add_partitions(r),
            (
                CoordinatorRequest::AddOffsetsToTxn { .. },
                CoordinatorResponse::AddOffsetsToTxn(code),
            ) => self.on_add_offsets(code),
            (CoordinatorRequest::EndTxn { commit, .. }, CoordinatorResponse::EndTxn(r)) => {
                self.on_end_txn(commit, r)
            }
            (request, _) => {
                self.outstanding = Some(request);
                self.fatal(TxnErrorKind::InvalidResponse(
                    "an answer to another request",
                ))
            }
        }
    }

    fn retry_or_fail(&mut self, request: CoordinatorRequest, api: TxnApi, code: ErrorCode) -> Next {
        let class = classify(api, code);
        match retry(class) {
            Some(retry) => {
                self.outstanding = Some(request);
                retry
            }
            None => self.fail(
                TxnErrorKind::Broker {
                    api,
                    code,
                    handling: class,
                },
                class,
            ),
        }
    }

    fn on_init_producer_id(&mut self, r: Result<ProducerIdEpoch, ErrorCode>) -> Next {
        match r {
            Ok(p) if p.id >= 0 && p.epoch >= 0 => {
                self.set_producer(p);
                self.bump_due = false;
                self.keep_prepared = false;
                self.prepared = None;
                self.state = TxnState::Ready;
                Next::Continue
            }
            Ok(_) => self.fatal(TxnErrorKind::InvalidResponse(
                "InitProducerId answered a negative producer id or epoch",
            )),
            Err(code) => {
                let request = self.init_request();
                let class = classify(TxnApi::InitProducerId, code);
                if class != Handling::Abort {
                    return self.retry_or_fail(request, TxnApi::InitProducerId, code);
                }
                let kind = TxnErrorKind::Broker {
                    api: TxnApi::InitProducerId,
                    code,
                    handling: class,
                };
                if !self.bump_due {
                    // Nothing to abort: an InitProducerId that cannot succeed is fatal.
                    return self.fatal(kind);
                }
                // The epoch bump that ends an abort: abort again to retry it.
                let error = TxnError {
                    kind,
                    fatal: false,
                    abortable: true,
                };
                self.state = TxnState::AbortableError;
                self.last_error = Some(error.clone());
                Next::Failed(error)
            }
        }
    }

    /// KIP-939: the coordinator kept the prepared transaction `ongoing` for this producer,
    /// now `producer` (same id, a later epoch, which fenced the previous instance).
    fn on_prepared_kept(&mut self, producer: ProducerIdEpoch, ongoing: ProducerIdEpoch) -> Next {
        let sane = producer.id >= 0
            && ongoing.id == producer.id
            && ongoing.epoch >= 0
            && producer.epoch > ongoing.epoch;
        if !sane {
            return self.fatal(TxnErrorKind::InvalidResponse(
                "InitProducerId kept a transaction that is not the producer's",
            ));
        }
        self.set_producer(producer);
        self.keep_prepared = false;
        self.prepared = Some(PreparedTxnState::new(ongoing.id, ongoing.epoch));
        // The coordinator knows the transaction: EndTxn must be sent to end it.
        self.started = true;
        self.state = TxnState::PreparedTransaction;
        Next::Continue
    }

    fn on_add_partitions(&mut self, results: Vec<(TopicPartition, ErrorCode)>) -> Next {
        let asked = std::mem::take(&mut self.adding);
        let mut answered: BTreeMap<TopicPartition, ErrorCode> = BTreeMap::new();
        for (tp, code) in results {
            if !asked.contains(&tp) {
                self.adding = asked;
                return self.fatal(TxnErrorKind::InvalidResponse(
                    "AddPartitionsToTxn answered a partition not asked for",
                ));
            }
            answered.insert(tp, code);
        }
        if answered.len() != asked.len() {
            self.adding = asked;
            return self.fatal(TxnErrorKind::InvalidResponse(
                "AddPartitionsToTxn left partitions unanswered",
            ));
        }
        // The worst code decides: fatal, then abortable, then retriable; partitions that
        // succeeded are in the transaction either way.
        let mut worst: Option<(ErrorCode, Handling)> = None;
        for (tp, code) in &answered {
            if code.is_ok() {
                self.partitions.insert(tp.clone());
                continue;
            }
            let class = classify(TxnApi::AddPartitionsToTxn, *code);
            let rank = |c: Handling| match c {
                Handling::Fatal => 3,
                Handling::Abort => 2,
                Handling::Retry { .. } => 1,
            };
            if worst.is_none_or(|(_, w)| rank(class) > rank(w)) {
                worst = Some((*code, class));
            }
        }
        let Some((code, class)) = worst else {
            self.started = true;
            return Next::Continue;
        };
        if !self.partitions.is_empty() {
            self.started = true;
        }
        if self.state == TxnState::Aborting {
            // The abort goes on whatever the partitions that failed to join.
            return Next::Continue;
        }
        match retry(class) {
            Some(retry) => {
                self.to_add.extend(
                    answered
                        .into_iter()
                        .filter(|(_, c)| !c.is_ok())
                        .map(|(tp, _)| tp),
                );
                retry
            }
            None => self.fail(
                TxnErrorKind::Broker {
                    api: TxnApi::AddPartitionsToTxn,
                    code,
                    handling: class,
                },
                class,
            ),
        }
    }

    fn on_add_offsets(&mut self, code: ErrorCode) -> Next {
        if self.offsets_to_add.is_empty() {
            // The transaction was aborted meanwhile.
            return Next::Continue;
        }
        if code.is_ok() {
            let (id, _) = self.offsets_to_add.remove(0);
            self.started = true;
            if self.in_flight.contains_key(&id) {
                self.offsets_added.insert(id);
            }
            return Next::Continue;
        }
        let class = classify(TxnApi::AddOffsetsToTxn, code);
        // Still first in line: handed out again (unless the transaction aborts first).
        if let Some(retry) = retry(class) {
            return retry;
        }
        // Its TxnOffsetCommit will never be sent.
        let (id, _) = self.offsets_to_add.remove(0);
        self.in_flight.remove(&id);
        self.fail(
            TxnErrorKind::Broker {
                api: TxnApi::AddOffsetsToTxn,
                code,
                handling: class,
            },
            class,
        )
    }

    fn on_end_txn(&mut self, commit: bool, r: Result<Option<ProducerIdEpoch>, ErrorCode>) -> Next {
        let current = self.producer;
        match r {
            Ok(next) => {
                if self.v2 {
                    let (Some(now), Some(next)) = (current, next) else {
                        return self.fatal(TxnErrorKind::InvalidResponse(
                            "EndTxn (transaction version 2) answered no producer epoch",
                        ));
                    };
                    // The bumped epoch, or a new producer id when the epoch ran out.
                    let follows = next.epoch >= 0
                        && ((next.id == now.id && next.epoch == now.epoch.wrapping_add(1))
                            || (next.id != now.id && next.id >= 0));
                    if !follows {
                        return self.fatal(TxnErrorKind::InvalidResponse(
                            "EndTxn answered a producer epoch that does not follow ours",
                        ));
                    }
                    self.set_producer(next);
                }
                self.finish_transaction();
                Next::Continue
            }
            Err(code) => {
                let request = CoordinatorRequest::EndTxn {
                    transactional_id: self.config.transactional_id.clone().unwrap_or_default(),
                    producer: current.unwrap_or(ProducerIdEpoch { id: -1, epoch: -1 }),
                    commit,
                };
                let class = classify(TxnApi::EndTxn, code);
                if class == Handling::Abort && !self.v2 {
                    // KIP-360: the coordinator lost the producer's state; the abort that
                    // follows bumps the epoch with InitProducerId.
                    self.bump_due = true;
                }
                if class == Handling::Abort && !commit {
                    // An abort that cannot be written: the transaction stays to be aborted.
                    self.end_due = None;
                    self.state = TxnState::AbortableError;
                    let error = TxnError {
                        kind: TxnErrorKind::Broker {
                            api: TxnApi::EndTxn,
                            code,
                            handling: class,
                        },
                        fatal: false,
                        abortable: true,
                    };
                    self.last_error = Some(error.clone());
                    return Next::Failed(error);
                }
                self.retry_or_fail(request, TxnApi::EndTxn, code)
            }
        }
    }

    fn finish_transaction(&mut self) {
        self.end_due = None;
        self.prepared = None;
        self.started = false;
        self.partitions.clear();
        self.to_add.clear();
        self.adding.clear();
        self.offsets_to_add.clear();
        self.offsets_added.clear();
        self.in_flight.clear();
        self.last_error = None;
        self.state = if self.bump_due {
            TxnState::Initializing
        } else {
            TxnState::Ready
        };
    }

    fn set_producer(&mut self, p: ProducerIdEpoch) {
        if self.producer != Some(p) {
            self.sequences.clear();
        }
        self.producer = Some(p);
    }

    // ---- sequence numbers ----

    /// The base sequence of the next batch of `records` records for `tp`, advancing the
    /// partition's sequence (wrapping past `i32::MAX` to 0, as Kafka's brokers expect).
    pub fn next_sequence(&mut self, tp: &TopicPartition, records: i32) -> i32 {
        let seq = self.sequences.entry(tp.clone()).or_insert(0);
        let base = *seq;
        let records = records.max(0);
        *seq = if base > i32::MAX - records {
            records - (i32::MAX - base) - 1
        } else {
            base + records
        };
        base
    }

    // ---- errors ----

    /// Ok in `InTransaction`; after an abortable error, that error (the transaction can only
    /// be aborted); otherwise an illegal-state error saying `reason`.
    fn require_open_transaction(&self, reason: &'static str) -> Result<(), TxnError> {
        match self.state {
            TxnState::InTransaction => Ok(()),
            TxnState::AbortableError => Err(self.last_error.clone().unwrap_or_else(|| {
                TxnError::illegal(self.state, "the transaction must be aborted")
            })),
            s => Err(TxnError::illegal(s, reason)),
        }
    }

    fn refuse_if_fatal(&self) -> Result<(), TxnError> {
        if self.state == TxnState::FatalError {
            return Err(self.last_error.clone().unwrap_or_else(|| {
                TxnError::illegal(TxnState::FatalError, "the producer failed")
            }));
        }
        Ok(())
    }

    fn fail(&mut self, kind: TxnErrorKind, class: Handling) -> Next {
        match class {
            Handling::Fatal => self.fatal(kind),
            _ => {
                let error = TxnError {
                    kind,
                    fatal: false,
                    abortable: true,
                };
                match self.state {
                    // Already aborting: the failure changes nothing.
                    TxnState::Aborting => {}
                    TxnState::InTransaction | TxnState::Committing => {
                        if self.state == TxnState::Committing {
                            self.end_due = None;
                        }
                        self.state = TxnState::AbortableError;
                        self.last_error = Some(error.clone());
                    }
                    // An idempotent producer's failed batch fails only itself.
                    _ => {}
                }
                Next::Failed(error)
            }
        }
    }

    fn fatal(&mut self, kind: TxnErrorKind) -> Next {
        let error = TxnError {
            kind,
            fatal: true,
            abortable: false,
        };
        self.state = TxnState::FatalError;
        self.end_due = None;
        self.last_error = Some(error.clone());
        Next::Failed(error)
    }
}

/// The [`Next::Retry`] of a retriable handling.
fn retry(handling: Handling) -> Option<Next> {
    match handling {
        Handling::Retry {
            find_coordinator,
            refresh_metadata,
        } => Some(Next::Retry {
            find_coordinator,
            refresh_metadata,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
