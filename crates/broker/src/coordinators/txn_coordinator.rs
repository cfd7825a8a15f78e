//! The transaction coordinator on the runtime: a [`TxnShard`] whose records live in
//! `__transaction_state`. What is particular to it is here: its coordinator epoch, the fresh
//! producer ids it is fed, and its effects — the markers the shard asks for are written by a
//! separate task per transaction (a COMMIT or ABORT control batch appended to every partition
//! of the transaction, and on the partitions of a transactional participant
//! (`__consumer_offsets`, `__share_group_state`: `crate::participants`) also handed to it),
//! which reports back so the shard can complete the transaction. A marker that cannot be
//! written is retried with backoff; a partition that no longer exists is skipped, as Kafka
//! skips deleted partitions. At the first load, markers a crash lost are written again before
//! anything is served, and transactions left in PrepareCommit/PrepareAbort get their markers
//! again.
//!
//! Markers are not fsynced before the transaction completes (they become durable with the
//! partition's next group commit, which a background flush starts at once on partitions that
//! fsync every write, or with the partition's lazy flushes otherwise). Instead the
//! Complete record is preceded, in the same fsync, by a `TxnRecord::Markers` record listing
//! the id's markers not yet known durable with their offsets. Log recovery keeps a prefix of
//! each partition, so at the next start a marker was lost iff its partition now ends at or
//! before its offset; such a marker is written again (and fsynced) before the broker serves
//! anyone, if its producer still has the transaction open there. This takes one fsync of a
//! busy data partition out of every commit's critical path (the next transaction of the id
//! waits for its predecessor to complete).
//!
//! Must not: answer before the records a reply depends on are fsynced; let a Complete record
//! become durable without the Markers record that covers its markers.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use shoal_core::coordinator::Emitted;
use shoal_core::txn_coordinator as tc;
use shoal_core::txn_coordinator::markers::{MarkerOutcome, MarkerWriting};
use shoal_core::txn_coordinator::{
    ListTransactionsRequest, ListTransactionsResponse, PendingMarker, ProducerId, TopicPartition,
    TransactionDescription, TxnConfig, TxnEffect, TxnInput, TxnReply, TxnRequest, TxnResponse,
    TxnShard, WriteMarkers,
};
use shoal_protocol::ErrorCode;
use tracing::{error, info, warn};

pub use super::runtime::Unavailable;
use super::runtime::{Host, Runtime};
use crate::node::NodeState;
use crate::participants::{MarkerWritten, Participant, Participants, TxnMarker};

pub use crate::node::TRANSACTION_STATE;
/// Backoff bounds between marker write attempts.
const MARKER_RETRY_MIN: Duration = Duration::from_millis(50);
const MARKER_RETRY_MAX: Duration = Duration::from_secs(2);

/// Handle to the transaction coordinator.
#[derive(Default)]
pub struct TxnService {
    runtime: Arc<Runtime<TxnShard>>,
}

/// File in the data directory holding a single node's last coordinator epoch.
pub use crate::seams::metadata_store::COORDINATOR_EPOCH_FILE;

impl TxnService {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replays `__transaction_state`, writes again the markers a crash lost, and starts the
    /// coordinator (which re-sends the markers of transactions found prepared). Markers on a
    /// participant's partition reach it through `participants` (see `crate::participants`);
    /// the coordinator keeps them for as long as it runs, so they should not keep the
    /// participants' services alive (a `Weak` does not).
    ///
    /// # Errors
    /// The log cannot be read, the coordinator epoch cannot be recorded, or a lost marker
    /// cannot be written again.
    pub async fn start<P: Participants + Clone>(
        &self,
        node: &Arc<NodeState>,
        participants: P,
    ) -> anyhow::Result<()> {
        let host = TxnHost {
            participants,
            runtime: Arc::downgrade(&self.runtime),
        };
        self.runtime.start(node, host).await
    }

