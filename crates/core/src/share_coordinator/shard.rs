//! The share-state coordinator as one [`CoordinatorShard`]: the [`ShareStateStore`] of every
//! `__share_group_state` partition, driven by the broker's one coordinator runtime as the group
//! and transaction coordinators are (Kafka's `ShareCoordinatorShard` on its
//! `CoordinatorRuntime`).
//!
//! Its inputs are what a share-partition leader asks of the persisted state (Kafka's share-state
//! RPCs: Initialize / Read / Write / Delete, the summary) plus KIP-1289's: the stagings of a
//! TxnShareAcknowledge, written as the producer's transactional batches
//! ([`ShareStateInput::Stage`]), and the COMMIT / ABORT markers that resolve them
//! ([`ShareStateInput::WriteMarker`]). Every write to the topic comes through here, markers
//! included, so the shard sees its partitions' history in log order and decides fences
//! itself (decision 0019):
//!
//! - A staging of producer P at epoch E on state partition N is refused, with nothing staged
//!   anywhere (PRODUCER_FENCED), when P's epoch on N is already above E — a marker of a newer
//!   epoch ended P's transaction there (the coordinator aborted it after the TxnShareAcknowledge
//!   registered the partition). Written anyway, the staging would belong to no transaction and
//!   stay TX_PENDING for ever.
//! - A marker is refused as the partition's producer state refuses one: an epoch older than
//!   the producer's (INVALID_PRODUCER_EPOCH), a coordinator epoch older than that of the
//!   producer's last marker (TRANSACTION_COORDINATOR_FENCED).
//!
//! The producers' epochs come from the records themselves (a staging carries its producer, a
//! marker its epoch), on replay as live, plus what the broker seeds from the partitions'
//! producer state after a load ([`ShareStateShard::seed_producer`]: epochs whose batches were
//! pruned, coordinator epochs, which markers read back do not carry). The runtime still checks
//! the producer state when it appends, as a safety net: a refusal there fails the pass.
//!
//! Replayed state equals live state: every change goes through [`ShareStateShard::replay`] or
//! [`CoordinatorShard::replay_marker`], which the load calls with the same records and
//! markers. The one exception is the record timestamps of a marker's resolution, which take
//! the time of the pass (on load, of the last pass seen: 0).
//!
//! Must not: hold a staging the log does not (records are applied as emitted; a failed
//! append makes the runtime rebuild the shard from the log); read clocks or do I/O.

use std::collections::BTreeMap;

use super::{
    state_partition, InitializeState, ReadState, ShareCoordinatorConfig, SharePartitionKey,
    ShareStateError, ShareStateRecord, ShareStateStore, StateBatch, StateSummary, WriteState,
};
use crate::coordinator::{
    CoordinatorShard, Emitted, EncodedRecord, Framing, RecordError, ReplyToken, ShardRecord,
    TxnMarker,
};
use crate::group_coordinator::ErrorCode;

/// Each share group's `share.delivery.count.limit` (its override, else the broker's), which a
/// marker's ABORT needs: a record that reached it is archived, not made available again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryLimits {
    pub default: i16,
    pub groups: BTreeMap<String, i16>,
    /// Groups with a dead-letter queue (KIP-1191): their markers resolve to ARCHIVING.
    pub dead_letter_groups: std::collections::BTreeSet<String>,
}

impl Default for DeliveryLimits {
    fn default() -> Self {
        Self {
            default: 5,
            groups: BTreeMap::new(),
            dead_letter_groups: std::collections::BTreeSet::new(),
        }
    }
}

impl DeliveryLimits {
    pub fn of(&self, group_id: &str) -> i16 {
        self.groups.get(group_id).copied().unwrap_or(self.default)
    }

    /// What a marker's resolution of `group_id`'s stagings depends on.
    pub fn policy(&self, group_id: &str) -> super::MarkerPolicy {
        super::MarkerPolicy {
            delivery_count_limit: self.of(group_id),
            dead_letter: self.dead_letter_groups.contains(group_id),
        }
    }
}

/// A record of `__share_group_state` as the runtime writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareShardRecord {
    /// A share-state record in a plain batch.
    State(ShareStateRecord),
    /// A share-state record holding a producer's stagings, in its transactional batch.
    Staged {
        producer_id: i64,
        producer_epoch: i16,
        record: ShareStateRecord,
    },
    /// A COMMIT or ABORT marker (a control batch).
    Marker {
        marker: TxnMarker,
        coordinator_epoch: i32,
    },
}

