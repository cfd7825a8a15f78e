//! Share partitions on this broker (KIP-932), as their share-partition leader holds them: the
//! live `SharePartition` machines and the share sessions of share consumers. Their persisted
//! state is the share-state coordinator's (`crate::coordinators::share_coordinator`, on the
//! one coordinator runtime), which this module reads and writes as Kafka's share-partition
//! leader does through the share-state RPCs.
//!
//! Each share partition (group × topic partition) has one slot whose async mutex serialises
//! every change to it *and* its persistence: a change is applied to the machine, the state
//! write it returns goes to the share-state coordinator, which appends it to
//! `__share_group_state` (the partition Kafka's hash of "group:topicId:partition" picks) and
//! fsyncs it with the other writes of its pass, and only then is the request answered. So an
//! acknowledgement the client saw succeed survives kill -9, and a restart rebuilds every share
//! partition from the replayed records: acknowledged records are never delivered again,
//! records that were only acquired are delivered again (acquisitions are not persisted, as in
//! Kafka).
//!
//! A share partition is created on its first ShareFetch: from its persisted state, or else at
//! the offset `share.auto.offset.reset` gives (latest, earliest, by_duration). Acquisition
//! locks expire in a background task; expiries, releases and acknowledgements wake share
//! fetches waiting for records.
//!
//! A machine that finds one of its invariants broken (a bug, see `shoal_core::share_partition`)
//! stops: [`refusal_code`] logs it once, as an error naming the group, the topic partition and
//! the invariant, and that share partition answers UNKNOWN_SERVER_ERROR from then on (until
//! the broker restarts and rebuilds it from its persisted state, which the offending call
//! never reached); the other share partitions are served as before.
//!
//! Everything here takes the node's state (`crate::node::NodeState`). Must not: import the
//! broker, a handler, or a coordinator other than its share-state coordinator (a transaction's
//! marker comes in through `crate::participants`).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::share_coordinator::shard::MarkersApplied;
use shoal_core::share_coordinator::{SharePartitionKey, StateSummary, TopicId, WriteState};
use shoal_core::share_leader::{self, Loading, Staging, Unpersisted};
use shoal_core::share_partition::{AckBatch, ShareError, SharePartition, SharePartitionConfig};
use shoal_core::share_session::{SessionKey, ShareSessionCache, TopicIdPartition};
use shoal_core::txn_share_ack::Refusal;
use shoal_protocol::ErrorCode;
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn};

use crate::coordinators::share_coordinator::{ShareStateService, Unavailable};
use crate::group_configs::AutoOffsetReset;
use crate::node::NodeState;
use crate::participants::TxnMarker;
use crate::share_state;

pub use crate::node::SHARE_GROUP_STATE;
/// Leader epoch of every share partition: one node never changes leader.
const LEADER_EPOCH: i32 = 0;
/// How often acquisition locks are checked for expiry at most.
const LOCK_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// One share partition's machine, created on first use.
#[derive(Default)]
pub struct Slot {
    pub state: tokio::sync::Mutex<Option<SharePartition>>,
}

/// Everything share partitions need on the broker.
pub struct ShareManager {
    pub sessions: Mutex<ShareSessionCache>,
    slots: Mutex<HashMap<SharePartitionKey, Arc<Slot>>>,
    /// The persisted share-group state: the share-state coordinator.
    pub state: ShareStateService,
    /// Woken when records become available again (release, expiry, acknowledgement).
    pub released: Arc<Notify>,
    /// Woken after a state write, which may have made records ARCHIVING
    /// (`crate::dead_letter`).
    pub dead_letters_due: Arc<Notify>,
    /// Share partitions whose dead-letter partition may already hold dead letters of their
    /// ARCHIVING records (loaded with some, or an attempt failed part way): scanned before
    /// writing (`crate::dead_letter`).
    dead_letter_unverified: Mutex<std::collections::HashSet<SharePartitionKey>>,
}

/// The producer a transactional write of share state belongs to (KIP-1289 stagings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// Offsets TX_PENDING reported when the share-state coordinator cannot answer: the checks
/// that read them (a `share.version` downgrade, a reset or delete of a group) refuse what they
/// cannot verify.
const TX_PENDING_UNKNOWN: i64 = i64::MAX;

