//! The simulated broker: Shoal's sans-IO machines, wired the way `shoal-broker` wires them,
//! over the simulated disk.
//!
//! What runs is the real code of `shoal-core`: the share partitions, each partition's
//! producer state, and the three coordinators, each driven through the coordinator runtime's
//! order of a pass (`shoal_core::coordinator::Passes`, which the broker's runtime drives too)
//! over the simulated disk ([`crate::runtime`], calls in `coordinators.rs`): the group shard
//! (share-group membership and the member checks), the transaction shard with the
//! marker-recovery decisions, and the share-state shard (`ShareStateShard`), which writes
//! every record of `__share_group_state` — state writes, KIP-1289 stagings as the producer's
//! transactional batches with their fence, and the COMMIT / ABORT markers it applies — and
//! answers only once they are durable. So a bug injected in that shipped order
//! (`shoal_core::faults`: a reply, a staging or a marker ahead of its append) is a bug of what
//! this module runs.
//!
//! What this module adds is the shell's ordering, as the broker's handlers and share-partition
//! leader have it (`requests.rs`): a share partition is read from the share-state coordinator or initialized
//! there before it is created; a state write is answered once the coordinator answered it; a
//! TxnShareAcknowledge checks the member, adds the state partitions to the transaction,
//! stages on copies, all or nothing, has the coordinator persist the stagings, then puts the
//! copies in place and answers; transaction records are fsynced before replies; markers are
//! written one partition per step — on `__share_group_state` through its coordinator, which
//! answers once the marker is durable, and only then applied to the live share partitions;
//! elsewhere without waiting for their fsync, the Complete record preceded by the Markers
//! record listing the markers not yet durable; a start replays every log, rewrites the lost
//! markers, and resumes PrepareCommit/PrepareAbort transactions. With a dead-letter queue
//! (`dead_letters.rs`), a TxnShareAcknowledge that rejects records also registers the
//! dead-letter partition and writes, fsynced, the dead letters its transaction carries before
//! the stagings are persisted; each tick writes the ARCHIVING records' dead letters, fsynced,
//! before it persists them ARCHIVED.
//!
//! Differences from the broker, on purpose: everything a request does happens in one step
//! (a crash lands between steps, which, with answers lost in the crash, covers a crash
//! after an fsync and before the answer), and each coordinator call is one pass; share
//! partitions load eagerly at start instead of on first fetch; there is one input topic, one
//! output topic, one dead-letter partition (when the seed gives the group a
//! dead-letter queue; `dead_letters.rs`) and no configs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use shoal_core::coordinator::{CoordinatorShard, Emitted, Queued, TxnMarker};
use shoal_core::group_coordinator::share::{
    GroupOverrides, HeartbeatRequest, ShareGroupConfig, ShareGroupCoordinator, TopicsImage,
};
use shoal_core::group_coordinator::ErrorCode;
use shoal_core::group_coordinator::{
    GroupConfig, GroupInput, GroupReply, GroupShard, ShareCall, ShareReply,
};
use shoal_core::producer_state::{
    Decision, ProducerEpoch, ProducerId, ProducerStateConfig, ProducerStateManager,
};
use shoal_core::share_coordinator::shard::{
    DeliveryLimits, ShareStateInput, ShareStateReply, ShareStateShard,
};
use shoal_core::share_coordinator::{
    ShareCoordinatorConfig, SharePartitionKey, ShareStateStore, TopicId,
};
use shoal_core::share_leader;
use shoal_core::share_partition::{
    AckBatch, AcquireMode, AcquireRequest, FetchedBatch, Isolation, ShareError, SharePartition,
    SharePartitionConfig, StateWrite,
};
use shoal_core::txn_coordinator::markers::{MarkerOutcome, MarkerWriting};
use shoal_core::txn_coordinator::TransactionDescription;
use shoal_core::txn_coordinator::{
    self as tc, AddPartitionsImplicitRequest, EndTxnRequest, InitProducerIdRequest, PendingMarker,
    TopicPartition, TwoPhaseCommit, TxnConfig, TxnCoordinator, TxnEffect, TxnInput, TxnReply,
    TxnRequest, TxnResponse, TxnShard,
};
use shoal_core::txn_share_ack::{Refusal, Step, TxnShareAck};

use crate::disk::{log_name, Batch, Body, Disk, Record};
use crate::proto::{codes, Addr, Delivered, Req, Resp};
use crate::runtime::{self, batch_info, AppendedMarker, Coordinator, Producers};

mod coordinators;
mod dead_letters;
mod requests;

pub use dead_letters::{dead_letter_log, DLQ};

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
    /// The input records workers reject (only with a dead-letter queue,
    /// `share.dead_letter`).
    pub poison: Poison,
}