impl ShardRecord for ShareShardRecord {
    fn partition(&self, partitions: u32) -> u32 {
        match self {
            Self::State(r) | Self::Staged { record: r, .. } => {
                state_partition(r.key(), partitions) as u32
            }
            Self::Marker { marker, .. } => marker.partition as u32,
        }
    }

    fn encode(&self) -> Result<EncodedRecord, RecordError> {
        match self {
            Self::State(r) | Self::Staged { record: r, .. } => r
                .encode()
                .map_err(|e| RecordError(format!("share state record: {e}"))),
            Self::Marker { .. } => Err(RecordError(
                "a marker is a control batch, not a record".to_string(),
            )),
        }
    }

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        ShareStateRecord::decode(key, value)
            .map(Self::State)
            .map_err(|e| RecordError(format!("share state record: {e}")))
    }

    fn framing(&self) -> Framing {
        match self {
            Self::State(_) => Framing::Plain,
            Self::Staged {
                producer_id,
                producer_epoch,
                ..
            } => Framing::Transactional {
                producer_id: *producer_id,
                producer_epoch: *producer_epoch,
            },
            Self::Marker {
                marker,
                coordinator_epoch,
            } => Framing::Marker {
                marker: *marker,
                coordinator_epoch: *coordinator_epoch,
            },
        }
    }

    fn with_framing(self, framing: Framing) -> Self {
        match (self, framing) {
            (
                Self::State(record),
                Framing::Transactional {
                    producer_id,
                    producer_epoch,
                },
            ) => Self::Staged {
                producer_id,
                producer_epoch,
                record,
            },
            (r, _) => r,
        }
    }
}

/// An input of the share-state coordinator.
#[derive(Clone, Debug)]
pub enum ShareStateInput {
    /// InitializeShareGroupState.
    Initialize {
        key: SharePartitionKey,
        state: InitializeState,
    },
    /// ReadShareGroupState (a new leader epoch is stored with a record).
    Read {
        key: SharePartitionKey,
        leader_epoch: i32,
    },
    /// WriteShareGroupState.
    Write {
        key: SharePartitionKey,
        state: WriteState,
    },
    /// KIP-1289: the producer's stagings, one write per share partition, all or nothing.
    Stage {
        producer_id: i64,
        producer_epoch: i16,
        writes: Vec<(SharePartitionKey, WriteState)>,
    },
    /// AlterShareGroupOffsets: the share partition starts afresh at `start_offset` under the
    /// next state epoch.
    Reset {
        key: SharePartitionKey,
        start_offset: i64,
    },
    /// DeleteShareGroupState of each share partition that has state.
    Delete(Vec<SharePartitionKey>),
    /// A transaction's COMMIT or ABORT marker for its state partition.
    WriteMarker {
        marker: TxnMarker,
        coordinator_epoch: i32,
    },
    /// The groups' delivery count limits changed.
    SetLimits(DeliveryLimits),
    /// ReadShareGroupStateSummary.
    Summary(SharePartitionKey),
    /// Offsets TX_PENDING in a share partition, or in all (None).
    TxPending(Option<SharePartitionKey>),
    /// Offsets TX_PENDING in the share partitions of a group.
    GroupTxPending(String),
    /// The share partitions with state (of one group, or all).
    Keys(Option<String>),
    /// A share partition's persisted state batches.
    Batches(SharePartitionKey),
    /// Per state partition, the first offset its replay still needs.
    PruneOffsets,
    /// The markers applied since the load.
    MarkersApplied,
}

/// Why a staging was refused; nothing of it was staged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageRefused {
    /// The store refused a share partition's write.
    State {
        key: SharePartitionKey,
        error: ShareStateError,
    },
    /// The producer's transaction already ended on this state partition (a marker of a newer
    /// epoch is there): PRODUCER_FENCED.
    Fenced { state_partition: i32 },
}

/// Why a marker was refused (as the partition's producer state refuses one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerRefused {
    /// The producer's epoch on the partition is newer.
    InvalidProducerEpoch { current: i16 },
    /// The producer's last marker there came from a newer coordinator epoch.
    CoordinatorFenced { current: i32 },
}

impl MarkerRefused {
    pub fn error_code(self) -> ErrorCode {
        match self {
            Self::InvalidProducerEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH,
            Self::CoordinatorFenced { .. } => ErrorCode::TRANSACTION_COORDINATOR_FENCED,
        }
    }
}

/// How many COMMIT and ABORT markers the shard applied since it was created (replayed or
/// live).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarkersApplied {
    pub commits: u64,
    pub aborts: u64,
}

