//! Share-group state persistence: the share coordinator's shard for `__share_group_state`
//! (Kafka's `ShareCoordinatorShard`).
//!
//! Owns, for every share partition `(group, topic id, partition)` of one `__share_group_state`
//! partition, the durable state a share-partition leader reads when it loads the partition:
//! start offset (SPSO), state epoch, leader epoch, delivery-complete count and the state
//! batches of the in-flight records. [`partition_for`] says which `__share_group_state`
//! partition (and so which shard) holds a key.
//!
//! Protocol, records first (as Kafka's coordinator runtime): the handlers ([`ShareStateStore::
//! initialize`], [`ShareStateStore::write`], [`ShareStateStore::read`], the deletes) take
//! `&self` and return the records to append; the caller appends them to the partition
//! (fsynced), then calls [`ShareStateStore::replay`] on each, and only then answers. Loading
//! is the same `replay` over the partition from its start. The next handler must run after
//! the previous one's records were replayed (or dropped on a failed append), as in Kafka.
//!
//! Snapshots and updates: the first record of a share partition is a ShareSnapshot
//! (InitializeShareGroupState); a write produces a ShareUpdate holding only the batches it
//! changed, except that after `share.coordinator.snapshot.update.records.per.snapshot` updates
//! (default 500, valid 0..=500; 0 means every write is a snapshot) it produces a ShareSnapshot
//! with the merged state. Replaying a snapshot replaces the state; replaying an update merges
//! it in (see [`combine_state_batches`]) and drops batches below the start offset.
//!
//! Transactional acknowledgements (KIP-1289, decision 0011): a TX_PENDING batch is state 5
//! with its staging (producer id, epoch, ack type) in a tagged field of the batch (see
//! `records.rs`) and the delivery count before its acquisition. A transaction marker resolves
//! it either through the share partition's write (live) or, for the persisted state alone,
//! through [`ShareStateStore::resolve_marker`] / [`resolve_staged_batches`]; both write the
//! full count, so the resolution wins the merge over the staging, and both move the start
//! offset past the terminal records that then begin the share partition: they agree, start
//! offset and delivery-complete count included (checked by the share partition's property
//! test).
//!
//! Epochs: a write with a state epoch below the highest seen gets FENCED_STATE_EPOCH, one with
//! a leader epoch below the highest seen FENCED_LEADER_EPOCH (-1 skips either check, as in
//! Kafka). Writes never raise the stored leader epoch; a read with a new leader epoch does,
//! with a record.
//!
//! Invariants: state changes only in `replay`, so live state equals the state rebuilt from the
//! log; at most [`ShareCoordinatorConfig::share_partitions_max`] share partitions, and a write
//! carries at most [`ShareCoordinatorConfig::state_batches_max`] batches.
//!
//! Must not: read clocks (time comes in as `now_ms`, for the record timestamps), perform I/O,
//! or panic on record bytes or requests. Not modelled: cold-partition snapshots (Kafka's
//! `snapshotColdPartitions` timer) and metadata-image checks for unknown topics (the broker's
//! job). The store is driven on the coordinator runtime by [`shard::ShareStateShard`], which
//! also tracks the snapshot offsets that drive `__share_group_state` pruning.

mod combiner;
mod records;
pub mod shard;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use combiner::{combine_state_batches, NO_START_OFFSET};
pub use records::{
    DecodeError, EncodeError, SharePartitionKey, ShareSnapshotValue, ShareStateRecord,
    ShareUpdateValue, StagedTxn, StateBatch, DELIVERY_COMPLETE_COUNT_TAG,
    SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE, STAGED_TXN_TAG, TX_PENDING_STATE_ID,
    UNINITIALIZED_DELIVERY_COMPLETE_COUNT, VALUE_VERSION,
};

pub use crate::group_coordinator::ErrorCode;
use crate::hash::{java_string_hash, kafka_abs};