impl std::fmt::Debug for ShareManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShareManager")
    }
}

/// A total order of share-partition keys (the order slots are locked in).
fn key_order(a: &SharePartitionKey, b: &SharePartitionKey) -> std::cmp::Ordering {
    (&a.group_id, a.topic_id.0, a.partition).cmp(&(&b.group_id, b.topic_id.0, b.partition))
}

/// One share partition of a TxnShareAcknowledge's staging.
pub struct StagePart {
    pub key: SharePartitionKey,
    pub batches: Vec<AckBatch>,
    /// Where the transaction carries the dead letters of its REJECTs (None: after the commit,
    /// through ARCHIVING).
    pub dead_letters: Option<crate::dead_letter::InTransaction>,
}

/// Whether any batch REJECTs.
pub fn has_reject(batches: &[AckBatch]) -> bool {
    batches.iter().any(|b| {
        b.ack_types
            .iter()
            .any(|&t| t == shoal_core::share_partition::AcknowledgeType::Reject.id())
    })
}

/// A connection's id for share sessions.
pub fn connection_id(peer: SocketAddr) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.hash(&mut h);
    h.finish()
}

impl ShareManager {
    /// An empty manager; [`ShareManager::start`] starts its share-state coordinator.
    pub fn new(broker_config: &crate::config::BrokerConfig) -> anyhow::Result<Self> {
        Ok(ShareManager {
            sessions: Mutex::new(ShareSessionCache::new(
                broker_config.long("group.share.max.share.sessions") as usize,
            )),
            slots: Mutex::new(HashMap::new()),
            state: ShareStateService::default(),
            released: Arc::new(Notify::new()),
            dead_letters_due: Arc::new(Notify::new()),
            dead_letter_unverified: Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Whether `key`'s dead letters must be looked for before they are written.
    pub(crate) fn dead_letter_unverified(&self, key: &SharePartitionKey) -> bool {
        self.dead_letter_unverified
            .lock()
            .expect("dead-letter set lock poisoned")
            .contains(key)
    }

    pub(crate) fn mark_dead_letter_unverified(&self, key: &SharePartitionKey) {
        self.dead_letter_unverified
            .lock()
            .expect("dead-letter set lock poisoned")
            .insert(key.clone());
    }

    /// `key` has no ARCHIVING record left whose dead letter may exist.
    pub(crate) fn dead_letter_verified(&self, key: &SharePartitionKey) {
        self.dead_letter_unverified
            .lock()
            .expect("dead-letter set lock poisoned")
            .remove(key);
    }

    /// Loads the share-state coordinator (replays `__share_group_state`) and starts it.
    ///
    /// # Errors
    /// The log cannot be read.
    pub async fn start(&self, node: &Arc<NodeState>) -> anyhow::Result<()> {
        self.state.start(node).await
    }

    /// The share-state participant (see `crate::participants`): writes a transaction's marker
    /// to its `__share_group_state` partition through the share-state coordinator, which
    /// resolves the persisted stagings ([`shoal_core::share_coordinator::ShareStateStore::
    /// apply_marker`], as replay does) and answers once the marker is durable; then each live
    /// share partition holding the producer's stagings resolves its records and waiting
    /// fetches are woken. The live machines' resolutions are not written again: the marker in
    /// the log is their record, and the store already holds what they decide.
    ///
    /// # Errors
    /// The marker's refusal (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED), or
    /// COORDINATOR_NOT_AVAILABLE when it could not be written (retried by the writer).
    pub async fn write_marker(
        &self,
        node: &NodeState,
        marker: TxnMarker,
        coordinator_epoch: i32,
    ) -> Result<(), ErrorCode> {
        let resolved = match self.state.write_marker(marker, coordinator_epoch).await {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(refused)) => return Err(ErrorCode(refused.error_code().0)),
            Err(Unavailable) => return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        };
        let mut wake = false;
        for key in resolved {
            let Some(slot) = self.existing_slot(&key) else {
                continue;
            };
            let mut state = slot.state.lock().await;
            let Some(sp) = state.as_mut() else { continue };
            let outcome =
                match sp.apply_marker(marker.producer_id, marker.producer_epoch, marker.commit) {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        refusal_code(node, &key, &e);
                        continue;
                    }
                };
            node.metrics
                .tx_pending_resolved(&outcome.staged_at_ms, node.now_ms());
            wake |= outcome.wake;
        }
        if wake {
            self.released.notify_waiters();
        }
        Ok(())
    }

    /// A marker appended to a `__share_group_state` partition at start (the lost-marker
    /// rewrite, before anything is served; no share partition is live yet): queued for the
    /// share-state coordinator ahead of every request. False if it is not running.
    pub fn queue_marker_at_start(&self, marker: TxnMarker) -> bool {
        self.state.queue_marker(marker).is_ok()
    }

    /// The markers the share-state coordinator applied since it loaded (replayed or live).
    pub async fn markers_applied(&self) -> MarkersApplied {
        self.state.markers_applied().await.unwrap_or_default()
    }

    /// Offsets TX_PENDING in the persisted state of `key`, or of every share partition when
    /// None (the `share.version` downgrade check and the in-use checks of reset and delete).
    pub async fn tx_pending_records(&self, key: Option<&SharePartitionKey>) -> i64 {
        self.state
            .tx_pending(key)
            .await
            .unwrap_or(TX_PENDING_UNKNOWN)
    }

    /// Stages `member_id`'s acknowledgements in `producer`'s transaction (TxnShareAcknowledge,
    /// KIP-1289 §3.2 step 8), all or nothing across every share partition of `parts`: each
    /// partition's batches are staged on a copy of its machine (every offset must be ACQUIRED
    /// by the member), and only when every copy accepted are the stagings persisted by the
    /// share-state coordinator — the producer's transactional batches in the
    /// `__share_group_state` partitions, fsynced — and the copies put in place. The caller has
    /// registered those state partitions in the transaction, so its COMMIT or ABORT marker
    /// resolves them.
    ///
    /// A part with a dead-letter partition ([`crate::dead_letter::in_transaction`], which the
    /// caller registered in the transaction too) carries its REJECTs' dead letters in the
    /// transaction: they are written there after the copies accepted and before the staging
    /// is persisted, and the staging records that they were, so the COMMIT archives those
    /// records at once — the dead letters visible to read_committed readers exactly when the
    /// transaction commits, and never for an aborted one (issue 31).
    ///
    /// Slots are locked in key order, so two requests over the same partitions cannot
    /// deadlock; `parts` must not name a share partition twice.
    ///
    /// # Errors
    /// The first refused partition with its code (INVALID_REQUEST, INVALID_RECORD_STATE) and
    /// a message; or, with no partition named, PRODUCER_FENCED when the transaction already
    /// ended on a state partition, KAFKA_STORAGE_ERROR when the write (of the staging or the
    /// dead letters) failed. Nothing is staged on error.
    pub async fn stage(
        &self,
        node: &NodeState,
        producer: TxnProducer,
        member_id: &str,
        mut parts: Vec<StagePart>,
    ) -> Result<(), Refusal> {
        parts.sort_by(|a, b| key_order(&a.key, &b.key));
        let slots: Vec<Arc<Slot>> = parts.iter().map(|p| self.slot(&p.key)).collect();
        let mut guards = Vec::with_capacity(slots.len());
        for slot in &slots {
            guards.push(slot.state.lock().await);
        }
        let request = parts.iter().zip(guards.iter()).map(|(p, guard)| {
            let carried = p.dead_letters.is_some() && has_reject(&p.batches);
            (&p.key, guard.as_ref(), &p.batches[..], carried)
        });
        let staging = Staging::on_copies(
            request,
            node.now_ms(),
            member_id,
            producer.producer_id,
            producer.producer_epoch,
        )
        .map_err(|refused| {
            // The copy that broke an invariant was dropped: stop the machine it copied.
            let original = guards.get_mut(refused.index).and_then(|g| g.as_mut());
            if let (Some(v), Some(sp)) = (refused.violation(), original) {
                sp.stop(v.clone());
            }
            if let Some(e) = &refused.error {
                refusal_code(node, &refused.key, e);
            }
            refused.refusal()
        })?;
        // The dead letters first: a staging that claims them must never exist without them.
        for (part, (_, copy)) in parts.iter().zip(staging.copies()) {
            let Some(to) = part.dead_letters.as_ref() else {
                continue;
            };
            let ranges = copy.dead_letters_of(&part.batches);
            let pair = (producer.producer_id, producer.producer_epoch);
            match crate::dead_letter::write_in_transaction(node, &part.key, to, pair, &ranges).await
            {
                Ok(written) => node
                    .metrics
                    .dead_letters_written(&part.key.group_id, written),
                Err(code) => {
                    node.metrics.dead_letter_failed(&part.key.group_id);
                    error!(key = ?part.key, ?code, "dead letters of a staging not written");
                    return Err(Refusal::request(
                        ErrorCode::KAFKA_STORAGE_ERROR,
                        "the dead letters could not be written",
                    ));
                }
            }
        }
        let writes = staging.writes(LEADER_EPOCH);
        let outcome = if writes.is_empty() {
            Ok(())
        } else if let Some((key, _)) = writes
            .iter()
            .find(|(key, _)| !share_state::served_here(node, key))
        {
            // No RPC carries a staging to another broker yet (decision 0027).
            warn!(
                ?key,
                "staging for a share-state partition owned by another broker"
            );
            Err(shoal_core::share_leader::NotPersisted::Unavailable)
        } else {
            let (producer_id, producer_epoch) = staging.producer();
            self.state.stage(producer_id, producer_epoch, writes).await
        };
        if let Err(e) = &outcome {
            error!(error = ?e, "share state staging not persisted");
        }
        for (guard, (_, copy)) in guards.iter_mut().zip(staging.persisted(outcome)?) {
            **guard = Some(copy);
        }
        Ok(())
    }

    /// The slot of a share partition (created empty on first use).
    pub fn slot(&self, key: &SharePartitionKey) -> Arc<Slot> {
        self.slots
            .lock()
            .expect("share slots lock poisoned")
            .entry(key.clone())
            .or_default()
            .clone()
    }

    fn existing_slot(&self, key: &SharePartitionKey) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .expect("share slots lock poisoned")
            .get(key)
            .cloned()
    }

