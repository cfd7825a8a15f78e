//! Transaction coordinator: Kafka's `TransactionCoordinator` + `TransactionMetadata` for every
//! transactional id of this (single) node — InitProducerId, AddPartitionsToTxn (incl. the
//! broker's verify path), AddOffsetsToTxn, TV2 implicit adds, EndTxn, timeout aborts,
//! transactional-id expiration, and the COMMIT/ABORT marker hand-off.
//!
//! Sans-IO: no clock, no I/O, no locks; time comes in as `now_ms`. Each call returns an
//! [`Output`]: the broker appends `records` to `__transaction_state` (fsynced, partition
//! [`partition_for`]), then delivers `replies`, then writes each [`WriteMarkers`] to its
//! partitions and, once every partition has its marker, calls
//! [`TxnCoordinator::markers_written`] with it. As in Kafka, EndTxn is answered when
//! PrepareCommit/PrepareAbort is durable, not when the markers are. Every [`ReplyToken`] is
//! answered exactly once (tokens outstanding at a restart die with the process).
//!
//! Producer ids: the broker owns the allocator (it also serves idempotent producers). Requests
//! that may need a new id carry `fresh_producer_id`, consumed only for a new transactional id
//! or on epoch exhaustion; [`TxnCoordinator::needs_fresh_producer_id`] tells whether to
//! allocate one.
//!
//! Invariants: durable state changes only by applying an emitted record, with the code
//! [`TxnCoordinator::replay`] runs, so live state equals the state rebuilt from the log; every
//! transition is one of Kafka's `validPreviousStates`; a PrepareCommit/PrepareAbort is always
//! followed by the matching Complete, and only after [`TxnCoordinator::markers_written`] (or at
//! once when the transaction has no partitions); collections are bounded by [`TxnConfig`]
//! limits, and hitting one is an error code.
//!
//! Checked in production (every build; issue 28 point 6): every written transition is one of
//! Kafka's `validPreviousStates` and never to a state that is not stored (Dead,
//! PrepareEpochFence); each internal step (fence, send markers, complete, a parked
//! InitProducerId) finds the transaction in the state it needs. A violation
//! ([`TxnViolation`]) is a value, never a panic: the offending record is not written, the call
//! that found it emits no records and no markers and fails every reply it carries with
//! UNKNOWN_SERVER_ERROR, and the coordinator stops ([`TxnCoordinator::violation`]): every
//! later request is answered UNKNOWN_SERVER_ERROR without being handled, and `tick`,
//! `markers_written` and `loaded` do nothing. The broker rebuilds it from
//! `__transaction_state`, which never received the offending call's records, on restart.
//!
//! Must not: read clocks, perform I/O, or panic on request or record bytes.
//!
//! Two-phase commit (KIP-939): an InitProducerId with `Enable2Pc` (allowed only when
//! [`TxnConfig::two_phase_commit_enable`]) stores [`TWO_PHASE_COMMIT_TIMEOUT_MS`] as the
//! timeout, so the id's transactions are never aborted by time and the mark survives replay.
//! "Prepared" is the client's word: on the coordinator a prepared transaction is an Ongoing
//! one. An InitProducerId with `KeepPreparedTxn` keeps it Ongoing, bumps the epoch (fencing
//! the previous incarnation) and names it in the reply by the epoch its records were written
//! with; without the flag it is aborted as any ongoing transaction is. That epoch is stored
//! beside the bumped one ([`TransactionLogValue::ongoing_producer_epoch`], a tagged field of the
//! log record, so it survives a reload) until the transaction ends: every later keep names the
//! transaction by it too, so the application's token (`"producer_id:epoch"`) still matches,
//! and each keep bumps the fencing epoch again.
//!
//! Deviations from Kafka, on purpose:
//! - InitProducerId on an Ongoing transaction fences and aborts it, then *waits*: the reply
//!   (the bumped epoch) goes out when the abort completes, instead of Kafka's
//!   CONCURRENT_TRANSACTIONS-and-retry. A second InitProducerId meanwhile gets
//!   CONCURRENT_TRANSACTIONS, as in Kafka.
//! - A TV2 EndTxn retry (old epoch) is recognised only when the last transition was TV2, and
//!   it can only be answered, never start a transition: an old epoch cannot end an Ongoing
//!   transaction or abort from Empty (PRODUCER_FENCED).
//! - The TV2 timeout fence bumps twice (fence, then the TV2 abort bump, as Kafka 4.0), so the
//!   zombie's epoch is not a "retry" epoch; epochs saturate at `i16::MAX`.
//! - Timeouts fire at their exact deadline, not on Kafka's cleanup intervals.
//! - An add of zero partitions is answered without starting a transaction.
//! - MarkersWritten must match the coordinator epoch, producer id, epoch and result of the
//!   pending transaction; anything else (late, duplicate, pre-restart) is ignored.

pub mod markers;
mod records;
mod shard;
mod types;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

pub use records::{
    DecodeError, PendingMarker, TransactionLogValue, TxnRecord, KEY_VERSION, MARKERS_KEY_VERSION,
    ONGOING_PRODUCER_EPOCH_TAG, TAGGED_VALUE_VERSION, VALUE_VERSION,
};
pub use shard::{
    TxnEffect, TxnInput, TxnReply, TxnShard, FRESH_IDS_RESERVE, HELD_PER_ID_MAX, HOLD_MAX_MS,
    MARKERS_LISTED_MAX,
};
pub use types::*;

use crate::hash::{java_string_hash, kafka_abs};
use error_codes::*;

/// What one call produced. The broker appends `records` to `__transaction_state` (fsynced),
/// then delivers `replies` and starts writing `markers`, in that order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub records: Vec<TxnRecord>,
    pub replies: Vec<(ReplyToken, TxnResponse)>,
    pub markers: Vec<WriteMarkers>,
}

