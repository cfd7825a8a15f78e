//! The share-state coordinator on the runtime: a [`ShareStateShard`] whose records live in
//! `__share_group_state` (decision 0019). What is particular to it is here: its configuration
//! (records per snapshot, the topic's partition count, the groups' delivery count limits, fed
//! again when they change), the producers its partitions' producer state knows after a load
//! (seeded into the shard's fence), the TX_PENDING counts it publishes for the metrics, and
//! pruning: the shard says which offsets replay still needs, this module stops them at each
//! partition's last stable offset and moves the log start there.
//!
//! Every write to `__share_group_state` goes through this runtime: the share partitions'
//! state writes, KIP-1289's stagings (the producer's transactional batches) and the
//! transactions' COMMIT / ABORT markers (from the transaction coordinator's marker task and
//! WriteTxnMarkers). The one exception is the lost-marker rewrite at start, before anything is
//! served, which appends the marker itself and queues it here (as for `__consumer_offsets`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use shoal_core::coordinator::Emitted;
use shoal_core::share_coordinator::shard::{
    DeliveryLimits, MarkerRefused, MarkersApplied, ShareStateEffect, ShareStateInput,
    ShareStateReply, ShareStateShard,
};
use shoal_core::share_coordinator::{
    InitializeState, ReadState, ShareCoordinatorConfig, SharePartitionKey, ShareStateError,
    StateBatch, StateSummary, WriteState,
};
use shoal_core::share_leader::NotPersisted;

pub use super::runtime::Unavailable;
use super::runtime::{Host, Runtime};
use crate::node::NodeState;
pub use crate::node::SHARE_GROUP_STATE;
use crate::participants::TxnMarker;
use crate::producer_state::state_config;

/// TX_PENDING counts of the share partitions with state, as of the last durable pass.
type TxPendingCounts = Arc<Mutex<BTreeMap<SharePartitionKey, i64>>>;

/// Handle to the share-state coordinator.
#[derive(Default)]
pub struct ShareStateService {
    runtime: Runtime<ShareStateShard>,
    tx_pending: TxPendingCounts,
}

impl ShareStateService {
    /// Replays `__share_group_state` and starts the coordinator.
    ///
    /// # Errors
    /// The log cannot be read or the configuration is invalid.
    pub async fn start(&self, node: &Arc<NodeState>) -> anyhow::Result<()> {
        self.runtime
            .start(
                node,
                ShareStateHost {
                    tx_pending: self.tx_pending.clone(),
                },
            )
            .await
    }

    async fn call(&self, input: ShareStateInput) -> Result<ShareStateReply, Unavailable> {
        self.runtime.call(input).await
    }

    /// ReadShareGroupState; None when the share partition has no state.
    ///
    /// # Errors
    /// The store's refusal (`Ok(Err)`), or [`Unavailable`].
    pub async fn read(
        &self,
        key: &SharePartitionKey,
        leader_epoch: i32,
    ) -> Result<Result<Option<ReadState>, ShareStateError>, Unavailable> {
        let input = ShareStateInput::Read {
            key: key.clone(),
            leader_epoch,
        };
        match self.call(input).await? {
            ShareStateReply::Read(read) => Ok(Ok(read)),
            ShareStateReply::Refused(e) => Ok(Err(e)),
            _ => Err(Unavailable),
        }
    }

    /// InitializeShareGroupState, WriteShareGroupState, a reset or deletes: a write whose
    /// answer is done or refused.
    ///
    /// # Errors
    /// The store's refusal (`Ok(Err)`), or [`Unavailable`].
    async fn write_input(
        &self,
        input: ShareStateInput,
    ) -> Result<Result<(), ShareStateError>, Unavailable> {
        match self.call(input).await? {
            ShareStateReply::Done => Ok(Ok(())),
            ShareStateReply::Refused(e) => Ok(Err(e)),
            _ => Err(Unavailable),
        }
    }

    /// InitializeShareGroupState.
    ///
    /// # Errors
    /// As [`ShareStateService::read`].
    pub async fn initialize(
        &self,
        key: &SharePartitionKey,
        state: InitializeState,
    ) -> Result<Result<(), ShareStateError>, Unavailable> {
        self.write_input(ShareStateInput::Initialize {
            key: key.clone(),
            state,
        })
        .await
    }

    /// WriteShareGroupState.
    ///
    /// # Errors
    /// As [`ShareStateService::read`].
    pub async fn write(
        &self,
        key: &SharePartitionKey,
        state: WriteState,
    ) -> Result<Result<(), ShareStateError>, Unavailable> {
        self.write_input(ShareStateInput::Write {
            key: key.clone(),
            state,
        })
        .await
    }

    /// Restarts a share partition at `start_offset` under the next state epoch.
    ///
    /// # Errors
    /// As [`ShareStateService::read`].
    pub async fn reset(
        &self,
        key: &SharePartitionKey,
        start_offset: i64,
    ) -> Result<Result<(), ShareStateError>, Unavailable> {
        self.write_input(ShareStateInput::Reset {
            key: key.clone(),
            start_offset,
        })
        .await
    }

