//! Share partitions on this broker (KIP-932): the live `SharePartition` machines, the share
//! sessions of share consumers, and the share-group state they persist in
//! `__share_group_state`.
//!
//! Each share partition (group × topic partition) has one slot whose async mutex serialises
//! every change to it *and* its persistence: a change is applied to the machine, the state
//! write it returns is appended to `__share_group_state` (the partition Kafka's hash of
//! "group:topicId:partition" picks) and fsynced, and only then is the request answered. So an
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

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::share_coordinator::{
    InitializeState, ShareCoordinatorConfig, SharePartitionKey, ShareStateRecord, ShareStateStore,
    StateSummary, TopicId, UNINITIALIZED_START_OFFSET,
};
use shoal_core::share_partition::{
    AckBatch, ShareError, SharePartition, SharePartitionConfig, StateWrite,
};
use shoal_core::share_session::{SessionKey, ShareSessionCache, TopicIdPartition};
use shoal_protocol::ErrorCode;
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn};

use crate::broker::Broker;
use crate::group_configs::AutoOffsetReset;
use crate::internal::{AppendError, EncodedRecord, Replayed, TxnProducer};
use crate::participants::TxnMarker;
use crate::producers::state_config;

/// The internal topic of share-group state.
pub const SHARE_GROUP_STATE: &str = "__share_group_state";
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
    store: tokio::sync::Mutex<ShareStateStore>,
    /// Per `__share_group_state` partition, the offset of each live share partition's latest
    /// ShareSnapshot: replay needs nothing before the earliest of them. Changed only with the
    /// store locked (by `append` and `load`), so `prune` sees it consistent with the log.
    snapshots: Mutex<HashMap<i32, HashMap<SharePartitionKey, i64>>>,
    /// Woken when records become available again (release, expiry, acknowledgement).
    pub released: Arc<Notify>,
    /// Transaction markers applied to the store since start (replayed or live).
    markers: Mutex<MarkersApplied>,
}

/// How many COMMIT and ABORT markers the share-state participant applied since start, on
/// replay or live (see [`ShareManager::markers_applied`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarkersApplied {
    pub commits: u64,
    pub aborts: u64,
}

impl std::fmt::Debug for ShareManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShareManager")
    }
}

/// Why [`ShareManager::stage`] staged nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRefusal {
    /// The share partition refused; None for a failure of the whole request.
    pub key: Option<SharePartitionKey>,
    pub code: ErrorCode,
    pub message: String,
}

/// A total order of share-partition keys (the order slots are locked in).
fn key_order(a: &SharePartitionKey, b: &SharePartitionKey) -> std::cmp::Ordering {
    (&a.group_id, a.topic_id.0, a.partition).cmp(&(&b.group_id, b.topic_id.0, b.partition))
}

/// A connection's id for share sessions.
pub fn connection_id(peer: SocketAddr) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.hash(&mut h);
    h.finish()
}

