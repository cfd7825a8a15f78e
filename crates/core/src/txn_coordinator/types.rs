//! Plain request, response and state types of the transaction coordinator.
//!
//! They mirror Kafka's wire messages field for field but carry no wire-version logic except
//! [`downgrade_error`], which the broker applies to the coordinator's modern error codes.

use std::collections::BTreeSet;

pub use crate::group_coordinator::{ErrorCode, ReplyToken};
pub use crate::producer_state::{ProducerEpoch, ProducerId, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};

/// Kafka error codes the transaction coordinator returns (`Errors.java`).
pub mod error_codes {
    use super::ErrorCode;

    pub const NONE: ErrorCode = ErrorCode::NONE;
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode::UNKNOWN_SERVER_ERROR;
    pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode::COORDINATOR_NOT_AVAILABLE;
    pub const INVALID_REQUEST: ErrorCode = ErrorCode::INVALID_REQUEST;
    pub const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode::INVALID_PRODUCER_EPOCH;
    pub const INVALID_TXN_STATE: ErrorCode = ErrorCode::INVALID_TXN_STATE;
    pub const INVALID_PRODUCER_ID_MAPPING: ErrorCode = ErrorCode::INVALID_PRODUCER_ID_MAPPING;
    pub const INVALID_TRANSACTION_TIMEOUT: ErrorCode = ErrorCode::INVALID_TRANSACTION_TIMEOUT;
    pub const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode::CONCURRENT_TRANSACTIONS;
    pub const OPERATION_NOT_ATTEMPTED: ErrorCode = ErrorCode::OPERATION_NOT_ATTEMPTED;
    pub const PRODUCER_FENCED: ErrorCode = ErrorCode::PRODUCER_FENCED;
    pub const TRANSACTIONAL_ID_NOT_FOUND: ErrorCode = ErrorCode::TRANSACTIONAL_ID_NOT_FOUND;
    pub const TRANSACTION_ABORTABLE: ErrorCode = ErrorCode::TRANSACTION_ABORTABLE;
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode =
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
}

use error_codes::*;

/// The highest epoch before a producer id must rotate (Kafka's `isEpochExhausted`:
/// `epoch >= Short.MAX_VALUE - 1`).
pub const EPOCH_EXHAUSTED_AT: i16 = i16::MAX - 1;

/// Kafka's `TransactionMetadata.isEpochExhausted`.
pub fn is_epoch_exhausted(epoch: ProducerEpoch) -> bool {
    epoch.0 >= EPOCH_EXHAUSTED_AT
}

pub use crate::ids::TopicPartition;

/// Kafka's `TransactionState`, with its persisted ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// Never stored: an expiring id is removed with a tombstone.
    Dead,
    /// Never stored: the fence and the abort that follows it happen in one call, and only the
    /// PrepareAbort (with the bumped epoch) is written, as in Kafka.
    PrepareEpochFence,
}

impl TransactionState {
    pub const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// Kafka's id (`TransactionState.id`).
    pub fn id(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TransactionState> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Kafka's name, as DescribeTransactions / ListTransactions return it.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TransactionState> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// States from which a transition into `self` is legal (Kafka's `validPreviousStates`).
    pub fn valid_previous(self) -> &'static [TransactionState] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    pub fn is_prepare(self) -> bool {
        matches!(
            self,
            TransactionState::PrepareCommit | TransactionState::PrepareAbort
        )
    }

    /// States an idle transactional id may expire from.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
        )
    }
}

/// The client's transaction protocol (`transaction.version` as used by the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionVersion {
    /// Classic (KIP-98): AddPartitionsToTxn / AddOffsetsToTxn, EndTxn v0-4.
    Tv0,
    /// Flexible transaction-log records; same coordinator behaviour as TV0.
    Tv1,
    /// KIP-890 part 2: implicit adds, epoch bump on every EndTxn (v5+).
    Tv2,
}

impl TransactionVersion {
    pub fn level(self) -> i8 {
        match self {
            TransactionVersion::Tv0 => 0,
            TransactionVersion::Tv1 => 1,
            TransactionVersion::Tv2 => 2,
        }
    }

    pub fn from_level(level: i8) -> Option<TransactionVersion> {
        match level {
            0 => Some(TransactionVersion::Tv0),
            1 => Some(TransactionVersion::Tv1),
            2 => Some(TransactionVersion::Tv2),
            _ => None,
        }
    }

    /// Kafka's `supportsEpochBump`.
    pub fn supports_epoch_bump(self) -> bool {
        self == TransactionVersion::Tv2
    }

    /// The version an EndTxn request of `version` speaks (Kafka: v5+ is TV2).
    pub fn for_end_txn(version: i16) -> TransactionVersion {
        if version >= 5 {
            TransactionVersion::Tv2
        } else {
            TransactionVersion::Tv0
        }
    }
}

