//! The simulated broker: Shoal's sans-IO machines, wired the way `shoal-broker` wires them,
//! over the simulated disk.
//!
//! What runs is the real code of `shoal-core`: the share partitions, share-group membership,
//! each partition's producer state, and two coordinators driven through the coordinator
//! runtime's order of a pass (`shoal_core::coordinator::Passes`, which the broker's runtime
//! drives too) over the simulated disk ([`crate::runtime`]): the transaction coordinator's
//! shard with the marker-recovery decisions, and the share-state coordinator's shard
//! (`ShareStateShard`), which writes every record of `__share_group_state` — state writes,
//! KIP-1289 stagings as the producer's transactional batches with their fence, and the COMMIT /
//! ABORT markers it applies — and answers only once they are durable. So a bug injected in
//! that shipped order (`shoal_core::faults`: a reply, a staging or a marker ahead of its
//! append) is a bug of what this module runs.
//!
//! What this module adds is the shell's ordering, as the broker's handlers and share-partition
//! leader have it: a share partition is read from the share-state coordinator or initialized
//! there before it is created; a state write is answered once the coordinator answered it; a
//! TxnShareAcknowledge checks the member, adds the state partitions to the transaction,
//! stages on copies, all or nothing, has the coordinator persist the stagings, then puts the
//! copies in place and answers; transaction records are fsynced before replies; markers are
//! written one partition per step — on `__share_group_state` through its coordinator, which
//! answers once the marker is durable, and only then applied to the live share partitions;
//! elsewhere without waiting for their fsync, the Complete record preceded by the Markers
//! record listing the markers not yet durable; a start replays every log, rewrites the lost
//! markers, and resumes PrepareCommit/PrepareAbort transactions.
//!
//! Differences from the broker, on purpose: everything a request does happens in one step
//! (a crash lands between steps, which, with answers lost in the crash, covers a crash
//! after an fsync and before the answer), and each coordinator call is one pass; share
//! partitions load eagerly at start instead of on first fetch; there is one input topic, one
//! output topic and no configs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use shoal_core::coordinator::{CoordinatorShard, Emitted, Queued, TxnMarker};
use shoal_core::group_coordinator::share::{
    GroupOverrides, HeartbeatRequest, ShareGroupConfig, ShareGroupCoordinator, TopicsImage,
};
use shoal_core::group_coordinator::{
    GroupConfig, GroupInput, GroupReply, GroupShard, ShareCall, ShareReply,
};
use shoal_core::producer_state::{
    Decision, ProducerEpoch, ProducerId, ProducerStateConfig, ProducerStateManager,
};
use shoal_core::share_coordinator::shard::{
    DeliveryLimits, ShareStateInput, ShareStateReply, ShareStateShard, StageRefused,
};
use shoal_core::share_coordinator::{
    state_partition, InitializeState, ShareCoordinatorConfig, SharePartitionKey, ShareStateStore,
    TopicId, UNINITIALIZED_START_OFFSET,
};
use shoal_core::share_partition::{
    stage_all, AckBatch, AcquireMode, AcquireRequest, FetchedBatch, Isolation, SharePartition,
    SharePartitionConfig, StateWrite,
};
use shoal_core::txn_coordinator::{
    self as tc, AddPartitionsImplicitRequest, EndTxnRequest, InitProducerIdRequest, PendingMarker,
    TopicPartition, TransactionResult, TxnConfig, TxnCoordinator, TxnEffect, TxnInput, TxnReply,
    TxnRequest, TxnResponse, TxnShard, WriteMarkers,
};

use crate::disk::{log_name, Batch, Body, Disk, Record};
use crate::proto::{codes, Addr, Delivered, Req, Resp};
use crate::runtime::{self, batch_info, AppendedMarker, Coordinator, Producers};

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

/// How long the broker's coordinator runtime waits at most between passes.
const STATE_TIMER_MS: i64 = 500;

/// The waiter of a call to the share-state or group coordinator: its number.
type CallId = u64;

