//! Property test: random interleavings of acquisitions by several members over a random log
//! (data, transactional and control batches, aborted transactions, compaction holes),
//! acknowledgements of every type (valid, foreign, random and malformed), session closes,
//! time passing lock deadlines, lock expiry, log start offset moves and restarts, and
//! transactional acknowledgements (KIP-1289: staging into TX_PENDING by two producers, COMMIT
//! and ABORT markers including duplicate and older-epoch ones, producer epoch bumps as a
//! fencing InitProducerId makes them), checked after every step against a per-offset
//! reference model. Besides model equality, every step checks: a TX_PENDING record changes
//! only by its own transaction's marker (producer id, staged epoch <= marker epoch); no
//! record is both TX_PENDING and held by a lock; terminal records never change; the store's
//! replayed state equals the live persisted view, and a restart reloads it.
//!
//! The model predicts acknowledgements, releases, expiry, log start moves and restarts
//! exactly; for acquisitions (whose batching rules it does not re-implement) it checks that
//! every change is one an acquisition may make, then adopts the result. Every write goes
//! through a [`ShareStateStore`] as an encoded record, and after every step the store's state
//! must equal the live persisted view; a restart replays the records into a fresh store and
//! loads the share partition from it.
//!
//! Bound checked on the in-flight window: `record_locks_max + BATCH_LEN_MAX - 1` (whole log
//! batches of at most `BATCH_LEN_MAX` records are acquired).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::share_coordinator::{
    InitializeState, ShareCoordinatorConfig, SharePartitionKey, ShareStateRecord, ShareStateStore,
    StagedTxn, StateBatch, TopicId,
};

const MEMBERS: usize = 3;
const LOCK: i64 = 1_000;
const BATCH_LEN_MAX: i64 = 4;
/// Producer ids of the two transactional producers staging acknowledgements.
const PRODUCERS: [i64; 2] = [100, 101];

fn member(i: usize) -> String {
    format!("m{i}")
}

// ----- the log -----

#[derive(Clone, Debug)]
struct LogBatch {
    header: FetchedBatch,
    /// Data of an aborted transaction.
    aborted: bool,
}

#[derive(Clone, Debug)]
struct Log {
    batches: Vec<LogBatch>,
    /// (transaction, offset of its ABORT marker).
    aborted: Vec<(AbortedTransaction, i64)>,
    start: i64,
}

/// (kind, length, hole before, producer): kinds 0..=2 data, 3 transactional data, 4 commit,
/// 5 abort.
type LogItem = (u8, i64, i64, u8);

impl Log {
    fn build(items: &[LogItem]) -> Log {
        let mut batches: Vec<LogBatch> = Vec::new();
        let mut aborted = Vec::new();
        let mut open: [Option<(i64, Vec<usize>)>; 2] = [None, None];
        let mut offset = 0;
        let header = |base: i64, len: i64, control: bool, pid: i64, txn: bool| FetchedBatch {
            base_offset: base,
            last_offset: base + len - 1,
            is_control: control,
            producer_id: pid,
            is_transactional: txn,
        };
        for &(kind, len, hole, producer) in items {
            offset += hole;
            let slot = usize::from(producer % 2);
            let pid = 7 + slot as i64;
            let b = match kind {
                3 => {
                    let (_, members) = open[slot].get_or_insert((offset, Vec::new()));
                    members.push(batches.len());
                    header(offset, len, false, pid, true)
                }
                4 | 5 => match open[slot].take() {
                    Some((first, members)) => {
                        if kind == 5 {
                            aborted.push((
                                AbortedTransaction {
                                    producer_id: pid,
                                    first_offset: first,
                                },
                                offset,
                            ));
                            for i in members {
                                batches[i].aborted = true;
                            }
                        }
                        header(offset, 1, true, pid, true)
                    }
                    None => header(offset, len, false, -1, false),
                },
                _ => header(offset, len, false, -1, false),
            };
            offset = b.last_offset + 1;
            batches.push(LogBatch {
                header: b,
                aborted: false,
            });
        }
        for (slot, txn) in open.iter_mut().enumerate() {
            if txn.take().is_some() {
                batches.push(LogBatch {
                    header: header(offset, 1, true, 7 + slot as i64, true),
                    aborted: false,
                });
                offset += 1;
            }
        }
        Log {
            batches,
            aborted,
            start: 0,
        }
    }

    fn end(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.header.last_offset + 1)
    }

    fn batch_at(&self, offset: i64) -> Option<&LogBatch> {
        self.batches
            .iter()
            .find(|b| b.header.base_offset <= offset && offset <= b.header.last_offset)
    }

    fn has_data(&self, offset: i64) -> bool {
        offset >= self.start && self.batch_at(offset).is_some()
    }

    fn aborted_at(&self, offset: i64) -> bool {
        self.batch_at(offset).is_some_and(|b| b.aborted)
    }

    /// What a log read from `from` returns: the batch holding it, then the following ones.
    fn read(&self, from: i64, count: usize) -> Vec<FetchedBatch> {
        self.batches
            .iter()
            .filter(|b| b.header.last_offset >= from.max(self.start))
            .take(count)
            .map(|b| b.header)
            .collect()
    }

    /// The aborted-transaction index entries overlapping `[first, last]`.
    fn aborted_overlapping(&self, first: i64, last: i64) -> Vec<AbortedTransaction> {
        self.aborted
            .iter()
            .filter(|(t, marker)| t.first_offset <= last && *marker >= first)
            .map(|(t, _)| *t)
            .collect()
    }
}

