//! Plain input, output, state and error types of the share-partition state machine.

pub use crate::group_coordinator::ErrorCode;
use crate::share_coordinator::{StagedTxn, StateBatch, WriteState};

/// Kafka error codes a share partition answers with (`Errors.java`).
pub mod error_codes {
    use super::ErrorCode;

    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode::UNKNOWN_SERVER_ERROR;
    pub const INVALID_REQUEST: ErrorCode = ErrorCode::INVALID_REQUEST;
    pub const INVALID_RECORD_STATE: ErrorCode = ErrorCode::INVALID_RECORD_STATE;
}

/// `group.share.record.lock.duration.ms` default.
pub const RECORD_LOCK_DURATION_MS_DEFAULT: i64 = 30_000;
/// `group.share.delivery.count.limit` default.
pub const DELIVERY_COUNT_LIMIT_DEFAULT: i16 = 5;
/// Lowest delivery count limit Kafka accepts (group and broker configs).
pub const DELIVERY_COUNT_LIMIT_MIN: i16 = 2;
/// Highest delivery count limit Kafka's broker config accepts.
pub const DELIVERY_COUNT_LIMIT_MAX: i16 = 10;
/// `group.share.partition.max.record.locks` default.
pub const RECORD_LOCKS_MAX_DEFAULT: i64 = 2_000;
/// Kafka's `MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT`.
pub const THROTTLE_DELIVERY_COUNT_MIN: i16 = 2;

/// The state of a record in a share partition, with Kafka's persisted ids
/// (`RecordState`: AVAILABLE 0, ACQUIRED 1, ACKNOWLEDGED 2, ARCHIVING 3, ARCHIVED 4) and
/// KIP-1289's TX_PENDING 5.
///
/// Every change of a record's state goes through [`RecordState::validate_transition`]. The
/// matches on this enum have no wildcard arm, on purpose: a new state must be placed in each.
/// Lock expiry only looks at ACQUIRED runs, so TX_PENDING records never time out; the SPSO
/// stops at them because they are not terminal. ARCHIVING (KIP-1191) is the dead-letter
/// queue's TX_PENDING-like step: persisted before the dead-letter record is written, left only
/// for ARCHIVED once it is (see `dead_letter.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordState {
    /// May be acquired (fetched) by any member.
    Available,
    /// Locked by one member until its lock deadline; never persisted.
    Acquired,
    /// Accepted by the consumer (terminal).
    Acknowledged,
    /// Rejected or past the delivery limit while the group has a dead-letter queue: its
    /// dead-letter record is being written (KIP-1191); only ARCHIVED follows. Holds no lock
    /// and no owner, and the SPSO stops at it.
    Archiving,
    /// Rejected, a gap, past the delivery limit, part of an aborted transaction or below the
    /// log start offset (terminal).
    Archived,
    /// An acknowledgement staged in an open transaction (KIP-1289): only that transaction's
    /// COMMIT or ABORT marker moves it on; it holds no lock and no owner.
    TxPending,
}

impl RecordState {
    pub const ALL: [RecordState; 6] = [
        RecordState::Available,
        RecordState::Acquired,
        RecordState::Acknowledged,
        RecordState::Archiving,
        RecordState::Archived,
        RecordState::TxPending,
    ];