/// `share.coordinator.snapshot.update.records.per.snapshot` default.
pub const SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT: u32 = 500;
/// Upper bound of `share.coordinator.snapshot.update.records.per.snapshot`.
pub const SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_MAX: u32 = 500;
/// `share.coordinator.state.topic.num.partitions` default.
pub const STATE_TOPIC_NUM_PARTITIONS_DEFAULT: u32 = 50;
/// Start offset of a share partition that was never initialized (Kafka's
/// `PartitionFactory.UNINITIALIZED_START_OFFSET`).
pub const UNINITIALIZED_START_OFFSET: i64 = -1;
/// State epoch reported for a share partition without state.
pub const DEFAULT_STATE_EPOCH: i32 = 0;
/// Leader epoch of a freshly initialized share partition (Kafka's `UNINITIALIZED_EPOCH`).
pub const INITIAL_LEADER_EPOCH: i32 = 0;
/// An epoch field meaning "not given".
pub const NO_EPOCH: i32 = -1;

/// Kafka error codes the share coordinator returns (`Errors.java`).
pub mod error_codes {
    use super::ErrorCode;

    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode::COORDINATOR_NOT_AVAILABLE;
    pub const INVALID_REQUEST: ErrorCode = ErrorCode::INVALID_REQUEST;
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode::FENCED_LEADER_EPOCH;
    pub const FENCED_STATE_EPOCH: ErrorCode = ErrorCode::FENCED_STATE_EPOCH;
}

pub use crate::ids::TopicId;

/// The `__share_group_state` partition that holds `(group_id, topic, partition)`: Kafka's
/// `Utils.abs(("%s:%s:%d", groupId, topicId, partition).hashCode()) % numPartitions`, where
/// the topic id is its base64 form ([`TopicId::to_kafka_string`]). `num_partitions` 0 is
/// treated as 1.
pub fn partition_for(
    group_id: &str,
    topic_id_base64: &str,
    partition: i32,
    num_partitions: u32,
) -> u32 {
    let key = format!("{group_id}:{topic_id_base64}:{partition}");
    kafka_abs(java_string_hash(&key)).unsigned_abs() % num_partitions.max(1)
}

/// The `__share_group_state` partition holding `key`'s state ([`partition_for`] of its
/// group, topic id and partition).
pub fn state_partition(key: &SharePartitionKey, num_partitions: u32) -> i32 {
    partition_for(
        &key.group_id,
        &key.topic_id.to_kafka_string(),
        key.partition,
        num_partitions,
    ) as i32
}

/// Settings and limits of a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareCoordinatorConfig {
    /// `share.coordinator.snapshot.update.records.per.snapshot` (0..=500).
    pub snapshot_update_records_per_snapshot: u32,
    /// Share partitions held; initializing one more gets COORDINATOR_NOT_AVAILABLE
    /// (retriable backpressure).
    pub share_partitions_max: usize,
    /// State batches in one write request; more is INVALID_REQUEST. A share partition holds
    /// at most `share.partition.max.record.locks` (≤ 10000) in-flight records, plus one log
    /// batch, so a well-behaved leader stays far below the default.
    pub state_batches_max: usize,
}

impl Default for ShareCoordinatorConfig {
    fn default() -> Self {
        ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT,
            share_partitions_max: 1_000_000,
            state_batches_max: 100_000,
        }
    }
}

/// The state of one share partition (Kafka's `ShareGroupOffset`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareGroupOffset {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub delivery_complete_count: i32,
    pub create_timestamp_ms: i64,
    pub write_timestamp_ms: i64,
    pub state_batches: Vec<StateBatch>,
}

impl ShareGroupOffset {
    fn from_snapshot(v: &ShareSnapshotValue) -> Self {
        ShareGroupOffset {
            snapshot_epoch: v.snapshot_epoch,
            state_epoch: v.state_epoch,
            leader_epoch: v.leader_epoch,
            start_offset: v.start_offset,
            delivery_complete_count: v.delivery_complete_count,
            create_timestamp_ms: v.create_timestamp_ms,
            write_timestamp_ms: v.write_timestamp_ms,
            state_batches: v.state_batches.clone(),
        }
    }