// ----- the reference model -----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rec {
    state: RecordState,
    count: i16,
    owner: Option<usize>,
    deadline: i64,
    /// The staging of a TX_PENDING record.
    txn: Option<StagedTxn>,
}

impl Rec {
    fn unowned(state: RecordState, count: i16) -> Rec {
        Rec {
            state,
            count,
            owner: None,
            deadline: 0,
            txn: None,
        }
    }
}

/// Per-offset state of the tracked offsets (all at or after `start`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Model {
    recs: BTreeMap<i64, Rec>,
    start: i64,
    next_new: i64,
}

/// The persisted (state id, count, staging) of a record: ACQUIRED as AVAILABLE and TX_PENDING
/// as 5 with the count before the acquisition; never-delivered records not at all.
fn view(r: &Rec) -> Option<(i8, i16, Option<StagedTxn>)> {
    match r.state {
        RecordState::Available => (r.count > 0).then_some((0, r.count, None)),
        RecordState::Acquired => (r.count > 1).then_some((0, r.count - 1, None)),
        RecordState::Acknowledged => Some((2, r.count, None)),
        RecordState::Archived => Some((4, r.count, None)),
        RecordState::TxPending => Some((5, r.count - 1, r.txn)),
    }
}

impl Model {
    fn from_machine(sp: &SharePartition) -> Model {
        let mut recs = BTreeMap::new();
        for r in sp.ranges() {
            let owner = r.member_id.as_deref().map(|m| {
                m.strip_prefix('m')
                    .and_then(|i| i.parse::<usize>().ok())
                    .expect("member ids are m<i>")
            });
            for o in r.first_offset..=r.last_offset {
                recs.insert(
                    o,
                    Rec {
                        state: r.state,
                        count: r.delivery_count,
                        owner,
                        deadline: r.lock_deadline_ms.unwrap_or(0),
                        txn: r.staged_txn,
                    },
                );
            }
        }
        Model {
            recs,
            start: sp.start_offset(),
            next_new: sp.next_new,
        }
    }