    /// Kafka's id, as persisted in `DeliveryState`.
    pub const fn id(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archiving => 3,
            RecordState::Archived => 4,
            RecordState::TxPending => 5,
        }
    }

    pub fn from_id(id: i8) -> Option<RecordState> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Terminal states never change and let the start offset move past the record.
    pub const fn is_terminal(self) -> bool {
        match self {
            RecordState::Available
            | RecordState::Acquired
            | RecordState::Archiving
            | RecordState::TxPending => false,
            RecordState::Acknowledged | RecordState::Archived => true,
        }
    }

    /// The one place that says which state changes exist: Kafka's
    /// `RecordState.validateTransition` (AVAILABLE → ACQUIRED; ACQUIRED → AVAILABLE,
    /// ACKNOWLEDGED or ARCHIVED) plus AVAILABLE → ARCHIVED, which Kafka performs through
    /// `InFlightState.archive()` without validation (records with no data left after
    /// compaction, or past the delivery limit). A lock renewal is not a transition (the state
    /// stays ACQUIRED). KIP-1289 adds ACQUIRED → TX_PENDING (staging) and TX_PENDING →
    /// ACKNOWLEDGED | ARCHIVED (COMMIT) | AVAILABLE (ABORT; ARCHIVED at the delivery limit).
    /// KIP-1191 adds ARCHIVING wherever a record is archived by a rejection or the delivery
    /// limit (from AVAILABLE, ACQUIRED or TX_PENDING), and ARCHIVING → ARCHIVED only.
    ///
    /// # Errors
    /// Staying in the same state, leaving a terminal state, AVAILABLE to AVAILABLE or
    /// ACKNOWLEDGED.
    pub fn validate_transition(self, to: RecordState) -> Result<(), InvalidTransition> {
        let valid = match (self, to) {
            (
                RecordState::Available,
                RecordState::Acquired | RecordState::Archiving | RecordState::Archived,
            ) => true,
            (
                RecordState::Available,
                RecordState::Available | RecordState::Acknowledged | RecordState::TxPending,
            ) => false,
            (RecordState::Acquired, RecordState::Acquired) => false,
            (
                RecordState::Acquired,
                RecordState::Available
                | RecordState::Acknowledged
                | RecordState::Archiving
                | RecordState::Archived
                | RecordState::TxPending,
            ) => true,
            (
                RecordState::TxPending,
                RecordState::Available
                | RecordState::Acknowledged
                | RecordState::Archiving
                | RecordState::Archived,
            ) => true,
            (RecordState::TxPending, RecordState::Acquired | RecordState::TxPending) => false,
            (RecordState::Archiving, RecordState::Archived) => true,
            (
                RecordState::Archiving,
                RecordState::Available
                | RecordState::Acquired
                | RecordState::Acknowledged
                | RecordState::Archiving
                | RecordState::TxPending,
            ) => false,
            (RecordState::Acknowledged | RecordState::Archived, _) => false,
        };
        if valid {
            Ok(())
        } else {
            Err(InvalidTransition { from: self, to })
        }
    }
}

/// A state change [`RecordState::validate_transition`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid record state transition {from:?} -> {to:?}")]
pub struct InvalidTransition {
    pub from: RecordState,
    pub to: RecordState,
}

/// ShareFetch / ShareAcknowledge `AcknowledgeTypes` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcknowledgeType {
    /// 0: an acquired offset holding no deliverable record (compaction, control record);
    /// archives it.
    Gap,
    /// 1: processed; ACKNOWLEDGED.
    Accept,
    /// 2: give back for redelivery; AVAILABLE (ARCHIVED at the delivery limit).
    Release,
    /// 3: unprocessable; ARCHIVED.
    Reject,
    /// 4 (v2, IsRenewAck): extend the acquisition lock; no state change, nothing persisted.
    Renew,
}

impl AcknowledgeType {
    /// The highest id of ShareFetch / ShareAcknowledge v2 (v1 ends at 3, Reject).
    pub const MAX_ID: i8 = 4;

    pub const fn id(self) -> i8 {
        match self {
            AcknowledgeType::Gap => 0,
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
            AcknowledgeType::Renew => 4,
        }
    }

    /// ACCEPT, REJECT and GAP: the types a transaction may stage (KIP-1289).
    pub const fn is_transactional(self) -> bool {
        match self {
            AcknowledgeType::Gap | AcknowledgeType::Accept | AcknowledgeType::Reject => true,
            AcknowledgeType::Release | AcknowledgeType::Renew => false,
        }
    }

    pub fn from_id(id: i8) -> Option<AcknowledgeType> {
        [
            AcknowledgeType::Gap,
            AcknowledgeType::Accept,
            AcknowledgeType::Release,
            AcknowledgeType::Reject,
            AcknowledgeType::Renew,
        ]
        .into_iter()
        .find(|t| t.id() == id)
    }
}

/// ShareFetch v2 `ShareAcquireMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AcquireMode {
    /// 0: whole log batches, at least `MaxRecords` if available, split into AcquiredRecords
    /// ranges at log-batch boundaries once `BatchSize` is reached.
    #[default]
    BatchOptimized,
    /// 1: at most `MaxRecords` records in one range; the rest of the last log batch stays
    /// AVAILABLE.
    RecordLimit,
}

impl AcquireMode {
    pub fn from_id(id: i8) -> Option<AcquireMode> {
        match id {
            0 => Some(AcquireMode::BatchOptimized),
            1 => Some(AcquireMode::RecordLimit),
            _ => None,
        }
    }
}

/// The header of one log batch the broker read for the share partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    /// A transaction marker (COMMIT/ABORT) batch.
    pub is_control: bool,
    pub producer_id: i64,
    pub is_transactional: bool,
}

/// One aborted transaction overlapping a read (the log's aborted-transaction index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// `share.isolation.level`, with what read_committed needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation<'a> {
    #[default]
    ReadUncommitted,
    /// The log was read up to the last stable offset; `aborted` lists the aborted
    /// transactions overlapping the read.
    ReadCommitted { aborted: &'a [AbortedTransaction] },
}