    /// An update with nothing to merge into (Kafka: no state epoch, no timestamps).
    fn from_update(v: &ShareUpdateValue) -> Self {
        ShareGroupOffset {
            snapshot_epoch: v.snapshot_epoch,
            state_epoch: 0,
            leader_epoch: v.leader_epoch,
            start_offset: v.start_offset,
            delivery_complete_count: v.delivery_complete_count,
            create_timestamp_ms: 0,
            write_timestamp_ms: 0,
            state_batches: v.state_batches.clone(),
        }
    }

    /// Kafka's `ShareCoordinatorShard.merge`.
    fn merge(&mut self, v: &ShareUpdateValue) {
        if v.start_offset != UNINITIALIZED_START_OFFSET {
            self.start_offset = v.start_offset;
        }
        if v.leader_epoch != NO_EPOCH {
            self.leader_epoch = v.leader_epoch;
        }
        self.delivery_complete_count = v.delivery_complete_count;
        self.state_batches =
            combine_state_batches(&self.state_batches, &v.state_batches, self.start_offset);
    }
}

/// What a marker's resolution of a share partition's stagings depends on besides the marker:
/// its group's `share.delivery.count.limit`, and whether the group has a dead-letter queue
/// (KIP-1191: a committed REJECT, or an ABORT at the limit, is then ARCHIVING, not ARCHIVED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerPolicy {
    pub delivery_count_limit: i16,
    pub dead_letter: bool,
}

impl From<i16> for MarkerPolicy {
    /// A group without a dead-letter queue.
    fn from(delivery_count_limit: i16) -> MarkerPolicy {
        MarkerPolicy {
            delivery_count_limit,
            dead_letter: false,
        }
    }
}

/// ARCHIVING's id (KIP-1191).
const ARCHIVING_STATE_ID: i8 = 3;
/// ARCHIVED's id.
const ARCHIVED_STATE_ID: i8 = 4;

/// KIP-1289: what a transaction marker does to persisted state batches. Every TX_PENDING
/// batch (state 5) staged by `producer_id` at `producer_epoch` or before is resolved with its
/// full delivery count (persisted TX_PENDING carries the count before the acquisition): COMMIT
/// → ACKNOWLEDGED for a staged ACCEPT, ARCHIVED for REJECT or GAP (ARCHIVING for a REJECT
/// when the group has a dead-letter queue, unless the transaction carried its dead letters,
/// [`StagedTxn::dead_lettered`]); ABORT → AVAILABLE, or
/// ARCHIVED once the count reached the limit (ARCHIVING instead of ARCHIVED for REJECT and
/// the limit when the group has a dead-letter queue, see [`MarkerPolicy`]). Returns the resolved batches, to
/// merge over the stagings (their higher count wins the merge); empty when nothing matches,
/// so an older-epoch or duplicate marker changes nothing. The share partition's
/// `apply_marker` makes the same decision on its live records.
pub fn resolve_staged_batches(
    batches: &[StateBatch],
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    policy: MarkerPolicy,
) -> Vec<StateBatch> {
    let dead = if policy.dead_letter {
        ARCHIVING_STATE_ID
    } else {
        ARCHIVED_STATE_ID
    };
    batches
        .iter()
        .filter(|b| b.delivery_state == TX_PENDING_STATE_ID)
        .filter_map(|b| {
            let t = b.staged_txn?;
            let epoch_matches = if crate::faults::active(crate::faults::Fault::ExactEpochMarker) {
                t.producer_epoch == producer_epoch
            } else {
                t.producer_epoch <= producer_epoch
            };
            let producer_matches = t.producer_id == producer_id
                || crate::faults::active(crate::faults::Fault::MarkerIgnoresProducer);
            if !producer_matches || !epoch_matches {
                return None;
            }
            let count = b.delivery_count.saturating_add(1);
            let state = match (commit, t.ack_type) {
                (true, 1) => 2,
                (true, 0) => ARCHIVED_STATE_ID,
                // The transaction carried the REJECT's dead letters.
                (true, _)
                    if t.dead_lettered
                        && !crate::faults::active(crate::faults::Fault::CommitArchivesCarried) =>
                {
                    ARCHIVED_STATE_ID
                }
                (true, _) => dead,
                (false, _) if count >= policy.delivery_count_limit => dead,
                (false, _) => 0,
            };
            Some(StateBatch::new(b.first_offset, b.last_offset, state, count))
        })
        .collect()
}