    /// Deletes the state of share partitions.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn delete(&self, keys: Vec<SharePartitionKey>) -> Result<(), Unavailable> {
        match self.write_input(ShareStateInput::Delete(keys)).await? {
            Ok(()) => Ok(()),
            Err(_) => Err(Unavailable),
        }
    }

    /// KIP-1289: persists the producer's stagings as its transactional batches, all or
    /// nothing.
    ///
    /// # Errors
    /// The shard's refusal (a share partition's write, or the fence), or unavailability.
    pub async fn stage(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        writes: Vec<(SharePartitionKey, WriteState)>,
    ) -> Result<(), NotPersisted> {
        let input = ShareStateInput::Stage {
            producer_id,
            producer_epoch,
            writes,
        };
        match self.call(input).await {
            Ok(ShareStateReply::Done) => Ok(()),
            Ok(ShareStateReply::StageRefused(r)) => Err(NotPersisted::Refused(r)),
            _ => Err(NotPersisted::Unavailable),
        }
    }

    /// Writes a transaction's COMMIT or ABORT marker to its `__share_group_state` partition
    /// (durably) and returns the share partitions whose stagings it resolved.
    ///
    /// # Errors
    /// The marker's refusal (`Ok(Err)`), or [`Unavailable`].
    pub async fn write_marker(
        &self,
        marker: TxnMarker,
        coordinator_epoch: i32,
    ) -> Result<Result<Vec<SharePartitionKey>, MarkerRefused>, Unavailable> {
        let input = ShareStateInput::WriteMarker {
            marker,
            coordinator_epoch,
        };
        match self.call(input).await? {
            ShareStateReply::Marker(result) => Ok(result),
            _ => Err(Unavailable),
        }
    }

    /// A marker appended to the topic before the broker serves (the lost-marker rewrite),
    /// applied ahead of every input queued after this returns.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running.
    pub fn queue_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        self.runtime.queue_marker(marker)
    }

    /// ReadShareGroupStateSummary.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn summary(
        &self,
        key: &SharePartitionKey,
    ) -> Result<Option<StateSummary>, Unavailable> {
        match self.call(ShareStateInput::Summary(key.clone())).await? {
            ShareStateReply::Summary(s) => Ok(s),
            _ => Err(Unavailable),
        }
    }

    async fn count(&self, input: ShareStateInput) -> Result<i64, Unavailable> {
        match self.call(input).await? {
            ShareStateReply::Count(n) => Ok(n),
            _ => Err(Unavailable),
        }
    }

    /// Offsets TX_PENDING in `key`'s persisted state, or in every share partition's.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn tx_pending(&self, key: Option<&SharePartitionKey>) -> Result<i64, Unavailable> {
        self.count(ShareStateInput::TxPending(key.cloned())).await
    }

    /// Offsets TX_PENDING in the share partitions of `group_id`.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn group_tx_pending(&self, group_id: &str) -> Result<i64, Unavailable> {
        self.count(ShareStateInput::GroupTxPending(group_id.to_string()))
            .await
    }

    /// The share partitions with state, of one group or all, in key order.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn keys(
        &self,
        group_id: Option<&str>,
    ) -> Result<Vec<SharePartitionKey>, Unavailable> {
        match self
            .call(ShareStateInput::Keys(group_id.map(str::to_string)))
            .await?
        {
            ShareStateReply::Keys(keys) => Ok(keys),
            _ => Err(Unavailable),
        }
    }

    /// The persisted state batches of a share partition.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn batches(
        &self,
        key: &SharePartitionKey,
    ) -> Result<Option<Vec<StateBatch>>, Unavailable> {
        match self.call(ShareStateInput::Batches(key.clone())).await? {
            ShareStateReply::Batches(b) => Ok(b),
            _ => Err(Unavailable),
        }
    }

    /// The markers applied since the load (replayed or live).
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn markers_applied(&self) -> Result<MarkersApplied, Unavailable> {
        match self.call(ShareStateInput::MarkersApplied).await? {
            ShareStateReply::MarkersApplied(m) => Ok(m),
            _ => Err(Unavailable),
        }
    }

    /// The TX_PENDING counts of the share partitions with state, as of the last durable pass
    /// (for the metrics; never waits).
    pub fn tx_pending_counts(&self) -> Vec<(SharePartitionKey, i64)> {
        self.tx_pending
            .lock()
            .expect("share tx pending lock poisoned")
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }

    /// Advances the log start offset of every `__share_group_state` partition to the first
    /// offset replay still needs (the shard's answer: the earliest latest snapshot of the
    /// share partitions stored there, or the end of what was written when none is), never
    /// past the partition's last stable offset (an open transaction's stagings, KIP-1289:
    /// its marker must find the producer state, and its batches stay until it resolves them).
    /// Appends after the answer only add later offsets, so the answer stays safe to prune to.
    /// Returns how many offsets became unreachable.
    ///
    /// # Errors
    /// A log start offset could not be checkpointed, a segment not deleted, or the
    /// coordinator is unavailable (`Ok(0)` then: nothing pruned).
    pub async fn prune(&self, node: &NodeState) -> Result<i64, shoal_storage::StorageError> {
        let needed = match self.call(ShareStateInput::PruneOffsets).await {
            Ok(ShareStateReply::PruneOffsets(needed)) => needed,
            _ => return Ok(0),
        };
        let Some(topic) = node.topic(SHARE_GROUP_STATE) else {
            return Ok(0);
        };
        let mut pruned = 0;
        for (index, needed) in needed {
            let Some(partition) = topic.partition(index) else {
                continue;
            };
            let mut log = partition.lock();
            let stable = partition
                .producers(&mut log, state_config(&node.config), node.now_ms())?
                .last_stable_offset(&log);
            let point = needed.min(stable).min(log.log_end_offset());
            let before = log.log_start_offset();
            if point > before {
                let after = log.delete_records_before(point)?;
                pruned += after - before;
            }
        }
        Ok(pruned)
    }
}

