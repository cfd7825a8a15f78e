//! The simulated broker: Shoal's sans-IO machines, wired the way `shoal-broker` wires them,
//! over the simulated disk.
//!
//! What runs is the real code of `shoal-core`: the share partitions, the share-state store
//! (with the share-state participant's marker application), share-group membership, the
//! transaction coordinator's shard driven through the coordinator runtime's order of a pass
//! (`shoal_core::coordinator::Passes`, which the broker's runtime drives too) with the
//! marker-recovery decisions, and each partition's producer state. What this module adds is the shell's ordering, as the broker has it: state writes
//! are appended and fsynced before the answer; a TxnShareAcknowledge stages on copies, all or
//! nothing, persists the staging as the producer's transactional batch, then answers;
//! transaction records are fsynced before replies; markers are written one partition per
//! step without waiting for their fsync, each handed to the share-state participant once
//! appended, and the Complete record is preceded by the Markers record listing the markers not
//! yet durable; a start replays every log, rewrites the lost markers, and resumes
//! PrepareCommit/PrepareAbort transactions.
//!
//! Differences from the broker, on purpose: everything a request does happens in one step
//! (a crash lands between steps, which, with answers lost in the crash, covers a crash
//! after an fsync and before the answer); share partitions load eagerly at start instead of on
//! first fetch; there is one input topic, one output topic and no configs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use shoal_core::coordinator::{CoordinatorShard, Emitted, Passes, Pending, Queued, ShardRecord};
use shoal_core::group_coordinator::share::{
    GroupIdUse, HeartbeatRequest, ShareGroupConfig, ShareGroupCoordinator, ShareGroupRecord,
    TopicsImage,
};
use shoal_core::producer_state::{
    BatchInfo, Decision, ProducerEpoch, ProducerId, ProducerStateConfig, ProducerStateManager,
};
use shoal_core::share_coordinator::{
    state_partition, InitializeState, ShareCoordinatorConfig, SharePartitionKey, ShareStateRecord,
    ShareStateStore, TopicId,
};
use shoal_core::share_partition::{
    stage_all, AckBatch, AcquireMode, AcquireRequest, FetchedBatch, Isolation, SharePartition,
    SharePartitionConfig, StateWrite,
};
use shoal_core::txn_coordinator::{
    self as tc, AddPartitionsImplicitRequest, EndTxnRequest, InitProducerIdRequest, PendingMarker,
    TopicPartition, TransactionResult, TxnConfig, TxnCoordinator, TxnEffect, TxnInput, TxnRecord,
    TxnReply, TxnRequest, TxnResponse, TxnShard, WriteMarkers,
};

use crate::disk::{log_name, Batch, Body, Disk, Record};
use crate::proto::{codes, Addr, Delivered, Req, Resp};

pub const INPUT: &str = "in";
pub const OUTPUT: &str = "out";
pub const SHARE_STATE: &str = "__share_group_state";
pub const TXN_STATE: &str = "__transaction_state";
pub const OFFSETS: &str = "__consumer_offsets";
pub const INPUT_ID: TopicId = TopicId([7; 16]);
pub const GROUP: &str = "queue";

/// The shape of the simulated cluster and the settings the seed chose.
#[derive(Clone, Debug)]
pub struct Layout {
    pub input_partitions: i32,
    pub output_partitions: i32,
    pub state_partitions: u32,
    pub share: SharePartitionConfig,
    pub snapshot_every: u32,
    pub session_timeout_ms: i32,
    /// The workers' `transaction.timeout.ms`.
    pub txn_timeout_ms: i32,
    /// Log batches one ShareFetch reads at most.
    pub fetch_batches: usize,
    /// The shell bug of issue 13: a staging answered before it is persisted.
    pub bug_stage_before_persist: bool,
}

/// What the broker did that the checker needs to see (it reads the disk for the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    Acquired {
        member: String,
        partition: i32,
        first: i64,
        last: i64,
        delivery_count: i16,
        deadline_ms: i64,
    },
    /// A TxnShareAcknowledge answered NONE: these ranges are staged in the producer's
    /// transaction.
    Staged {
        producer_id: i64,
        producer_epoch: i16,
        ranges: Vec<(i32, AckBatch)>,
    },
    /// A marker was appended to a log.
    Marker {
        log: String,
        offset: i64,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    },
    /// A marker was applied to a share partition's live machine (by the participant).
    MarkerApplied {
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    },
    /// A non-transactional acknowledgement was accepted.
    Acked { partition: i32, batch: AckBatch },
    /// A member left or its session expired: its acquisitions were released.
    Released { member: String },
}

/// A transaction's markers being written, one partition per step.
#[derive(Debug)]
struct MarkerTask {
    markers: WriteMarkers,
    /// The partitions of the id's markers already listed as not durable.
    listed: Vec<TopicPartition>,
    remaining: VecDeque<TopicPartition>,
    appended: Vec<PendingMarker>,
}

/// Who waits for a reply of the transaction coordinator.
#[derive(Debug)]
enum TxnWaiter {
    /// A client's InitProducerId or EndTxn.
    Client(Addr, u64),
    /// The implicit add of a client's request (Produce, TxnShareAcknowledge): answered in the
    /// same step, or, if the coordinator held it (its transaction's markers were being
    /// written), later — then the request is handled again, as the broker's handler goes on
    /// when its call returns.
    Add(AddWait),
}