/// The start offset of persisted `batches` (sorted, merged, none before `start`) once it
/// moves past the terminal records (ACKNOWLEDGED, ARCHIVED) that begin them: it stops at the
/// first offset not covered by a batch (never delivered, so AVAILABLE) or covered by a
/// non-terminal one. An uninitialized start stays as it is.
pub fn start_past_terminal(start: i64, batches: &[StateBatch]) -> i64 {
    if start == UNINITIALIZED_START_OFFSET {
        return start;
    }
    let mut at = start;
    for b in batches {
        if b.last_offset < at {
            continue;
        }
        let terminal = b.delivery_state == 2 || b.delivery_state == 4;
        if b.first_offset > at || !terminal {
            break;
        }
        at = b.last_offset.saturating_add(1);
    }
    at
}

/// InitializeShareGroupState for one share partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitializeState {
    pub state_epoch: i32,
    /// -1 leaves the start offset to the leader's `share.auto.offset.reset`.
    pub start_offset: i64,
}

/// WriteShareGroupState for one share partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteState {
    /// -1: not checked.
    pub state_epoch: i32,
    /// -1: not checked.
    pub leader_epoch: i32,
    /// -1: unchanged.
    pub start_offset: i64,
    /// -1: unknown (WriteShareGroupState v0).
    pub delivery_complete_count: i32,
    pub state_batches: Vec<StateBatch>,
}

/// ReadShareGroupState's answer for one share partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadState {
    pub state_epoch: i32,
    pub start_offset: i64,
    pub state_batches: Vec<StateBatch>,
}

/// ReadShareGroupStateSummary's answer: the lag inputs of one share partition (lag counts the
/// offsets from `start_offset` up to the high watermark, less `delivery_complete_count`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateSummary {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// -1 when unknown.
    pub delivery_complete_count: i32,
}

/// Why a share-state request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShareStateError {
    /// Read or write of a share partition that was never initialized (Kafka answers
    /// INVALID_REQUEST).
    #[error("the share partition is not initialized")]
    Uninitialized,
    #[error("leader epoch {requested} is older than {current}")]
    FencedLeaderEpoch { current: i32, requested: i32 },
    #[error("state epoch {requested} is older than {current}")]
    FencedStateEpoch { current: i32, requested: i32 },
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    #[error("{count} state batches exceed the limit of {max}")]
    TooManyStateBatches { count: usize, max: usize },
    #[error("the shard holds its limit of {max} share partitions")]
    SharePartitionsLimit { max: usize },
    #[error("invalid share coordinator config: {0}")]
    InvalidConfig(&'static str),
}

impl ShareStateError {
    /// The Kafka error code the response carries.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Uninitialized
            | Self::InvalidRequest(_)
            | Self::TooManyStateBatches { .. }
            | Self::InvalidConfig(_) => error_codes::INVALID_REQUEST,
            Self::FencedLeaderEpoch { .. } => error_codes::FENCED_LEADER_EPOCH,
            Self::FencedStateEpoch { .. } => error_codes::FENCED_STATE_EPOCH,
            Self::SharePartitionsLimit { .. } => error_codes::COORDINATOR_NOT_AVAILABLE,
        }
    }
}

/// What a shard keeps per share partition besides its state (Kafka keeps these in separate
/// maps, all removed together by a tombstone).
#[derive(Clone, Debug)]
struct Entry {
    offset: ShareGroupOffset,
    /// Highest leader epoch replayed.
    leader_epoch_max: i32,
    /// Highest state epoch replayed (snapshots only carry one).
    state_epoch_max: Option<i32>,
    /// Updates since the last snapshot that reset the count.
    updates: u32,
}

/// The share coordinator shard of one `__share_group_state` partition.
#[derive(Clone, Debug)]
pub struct ShareStateStore {
    config: ShareCoordinatorConfig,
    states: BTreeMap<SharePartitionKey, Entry>,
}