pub struct Broker {
    layout: Layout,
    /// The transaction coordinator, driven through the runtime's order of a pass.
    txn: Coordinator<TxnShard, TxnWaiter>,
    /// The share-state coordinator, likewise.
    state: Coordinator<ShareStateShard, CallId>,
    /// The number of the last call to the share-state or group coordinator.
    last_call: CallId,
    /// When the share-state coordinator last ran a pass (for its timer pass).
    state_passed_at: i64,
    /// The group coordinator (share-group membership), likewise.
    groups: Coordinator<GroupShard, CallId>,
    sps: BTreeMap<SharePartitionKey, SharePartition>,
    producers: Producers,
    tasks: VecDeque<MarkerTask>,
    /// Implicit adds answered, with the request they belong to.
    adds: Vec<(AddWait, TxnReply)>,
    next_add: u64,
    /// Answers to send.
    pub outbox: Vec<(Addr, u64, Resp)>,
    pub observed: Vec<Observed>,
    /// Lines for the trace.
    pub notes: Vec<String>,
}

fn code(e: shoal_core::group_coordinator::ErrorCode) -> i16 {
    e.0
}

fn txn_config() -> TxnConfig {
    TxnConfig::default()
}

/// A new group coordinator's shard, configured from the layout (replay fills it).
fn group_shard(layout: &Layout) -> GroupShard {
    GroupShard::new(
        GroupConfig::default(),
        ShareGroupConfig {
            session_timeout_ms: layout.session_timeout_ms,
            heartbeat_interval_ms: (layout.session_timeout_ms / 4).max(1),
            ..ShareGroupConfig::default()
        },
    )
}