    pub(crate) fn existing_slots(&self) -> Vec<(SharePartitionKey, Arc<Slot>)> {
        self.slots
            .lock()
            .expect("share slots lock poisoned")
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect()
    }

    /// Advances the log start offset of every `__share_group_state` partition to the oldest
    /// record replay still needs (Kafka's share-state pruning; see
    /// `ShareStateService::prune`: never past an open transaction's stagings). First deletes
    /// (tombstones) the state of share partitions whose topic no longer exists, which would
    /// otherwise hold pruning back for ever. Returns how many offsets became unreachable.
    ///
    /// # Errors
    /// A partition's log start offset could not be checkpointed or a segment not deleted.
    pub async fn prune(&self, node: &NodeState) -> Result<i64, shoal_storage::StorageError> {
        let orphans: Vec<SharePartitionKey> = self
            .state
            .keys(None)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|k| {
                node.topic_by_id(uuid::Uuid::from_bytes(k.topic_id.0))
                    .is_none()
            })
            .collect();
        if !orphans.is_empty() {
            match self.delete(node, &orphans).await {
                Ok(()) => info!(
                    share_partitions = orphans.len(),
                    "share state of deleted topics removed"
                ),
                Err(code) => warn!(?code, "cannot remove the share state of deleted topics"),
            }
        }
        self.state.prune(node).await
    }

    /// Persists the state write of a change to `key`'s machine and gives the change's answer
    /// once it is durable (the caller answers only then).
    ///
    /// # Errors
    /// The write was refused by the store or could not be made durable.
    pub async fn persisted<T>(
        &self,
        node: &NodeState,
        key: &SharePartitionKey,
        change: Unpersisted<T>,
    ) -> Result<T, ErrorCode> {
        let outcome = match change.write(LEADER_EPOCH) {
            Some(write) => {
                let outcome = self.write(node, key, write).await;
                self.dead_letters_due.notify_one();
                outcome
            }
            None => Ok(()),
        };
        change.persisted(outcome)
    }

    async fn write(
        &self,
        node: &NodeState,
        key: &SharePartitionKey,
        write: WriteState,
    ) -> Result<(), ErrorCode> {
        share_state::write(node, &self.state, key, write)
            .await
            .inspect_err(|code| error!(?key, ?code, "share state not written"))
    }

    /// Creates the machine of `key` in `state` if it has none: from the persisted state, or
    /// at the offset `share.auto.offset.reset` picks (persisted first).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, or the store's refusal.
    pub async fn ensure_initialized(
        &self,
        node: &NodeState,
        key: &SharePartitionKey,
        state: &mut Option<SharePartition>,
    ) -> Result<(), ErrorCode> {
        let config = partition_config(node, &key.group_id);
        if let Some(sp) = state.as_mut() {
            if sp.config() != &config {
                let _ = sp.set_config(config);
            }
            return Ok(());
        }
        // A read storing a new leader epoch writes it (durably) before answering.
        let persisted = share_state::read(node, &self.state, key, LEADER_EPOCH).await?;
        let unusable = |e: ShareError| {
            error!(?key, error = %e, "persisted share state unusable");
            ErrorCode::UNKNOWN_SERVER_ERROR
        };
        let machine = match Loading::read(config, persisted.as_ref()).map_err(unusable)? {
            Loading::Ready(machine) => machine,
            Loading::Persist(pending) => self.persisted(node, key, pending).await?,
            Loading::PickStart(pick) => {
                let initializing = pick.start_at(reset_offset(node, key)?);
                share_state::initialize(node, &self.state, key, initializing.state()).await?;
                initializing.initialized().map_err(|e| {
                    error!(?key, error = %e, "cannot create share partition");
                    ErrorCode::UNKNOWN_SERVER_ERROR
                })?
            }
        };
        if machine.archiving_count() > 0 {
            // Persisted ARCHIVING: their dead letters may be written already.
            self.mark_dead_letter_unverified(key);
            self.dead_letters_due.notify_one();
        }
        *state = Some(machine);
        Ok(())
    }

    /// Releases what `member` holds in the share partitions of a closed session.
    pub async fn release_member(
        &self,
        node: &NodeState,
        group_id: &str,
        member_id: &str,
        partitions: impl IntoIterator<Item = TopicIdPartition>,
    ) {
        for tp in partitions {
            let key = SharePartitionKey::new(group_id, TopicId(tp.topic_id), tp.partition);
            let slot = self.slot(&key);
            let mut state = slot.state.lock().await;
            let Some(sp) = state.as_mut() else { continue };
            let released = match sp.release_member(member_id, node.now_ms()) {
                Ok(write) => share_leader::changed(write),
                Err(e) => {
                    refusal_code(node, &key, &e);
                    continue;
                }
            };
            if let Err(code) = self.persisted(node, &key, released).await {
                warn!(
                    ?key,
                    ?code,
                    "releasing a member's records was not persisted"
                );
            }
        }
        self.released.notify_waiters();
    }

    /// A connection closed: its share sessions end and their members' records are released.
    pub async fn connection_closed(&self, node: &NodeState, peer: SocketAddr) {
        let closed = self
            .sessions
            .lock()
            .expect("share sessions lock poisoned")
            .connection_closed(connection_id(peer));
        for (key, session) in closed {
            self.release_member(
                node,
                &key.group_id,
                &key.member_id,
                session.partitions.iter().copied(),
            )
            .await;
        }
    }

    /// Closes a session after its final request and releases what its member holds.
    pub async fn close_session(&self, node: &NodeState, key: &SessionKey) {
        let closed = self
            .sessions
            .lock()
            .expect("share sessions lock poisoned")
            .close(key);
        if let Some(session) = closed {
            self.release_member(
                node,
                &key.group_id,
                &key.member_id,
                session.partitions.iter().copied(),
            )
            .await;
        }
    }

    /// The live share partitions' windows and transactional-acknowledgement counters, for
    /// metrics. Partitions busy at the moment are skipped.
    pub fn in_flight(&self) -> Vec<(SharePartitionKey, crate::metrics::ShareWindow)> {
        let mut out: Vec<(SharePartitionKey, crate::metrics::ShareWindow)> = self
            .existing_slots()
            .into_iter()
            .filter_map(|(key, slot)| {
                let state = slot.state.try_lock().ok()?;
                let sp = state.as_ref()?;
                let counts = sp.counts();
                Some((
                    key,
                    crate::metrics::ShareWindow {
                        start_offset: sp.start_offset(),
                        end_offset: sp.end_offset(),
                        in_flight: sp.in_flight_count(),
                        acquired: counts.acquired,
                        available: counts.available,
                        tx_pending: sp.tx_pending_count(),
                        txn: sp.txn_stats(),
                    },
                ))
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.0.group_id, a.0.topic_id.0, a.0.partition).cmp(&(
                &b.0.group_id,
                b.0.topic_id.0,
                b.0.partition,
            ))
        });
        out
    }

    /// The persisted summary of a share partition (start offset, delivery-complete count).
    pub async fn summary(&self, node: &NodeState, key: &SharePartitionKey) -> Option<StateSummary> {
        share_state::summary(node, &self.state, key)
            .await
            .ok()
            .flatten()
    }

    /// Offsets TX_PENDING in any share partition of `group_id`: an open transaction still
    /// holds the group's state, so resetting or deleting it is refused as for a group with
    /// members (decision 0011).
    pub async fn group_tx_pending(&self, group_id: &str) -> i64 {
        self.state
            .group_tx_pending(group_id)
            .await
            .unwrap_or(TX_PENDING_UNKNOWN)
    }

    /// The live record ranges of a share partition (None while its machine is not loaded).
    pub async fn live_ranges(
        &self,
        key: &SharePartitionKey,
    ) -> Option<Vec<shoal_core::share_partition::RecordRange>> {
        let slot = self.existing_slot(key)?;
        let state = slot.state.lock().await;
        state.as_ref().map(|sp| sp.ranges().collect())
    }

    /// The persisted state batches of a share partition (None without persisted state).
    pub async fn persisted_batches(
        &self,
        key: &SharePartitionKey,
    ) -> Option<Vec<shoal_core::share_coordinator::StateBatch>> {
        self.state.batches(key).await.ok().flatten()
    }

    /// The share partitions of `group_id` that have persisted state.
    pub async fn keys_of_group(&self, group_id: &str) -> Vec<SharePartitionKey> {
        let mut keys = self.state.keys(Some(group_id)).await.unwrap_or_default();
        keys.sort_by_key(|k| (k.topic_id.0, k.partition));
        keys
    }

    /// Restarts a share partition at `start_offset` (AlterShareGroupOffsets): a new state epoch
    /// and no in-flight records; the live machine is rebuilt on the next fetch.
    ///
    /// # Errors
    /// The store's refusal or KAFKA_STORAGE_ERROR.
    pub async fn reset(
        &self,
        node: &NodeState,
        key: &SharePartitionKey,
        start_offset: i64,
    ) -> Result<(), ErrorCode> {
        let slot = self.slot(key);
        let mut state = slot.state.lock().await;
        share_state::reset(node, &self.state, key, start_offset).await?;
        *state = None;
        Ok(())
    }

    /// Deletes the persisted state of share partitions (DeleteShareGroupOffsets, a deleted
    /// share group) and their live machines.
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR.
    pub async fn delete(
        &self,
        node: &NodeState,
        keys: &[SharePartitionKey],
    ) -> Result<(), ErrorCode> {
        for key in keys {
            let slot = self.slot(key);
            let mut state = slot.state.lock().await;
            share_state::delete(node, &self.state, std::slice::from_ref(key)).await?;
            *state = None;
            self.slots
                .lock()
                .expect("share slots lock poisoned")
                .remove(key);
        }
        Ok(())
    }

    /// Expires the acquisition locks that are due; returns whether any was.
    async fn expire_locks(&self, node: &NodeState) -> bool {
        let now = node.now_ms();
        let mut any = false;
        for (key, slot) in self.existing_slots() {
            let mut state = slot.state.lock().await;
            let Some(sp) = state.as_mut() else { continue };
            if sp.violation().is_some() || sp.next_lock_deadline().is_none_or(|d| d > now) {
                continue;
            }
            let expired = match sp.expire_locks(now) {
                Ok(write) => share_leader::changed(write),
                Err(e) => {
                    refusal_code(node, &key, &e);
                    continue;
                }
            };
            any = true;
            if let Err(code) = self.persisted(node, &key, expired).await {
                warn!(?key, ?code, "lock expiry was not persisted");
            }
        }
        if any {
            self.released.notify_waiters();
        }
        any
    }

    /// The offsets TX_PENDING in every share partition's persisted state, for the metrics of share partitions without a live machine (after a restart, before
    /// their first ShareFetch): as of the share-state coordinator's last durable pass, so a
    /// scrape never waits for a state write.
    pub fn tx_pending_persisted(&self) -> Option<Vec<(SharePartitionKey, i64)>> {
        Some(self.state.tx_pending_counts())
    }
}