/// COMMIT or ABORT, as the markers carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionResult {
    Commit,
    Abort,
}

impl TransactionResult {
    pub fn from_committed(committed: bool) -> Self {
        if committed {
            TransactionResult::Commit
        } else {
            TransactionResult::Abort
        }
    }

    /// WriteTxnMarkers' `TransactionResult` (true = COMMIT).
    pub fn is_commit(self) -> bool {
        self == TransactionResult::Commit
    }
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// Every input that gets a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnRequest {
    InitProducerId(InitProducerIdRequest),
    AddPartitions(AddPartitionsRequest),
    AddOffsets(AddOffsetsRequest),
    AddPartitionsImplicit(AddPartitionsImplicitRequest),
    EndTxn(EndTxnRequest),
}

impl TxnRequest {
    /// The transactional id the request is about.
    pub fn transactional_id(&self) -> &str {
        match self {
            TxnRequest::InitProducerId(r) => &r.transactional_id,
            TxnRequest::AddPartitions(r) => &r.transactional_id,
            TxnRequest::AddOffsets(r) => &r.transactional_id,
            TxnRequest::AddPartitionsImplicit(r) => &r.transactional_id,
            TxnRequest::EndTxn(r) => &r.transactional_id,
        }
    }
}

/// InitProducerId with a transactional id (non-transactional producers need no coordinator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    pub transactional_id: String,
    pub txn_timeout_ms: i32,
    /// -1, or the producer's current id (v3+, KIP-360).
    pub producer_id: ProducerId,
    /// -1, or the producer's current epoch (v3+).
    pub producer_epoch: ProducerEpoch,
    /// Whether the broker has finalized `transaction.version` >= 2. Only recorded as the
    /// client version of a newly created id; each transaction's version is set by the request
    /// that starts or ends it.
    pub transaction_version_supported: bool,
    /// A never-used producer id from the broker's allocator, consumed only when the id is new
    /// or the epoch is exhausted. `None` is fine when
    /// [`TxnCoordinator::needs_fresh_producer_id`](super::TxnCoordinator::needs_fresh_producer_id)
    /// says false; if one is needed and missing the reply is COORDINATOR_LOAD_IN_PROGRESS
    /// (what Kafka answers while waiting for a producer-id block).
    pub fresh_producer_id: Option<ProducerId>,
    /// KIP-939's `Enable2Pc` / `KeepPreparedTxn` (InitProducerId v6).
    pub two_phase_commit: TwoPhaseCommit,
}

/// What an InitProducerId asks of two-phase commit (KIP-939; its v6 `Enable2Pc` and
/// `KeepPreparedTxn` flags, of which only the three combinations below are valid: the broker
/// answers `KeepPreparedTxn` without `Enable2Pc` with INVALID_REQUEST).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TwoPhaseCommit {
    /// An ordinary transactional producer: its transactions time out, and an InitProducerId
    /// aborts an ongoing one.
    #[default]
    Disabled,
    /// The producer's transactions are decided by an external transaction manager and never
    /// time out; an ongoing (prepared) transaction is aborted by this InitProducerId.
    Enabled,
    /// As `Enabled`, but an ongoing two-phase-commit transaction is kept for the new
    /// incarnation to commit or abort: the reply names it (`OngoingTxnProducerId/Epoch`).
    KeepPrepared,
}

impl TwoPhaseCommit {
    /// From the wire flags; `None` for `KeepPreparedTxn` without `Enable2Pc`.
    pub fn from_flags(enable_2pc: bool, keep_prepared_txn: bool) -> Option<Self> {
        match (enable_2pc, keep_prepared_txn) {
            (false, false) => Some(TwoPhaseCommit::Disabled),
            (true, false) => Some(TwoPhaseCommit::Enabled),
            (true, true) => Some(TwoPhaseCommit::KeepPrepared),
            (false, true) => None,
        }
    }

    pub fn is_enabled(self) -> bool {
        self != TwoPhaseCommit::Disabled
    }
}

/// The stored transaction timeout that marks a two-phase-commit transaction (as Kafka's
/// `isDistributedTwoPhaseCommitTxn`: no new field in `TransactionLogValue`, so the mark
/// survives replay and is readable by Kafka's own tooling).
pub const TWO_PHASE_COMMIT_TIMEOUT_MS: i32 = i32::MAX;

/// AddPartitionsToTxn: a classic client's (v0-3) add, or with `verify_only` the broker's check
/// that a TV0/1 producer's partitions are already in its transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddPartitionsRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub partitions: Vec<TopicPartition>,
    pub verify_only: bool,
}

/// AddOffsetsToTxn, with the `__consumer_offsets` partition the broker computed for the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddOffsetsRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub group_id: String,
    pub offsets_partition: i32,
}