    /// Sends one request and waits for its (possibly deferred) reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call(&self, request: TxnRequest) -> Result<TxnResponse, Unavailable> {
        match self.runtime.call(TxnInput::Request(request)).await? {
            TxnReply::Response(response) => Ok(response),
            _ => Err(Unavailable),
        }
    }

    /// DescribeTransactions.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn describe(
        &self,
        ids: Vec<String>,
    ) -> Result<Vec<TransactionDescription>, Unavailable> {
        match self.runtime.call(TxnInput::Describe(ids)).await? {
            TxnReply::Describe(described) => Ok(described),
            _ => Err(Unavailable),
        }
    }

    /// ListTransactions.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn list(
        &self,
        request: ListTransactionsRequest,
    ) -> Result<ListTransactionsResponse, Unavailable> {
        match self.runtime.call(TxnInput::List(request)).await? {
            TxnReply::List(listed) => Ok(listed),
            _ => Err(Unavailable),
        }
    }
}

/// The transaction coordinator's place in the broker: the participants its markers reach, and
/// its own runtime, to which the marker tasks report.
struct TxnHost<P> {
    participants: P,
    runtime: Weak<Runtime<TxnShard>>,
}

impl<P: Participants + Clone> Host<TxnShard> for TxnHost<P> {
    fn topic(&self) -> &'static str {
        TRANSACTION_STATE
    }

    /// Every load gets a new coordinator epoch, higher than every load's before it (in a
    /// cluster, every broker's: the new owner of a partition of the topic marks with a higher
    /// epoch than its previous owner did), recorded first. Partitions refuse markers older
    /// than the last they saw from the producer (TRANSACTION_COORDINATOR_FENCED), so a marker
    /// write still in flight from an earlier load cannot land after this one's.
    async fn new_shard(&self, node: &NodeState) -> anyhow::Result<TxnShard> {
        let epoch = node
            .coordinator_epochs
            .next()
            .await
            .map_err(|e| anyhow::anyhow!("cannot record a coordinator epoch: {e}"))?;
        Ok(TxnShard::new(txn_config(node), epoch))
    }

    /// At the first load, the markers the Markers records list that a crash lost are written
    /// again (and every listed partition fsynced) before anything is served, and the lists
    /// are then cleared durably, first thing. On a reload after a failed append the broker is
    /// serving, so nothing is rewritten: the lists stay as the log has them.
    async fn after_replay(
        &self,
        node: &NodeState,
        shard: &mut TxnShard,
        first: bool,
        out: &mut Emitted<TxnShard>,
    ) -> anyhow::Result<()> {
        if !first {
            return Ok(());
        }
        let coordinator_epoch = shard.machine().coordinator_epoch();
        let (rewritten, listed) = recover_markers(
            node,
            &self.participants,
            shard.listed_markers(),
            coordinator_epoch,
        )?;
        // Every listed partition durable before the lists are cleared (the records below).
        node.durability
            .commit(listed)
            .await
            .map_err(|e| anyhow::anyhow!("transaction markers not durable: {e}"))?;
        out.records.extend(shard.clear_listed_markers());
        info!(
            transactions = shard.machine().len(),
            markers_rewritten = rewritten,
            "transaction coordinator recovered its markers"
        );
        Ok(())
    }

    /// Fresh producer ids for the requests that may need one.
    fn pass_inputs(
        &self,
        node: &NodeState,
        shard: &TxnShard,
        queued: &[&TxnInput],
    ) -> Vec<TxnInput> {
        let wanted = shard.fresh_ids_wanted(queued.iter().copied());
        let mut ids = Vec::with_capacity(wanted);
        for _ in 0..wanted {
            match node.producer_ids.allocate() {
                Ok(id) => ids.push(ProducerId(id)),
                Err(e) => {
                    error!(error = %e, "cannot allocate a producer id");
                    break;
                }
            }
        }
        if ids.is_empty() {
            Vec::new()
        } else {
            vec![TxnInput::FreshIds(ids)]
        }
    }

    fn effects(&self, node: &Arc<NodeState>, effects: Vec<TxnEffect>) {
        for effect in effects {
            match effect {
                TxnEffect::WriteMarkers { markers, listed } => {
                    tokio::spawn(write_markers(
                        Arc::downgrade(node),
                        self.participants.clone(),
                        self.runtime.clone(),
                        markers,
                        listed,
                    ));
                }
                TxnEffect::Flush(partitions) => {
                    let partitions = partitions
                        .iter()
                        .filter_map(|tp| {
                            crate::markers::partition(node, &tp.topic, tp.partition).ok()
                        })
                        .collect();
                    flush_in_background(node, partitions);
                }
                TxnEffect::Stopped(violation) => error!(
                    %violation,
                    "transaction coordinator stopped on a broken invariant: it answers \
                     UNKNOWN_SERVER_ERROR until the broker restarts and reloads it from the log"
                ),
            }
        }
    }
}