#[derive(Debug)]
struct AddWait {
    id: u64,
    from: Addr,
    corr: u64,
    req: Req,
}

/// A staging answered but not yet persisted (only with `bug_stage_before_persist`).
#[derive(Debug)]
struct LateStaging {
    producer_id: i64,
    producer_epoch: i16,
    records: Vec<ShareStateRecord>,
}

pub struct Broker {
    layout: Layout,
    /// The transaction coordinator's shard, driven through the runtime's order of a pass.
    txn: Passes<TxnShard, TxnWaiter>,
    groups: ShareGroupCoordinator,
    store: ShareStateStore,
    sps: BTreeMap<SharePartitionKey, SharePartition>,
    producers: BTreeMap<String, ProducerStateManager>,
    tasks: VecDeque<MarkerTask>,
    /// Implicit adds answered, with the request they belong to.
    adds: Vec<(AddWait, TxnReply)>,
    next_add: u64,
    late: VecDeque<LateStaging>,
    /// Answers to send.
    pub outbox: Vec<(Addr, u64, Resp)>,
    pub observed: Vec<Observed>,
    /// Lines for the trace.
    pub notes: Vec<String>,
}

fn code(e: shoal_core::group_coordinator::ErrorCode) -> i16 {
    e.0
}

fn batch_info(b: &Batch) -> BatchInfo {
    BatchInfo {
        producer_id: ProducerId(b.producer_id),
        producer_epoch: ProducerEpoch(b.producer_epoch),
        base_sequence: b.base_sequence,
        last_offset_delta: (b.len() - 1) as i32,
        max_timestamp: 0,
        transactional: b.transactional,
        control: b.is_control(),
    }
}

fn txn_config() -> TxnConfig {
    TxnConfig::default()
}

pub fn share_key(partition: i32) -> SharePartitionKey {
    SharePartitionKey::new(GROUP, INPUT_ID, partition)
}

fn topics_image(layout: &Layout) -> TopicsImage {
    TopicsImage::new([(INPUT.to_string(), INPUT_ID.0, layout.input_partitions)])
}