/// The answer to a [`ShareStateInput`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareStateReply {
    Done,
    Refused(ShareStateError),
    /// A read: None when the share partition has no state.
    Read(Option<ReadState>),
    StageRefused(StageRefused),
    /// A marker written: the share partitions it resolved.
    Marker(Result<Vec<SharePartitionKey>, MarkerRefused>),
    Summary(Option<StateSummary>),
    Count(i64),
    Keys(Vec<SharePartitionKey>),
    Batches(Option<Vec<StateBatch>>),
    PruneOffsets(BTreeMap<i32, i64>),
    MarkersApplied(MarkersApplied),
}

/// Work for the broker once a pass is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareStateEffect {
    /// The TX_PENDING count of these share partitions (None: the share partition has no
    /// state any more) — of every share partition with state when `all` (after a load), for
    /// the metrics of share partitions with no live machine.
    TxPending {
        all: bool,
        counts: Vec<(SharePartitionKey, Option<i64>)>,
    },
}

/// What the shard knows of a producer on one state partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    epoch: i16,
    /// -1 when unknown.
    coordinator_epoch: i32,
}

/// The share-state coordinator, driven as one shard.
#[derive(Clone, Debug)]
pub struct ShareStateShard {
    store: ShareStateStore,
    /// Partitions of `__share_group_state`.
    partitions: u32,
    limits: DeliveryLimits,
    /// Per (state partition, producer id): its epoch and coordinator epoch there.
    producers: BTreeMap<(i32, i64), Seen>,
    /// Per state partition, the offset of each share partition's latest snapshot.
    snapshots: BTreeMap<i32, BTreeMap<SharePartitionKey, i64>>,
    /// Per state partition, the offset after the last record or marker seen.
    ends: BTreeMap<i32, i64>,
    markers: MarkersApplied,
    /// The time of the last pass (record timestamps of a marker's resolution).
    now_ms: i64,
}

impl ShareStateShard {
    /// # Errors
    /// The store's configuration is invalid.
    pub fn new(
        config: ShareCoordinatorConfig,
        partitions: u32,
        limits: DeliveryLimits,
    ) -> Result<Self, ShareStateError> {
        Ok(Self {
            store: ShareStateStore::new(config)?,
            partitions: partitions.max(1),
            limits,
            producers: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            ends: BTreeMap::new(),
            markers: MarkersApplied::default(),
            now_ms: 0,
        })
    }

    /// The persisted state, for inspection.
    pub fn store(&self) -> &ShareStateStore {
        &self.store
    }

    pub fn limits(&self) -> &DeliveryLimits {
        &self.limits
    }

    /// Records what a state partition's producer state knows of a producer (after a load:
    /// epochs of pruned batches, coordinator epochs). Only ever raises what the shard knows.
    pub fn seed_producer(
        &mut self,
        partition: i32,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) {
        let seen = self
            .producers
            .entry((partition, producer_id))
            .or_insert(Seen {
                epoch,
                coordinator_epoch,
            });
        seen.epoch = seen.epoch.max(epoch);
        seen.coordinator_epoch = seen.coordinator_epoch.max(coordinator_epoch);
    }

    /// Applies one record: the only way the state changes besides markers.
    pub fn replay(&mut self, record: &ShareShardRecord) {
        match record {
            ShareShardRecord::State(r) => self.store.replay(r),
            ShareShardRecord::Staged {
                producer_id,
                producer_epoch,
                record,
            } => {
                let partition = state_partition(record.key(), self.partitions);
                self.seed_producer(partition, *producer_id, *producer_epoch, -1);
                self.store.replay(record);
            }
            ShareShardRecord::Marker { marker, .. } => {
                self.apply_marker(*marker);
            }
        }
    }

    /// A marker's resolution of the stagings on its state partition
    /// ([`ShareStateStore::apply_marker`]), counted; the same live and on load.
    fn apply_marker(&mut self, marker: TxnMarker) -> Vec<SharePartitionKey> {
        if marker.commit {
            self.markers.commits += 1;
        } else {
            self.markers.aborts += 1;
        }
        self.seed_producer(
            marker.partition,
            marker.producer_id,
            marker.producer_epoch,
            -1,
        );
        let limits = &self.limits;
        self.store.apply_marker(
            marker.partition,
            self.partitions,
            marker.producer_id,
            marker.producer_epoch,
            marker.commit,
            |key| limits.policy(&key.group_id),
            self.now_ms,
        )
    }

    fn emit(&mut self, record: ShareShardRecord, out: &mut Emitted<Self>) {
        self.replay(&record);
        out.records.push(record);
    }