    fn expire(&mut self, now: i64, limit: i16) {
        for r in self.recs.values_mut() {
            if r.state == RecordState::Acquired && r.deadline <= now {
                let state = if r.count >= limit {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
                *r = Rec::unowned(state, r.count);
            }
        }
    }

    /// The SPSO passes terminal records and untracked offsets (no data) only.
    fn normalize(&mut self) {
        loop {
            let Some((&o, r)) = self.recs.iter().next() else {
                self.start = self.next_new;
                return;
            };
            if o > self.start {
                self.start = o;
            }
            if !r.state.is_terminal() {
                return;
            }
            self.recs.remove(&o);
            self.start = o + 1;
        }
    }

    fn persisted_view(&self) -> Vec<StateBatch> {
        let mut out: Vec<StateBatch> = Vec::new();
        for (&o, r) in self.recs.range(self.start..) {
            let Some((state, count, txn)) = view(r) else {
                continue;
            };
            match out.last_mut() {
                Some(p)
                    if p.last_offset + 1 == o
                        && p.delivery_state == state
                        && p.delivery_count == count
                        && p.staged_txn == txn =>
                {
                    p.last_offset = o;
                }
                _ => out.push(StateBatch::new(o, o, state, count).with_staged_txn(txn)),
            }
        }
        out
    }

    /// Predicts an acknowledgement: the error code, or the new state.
    fn acknowledge(
        &mut self,
        who: usize,
        batches: &[AckBatch],
        now: i64,
        cfg: &SharePartitionConfig,
    ) -> Result<(), i16> {
        let mut previous: Option<i64> = None;
        for b in batches {
            let records = b.last_offset - b.first_offset + 1;
            let bad_len = b.ack_types.len() > 1 && b.ack_types.len() as i64 != records;
            let bad_type = b.ack_types.iter().any(|t| !(0..=4).contains(t));
            if b.first_offset > b.last_offset
                || previous.is_some_and(|p| b.first_offset <= p)
                || b.ack_types.is_empty()
                || bad_len
                || bad_type
            {
                return Err(42);
            }
            previous = Some(b.last_offset);
        }
        for b in batches {
            if b.last_offset < self.start {
                continue;
            }
            let Some(&max_tracked) = self.recs.keys().next_back() else {
                return Err(121);
            };
            if b.last_offset > max_tracked {
                return Err(42);
            }
            let lo = b.first_offset.max(self.start);
            let mut found = false;
            for (_, r) in self.recs.range(lo..=b.last_offset) {
                found = true;
                let held =
                    r.state == RecordState::Acquired && r.owner == Some(who) && r.deadline > now;
                if !held {
                    return Err(121);
                }
            }
            if !found {
                return Err(121);
            }
        }
        self.expire(now, cfg.delivery_count_limit);
        for b in batches {
            for o in b.first_offset.max(self.start)..=b.last_offset {
                let index = usize::try_from(o - b.first_offset).expect("offset in batch");
                let ty = if b.ack_types.len() == 1 {
                    b.ack_types[0]
                } else {
                    b.ack_types[index]
                };
                let Some(r) = self.recs.get_mut(&o) else {
                    continue;
                };
                *r = match ty {
                    4 => Rec {
                        deadline: now + cfg.record_lock_duration_ms,
                        ..*r
                    },
                    1 => Rec::unowned(RecordState::Acknowledged, r.count),
                    2 if r.count < cfg.delivery_count_limit => {
                        Rec::unowned(RecordState::Available, r.count)
                    }
                    _ => Rec::unowned(RecordState::Archived, r.count),
                };
            }
        }
        self.normalize();
        Ok(())
    }

    /// Predicts a staging: the error code, or the new state.
    fn stage(
        &mut self,
        who: usize,
        txn: (i64, i16),
        batches: &[AckBatch],
        now: i64,
        limit: i16,
    ) -> Result<(), i16> {
        let mut previous: Option<i64> = None;
        for b in batches {
            let records = b.last_offset - b.first_offset + 1;
            let bad_len = b.ack_types.len() > 1 && b.ack_types.len() as i64 != records;
            if b.first_offset > b.last_offset
                || previous.is_some_and(|p| b.first_offset <= p)
                || b.ack_types.is_empty()
                || bad_len
            {
                return Err(42);
            }
            previous = Some(b.last_offset);
        }
        if batches
            .iter()
            .any(|b| b.ack_types.iter().any(|t| ![0, 1, 3].contains(t)))
        {
            return Err(121);
        }
        for b in batches {
            for o in b.first_offset..=b.last_offset {
                let held = self.recs.get(&o).is_some_and(|r| {
                    r.state == RecordState::Acquired && r.owner == Some(who) && r.deadline > now
                });
                if o < self.start || !held {
                    return Err(121);
                }
            }
        }
        self.expire(now, limit);
        for b in batches {
            for o in b.first_offset..=b.last_offset {
                let index = usize::try_from(o - b.first_offset).expect("offset in batch");
                let ty = if b.ack_types.len() == 1 {
                    b.ack_types[0]
                } else {
                    b.ack_types[index]
                };
                let Some(r) = self.recs.get_mut(&o) else {
                    continue;
                };
                *r = Rec {
                    txn: Some(StagedTxn {
                        producer_id: txn.0,
                        producer_epoch: txn.1,
                        ack_type: ty,
                    }),
                    ..Rec::unowned(RecordState::TxPending, r.count)
                };
            }
        }
        self.normalize();
        Ok(())
    }

    /// Applies a marker; returns the records it resolved.
    fn marker(&mut self, producer_id: i64, epoch: i16, commit: bool, limit: i16) -> i64 {
        let mut resolved = 0;
        for r in self.recs.values_mut() {
            let Some(t) = r.txn else {
                continue;
            };
            if t.producer_id != producer_id || t.producer_epoch > epoch {
                continue;
            }
            let state = match (commit, t.ack_type) {
                (true, 1) => RecordState::Acknowledged,
                (true, _) => RecordState::Archived,
                (false, _) if r.count >= limit => RecordState::Archived,
                (false, _) => RecordState::Available,
            };
            *r = Rec::unowned(state, r.count);
            resolved += 1;
        }
        self.normalize();
        resolved
    }

    fn release(&mut self, who: usize, now: i64, limit: i16) {
        self.expire(now, limit);
        for r in self.recs.values_mut() {
            if r.state == RecordState::Acquired && r.owner == Some(who) {
                let state = if r.count >= limit {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
                *r = Rec::unowned(state, r.count);
            }
        }
        self.normalize();
    }

    fn log_start(&mut self, offset: i64) {
        if offset <= self.start {
            return;
        }
        self.recs.retain(|o, _| *o >= offset);
        self.start = offset;
        self.next_new = self.next_new.max(offset);
        self.normalize();
    }

    /// What a share partition loaded from the persisted view holds.
    fn restart(&mut self) {
        let mut recs: BTreeMap<i64, Rec> = BTreeMap::new();
        for (&o, r) in self.recs.range(self.start..) {
            if let Some((state, count, txn)) = view(r) {
                let state = RecordState::from_id(state).expect("persisted state");
                let rec = match state {
                    RecordState::TxPending => Rec {
                        txn,
                        ..Rec::unowned(state, count + 1)
                    },
                    _ => Rec::unowned(state, count),
                };
                recs.insert(o, rec);
            }
        }
        match recs.keys().next_back().copied() {
            Some(last) => {
                for o in self.start..=last {
                    recs.entry(o)
                        .or_insert(Rec::unowned(RecordState::Available, 0));
                }
                self.next_new = last + 1;
            }
            None => self.next_new = self.start,
        }
        self.recs = recs;
        self.normalize();
    }
}

// ----- the world -----

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        who: usize,
        max_records: i32,
        batch_size: i32,
        record_limit: bool,
        read_committed: bool,
        batches: usize,
        stale: i64,
    },
    /// Acknowledges (part of) a range `holder` holds, as `who`.
    AckHeld {
        who: usize,
        holder: usize,
        pick: usize,
        cut: (i64, i64),
        types: Vec<i8>,
        per_offset: bool,
    },
    /// Acknowledges everything `who` holds, one batch per range.
    AckAll {
        who: usize,
        ty: i8,
    },
    AckRange {
        who: usize,
        first: i64,
        len: i64,
        types: Vec<i8>,
    },
    AckMalformed {
        who: usize,
        kind: u8,
    },
    Release {
        who: usize,
    },
    Advance {
        ms: i64,
    },
    Expire,
    LogStart {
        delta: i64,
    },
    Restart,
    /// Stages (part of) a range `holder` holds, as `who`, in `producer`'s transaction.
    StageHeld {
        who: usize,
        holder: usize,
        pick: usize,
        cut: (i64, i64),
        types: Vec<i8>,
        per_offset: bool,
        producer: usize,
    },
    /// Stages everything `who` holds, one batch per range.
    StageAll {
        who: usize,
        ty: i8,
        producer: usize,
    },
    StageRange {
        who: usize,
        first: i64,
        len: i64,
        types: Vec<i8>,
        producer: usize,
    },
    /// `producer`'s marker with epoch current + `delta`: -1 a late marker of an older
    /// transaction, 0 and 1 as transaction versions 1 and 2 write them (and repeated:
    /// duplicates).
    Marker {
        producer: usize,
        commit: bool,
        delta: i16,
    },
    /// `producer`'s epoch is bumped (a new transaction under TV2, or InitProducerId fencing a
    /// zombie, which also writes ABORT with the new epoch).
    Bump {
        producer: usize,
        abort: bool,
    },
}