impl ShareStateStore {
    /// # Errors
    /// `snapshot_update_records_per_snapshot` above 500 (Kafka's range is 0..=500).
    pub fn new(config: ShareCoordinatorConfig) -> Result<Self, ShareStateError> {
        if config.snapshot_update_records_per_snapshot > SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_MAX {
            return Err(ShareStateError::InvalidConfig(
                "snapshot.update.records.per.snapshot must be in 0..=500",
            ));
        }
        Ok(ShareStateStore {
            config,
            states: BTreeMap::new(),
        })
    }

    pub fn config(&self) -> &ShareCoordinatorConfig {
        &self.config
    }

    /// Number of share partitions with state.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The state of a share partition, if initialized.
    pub fn state(&self, key: &SharePartitionKey) -> Option<&ShareGroupOffset> {
        self.states.get(key).map(|e| &e.offset)
    }

    /// Every share partition with state, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &SharePartitionKey> {
        self.states.keys()
    }

    /// Offsets persisted as TX_PENDING (state 5) in `key`'s batches, or in every share
    /// partition of the shard when `key` is None: what an open transaction still holds here.
    pub fn tx_pending_count(&self, key: Option<&SharePartitionKey>) -> i64 {
        let count = |e: &Entry| -> i64 {
            e.offset
                .state_batches
                .iter()
                .filter(|b| b.delivery_state == TX_PENDING_STATE_ID)
                .map(|b| b.last_offset - b.first_offset + 1)
                .sum()
        };
        match key {
            Some(k) => self.states.get(k).map_or(0, count),
            None => self.states.values().map(count).sum(),
        }
    }

    /// Applies one record: the only way the state changes.
    pub fn replay(&mut self, record: &ShareStateRecord) {
        let limit = self.config.snapshot_update_records_per_snapshot;
        match record {
            ShareStateRecord::Tombstone { key } => {
                self.states.remove(key);
            }
            ShareStateRecord::Snapshot { key, value } => {
                let offset = ShareGroupOffset::from_snapshot(value);
                match self.states.get_mut(key) {
                    Some(e) => {
                        e.leader_epoch_max = e.leader_epoch_max.max(value.leader_epoch);
                        e.state_epoch_max = Some(
                            e.state_epoch_max
                                .map_or(value.state_epoch, |s| s.max(value.state_epoch)),
                        );
                        e.offset = offset;
                        if e.updates >= limit {
                            e.updates = 0;
                        }
                    }
                    None => {
                        self.states.insert(
                            key.clone(),
                            Entry {
                                offset,
                                leader_epoch_max: value.leader_epoch,
                                state_epoch_max: Some(value.state_epoch),
                                updates: 0,
                            },
                        );
                    }
                }
            }
            ShareStateRecord::Update { key, value } => match self.states.get_mut(key) {
                Some(e) => {
                    e.leader_epoch_max = e.leader_epoch_max.max(value.leader_epoch);
                    e.offset.merge(value);
                    e.updates = e.updates.saturating_add(1);
                }
                None => {
                    self.states.insert(
                        key.clone(),
                        Entry {
                            offset: ShareGroupOffset::from_update(value),
                            leader_epoch_max: value.leader_epoch,
                            state_epoch_max: None,
                            updates: 1,
                        },
                    );
                }
            },
        }
    }

    /// InitializeShareGroupState: a snapshot that starts the share partition afresh (the
    /// previous state, if any, is replaced, not merged).
    ///
    /// # Errors
    /// INVALID_REQUEST for a negative partition, FENCED_STATE_EPOCH for an older state
    /// epoch, COORDINATOR_NOT_AVAILABLE at the share-partition limit.
    pub fn initialize(
        &self,
        key: &SharePartitionKey,
        request: InitializeState,
        now_ms: i64,
    ) -> Result<ShareStateRecord, ShareStateError> {
        check_partition(key)?;
        let existing = self.states.get(key);
        if let Some(current) = existing.and_then(|e| e.state_epoch_max) {
            if request.state_epoch != NO_EPOCH && current > request.state_epoch {
                return Err(ShareStateError::FencedStateEpoch {
                    current,
                    requested: request.state_epoch,
                });
            }
        }
        if existing.is_none() && self.states.len() >= self.config.share_partitions_max {
            return Err(ShareStateError::SharePartitionsLimit {
                max: self.config.share_partitions_max,
            });
        }
        // Lag is only defined once a start offset is known (Kafka's `fromRequest`).
        let delivery_complete_count = if request.start_offset == UNINITIALIZED_START_OFFSET {
            UNINITIALIZED_DELIVERY_COMPLETE_COUNT
        } else {
            0
        };
        Ok(ShareStateRecord::Snapshot {
            key: key.clone(),
            value: ShareSnapshotValue {
                snapshot_epoch: existing.map_or(0, |e| e.offset.snapshot_epoch.saturating_add(1)),
                state_epoch: request.state_epoch,
                leader_epoch: INITIAL_LEADER_EPOCH,
                start_offset: request.start_offset,
                delivery_complete_count,
                create_timestamp_ms: now_ms,
                write_timestamp_ms: now_ms,
                state_batches: Vec::new(),
            },
        })
    }

    /// WriteShareGroupState: an update, or a snapshot once enough updates accumulated.
    ///
    /// # Errors
    /// INVALID_REQUEST for a negative partition, an uninitialized share partition, a batch
    /// with `first_offset > last_offset` or a negative offset, or too many batches;
    /// FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for older epochs.
    pub fn write(
        &self,
        key: &SharePartitionKey,
        request: &WriteState,
        now_ms: i64,
    ) -> Result<ShareStateRecord, ShareStateError> {
        check_partition(key)?;
        let entry = self.states.get(key).ok_or(ShareStateError::Uninitialized)?;
        if request.leader_epoch != NO_EPOCH && entry.leader_epoch_max > request.leader_epoch {
            return Err(ShareStateError::FencedLeaderEpoch {
                current: entry.leader_epoch_max,
                requested: request.leader_epoch,
            });
        }
        if let Some(current) = entry.state_epoch_max {
            if request.state_epoch != NO_EPOCH && current > request.state_epoch {
                return Err(ShareStateError::FencedStateEpoch {
                    current,
                    requested: request.state_epoch,
                });
            }
        }
        if request.state_batches.len() > self.config.state_batches_max {
            return Err(ShareStateError::TooManyStateBatches {
                count: request.state_batches.len(),
                max: self.config.state_batches_max,
            });
        }
        if request
            .state_batches
            .iter()
            .any(|b| b.first_offset < 0 || b.first_offset > b.last_offset)
        {
            return Err(ShareStateError::InvalidRequest(
                "a state batch has a negative first offset or first offset after last offset",
            ));
        }
        Ok(self.state_record(key, entry, request, false, now_ms))
    }

    /// ReadShareGroupState; a read with a new leader epoch also returns the record that
    /// stores it.
    ///
    /// # Errors
    /// INVALID_REQUEST for a negative partition or an uninitialized share partition;
    /// FENCED_LEADER_EPOCH when `leader_epoch` is below the highest seen (Kafka applies this
    /// check to reads without exempting -1).
    pub fn read(
        &self,
        key: &SharePartitionKey,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(ReadState, Option<ShareStateRecord>), ShareStateError> {
        check_partition(key)?;
        let entry = self.states.get(key).ok_or(ShareStateError::Uninitialized)?;
        if entry.leader_epoch_max > leader_epoch {
            return Err(ShareStateError::FencedLeaderEpoch {
                current: entry.leader_epoch_max,
                requested: leader_epoch,
            });
        }
        let state = ReadState {
            state_epoch: entry.offset.state_epoch,
            start_offset: entry.offset.start_offset,
            state_batches: entry.offset.state_batches.clone(),
        };
        if leader_epoch == NO_EPOCH || entry.leader_epoch_max == leader_epoch {
            return Ok((state, None));
        }
        let request = WriteState {
            state_epoch: entry.offset.state_epoch,
            leader_epoch,
            start_offset: entry.offset.start_offset,
            delivery_complete_count: entry.offset.delivery_complete_count,
            state_batches: Vec::new(),
        };
        let record = self.state_record(key, entry, &request, true, now_ms);
        Ok((state, Some(record)))
    }

    /// ReadShareGroupStateSummary; `None` for a share partition without state (Kafka then
    /// answers start offset -1, delivery-complete count -1).
    pub fn read_summary(&self, key: &SharePartitionKey) -> Option<StateSummary> {
        self.states.get(key).map(|e| StateSummary {
            state_epoch: e.offset.state_epoch,
            leader_epoch: e.offset.leader_epoch,
            start_offset: e.offset.start_offset,
            delivery_complete_count: e.offset.delivery_complete_count,
        })
    }

    /// DeleteShareGroupState for one share partition: its tombstone, `None` if it has no
    /// state (Kafka answers success without a record).
    pub fn delete(&self, key: &SharePartitionKey) -> Option<ShareStateRecord> {
        self.states
            .contains_key(key)
            .then(|| ShareStateRecord::Tombstone { key: key.clone() })
    }

    /// Tombstones for every share partition of `group_id` (a deleted share group).
    pub fn delete_group(&self, group_id: &str) -> Vec<ShareStateRecord> {
        self.tombstones(|k| k.group_id == group_id)
    }

    /// Tombstones for every share partition of the deleted topics (Kafka's
    /// `maybeCleanupShareState`).
    pub fn delete_topics(&self, topic_ids: &[TopicId]) -> Vec<ShareStateRecord> {
        self.tombstones(|k| topic_ids.contains(&k.topic_id))
    }

    fn tombstones(&self, select: impl Fn(&SharePartitionKey) -> bool) -> Vec<ShareStateRecord> {
        self.states
            .keys()
            .filter(|k| select(k))
            .map(|k| ShareStateRecord::Tombstone { key: k.clone() })
            .collect()
    }

    /// Kafka's `generateShareStateRecord`: a snapshot once `updates` reached the limit, else
    /// an update with only the request's batches.
    /// KIP-1289: the records that apply `producer_id`'s COMMIT (`commit`) or ABORT marker of
    /// `producer_epoch` to every share partition of this shard holding TX_PENDING batches it
    /// staged (see [`resolve_staged_batches`]); none when nothing matches (an older-epoch or
    /// duplicate marker). `delivery_count_limit` gives each share partition's
    /// `share.delivery.count.limit`. The start offset moves past the terminal records that
    /// now begin the share partition ([`start_past_terminal`]), as the live path moves the
    /// SPSO, so that DescribeShareGroupOffsets sees the commit at once; the delivery-complete
    /// count is that of the terminal records left at or after it.
    pub fn resolve_marker<P: Into<MarkerPolicy>>(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        policy: impl Fn(&SharePartitionKey) -> P,
        now_ms: i64,
    ) -> Vec<ShareStateRecord> {
        let mut out = Vec::new();
        for (key, entry) in &self.states {
            let current = &entry.offset;
            let resolved = resolve_staged_batches(
                &current.state_batches,
                producer_id,
                producer_epoch,
                commit,
                policy(key).into(),
            );
            if resolved.is_empty() {
                continue;
            }
            let merged =
                combine_state_batches(&current.state_batches, &resolved, current.start_offset);
            let start_offset = start_past_terminal(current.start_offset, &merged);
            let delivery_complete_count =
                if current.delivery_complete_count == UNINITIALIZED_DELIVERY_COMPLETE_COUNT {
                    UNINITIALIZED_DELIVERY_COMPLETE_COUNT
                } else {
                    let terminal: i64 = merged
                        .iter()
                        .filter(|b| b.delivery_state == 2 || b.delivery_state == 4)
                        .map(|b| b.last_offset - b.first_offset.max(start_offset) + 1)
                        .filter(|n| *n > 0)
                        .sum();
                    i32::try_from(terminal).unwrap_or(i32::MAX)
                };
            let request = WriteState {
                state_epoch: NO_EPOCH,
                leader_epoch: NO_EPOCH,
                start_offset: if start_offset == current.start_offset {
                    UNINITIALIZED_START_OFFSET
                } else {
                    start_offset
                },
                delivery_complete_count,
                state_batches: resolved,
            };
            out.push(self.state_record(key, entry, &request, false, now_ms));
        }
        out
    }

    /// The share-state participant's application of a COMMIT/ABORT marker appended to
    /// `__share_group_state` partition `marker_partition` (of `num_partitions`): the same
    /// call live, at the start-up rewrite of a lost marker and on replay of the control batch,
    /// so replayed state equals live state. Every TX_PENDING batch the producer staged in a
    /// share partition stored on `marker_partition`, at the marker's epoch or before,
    /// resolves ([`ShareStateStore::resolve_marker`]); share partitions stored on another
    /// state partition wait for their own marker there. The resolution is derived from the
    /// marker and the state before it, so it is applied here without being written: the
    /// marker is its record. Returns the share partitions resolved, whose live machines the
    /// caller then resolves with [`crate::share_partition::SharePartition::apply_marker`].
    #[allow(clippy::too_many_arguments)]
    pub fn apply_marker<P: Into<MarkerPolicy>>(
        &mut self,
        marker_partition: i32,
        num_partitions: u32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        policy: impl Fn(&SharePartitionKey) -> P,
        now_ms: i64,
    ) -> Vec<SharePartitionKey> {
        let records = self.resolve_marker(producer_id, producer_epoch, commit, policy, now_ms);
        let mut resolved = Vec::new();
        for record in records {
            let key = record.key();
            if state_partition(key, num_partitions) != marker_partition {
                continue;
            }
            resolved.push(key.clone());
            self.replay(&record);
        }
        resolved
    }

    fn state_record(
        &self,
        key: &SharePartitionKey,
        entry: &Entry,
        request: &WriteState,
        update_leader_epoch: bool,
        now_ms: i64,
    ) -> ShareStateRecord {
        let current = &entry.offset;
        let leader_epoch = if update_leader_epoch && request.leader_epoch != NO_EPOCH {
            request.leader_epoch
        } else {
            current.leader_epoch
        };
        // A write never moves the start offset back within a state epoch (a reset is an
        // initialize, with a new state epoch). The live share partition writes its own start,
        // which lags the stored one between a marker's resolution here and its application
        // to the live machine; taken as it is, that stale start would uncover offsets whose
        // now-terminal batches were pruned, and they would read back as AVAILABLE — their
        // committed acknowledgements lost, the records delivered again.
        let request_start = if request.start_offset == UNINITIALIZED_START_OFFSET {
            UNINITIALIZED_START_OFFSET
        } else {
            request.start_offset.max(current.start_offset)
        };
        if entry.updates >= self.config.snapshot_update_records_per_snapshot {
            let start_offset = if request_start == UNINITIALIZED_START_OFFSET {
                current.start_offset
            } else {
                request_start
            };
            ShareStateRecord::Snapshot {
                key: key.clone(),
                value: ShareSnapshotValue {
                    snapshot_epoch: current.snapshot_epoch.saturating_add(1),
                    state_epoch: current.state_epoch,
                    leader_epoch,
                    start_offset,
                    delivery_complete_count: request.delivery_complete_count,
                    create_timestamp_ms: now_ms,
                    write_timestamp_ms: now_ms,
                    state_batches: combine_state_batches(
                        &current.state_batches,
                        &request.state_batches,
                        start_offset,
                    ),
                },
            }
        } else {
            ShareStateRecord::Update {
                key: key.clone(),
                value: ShareUpdateValue {
                    snapshot_epoch: current.snapshot_epoch,
                    leader_epoch,
                    start_offset: request_start,
                    delivery_complete_count: request.delivery_complete_count,
                    state_batches: combine_state_batches(
                        &[],
                        &request.state_batches,
                        request_start,
                    ),
                },
            }
        }
    }
}

fn check_partition(key: &SharePartitionKey) -> Result<(), ShareStateError> {
    if key.partition < 0 {
        return Err(ShareStateError::InvalidRequest(
            "the partition id cannot be negative",
        ));
    }
    Ok(())
}