fn txn_config(node: &NodeState) -> TxnConfig {
    let c = &node.config;
    TxnConfig {
        transaction_max_timeout_ms: c.long("transaction.max.timeout.ms") as i32,
        transactional_id_expiration_ms: c.long("transactional.id.expiration.ms"),
        two_phase_commit_enable: c.bool("transaction.two.phase.commit.enable"),
        ..TxnConfig::default()
    }
}

/// Writes again, and fsyncs, every listed marker a crash lost ([`tc::markers::lost_markers`]:
/// it is no longer at its offset and its producer still has a transaction open there; on a
/// participant's partition, always, and the participant is then handed the marker), then
/// fsyncs every listed partition. Runs before the broker serves requests, so nothing can have
/// been appended since recovery. Returns how many markers were written.
///
/// # Errors
/// A partition's producer state cannot be loaded, or a marker cannot be written or fsynced:
/// the transaction would stay open there, so the broker must not start.
fn recover_markers(
    node: &NodeState,
    participants: &impl Participants,
    pending: &BTreeMap<String, Vec<PendingMarker>>,
    coordinator_epoch: i32,
) -> anyhow::Result<(usize, Vec<Arc<crate::topic_registry::Partition>>)> {
    let mut written = 0;
    // Every listed marker is judged before any is written again (a rewrite appends where
    // another lost marker was; see `tc::markers::lost_markers`).
    let lost = tc::markers::lost_markers(
        pending.values().flatten(),
        |m| {
            let tp = &m.partition;
            let Ok(partition) = crate::markers::partition(node, &tp.topic, tp.partition) else {
                return Ok(None);
            };
            let log = partition.lock();
            let at = match log.iter_batches(m.offset).next() {
                Some(batch) => Some(batch?.header),
                None => None,
            };
            Ok::<_, anyhow::Error>(Some(at.is_some_and(|h| {
                h.base_offset() == m.offset
                    && h.is_control()
                    && h.producer_id() == m.producer_id.0
                    && h.producer_epoch() == m.producer_epoch.0
            })))
        },
        |tp| Participant::of(&tp.topic).is_some(),
        |m| {
            let tp = &m.partition;
            let Ok(partition) = crate::markers::partition(node, &tp.topic, tp.partition) else {
                return Ok(false);
            };
            let mut log = partition.lock();
            let config = crate::producer_state::state_config(&node.config);
            let mut producers = partition.producers(&mut log, config, node.now_ms())?;
            producers.sync_with(&mut log)?;
            let open = producers
                .state()
                .ongoing_txns()
                .any(|(_, pid)| pid.0 == m.producer_id.0);
            Ok::<bool, anyhow::Error>(open)
        },
    )?;
    for m in lost {
        let tp = &m.partition;
        let Ok(partition) = crate::markers::partition(node, &tp.topic, tp.partition) else {
            continue;
        };
        let commit = m.result.is_commit();
        crate::markers::write_marker(
            node,
            &partition,
            m.producer_id.0,
            m.producer_epoch.0,
            commit,
            coordinator_epoch,
        )
        .map_err(|code| {
            anyhow::anyhow!(
                "cannot write the lost marker of producer {} on {}-{}: error {}",
                m.producer_id.0,
                tp.topic,
                tp.partition,
                code.0
            )
        })?;
        warn!(topic = %tp.topic, partition = tp.partition, producer_id = m.producer_id.0, commit, "transaction marker lost in a crash written again");
        written += 1;
        if let Some(participant) = Participant::of(&tp.topic) {
            // The participant loaded (replayed its topic) before this marker existed.
            participant.hand_at_start(
                participants,
                TxnMarker {
                    partition: tp.partition,
                    producer_id: m.producer_id.0,
                    producer_epoch: m.producer_epoch.0,
                    commit,
                },
            );
        }
    }
    // Every listed partition, for the caller to make durable before the lists are cleared.
    let mut listed: Vec<Arc<crate::topic_registry::Partition>> = Vec::new();
    for m in pending.values().flatten() {
        if let Ok(partition) =
            crate::markers::partition(node, &m.partition.topic, m.partition.partition)
        {
            if !listed.iter().any(|p| Arc::ptr_eq(p, &partition)) {
                listed.push(partition);
            }
        }
    }
    Ok((written, listed))
}