pub use shoal_core::share_coordinator::state_partition;

/// The error code for a share partition's refusal `e` of a call. An invariant violation found
/// by this call is logged here, once per share partition (later calls fail with
/// [`ShareError::Stopped`], not logged again): the machine stopped, and every request for it
/// fails with UNKNOWN_SERVER_ERROR.
pub fn refusal_code(node: &NodeState, key: &SharePartitionKey, e: &ShareError) -> ErrorCode {
    if let ShareError::InvariantViolated(v) = e {
        let topic_id = uuid::Uuid::from_bytes(key.topic_id.0);
        let topic = node
            .topic_by_id(topic_id)
            .map_or_else(|| topic_id.to_string(), |t| t.name.clone());
        error!(
            group = %key.group_id,
            topic = %topic,
            partition = key.partition,
            invariant = v.invariant(),
            violation = %v,
            "share partition stopped: invariant violated, its requests now fail with \
             UNKNOWN_SERVER_ERROR until the broker restarts"
        );
    }
    ErrorCode(e.error_code().0)
}

/// The share-partition limits of a group (its configs, else the broker's), and whether it has
/// a dead-letter queue (a topic name set, at `share.version` 2 or above).
pub fn partition_config(node: &NodeState, group_id: &str) -> SharePartitionConfig {
    let s = node.share_group_settings(group_id);
    SharePartitionConfig {
        record_lock_duration_ms: s.record_lock_duration_ms,
        delivery_count_limit: i16::try_from(s.delivery_count_limit).unwrap_or(i16::MAX),
        record_locks_max: s.partition_max_record_locks,
        dead_letter: s.has_dead_letter_topic && node.dead_letter_queues_enabled(),
    }
}