/// The share-state coordinator's place in the broker.
struct ShareStateHost {
    tx_pending: TxPendingCounts,
}

/// Each share group's delivery count limit, and the groups with a dead-letter queue, as the
/// broker's configuration says now.
fn delivery_limits(node: &NodeState) -> DeliveryLimits {
    let limit = |group: &str| {
        i16::try_from(node.share_group_settings(group).delivery_count_limit).unwrap_or(i16::MAX)
    };
    DeliveryLimits {
        // A group without overrides takes the broker's value ("" has none).
        default: limit(""),
        groups: node
            .groups_with_configs()
            .into_iter()
            .map(|g| {
                let l = limit(&g);
                (g, l)
            })
            .collect(),
        dead_letter_groups: node
            .groups_with_configs()
            .into_iter()
            .filter(|g| {
                node.dead_letter_queues_enabled()
                    && node.share_group_settings(g).has_dead_letter_topic
            })
            .collect(),
    }
}

impl Host<ShareStateShard> for ShareStateHost {
    fn topic(&self) -> &'static str {
        SHARE_GROUP_STATE
    }

    async fn new_shard(&self, node: &NodeState) -> anyhow::Result<ShareStateShard> {
        let config = ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: node
                .config
                .long("share.coordinator.snapshot.update.records.per.snapshot")
                as u32,
            ..ShareCoordinatorConfig::default()
        };
        let partitions = super::log_io::partition_count(node, SHARE_GROUP_STATE);
        ShareStateShard::new(config, partitions, delivery_limits(node))
            .map_err(|e| anyhow::anyhow!("share coordinator config: {e}"))
    }

    /// Seeds the shard's fence with what each partition's producer state knows (epochs of
    /// batches pruned since, the coordinator epochs of markers).
    async fn after_replay(
        &self,
        node: &NodeState,
        shard: &mut ShareStateShard,
        _first: bool,
        _out: &mut Emitted<ShareStateShard>,
    ) -> anyhow::Result<()> {
        let Some(topic) = node.topic(SHARE_GROUP_STATE) else {
            return Ok(());
        };
        for partition in topic.partitions() {
            let mut log = partition.lock();
            let producers =
                partition.producers(&mut log, state_config(&node.config), node.now_ms())?;
            for (id, entry) in producers.state().entries() {
                shard.seed_producer(
                    partition.index,
                    id.0,
                    entry.epoch().0,
                    entry.coordinator_epoch(),
                );
            }
        }
        Ok(())
    }

    /// The groups' delivery count limits, when they changed, before a pass that writes a
    /// marker (the only input that reads them; a state write does not pay for them).
    fn pass_inputs(
        &self,
        node: &NodeState,
        shard: &ShareStateShard,
        queued: &[&ShareStateInput],
    ) -> Vec<ShareStateInput> {
        if !queued
            .iter()
            .any(|i| matches!(i, ShareStateInput::WriteMarker { .. }))
        {
            return Vec::new();
        }
        let limits = delivery_limits(node);
        if &limits == shard.limits() {
            Vec::new()
        } else {
            vec![ShareStateInput::SetLimits(limits)]
        }
    }

    fn effects(&self, _node: &Arc<NodeState>, effects: Vec<ShareStateEffect>) {
        let mut counts = self
            .tx_pending
            .lock()
            .expect("share tx pending lock poisoned");
        for effect in effects {
            match effect {
                ShareStateEffect::TxPending { all, counts: new } => {
                    if all {
                        counts.clear();
                    }
                    for (key, n) in new {
                        match n {
                            Some(n) => counts.insert(key, n),
                            None => counts.remove(&key),
                        };
                    }
                }
            }
        }
    }
}