/// Appends one transaction's markers to every partition, retrying the ones that fail until
/// each is written or its partition is gone, hands those on a participant's partition to the
/// participant, starts a background flush of the partitions, and reports completion with the
/// markers' offsets (see the module docs for why it does not wait for the fsync). The order
/// of work is `MarkerWriting`'s, which the simulator drives too.
///
/// In a cluster, a partition another broker owns gets its marker through WriteTxnMarkers to
/// that broker (`crate::peers`), which answers once it is durable; and the markers written
/// here are made durable before the transaction completes, since the coordinator that would
/// rewrite a lost one may be another broker's, which cannot read this one's logs.
async fn write_markers(
    node: Weak<NodeState>,
    participants: impl Participants,
    runtime: Weak<Runtime<TxnShard>>,
    markers: WriteMarkers,
    listed: Vec<TopicPartition>,
) {
    let mut writing = MarkerWriting::new(markers, listed);
    let mut to_flush = Vec::new();
    let mut backoff = MARKER_RETRY_MIN;
    while !writing.is_done() {
        let Some(node) = node.upgrade() else {
            return;
        };
        // One round: every partition left, a failed one retried after a pause.
        let mut to_commit = Vec::new();
        let mut remote: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        let mut sent = None;
        for _ in 0..writing.remaining() {
            let Some((tp, marker)) = writing.take_next() else {
                break;
            };
            sent = Some(marker);
            let partition = match crate::markers::partition(&node, &tp.topic, tp.partition) {
                Ok(p) => p,
                Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION) => {
                    warn!(topic = %tp.topic, partition = tp.partition, "transaction marker skipped: partition no longer exists");
                    writing.written(tp, MarkerOutcome::Gone);
                    continue;
                }
                Err(code) => {
                    match owned_elsewhere(&node, &tp) {
                        Some(owner) => remote.entry(owner).or_default().push(tp),
                        None => {
                            warn!(topic = %tp.topic, partition = tp.partition, ?code,
                                "transaction marker not written: the partition has no owner; retrying");
                            writing.written(tp, MarkerOutcome::Failed);
                        }
                    }
                    continue;
                }
            };
            let outcome = match crate::participants::write_marker(
                &node,
                &participants,
                &partition,
                marker,
                writing.coordinator_epoch(),
            )
            .await
            {
                // Written durably by its coordinator (`__share_group_state`): nothing to
                // flush or to list as possibly lost.
                Ok(MarkerWritten::Durable) => MarkerOutcome::Durable,
                Ok(MarkerWritten::At(_)) if node.in_cluster() => {
                    to_commit.push((tp, partition));
                    continue;
                }
                Ok(MarkerWritten::At(offset)) => {
                    to_flush.push(partition);
                    MarkerOutcome::Appended(offset)
                }
                Err(code) => {
                    warn!(topic = %tp.topic, partition = tp.partition, ?code, "transaction marker failed; retrying");
                    MarkerOutcome::Failed
                }
            };
            writing.written(tp, outcome);
        }
        if !to_commit.is_empty() {
            let partitions = to_commit.iter().map(|(_, p)| p.clone()).collect();
            let outcome = match node.durability.commit(partitions).await {
                Ok(()) => MarkerOutcome::Durable,
                Err(e) => {
                    warn!(error = %e, "transaction markers not committed; retrying");
                    MarkerOutcome::Failed
                }
            };
            for (tp, _) in to_commit {
                writing.written(tp, outcome);
            }
        }
        if let Some(marker) = sent {
            for (owner, partitions) in remote {
                let answers = send_markers(
                    &node,
                    owner,
                    &partitions,
                    marker,
                    writing.coordinator_epoch(),
                )
                .await;
                for (tp, code) in partitions.into_iter().zip(answers) {
                    let outcome = if code == ErrorCode::NONE {
                        MarkerOutcome::Durable
                    } else {
                        warn!(topic = %tp.topic, partition = tp.partition, owner, ?code,
                            "transaction marker refused by the partition's owner; retrying");
                        MarkerOutcome::Failed
                    };
                    writing.written(tp, outcome);
                }
            }
        }
        if !writing.is_done() {
            drop(node);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MARKER_RETRY_MAX);
        }
    }
    let Some(node) = node.upgrade() else {
        return;
    };
    // Under the partition's own policy: at once where every write is fsynced, else with its
    // lazy flushes (the Markers record covers them meanwhile).
    to_flush.retain(|p| flushes_every_write(&node, &p.topic));
    flush_in_background(&node, to_flush);
    let mut flushed = Vec::new();
    for tp in writing.partitions_to_read() {
        if let Ok(partition) = crate::markers::partition(&node, &tp.topic, tp.partition) {
            let offset = partition.lock().flushed_offset();
            flushed.push((tp, offset));
        }
    }
    // The reply only says the input was handled; nothing waits for it.
    let Some(runtime) = runtime.upgrade() else {
        return;
    };
    if let Ok(reply) = runtime.submit(writing.finish(flushed)).await {
        drop(reply);
    }
}