/// Where a share partition without state starts (`share.auto.offset.reset`).
fn reset_offset(node: &NodeState, key: &SharePartitionKey) -> Result<i64, ErrorCode> {
    let topic = node
        .topic_by_id(uuid::Uuid::from_bytes(key.topic_id.0))
        .ok_or(ErrorCode::UNKNOWN_TOPIC_ID)?;
    let partition = topic
        .partition(key.partition)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let log = partition.lock();
    Ok(
        match node.share_group_settings(&key.group_id).auto_offset_reset {
            AutoOffsetReset::Latest => log.log_end_offset(),
            AutoOffsetReset::Earliest => log.log_start_offset(),
            AutoOffsetReset::ByDuration(ms) => log
                .offset_for_timestamp(node.now_ms().saturating_sub(ms))
                .map_err(|e| ErrorCode(e.kafka_error_code()))?
                .map_or(log.log_end_offset(), |(offset, _)| offset),
        },
    )
}

/// Expires the acquisition locks of `share` until `stop` turns true (or the node or the
/// manager is gone).
pub async fn run_lock_timer(
    node: std::sync::Weak<NodeState>,
    share: std::sync::Weak<ShareManager>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOCK_CHECK_INTERVAL) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        let (Some(node), Some(share)) = (node.upgrade(), share.upgrade()) else {
            return;
        };
        share.expire_locks(&node).await;
    }
}