fn stage_type() -> impl Strategy<Value = i8> {
    prop_oneof![6 => Just(1i8), 2 => Just(3i8), 1 => Just(0i8), 1 => Just(2i8), 1 => Just(4i8)]
}

fn ack_type() -> impl Strategy<Value = i8> {
    prop_oneof![4 => Just(1i8), 3 => Just(2i8), 2 => Just(3i8), 1 => Just(0i8), 1 => Just(4i8)]
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..MEMBERS;
    prop_oneof![
        8 => (who.clone(), 1..12i32, 1..6i32, any::<bool>(), any::<bool>(), 0..5usize, prop_oneof![4 => Just(0i64), 1 => 1..6i64])
            .prop_map(|(who, max_records, batch_size, record_limit, read_committed, batches, stale)| Op::Acquire {
                who, max_records, batch_size, record_limit, read_committed, batches, stale,
            }),
        6 => (who.clone(), prop_oneof![4 => Just(None), 1 => (0..MEMBERS).prop_map(Some)], any::<usize>(), (0..3i64, 0..3i64),
              proptest::collection::vec(ack_type(), 1..6), any::<bool>())
            .prop_map(|(who, holder, pick, cut, types, per_offset)| Op::AckHeld {
                who, holder: holder.unwrap_or(who), pick, cut, types, per_offset,
            }),
        2 => (who.clone(), ack_type()).prop_map(|(who, ty)| Op::AckAll { who, ty }),
        2 => (who.clone(), 0..120i64, 1..8i64, proptest::collection::vec(ack_type(), 1..9))
            .prop_map(|(who, first, len, types)| Op::AckRange { who, first, len, types }),
        1 => (who.clone(), 0..6u8).prop_map(|(who, kind)| Op::AckMalformed { who, kind }),
        1 => who.clone().prop_map(|who| Op::Release { who }),
        3 => (0..1_500i64).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Expire),
        1 => (0..8i64).prop_map(|delta| Op::LogStart { delta }),
        1 => Just(Op::Restart),
        5 => (who.clone(), prop_oneof![4 => Just(None), 1 => (0..MEMBERS).prop_map(Some)], any::<usize>(), (0..3i64, 0..3i64),
              proptest::collection::vec(stage_type(), 1..6), any::<bool>(), 0..2usize)
            .prop_map(|(who, holder, pick, cut, types, per_offset, producer)| Op::StageHeld {
                who, holder: holder.unwrap_or(who), pick, cut, types, per_offset, producer,
            }),
        2 => (who.clone(), stage_type(), 0..2usize).prop_map(|(who, ty, producer)| Op::StageAll { who, ty, producer }),
        1 => (who.clone(), 0..120i64, 1..8i64, proptest::collection::vec(stage_type(), 1..9), 0..2usize)
            .prop_map(|(who, first, len, types, producer)| Op::StageRange { who, first, len, types, producer }),
        5 => (0..2usize, any::<bool>(), -1..=1i16).prop_map(|(producer, commit, delta)| Op::Marker { producer, commit, delta }),
        1 => (0..2usize, any::<bool>()).prop_map(|(producer, abort)| Op::Bump { producer, abort }),
    ]
}