    fn tx_pending_effect(&self, keys: &[SharePartitionKey], out: &mut Emitted<Self>) {
        if keys.is_empty() {
            return;
        }
        let counts = keys
            .iter()
            .map(|k| {
                let count = self
                    .store
                    .state(k)
                    .map(|_| self.store.tx_pending_count(Some(k)));
                (k.clone(), count)
            })
            .collect();
        out.effects
            .push(ShareStateEffect::TxPending { all: false, counts });
    }

    fn stage(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        writes: Vec<(SharePartitionKey, WriteState)>,
        out: &mut Emitted<Self>,
    ) -> ShareStateReply {
        for (key, _) in &writes {
            let partition = state_partition(key, self.partitions);
            let ended = self
                .producers
                .get(&(partition, producer_id))
                .is_some_and(|seen| seen.epoch > producer_epoch);
            if ended {
                return ShareStateReply::StageRefused(StageRefused::Fenced {
                    state_partition: partition,
                });
            }
        }
        let mut records = Vec::with_capacity(writes.len());
        for (key, state) in &writes {
            match self.store.write(key, state, self.now_ms) {
                Ok(record) => records.push(record),
                Err(error) => {
                    return ShareStateReply::StageRefused(StageRefused::State {
                        key: key.clone(),
                        error,
                    })
                }
            }
        }
        // Distinct keys: each record was computed from the state before any of them.
        let keys: Vec<SharePartitionKey> = writes.into_iter().map(|(k, _)| k).collect();
        for record in records {
            self.emit(
                ShareShardRecord::Staged {
                    producer_id,
                    producer_epoch,
                    record,
                },
                out,
            );
        }
        self.tx_pending_effect(&keys, out);
        ShareStateReply::Done
    }

    fn write_marker(
        &mut self,
        marker: TxnMarker,
        coordinator_epoch: i32,
        out: &mut Emitted<Self>,
    ) -> ShareStateReply {
        if let Some(seen) = self.producers.get(&(marker.partition, marker.producer_id)) {
            if marker.producer_epoch < seen.epoch {
                return ShareStateReply::Marker(Err(MarkerRefused::InvalidProducerEpoch {
                    current: seen.epoch,
                }));
            }
            if seen.coordinator_epoch > coordinator_epoch {
                return ShareStateReply::Marker(Err(MarkerRefused::CoordinatorFenced {
                    current: seen.coordinator_epoch,
                }));
            }
        }
        out.records.push(ShareShardRecord::Marker {
            marker,
            coordinator_epoch,
        });
        let resolved = self.apply_marker(marker);
        self.seed_producer(
            marker.partition,
            marker.producer_id,
            marker.producer_epoch,
            coordinator_epoch,
        );
        self.tx_pending_effect(&resolved, out);
        ShareStateReply::Marker(Ok(resolved))
    }

    fn keys(&self, group: Option<&str>) -> Vec<SharePartitionKey> {
        self.store
            .keys()
            .filter(|k| group.is_none_or(|g| k.group_id == g))
            .cloned()
            .collect()
    }

    /// Per state partition with records, the first offset replay needs: the earliest latest
    /// snapshot of the share partitions stored there, or, with none stored, the end of what
    /// was written (everything before is superseded). The caller also stops at the
    /// partition's last stable offset (an open transaction's stagings).
    fn prune_offsets(&self) -> BTreeMap<i32, i64> {
        self.ends
            .iter()
            .map(|(p, end)| {
                let needed = self
                    .snapshots
                    .get(p)
                    .and_then(|keys| keys.values().min().copied())
                    .unwrap_or(*end);
                (*p, needed)
            })
            .collect()
    }

    fn write_record(
        &mut self,
        record: Result<ShareStateRecord, ShareStateError>,
        out: &mut Emitted<Self>,
    ) -> ShareStateReply {
        match record {
            Ok(record) => {
                let key = record.key().clone();
                let existed = self.store.state(&key).is_some();
                let before = self.store.tx_pending_count(Some(&key));
                self.emit(ShareShardRecord::State(record), out);
                if !existed || self.store.tx_pending_count(Some(&key)) != before {
                    self.tx_pending_effect(&[key], out);
                }
                ShareStateReply::Done
            }
            Err(e) => ShareStateReply::Refused(e),
        }
    }
}

impl CoordinatorShard for ShareStateShard {
    type Input = ShareStateInput;
    type Reply = ShareStateReply;
    type Record = ShareShardRecord;
    type Effect = ShareStateEffect;