/// Which input records are poison: what a worker cannot process, so rejects (in its
/// transaction), and a plain consumer is the only one to reject. A share of `per_mille` of
/// them, by a hash of the record's partition and offset salted per run; none at 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Poison {
    pub per_mille: u32,
    pub salt: u64,
}

impl Poison {
    pub fn enabled(&self) -> bool {
        self.per_mille > 0
    }

    /// Whether input `partition`@`offset` is poison.
    pub fn is(&self, partition: i32, offset: i64) -> bool {
        if !self.enabled() {
            return false;
        }
        let mixed = self.salt ^ (u64::from(partition as u32) << 40) ^ (offset as u64);
        crate::rng::Rng::new(mixed).chance(self.per_mille)
    }
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
    /// A call of the broker's own (a DescribeTransactions of a TxnShareAcknowledge), answered
    /// in the same pass.
    Call(CallId),
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
    /// Transactions whose markers are being written, one partition per step.
    tasks: VecDeque<MarkerWriting>,
    /// Implicit adds answered, with the request they belong to.
    adds: Vec<(AddWait, TxnReply)>,
    next_add: u64,
    /// Replies to the broker's own calls of the transaction coordinator.
    txn_calls: Vec<(CallId, TxnReply)>,
    /// Share partitions whose dead-letter partition must be scanned before their ARCHIVING
    /// records' dead letters are written (loaded with some, or an attempt failed part way).
    dead_letter_unverified: BTreeSet<SharePartitionKey>,
    /// Answers to send.
    pub outbox: Vec<(Addr, u64, Resp)>,
    pub observed: Vec<Observed>,
    /// Lines for the trace.
    pub notes: Vec<String>,
}

fn code(e: shoal_core::group_coordinator::ErrorCode) -> i16 {
    e.0
}

/// The transaction coordinator's settings: two-phase commit on, for the workers that use it.
fn txn_config() -> TxnConfig {
    TxnConfig {
        two_phase_commit_enable: true,
        ..TxnConfig::default()
    }
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
            dead_letter_groups: if layout.share.dead_letter {
                [GROUP.to_string()].into()
            } else {
                Default::default()
            },
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
            txn_calls: Vec::new(),
            dead_letter_unverified: BTreeSet::new(),
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
        // Loaded with ARCHIVING records: their dead letters may be written already.
        b.dead_letter_unverified = b
            .sps
            .iter()
            .filter(|(_, sp)| sp.archiving_count() > 0)
            .map(|(k, _)| k.clone())
            .collect();
        shard.loaded(now, &mut resumed);
        b.txn.replace(shard);
        match b.txn.resume(disk, &mut b.producers, resumed) {
            Ok(appended) => b.txn_delivered(disk, appended),
            Err(_) => b.notes.push("transaction coordinator resume failed".into()),
        }
        b
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

    /// Whether `key`'s dead-letter partition is scanned before its ARCHIVING records' dead
    /// letters are written.
    pub fn dead_letter_unverified(&self, key: &SharePartitionKey) -> bool {
        self.dead_letter_unverified.contains(key)
    }

    pub fn has_marker_work(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Timers: transaction timeouts, the share-state coordinator's timer pass (the broker's
    /// runtime runs one at least every half second), session expiry, lock expiry, and the
    /// dead letters of ARCHIVING records (`dead_letters.rs`).
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
            let expired = self
                .sps
                .get_mut(&key)
                .and_then(|sp| sp.expire_locks(now).ok());
            if let Some(write) = expired {
                let _ = self.persisted(disk, &key, share_leader::changed(write), now);
            }
        }
        self.write_dead_letters(disk, now);
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
                enable_2pc,
                keep_prepared,
            } => {
                let two_phase_commit = TwoPhaseCommit::from_flags(enable_2pc, keep_prepared)
                    .expect("model clients send only valid KIP-939 flag combinations");
                let request = TxnRequest::InitProducerId(InitProducerIdRequest {
                    transactional_id: txn_id,
                    txn_timeout_ms: self.layout.txn_timeout_ms,
                    producer_id: ProducerId(producer_id),
                    producer_epoch: ProducerEpoch(producer_epoch),
                    transaction_version_supported: true,
                    fresh_producer_id: None,
                    two_phase_commit,
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
}

/// The persisted view of a share partition, offset by offset: (start offset, offset →
/// (state id, delivery count, staging)). ACQUIRED records appear as they are persisted.
pub type Expanded = (i64, BTreeMap<i64, (i8, i16, Option<(i64, i16, i8, bool)>)>);

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
                        .map(|t| (t.producer_id, t.producer_epoch, t.ack_type, t.dead_lettered)),
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
                        .map(|t| (t.producer_id, t.producer_epoch, t.ack_type, t.dead_lettered)),
                ),
            );
        }
    }
    Some((s.start_offset, m))
}