/// TV2 implicit add: used by the broker when a Produce v12+ batch (or a KIP-1289 staged
/// acknowledgement, for `__share_group_state-N`) reaches a partition not yet in the
/// transaction. Same checks as AddPartitionsToTxn; starts the transaction when there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddPartitionsImplicitRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub partitions: Vec<TopicPartition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndTxnRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub committed: bool,
    /// The EndTxn request version: v5+ is TV2 (epoch bump on every commit/abort).
    pub version: i16,
    /// As in [`InitProducerIdRequest::fresh_producer_id`]: needed only by a TV2 end at an
    /// exhausted epoch.
    pub fresh_producer_id: Option<ProducerId>,
}

/// ListTransactions filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListTransactionsRequest {
    /// Kafka state names (case-sensitive, as Kafka); empty = all.
    pub state_filters: Vec<String>,
    /// Empty = all.
    pub producer_id_filters: Vec<i64>,
    /// -1 = none; otherwise only transactions running longer than this (Kafka's filter).
    pub duration_filter_ms: i64,
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnResponse {
    InitProducerId(InitProducerIdResponse),
    AddPartitions(AddPartitionsResponse),
    AddOffsets(AddOffsetsResponse),
    AddPartitionsImplicit(AddPartitionsResponse),
    EndTxn(EndTxnResponse),
}

impl TxnResponse {
    /// The single error code of the response (the first partition's for partition results).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            TxnResponse::InitProducerId(r) => r.error_code,
            TxnResponse::AddPartitions(r) | TxnResponse::AddPartitionsImplicit(r) => r
                .results
                .iter()
                .map(|p| p.error_code)
                .find(|c| !c.is_none())
                .unwrap_or(NONE),
            TxnResponse::AddOffsets(r) => r.error_code,
            TxnResponse::EndTxn(r) => r.error_code,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    pub error_code: ErrorCode,
    /// -1 on error.
    pub producer_id: ProducerId,
    /// -1 on error.
    pub producer_epoch: ProducerEpoch,
    /// KIP-939: the transaction a `KeepPrepared` InitProducerId kept open (its producer id), -1
    /// when none was kept.
    pub ongoing_txn_producer_id: ProducerId,
    /// The epoch that transaction's records were written with, -1 when none was kept.
    pub ongoing_txn_producer_epoch: ProducerEpoch,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionError {
    pub topic: String,
    pub partition: i32,
    pub error_code: ErrorCode,
}

/// One result per distinct requested partition, in (topic, partition) order. A non-verify add
/// gives every partition the same error; the broker uses OPERATION_NOT_ATTEMPTED itself for
/// the partitions it did not pass here when others failed its own checks (authorization,
/// unknown topic), as Kafka's KafkaApis does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddPartitionsResponse {
    pub results: Vec<PartitionError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddOffsetsResponse {
    pub error_code: ErrorCode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndTxnResponse {
    pub error_code: ErrorCode,
    /// The producer id to use next (the new one after a TV2 rotation); -1 on error. Only on
    /// the wire for v5+.
    pub producer_id: ProducerId,
    /// The epoch to use next (bumped for TV2); -1 on error. Only on the wire for v5+.
    pub producer_epoch: ProducerEpoch,
}

/// "Write these COMMIT/ABORT markers, then call
/// [`markers_written`](super::TxnCoordinator::markers_written) with this value."
/// Maps one-to-one onto a WriteTxnMarkers v2 `WritableTxnMarker`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteMarkers {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    /// For TV2 the bumped epoch, so it is >= every epoch the transaction's data used.
    pub producer_epoch: ProducerEpoch,
    pub result: TransactionResult,
    /// Sorted, distinct, never empty.
    pub partitions: Vec<TopicPartition>,
    pub coordinator_epoch: i32,
    pub transaction_version: TransactionVersion,
}

/// One DescribeTransactions result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionDescription {
    pub transactional_id: String,
    /// TRANSACTIONAL_ID_NOT_FOUND for an unknown id (other fields then default).
    pub error_code: ErrorCode,
    pub state: String,
    pub transaction_timeout_ms: i32,
    /// -1 when no transaction is running.
    pub transaction_start_time_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: Vec<TopicPartition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub transaction_state: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListTransactionsResponse {
    /// State filters that name no state.
    pub unknown_state_filters: Vec<String>,
    pub transactions: Vec<ListedTransaction>,
}

/// The four transactional APIs whose old versions know PRODUCER_FENCED under another name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
}