    fn handle(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        input: ShareStateInput,
        out: &mut Emitted<Self>,
    ) {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        let reply = match input {
            ShareStateInput::Initialize { key, state } => {
                let record = self.store.initialize(&key, state, now);
                self.write_record(record, out)
            }
            ShareStateInput::Read { key, leader_epoch } => {
                if self.store.state(&key).is_none() {
                    ShareStateReply::Read(None)
                } else {
                    match self.store.read(&key, leader_epoch, now) {
                        Ok((read, record)) => {
                            if let Some(r) = record {
                                self.emit(ShareShardRecord::State(r), out);
                            }
                            ShareStateReply::Read(Some(read))
                        }
                        Err(e) => ShareStateReply::Refused(e),
                    }
                }
            }
            ShareStateInput::Write { key, state } => {
                let record = self.store.write(&key, &state, now);
                self.write_record(record, out)
            }
            ShareStateInput::Stage {
                producer_id,
                producer_epoch,
                writes,
            } => self.stage(producer_id, producer_epoch, writes, out),
            ShareStateInput::Reset { key, start_offset } => {
                let state_epoch = self
                    .store
                    .read_summary(&key)
                    .map_or(0, |s| s.state_epoch.saturating_add(1));
                let state = InitializeState {
                    state_epoch,
                    start_offset,
                };
                let record = self.store.initialize(&key, state, now);
                self.write_record(record, out)
            }
            ShareStateInput::Delete(keys) => {
                for key in &keys {
                    if let Some(tombstone) = self.store.delete(key) {
                        self.emit(ShareShardRecord::State(tombstone), out);
                        self.tx_pending_effect(std::slice::from_ref(key), out);
                    }
                }
                ShareStateReply::Done
            }
            ShareStateInput::WriteMarker {
                marker,
                coordinator_epoch,
            } => self.write_marker(marker, coordinator_epoch, out),
            ShareStateInput::SetLimits(limits) => {
                self.limits = limits;
                ShareStateReply::Done
            }
            ShareStateInput::Summary(key) => {
                ShareStateReply::Summary(self.store.read_summary(&key))
            }
            ShareStateInput::TxPending(key) => {
                ShareStateReply::Count(self.store.tx_pending_count(key.as_ref()))
            }
            ShareStateInput::GroupTxPending(group) => ShareStateReply::Count(
                self.keys(Some(&group))
                    .iter()
                    .map(|k| self.store.tx_pending_count(Some(k)))
                    .sum(),
            ),
            ShareStateInput::Keys(group) => ShareStateReply::Keys(self.keys(group.as_deref())),
            ShareStateInput::Batches(key) => {
                ShareStateReply::Batches(self.store.state(&key).map(|s| s.state_batches.clone()))
            }
            ShareStateInput::PruneOffsets => ShareStateReply::PruneOffsets(self.prune_offsets()),
            ShareStateInput::MarkersApplied => ShareStateReply::MarkersApplied(self.markers),
        };
        out.reply(token, reply);
    }

    fn tick(&mut self, now_ms: i64, _out: &mut Emitted<Self>) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    fn next_deadline(&self) -> Option<i64> {
        None
    }

    fn replay(&mut self, record: ShareShardRecord) {
        ShareStateShard::replay(self, &record);
    }

    fn replay_marker(&mut self, marker: TxnMarker) {
        self.apply_marker(marker);
    }

    fn loaded(&mut self, now_ms: i64, out: &mut Emitted<Self>) {
        self.now_ms = self.now_ms.max(now_ms);
        let counts = self
            .store
            .keys()
            .map(|k| (k.clone(), Some(self.store.tx_pending_count(Some(k)))))
            .collect();
        out.effects
            .push(ShareStateEffect::TxPending { all: true, counts });
    }

    fn landed(&mut self, partition: i32, offset: i64, record: Option<&ShareShardRecord>) {
        let end = self.ends.entry(partition).or_insert(0);
        *end = (*end).max(offset.saturating_add(1));
        let record = match record {
            Some(ShareShardRecord::State(r) | ShareShardRecord::Staged { record: r, .. }) => r,
            _ => return,
        };
        match record {
            ShareStateRecord::Snapshot { key, .. } => {
                self.snapshots
                    .entry(partition)
                    .or_default()
                    .insert(key.clone(), offset);
            }
            ShareStateRecord::Tombstone { key } => {
                if let Some(keys) = self.snapshots.get_mut(&partition) {
                    keys.remove(key);
                }
            }
            ShareStateRecord::Update { .. } => {}
        }
    }
}

#[cfg(test)]
#[path = "shard_tests.rs"]
mod tests;