impl Broker {
    /// Starts the broker on `disk`: replays every log and recovers, as `shoal-broker` starts.
    pub fn start(layout: &Layout, disk: &mut Disk, now: i64) -> Broker {
        disk.coordinator_epoch += 1;
        let mut b = Broker {
            layout: layout.clone(),
            txn: Passes::new(TxnShard::new(txn_config(), disk.coordinator_epoch)),
            groups: ShareGroupCoordinator::new(ShareGroupConfig {
                session_timeout_ms: layout.session_timeout_ms,
                heartbeat_interval_ms: (layout.session_timeout_ms / 4).max(1),
                ..ShareGroupConfig::default()
            }),
            store: ShareStateStore::new(ShareCoordinatorConfig {
                snapshot_update_records_per_snapshot: layout.snapshot_every,
                ..ShareCoordinatorConfig::default()
            })
            .expect("snapshot interval within 0..=500"),
            sps: BTreeMap::new(),
            producers: BTreeMap::new(),
            tasks: VecDeque::new(),
            adds: Vec::new(),
            next_add: 0,
            late: VecDeque::new(),
            outbox: Vec::new(),
            observed: Vec::new(),
            notes: Vec::new(),
        };
        // Producer state of every partition transactional batches reach.
        for (name, log) in disk.logs() {
            if name.starts_with(INPUT) {
                continue;
            }
            let mut ps = ProducerStateManager::new(ProducerStateConfig::default());
            for batch in log.batches() {
                if batch.producer_id < 0 {
                    continue;
                }
                ps.on_append(&batch_info(batch), batch.base_offset);
                if let Body::Control {
                    coordinator_epoch, ..
                } = batch.body
                {
                    ps.on_marker_coordinator_epoch(
                        ProducerId(batch.producer_id),
                        coordinator_epoch,
                    );
                }
            }
            b.producers.insert(name.clone(), ps);
        }
        // The share-state participant.
        for p in 0..layout.state_partitions as i32 {
            let name = log_name(SHARE_STATE, p);
            for batch in disk.log(&name).batches().to_vec() {
                match &batch.body {
                    Body::Data(records) => {
                        for r in records {
                            match ShareStateRecord::decode(&r.key, r.value.as_deref()) {
                                Ok(record) => b.store.replay(&record),
                                Err(e) => b.notes.push(format!("undecodable share state: {e}")),
                            }
                        }
                    }
                    Body::Control { commit, .. } => {
                        b.store_apply_marker(
                            p,
                            batch.producer_id,
                            batch.producer_epoch,
                            *commit,
                            now,
                        );
                    }
                }
            }
        }
        // Share groups.
        b.groups.on_metadata_change(topics_image(layout));
        for batch in disk.log(&log_name(OFFSETS, 0)).batches() {
            if let Body::Data(records) = &batch.body {
                for r in records {
                    if let Ok(record) = ShareGroupRecord::decode(&r.key, r.value.as_deref()) {
                        b.groups.replay(&record);
                    }
                }
            }
        }
        b.groups.loaded(now);
        // The transaction coordinator, and the Markers records' lists.
        let mut shard = TxnShard::new(txn_config(), disk.coordinator_epoch);
        for batch in disk.log(&log_name(TXN_STATE, 0)).batches() {
            if let Body::Data(records) = &batch.body {
                for r in records {
                    match <TxnRecord as ShardRecord>::decode(&r.key, r.value.as_deref()) {
                        Ok(record) => shard.replay(record),
                        Err(e) => b.notes.push(format!("undecodable txn record: {e}")),
                    }
                }
            }
        }
        let pending = shard.listed_markers().clone();
        // The lost-marker rewrite, before anything is served: every listed marker judged
        // first, then the lost ones written again.
        let lost: Vec<PendingMarker> = {
            let producers = &b.producers;
            let present = |m: &PendingMarker| {
                let log = disk.log(&log_name(&m.partition.topic, m.partition.partition));
                Ok::<_, ()>(Some(log.batches().iter().any(|batch| {
                    batch.base_offset == m.offset
                        && batch.is_control()
                        && batch.producer_id == m.producer_id.0
                        && batch.producer_epoch == m.producer_epoch.0
                })))
            };
            let open = |m: &PendingMarker| {
                let name = log_name(&m.partition.topic, m.partition.partition);
                Ok::<bool, ()>(
                    producers
                        .get(&name)
                        .is_some_and(|ps| ps.ongoing_txns().any(|(_, pid)| pid == m.producer_id)),
                )
            };
            tc::markers::lost_markers(
                pending.values().flatten(),
                present,
                |tp| tp.topic == SHARE_STATE,
                open,
            )
            .unwrap_or_default()
            .into_iter()
            .cloned()
            .collect()
        };
        for m in lost {
            let name = log_name(&m.partition.topic, m.partition.partition);
            let commit = m.result.is_commit();
            b.append_marker(
                disk,
                &m.partition,
                m.producer_id.0,
                m.producer_epoch.0,
                commit,
                now,
            )
            .ok();
            disk.flush(&name);
            b.notes.push(format!(
                "lost marker rewritten on {name} (producer {}, commit {commit})",
                m.producer_id.0
            ));
        }
        // Every listed partition durable, then the stale lists cleared, before serving.
        for m in pending.values().flatten() {
            disk.flush(&log_name(&m.partition.topic, m.partition.partition));
        }
        let mut resumed = Emitted::default();
        resumed.records.extend(shard.clear_listed_markers());
        // Share partitions, from the store.
        let keys: Vec<SharePartitionKey> = b.store.keys().cloned().collect();
        for key in keys {
            b.load_share_partition(disk, &key, now);
        }
        shard.loaded(now, &mut resumed);
        b.txn = Passes::new(shard);
        let pending = b.txn.resume(resumed);
        b.txn_finish(disk, pending);
        b
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn share_partitions(&self) -> &BTreeMap<SharePartitionKey, SharePartition> {
        &self.sps
    }

    pub fn store(&self) -> &ShareStateStore {
        &self.store
    }

    pub fn txn(&self) -> &TxnCoordinator {
        self.txn.shard().machine()
    }

    pub fn groups(&self) -> &ShareGroupCoordinator {
        &self.groups
    }

    pub fn has_marker_work(&self) -> bool {
        !self.tasks.is_empty()
    }

    pub fn has_late_stagings(&self) -> bool {
        !self.late.is_empty()
    }

    /// The share-state participant: store first, then the live machines.
    fn store_apply_marker(&mut self, partition: i32, pid: i64, epoch: i16, commit: bool, now: i64) {
        let limit = self.layout.share.delivery_count_limit;
        let resolved = self.store.apply_marker(
            partition,
            self.layout.state_partitions,
            pid,
            epoch,
            commit,
            |_| limit,
            now,
        );
        for key in resolved {
            if let Some(sp) = self.sps.get_mut(&key) {
                if let Err(e) = sp.apply_marker(pid, epoch, commit) {
                    self.notes.push(format!("marker refused: {e}"));
                }
                self.observed.push(Observed::MarkerApplied {
                    partition: key.partition,
                    producer_id: pid,
                    producer_epoch: epoch,
                    commit,
                });
            }
        }
    }

    fn load_share_partition(&mut self, disk: &mut Disk, key: &SharePartitionKey, now: i64) {
        let state = match self.store.read(key, 0, now) {
            Ok((state, record)) => {
                if let Some(record) = record {
                    self.persist_state_records(disk, vec![record], None);
                }
                state
            }
            Err(e) => {
                self.notes.push(format!("read of {key:?} refused: {e}"));
                return;
            }
        };
        match SharePartition::from_persisted(self.layout.share.clone(), &state) {
            Ok((sp, write)) => {
                self.sps.insert(key.clone(), sp);
                if let Some(write) = write {
                    let _ = self.persist_write(disk, key, &write, now);
                }
            }
            Err(e) => self.notes.push(format!("load of {key:?} refused: {e}")),
        }
    }

    /// Appends share-state records (one batch per state partition) and fsyncs them, then
    /// applies them to the store.
    fn persist_state_records(
        &mut self,
        disk: &mut Disk,
        records: Vec<ShareStateRecord>,
        producer: Option<(i64, i16)>,
    ) {
        self.append_state_records(disk, &records, producer);
        for record in &records {
            self.store.replay(record);
        }
    }

    /// Appends share-state records (one batch per state partition, under `producer` if
    /// transactional) and fsyncs them; the store is not touched.
    fn append_state_records(
        &mut self,
        disk: &mut Disk,
        records: &[ShareStateRecord],
        producer: Option<(i64, i16)>,
    ) {
        let mut by_partition: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
        for record in records {
            let Ok((key, value)) = record.encode() else {
                self.notes
                    .push("share state record cannot be encoded".into());
                continue;
            };
            by_partition
                .entry(state_partition(record.key(), self.layout.state_partitions))
                .or_default()
                .push(Record { key, value });
        }
        for (p, recs) in by_partition {
            let name = log_name(SHARE_STATE, p);
            let (pid, epoch) = producer.unwrap_or((-1, -1));
            let batch = Batch {
                base_offset: 0,
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: -1,
                transactional: producer.is_some(),
                body: Body::Data(recs),
            };
            let info = batch_info(&batch);
            let offset = disk.append(&name, batch);
            disk.flush(&name);
            if producer.is_some() {
                self.producers
                    .entry(name)
                    .or_insert_with(|| ProducerStateManager::new(ProducerStateConfig::default()))
                    .on_append(&info, offset);
            }
        }
    }

    fn persist_write(
        &mut self,
        disk: &mut Disk,
        key: &SharePartitionKey,
        write: &StateWrite,
        now: i64,
    ) -> Result<(), i16> {
        let record = self
            .store
            .write(key, &write.to_write_state(0), now)
            .map_err(|e| code(e.error_code()))?;
        self.persist_state_records(disk, vec![record], None);
        Ok(())
    }

    /// One pass of the transaction coordinator in the runtime's order (`Passes`, the code
    /// the broker runs): fresh producer ids for the requests that may need one (from the
    /// durable allocator), the inputs, a tick; the pass's records appended and fsynced; only
    /// then its replies and effects.
    fn txn_pass(&mut self, disk: &mut Disk, now: i64, queued: Vec<(TxnInput, Option<TxnWaiter>)>) {
        let wanted = self
            .txn
            .shard()
            .fresh_ids_wanted(queued.iter().map(|(input, _)| input));
        let mut fed = Vec::new();
        if wanted > 0 {
            let ids = (0..wanted)
                .map(|_| {
                    disk.next_producer_id += 1;
                    ProducerId(disk.next_producer_id - 1)
                })
                .collect();
            fed.push(TxnInput::FreshIds(ids));
        }
        let queued = queued
            .into_iter()
            .map(|(input, waiter)| Queued::Input(input, waiter))
            .collect();
        let pending = self.txn.pass(now, fed, queued);
        self.txn_finish(disk, pending);
    }

    /// The end of a pass: its records appended and fsynced, then its replies and effects.
    fn txn_finish(&mut self, disk: &mut Disk, pending: Pending<TxnShard, TxnWaiter>) {
        if !pending.records.is_empty() {
            let records: Vec<Record> = pending
                .records
                .iter()
                .map(|r| {
                    let (key, value) = r.encode();
                    Record { key, value }
                })
                .collect();
            let name = log_name(TXN_STATE, 0);
            disk.append(&name, Batch::plain(records));
            disk.flush(&name);
        }
        let delivered = self.txn.durable(pending);
        for (waiter, reply) in delivered.replies {
            match waiter {
                TxnWaiter::Client(addr, corr) => {
                    let resp = match reply {
                        TxnReply::Response(TxnResponse::InitProducerId(r)) => {
                            Resp::InitProducerId {
                                code: r.error_code.0,
                                producer_id: r.producer_id.0,
                                producer_epoch: r.producer_epoch.0,
                            }
                        }
                        TxnReply::Response(TxnResponse::EndTxn(r)) => Resp::EndTxn {
                            code: r.error_code.0,
                            producer_id: r.producer_id.0,
                            producer_epoch: r.producer_epoch.0,
                        },
                        other => {
                            self.notes
                                .push(format!("unexpected parked reply {other:?}"));
                            continue;
                        }
                    };
                    self.outbox.push((addr, corr, resp));
                }
                TxnWaiter::Add(wait) => self.adds.push((wait, reply)),
            }
        }
        for effect in delivered.effects {
            match effect {
                TxnEffect::WriteMarkers { markers, listed } => self.tasks.push_back(MarkerTask {
                    remaining: markers.partitions.iter().cloned().collect(),
                    markers,
                    listed,
                    appended: Vec::new(),
                }),
                TxnEffect::Flush(partitions) => {
                    for tp in partitions {
                        disk.flush(&log_name(&tp.topic, tp.partition));
                    }
                }
                TxnEffect::Stopped(violation) => self
                    .notes
                    .push(format!("transaction coordinator stopped: {violation}")),
            }
        }
    }

    /// Transaction version 2's implicit add of `partitions` to the producer's transaction
    /// (Produce v12+, and TxnShareAcknowledge for the share-state partitions) for the client
    /// request `(from, corr, req)`: its error code, or None when the coordinator held it (the
    /// request is handled again once the add is answered, see [`Broker::resume_requests`]).
    #[allow(clippy::too_many_arguments)]
    fn implicit_add(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: String,
        (pid, epoch): (i64, i16),
        partitions: Vec<TopicPartition>,
        (from, corr, req): (Addr, u64, Req),
    ) -> Option<i16> {
        self.next_add += 1;
        let id = self.next_add;
        let request = TxnRequest::AddPartitionsImplicit(AddPartitionsImplicitRequest {
            transactional_id: txn_id,
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            partitions,
        });
        let waiter = TxnWaiter::Add(AddWait {
            id,
            from,
            corr,
            req,
        });
        self.txn_pass(disk, now, vec![(TxnInput::Request(request), Some(waiter))]);
        let at = self.adds.iter().position(|(w, _)| w.id == id)?;
        let (_, reply) = self.adds.remove(at);
        Some(match reply {
            TxnReply::Response(r) => r.error_code().0,
            _ => codes::CONCURRENT_TRANSACTIONS,
        })
    }

    /// Handles again the client requests whose held implicit add was answered since.
    fn resume_requests(&mut self, disk: &mut Disk, now: i64) {
        while !self.adds.is_empty() {
            let (wait, _) = self.adds.remove(0);
            self.notes
                .push(format!("request {} resumed after its held add", wait.corr));
            self.handle(disk, now, wait.from, wait.corr, wait.req);
        }
    }

    /// A coordinator request answered through its waiter (InitProducerId, EndTxn).
    fn parked_call(
        &mut self,
        disk: &mut Disk,
        now: i64,
        from: Addr,
        corr: u64,
        request: TxnRequest,
    ) {
        self.txn_pass(
            disk,
            now,
            vec![(
                TxnInput::Request(request),
                Some(TxnWaiter::Client(from, corr)),
            )],
        );
    }

    /// Appends a marker to `tp` (producer-state epoch check first), hands it to the
    /// participant if `tp` is a share-state partition. Returns its offset.
    fn append_marker(
        &mut self,
        disk: &mut Disk,
        tp: &TopicPartition,
        pid: i64,
        epoch: i16,
        commit: bool,
        now: i64,
    ) -> Result<i64, String> {
        let name = log_name(&tp.topic, tp.partition);
        let coordinator_epoch = self.txn.shard().machine().coordinator_epoch();
        let ps = self
            .producers
            .entry(name.clone())
            .or_insert_with(|| ProducerStateManager::new(ProducerStateConfig::default()));
        ps.check_marker(ProducerId(pid), ProducerEpoch(epoch), coordinator_epoch)
            .map_err(|e| e.to_string())?;
        let batch = Batch {
            base_offset: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: -1,
            transactional: true,
            body: Body::Control {
                commit,
                coordinator_epoch,
            },
        };
        let info = batch_info(&batch);
        let offset = disk.append(&name, batch);
        ps.on_append(&info, offset);
        ps.on_marker_coordinator_epoch(ProducerId(pid), coordinator_epoch);
        self.observed.push(Observed::Marker {
            log: name,
            offset,
            producer_id: pid,
            producer_epoch: epoch,
            commit,
        });
        if tp.topic == SHARE_STATE {
            self.store_apply_marker(tp.partition, pid, epoch, commit, now);
        }
        Ok(offset)
    }

    /// One step of marker writing: the next partition of the oldest transaction. Returns
    /// false when there was nothing to do.
    pub fn marker_step(&mut self, disk: &mut Disk, now: i64) -> bool {
        let Some(mut task) = self.tasks.pop_front() else {
            return false;
        };
        if let Some(tp) = task.remaining.pop_front() {
            let (pid, epoch) = (task.markers.producer_id.0, task.markers.producer_epoch.0);
            let commit = task.markers.result == TransactionResult::Commit;
            match self.append_marker(disk, &tp, pid, epoch, commit, now) {
                Ok(offset) => task.appended.push(PendingMarker {
                    partition: tp,
                    offset,
                    producer_id: task.markers.producer_id,
                    producer_epoch: task.markers.producer_epoch,
                    result: task.markers.result,
                }),
                Err(e) => {
                    // As the driver: retried later.
                    self.notes
                        .push(format!("marker on {tp:?} refused: {e}; retrying"));
                    task.remaining.push_back(tp);
                }
            }
        }
        if !task.remaining.is_empty() {
            self.tasks.push_front(task);
            return true;
        }
        // The completion, with the flushed offsets of the markers' partitions and of those
        // the id already lists, read now (as the broker's marker task reads them).
        let mut flushed: Vec<(TopicPartition, i64)> = Vec::new();
        for tp in task
            .appended
            .iter()
            .map(|m| &m.partition)
            .chain(&task.listed)
        {
            if !flushed.iter().any(|(p, _)| p == tp) {
                let offset = disk
                    .log(&log_name(&tp.topic, tp.partition))
                    .flushed_offset();
                flushed.push((tp.clone(), offset));
            }
        }
        let input = TxnInput::MarkersWritten {
            markers: task.markers,
            appended: task.appended,
            flushed,
        };
        self.txn_pass(disk, now, vec![(input, None)]);
        self.resume_requests(disk, now);
        true
    }

    /// A late staging's write (only with `bug_stage_before_persist`).
    pub fn late_staging_step(&mut self, disk: &mut Disk) {
        if let Some(l) = self.late.pop_front() {
            // The store already has them: the bug applied them before the write.
            self.append_state_records(disk, &l.records, Some((l.producer_id, l.producer_epoch)));
        }
    }

    /// Timers: transaction timeouts, session expiry, lock expiry.
    pub fn tick(&mut self, disk: &mut Disk, now: i64) {
        self.txn_pass(disk, now, Vec::new());
        self.resume_requests(disk, now);
        let expired = self.groups.expire(now);
        self.persist_group_records(disk, &expired.records);
        for m in expired.reply {
            self.notes
                .push(format!("session of {} expired", m.member_id));
            self.release_member(disk, &m.member_id, now);
        }
        let keys: Vec<SharePartitionKey> = self.sps.keys().cloned().collect();
        for key in keys {
            let write = self
                .sps
                .get_mut(&key)
                .and_then(|sp| sp.expire_locks(now).ok().flatten());
            if let Some(write) = write {
                let _ = self.persist_write(disk, &key, &write, now);
            }
        }
    }

    fn release_member(&mut self, disk: &mut Disk, member: &str, now: i64) {
        self.observed.push(Observed::Released {
            member: member.to_string(),
        });
        let keys: Vec<SharePartitionKey> = self.sps.keys().cloned().collect();
        for key in keys {
            let write = self
                .sps
                .get_mut(&key)
                .and_then(|sp| sp.release_member(member, now).ok().flatten());
            if let Some(write) = write {
                let _ = self.persist_write(disk, &key, &write, now);
            }
        }
    }

    fn persist_group_records(&mut self, disk: &mut Disk, records: &[ShareGroupRecord]) {
        if records.is_empty() {
            return;
        }
        let encoded: Vec<Record> = records
            .iter()
            .filter_map(|r| r.encode().ok())
            .map(|(key, value)| Record { key, value })
            .collect();
        let name = log_name(OFFSETS, 0);
        disk.append(&name, Batch::plain(encoded));
        disk.flush(&name);
    }

    /// Handles one request; the answer (if any now) goes to the outbox.
    pub fn handle(&mut self, disk: &mut Disk, now: i64, from: Addr, corr: u64, req: Req) {
        // What an implicit add held by the coordinator resumes.
        let again = matches!(req, Req::Produce { .. } | Req::TxnShareAck { .. })
            .then(|| (from, corr, req.clone()));
        let resp = match req {
            Req::Heartbeat {
                group,
                member,
                epoch,
                full,
            } => Some(self.heartbeat(disk, now, group, member, epoch, full)),
            Req::ShareFetch {
                group,
                member,
                partitions,
                max_records,
            } => Some(self.share_fetch(disk, now, &group, &member, &partitions, max_records)),
            Req::ShareAck {
                group,
                member,
                acks,
            } => Some(self.share_ack(disk, now, &group, &member, acks)),
            Req::InitProducerId {
                txn_id,
                producer_id,
                producer_epoch,
            } => {
                let request = TxnRequest::InitProducerId(InitProducerIdRequest {
                    transactional_id: txn_id,
                    txn_timeout_ms: self.layout.txn_timeout_ms,
                    producer_id: ProducerId(producer_id),
                    producer_epoch: ProducerEpoch(producer_epoch),
                    transaction_version_supported: true,
                    fresh_producer_id: None,
                });
                self.parked_call(disk, now, from, corr, request);
                None
            }
            Req::EndTxn {
                txn_id,
                producer_id,
                producer_epoch,
                commit,
            } => {
                let request = TxnRequest::EndTxn(EndTxnRequest {
                    transactional_id: txn_id,
                    producer_id: ProducerId(producer_id),
                    producer_epoch: ProducerEpoch(producer_epoch),
                    committed: commit,
                    version: 5,
                    fresh_producer_id: None,
                });
                self.parked_call(disk, now, from, corr, request);
                None
            }
            Req::Produce {
                txn_id,
                producer_id,
                producer_epoch,
                partition,
                base_sequence,
                keys,
            } => self.produce(
                disk,
                now,
                txn_id,
                producer_id,
                producer_epoch,
                partition,
                base_sequence,
                keys,
                again.expect("kept for a produce"),
            ),
            Req::TxnShareAck {
                txn_id,
                producer_id,
                producer_epoch,
                group,
                member,
                member_epoch,
                parts,
            } => self.txn_share_ack(
                disk,
                now,
                txn_id,
                (producer_id, producer_epoch),
                &group,
                &member,
                member_epoch,
                parts,
                again.expect("kept for a TxnShareAcknowledge"),
            ),
        };
        if let Some(resp) = resp {
            self.outbox.push((from, corr, resp));
        }
        self.resume_requests(disk, now);
    }

    fn heartbeat(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: String,
        member: String,
        epoch: i32,
        full: bool,
    ) -> Resp {
        let request = HeartbeatRequest {
            group_id: group,
            member_id: member.clone(),
            member_epoch: epoch,
            rack_id: None,
            subscribed_topic_names: (epoch == 0 || full).then(|| vec![INPUT.to_string()]),
            client_id: "sim".into(),
            client_host: "/127.0.0.1".into(),
        };
        match self.groups.heartbeat(now, &request, GroupIdUse::Free) {
            Ok(out) => {
                self.persist_group_records(disk, &out.records);
                if epoch == -1 {
                    self.release_member(disk, &member, now);
                }
                let assignment = out.reply.assignment.map(|topics| {
                    topics
                        .iter()
                        .filter(|t| t.topic_id == INPUT_ID.0)
                        .flat_map(|t| t.partitions.iter().copied())
                        .collect()
                });
                Resp::Heartbeat {
                    code: codes::NONE,
                    member_epoch: out.reply.member_epoch,
                    assignment,
                }
            }
            Err(e) => Resp::Heartbeat {
                code: code(e),
                member_epoch: -1,
                assignment: None,
            },
        }
    }

    fn share_fetch(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: &str,
        member: &str,
        partitions: &[i32],
        max_records: i32,
    ) -> Resp {
        if let Err(e) = self.groups.member_epoch(group, member) {
            return Resp::ShareFetch {
                code: code(e),
                records: Vec::new(),
            };
        }
        let mut records = Vec::new();
        for &p in partitions {
            if !(0..self.layout.input_partitions).contains(&p) {
                continue;
            }
            let key = share_key(p);
            if !self.sps.contains_key(&key) {
                if self.store.state(&key).is_none() {
                    let init = self.store.initialize(
                        &key,
                        InitializeState {
                            state_epoch: 0,
                            start_offset: 0,
                        },
                        now,
                    );
                    match init {
                        Ok(record) => self.persist_state_records(disk, vec![record], None),
                        Err(e) => {
                            self.notes.push(format!("initialize refused: {e}"));
                            continue;
                        }
                    }
                }
                self.load_share_partition(disk, &key, now);
            }
            let Some(sp) = self.sps.get_mut(&key) else {
                continue;
            };
            let from = sp.next_fetch_offset();
            let fetched: Vec<FetchedBatch> = disk
                .log(&log_name(INPUT, p))
                .batches()
                .iter()
                .filter(|b| b.last_offset() >= from)
                .take(self.layout.fetch_batches)
                .map(|b| FetchedBatch {
                    base_offset: b.base_offset,
                    last_offset: b.last_offset(),
                    is_control: b.is_control(),
                    producer_id: b.producer_id,
                    is_transactional: b.transactional,
                })
                .collect();
            let fetched = if sp.can_acquire_records() {
                fetched
            } else {
                Vec::new()
            };
            let acquisition = match sp.acquire(&AcquireRequest {
                member_id: member,
                fetch_offset: from,
                fetched: &fetched,
                max_records,
                batch_size: max_records,
                mode: AcquireMode::BatchOptimized,
                isolation: Isolation::ReadUncommitted,
                now_ms: now,
            }) {
                Ok(a) => a,
                Err(e) => {
                    self.notes.push(format!("acquire refused: {e}"));
                    continue;
                }
            };
            let deadline_ms = now + self.layout.share.record_lock_duration_ms;
            for r in &acquisition.records {
                self.observed.push(Observed::Acquired {
                    member: member.to_string(),
                    partition: p,
                    first: r.first_offset,
                    last: r.last_offset,
                    delivery_count: r.delivery_count,
                    deadline_ms,
                });
                for offset in r.first_offset..=r.last_offset {
                    records.push(Delivered {
                        partition: p,
                        offset,
                        delivery_count: r.delivery_count,
                    });
                }
            }
            if let Some(write) = acquisition.write {
                if let Err(c) = self.persist_write(disk, &key, &write, now) {
                    return Resp::ShareFetch {
                        code: c,
                        records: Vec::new(),
                    };
                }
            }
        }
        Resp::ShareFetch {
            code: codes::NONE,
            records,
        }
    }

    fn share_ack(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: &str,
        member: &str,
        acks: Vec<(i32, AckBatch)>,
    ) -> Resp {
        if let Err(e) = self.groups.member_epoch(group, member) {
            return Resp::ShareAck { code: code(e) };
        }
        let mut by_partition: BTreeMap<i32, Vec<AckBatch>> = BTreeMap::new();
        for (p, b) in acks {
            by_partition.entry(p).or_default().push(b);
        }
        let mut result = codes::NONE;
        for (p, batches) in by_partition {
            let key = share_key(p);
            let Some(sp) = self.sps.get_mut(&key) else {
                result = codes::INVALID_RECORD_STATE;
                continue;
            };
            match sp.acknowledge(member, &batches, now) {
                Ok(write) => {
                    if let Some(write) = write {
                        if let Err(c) = self.persist_write(disk, &key, &write, now) {
                            result = c;
                            continue;
                        }
                    }
                    for batch in batches {
                        self.observed.push(Observed::Acked {
                            partition: p,
                            batch,
                        });
                    }
                }
                Err(e) => result = code(e.error_code()),
            }
        }
        Resp::ShareAck { code: result }
    }

    #[allow(clippy::too_many_arguments)]
    fn produce(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: String,
        pid: i64,
        epoch: i16,
        partition: i32,
        base_sequence: i32,
        keys: Vec<Vec<u8>>,
        again: (Addr, u64, Req),
    ) -> Option<Resp> {
        let name = log_name(OUTPUT, partition);
        let ongoing = self
            .producers
            .get(&name)
            .is_some_and(|ps| ps.has_ongoing_txn(ProducerId(pid), ProducerEpoch(epoch)));
        if !ongoing {
            let c = self.implicit_add(
                disk,
                now,
                txn_id,
                (pid, epoch),
                vec![TopicPartition::new(OUTPUT, partition)],
                again,
            )?;
            if c != codes::NONE {
                return Some(Resp::Produce { code: c });
            }
        }
        let batch = Batch {
            base_offset: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence,
            transactional: true,
            body: Body::Data(
                keys.into_iter()
                    .map(|key| Record { key, value: None })
                    .collect(),
            ),
        };
        let info = batch_info(&batch);
        let ps = self
            .producers
            .entry(name.clone())
            .or_insert_with(|| ProducerStateManager::new(ProducerStateConfig::default()));
        Some(match ps.check(&[info]) {
            Err(e) => Resp::Produce {
                code: e.error_code(),
            },
            Ok(Decision::Duplicate(_)) => Resp::Produce { code: codes::NONE },
            Ok(Decision::Append) => {
                let offset = disk.append(&name, batch);
                disk.flush(&name);
                ps.on_append(&info, offset);
                Resp::Produce { code: codes::NONE }
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn txn_share_ack(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: String,
        (pid, epoch): (i64, i16),
        group: &str,
        member: &str,
        member_epoch: i32,
        parts: Vec<(i32, Vec<AckBatch>)>,
        again: (Addr, u64, Req),
    ) -> Option<Resp> {
        let refuse = |code: i16| Some(Resp::TxnShareAck { code });
        // 6. The member.
        match self.groups.member_epoch(group, member) {
            Err(e) => return refuse(code(e)),
            Ok(current) if member_epoch < current => return refuse(codes::STALE_MEMBER_EPOCH),
            Ok(current) if member_epoch > current => return refuse(codes::FENCED_MEMBER_EPOCH),
            Ok(_) => {}
        }
        // 7. The share-state partitions into the transaction.
        let keys: Vec<SharePartitionKey> = parts.iter().map(|(p, _)| share_key(*p)).collect();
        let state_partitions: BTreeSet<i32> = keys
            .iter()
            .map(|k| state_partition(k, self.layout.state_partitions))
            .collect();
        let partitions = state_partitions
            .iter()
            .map(|p| TopicPartition::new(SHARE_STATE, *p))
            .collect();
        let c = self.implicit_add(disk, now, txn_id, (pid, epoch), partitions, again)?;
        if c != codes::NONE {
            return refuse(c);
        }
        // 8. Stage on copies, all or nothing.
        let mut machines = Vec::with_capacity(parts.len());
        for (key, (_, batches)) in keys.iter().zip(parts.iter()) {
            let Some(sp) = self.sps.get(key) else {
                return refuse(codes::INVALID_RECORD_STATE);
            };
            machines.push((sp, &batches[..]));
        }
        let staged: Vec<(SharePartitionKey, SharePartition, Option<StateWrite>)> =
            match stage_all(machines, now, member, pid, epoch) {
                Ok(staged) => keys
                    .iter()
                    .cloned()
                    .zip(staged)
                    .map(|(k, (sp, w))| (k, sp, w))
                    .collect(),
                Err((i, e)) => {
                    // A copy that broke an invariant stops the original, as the broker does.
                    if let (Some(v), Some(sp)) = (e.violation(), self.sps.get_mut(&keys[i])) {
                        sp.stop(v.clone());
                    }
                    return refuse(code(e.error_code()));
                }
            };
        let mut records = Vec::new();
        for (key, _, write) in &staged {
            if let Some(write) = write {
                match self.store.write(key, &write.to_write_state(0), now) {
                    Ok(r) => records.push(r),
                    Err(e) => return refuse(code(e.error_code())),
                }
            }
        }
        // A newer marker already ended the producer's transaction on a state partition.
        for p in &state_partitions {
            let current = self
                .producers
                .get(&log_name(SHARE_STATE, *p))
                .and_then(|ps| ps.entry(ProducerId(pid)).map(|e| e.epoch().0));
            if current.is_some_and(|e| e > epoch) {
                return refuse(codes::PRODUCER_FENCED);
            }
        }
        if self.layout.bug_stage_before_persist {
            for r in &records {
                self.store.replay(r);
            }
            self.late.push_back(LateStaging {
                producer_id: pid,
                producer_epoch: epoch,
                records,
            });
        } else {
            self.persist_state_records(disk, records, Some((pid, epoch)));
        }
        for (key, copy, _) in staged {
            self.sps.insert(key, copy);
        }
        self.observed.push(Observed::Staged {
            producer_id: pid,
            producer_epoch: epoch,
            ranges: parts
                .into_iter()
                .flat_map(|(p, bs)| bs.into_iter().map(move |b| (p, b)))
                .collect(),
        });
        Some(Resp::TxnShareAck { code: codes::NONE })
    }
}

/// The persisted view of a share partition, offset by offset: (start offset, offset →
/// (state id, delivery count, staging)). ACQUIRED records appear as they are persisted.
pub type Expanded = (i64, BTreeMap<i64, (i8, i16, Option<(i64, i16, i8)>)>);

pub fn expand_write(w: &StateWrite) -> Expanded {
    let mut m = BTreeMap::new();
    for b in &w.batches {
        for o in b.first_offset.max(w.start_offset)..=b.last_offset {
            m.insert(
                o,
                (
                    b.state.id(),
                    b.delivery_count,
                    b.staged_txn
                        .map(|t| (t.producer_id, t.producer_epoch, t.ack_type)),
                ),
            );
        }
    }
    (w.start_offset, m)
}

pub fn expand_store(store: &ShareStateStore, key: &SharePartitionKey) -> Option<Expanded> {
    let s = store.state(key)?;
    let mut m = BTreeMap::new();
    for b in &s.state_batches {
        for o in b.first_offset.max(s.start_offset)..=b.last_offset {
            // Never-delivered records are not persisted by the live side either.
            if b.delivery_state == 0 && b.delivery_count == 0 {
                continue;
            }
            m.insert(
                o,
                (
                    b.delivery_state,
                    b.delivery_count,
                    b.staged_txn
                        .map(|t| (t.producer_id, t.producer_epoch, t.ack_type)),
                ),
            );
        }
    }
    Some((s.start_offset, m))
}