/// Maps the coordinator's modern error code to what a request of `version` expects, as
/// KafkaApis does: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for InitProducerId v<4,
/// AddPartitionsToTxn v<2, AddOffsetsToTxn v<2 and EndTxn v<2.
pub fn downgrade_error(api: TxnApi, version: i16, code: ErrorCode) -> ErrorCode {
    let fenced_since = match api {
        TxnApi::InitProducerId => 4,
        TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
    };
    if code == PRODUCER_FENCED && version < fenced_since {
        INVALID_PRODUCER_EPOCH
    } else {
        code
    }
}

/// A broken invariant of the transaction coordinator, found in production as in tests: a bug
/// in Shoal, never a client's doing. The coordinator that finds one stops (see
/// [`super::TxnCoordinator::violation`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxnViolation {
    /// A transition that is not one of Kafka's `validPreviousStates`.
    #[error("transactional id {transactional_id}: invalid state transition {from:?} -> {to:?}")]
    Transition {
        transactional_id: String,
        from: TransactionState,
        to: TransactionState,
    },
    /// A state that is never written to `__transaction_state` (Dead, PrepareEpochFence).
    #[error("transactional id {transactional_id}: state {state:?} is never stored")]
    Unstorable {
        transactional_id: String,
        state: TransactionState,
    },
    /// A step that needs the transaction in a given state found it elsewhere, or missing.
    #[error("transactional id {transactional_id}: {step} found the transaction in {state:?}")]
    WrongState {
        transactional_id: String,
        step: &'static str,
        /// `None`: no transaction at all.
        state: Option<TransactionState>,
    },
}

impl TxnViolation {
    /// A short, stable name of the broken invariant, for logs.
    pub fn invariant(&self) -> &'static str {
        match self {
            TxnViolation::Transition { .. } => "valid-transition",
            TxnViolation::Unstorable { .. } => "stored-state",
            TxnViolation::WrongState { .. } => "step-state",
        }
    }
}

impl TxnResponse {
    /// The same response failed with `error_code` (every partition of an add; no producer id
    /// or epoch).
    pub(crate) fn fail(&mut self, error_code: ErrorCode) {
        match self {
            TxnResponse::InitProducerId(r) => {
                r.error_code = error_code;
                r.producer_id = ProducerId(NO_PRODUCER_ID);
                r.producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
                r.ongoing_txn_producer_id = ProducerId(NO_PRODUCER_ID);
                r.ongoing_txn_producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
            }
            TxnResponse::AddPartitions(r) | TxnResponse::AddPartitionsImplicit(r) => {
                for p in &mut r.results {
                    p.error_code = error_code;
                }
            }
            TxnResponse::AddOffsets(r) => r.error_code = error_code,
            TxnResponse::EndTxn(r) => {
                r.error_code = error_code;
                r.producer_id = ProducerId(NO_PRODUCER_ID);
                r.producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
            }
        }
    }

    /// The answer to `request` failed with `error_code`, without handling it.
    pub(crate) fn refusal(request: &TxnRequest, error_code: ErrorCode) -> TxnResponse {
        let partitions = |tps: &[TopicPartition]| {
            partition_results(&tps.iter().cloned().collect(), |_| error_code)
        };
        match request {
            TxnRequest::InitProducerId(_) => init_error(error_code),
            TxnRequest::AddPartitions(r) => TxnResponse::AddPartitions(partitions(&r.partitions)),
            TxnRequest::AddPartitionsImplicit(r) => {
                TxnResponse::AddPartitionsImplicit(partitions(&r.partitions))
            }
            TxnRequest::AddOffsets(_) => TxnResponse::AddOffsets(AddOffsetsResponse { error_code }),
            TxnRequest::EndTxn(_) => TxnResponse::EndTxn(EndTxnResponse {
                error_code,
                producer_id: ProducerId(NO_PRODUCER_ID),
                producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
            }),
        }
    }
}

pub(crate) fn init_reply(
    error_code: ErrorCode,
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
) -> TxnResponse {
    TxnResponse::InitProducerId(InitProducerIdResponse {
        error_code,
        producer_id,
        producer_epoch,
        ongoing_txn_producer_id: ProducerId(NO_PRODUCER_ID),
        ongoing_txn_producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
    })
}

pub(crate) fn init_error(error_code: ErrorCode) -> TxnResponse {
    init_reply(
        error_code,
        ProducerId(NO_PRODUCER_ID),
        ProducerEpoch(NO_PRODUCER_EPOCH),
    )
}

pub(crate) fn partition_results(
    partitions: &BTreeSet<TopicPartition>,
    error_code: impl Fn(&TopicPartition) -> ErrorCode,
) -> AddPartitionsResponse {
    AddPartitionsResponse {
        results: partitions
            .iter()
            .map(|tp| PartitionError {
                topic: tp.topic.clone(),
                partition: tp.partition,
                error_code: error_code(tp),
            })
            .collect(),
    }
}