/// One ShareFetch `AcquiredRecords` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquiredRecords {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// One `AcknowledgementBatches` entry: one type for the whole range, or one per offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    /// Wire `int8` values (see [`AcknowledgeType`]).
    pub ack_types: Vec<i8>,
}

impl AckBatch {
    pub fn new(first_offset: i64, last_offset: i64, ack_types: Vec<i8>) -> Self {
        AckBatch {
            first_offset,
            last_offset,
            ack_types,
        }
    }
}

/// One persisted range: the state batch a write carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistedBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    /// Never [`RecordState::Acquired`].
    pub state: RecordState,
    pub delivery_count: i16,
    /// Set exactly for [`RecordState::TxPending`].
    pub staged_txn: Option<StagedTxn>,
}

impl From<PersistedBatch> for StateBatch {
    fn from(b: PersistedBatch) -> StateBatch {
        StateBatch::new(
            b.first_offset,
            b.last_offset,
            b.state.id(),
            b.delivery_count,
        )
        .with_staged_txn(b.staged_txn)
    }
}

/// What a state-changing call asks the broker to persist (one WriteShareGroupState), before it
/// answers the request that caused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateWrite {
    /// The share-partition start offset after the call.
    pub start_offset: i64,
    pub state_epoch: i32,
    /// Terminal records at or after `start_offset` (KIP-1226, for lag).
    pub delivery_complete_count: i32,
    /// The ranges whose persisted state changed, sorted and disjoint.
    pub batches: Vec<PersistedBatch>,
}

impl StateWrite {
    /// The WriteShareGroupState partition data (the broker adds its leader epoch).
    pub fn to_write_state(&self, leader_epoch: i32) -> WriteState {
        WriteState {
            state_epoch: self.state_epoch,
            leader_epoch,
            start_offset: self.start_offset,
            delivery_complete_count: self.delivery_complete_count,
            state_batches: self.batches.iter().map(|b| StateBatch::from(*b)).collect(),
        }
    }
}

/// Limits and timeouts of one share partition (group configs override broker defaults; the
/// broker resolves them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharePartitionConfig {
    /// `share.record.lock.duration.ms`: how long an acquisition lock lasts.
    pub record_lock_duration_ms: i64,
    /// `share.delivery.count.limit`: deliveries before a record is archived.
    pub delivery_count_limit: i16,
    /// `share.partition.max.record.locks`: the in-flight window (SPSO..=SPEO) size beyond
    /// which no new records are acquired.
    pub record_locks_max: i64,
    /// The group has a dead-letter queue (`errors.deadletterqueue.topic.name`, KIP-1191):
    /// records archived by REJECT or by the delivery limit pass through ARCHIVING.
    pub dead_letter: bool,
}

impl Default for SharePartitionConfig {
    fn default() -> Self {
        SharePartitionConfig {
            record_lock_duration_ms: RECORD_LOCK_DURATION_MS_DEFAULT,
            delivery_count_limit: DELIVERY_COUNT_LIMIT_DEFAULT,
            record_locks_max: RECORD_LOCKS_MAX_DEFAULT,
            dead_letter: false,
        }
    }
}

impl SharePartitionConfig {
    /// # Errors
    /// A non-positive lock duration or record-lock limit, or a delivery count limit outside
    /// Kafka's 2..=10.
    pub fn validate(&self) -> Result<(), ShareError> {
        if self.record_lock_duration_ms <= 0 {
            return Err(ShareError::InvalidConfig(
                "record lock duration must be positive",
            ));
        }
        if !(DELIVERY_COUNT_LIMIT_MIN..=DELIVERY_COUNT_LIMIT_MAX)
            .contains(&self.delivery_count_limit)
        {
            return Err(ShareError::InvalidConfig(
                "delivery count limit must be in 2..=10",
            ));
        }
        if self.record_locks_max <= 0 {
            return Err(ShareError::InvalidConfig(
                "record locks max must be positive",
            ));
        }
        Ok(())
    }

    /// The state a rejection or the delivery limit archives a record to: ARCHIVING when the
    /// group has a dead-letter queue, else ARCHIVED.
    pub const fn dead_letter_state(&self) -> RecordState {
        if self.dead_letter {
            RecordState::Archiving
        } else {
            RecordState::Archived
        }
    }