impl Output {
    pub(crate) fn reply(&mut self, token: ReplyToken, response: TxnResponse) {
        self.replies.push((token, response));
    }

    /// Appends another output after this one.
    pub fn extend(&mut self, other: Output) {
        self.records.extend(other.records);
        self.replies.extend(other.replies);
        self.markers.extend(other.markers);
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.replies.is_empty() && self.markers.is_empty()
    }
}

/// The `__consumer_offsets` name the coordinator adds for AddOffsetsToTxn.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The `__transaction_state` partition that owns `transactional_id` (Kafka's
/// `Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions`).
/// `num_partitions` 0 is treated as 1.
pub fn partition_for(transactional_id: &str, num_partitions: u32) -> u32 {
    kafka_abs(java_string_hash(transactional_id)).unsigned_abs() % num_partitions.max(1)
}

/// Limits and timeouts, with Kafka's defaults where Kafka has the setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`.
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`.
    pub transactional_id_expiration_ms: i64,
    /// Transactional ids held; an InitProducerId creating one more gets
    /// COORDINATOR_NOT_AVAILABLE (retriable: backpressure until ids expire).
    pub transactional_ids_max: usize,
    /// Partitions in one transaction; an add beyond it gets TRANSACTION_ABORTABLE.
    pub partitions_per_transaction_max: usize,
    /// `transaction.two.phase.commit.enable` (KIP-939): whether InitProducerId may enable
    /// two-phase commit; when false such a request gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    /// as in Kafka.
    pub two_phase_commit_enable: bool,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            transactional_ids_max: 100_000,
            partitions_per_transaction_max: 10_000,
            two_phase_commit_enable: false,
        }
    }
}

/// What the coordinator answers for an EndTxn on an unknown transactional id (Kafka's
/// `endTransaction`: no metadata ⇒ INVALID_PRODUCER_ID_MAPPING).
pub const END_TXN_UNKNOWN_ID: ErrorCode = INVALID_PRODUCER_ID_MAPPING;
/// The error for an add beyond [`TxnConfig::partitions_per_transaction_max`].
pub const PARTITIONS_LIMIT_ERROR: ErrorCode = TRANSACTION_ABORTABLE;
/// The error for a new id beyond [`TxnConfig::transactional_ids_max`].
pub const IDS_LIMIT_ERROR: ErrorCode = COORDINATOR_NOT_AVAILABLE;

#[derive(Clone, Debug)]
struct Entry {
    value: TransactionLogValue,
    /// An InitProducerId waiting for the abort of the previous incarnation's transaction.
    parked_init: Option<(ReplyToken, InitProducerIdRequest)>,
    /// The deadline this entry has in `timers`.
    timer: Option<i64>,
}

/// The transaction coordinator of this node (all `__transaction_state` partitions).
#[derive(Debug)]
pub struct TxnCoordinator {
    config: TxnConfig,
    coordinator_epoch: i32,
    txns: BTreeMap<String, Entry>,
    /// (deadline, transactional id): timeout aborts and id expiration.
    timers: BTreeSet<(i64, String)>,
    /// The first broken invariant found; the coordinator is stopped once it is set.
    violation: Option<TxnViolation>,
}

type Reply<T> = Result<T, ErrorCode>;

/// What a handled InitProducerId answers.
enum Init {
    /// The epoch was bumped (or the id rotated); nothing is ongoing.
    Bumped(ProducerId, ProducerEpoch),
    /// A two-phase-commit transaction was kept open (KIP-939 `KeepPreparedTxn`).
    KeptPrepared {
        current: (ProducerId, ProducerEpoch),
        ongoing: (ProducerId, ProducerEpoch),
    },
}

impl TxnCoordinator {
    /// `coordinator_epoch` goes into every marker (WriteTxnMarkers' CoordinatorEpoch); the
    /// broker must give each load a value not lower than the previous one (bump it on every
    /// load so markers from before a reload are told apart).
    pub fn new(config: TxnConfig, coordinator_epoch: i32) -> Self {
        TxnCoordinator {
            config,
            coordinator_epoch,
            txns: BTreeMap::new(),
            timers: BTreeSet::new(),
            violation: None,
        }
    }

    /// The broken invariant that stopped this coordinator, if one did (see the module docs).
    pub fn violation(&self) -> Option<&TxnViolation> {
        self.violation.as_ref()
    }

    /// Records a broken invariant (the first one is kept).
    fn flag(&mut self, violation: TxnViolation) {
        if self.violation.is_none() {
            self.violation = Some(violation);
        }
    }

    /// The end of a call that started on a running coordinator: if it broke an invariant,
    /// nothing of it goes out (no records, no markers) and its replies fail.
    fn seal(&self, mut out: Output) -> Output {
        if self.violation.is_some() {
            out.records.clear();
            out.markers.clear();
            for (_, reply) in &mut out.replies {
                reply.fail(UNKNOWN_SERVER_ERROR);
            }
        }
        out
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// Handles one request. The reply is in this output, or (InitProducerId fencing an
    /// ongoing transaction) in the output of the call that completes the abort.
    pub fn handle(&mut self, now_ms: i64, token: ReplyToken, request: TxnRequest) -> Output {
        let mut out = Output::default();
        if self.violation.is_some() {
            out.reply(token, TxnResponse::refusal(&request, UNKNOWN_SERVER_ERROR));
            return out;
        }
        match request {
            TxnRequest::InitProducerId(r) => self.init_producer_id(now_ms, token, r, &mut out),
            TxnRequest::AddPartitions(r) => {
                let partitions: BTreeSet<TopicPartition> = r.partitions.iter().cloned().collect();
                let resp = if r.verify_only {
                    self.verify(&r, &partitions)
                } else {
                    let code = self.add_partitions(
                        now_ms,
                        &r.transactional_id,
                        r.producer_id,
                        r.producer_epoch,
                        &partitions,
                        TransactionVersion::Tv0,
                        &mut out,
                    );
                    partition_results(&partitions, |_| code)
                };
                out.reply(token, TxnResponse::AddPartitions(resp));
            }
            TxnRequest::AddPartitionsImplicit(r) => {
                let partitions: BTreeSet<TopicPartition> = r.partitions.into_iter().collect();
                let code = self.add_partitions(
                    now_ms,
                    &r.transactional_id,
                    r.producer_id,
                    r.producer_epoch,
                    &partitions,
                    TransactionVersion::Tv2,
                    &mut out,
                );
                let resp = partition_results(&partitions, |_| code);
                out.reply(token, TxnResponse::AddPartitionsImplicit(resp));
            }
            TxnRequest::AddOffsets(r) => {
                let partitions = BTreeSet::from([TopicPartition::new(
                    CONSUMER_OFFSETS_TOPIC,
                    r.offsets_partition,
                )]);
                // KafkaApis passes TV0: TV2 clients skip AddOffsetsToTxn.
                let error_code = self.add_partitions(
                    now_ms,
                    &r.transactional_id,
                    r.producer_id,
                    r.producer_epoch,
                    &partitions,
                    TransactionVersion::Tv0,
                    &mut out,
                );
                out.reply(
                    token,
                    TxnResponse::AddOffsets(AddOffsetsResponse { error_code }),
                );
            }
            TxnRequest::EndTxn(r) => {
                let resp = match self.end_txn(now_ms, &r, &mut out) {
                    Ok((producer_id, producer_epoch)) => EndTxnResponse {
                        error_code: NONE,
                        producer_id,
                        producer_epoch,
                    },
                    Err(error_code) => EndTxnResponse {
                        error_code,
                        producer_id: ProducerId(NO_PRODUCER_ID),
                        producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
                    },
                };
                out.reply(token, TxnResponse::EndTxn(resp));
            }
        }
        self.seal(out)
    }

    /// Whether `request` could consume `fresh_producer_id` (conservative: true may still not
    /// consume it). When false the broker may pass `None`.
    pub fn needs_fresh_producer_id(&self, request: &TxnRequest) -> bool {
        match request {
            TxnRequest::InitProducerId(r) => match self.txns.get(&r.transactional_id) {
                None => true,
                // An Ongoing transaction is fenced (+1, TV2 +2) before the bump.
                Some(e) => e.value.producer_epoch.0 >= EPOCH_EXHAUSTED_AT - 2,
            },
            TxnRequest::EndTxn(r) => {
                TransactionVersion::for_end_txn(r.version).supports_epoch_bump()
                    && self
                        .txns
                        .get(&r.transactional_id)
                        .is_some_and(|e| is_epoch_exhausted(e.value.producer_epoch))
            }
            _ => false,
        }
    }

    /// Completes the transaction whose markers are all written. Ignored unless `markers`
    /// matches the pending PrepareCommit/PrepareAbort exactly (late, duplicate or pre-reload
    /// notifications are no-ops).
    pub fn markers_written(&mut self, now_ms: i64, markers: &WriteMarkers) -> Output {
        let mut out = Output::default();
        if markers.coordinator_epoch != self.coordinator_epoch || self.violation.is_some() {
            return out;
        }
        let Some(e) = self.txns.get(&markers.transactional_id) else {
            return out;
        };
        let v = &e.value;
        let expected_state = match markers.result {
            TransactionResult::Commit => TransactionState::PrepareCommit,
            TransactionResult::Abort => TransactionState::PrepareAbort,
        };
        if v.state == expected_state
            && v.producer_id == markers.producer_id
            && v.producer_epoch == markers.producer_epoch
        {
            self.complete(now_ms, &markers.transactional_id, &mut out);
        }
        self.seal(out)
    }

    /// Aborts transactions past their timeout (fencing the producer first) and expires idle
    /// transactional ids.
    pub fn tick(&mut self, now_ms: i64) -> Output {
        let mut out = Output::default();
        if self.violation.is_some() {
            return out;
        }
        let due: Vec<String> = self
            .timers
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .map(|(_, id)| id.clone())
            .collect();
        for id in due {
            let Some(e) = self.txns.get(&id) else {
                continue;
            };
            let v = &e.value;
            if e.parked_init.is_some() {
                continue;
            }
            if v.state == TransactionState::Ongoing
                && !v.is_two_phase_commit()
                && v.txn_start_timestamp_ms
                    .saturating_add(i64::from(v.txn_timeout_ms))
                    < now_ms
            {
                self.fence_and_abort(now_ms, &id, &mut out);
            } else if v.state.is_idle()
                && v.txn_last_update_timestamp_ms
                    .saturating_add(self.config.transactional_id_expiration_ms)
                    <= now_ms
            {
                self.write(
                    TxnRecord::Tombstone {
                        transactional_id: id.clone(),
                    },
                    &mut out,
                );
            }
        }
        self.seal(out)
    }

    /// When [`tick`](Self::tick) next has work to do.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers.first().map(|(d, _)| *d)
    }

    /// Applies one record read back from `__transaction_state` while loading. Call for every
    /// record in log order, then [`loaded`](Self::loaded). Never panics on record contents.
    pub fn replay(&mut self, record: &TxnRecord) {
        match record {
            TxnRecord::Tombstone { transactional_id } => {
                if let Some(e) = self.txns.remove(transactional_id) {
                    if let Some(d) = e.timer {
                        self.timers.remove(&(d, transactional_id.clone()));
                    }
                }
            }
            TxnRecord::Transaction {
                transactional_id,
                value,
            } => {
                let e = self
                    .txns
                    .entry(transactional_id.clone())
                    .or_insert_with(|| Entry {
                        value: value.clone(),
                        parked_init: None,
                        timer: None,
                    });
                e.value = value.clone();
                self.touch(transactional_id);
            }
            // The driver's record (markers that may need writing again), not machine state.
            TxnRecord::Markers { .. } => {}
        }
    }

    /// Finishes loading: transactions found in PrepareCommit/PrepareAbort get their markers
    /// written again (Kafka's loader resumes them).
    pub fn loaded(&mut self, now_ms: i64) -> Output {
        let mut out = Output::default();
        if self.violation.is_some() {
            return out;
        }
        let pending: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, e)| e.value.state.is_prepare())
            .map(|(id, _)| id.clone())
            .collect();
        for id in pending {
            self.send_markers_or_complete(now_ms, &id, &mut out);
        }
        self.seal(out)
    }

    /// The durable state: equal for live state and state rebuilt by replay.
    pub fn durable_state(&self) -> BTreeMap<String, TransactionLogValue> {
        self.txns
            .iter()
            .map(|(id, e)| (id.clone(), e.value.clone()))
            .collect()
    }

    /// One transactional id's current state.
    pub fn transaction(&self, transactional_id: &str) -> Option<&TransactionLogValue> {
        self.txns.get(transactional_id).map(|e| &e.value)
    }

    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// DescribeTransactions.
    pub fn describe(&self, transactional_ids: &[String]) -> Vec<TransactionDescription> {
        transactional_ids
            .iter()
            .map(|id| match self.txns.get(id) {
                None => TransactionDescription {
                    transactional_id: id.clone(),
                    error_code: TRANSACTIONAL_ID_NOT_FOUND,
                    state: String::new(),
                    transaction_timeout_ms: 0,
                    transaction_start_time_ms: -1,
                    producer_id: NO_PRODUCER_ID,
                    producer_epoch: NO_PRODUCER_EPOCH,
                    partitions: Vec::new(),
                },
                Some(e) => TransactionDescription {
                    transactional_id: id.clone(),
                    error_code: NONE,
                    state: e.value.state.name().to_string(),
                    transaction_timeout_ms: e.value.txn_timeout_ms,
                    transaction_start_time_ms: e.value.txn_start_timestamp_ms,
                    producer_id: e.value.producer_id.0,
                    producer_epoch: e.value.producer_epoch.0,
                    partitions: e.value.partitions.iter().cloned().collect(),
                },
            })
            .collect()
    }

    /// ListTransactions (Kafka's filters: states, producer ids, running longer than).
    pub fn list(&self, now_ms: i64, request: &ListTransactionsRequest) -> ListTransactionsResponse {
        let mut unknown_state_filters = Vec::new();
        let mut states = BTreeSet::new();
        for name in &request.state_filters {
            match TransactionState::from_name(name) {
                Some(s) => {
                    states.insert(s);
                }
                None => unknown_state_filters.push(name.clone()),
            }
        }
        let transactions = self
            .txns
            .iter()
            .filter(|(_, e)| {
                let v = &e.value;
                (request.producer_id_filters.is_empty()
                    || request.producer_id_filters.contains(&v.producer_id.0))
                    && (request.state_filters.is_empty() || states.contains(&v.state))
                    && (request.duration_filter_ms < 0
                        || now_ms.saturating_sub(v.txn_start_timestamp_ms)
                            > request.duration_filter_ms)
            })
            .map(|(id, e)| ListedTransaction {
                transactional_id: id.clone(),
                producer_id: e.value.producer_id.0,
                transaction_state: e.value.state.name().to_string(),
            })
            .collect();
        ListTransactionsResponse {
            unknown_state_filters,
            transactions,
        }
    }

    /// Checks internal consistency (tests and debug tooling).
    ///
    /// # Errors
    /// A description of the first violated invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(v) = &self.violation {
            return Err(format!("stopped: {v}"));
        }
        let mut timers = BTreeSet::new();
        for (id, e) in &self.txns {
            let v = &e.value;
            if e.timer != self.deadline_of(e) {
                return Err(format!("{id}: timer {:?} is stale", e.timer));
            }
            if let Some(d) = e.timer {
                timers.insert((d, id.clone()));
            }
            let has_partitions = !v.partitions.is_empty();
            match v.state {
                TransactionState::Ongoing if !has_partitions => {
                    return Err(format!("{id}: Ongoing without partitions"))
                }
                s if s.is_idle() && has_partitions => {
                    return Err(format!("{id}: {s:?} with partitions"))
                }
                TransactionState::Dead | TransactionState::PrepareEpochFence => {
                    return Err(format!("{id}: stored state {:?}", v.state))
                }
                _ => {}
            }
            if v.partitions.len() > self.config.partitions_per_transaction_max {
                return Err(format!("{id}: too many partitions"));
            }
            if e.parked_init.is_some() && v.state != TransactionState::PrepareAbort {
                return Err(format!("{id}: parked InitProducerId in {:?}", v.state));
            }
            if v.next_producer_id.0 != NO_PRODUCER_ID && !v.state.is_prepare() {
                return Err(format!("{id}: next producer id outside Prepare"));
            }
            if v.ongoing_producer_epoch.0 != NO_PRODUCER_EPOCH
                && (v.state != TransactionState::Ongoing
                    || !v.is_two_phase_commit()
                    || v.ongoing_producer_epoch.0 >= v.producer_epoch.0)
            {
                return Err(format!(
                    "{id}: ongoing epoch {:?} beside epoch {:?} in {:?}",
                    v.ongoing_producer_epoch, v.producer_epoch, v.state
                ));
            }
        }
        if timers != self.timers {
            return Err("timer index out of sync".to_string());
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // InitProducerId
    // -----------------------------------------------------------------------------------------

    fn init_producer_id(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: InitProducerIdRequest,
        out: &mut Output,
    ) {
        match self.try_init(now_ms, &req, out) {
            Ok(Some(Init::Bumped(pid, epoch))) => out.reply(token, init_reply(NONE, pid, epoch)),
            Ok(Some(Init::KeptPrepared { current, ongoing })) => {
                let mut reply = init_reply(NONE, current.0, current.1);
                if let TxnResponse::InitProducerId(r) = &mut reply {
                    r.ongoing_txn_producer_id = ongoing.0;
                    r.ongoing_txn_producer_epoch = ongoing.1;
                }
                out.reply(token, reply);
            }
            Ok(None) => {
                let Some(e) = self.txns.get_mut(&req.transactional_id) else {
                    self.flag(TxnViolation::WrongState {
                        transactional_id: req.transactional_id.clone(),
                        step: "a fencing InitProducerId",
                        state: None,
                    });
                    out.reply(token, init_error(UNKNOWN_SERVER_ERROR));
                    return;
                };
                if e.value.state == TransactionState::PrepareAbort {
                    e.parked_init = Some((token, req));
                } else {
                    // The abort had no partitions and completed at once: answer now.
                    self.init_producer_id(now_ms, token, req, out);
                }
            }
            Err(code) => out.reply(token, init_error(code)),
        }
    }

    /// Ok(None): an ongoing transaction is being aborted first; park the request.
    fn try_init(
        &mut self,
        now_ms: i64,
        req: &InitProducerIdRequest,
        out: &mut Output,
    ) -> Reply<Option<Init>> {
        let id = &req.transactional_id;
        if id.is_empty() || (req.producer_id.0 == -1) != (req.producer_epoch.0 == -1) {
            return Err(INVALID_REQUEST);
        }
        let two_phase = req.two_phase_commit.is_enabled();
        if two_phase && !self.config.two_phase_commit_enable {
            // Kafka's answer: an authorization error, so the setting cannot be probed.
            return Err(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
        // The broker checked WRITE and TWO_PHASE_COMMIT on the transactional id before this
        // (its authorization module), when an authorizer is configured.
        let txn_timeout_ms = if two_phase {
            // KIP-939: a two-phase-commit transaction has no timeout; the request's is ignored.
            TWO_PHASE_COMMIT_TIMEOUT_MS
        } else if req.txn_timeout_ms <= 0
            || req.txn_timeout_ms > self.config.transaction_max_timeout_ms
        {
            return Err(INVALID_TRANSACTION_TIMEOUT);
        } else {
            req.txn_timeout_ms
        };
        let expected =
            (req.producer_id.0 != NO_PRODUCER_ID).then_some((req.producer_id, req.producer_epoch));
        let current = match self.txns.get(id) {
            None => {
                if self.txns.len() >= self.config.transactional_ids_max {
                    return Err(IDS_LIMIT_ERROR);
                }
                let fresh = req.fresh_producer_id.ok_or(COORDINATOR_LOAD_IN_PROGRESS)?;
                TransactionLogValue {
                    producer_id: fresh,
                    prev_producer_id: ProducerId(NO_PRODUCER_ID),
                    next_producer_id: ProducerId(NO_PRODUCER_ID),
                    producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
                    last_producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
                    txn_timeout_ms,
                    state: TransactionState::Empty,
                    partitions: BTreeSet::new(),
                    txn_start_timestamp_ms: -1,
                    txn_last_update_timestamp_ms: now_ms,
                    client_transaction_version: if req.transaction_version_supported {
                        TransactionVersion::Tv2
                    } else {
                        TransactionVersion::Tv0
                    },
                    ongoing_producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
                }
            }
            Some(e) if e.parked_init.is_some() => return Err(CONCURRENT_TRANSACTIONS),
            Some(e) => e.value.clone(),
        };
        if let Some((pid, epoch)) = expected {
            // Kafka's isValidProducerId: the epoch itself is checked by the bump below.
            let valid = current.producer_epoch.0 == NO_PRODUCER_EPOCH
                || pid == current.producer_id
                || (pid == current.prev_producer_id && is_epoch_exhausted(epoch));
            if !valid {
                return Err(PRODUCER_FENCED);
            }
        }
        match current.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                Err(CONCURRENT_TRANSACTIONS)
            }
            TransactionState::Ongoing
                if req.two_phase_commit == TwoPhaseCommit::KeepPrepared
                    && !crate::faults::active(crate::faults::Fault::KeepPreparedAborts) =>
            {
                self.keep_prepared(now_ms, id, &current, expected, out)
                    .map(Some)
            }
            TransactionState::Ongoing => {
                self.fence_and_abort(now_ms, id, out);
                Ok(None)
            }
            TransactionState::Empty
            | TransactionState::CompleteCommit
            | TransactionState::CompleteAbort => {
                let mut next = current.clone();
                next.state = TransactionState::Empty;
                next.partitions.clear();
                next.next_producer_id = ProducerId(NO_PRODUCER_ID);
                next.txn_timeout_ms = txn_timeout_ms;
                next.txn_start_timestamp_ms = -1;
                next.txn_last_update_timestamp_ms = now_ms;
                let cur = current.producer_epoch;
                if is_epoch_exhausted(cur) && expected.is_none_or(|(_, e)| e == cur) {
                    // prepareProducerIdRotation.
                    next.producer_id = req.fresh_producer_id.ok_or(COORDINATOR_LOAD_IN_PROGRESS)?;
                    next.prev_producer_id = current.producer_id;
                    next.producer_epoch = ProducerEpoch(0);
                    next.last_producer_epoch = if expected.is_some() {
                        cur
                    } else {
                        ProducerEpoch(NO_PRODUCER_EPOCH)
                    };
                } else {
                    // prepareIncrementProducerEpoch.
                    let (epoch, last) = match expected {
                        None => (bump(cur), ProducerEpoch(NO_PRODUCER_EPOCH)),
                        Some((_, e)) if cur.0 == NO_PRODUCER_EPOCH || e == cur => (bump(cur), cur),
                        Some((_, e)) if e == current.last_producer_epoch => {
                            (cur, current.last_producer_epoch)
                        }
                        Some(_) => return Err(PRODUCER_FENCED),
                    };
                    next.producer_epoch = epoch;
                    next.last_producer_epoch = last;
                }
                let answer = Init::Bumped(next.producer_id, next.producer_epoch);
                self.write_value(id, next, out);
                Ok(Some(answer))
            }
            TransactionState::Dead | TransactionState::PrepareEpochFence => {
                Err(UNKNOWN_SERVER_ERROR)
            }
        }
    }

    /// KIP-939 recovery: a new incarnation of a two-phase-commit producer takes over its
    /// ongoing (prepared) transaction instead of aborting it. The transaction stays Ongoing
    /// with its partitions; the epoch is bumped, which fences the previous incarnation (its
    /// adds, produces and EndTxn now fail PRODUCER_FENCED), and the new incarnation ends the
    /// transaction with EndTxn at the bumped epoch. The markers carry that later epoch, which
    /// partitions and share partitions accept for records written at the earlier one.
    ///
    /// The answer names the transaction by the epoch its records were written with (the one
    /// the application's token was made from), stored as `ongoing_producer_epoch` by the first
    /// keep: a second keep (the first one's answer lost, or its process killed in turn) must
    /// name the same transaction, not the epoch the first keep bumped to.
    ///
    /// # Errors
    /// INVALID_TXN_STATE when the ongoing transaction is not a two-phase-commit one (Kafka
    /// refuses to recover those too) or its epoch is exhausted (the bump would leave no epoch
    /// to end it with; Shoal's choice, see docs/decisions). PRODUCER_FENCED when the request
    /// names an expected epoch that is not the current one.
    ///
    /// The epoch a retry may present is the one bumped from only when the request named it: a
    /// new process (no expected epoch) leaves none, so the fenced incarnation cannot later
    /// present its old epoch as a "retry" and be handed the new incarnation's identity.
    fn keep_prepared(
        &mut self,
        now_ms: i64,
        id: &str,
        current: &TransactionLogValue,
        expected: Option<(ProducerId, ProducerEpoch)>,
        out: &mut Output,
    ) -> Reply<Init> {
        if !current.is_two_phase_commit() || is_epoch_exhausted(bump(current.producer_epoch)) {
            return Err(INVALID_TXN_STATE);
        }
        if expected.is_some_and(|(_, e)| e != current.producer_epoch) {
            return Err(PRODUCER_FENCED);
        }
        assert_eq!(current.state, TransactionState::Ongoing);
        let mut next = current.clone();
        next.producer_epoch = bump(current.producer_epoch);
        next.last_producer_epoch = match expected {
            Some(_) => current.producer_epoch,
            None => ProducerEpoch(NO_PRODUCER_EPOCH),
        };
        next.ongoing_producer_epoch = current.transaction_epoch();
        next.txn_last_update_timestamp_ms = now_ms;
        let answer = Init::KeptPrepared {
            current: (next.producer_id, next.producer_epoch),
            ongoing: (current.producer_id, next.ongoing_producer_epoch),
        };
        self.write_value(id, next, out);
        Ok(answer)
    }

    // -----------------------------------------------------------------------------------------
    // Adds
    // -----------------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn add_partitions(
        &mut self,
        now_ms: i64,
        id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &BTreeSet<TopicPartition>,
        version: TransactionVersion,
        out: &mut Output,
    ) -> ErrorCode {
        if id.is_empty() {
            return INVALID_REQUEST;
        }
        let Some(e) = self.txns.get(id) else {
            return INVALID_PRODUCER_ID_MAPPING;
        };
        let v = &e.value;
        if e.parked_init.is_some() {
            return CONCURRENT_TRANSACTIONS;
        }
        if v.producer_id != producer_id {
            return INVALID_PRODUCER_ID_MAPPING;
        }
        if v.producer_epoch != producer_epoch {
            return PRODUCER_FENCED;
        }
        match v.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                return CONCURRENT_TRANSACTIONS
            }
            TransactionState::Dead | TransactionState::PrepareEpochFence => {
                return UNKNOWN_SERVER_ERROR
            }
            _ => {}
        }
        let ongoing = v.state == TransactionState::Ongoing;
        if partitions.is_empty() || (ongoing && partitions.is_subset(&v.partitions)) {
            return NONE;
        }
        let new = partitions.difference(&v.partitions).count();
        if v.partitions.len() + new > self.config.partitions_per_transaction_max {
            return PARTITIONS_LIMIT_ERROR;
        }
        let mut next = v.clone();
        next.state = TransactionState::Ongoing;
        next.partitions.extend(partitions.iter().cloned());
        if !ongoing {
            next.txn_start_timestamp_ms = now_ms;
        }
        next.txn_last_update_timestamp_ms = now_ms;
        next.client_transaction_version = version;
        self.write_value(id, next, out);
        NONE
    }

    /// Kafka's handleVerifyPartitionsInTransaction: no pending-state check, nothing written.
    fn verify(
        &self,
        r: &AddPartitionsRequest,
        partitions: &BTreeSet<TopicPartition>,
    ) -> AddPartitionsResponse {
        let same = |code: ErrorCode| partition_results(partitions, |_| code);
        if r.transactional_id.is_empty() {
            return same(INVALID_REQUEST);
        }
        let Some(e) = self.txns.get(&r.transactional_id) else {
            return same(INVALID_PRODUCER_ID_MAPPING);
        };
        let v = &e.value;
        if v.producer_id != r.producer_id {
            same(INVALID_PRODUCER_ID_MAPPING)
        } else if v.producer_epoch != r.producer_epoch {
            same(PRODUCER_FENCED)
        } else if v.state.is_prepare() {
            same(CONCURRENT_TRANSACTIONS)
        } else {
            partition_results(partitions, |tp| {
                if v.partitions.contains(tp) {
                    NONE
                } else {
                    TRANSACTION_ABORTABLE
                }
            })
        }
    }

    // -----------------------------------------------------------------------------------------
    // EndTxn
    // -----------------------------------------------------------------------------------------

    fn end_txn(
        &mut self,
        now_ms: i64,
        r: &EndTxnRequest,
        out: &mut Output,
    ) -> Reply<(ProducerId, ProducerEpoch)> {
        use TransactionResult::{Abort, Commit};
        use TransactionState::*;
        let id = &r.transactional_id;
        if id.is_empty() {
            return Err(INVALID_REQUEST);
        }
        let e = self.txns.get(id).ok_or(END_TXN_UNKNOWN_ID)?;
        if e.parked_init.is_some() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        let v = e.value.clone();
        let result = TransactionResult::from_committed(r.committed);
        let version = TransactionVersion::for_end_txn(r.version);
        let current = (v.producer_id, v.producer_epoch);
        if !version.supports_epoch_bump() {
            // endTransactionWithTV1.
            if v.producer_id != r.producer_id {
                return Err(INVALID_PRODUCER_ID_MAPPING);
            }
            if v.producer_epoch != r.producer_epoch {
                return Err(PRODUCER_FENCED);
            }
            return match (v.state, result) {
                (Ongoing, _) => self.prepare(now_ms, id, &v, result, version, None, out),
                (CompleteCommit, Commit) | (CompleteAbort, Abort) => Ok(current),
                (PrepareCommit, Commit) | (PrepareAbort, Abort) => Err(CONCURRENT_TRANSACTIONS),
                _ => Err(INVALID_TXN_STATE),
            };
        }
        // TV2: every end bumps the epoch; a retry presents the epoch before the bump (or the
        // exhausted epoch of the previous producer id after a rotation).
        let last_was_tv2 = v.client_transaction_version.supports_epoch_bump();
        let retry_on_overflow = last_was_tv2
            && v.producer_id != r.producer_id
            && v.prev_producer_id == r.producer_id
            && r.producer_epoch.0 == EPOCH_EXHAUSTED_AT
            && v.producer_epoch.0 == 0;
        let retry_on_bump = last_was_tv2
            && v.producer_id == r.producer_id
            && i32::from(v.producer_epoch.0) == i32::from(r.producer_epoch.0) + 1;
        if v.producer_id != r.producer_id && !retry_on_overflow {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        let exact = v.producer_id == r.producer_id && v.producer_epoch == r.producer_epoch;
        if !(exact || retry_on_bump || retry_on_overflow) {
            return Err(PRODUCER_FENCED);
        }
        match (v.state, result) {
            (Ongoing, _) if exact => {
                self.prepare(now_ms, id, &v, result, version, r.fresh_producer_id, out)
            }
            (Ongoing, _) => Err(PRODUCER_FENCED),
            (PrepareCommit, Commit) | (PrepareAbort, Abort) => Err(CONCURRENT_TRANSACTIONS),
            (PrepareCommit | PrepareAbort, _) => Err(INVALID_TXN_STATE),
            (CompleteCommit, Commit) | (CompleteAbort, Abort) if !exact => Ok(current),
            (Empty | CompleteCommit | CompleteAbort, Abort) if exact => {
                // TV2 may abort with no partitions added.
                self.prepare(now_ms, id, &v, result, version, r.fresh_producer_id, out)
            }
            (CompleteCommit, Abort) => Err(INVALID_TXN_STATE),
            (Empty, Abort) => Err(PRODUCER_FENCED),
            _ => Err(INVALID_TXN_STATE),
        }
    }

    /// Kafka's prepareAbortOrCommit (not for fences): writes PrepareX and hands out markers.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &mut self,
        now_ms: i64,
        id: &str,
        v: &TransactionLogValue,
        result: TransactionResult,
        version: TransactionVersion,
        fresh: Option<ProducerId>,
        out: &mut Output,
    ) -> Reply<(ProducerId, ProducerEpoch)> {
        let mut next = v.clone();
        if version.supports_epoch_bump() {
            if is_epoch_exhausted(v.producer_epoch) {
                next.next_producer_id = fresh.ok_or(COORDINATOR_LOAD_IN_PROGRESS)?;
            }
            next.producer_epoch = bump(v.producer_epoch);
            next.last_producer_epoch = v.producer_epoch;
        }
        if v.state != TransactionState::Ongoing {
            next.txn_start_timestamp_ms = now_ms;
        }
        next.state = match result {
            TransactionResult::Commit => TransactionState::PrepareCommit,
            TransactionResult::Abort => TransactionState::PrepareAbort,
        };
        // The kept transaction ends here; the next one is named by its own epoch.
        next.ongoing_producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
        next.txn_last_update_timestamp_ms = now_ms;
        next.client_transaction_version = version;
        let answer = if next.next_producer_id.0 != NO_PRODUCER_ID {
            (next.next_producer_id, ProducerEpoch(0))
        } else {
            (next.producer_id, next.producer_epoch)
        };
        self.write_value(id, next, out);
        self.send_markers_or_complete(now_ms, id, out);
        Ok(answer)
    }

    /// PrepareEpochFence then PrepareAbort, in one step (only the PrepareAbort is written).
    fn fence_and_abort(&mut self, now_ms: i64, id: &str, out: &mut Output) {
        let Some(v) = self.txns.get(id).map(|e| e.value.clone()) else {
            self.flag(TxnViolation::WrongState {
                transactional_id: id.to_string(),
                step: "fence",
                state: None,
            });
            return;
        };
        if !TransactionState::PrepareEpochFence
            .valid_previous()
            .contains(&v.state)
        {
            self.flag(TxnViolation::Transition {
                transactional_id: id.to_string(),
                from: v.state,
                to: TransactionState::PrepareEpochFence,
            });
            return;
        }
        let mut next = v.clone();
        let fenced = bump(v.producer_epoch);
        if v.client_transaction_version.supports_epoch_bump() {
            // The TV2 abort bumps once more, remembering the fence epoch as the retry epoch.
            next.producer_epoch = bump(fenced);
            next.last_producer_epoch = fenced;
        } else {
            next.producer_epoch = fenced;
            next.last_producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
        }
        next.next_producer_id = ProducerId(NO_PRODUCER_ID);
        next.ongoing_producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
        next.state = TransactionState::PrepareAbort;
        next.txn_last_update_timestamp_ms = now_ms;
        self.write_value(id, next, out);
        self.send_markers_or_complete(now_ms, id, out);
    }

    fn send_markers_or_complete(&mut self, now_ms: i64, id: &str, out: &mut Output) {
        let state = self.txns.get(id).map(|e| e.value.state);
        let Some(v) = self
            .txns
            .get(id)
            .map(|e| &e.value)
            .filter(|v| v.state.is_prepare())
        else {
            self.flag(TxnViolation::WrongState {
                transactional_id: id.to_string(),
                step: "send markers",
                state,
            });
            return;
        };
        if v.partitions.is_empty() {
            self.complete(now_ms, id, out);
            return;
        }
        out.markers.push(WriteMarkers {
            transactional_id: id.to_string(),
            producer_id: v.producer_id,
            producer_epoch: v.producer_epoch,
            result: if v.state == TransactionState::PrepareCommit {
                TransactionResult::Commit
            } else {
                TransactionResult::Abort
            },
            partitions: v.partitions.iter().cloned().collect(),
            coordinator_epoch: self.coordinator_epoch,
            transaction_version: v.client_transaction_version,
        });
    }

    /// Kafka's prepareComplete, then any InitProducerId that waited for this abort.
    fn complete(&mut self, now_ms: i64, id: &str, out: &mut Output) {
        let v = self.txns.get(id).map(|e| e.value.clone());
        let complete = match v.as_ref().map(|v| v.state) {
            Some(TransactionState::PrepareCommit) => TransactionState::CompleteCommit,
            Some(TransactionState::PrepareAbort) => TransactionState::CompleteAbort,
            state => {
                self.flag(TxnViolation::WrongState {
                    transactional_id: id.to_string(),
                    step: "complete",
                    state,
                });
                return;
            }
        };
        let Some(v) = v else { return };
        let mut next = v.clone();
        next.state = complete;
        next.partitions.clear();
        next.txn_last_update_timestamp_ms = now_ms;
        if v.next_producer_id.0 != NO_PRODUCER_ID {
            // TV2 rotation; the last epoch stays the exhausted one the client last saw.
            next.prev_producer_id = v.producer_id;
            next.producer_id = v.next_producer_id;
            next.producer_epoch = ProducerEpoch(0);
            next.next_producer_id = ProducerId(NO_PRODUCER_ID);
        }
        self.write_value(id, next, out);
        let parked = self.txns.get_mut(id).and_then(|e| e.parked_init.take());
        if let Some((token, req)) = parked {
            self.init_producer_id(now_ms, token, req, out);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Records and timers
    // -----------------------------------------------------------------------------------------

    /// Writes `value` for `id`, unless the transition breaks an invariant: then nothing is
    /// written and the coordinator stops.
    fn write_value(&mut self, id: &str, value: TransactionLogValue, out: &mut Output) {
        if let Err(v) = self.check_write(id, &value) {
            self.flag(v);
            return;
        }
        self.write(
            TxnRecord::Transaction {
                transactional_id: id.to_string(),
                value,
            },
            out,
        );
    }

    /// Whether writing `value` for `id` keeps the invariants: a state that is stored, reached
    /// by one of Kafka's `validPreviousStates` (a new id may start anywhere, as replay allows).
    ///
    /// # Errors
    /// The broken invariant.
    fn check_write(&self, id: &str, value: &TransactionLogValue) -> Result<(), TxnViolation> {
        let to = value.state;
        if matches!(
            to,
            TransactionState::Dead | TransactionState::PrepareEpochFence
        ) {
            return Err(TxnViolation::Unstorable {
                transactional_id: id.to_string(),
                state: to,
            });
        }
        match self.txns.get(id) {
            Some(e) if !to.valid_previous().contains(&e.value.state) => {
                Err(TxnViolation::Transition {
                    transactional_id: id.to_string(),
                    from: e.value.state,
                    to,
                })
            }
            _ => Ok(()),
        }
    }

    /// Applies a record exactly as replay does, and emits it.
    fn write(&mut self, record: TxnRecord, out: &mut Output) {
        self.replay(&record);
        out.records.push(record);
    }

    fn deadline_of(&self, e: &Entry) -> Option<i64> {
        let v = &e.value;
        match v.state {
            // KIP-939: only the external transaction manager ends a two-phase-commit
            // transaction; `transaction.max.timeout.ms` does not apply.
            TransactionState::Ongoing if v.is_two_phase_commit() => None,
            TransactionState::Ongoing => Some(
                v.txn_start_timestamp_ms
                    .saturating_add(i64::from(v.txn_timeout_ms))
                    .saturating_add(1),
            ),
            s if s.is_idle() => Some(
                v.txn_last_update_timestamp_ms
                    .saturating_add(self.config.transactional_id_expiration_ms),
            ),
            _ => None,
        }
    }

    fn touch(&mut self, id: &str) {
        let Some(e) = self.txns.get(id) else {
            return;
        };
        let deadline = self.deadline_of(e);
        let old = e.timer;
        if old == deadline {
            return;
        }
        if let Some(d) = old {
            self.timers.remove(&(d, id.to_string()));
        }
        if let Some(d) = deadline {
            self.timers.insert((d, id.to_string()));
        }
        if let Some(e) = self.txns.get_mut(id) {
            e.timer = deadline;
        }
    }
}

/// The next epoch, saturating at `i16::MAX` (Ongoing epochs never exceed `i16::MAX - 1`).
fn bump(epoch: ProducerEpoch) -> ProducerEpoch {
    ProducerEpoch(epoch.0.saturating_add(1))
}