/// A new share-state coordinator's shard, configured from the layout (replay fills it).
fn state_shard(layout: &Layout) -> ShareStateShard {
    ShareStateShard::new(
        ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: layout.snapshot_every,
            ..ShareCoordinatorConfig::default()
        },
        layout.state_partitions,
        DeliveryLimits {
            default: layout.share.delivery_count_limit,
            groups: BTreeMap::new(),
        },
    )
    .expect("snapshot interval within 0..=500")
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
        let mut notes = Vec::new();
        // Producer state of every partition transactional batches reach.
        let mut producers = Producers::new();
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
            producers.insert(name.clone(), ps);
        }
        // The share-state coordinator: replayed, its fence seeded from the producer state.
        let state = Self::load_state(layout, disk, &producers, now, &mut notes);
        let mut b = Broker {
            layout: layout.clone(),
            txn: Coordinator::new(
                TXN_STATE,
                1,
                TxnShard::new(txn_config(), disk.coordinator_epoch),
            ),
            state: Coordinator::new(SHARE_STATE, layout.state_partitions, state.0),
            last_call: 0,
            state_passed_at: now,
            groups: Coordinator::new(OFFSETS, 1, group_shard(layout)),
            sps: BTreeMap::new(),
            producers,
            tasks: VecDeque::new(),
            adds: Vec::new(),
            next_add: 0,
            outbox: Vec::new(),
            observed: Vec::new(),
            notes,
        };
        b.resume_state(disk, state.1);
        // Share groups.
        let mut groups = group_shard(layout);
        runtime::replay(&mut groups, OFFSETS, 1, disk, &mut b.notes);
        let mut loaded = Emitted::default();
        groups.loaded(now, &mut loaded);
        b.groups.replace(groups);
        if b.groups.resume(disk, &mut b.producers, loaded).is_err() {
            b.notes.push("group coordinator resume failed".into());
        }
        // The transaction coordinator, and the Markers records' lists.
        let mut shard = TxnShard::new(txn_config(), disk.coordinator_epoch);
        runtime::replay(&mut shard, TXN_STATE, 1, disk, &mut b.notes);
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
        let coordinator_epoch = shard.machine().coordinator_epoch();
        for m in lost {
            let name = log_name(&m.partition.topic, m.partition.partition);
            let marker = TxnMarker {
                partition: m.partition.partition,
                producer_id: m.producer_id.0,
                producer_epoch: m.producer_epoch.0,
                commit: m.result.is_commit(),
            };
            match runtime::append_marker(disk, &mut b.producers, &name, marker, coordinator_epoch) {
                Ok(offset) => {
                    b.observe_markers(vec![(name.clone(), offset, marker)]);
                    // Handed to the share-state coordinator ahead of everything else, as
                    // the broker queues it (no share partition is live yet).
                    if m.partition.topic == SHARE_STATE {
                        b.state_pass(disk, now, vec![Queued::Marker(marker, None)]);
                    }
                }
                Err(e) => b.notes.push(format!("lost marker on {name} refused: {e}")),
            }
            disk.flush(&name);
            b.notes.push(format!(
                "lost marker rewritten on {name} (producer {}, commit {})",
                m.producer_id.0, marker.commit
            ));
        }
        // Every listed partition durable, then the stale lists cleared, before serving.
        for m in pending.values().flatten() {
            disk.flush(&log_name(&m.partition.topic, m.partition.partition));
        }
        let mut resumed = Emitted::default();
        resumed.records.extend(shard.clear_listed_markers());
        // Share partitions, from the share-state coordinator.
        let keys: Vec<SharePartitionKey> = b.store().keys().cloned().collect();
        for key in keys {
            if let Err(c) = b.ensure_initialized(disk, &key, now) {
                b.notes.push(format!("load of {key:?} refused: {c}"));
            }
        }
        shard.loaded(now, &mut resumed);
        b.txn.replace(shard);
        match b.txn.resume(disk, &mut b.producers, resumed) {
            Ok(appended) => b.txn_delivered(disk, appended),
            Err(_) => b.notes.push("transaction coordinator resume failed".into()),
        }
        b
    }

    /// The share-state coordinator's shard rebuilt from its logs, its fence seeded with what
    /// each state partition's producer state knows (as the broker's host does after the
    /// replay), and what its load emitted.
    fn load_state(
        layout: &Layout,
        disk: &Disk,
        producers: &Producers,
        now: i64,
        notes: &mut Vec<String>,
    ) -> (ShareStateShard, Emitted<ShareStateShard>) {
        let mut shard = state_shard(layout);
        runtime::replay(
            &mut shard,
            SHARE_STATE,
            layout.state_partitions,
            disk,
            notes,
        );
        for p in 0..layout.state_partitions as i32 {
            if let Some(ps) = producers.get(&log_name(SHARE_STATE, p)) {
                for (id, entry) in ps.entries() {
                    shard.seed_producer(p, id.0, entry.epoch().0, entry.coordinator_epoch());
                }
            }
        }
        let mut loaded = Emitted::default();
        shard.loaded(now, &mut loaded);
        (shard, loaded)
    }

    /// Makes what the share-state coordinator's load emitted durable (its first pass).
    fn resume_state(&mut self, disk: &mut Disk, loaded: Emitted<ShareStateShard>) {
        match self.state.resume(disk, &mut self.producers, loaded) {
            Ok(appended) => self.observe_markers(appended.markers),
            Err(_) => self
                .notes
                .push("share-state coordinator resume failed".into()),
        }
    }

    /// One pass of the share-state coordinator; its replies by waiter, or None when its
    /// append failed (the coordinator is then rebuilt from the logs, as the broker's runtime
    /// rebuilds it, and every waiter gets nothing: unavailable).
    fn state_pass(
        &mut self,
        disk: &mut Disk,
        now: i64,
        queued: Vec<Queued<ShareStateShard, CallId>>,
    ) -> Option<Vec<(CallId, ShareStateReply)>> {
        self.state_passed_at = now;
        match self
            .state
            .pass(disk, &mut self.producers, now, Vec::new(), queued)
        {
            Ok(appended) => {
                self.observe_markers(appended.markers);
                Some(appended.delivered.replies)
            }
            Err(_) => {
                self.notes
                    .push("share-state write failed; reloading from the log".into());
                let (shard, loaded) =
                    Self::load_state(&self.layout, disk, &self.producers, now, &mut self.notes);
                self.state.replace(shard);
                self.resume_state(disk, loaded);
                None
            }
        }
    }

    /// Calls the share-state coordinator: its reply, or None when it is unavailable.
    fn state_call(
        &mut self,
        disk: &mut Disk,
        now: i64,
        input: ShareStateInput,
    ) -> Option<ShareStateReply> {
        self.last_call += 1;
        let id = self.last_call;
        let replies = self.state_pass(disk, now, vec![Queued::Input(input, Some(id))])?;
        replies
            .into_iter()
            .find_map(|(waiter, reply)| (waiter == id).then_some(reply))
    }

    /// One pass of the group coordinator, fed the topics first as the broker's host feeds
    /// them; its replies by waiter (its plain batches on the simulated disk are never
    /// refused, so there is always an answer).
    fn group_pass(
        &mut self,
        disk: &mut Disk,
        now: i64,
        queued: Vec<Queued<GroupShard, CallId>>,
    ) -> Vec<(CallId, GroupReply)> {
        let fed = vec![GroupInput::Topics(topics_image(&self.layout))];
        match self
            .groups
            .pass(disk, &mut self.producers, now, fed, queued)
        {
            Ok(appended) => appended.delivered.replies,
            Err(_) => {
                self.notes.push("group coordinator write failed".into());
                Vec::new()
            }
        }
    }

    /// Calls the group coordinator with a share-group call.
    fn share_call(&mut self, disk: &mut Disk, now: i64, call: ShareCall) -> Option<ShareReply> {
        self.last_call += 1;
        let id = self.last_call;
        let input = Queued::Input(GroupInput::Share(call), Some(id));
        self.group_pass(disk, now, vec![input])
            .into_iter()
            .find_map(|(waiter, reply)| match reply {
                GroupReply::Share(reply) if waiter == id => Some(reply),
                _ => None,
            })
    }

    /// A member's current epoch in `group` (the handlers' member check).
    fn member_epoch(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: &str,
        member: &str,
    ) -> Result<i32, i16> {
        let call = ShareCall::MemberEpoch {
            group_id: group.to_string(),
            member_id: member.to_string(),
        };
        match self.share_call(disk, now, call) {
            Some(ShareReply::MemberEpoch(epoch)) => epoch.map_err(code),
            _ => Err(codes::COORDINATOR_NOT_AVAILABLE),
        }
    }

    fn observe_markers(&mut self, markers: Vec<AppendedMarker>) {
        for (log, offset, m) in markers {
            self.observed.push(Observed::Marker {
                log,
                offset,
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                commit: m.commit,
            });
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn share_partitions(&self) -> &BTreeMap<SharePartitionKey, SharePartition> {
        &self.sps
    }

    /// The share-state coordinator's persisted state.
    pub fn store(&self) -> &ShareStateStore {
        self.state.shard().store()
    }

    pub fn txn(&self) -> &TxnCoordinator {
        self.txn.shard().machine()
    }

    pub fn groups(&self) -> &ShareGroupCoordinator {
        self.groups.shard().share()
    }

    pub fn has_marker_work(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// The share-state participant's second half, once the coordinator answered that the
    /// marker is durable and which share partitions it resolved: the live machines resolve
    /// the producer's stagings (as `ShareManager::write_marker` does).
    fn apply_marker_live(&mut self, marker: TxnMarker, resolved: Vec<SharePartitionKey>) {
        for key in resolved {
            if let Some(sp) = self.sps.get_mut(&key) {
                if let Err(e) =
                    sp.apply_marker(marker.producer_id, marker.producer_epoch, marker.commit)
                {
                    self.notes.push(format!("marker refused: {e}"));
                }
                self.observed.push(Observed::MarkerApplied {
                    partition: key.partition,
                    producer_id: marker.producer_id,
                    producer_epoch: marker.producer_epoch,
                    commit: marker.commit,
                });
            }
        }
    }

    /// Creates the machine of `key` if it has none, as the broker's share-partition leader
    /// does: from the state the share-state coordinator reads back, or, with none (or an
    /// uninitialized one), initialized there first at the input's start.
    fn ensure_initialized(
        &mut self,
        disk: &mut Disk,
        key: &SharePartitionKey,
        now: i64,
    ) -> Result<(), i16> {
        if self.sps.contains_key(key) {
            return Ok(());
        }
        let read = ShareStateInput::Read {
            key: key.clone(),
            leader_epoch: 0,
        };
        let persisted = match self.state_call(disk, now, read) {
            Some(ShareStateReply::Read(read)) => read,
            Some(ShareStateReply::Refused(e)) => return Err(code(e.error_code())),
            _ => return Err(codes::KAFKA_STORAGE_ERROR),
        };
        let config = self.layout.share.clone();
        match persisted {
            Some(read) if read.start_offset != UNINITIALIZED_START_OFFSET => {
                let (sp, write) = SharePartition::from_persisted(config, &read).map_err(|e| {
                    self.notes
                        .push(format!("persisted state of {key:?} unusable: {e}"));
                    codes::UNKNOWN_SERVER_ERROR
                })?;
                self.sps.insert(key.clone(), sp);
                match write {
                    Some(write) => self.persist_write(disk, key, &write, now),
                    None => Ok(()),
                }
            }
            other => {
                let state_epoch = other.map_or(0, |read| read.state_epoch);
                let initialize = ShareStateInput::Initialize {
                    key: key.clone(),
                    state: InitializeState {
                        state_epoch,
                        start_offset: 0,
                    },
                };
                self.state_done(disk, now, initialize)?;
                let sp = SharePartition::new(config, 0, state_epoch).map_err(|e| {
                    self.notes.push(format!("cannot create {key:?}: {e}"));
                    codes::UNKNOWN_SERVER_ERROR
                })?;
                self.sps.insert(key.clone(), sp);
                Ok(())
            }
        }
    }

    /// A share-state write whose answer is done or refused.
    fn state_done(&mut self, disk: &mut Disk, now: i64, input: ShareStateInput) -> Result<(), i16> {
        match self.state_call(disk, now, input) {
            Some(ShareStateReply::Done) => Ok(()),
            Some(ShareStateReply::Refused(e)) => {
                self.notes.push(format!("share state write refused: {e}"));
                Err(code(e.error_code()))
            }
            _ => Err(codes::KAFKA_STORAGE_ERROR),
        }
    }

    /// Persists a share partition's state write through the share-state coordinator.
    fn persist_write(
        &mut self,
        disk: &mut Disk,
        key: &SharePartitionKey,
        write: &StateWrite,
        now: i64,
    ) -> Result<(), i16> {
        let input = ShareStateInput::Write {
            key: key.clone(),
            state: write.to_write_state(0),
        };
        self.state_done(disk, now, input)
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
        match self.txn.pass(disk, &mut self.producers, now, fed, queued) {
            Ok(appended) => self.txn_delivered(disk, appended),
            // Plain batches on the simulated disk are never refused.
            Err(_) => self
                .notes
                .push("transaction coordinator write failed".into()),
        }
    }

    /// A durable pass of the transaction coordinator: its replies and effects.
    fn txn_delivered(&mut self, disk: &mut Disk, appended: runtime::Appended<TxnShard, TxnWaiter>) {
        let delivered = appended.delivered;
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

    /// Writes the marker of `task` to `tp`, as the broker's participants path does: on
    /// `__share_group_state` through its coordinator (durable when it answers; then the live
    /// share partitions resolve), elsewhere appended (producer-state check first) and left for
    /// the Markers record to cover until flushed. Returns the marker to list, if any.
    fn write_marker(
        &mut self,
        disk: &mut Disk,
        tp: &TopicPartition,
        markers: &WriteMarkers,
        now: i64,
    ) -> Result<Option<PendingMarker>, String> {
        let marker = TxnMarker {
            partition: tp.partition,
            producer_id: markers.producer_id.0,
            producer_epoch: markers.producer_epoch.0,
            commit: markers.result == TransactionResult::Commit,
        };
        let coordinator_epoch = self.txn.shard().machine().coordinator_epoch();
        if tp.topic == SHARE_STATE {
            let input = ShareStateInput::WriteMarker {
                marker,
                coordinator_epoch,
            };
            return match self.state_call(disk, now, input) {
                Some(ShareStateReply::Marker(Ok(resolved))) => {
                    self.apply_marker_live(marker, resolved);
                    Ok(None)
                }
                Some(ShareStateReply::Marker(Err(refused))) => Err(format!("{refused:?}")),
                _ => Err("share-state coordinator unavailable".into()),
            };
        }
        let name = log_name(&tp.topic, tp.partition);
        let offset =
            runtime::append_marker(disk, &mut self.producers, &name, marker, coordinator_epoch)?;
        self.observe_markers(vec![(name, offset, marker)]);
        Ok(Some(PendingMarker {
            partition: tp.clone(),
            offset,
            producer_id: markers.producer_id,
            producer_epoch: markers.producer_epoch,
            result: markers.result,
        }))
    }

    /// One step of marker writing: the next partition of the oldest transaction. Returns
    /// false when there was nothing to do.
    pub fn marker_step(&mut self, disk: &mut Disk, now: i64) -> bool {
        let Some(mut task) = self.tasks.pop_front() else {
            return false;
        };
        if let Some(tp) = task.remaining.pop_front() {
            match self.write_marker(disk, &tp, &task.markers, now) {
                Ok(listed) => task.appended.extend(listed),
                Err(e) => {
                    // As the broker's marker task: retried later.
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

    /// Timers: transaction timeouts, the share-state coordinator's timer pass (the broker's
    /// runtime runs one at least every half second), session expiry, lock expiry.
    pub fn tick(&mut self, disk: &mut Disk, now: i64) {
        self.txn_pass(disk, now, Vec::new());
        self.resume_requests(disk, now);
        if now - self.state_passed_at >= STATE_TIMER_MS {
            self.state_pass(disk, now, Vec::new());
        }
        // Expired sessions fence their members; what they hold waits for its locks to
        // expire, as in the broker (which releases a member's records when its share session
        // closes, here when it leaves).
        self.group_pass(disk, now, Vec::new());
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
        let call = ShareCall::Heartbeat(request, GroupOverrides::default());
        let reply = match self.share_call(disk, now, call) {
            Some(ShareReply::Heartbeat(reply)) => reply,
            _ => {
                return Resp::Heartbeat {
                    code: codes::COORDINATOR_NOT_AVAILABLE,
                    member_epoch: -1,
                    assignment: None,
                }
            }
        };
        match reply {
            Ok(reply) => {
                if epoch == -1 {
                    self.release_member(disk, &member, now);
                }
                let assignment = reply.assignment.map(|topics| {
                    topics
                        .iter()
                        .filter(|t| t.topic_id == INPUT_ID.0)
                        .flat_map(|t| t.partitions.iter().copied())
                        .collect()
                });
                Resp::Heartbeat {
                    code: codes::NONE,
                    member_epoch: reply.member_epoch,
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
        if let Err(c) = self.member_epoch(disk, now, group, member) {
            return Resp::ShareFetch {
                code: c,
                records: Vec::new(),
            };
        }
        let mut records = Vec::new();
        for &p in partitions {
            if !(0..self.layout.input_partitions).contains(&p) {
                continue;
            }
            let key = share_key(p);
            if let Err(c) = self.ensure_initialized(disk, &key, now) {
                self.notes
                    .push(format!("share partition {p} not created: {c}"));
                continue;
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
        if let Err(c) = self.member_epoch(disk, now, group, member) {
            return Resp::ShareAck { code: c };
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
        match self.member_epoch(disk, now, group, member) {
            Err(c) => return refuse(c),
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
        // 8. Stage on copies, all or nothing; the share-state coordinator persists the
        // stagings (or refuses them, fenced), and only then are the copies put in place.
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
        let writes: Vec<_> = staged
            .iter()
            .filter_map(|(key, _, write)| {
                write.as_ref().map(|w| (key.clone(), w.to_write_state(0)))
            })
            .collect();
        if !writes.is_empty() {
            let input = ShareStateInput::Stage {
                producer_id: pid,
                producer_epoch: epoch,
                writes,
            };
            match self.state_call(disk, now, input) {
                Some(ShareStateReply::Done) => {}
                Some(ShareStateReply::StageRefused(StageRefused::State { error, .. })) => {
                    return refuse(code(error.error_code()))
                }
                Some(ShareStateReply::StageRefused(StageRefused::Fenced { .. })) => {
                    return refuse(codes::PRODUCER_FENCED)
                }
                _ => return refuse(codes::KAFKA_STORAGE_ERROR),
            }
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