/// The live broker other than this one that owns `tp`, if any.
fn owned_elsewhere(node: &NodeState, tp: &TopicPartition) -> Option<i32> {
    node.ownership
        .owner(&tp.topic, tp.partition)
        .map(|o| o.node_id)
        .filter(|id| *id != node.node_id)
}

/// Sends `marker` for `partitions` to their owner `owner` (WriteTxnMarkers) and returns the
/// answer for each, in order: NONE once durable there. Every partition fails alike when the
/// owner cannot be reached or answers something else than what was asked.
async fn send_markers(
    node: &NodeState,
    owner: i32,
    partitions: &[TopicPartition],
    marker: TxnMarker,
    coordinator_epoch: i32,
) -> Vec<ErrorCode> {
    use shoal_protocol::messages::write_txn_markers_request as wr;
    use shoal_protocol::messages::{TopicName, WriteTxnMarkersRequest};
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let topics = by_topic
        .iter()
        .map(|(topic, indexes)| {
            wr::WritableTxnMarkerTopic::default()
                .with_name(TopicName(shoal_protocol::StrBytes::from_string(
                    (*topic).to_string(),
                )))
                .with_partition_indexes(indexes.clone())
        })
        .collect();
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![wr::WritableTxnMarker::default()
            .with_producer_id(shoal_protocol::messages::ProducerId(marker.producer_id))
            .with_producer_epoch(marker.producer_epoch)
            .with_transaction_result(marker.commit)
            .with_coordinator_epoch(coordinator_epoch)
            .with_topics(topics)]);
    let unreachable = vec![ErrorCode::NOT_LEADER_OR_FOLLOWER; partitions.len()];
    let Some(peer) = node
        .ownership
        .nodes()
        .into_iter()
        .find(|n| n.node_id == owner)
    else {
        return unreachable;
    };
    let response = match node.peers.request(&peer, 1, &request).await {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, "cannot send transaction markers");
            return unreachable;
        }
    };
    let mut answers: BTreeMap<(&str, i32), ErrorCode> = BTreeMap::new();
    for m in &response.markers {
        if m.producer_id.0 != marker.producer_id {
            continue;
        }
        for t in &m.topics {
            for p in &t.partitions {
                if let Some((topic, _)) = by_topic.get_key_value(t.name.0.as_str()) {
                    answers.insert((topic, p.partition_index), ErrorCode(p.error_code));
                }
            }
        }
    }
    partitions
        .iter()
        .map(|tp| {
            answers
                .get(&(tp.topic.as_str(), tp.partition))
                .copied()
                // A partition the answer leaves out was not written.
                .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
        })
        .collect()
}

/// Starts fsyncing `partitions` without waiting. A failure is only logged: the markers on them
/// stay listed in their ids' Markers records, and a restart writes them again if lost.
fn flush_in_background(node: &NodeState, partitions: Vec<Arc<crate::topic_registry::Partition>>) {
    if partitions.is_empty() {
        return;
    }
    let durability = node.durability.clone();
    tokio::spawn(async move {
        if let Err(e) = durability.commit(partitions).await {
            warn!(error = %e, "transaction markers not flushed");
        }
    });
}

/// Whether `topic` fsyncs every write before acknowledging it (`flush.messages` = 1).
fn flushes_every_write(node: &NodeState, topic: &str) -> bool {
    let Some(t) = node.topic(topic) else {
        return false;
    };
    crate::topic_registry::effective(&node.current_config(), &t.overrides(), "flush.messages")
        == "1"
}