fn log_item() -> impl Strategy<Value = LogItem> {
    (
        0..6u8,
        1..=BATCH_LEN_MAX,
        prop_oneof![6 => Just(0i64), 1 => 1..4i64],
        any::<u8>(),
    )
}

struct World {
    cfg: SharePartitionConfig,
    store_cfg: ShareCoordinatorConfig,
    sp: SharePartition,
    model: Model,
    log: Log,
    now: i64,
    key: SharePartitionKey,
    store: ShareStateStore,
    records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Current epoch of each producer.
    epochs: [i16; 2],
}

impl World {
    fn new(cfg: SharePartitionConfig, log: Log, per_snapshot: u32) -> World {
        let store_cfg = ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: per_snapshot,
            ..ShareCoordinatorConfig::default()
        };
        let key = SharePartitionKey::new("g", TopicId([7; 16]), 0);
        let store = ShareStateStore::new(store_cfg.clone()).expect("config");
        let sp = SharePartition::new(cfg.clone(), 0, 0).expect("config");
        let mut w = World {
            model: Model::from_machine(&sp),
            cfg,
            store_cfg,
            sp,
            log,
            now: 0,
            key,
            store,
            records: Vec::new(),
            epochs: [5, 5],
        };
        let init = InitializeState {
            state_epoch: 0,
            start_offset: 0,
        };
        let record = w.store.initialize(&w.key, init, 0).expect("initialize");
        w.append(record);
        w
    }

    fn append(&mut self, record: ShareStateRecord) {
        let (k, v) = record.encode().expect("encodes");
        let decoded = ShareStateRecord::decode(&k, v.as_deref()).expect("decodes");
        assert_eq!(decoded, record);
        self.store.replay(&decoded);
        self.records.push((k, v));
    }

    fn persist(&mut self, write: Option<StateWrite>) {
        let Some(write) = write else {
            return;
        };
        let sorted = write
            .batches
            .windows(2)
            .all(|w| w[0].last_offset < w[1].first_offset);
        assert!(sorted, "write batches sorted and disjoint: {write:?}");
        assert!(write
            .batches
            .iter()
            .all(|b| b.state != RecordState::Acquired));
        let record = self
            .store
            .write(&self.key, &write.to_write_state(0), self.now)
            .expect("the store accepts the write");
        self.append(record);
    }

    fn check(&self) {
        self.sp.check_invariants();
        assert_eq!(
            Model::from_machine(&self.sp),
            self.model,
            "machine vs model"
        );
        let mut normalized = self.model.clone();
        normalized.normalize();
        assert_eq!(normalized, self.model, "the start offset is normalized");
        let view = self.sp.persisted_view();
        let batches: Vec<StateBatch> = view.batches.iter().map(|b| StateBatch::from(*b)).collect();
        assert_eq!(
            batches,
            self.model.persisted_view(),
            "persisted view vs model"
        );
        let stored = self.store.state(&self.key).expect("initialized");
        assert_eq!(
            stored.start_offset, view.start_offset,
            "stored start offset"
        );
        assert_eq!(stored.state_batches, batches, "stored batches");
        assert_eq!(
            i64::from(stored.delivery_complete_count),
            self.sp.delivery_complete_count()
        );
        for r in self.sp.ranges() {
            if r.state == RecordState::TxPending {
                assert_eq!(r.member_id, None, "TX_PENDING held by a member: {r:?}");
                assert_eq!(r.lock_deadline_ms, None, "TX_PENDING under a lock: {r:?}");
                assert!(r.staged_txn.is_some());
            }
        }
        assert_eq!(self.sp.tx_pending_count(), self.sp.counts().tx_pending);
        assert_eq!(
            self.sp.tx_pending_count(),
            self.model
                .recs
                .values()
                .filter(|r| r.state == RecordState::TxPending)
                .count() as i64
        );
        assert!(
            self.sp.in_flight_count() < self.cfg.record_locks_max + BATCH_LEN_MAX,
            "in flight {} over the limit",
            self.sp.in_flight_count()
        );
    }

    /// Runs `op` and checks the TX_PENDING and terminal-state rules across it.
    fn step(&mut self, op: &Op) {
        let before = self.model.clone();
        let log_start_before = self.log.start;
        let marker = self.step_inner(op);
        for (o, b) in &before.recs {
            let after = self.model.recs.get(o);
            if after == Some(b) {
                continue;
            }
            // Gone below a moved log start is the only other way out of the window.
            let dropped =
                after.is_none() && *o < self.log.start && self.log.start > log_start_before;
            if b.state.is_terminal() {
                assert!(
                    after.is_none() && *o < self.model.start,
                    "terminal {o} changed: {b:?} -> {after:?}"
                );
            }
            if b.state == RecordState::TxPending && !dropped {
                let t = b.txn.expect("staged");
                let own = marker
                    .is_some_and(|(pid, epoch)| t.producer_id == pid && t.producer_epoch <= epoch);
                assert!(
                    own,
                    "TX_PENDING {o} changed by {op:?} (not its own marker): {b:?} -> {after:?}"
                );
            }
        }
    }

    /// Runs `op`; returns the (producer id, epoch) of the marker it applied, if any.
    fn step_inner(&mut self, op: &Op) -> Option<(i64, i16)> {
        match op {
            Op::Acquire {
                who,
                max_records,
                batch_size,
                record_limit,
                read_committed,
                batches,
                stale,
            } => self.acquire(
                *who,
                *max_records,
                *batch_size,
                *record_limit,
                *read_committed,
                *batches,
                *stale,
            ),
            Op::AckHeld {
                who,
                holder,
                pick,
                cut,
                types,
                per_offset,
            } => {
                let held = self.sp.acquired_by(&member(*holder));
                if held.is_empty() {
                    return None;
                }
                let r = held[pick % held.len()];
                let first = (r.first_offset + cut.0).min(r.last_offset);
                let last = (r.last_offset - cut.1).max(first);
                let ack_types = if *per_offset {
                    (0..=(last - first) as usize)
                        .map(|i| types[i % types.len()])
                        .collect()
                } else {
                    vec![types[0]]
                };
                self.acknowledge(*who, vec![AckBatch::new(first, last, ack_types)]);
            }
            Op::AckAll { who, ty } => {
                let batches = self
                    .sp
                    .acquired_by(&member(*who))
                    .iter()
                    .map(|r| AckBatch::new(r.first_offset, r.last_offset, vec![*ty]))
                    .collect();
                self.acknowledge(*who, batches);
            }
            Op::AckRange {
                who,
                first,
                len,
                types,
            } => {
                let ack_types = if types.len() == 1 {
                    types.clone()
                } else {
                    (0..*len as usize).map(|i| types[i % types.len()]).collect()
                };
                self.acknowledge(
                    *who,
                    vec![AckBatch::new(*first, first + len - 1, ack_types)],
                );
            }
            Op::AckMalformed { who, kind } => {
                let batches = match kind {
                    0 => vec![AckBatch::new(5, 4, vec![1])],
                    1 => vec![AckBatch::new(0, 4, vec![1]), AckBatch::new(3, 6, vec![1])],
                    2 => vec![AckBatch::new(0, 4, vec![])],
                    3 => vec![AckBatch::new(0, 4, vec![1, 1])],
                    4 => vec![AckBatch::new(0, 0, vec![7])],
                    _ => vec![AckBatch::new(0, 1, vec![1, -1])],
                };
                self.acknowledge(*who, batches);
            }
            Op::Release { who } => {
                self.model
                    .release(*who, self.now, self.cfg.delivery_count_limit);
                let write = self.sp.release_member(&member(*who), self.now);
                self.persist(write);
            }
            Op::Advance { ms } => self.now += ms,
            Op::Expire => {
                self.model.expire(self.now, self.cfg.delivery_count_limit);
                self.model.normalize();
                let write = self.sp.expire_locks(self.now);
                self.persist(write);
            }
            Op::LogStart { delta } => {
                let offset = (self.log.start + delta).min(self.log.end());
                if offset > self.log.start {
                    self.log.start = offset;
                    self.model.log_start(offset);
                    let write = self.sp.update_log_start_offset(offset);
                    self.persist(write);
                }
            }
            Op::Restart => self.restart(),
            Op::StageHeld {
                who,
                holder,
                pick,
                cut,
                types,
                per_offset,
                producer,
            } => {
                let held = self.sp.acquired_by(&member(*holder));
                if held.is_empty() {
                    return None;
                }
                let r = held[pick % held.len()];
                let first = (r.first_offset + cut.0).min(r.last_offset);
                let last = (r.last_offset - cut.1).max(first);
                let ack_types = if *per_offset {
                    (0..=(last - first) as usize)
                        .map(|i| types[i % types.len()])
                        .collect()
                } else {
                    vec![types[0]]
                };
                self.stage(*who, *producer, vec![AckBatch::new(first, last, ack_types)]);
            }
            Op::StageAll { who, ty, producer } => {
                let batches = self
                    .sp
                    .acquired_by(&member(*who))
                    .iter()
                    .map(|r| AckBatch::new(r.first_offset, r.last_offset, vec![*ty]))
                    .collect();
                self.stage(*who, *producer, batches);
            }
            Op::StageRange {
                who,
                first,
                len,
                types,
                producer,
            } => {
                let ack_types = if types.len() == 1 {
                    types.clone()
                } else {
                    (0..*len as usize).map(|i| types[i % types.len()]).collect()
                };
                self.stage(
                    *who,
                    *producer,
                    vec![AckBatch::new(*first, first + len - 1, ack_types)],
                );
            }
            Op::Marker {
                producer,
                commit,
                delta,
            } => {
                let epoch = self.epochs[*producer] + delta;
                return Some(self.marker(PRODUCERS[*producer], epoch, *commit));
            }
            Op::Bump { producer, abort } => {
                self.epochs[*producer] += 1;
                if *abort {
                    let epoch = self.epochs[*producer];
                    return Some(self.marker(PRODUCERS[*producer], epoch, false));
                }
            }
        }
        None
    }

    fn stage(&mut self, who: usize, producer: usize, batches: Vec<AckBatch>) {
        let txn = (PRODUCERS[producer], self.epochs[producer]);
        let mut expected = self.model.clone();
        let limit = self.cfg.delivery_count_limit;
        let predicted = expected.stage(who, txn, &batches, self.now, limit);
        let got = self
            .sp
            .stage(self.now, &member(who), txn.0, txn.1, &batches);
        match (predicted, got) {
            (Ok(()), Ok(write)) => {
                self.model = expected;
                assert!(
                    batches.is_empty() || write.is_some(),
                    "a staging is persisted"
                );
                self.persist(write);
            }
            (Err(code), Err(e)) => assert_eq!(e.error_code().0, code, "{e:?} for {batches:?}"),
            (p, g) => panic!("predicted {p:?}, got {g:?} for staging {batches:?}"),
        }
    }

    fn marker(&mut self, producer_id: i64, epoch: i16, commit: bool) -> (i64, i16) {
        let limit = self.cfg.delivery_count_limit;
        let resolved = self.model.marker(producer_id, epoch, commit, limit);
        let out = self.sp.apply_marker(producer_id, epoch, commit);
        assert_eq!(out.resolved, resolved, "records resolved");
        assert_eq!(out.wake, resolved > 0);
        assert_eq!(
            out.write.is_some(),
            resolved > 0,
            "a no-op marker writes nothing"
        );
        // The same marker applied to the persisted state alone (replaying
        // __share_group_state past the marker) gives the live write's state at and after the
        // live SPSO; below it, only terminal batches the live write pruned.
        let mut replayed = self.store.clone();
        let records = replayed.resolve_marker(producer_id, epoch, commit, |_| limit, self.now);
        assert_eq!(records.is_empty(), resolved == 0, "store-level marker");
        for r in &records {
            replayed.replay(r);
        }
        self.persist(out.write);
        let live = self.store.state(&self.key).expect("initialized");
        let replayed = replayed.state(&self.key).expect("initialized");
        assert!(replayed.start_offset <= live.start_offset);
        assert!(replayed
            .state_batches
            .iter()
            .filter(|b| b.first_offset < live.start_offset)
            .all(|b| b.delivery_state == 2 || b.delivery_state == 4));
        assert_eq!(
            crate::share_coordinator::combine_state_batches(
                &replayed.state_batches,
                &[],
                live.start_offset
            ),
            live.state_batches,
            "store-level marker vs live"
        );
        (producer_id, epoch)
    }

    fn acknowledge(&mut self, who: usize, batches: Vec<AckBatch>) {
        let mut expected = self.model.clone();
        let predicted = expected.acknowledge(who, &batches, self.now, &self.cfg);
        let got = self.sp.acknowledge(&member(who), &batches, self.now);
        match (predicted, got) {
            (Ok(()), Ok(write)) => {
                self.model = expected;
                self.persist(write);
            }
            (Err(code), Err(e)) => assert_eq!(e.error_code().0, code, "{e:?} for {batches:?}"),
            (p, g) => panic!("predicted {p:?}, got {g:?} for {batches:?}"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        who: usize,
        max_records: i32,
        batch_size: i32,
        record_limit: bool,
        read_committed: bool,
        batches: usize,
        stale: i64,
    ) {
        let mut before = self.model.clone();
        before.expire(self.now, self.cfg.delivery_count_limit);
        let fetch_offset = (self.sp.next_fetch_offset() - stale).max(self.log.start);
        let fetched = self.log.read(fetch_offset, batches);
        let span = fetched
            .first()
            .zip(fetched.last())
            .map(|(f, l)| (f.base_offset, l.last_offset));
        let aborted = match span {
            Some((first, last)) if read_committed => self.log.aborted_overlapping(first, last),
            _ => Vec::new(),
        };
        let name = member(who);
        let req = AcquireRequest {
            member_id: &name,
            fetch_offset,
            fetched: &fetched,
            max_records,
            batch_size,
            mode: if record_limit {
                AcquireMode::RecordLimit
            } else {
                AcquireMode::BatchOptimized
            },
            isolation: if read_committed {
                Isolation::ReadCommitted { aborted: &aborted }
            } else {
                Isolation::ReadUncommitted
            },
            now_ms: self.now,
        };
        let acq = self.sp.acquire(&req).expect("well-formed batches");
        let first_base = span.map_or(fetch_offset, |(f, _)| f);
        self.check_acquisition(&before, &req, &acq, first_base);
        self.model = Model::from_machine(&self.sp);
        self.persist(acq.write);
    }

    /// Every change an acquisition made is one it may make.
    fn check_acquisition(
        &self,
        before: &Model,
        req: &AcquireRequest<'_>,
        acq: &Acquisition,
        first_base: i64,
    ) {
        let after = Model::from_machine(&self.sp);
        let limit = self.cfg.delivery_count_limit;
        let who = member_index(req.member_id);
        let rc = matches!(req.isolation, Isolation::ReadCommitted { .. });
        let mut returned = BTreeSet::new();
        let mut previous_last: Option<i64> = None;
        for r in &acq.records {
            assert!(r.first_offset <= r.last_offset);
            assert!(previous_last.is_none_or(|p| p < r.first_offset), "{acq:?}");
            previous_last = Some(r.last_offset);
            assert!((1..=limit).contains(&r.delivery_count));
            for o in r.first_offset..=r.last_offset {
                returned.insert(o);
                let a = after.recs.get(&o).expect("returned offsets are tracked");
                let expected = Rec {
                    state: RecordState::Acquired,
                    count: r.delivery_count,
                    owner: Some(who),
                    deadline: self.now + LOCK,
                    txn: None,
                };
                assert_eq!(*a, expected, "offset {o}");
                match before.recs.get(&o) {
                    Some(b) => {
                        assert_eq!(b.state, RecordState::Available, "offset {o} was {b:?}");
                        assert_eq!(b.count + 1, r.delivery_count);
                    }
                    None => {
                        assert_eq!(r.delivery_count, 1);
                        assert!(o >= before.next_new, "untracked {o} inside the window");
                    }
                }
                assert!(
                    !(rc && self.log.aborted_at(o)),
                    "aborted record {o} returned"
                );
                assert!(o >= self.log.start);
            }
        }
        let total = returned.len() as i64;
        let max = i64::from(req.max_records);
        match req.mode {
            AcquireMode::RecordLimit => assert!(total <= max),
            AcquireMode::BatchOptimized => assert!(total < max + BATCH_LEN_MAX),
        }
        assert!(after.start >= before.start && after.next_new >= before.next_new);
        let offsets: BTreeSet<i64> = before
            .recs
            .keys()
            .chain(after.recs.keys())
            .copied()
            .collect();
        for o in offsets.into_iter().filter(|o| !returned.contains(o)) {
            let (b, a) = (before.recs.get(&o), after.recs.get(&o));
            if b == a {
                continue;
            }
            let aborted = rc && self.log.aborted_at(o);
            let ok = match (b, a) {
                (Some(b), Some(a)) => {
                    b.state == RecordState::Available
                        && a.state == RecordState::Archived
                        && (a.count == b.count || (aborted && a.count == b.count + 1))
                }
                (None, Some(a)) => {
                    o >= before.next_new
                        && ((a.state == RecordState::Available
                            && a.count == 0
                            && req.mode == AcquireMode::RecordLimit)
                            || (aborted && a.state == RecordState::Archived && a.count == 1))
                }
                (Some(b), None) => {
                    let stale = req.fetch_offset <= o && o < first_base;
                    o < after.start
                        && b.state != RecordState::Acquired
                        && b.state != RecordState::TxPending
                        && (b.state != RecordState::Available || stale || aborted)
                }
                (None, None) => true,
            };
            assert!(ok, "offset {o}: {b:?} -> {a:?} ({req:?})");
        }
        // The SPSO never skips data that is not done with.
        for o in before.start..after.start {
            if !before.recs.contains_key(&o) && self.log.has_data(o) {
                assert!(rc && self.log.aborted_at(o), "SPSO passed live offset {o}");
            }
        }
    }

    fn restart(&mut self) {
        let mut fresh = ShareStateStore::new(self.store_cfg.clone()).expect("config");
        for (k, v) in &self.records {
            fresh.replay(&ShareStateRecord::decode(k, v.as_deref()).expect("decodes"));
        }
        assert_eq!(
            fresh.state(&self.key),
            self.store.state(&self.key),
            "replay"
        );
        let (read, record) = fresh.read(&self.key, 0, self.now).expect("read");
        assert_eq!(record, None, "same leader epoch");
        let (sp, write) = SharePartition::from_persisted(self.cfg.clone(), &read).expect("load");
        self.sp = sp;
        self.store = fresh;
        self.model.restart();
        self.persist(write);
    }
}

fn member_index(id: &str) -> usize {
    id.strip_prefix('m')
        .and_then(|i| i.parse().ok())
        .expect("member ids are m<i>")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn share_partition_matches_the_reference_model(
        items in proptest::collection::vec(log_item(), 1..40),
        limit in 2..7i16,
        locks in prop_oneof![Just(6i64), Just(15i64), Just(60i64)],
        per_snapshot in prop_oneof![Just(0u32), Just(2u32), Just(500u32)],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let cfg = SharePartitionConfig {
            record_lock_duration_ms: LOCK,
            delivery_count_limit: limit,
            record_locks_max: locks,
        };
        let mut world = World::new(cfg, Log::build(&items), per_snapshot);
        world.check();
        for op in &ops {
            world.step(op);
            world.check();
        }
    }
}