impl ShareManager {
    /// An empty manager; [`ShareManager::load`] fills the store.
    pub fn new(broker_config: &crate::config::BrokerConfig) -> anyhow::Result<Self> {
        let store = ShareStateStore::new(ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: broker_config
                .long("share.coordinator.snapshot.update.records.per.snapshot")
                as u32,
            ..ShareCoordinatorConfig::default()
        })
        .map_err(|e| anyhow::anyhow!("share coordinator config: {e}"))?;
        Ok(ShareManager {
            sessions: Mutex::new(ShareSessionCache::new(
                broker_config.long("group.share.max.share.sessions") as usize,
            )),
            slots: Mutex::new(HashMap::new()),
            store: tokio::sync::Mutex::new(store),
            snapshots: Mutex::new(HashMap::new()),
            released: Arc::new(Notify::new()),
            markers: Mutex::new(MarkersApplied::default()),
        })
    }

    /// Replays `__share_group_state` into the store; returns how many records.
    ///
    /// # Errors
    /// The log cannot be read.
    pub fn load(&self, broker: &Broker) -> anyhow::Result<usize> {
        let mut store = self
            .store
            .try_lock()
            .map_err(|_| anyhow::anyhow!("share state store busy during load"))?;
        let mut count = 0;
        crate::internal::replay_topic(broker, SHARE_GROUP_STATE, |item| {
            let (partition, record) = match item {
                Replayed::Record { partition, record } => (partition, record),
                Replayed::Control {
                    partition,
                    header,
                    records,
                } => {
                    if let Some(marker) =
                        crate::participants::marker_from_control(partition, header, records)
                    {
                        self.apply_marker_to(broker, &mut store, marker);
                        count += 1;
                    }
                    return;
                }
            };
            let Some(key) = record.key.as_deref() else {
                return;
            };
            match ShareStateRecord::decode(key, record.value.as_deref()) {
                Ok(r) => {
                    self.track(partition, record.offset, &r);
                    store.replay(&r);
                    count += 1;
                }
                Err(e) => warn!(partition, offset = record.offset, error = %e,
                    "skipping undecodable share state record"),
            }
        })?;
        info!(
            records = count,
            share_partitions = store.len(),
            "share group state loaded"
        );
        Ok(count)
    }

    /// The share-state participant (see `crate::participants`): applies a transaction marker
    /// just appended to a `__share_group_state` partition. The persisted state resolves first
    /// ([`ShareManager::apply_marker_to`], as replay does), then each live share partition
    /// holding the producer's stagings resolves its records and waiting fetches are woken.
    /// The live machines' resolutions are not written again: the marker in the log is their
    /// record, and the store already holds what they decide.
    pub async fn apply_marker(&self, broker: &Broker, marker: TxnMarker) {
        let resolved = {
            let mut store = self.store.lock().await;
            self.apply_marker_to(broker, &mut store, marker)
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
                        refusal_code(broker, &key, &e);
                        continue;
                    }
                };
            broker
                .metrics
                .tx_pending_resolved(&outcome.staged_at_ms, broker.now_ms());
            wake |= outcome.wake;
        }
        if wake {
            self.released.notify_waiters();
        }
    }

    /// [`ShareManager::apply_marker`] at start, before anything else uses the store (no share
    /// partition is live yet); false (nothing applied) if the store is busy.
    pub fn apply_marker_at_start(&self, broker: &Broker, marker: TxnMarker) -> bool {
        match self.store.try_lock() {
            Ok(mut store) => {
                self.apply_marker_to(broker, &mut store, marker);
                true
            }
            Err(_) => false,
        }
    }

    /// The markers applied since start.
    pub fn markers_applied(&self) -> MarkersApplied {
        *self.markers.lock().expect("share markers lock poisoned")
    }

    /// The share-state participant's application of a marker to the persisted state
    /// ([`ShareStateStore::apply_marker`], the decision in `shoal-core` the simulator runs too),
    /// counted; the same call live, at the start-up rewrite of a lost marker and on replay.
    /// Returns the share partitions resolved.
    fn apply_marker_to(
        &self,
        broker: &Broker,
        store: &mut ShareStateStore,
        marker: TxnMarker,
    ) -> Vec<SharePartitionKey> {
        {
            let mut applied = self.markers.lock().expect("share markers lock poisoned");
            if marker.commit {
                applied.commits += 1;
            } else {
                applied.aborts += 1;
            }
        }
        let partitions = crate::internal::partition_count(broker, SHARE_GROUP_STATE);
        store.apply_marker(
            marker.partition,
            partitions,
            marker.producer_id,
            marker.producer_epoch,
            marker.commit,
            |key| partition_config(broker, &key.group_id).delivery_count_limit,
            broker.now_ms(),
        )
    }

    /// Offsets TX_PENDING in the persisted state of `key`, or of every share partition when
    /// None (the `share.version` downgrade check and the in-use checks of reset and delete).
    pub async fn tx_pending_records(&self, key: Option<&SharePartitionKey>) -> i64 {
        self.store.lock().await.tx_pending_count(key)
    }

    /// Stages `member_id`'s acknowledgements in `producer`'s transaction (TxnShareAcknowledge,
    /// KIP-1289 §3.2 step 8), all or nothing across every share partition of `parts`: each
    /// partition's batches are staged on a copy of its machine (every offset must be ACQUIRED
    /// by the member), and only when every copy accepted are the stagings persisted — one
    /// transactional batch under the producer's id and epoch per `__share_group_state`
    /// partition, fsynced — and the copies put in place. The caller has registered those
    /// state partitions in the transaction, so its COMMIT or ABORT marker resolves them.
    ///
    /// Slots are locked in key order, so two requests over the same partitions cannot
    /// deadlock; `parts` must not name a share partition twice.
    ///
    /// # Errors
    /// The first refused partition with its code (INVALID_REQUEST, INVALID_RECORD_STATE) and
    /// a message; or, with no partition named, KAFKA_STORAGE_ERROR when the write failed.
    /// Nothing is staged on error.
    pub async fn stage(
        &self,
        broker: &Arc<Broker>,
        producer: TxnProducer,
        member_id: &str,
        mut parts: Vec<(SharePartitionKey, Vec<AckBatch>)>,
    ) -> Result<(), StageRefusal> {
        parts.sort_by(|a, b| key_order(&a.0, &b.0));
        let slots: Vec<Arc<Slot>> = parts.iter().map(|(key, _)| self.slot(key)).collect();
        let mut guards = Vec::with_capacity(slots.len());
        for slot in &slots {
            guards.push(slot.state.lock().await);
        }
        let now = broker.now_ms();
        let mut machines = Vec::with_capacity(parts.len());
        for ((key, batches), guard) in parts.iter().zip(guards.iter()) {
            let Some(sp) = guard.as_ref() else {
                return Err(StageRefusal {
                    key: Some(key.clone()),
                    code: ErrorCode::INVALID_RECORD_STATE,
                    message: "no records of this share partition are acquired".to_string(),
                });
            };
            machines.push((sp, &batches[..]));
        }
        let staged = shoal_core::share_partition::stage_all(
            machines,
            now,
            member_id,
            producer.producer_id,
            producer.producer_epoch,
        )
        .map_err(|(i, e)| {
            // The copy that broke an invariant was dropped: stop the machine it copied.
            if let (Some(v), Some(sp)) = (e.violation(), guards.get_mut(i)) {
                if let Some(sp) = sp.as_mut() {
                    sp.stop(v.clone());
                }
            }
            StageRefusal {
                key: Some(parts[i].0.clone()),
                code: refusal_code(broker, &parts[i].0, &e),
                message: e.to_string(),
            }
        })?;
        let storage_error = || StageRefusal {
            key: None,
            code: ErrorCode::KAFKA_STORAGE_ERROR,
            message: "the staging could not be persisted".to_string(),
        };
        {
            let mut store = self.store.lock().await;
            let mut records = Vec::new();
            for ((key, _), (_, write)) in parts.iter().zip(staged.iter()) {
                let Some(write) = write else { continue };
                let record = store
                    .write(key, &write.to_write_state(LEADER_EPOCH), now)
                    .map_err(|e| {
                        error!(?key, error = %e, "share state staging refused");
                        StageRefusal {
                            key: Some(key.clone()),
                            code: ErrorCode(e.error_code().0),
                            message: e.to_string(),
                        }
                    })?;
                records.push(record);
            }
            let partitions = crate::internal::partition_count(broker, SHARE_GROUP_STATE);
            let mut by_partition: BTreeMap<u32, Vec<EncodedRecord>> = BTreeMap::new();
            for record in &records {
                let encoded = record.encode().map_err(|e| {
                    error!(error = %e, "share state record cannot be encoded");
                    storage_error()
                })?;
                by_partition
                    .entry(state_partition(record.key(), partitions) as u32)
                    .or_default()
                    .push(encoded);
            }
            let offsets = crate::internal::append_transactional_and_flush_at(
                broker,
                SHARE_GROUP_STATE,
                producer,
                by_partition,
            )
            .await
            .map_err(|e| match e {
                AppendError::Fenced => StageRefusal {
                    key: None,
                    code: ErrorCode::PRODUCER_FENCED,
                    message: "the transaction ended before the acknowledgements were staged"
                        .to_string(),
                },
                AppendError::Failed(e) => {
                    error!(error = %e, "share state staging write failed");
                    storage_error()
                }
            })?;
            for record in &records {
                let p = state_partition(record.key(), partitions);
                if let Some(offset) = offsets.get(&(p as u32)) {
                    self.track(p, *offset, record);
                }
                store.replay(record);
            }
        }
        for (guard, (copy, _)) in guards.iter_mut().zip(staged) {
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

    fn existing_slots(&self) -> Vec<(SharePartitionKey, Arc<Slot>)> {
        self.slots
            .lock()
            .expect("share slots lock poisoned")
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect()
    }

    /// Appends one share-state record to its `__share_group_state` partition, fsyncs it and
    /// applies it to the store.
    async fn append(
        &self,
        broker: &Arc<Broker>,
        record: ShareStateRecord,
    ) -> Result<(), ErrorCode> {
        let mut store = self.store.lock().await;
        let key = record.key().clone();
        let encoded: EncodedRecord = record.encode().map_err(|e| {
            error!(error = %e, "share state record cannot be encoded");
            ErrorCode::UNKNOWN_SERVER_ERROR
        })?;
        let partitions = crate::internal::partition_count(broker, SHARE_GROUP_STATE);
        let p = state_partition(&key, partitions) as u32;
        let mut by_partition = BTreeMap::new();
        by_partition.insert(p, vec![encoded]);
        let offsets = crate::internal::append_and_flush_at(broker, SHARE_GROUP_STATE, by_partition)
            .await
            .map_err(|e| {
                error!(error = %e, "share state write failed");
                ErrorCode::KAFKA_STORAGE_ERROR
            })?;
        if let Some(offset) = offsets.get(&p) {
            self.track(p as i32, *offset, &record);
        }
        store.replay(&record);
        Ok(())
    }

    /// Notes where a share partition's latest snapshot is, or that it was deleted.
    fn track(&self, partition: i32, offset: i64, record: &ShareStateRecord) {
        let mut snapshots = self
            .snapshots
            .lock()
            .expect("share snapshots lock poisoned");
        match record {
            ShareStateRecord::Snapshot { key, .. } => {
                snapshots
                    .entry(partition)
                    .or_default()
                    .insert(key.clone(), offset);
            }
            ShareStateRecord::Tombstone { key } => {
                if let Some(keys) = snapshots.get_mut(&partition) {
                    keys.remove(key);
                }
            }
            _ => {}
        }
    }

    /// Advances the log start offset of every `__share_group_state` partition to the oldest
    /// record replay still needs (Kafka's share-state pruning): the earliest latest-snapshot of
    /// the share partitions stored there, since everything before a share partition's latest
    /// ShareSnapshot is superseded by it, or the log end when none is stored there; never past
    /// the first batch of a transaction still open there (the last stable offset). Whole
    /// segments below the new start are deleted. First deletes (tombstones) the state of share
    /// partitions whose topic no longer exists, which would otherwise hold pruning back for
    /// ever. Returns how many offsets became unreachable.
    ///
    /// # Errors
    /// A partition's log start offset could not be checkpointed or a segment not deleted.
    pub async fn prune(&self, broker: &Arc<Broker>) -> Result<i64, shoal_storage::StorageError> {
        let orphans: Vec<SharePartitionKey> = self
            .store
            .lock()
            .await
            .keys()
            .filter(|k| {
                broker
                    .topic_by_id(uuid::Uuid::from_bytes(k.topic_id.0))
                    .is_none()
            })
            .cloned()
            .collect();
        if !orphans.is_empty() {
            match self.delete(broker, &orphans).await {
                Ok(()) => info!(
                    share_partitions = orphans.len(),
                    "share state of deleted topics removed"
                ),
                Err(code) => warn!(?code, "cannot remove the share state of deleted topics"),
            }
        }
        // Appends hold the store while they write and track: none is half done meanwhile.
        let _store = self.store.lock().await;
        let Some(topic) = broker.topic(SHARE_GROUP_STATE) else {
            return Ok(0);
        };
        let mut pruned = 0;
        for partition in topic.partitions() {
            let needed = self
                .snapshots
                .lock()
                .expect("share snapshots lock poisoned")
                .get(&partition.index)
                .and_then(|keys| keys.values().min().copied());
            let mut log = partition.lock();
            // Never past an open transaction's stagings (KIP-1289): its marker must find the
            // partition's producer state, and its batches stay until it resolves them.
            let stable = partition
                .producers(&mut log, state_config(&broker.config), broker.now_ms())?
                .last_stable_offset(&log);
            let point = needed.unwrap_or_else(|| log.log_end_offset()).min(stable);
            let before = log.log_start_offset();
            if point > before {
                let after = log.delete_records_before(point)?;
                pruned += after - before;
            }
        }
        Ok(pruned)
    }

    /// Persists a share partition's state write (before the caller answers).
    ///
    /// # Errors
    /// The write was refused by the store or could not be made durable.
    pub async fn persist(
        &self,
        broker: &Arc<Broker>,
        key: &SharePartitionKey,
        write: Option<StateWrite>,
    ) -> Result<(), ErrorCode> {
        let Some(write) = write else {
            return Ok(());
        };
        let record = {
            let store = self.store.lock().await;
            store
                .write(key, &write.to_write_state(LEADER_EPOCH), broker.now_ms())
                .map_err(|e| {
                    error!(?key, error = %e, "share state write refused");
                    ErrorCode(e.error_code().0)
                })?
        };
        self.append(broker, record).await
    }

    /// Creates the machine of `key` in `state` if it has none: from the persisted state, or
    /// at the offset `share.auto.offset.reset` picks (persisted first).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, or the store's refusal.
    pub async fn ensure_initialized(
        &self,
        broker: &Arc<Broker>,
        key: &SharePartitionKey,
        state: &mut Option<SharePartition>,
    ) -> Result<(), ErrorCode> {
        let config = partition_config(broker, &key.group_id);
        if let Some(sp) = state.as_mut() {
            if sp.config() != &config {
                let _ = sp.set_config(config);
            }
            return Ok(());
        }
        let persisted = {
            let store = self.store.lock().await;
            match store.state(key) {
                Some(_) => Some(
                    store
                        .read(key, LEADER_EPOCH, broker.now_ms())
                        .map_err(|e| ErrorCode(e.error_code().0))?,
                ),
                None => None,
            }
        };
        let built = match persisted {
            Some((read, epoch_record)) if read.start_offset != UNINITIALIZED_START_OFFSET => {
                if let Some(r) = epoch_record {
                    self.append(broker, r).await?;
                }
                let (sp, write) = SharePartition::from_persisted(config, &read).map_err(|e| {
                    error!(?key, error = %e, "persisted share state unusable");
                    ErrorCode::UNKNOWN_SERVER_ERROR
                })?;
                *state = Some(sp);
                write
            }
            other => {
                let state_epoch = other.map_or(0, |(read, _)| read.state_epoch);
                let start = reset_offset(broker, key)?;
                let record = {
                    let store = self.store.lock().await;
                    store
                        .initialize(
                            key,
                            InitializeState {
                                state_epoch,
                                start_offset: start,
                            },
                            broker.now_ms(),
                        )
                        .map_err(|e| ErrorCode(e.error_code().0))?
                };
                self.append(broker, record).await?;
                *state = Some(
                    SharePartition::new(config, start, state_epoch).map_err(|e| {
                        error!(?key, error = %e, "cannot create share partition");
                        ErrorCode::UNKNOWN_SERVER_ERROR
                    })?,
                );
                None
            }
        };
        self.persist(broker, key, built).await
    }

    /// Releases what `member` holds in the share partitions of a closed session.
    pub async fn release_member(
        &self,
        broker: &Arc<Broker>,
        group_id: &str,
        member_id: &str,
        partitions: impl IntoIterator<Item = TopicIdPartition>,
    ) {
        for tp in partitions {
            let key = SharePartitionKey::new(group_id, TopicId(tp.topic_id), tp.partition);
            let slot = self.slot(&key);
            let mut state = slot.state.lock().await;
            let Some(sp) = state.as_mut() else { continue };
            let write = match sp.release_member(member_id, broker.now_ms()) {
                Ok(write) => write,
                Err(e) => {
                    refusal_code(broker, &key, &e);
                    continue;
                }
            };
            if let Err(code) = self.persist(broker, &key, write).await {
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
    pub async fn connection_closed(&self, broker: &Arc<Broker>, peer: SocketAddr) {
        let closed = self
            .sessions
            .lock()
            .expect("share sessions lock poisoned")
            .connection_closed(connection_id(peer));
        for (key, session) in closed {
            self.release_member(
                broker,
                &key.group_id,
                &key.member_id,
                session.partitions.iter().copied(),
            )
            .await;
        }
    }

    /// Closes a session after its final request and releases what its member holds.
    pub async fn close_session(&self, broker: &Arc<Broker>, key: &SessionKey) {
        let closed = self
            .sessions
            .lock()
            .expect("share sessions lock poisoned")
            .close(key);
        if let Some(session) = closed {
            self.release_member(
                broker,
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
    pub async fn summary(&self, key: &SharePartitionKey) -> Option<StateSummary> {
        self.store.lock().await.read_summary(key)
    }

    /// Offsets TX_PENDING in any share partition of `group_id`: an open transaction still
    /// holds the group's state, so resetting or deleting it is refused as for a group with
    /// members (decision 0011).
    pub async fn group_tx_pending(&self, group_id: &str) -> i64 {
        let store = self.store.lock().await;
        let keys: Vec<SharePartitionKey> = store
            .keys()
            .filter(|k| k.group_id == group_id)
            .cloned()
            .collect();
        keys.iter().map(|k| store.tx_pending_count(Some(k))).sum()
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
        let store = self.store.lock().await;
        store.state(key).map(|s| s.state_batches.clone())
    }

    /// The share partitions of `group_id` that have persisted state.
    pub async fn keys_of_group(&self, group_id: &str) -> Vec<SharePartitionKey> {
        let mut keys: Vec<SharePartitionKey> = self
            .store
            .lock()
            .await
            .keys()
            .filter(|k| k.group_id == group_id)
            .cloned()
            .collect();
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
        broker: &Arc<Broker>,
        key: &SharePartitionKey,
        start_offset: i64,
    ) -> Result<(), ErrorCode> {
        let slot = self.slot(key);
        let mut state = slot.state.lock().await;
        let record = {
            let store = self.store.lock().await;
            let state_epoch = store
                .read_summary(key)
                .map_or(0, |s| s.state_epoch.saturating_add(1));
            store
                .initialize(
                    key,
                    InitializeState {
                        state_epoch,
                        start_offset,
                    },
                    broker.now_ms(),
                )
                .map_err(|e| ErrorCode(e.error_code().0))?
        };
        self.append(broker, record).await?;
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
        broker: &Arc<Broker>,
        keys: &[SharePartitionKey],
    ) -> Result<(), ErrorCode> {
        for key in keys {
            let slot = self.slot(key);
            let mut state = slot.state.lock().await;
            let tombstone = self.store.lock().await.delete(key);
            if let Some(record) = tombstone {
                self.append(broker, record).await?;
            }
            *state = None;
            self.slots
                .lock()
                .expect("share slots lock poisoned")
                .remove(key);
        }
        Ok(())
    }

    /// Expires the acquisition locks that are due; returns whether any was.
    async fn expire_locks(&self, broker: &Arc<Broker>) -> bool {
        let now = broker.now_ms();
        let mut any = false;
        for (key, slot) in self.existing_slots() {
            let mut state = slot.state.lock().await;
            let Some(sp) = state.as_mut() else { continue };
            if sp.violation().is_some() || sp.next_lock_deadline().is_none_or(|d| d > now) {
                continue;
            }
            let write = match sp.expire_locks(now) {
                Ok(write) => write,
                Err(e) => {
                    refusal_code(broker, &key, &e);
                    continue;
                }
            };
            any = true;
            if let Err(code) = self.persist(broker, &key, write).await {
                warn!(?key, ?code, "lock expiry was not persisted");
            }
        }
        if any {
            self.released.notify_waiters();
        }
        any
    }

    /// The offsets TX_PENDING in every share partition's persisted state, for the metrics of
    /// share partitions without a live machine (after a restart, before their first
    /// ShareFetch). None when the store is busy at the moment: a scrape does not wait for a
    /// state write, as [`ShareManager::in_flight`] skips busy partitions.
    pub fn tx_pending_persisted(&self) -> Option<Vec<(SharePartitionKey, i64)>> {
        let store = self.store.try_lock().ok()?;
        Some(
            store
                .keys()
                .map(|k| (k.clone(), store.tx_pending_count(Some(k))))
                .collect(),
        )
    }
}

pub use shoal_core::share_coordinator::state_partition;

/// The error code for a share partition's refusal `e` of a call. An invariant violation found
/// by this call is logged here, once per share partition (later calls fail with
/// [`ShareError::Stopped`], not logged again): the machine stopped, and every request for it
/// fails with UNKNOWN_SERVER_ERROR.
pub fn refusal_code(broker: &Broker, key: &SharePartitionKey, e: &ShareError) -> ErrorCode {
    if let ShareError::InvariantViolated(v) = e {
        let topic_id = uuid::Uuid::from_bytes(key.topic_id.0);
        let topic = broker
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

/// The share-partition limits of a group (its configs, else the broker's).
pub fn partition_config(broker: &Broker, group_id: &str) -> SharePartitionConfig {
    let s = broker.share_group_settings(group_id);
    SharePartitionConfig {
        record_lock_duration_ms: s.record_lock_duration_ms,
        delivery_count_limit: i16::try_from(s.delivery_count_limit).unwrap_or(i16::MAX),
        record_locks_max: s.partition_max_record_locks,
    }
}

/// Where a share partition without state starts (`share.auto.offset.reset`).
fn reset_offset(broker: &Broker, key: &SharePartitionKey) -> Result<i64, ErrorCode> {
    let topic = broker
        .topic_by_id(uuid::Uuid::from_bytes(key.topic_id.0))
        .ok_or(ErrorCode::UNKNOWN_TOPIC_ID)?;
    let partition = topic
        .partition(key.partition)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let log = partition.lock();
    Ok(
        match broker.share_group_settings(&key.group_id).auto_offset_reset {
            AutoOffsetReset::Latest => log.log_end_offset(),
            AutoOffsetReset::Earliest => log.log_start_offset(),
            AutoOffsetReset::ByDuration(ms) => log
                .offset_for_timestamp(broker.now_ms().saturating_sub(ms))
                .map_err(|e| ErrorCode(e.kafka_error_code()))?
                .map_or(log.log_end_offset(), |(offset, _)| offset),
        },
    )
}

/// Expires acquisition locks until `stop` turns true.
pub async fn run_lock_timer(broker: std::sync::Weak<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOCK_CHECK_INTERVAL) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        let Some(broker) = broker.upgrade() else {
            return;
        };
        broker.share.expire_locks(&broker).await;
    }
}