    /// Kafka's `throttleRecordsDeliveryLimit`: `max(2, ceil(limit / 2))`. Records delivered
    /// this often are re-delivered in ever smaller groups.
    pub fn throttle_delivery_count(&self) -> i16 {
        let half = (self.delivery_count_limit + 1) / 2;
        half.max(THROTTLE_DELIVERY_COUNT_MIN)
    }
}

/// Records per state, for metrics and describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StateCounts {
    pub available: i64,
    pub acquired: i64,
    pub acknowledged: i64,
    pub archiving: i64,
    pub archived: i64,
    pub tx_pending: i64,
}

impl StateCounts {
    pub fn get(&self, state: RecordState) -> i64 {
        match state {
            RecordState::Available => self.available,
            RecordState::Acquired => self.acquired,
            RecordState::Acknowledged => self.acknowledged,
            RecordState::Archiving => self.archiving,
            RecordState::Archived => self.archived,
            RecordState::TxPending => self.tx_pending,
        }
    }

    pub(super) fn slot(&mut self, state: RecordState) -> &mut i64 {
        match state {
            RecordState::Available => &mut self.available,
            RecordState::Acquired => &mut self.acquired,
            RecordState::Acknowledged => &mut self.acknowledged,
            RecordState::Archiving => &mut self.archiving,
            RecordState::Archived => &mut self.archived,
            RecordState::TxPending => &mut self.tx_pending,
        }
    }

    /// ACKNOWLEDGED + ARCHIVED.
    pub fn terminal(&self) -> i64 {
        self.acknowledged + self.archived
    }
}

/// Transactional-acknowledgement counters of one share partition (KIP-1289 metrics), in
/// records, since it was loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TxnStats {
    /// Records moved to TX_PENDING.
    pub staged: i64,
    /// TX_PENDING records resolved by a COMMIT marker.
    pub committed: i64,
    /// TX_PENDING records resolved by an ABORT marker.
    pub aborted: i64,
}

/// What a transaction marker did to a share partition ([`super::SharePartition::apply_marker`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MarkerOutcome {
    /// What to persist; `None` when the marker resolved nothing (older epoch, duplicate).
    pub write: Option<StateWrite>,
    /// Records were resolved: waiting share fetches should be woken (records AVAILABLE again,
    /// or the SPSO moved and the record-lock window has room).
    pub wake: bool,
    /// Records resolved.
    pub resolved: i64,
    /// Per resolved run: (records, staged-at time when known — not after a reload), for the
    /// time-in-TX_PENDING histogram.
    pub staged_at_ms: Vec<(i64, Option<i64>)>,
}

/// A range of records in one state, as [`super::SharePartition::ranges`] lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub state: RecordState,
    pub delivery_count: i16,
    /// The member holding the lock (ACQUIRED only).
    pub member_id: Option<String>,
    /// The transaction the records are staged in (TX_PENDING only).
    pub staged_txn: Option<StagedTxn>,
    /// When the lock expires (ACQUIRED only).
    pub lock_deadline_ms: Option<i64>,
}

/// Why an acknowledgement batch list is malformed (INVALID_REQUEST).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRequestReason {
    #[error("first offset {first} is after last offset {last}")]
    FirstAfterLast { first: i64, last: i64 },
    #[error("batch starting at {first} overlaps or precedes the previous batch ending at {previous_last}")]
    NotAscending { first: i64, previous_last: i64 },
    #[error("no acknowledge types")]
    EmptyAckTypes,
    #[error("{len} acknowledge types for {records} offsets")]
    AckTypesLength { len: usize, records: i64 },
    #[error("unknown acknowledge type {0}")]
    UnknownAckType(i8),
    #[error("acknowledge type renew without IsRenewAck")]
    RenewNotAllowed,
    #[error("last offset {last} is past the acquired records (end {end})")]
    PastAcquiredRecords { last: i64, end: i64 },
}

/// Why an acknowledgement does not match the records' state (INVALID_RECORD_STATE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordStateReason {
    #[error("no in-flight records in the batch")]
    NotFound,
    #[error("the record is not acquired")]
    NotAcquired,
    #[error("the record is acquired by another member")]
    NotOwner,
    #[error("the acquisition lock expired")]
    LockExpired,
    #[error("the record is staged in a transaction (TX_PENDING)")]
    TxPending,
    #[error("the acknowledge type has no transactional meaning (only ACCEPT, REJECT, GAP)")]
    NotTransactional,
    #[error("the offset is not an in-flight record")]
    NotInFlight,
}

/// Why a share-partition call was refused. A refused call changed nothing, except
/// [`ShareError::InvariantViolated`] (see its doc).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShareError {
    #[error("invalid request: {0}")]
    InvalidRequest(InvalidRequestReason),
    #[error("the record state is invalid at offset {offset}: {reason}")]
    InvalidRecordState {
        offset: i64,
        reason: RecordStateReason,
    },
    /// The broker passed log batches that are not ascending, disjoint and well-formed.
    #[error("invalid fetched batch at index {index}")]
    InvalidFetchedBatches { index: usize },
    #[error("invalid persisted state: {0}")]
    InvalidPersistedState(&'static str),
    #[error("invalid share-partition config: {0}")]
    InvalidConfig(&'static str),
    /// This call found one of the machine's invariants broken (a bug in Shoal, see
    /// [`Violation`]): the offending change was not applied, the call's state write is dropped
    /// (nothing of it may be persisted or answered), and the share partition is stopped.
    #[error("invariant violated, share partition stopped: {0}")]
    InvariantViolated(Violation),
    /// An earlier call found an invariant broken; the share partition refuses every call.
    #[error("share partition stopped by an earlier invariant violation: {0}")]
    Stopped(Violation),
}

impl ShareError {
    /// The Kafka error code for the partition (ShareFetch `AcknowledgeErrorCode`,
    /// ShareAcknowledge `ErrorCode`).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::InvalidRequest(_) => error_codes::INVALID_REQUEST,
            Self::InvalidRecordState { .. } => error_codes::INVALID_RECORD_STATE,
            // Kafka answers a share partition it cannot serve (state FAILED) with an
            // IllegalStateException, which the wire carries as UNKNOWN_SERVER_ERROR.
            Self::InvalidFetchedBatches { .. }
            | Self::InvalidPersistedState(_)
            | Self::InvalidConfig(_)
            | Self::InvariantViolated(_)
            | Self::Stopped(_) => error_codes::UNKNOWN_SERVER_ERROR,
        }
    }

    /// The broken invariant, for [`ShareError::InvariantViolated`] and
    /// [`ShareError::Stopped`].
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            Self::InvariantViolated(v) | Self::Stopped(v) => Some(v),
            Self::InvalidRequest(_)
            | Self::InvalidRecordState { .. }
            | Self::InvalidFetchedBatches { .. }
            | Self::InvalidPersistedState(_)
            | Self::InvalidConfig(_) => None,
        }
    }
}

/// A broken invariant of the share-partition machine, found in production as in tests (see
/// the module docs of [`super`]). Never caused by a client: it means a bug in Shoal (or
/// memory corruption), and the share partition that saw it stops.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A state change [`RecordState::validate_transition`] refuses.
    #[error("invalid record state transition {from:?} -> {to:?} at offsets {first}..={last}")]
    Transition {
        first: i64,
        last: i64,
        from: RecordState,
        to: RecordState,
    },
    /// TX_PENDING records changed by something other than the COMMIT or ABORT marker of the
    /// transaction that staged them.
    #[error(
        "TX_PENDING offsets {first}..={last} staged by producer {producer_id} epoch \
         {producer_epoch} changed outside that transaction's marker"
    )]
    ForeignTxPending {
        first: i64,
        last: i64,
        producer_id: i64,
        producer_epoch: i16,
    },
    /// ACQUIRED records passed from one member to another without being released.
    #[error("ACQUIRED offsets {first}..={last} changed holder without a release")]
    HolderChanged { first: i64, last: i64 },
    /// A range of records stored with its last offset before its first.
    #[error("empty range of records {first}..={last}")]
    EmptyRange { first: i64, last: i64 },
    /// A range of records whose owner or staging does not match its state (an owner exactly
    /// when ACQUIRED, a staging exactly when TX_PENDING).
    #[error(
        "offsets {first}..={last} in state {state:?} with owner: {owner}, staging: {staging} \
         (an owner exactly when ACQUIRED, a staging exactly when TX_PENDING)"
    )]
    Attributes {
        first: i64,
        last: i64,
        state: RecordState,
        owner: bool,
        staging: bool,
    },
    /// A range of records stored over offsets already tracked: a record would have two states,
    /// or two holders.
    #[error("offsets {first}..={last} overlap the records tracked from {other}")]
    Overlap { first: i64, last: i64, other: i64 },
}

impl Violation {
    /// A short, stable name of the broken invariant, for logs and metrics.
    pub fn invariant(&self) -> &'static str {
        match self {
            Violation::Transition { .. } => "valid-transition",
            Violation::ForeignTxPending { .. } => "tx-pending-own-transaction",
            Violation::HolderChanged { .. } | Violation::Overlap { .. } => "one-holder-per-record",
            Violation::EmptyRange { .. } | Violation::Attributes { .. } => "record-attributes",
        }
    }
}
