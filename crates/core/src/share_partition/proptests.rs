//! Property test: random interleavings of acquisitions by several members over a random log
//! (data, transactional and control batches, aborted transactions, compaction holes),
//! acknowledgements of every type (valid, foreign, random, malformed, and of TX_PENDING
//! records), member leaves / session closes, time passing lock deadlines, lock expiry, log
//! start offset moves, delivery limits and restarts, and transactional acknowledgements
//! (KIP-1289): staging into TX_PENDING by two producers, valid and invalid (another member's
//! records, records not ACQUIRED or already TX_PENDING, RELEASE / RENEW / unknown types,
//! malformed batches, multi-batch requests one of whose batches fails), COMMIT and ABORT
//! markers (TV1 and TV2 epochs, duplicates, late markers of an older epoch, markers of a
//! producer that staged nothing here), fencing (InitProducerId of a new instance: ABORT with
//! the bumped epoch, then the zombie's stage attempts, which the broker refuses with
//! PRODUCER_FENCED before the share partition: at core level `stage` takes any epoch), and
//! markers that reach only the persisted state while the share partition is not loaded
//! (`ShareStateStore::resolve_marker`, then `SharePartition::from_persisted`), and dead-letter
//! queues (KIP-1191, decision 0022): ARCHIVING records, their dead letters written (and a
//! crash between the dead letters and ARCHIVED), stagings whose transaction carries the dead
//! letters of its REJECTs (`dead_lettered`), and the end of every transaction at the end of
//! the run.
//!
//! The dead-letter partition is modelled as a read_committed reader sees it (`Letters`): a
//! carried dead letter is written, per REJECTed offset, from the staged machine
//! (`dead_letters_of`) inside the transaction and becomes visible with its COMMIT marker
//! (never with an ABORT); an ARCHIVING record's is written outside any transaction before
//! `complete_archiving`, blindly unless the share partition was loaded with ARCHIVING
//! records (then the broker's dedupe scan finds what is already there). Checked after every
//! step, before the rest: at most one dead letter per offset; only for offsets archived by a
//! REJECT or the delivery limit (none for an ACCEPTed record, none of an aborted
//! transaction); every offset with one is ARCHIVED, or ARCHIVING only while the next attempt
//! will scan (else it would write a second); nothing stays ARCHIVING once its dead letter is
//! written. At the end of the run (every transaction ended, every ARCHIVING record's dead
//! letter written): every offset archived by a REJECT or the delivery limit has exactly one
//! dead letter, unless its data left the log first. ARCHIVING records are never acquired
//! (checked with every acquisition) and the replayed state keeps each staging's flag.
//!
//! Every step is checked in this order, so that a broken rule is reported by the guard that
//! names it:
//! 1. the rules of each state change, on the machine's states before and after the step: a
//!    TX_PENDING record changes only by its own transaction's outcome (same producer id,
//!    marker epoch >= staged) and then to exactly that outcome (COMMIT: ACKNOWLEDGED for
//!    ACCEPT, ARCHIVED for REJECT / GAP; ABORT: AVAILABLE with the count kept, ARCHIVED at the
//!    delivery limit), or is dropped below a moved log start; the SPSO never passes a
//!    TX_PENDING record; a record becomes TX_PENDING only by a staging of the member holding
//!    it, and an accepted staging stages every offset of every batch (all or nothing); a
//!    refused call changes nothing; terminal records never change (they only leave below the
//!    SPSO); a record held under an unexpired lock is never taken by another member; the
//!    staged / committed / aborted counters count exactly those changes;
//! 2. the invariants of the state: no record is both TX_PENDING and held by a member or a lock
//!    (the lock timer covers exactly the ACQUIRED records, and expiring every lock and
//!    releasing every member leaves each TX_PENDING record as it is); no record is held by
//!    two members; no TX_PENDING record of a fenced epoch survives the fencing ABORT; the
//!    store's state (every write replayed as an encoded record) equals the live persisted
//!    view, and loading it gives the live state modulo what is not persisted (acquisitions,
//!    members, staging times);
//! 3. the reference model: errors and states as the model predicts; for acquisitions (whose
//!    batching rules the model does not re-implement) every change is one an acquisition may
//!    make, and the model adopts the result; the same marker applied to the persisted state
//!    alone gives the live write's state.
//!
//! Bound checked on the in-flight window: `record_locks_max + BATCH_LEN_MAX - 1` (whole log
//! batches of at most `BATCH_LEN_MAX` records are acquired). `PROPTEST_CASES` overrides the
//! number of cases.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::share_coordinator::{
    InitializeState, MarkerPolicy, ShareCoordinatorConfig, SharePartitionKey, ShareStateRecord,
    ShareStateStore, StagedTxn, StateBatch, TopicId,
};

const MEMBERS: usize = 3;
const LOCK: i64 = 1_000;
const BATCH_LEN_MAX: i64 = 4;
/// Producer ids: the first [`STAGERS`] stage acknowledgements; the last never does, so its
/// markers are always another producer's.
const PRODUCERS: [i64; 3] = [100, 101, 102];
const STAGERS: usize = 2;
/// Every producer's epoch at the start.
const FIRST_EPOCH: i16 = 5;

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
    /// Where a rejection or the delivery limit sends a record: ARCHIVING with a dead-letter
    /// queue, else ARCHIVED.
    dead: RecordState,
}

/// The persisted (state id, count, staging) of a record: ACQUIRED as AVAILABLE and TX_PENDING
/// as 5 with the count before the acquisition; never-delivered records not at all.
fn view(r: &Rec) -> Option<(i8, i16, Option<StagedTxn>)> {
    match r.state {
        RecordState::Available => (r.count > 0).then_some((0, r.count, None)),
        RecordState::Acquired => (r.count > 1).then_some((0, r.count - 1, None)),
        RecordState::Acknowledged => Some((2, r.count, None)),
        RecordState::Archiving => Some((3, r.count, None)),
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
            dead: sp.config().dead_letter_state(),
        }
    }

    fn expire(&mut self, now: i64, limit: i16) {
        let dead = self.dead;
        for r in self.recs.values_mut() {
            if r.state == RecordState::Acquired && r.deadline <= now {
                let state = if r.count >= limit {
                    dead
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
                    0 => Rec::unowned(RecordState::Archived, r.count),
                    _ => Rec::unowned(self.dead, r.count),
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
        (limit, dead_lettered): (i16, bool),
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
                        dead_lettered: dead_lettered && ty == 3,
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
        let dead = self.dead;
        for r in self.recs.values_mut() {
            let Some(t) = r.txn else {
                continue;
            };
            if t.producer_id != producer_id || t.producer_epoch > epoch {
                continue;
            }
            let state = match (commit, t.ack_type) {
                (true, 1) => RecordState::Acknowledged,
                (true, 0) => RecordState::Archived,
                // The transaction carried the dead letter: committed with it.
                (true, _) if t.dead_lettered => RecordState::Archived,
                (true, _) => dead,
                (false, _) if r.count >= limit => dead,
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
        let dead = self.dead;
        for r in self.recs.values_mut() {
            if r.state == RecordState::Acquired && r.owner == Some(who) {
                let state = if r.count >= limit {
                    dead
                } else {
                    RecordState::Available
                };
                *r = Rec::unowned(state, r.count);
            }
        }
        self.normalize();
    }

    /// The dead-letter records of the ARCHIVING records in `[first, last]` are written.
    fn complete_archiving(&mut self, first: i64, last: i64) {
        for (_, r) in self.recs.range_mut(first..=last) {
            if r.state == RecordState::Archiving {
                *r = Rec::unowned(RecordState::Archived, r.count);
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

const INVALID_REQUEST: i16 = 42;
const INVALID_RECORD_STATE: i16 = 121;
const PRODUCER_FENCED: i16 = 90;

/// How a marker's epoch relates to its producer's current epoch.
#[derive(Clone, Copy, Debug)]
enum MarkerKind {
    /// current - 1: a late marker of an older transaction.
    Late,
    /// current: as transaction version 1 writes it.
    Tv1,
    /// current + 1: transaction version 2 bumps the epoch when it ends a transaction; the
    /// producer's next transaction uses the bumped epoch.
    Tv2End,
    /// The last marker again (any producer), as a retried WriteTxnMarkers delivers it.
    Duplicate,
}

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
    /// Acknowledges (ShareAcknowledge, or ShareFetch's piggybacked acknowledgements: the
    /// same call) a TX_PENDING range, as any member: INVALID_RECORD_STATE.
    AckPending {
        who: usize,
        pick: usize,
        types: Vec<i8>,
        per_offset: bool,
    },
    /// The member leaves, or its share session closes or times out.
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
    /// Broker restart: replay the encoded records into a fresh store and load from it.
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
        carry: bool,
    },
    /// Stages everything `who` holds, one batch per range.
    StageAll {
        who: usize,
        ty: i8,
        producer: usize,
        carry: bool,
    },
    StageRange {
        who: usize,
        first: i64,
        len: i64,
        types: Vec<i8>,
        producer: usize,
        carry: bool,
    },
    /// Several batches of `who`'s held ranges in one staging, plus a `spoiler` that must
    /// make the whole request fail with nothing staged: 0 none, 1 a range another member
    /// holds, 2 a TX_PENDING range, 3 a range that is not ACQUIRED, 4 RELEASE, RENEW or an
    /// unknown type in one batch, 5 a batch overlapping another.
    StageMulti {
        who: usize,
        picks: Vec<(usize, (i64, i64))>,
        ty: i8,
        spoiler: u8,
        producer: usize,
        carry: bool,
    },
    StageMalformed {
        who: usize,
        kind: u8,
        producer: usize,
    },
    /// Stages a TX_PENDING range again (any member, any producer): INVALID_RECORD_STATE.
    StagePending {
        who: usize,
        pick: usize,
        ty: i8,
        producer: usize,
    },
    /// A fenced zombie (`producer` at an epoch below its current one) tries to stage what
    /// `who` holds.
    ZombieStage {
        who: usize,
        producer: usize,
    },
    /// `producer`'s COMMIT (`commit`) or ABORT marker reaches the live share partition
    /// (producer 2 never stages: its markers are another producer's).
    Marker {
        producer: usize,
        commit: bool,
        kind: MarkerKind,
    },
    /// The share partition is not loaded (the broker restarted, or it was evicted) when the
    /// marker reaches `__share_group_state`: the store resolves the persisted stagings alone
    /// (`ShareStateStore::resolve_marker`), then the share partition is loaded from it.
    MarkerUnloaded {
        producer: usize,
        commit: bool,
        kind: MarkerKind,
    },
    /// The broker wrote the dead-letter records of (part of) an ARCHIVING run, or of an
    /// arbitrary range (only its ARCHIVING records change).
    CompleteArchiving {
        pick: usize,
        cut: (i64, i64),
        arbitrary: Option<(i64, i64)>,
    },
    /// The broker wrote the dead-letter records of (part of) an ARCHIVING run and crashed
    /// before persisting ARCHIVED: the share partition is loaded again with them ARCHIVING,
    /// so the next attempt must find the dead letters already written (decision 0022 point 3).
    DeadLetterCrash {
        pick: usize,
        cut: (i64, i64),
    },
    /// `producer`'s epoch moves on: a TV2 transaction ended with nothing staged here
    /// (`fence` false), or InitProducerId of a new instance fences a zombie (`fence`): the
    /// coordinator bumps the epoch, writes ABORT with it, and the new instance gets the next
    /// one; every older epoch is fenced from then on.
    Bump {
        producer: usize,
        fence: bool,
    },
}

fn stage_type() -> impl Strategy<Value = i8> {
    prop_oneof![
        12 => Just(1i8),
        8 => Just(3i8),
        2 => Just(0i8),
        1 => Just(2i8),
        1 => Just(4i8),
        1 => prop_oneof![Just(-1i8), Just(5i8), Just(7i8)],
    ]
}

fn ack_type() -> impl Strategy<Value = i8> {
    prop_oneof![4 => Just(1i8), 3 => Just(2i8), 2 => Just(3i8), 1 => Just(0i8), 1 => Just(4i8)]
}

fn marker_kind() -> impl Strategy<Value = MarkerKind> {
    prop_oneof![
        1 => Just(MarkerKind::Late),
        2 => Just(MarkerKind::Tv1),
        3 => Just(MarkerKind::Tv2End),
        2 => Just(MarkerKind::Duplicate),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..MEMBERS;
    let stager = 0..STAGERS;
    let holder = prop_oneof![4 => Just(None), 1 => (0..MEMBERS).prop_map(Some)];
    let cut = (0..3i64, 0..3i64);
    prop_oneof![
        8 => (who.clone(), 1..12i32, 1..6i32, any::<bool>(), any::<bool>(), 0..5usize, prop_oneof![4 => Just(0i64), 1 => 1..6i64])
            .prop_map(|(who, max_records, batch_size, record_limit, read_committed, batches, stale)| Op::Acquire {
                who, max_records, batch_size, record_limit, read_committed, batches, stale,
            }),
        5 => (who.clone(), holder.clone(), any::<usize>(), cut.clone(),
              proptest::collection::vec(ack_type(), 1..6), any::<bool>())
            .prop_map(|(who, holder, pick, cut, types, per_offset)| Op::AckHeld {
                who, holder: holder.unwrap_or(who), pick, cut, types, per_offset,
            }),
        2 => (who.clone(), ack_type()).prop_map(|(who, ty)| Op::AckAll { who, ty }),
        2 => (who.clone(), 0..120i64, 1..8i64, proptest::collection::vec(ack_type(), 1..9))
            .prop_map(|(who, first, len, types)| Op::AckRange { who, first, len, types }),
        1 => (who.clone(), 0..6u8).prop_map(|(who, kind)| Op::AckMalformed { who, kind }),
        2 => (who.clone(), any::<usize>(), proptest::collection::vec(ack_type(), 1..6), any::<bool>())
            .prop_map(|(who, pick, types, per_offset)| Op::AckPending { who, pick, types, per_offset }),
        1 => who.clone().prop_map(|who| Op::Release { who }),
        3 => (0..1_500i64).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Expire),
        1 => (0..8i64).prop_map(|delta| Op::LogStart { delta }),
        1 => Just(Op::Restart),
        5 => (who.clone(), holder, any::<usize>(), cut.clone(),
              proptest::collection::vec(stage_type(), 1..6), any::<bool>(), stager.clone(), any::<bool>())
            .prop_map(|(who, holder, pick, cut, types, per_offset, producer, carry)| Op::StageHeld {
                who, holder: holder.unwrap_or(who), pick, cut, types, per_offset, producer, carry,
            }),
        2 => (who.clone(), stage_type(), stager.clone(), any::<bool>())
            .prop_map(|(who, ty, producer, carry)| Op::StageAll { who, ty, producer, carry }),
        1 => (who.clone(), 0..120i64, 1..8i64, proptest::collection::vec(stage_type(), 1..9), stager.clone(), any::<bool>())
            .prop_map(|(who, first, len, types, producer, carry)| Op::StageRange { who, first, len, types, producer, carry }),
        3 => (who.clone(), proptest::collection::vec((any::<usize>(), cut.clone()), 1..4),
              prop_oneof![Just(1i8), Just(3i8), Just(0i8)],
              prop_oneof![3 => Just(0u8), 2 => 1..6u8], stager.clone(), any::<bool>())
            .prop_map(|(who, picks, ty, spoiler, producer, carry)| Op::StageMulti { who, picks, ty, spoiler, producer, carry }),
        1 => (who.clone(), 0..6u8, stager.clone()).prop_map(|(who, kind, producer)| Op::StageMalformed { who, kind, producer }),
        1 => (who.clone(), any::<usize>(), stage_type(), stager.clone())
            .prop_map(|(who, pick, ty, producer)| Op::StagePending { who, pick, ty, producer }),
        1 => (who.clone(), stager.clone()).prop_map(|(who, producer)| Op::ZombieStage { who, producer }),
        7 => (0..PRODUCERS.len(), any::<bool>(), marker_kind())
            .prop_map(|(producer, commit, kind)| Op::Marker { producer, commit, kind }),
        2 => (0..PRODUCERS.len(), any::<bool>(), marker_kind())
            .prop_map(|(producer, commit, kind)| Op::MarkerUnloaded { producer, commit, kind }),
        2 => (stager, any::<bool>()).prop_map(|(producer, fence)| Op::Bump { producer, fence }),
        4 => (any::<usize>(), (0..3i64, 0..3i64), prop_oneof![4 => Just(None), 1 => (0..120i64, 1..8i64).prop_map(Some)])
            .prop_map(|(pick, cut, arbitrary)| Op::CompleteArchiving { pick, cut, arbitrary }),
        1 => (any::<usize>(), cut).prop_map(|(pick, cut)| Op::DeadLetterCrash { pick, cut }),
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

/// What one step did, for the transition checks.
#[derive(Debug, Default)]
struct Effect {
    /// Markers applied (live or to the persisted state): (producer id, epoch, commit).
    markers: Vec<(i64, i16, bool)>,
    /// A staging the share partition accepted: (member, producer id, epoch).
    staged: Option<(usize, i64, i16)>,
    /// The batches of that staging.
    staged_batches: Vec<AckBatch>,
    /// A call refused with an error (or by the broker before the share partition).
    refused: bool,
    /// The share partition was loaded afresh (its counters start again).
    reloaded: bool,
    /// The dead-letter records of the ARCHIVING records in this range were written.
    completed: Option<(i64, i64)>,
}

/// An acquisition, checked once the step's invariants held.
struct AcqCheck {
    before: Model,
    after: Model,
    who: usize,
    fetch_offset: i64,
    max_records: i32,
    mode: AcquireMode,
    read_committed: bool,
    acq: Acquisition,
    first_base: i64,
}

type Deferred = Box<dyn FnOnce(&World)>;

/// The dead-letter partition as a read_committed reader sees it, and what is owed to it.
#[derive(Debug, Default)]
struct Letters {
    /// Visible dead letters per source offset: committed with their transaction, or written
    /// after the records became ARCHIVING.
    visible: BTreeMap<i64, u32>,
    /// Dead letters written inside a transaction not yet ended: (producer id, epoch, offset).
    open: Vec<(i64, i16, i64)>,
    /// The share partition was loaded with ARCHIVING records (decision 0022 point 3): the next
    /// attempt scans the dead-letter partition and writes only what it does not find. Without
    /// it the broker writes blindly, so no ARCHIVING record may have a dead letter then.
    unverified: bool,
    /// Offsets archived by a REJECT or the delivery limit: they entered ARCHIVING, or a COMMIT
    /// archived them with the dead letter their transaction carried. Each must end with
    /// exactly one dead letter.
    owed: BTreeSet<i64>,
    /// Offsets that left the log (a moved log start) while ARCHIVING or TX_PENDING: their
    /// dead letter may or may not exist, but never twice.
    gone: BTreeSet<i64>,
}

impl Letters {
    /// One dead letter for `offset` written outside any transaction (after ARCHIVING), unless
    /// the dedupe scan finds one already.
    fn write(&mut self, offset: i64) {
        let found = self.visible.get(&offset).is_some_and(|&n| n > 0);
        if !(self.unverified && found) {
            *self.visible.entry(offset).or_insert(0) += 1;
        }
    }

    /// `producer_id`'s marker at `epoch` reaches the dead-letter partition too: it ends the
    /// transaction its dead letters were written in.
    fn resolve(&mut self, producer_id: i64, epoch: i16, commit: bool) {
        let mut kept = Vec::new();
        for (pid, e, offset) in std::mem::take(&mut self.open) {
            if pid == producer_id && e <= epoch {
                if commit {
                    *self.visible.entry(offset).or_insert(0) += 1;
                }
            } else {
                kept.push((pid, e, offset));
            }
        }
        self.open = kept;
    }
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
    /// Current epoch of each producer (the transaction coordinator's view).
    epochs: [i16; 3],
    /// Epochs below this are fenced (by the last InitProducerId of a new instance).
    fenced: [i16; 3],
    /// (producer index, epoch, commit) of the last marker.
    last_marker: Option<(usize, i16, bool)>,
    letters: Letters,
    effect: Effect,
    /// Model comparisons of the current step, run after its invariants: so that a broken
    /// rule is reported by the invariant that guards it.
    deferred: Vec<Deferred>,
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
            epochs: [FIRST_EPOCH; 3],
            fenced: [FIRST_EPOCH; 3],
            last_marker: None,
            letters: Letters::default(),
            effect: Effect::default(),
            deferred: Vec::new(),
        };
        let init = InitializeState {
            state_epoch: 0,
            start_offset: 0,
        };
        let record = w.store.initialize(&w.key, init, 0).expect("initialize");
        w.append(record);
        w
    }

    fn defer(&mut self, check: impl FnOnce(&World) + 'static) {
        self.deferred.push(Box::new(check));
    }

    fn append(&mut self, record: ShareStateRecord) {
        let (k, v) = record.encode().expect("encodes");
        let decoded = ShareStateRecord::decode(&k, v.as_deref()).expect("decodes");
        assert_eq!(
            decoded, record,
            "a share-state record round-trips its encoding"
        );
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
        assert!(
            write
                .batches
                .iter()
                .all(|b| b.staged_txn.is_some() == (b.state == RecordState::TxPending)),
            "a TX_PENDING batch is written with its staging: {write:?}"
        );
        let record = self
            .store
            .write(&self.key, &write.to_write_state(0), self.now)
            .expect("the store accepts the write");
        self.append(record);
    }

    /// The invariants of one state, checked after every step.
    fn check_state(&self) {
        self.sp.check_invariants();
        let live = Model::from_machine(&self.sp);
        self.check_locks(&live);
        self.check_persisted(&live);
        for r in self.sp.ranges() {
            let Some(t) = r.staged_txn else {
                continue;
            };
            let p = PRODUCERS
                .iter()
                .position(|&pid| pid == t.producer_id)
                .filter(|&p| p < STAGERS)
                .expect("staged by a staging producer");
            assert!(
                t.producer_epoch >= self.fenced[p],
                "TX_PENDING {r:?} of a fenced epoch survived the fencing ABORT (fenced below {})",
                self.fenced[p]
            );
        }
        assert!(
            self.sp.in_flight_count() < self.cfg.record_locks_max + BATCH_LEN_MAX,
            "in flight {} over the limit",
            self.sp.in_flight_count()
        );
    }

    /// The machine against the reference model, checked after every step.
    fn check_model(&self) {
        let view = self.sp.persisted_view();
        let batches: Vec<StateBatch> = view.batches.iter().map(|b| StateBatch::from(*b)).collect();
        assert_eq!(
            batches,
            self.model.persisted_view(),
            "persisted view vs model"
        );
        assert_eq!(
            Model::from_machine(&self.sp),
            self.model,
            "machine vs model"
        );
        let mut normalized = self.model.clone();
        normalized.normalize();
        assert_eq!(normalized, self.model, "the start offset is normalized");
        assert_eq!(
            self.sp.tx_pending_count(),
            self.model
                .recs
                .values()
                .filter(|r| r.state == RecordState::TxPending)
                .count() as i64
        );
    }

    /// No record is both TX_PENDING and held by a lock or a member, none is held by two
    /// members, and nothing that releases locks (expiry, a member leaving, a session
    /// closing) would release a TX_PENDING record.
    fn check_locks(&self, live: &Model) {
        for r in self.sp.ranges() {
            if r.state == RecordState::TxPending {
                assert_eq!(r.member_id, None, "TX_PENDING held by a member: {r:?}");
                assert_eq!(r.lock_deadline_ms, None, "TX_PENDING under a lock: {r:?}");
                assert!(r.staged_txn.is_some(), "TX_PENDING without staging: {r:?}");
            }
        }
        let deadlines = live
            .recs
            .values()
            .filter(|r| r.state == RecordState::Acquired)
            .map(|r| r.deadline);
        assert_eq!(
            self.sp.next_lock_deadline(),
            deadlines.min(),
            "the lock timer covers exactly the ACQUIRED records"
        );
        let mut holder: BTreeMap<i64, usize> = BTreeMap::new();
        for m in 0..MEMBERS {
            for r in self.sp.acquired_by(&member(m)) {
                for o in r.first_offset..=r.last_offset {
                    if let Some(other) = holder.insert(o, m) {
                        panic!("offset {o} held by two members: m{other} and m{m}");
                    }
                    let rec = live.recs.get(&o);
                    assert!(
                        rec.is_some_and(
                            |rec| rec.state == RecordState::Acquired && rec.owner == Some(m)
                        ),
                        "m{m} holds {o}, which is {rec:?}"
                    );
                }
            }
        }
        let acquired = live
            .recs
            .values()
            .filter(|r| r.state == RecordState::Acquired)
            .count();
        assert_eq!(
            holder.len(),
            acquired,
            "every ACQUIRED record has one holder"
        );
        // Everything that releases locks, at once, on a copy.
        let mut released = self.sp.clone();
        let far = self.now.saturating_add(1_000 * LOCK);
        let _ = released.expire_locks(far).expect("running");
        for m in 0..MEMBERS {
            let _ = released.release_member(&member(m), far).expect("running");
        }
        assert_eq!(
            released.next_lock_deadline(),
            None,
            "a lock outlives lock expiry"
        );
        let released = Model::from_machine(&released);
        for (o, r) in live
            .recs
            .iter()
            .filter(|(_, r)| r.state == RecordState::TxPending)
        {
            assert_eq!(
                released.recs.get(o),
                Some(r),
                "lock expiry or a member leaving releases TX_PENDING {o}"
            );
        }
    }

    /// The persisted state (the store after replaying every record) is the live state, up to
    /// what is documented as not persisted (acquisitions, members, staging times), and loads.
    fn check_persisted(&self, live: &Model) {
        let view = self.sp.persisted_view();
        let batches: Vec<StateBatch> = view.batches.iter().map(|b| StateBatch::from(*b)).collect();
        let stored = self.store.state(&self.key).expect("initialized");
        assert_eq!(
            stored.start_offset, view.start_offset,
            "stored start offset"
        );
        assert_eq!(stored.state_batches, batches, "stored batches vs live");
        assert_eq!(
            i64::from(stored.delivery_complete_count),
            self.sp.delivery_complete_count()
        );
        assert_eq!(
            self.store.tx_pending_count(Some(&self.key)),
            self.sp.tx_pending_count(),
            "TX_PENDING offsets persisted vs live"
        );
        let (read, _) = self.store.read(&self.key, 0, self.now).expect("read");
        let (loaded, _) =
            SharePartition::from_persisted(self.cfg.clone(), &read).expect("the state loads");
        let mut expected = live.clone();
        expected.restart();
        assert_eq!(
            Model::from_machine(&loaded),
            expected,
            "replayed state vs live state (modulo acquisitions, members, staging times)"
        );
    }

    /// Runs `op` and checks it: first the rules of every state change across it and the
    /// invariants of the state it leaves, then the reference model (so that a broken rule is
    /// reported by the invariant that guards it).
    fn step(&mut self, op: &Op) {
        let before = Model::from_machine(&self.sp);
        let log_start_before = self.log.start;
        self.effect = Effect::default();
        let stats = self.sp.txn_stats();
        self.step_inner(op);
        let after = Model::from_machine(&self.sp);
        self.track_letters(&before, &after, self.log.start > log_start_before);
        self.check_letters(op, &after);
        let counted = self.check_transition(op, &before, &after, self.log.start > log_start_before);
        if !self.effect.reloaded {
            let now = self.sp.txn_stats();
            let delta = (
                now.staged - stats.staged,
                now.committed - stats.committed,
                now.aborted - stats.aborted,
            );
            assert_eq!(
                delta, counted,
                "staged, committed, aborted counters by {op:?}"
            );
        }
        self.check_state();
        for check in std::mem::take(&mut self.deferred) {
            check(self);
        }
        self.check_model();
    }

    /// What a step owes the dead-letter partition: offsets that entered ARCHIVING, or that a
    /// COMMIT archived with the dead letter its transaction carried; and offsets that left the
    /// log while ARCHIVING or TX_PENDING.
    fn track_letters(&mut self, before: &Model, after: &Model, log_start_moved: bool) {
        let offsets: BTreeSet<i64> = before
            .recs
            .keys()
            .chain(after.recs.keys())
            .copied()
            .collect();
        for o in offsets {
            let (b, a) = (before.recs.get(&o), after.recs.get(&o));
            if b == a {
                continue;
            }
            let dropped = a.is_none() && log_start_moved && o < self.log.start;
            if dropped {
                if b.is_some_and(|b| {
                    matches!(b.state, RecordState::Archiving | RecordState::TxPending)
                }) {
                    self.letters.gone.insert(o);
                }
                continue;
            }
            if a.is_some_and(|a| a.state == RecordState::Archiving) {
                self.letters.owed.insert(o);
            }
            let carried = b.is_some_and(|b| {
                b.state == RecordState::TxPending && b.txn.is_some_and(|t| t.dead_lettered)
            });
            let archived = match a {
                Some(a) => a.state == RecordState::Archived,
                None => o < after.start,
            };
            if carried && archived {
                self.letters.owed.insert(o);
            }
        }
    }

    /// The dead-letter partition after a step: at most one dead letter per offset, only for
    /// offsets archived by a REJECT or the delivery limit (so none of an aborted transaction,
    /// none for an ACCEPTed record), each on a record that is ARCHIVED, or ARCHIVING only
    /// while the broker will look before it writes (else it would write it again); and no
    /// record left ARCHIVING once its dead letter was written.
    fn check_letters(&self, op: &Op, after: &Model) {
        for (&o, &n) in &self.letters.visible {
            assert!(n <= 1, "offset {o} has {n} dead letters after {op:?}");
            assert!(
                self.letters.owed.contains(&o) || self.letters.gone.contains(&o),
                "offset {o} has a dead letter but was never archived by a REJECT or the \
                 delivery limit ({op:?})"
            );
            let Some(r) = after.recs.get(&o) else {
                continue;
            };
            match r.state {
                RecordState::Archived => {}
                RecordState::Archiving => assert!(
                    self.letters.unverified,
                    "ARCHIVING {o} already has its dead letter and nothing will look for it \
                     before writing another ({op:?})"
                ),
                s => panic!("offset {o} has a visible dead letter but is {s:?} ({op:?}): {r:?}"),
            }
        }
        if let Some((first, last)) = self.effect.completed {
            for (o, r) in after.recs.range(first..=last) {
                assert!(
                    r.state != RecordState::Archiving,
                    "{o} stayed ARCHIVING after its dead letter was written ({op:?})"
                );
            }
        }
    }

    /// The end of a run: every transaction ends (`commits`, per staging producer), every
    /// ARCHIVING record gets its dead letter; then each offset archived by a REJECT or the
    /// delivery limit has exactly one dead letter.
    fn drain(&mut self, commits: &[bool]) {
        for (producer, &commit) in commits.iter().enumerate().take(STAGERS) {
            self.step(&Op::Marker {
                producer,
                commit,
                kind: MarkerKind::Tv2End,
            });
        }
        self.step(&Op::CompleteArchiving {
            pick: 0,
            cut: (0, 0),
            arbitrary: Some((0, i64::from(u32::MAX))),
        });
        assert_eq!(self.sp.tx_pending_count(), 0, "every transaction ended");
        assert!(self.letters.open.is_empty(), "{:?}", self.letters.open);
        for &o in self.letters.owed.difference(&self.letters.gone) {
            let n = self.letters.visible.get(&o).copied().unwrap_or(0);
            assert_eq!(
                n, 1,
                "offset {o}, archived by a REJECT or the delivery limit, has {n} dead letters"
            );
        }
    }

    /// The dead letters of the ARCHIVING records in `[first, last]` are written (before
    /// ARCHIVED is persisted, or a crash).
    fn write_dead_letters(&mut self, first: i64, last: i64) {
        for r in self.sp.archiving() {
            for o in r.first_offset.max(first)..=r.last_offset.min(last) {
                self.letters.write(o);
            }
        }
    }

    /// A staging that carries its dead letters: the broker writes one per REJECTed offset,
    /// from the staged machine ([`SharePartition::dead_letters_of`]), in the transaction.
    fn carry_dead_letters(&mut self, (producer_id, epoch): (i64, i16), batches: &[AckBatch]) {
        let limit = self.cfg.delivery_count_limit;
        let mut rejected = BTreeSet::new();
        for b in batches {
            for o in b.first_offset..=b.last_offset {
                let i = usize::try_from(o - b.first_offset).expect("offset in batch");
                let ty = if b.ack_types.len() == 1 {
                    b.ack_types[0]
                } else {
                    b.ack_types[i]
                };
                if ty == AcknowledgeType::Reject.id() {
                    rejected.insert(o);
                }
            }
        }
        let staged = Model::from_machine(&self.sp);
        let mut letters = BTreeSet::new();
        for r in self.sp.dead_letters_of(batches) {
            for o in r.first_offset..=r.last_offset {
                let rec = staged
                    .recs
                    .get(&o)
                    .expect("a dead letter of a tracked record");
                assert!(
                    rec.state == RecordState::TxPending
                        && rec.txn.is_some_and(|t| t.dead_lettered)
                        && rec.count == r.delivery_count
                        && r.cause == DeadLetterCause::of(rec.count, limit),
                    "dead letter {r:?} of {o}, which is {rec:?}"
                );
                assert!(letters.insert(o), "two dead letters of {o} in one staging");
                self.letters.open.push((producer_id, epoch, o));
            }
        }
        assert_eq!(letters, rejected, "one dead letter per REJECTed offset");
    }

    /// The rules of a state change, on the machine's states before and after a step. Returns
    /// the records staged, committed and aborted by it.
    fn check_transition(
        &self,
        op: &Op,
        before: &Model,
        after: &Model,
        log_start_moved: bool,
    ) -> (i64, i64, i64) {
        let mut counted = (0, 0, 0);
        let limit = self.cfg.delivery_count_limit;
        let now = self.now;
        if self.effect.refused {
            assert_eq!(before, after, "refused {op:?} changed the share partition");
        }
        let offsets: BTreeSet<i64> = before
            .recs
            .keys()
            .chain(after.recs.keys())
            .copied()
            .collect();
        for o in offsets {
            let (b, a) = (before.recs.get(&o), after.recs.get(&o));
            if b == a {
                continue;
            }
            // Gone below a moved log start: the data is gone.
            let dropped = a.is_none() && log_start_moved && o < self.log.start;
            let passed = a.is_none() && o < after.start;
            if let Some(b) = b.filter(|b| b.state.is_terminal()) {
                assert!(passed, "terminal {o} changed by {op:?}: {b:?} -> {a:?}");
            }
            self.check_dead_letter(op, o, b, a, dropped, passed);
            if let Some(b) = b.filter(|b| b.state == RecordState::TxPending && !dropped) {
                let t = b.txn.expect("staged");
                let own =
                    self.effect.markers.iter().find(|(pid, epoch, _)| {
                        t.producer_id == *pid && t.producer_epoch <= *epoch
                    });
                let Some(&(_, _, commit)) = own else {
                    assert!(
                        !passed,
                        "SPSO passed TX_PENDING {o} ({op:?}): {b:?}, SPSO {}",
                        after.start
                    );
                    panic!(
                        "TX_PENDING {o} changed by {op:?}, not by its own transaction's \
                         outcome: {b:?} -> {a:?}"
                    );
                };
                let dead = self.cfg.dead_letter_state();
                let expected = match (commit, t.ack_type) {
                    (true, 1) => RecordState::Acknowledged,
                    (true, 0) => RecordState::Archived,
                    (true, _) if t.dead_lettered => RecordState::Archived,
                    (true, _) => dead,
                    (false, _) if b.count >= limit => dead,
                    (false, _) => RecordState::Available,
                };
                let ok = match a {
                    Some(a) => *a == Rec::unowned(expected, b.count),
                    None => expected.is_terminal() && passed,
                };
                assert!(
                    ok,
                    "TX_PENDING {o} resolved by {op:?} to {a:?}, not {expected:?} with count {}",
                    b.count
                );
                if commit {
                    counted.1 += 1;
                } else {
                    counted.2 += 1;
                }
            }
            if let (Some(b), Some(a)) = (b, a) {
                if b.state == RecordState::Acquired
                    && a.state == RecordState::Acquired
                    && a.owner != b.owner
                {
                    assert!(
                        b.deadline <= now,
                        "offset {o} held by {:?} until {} taken by {:?} at {now} ({op:?})",
                        b.owner,
                        b.deadline,
                        a.owner
                    );
                }
            }
            if let Some(a) = a.filter(|a| a.state == RecordState::TxPending) {
                let ok = self.effect.staged.is_some_and(|(who, pid, epoch)| {
                    b.is_some_and(|b| {
                        b.state == RecordState::Acquired
                            && b.owner == Some(who)
                            && b.deadline > now
                            && b.count == a.count
                    }) && a
                        .txn
                        .is_some_and(|t| t.producer_id == pid && t.producer_epoch == epoch)
                });
                assert!(
                    ok,
                    "TX_PENDING {o} appeared by {op:?} without its holder staging it: {b:?} -> {a:?}"
                );
                counted.0 += 1;
            }
        }
        for b in &self.effect.staged_batches {
            for o in b.first_offset..=b.last_offset {
                assert!(
                    after.recs.contains_key(&o) || o >= after.start,
                    "SPSO passed TX_PENDING {o} as {op:?} staged it, SPSO {}",
                    after.start
                );
                let staged = after.recs.get(&o).is_some_and(|a| {
                    a.state == RecordState::TxPending
                        && self
                            .effect
                            .staged
                            .is_some_and(|(_, pid, _)| a.txn.is_some_and(|t| t.producer_id == pid))
                });
                assert!(
                    staged,
                    "accepted staging {op:?} did not stage {o}: all or nothing"
                );
            }
        }
        counted
    }

    /// The rules of ARCHIVING (KIP-1191) for the change of offset `o` from `b` to `a`: an
    /// ARCHIVING record leaves only for ARCHIVED, only once its dead-letter record is written
    /// (or below a moved log start, its data gone), and the SPSO never passes it; without a
    /// dead-letter queue nothing is ever ARCHIVING; with one, a record reaches ARCHIVED from
    /// a live state only by a GAP, an aborted transaction's data, or data gone from the log.
    fn check_dead_letter(
        &self,
        op: &Op,
        o: i64,
        b: Option<&Rec>,
        a: Option<&Rec>,
        dropped: bool,
        passed: bool,
    ) {
        let completed = self
            .effect
            .completed
            .is_some_and(|(first, last)| (first..=last).contains(&o));
        if let Some(a) = a {
            assert!(
                self.cfg.dead_letter || a.state != RecordState::Archiving,
                "{o} ARCHIVING without a dead-letter queue ({op:?})"
            );
        }
        if let Some(b) = b.filter(|b| b.state == RecordState::Archiving && !dropped) {
            match a {
                Some(a) => assert!(
                    completed && *a == Rec::unowned(RecordState::Archived, b.count),
                    "ARCHIVING {o} changed by {op:?} to {a:?}"
                ),
                None => assert!(
                    completed && passed,
                    "SPSO passed ARCHIVING {o} by {op:?} before its dead-letter record"
                ),
            }
        }
        let entered_archived = a.is_some_and(|a| a.state == RecordState::Archived)
            && b.is_some_and(|b| {
                matches!(
                    b.state,
                    RecordState::Acquired | RecordState::Available | RecordState::TxPending
                )
            });
        if self.cfg.dead_letter && entered_archived {
            let gap_or_gone = match op {
                Op::Acquire { .. } => true,
                Op::AckHeld { types, .. } | Op::AckRange { types, .. } => types.contains(&0),
                Op::AckAll { ty, .. } => *ty == 0,
                Op::Marker { .. } | Op::MarkerUnloaded { .. } | Op::Bump { .. } => {
                    b.and_then(|b| b.txn).is_some_and(|t| {
                        let committed = self.effect.markers.iter().any(|&(pid, epoch, commit)| {
                            commit && t.producer_id == pid && t.producer_epoch <= epoch
                        });
                        t.ack_type == 0 || (t.dead_lettered && committed)
                    })
                }
                _ => false,
            };
            assert!(
                gap_or_gone,
                "{o} ARCHIVED by {op:?} without its dead-letter record: {b:?} -> {a:?}"
            );
        }
    }

    fn held(&self, who: usize, pick: usize, cut: (i64, i64)) -> Option<(i64, i64)> {
        let held = self.sp.acquired_by(&member(who));
        if held.is_empty() {
            return None;
        }
        let r = held[pick % held.len()];
        let first = (r.first_offset + cut.0).min(r.last_offset);
        let last = (r.last_offset - cut.1).max(first);
        Some((first, last))
    }

    fn policy(&self) -> MarkerPolicy {
        MarkerPolicy {
            delivery_count_limit: self.cfg.delivery_count_limit,
            dead_letter: self.cfg.dead_letter,
        }
    }

    fn archiving(&self, pick: usize, cut: (i64, i64)) -> Option<(i64, i64)> {
        let runs = self.sp.archiving();
        if runs.is_empty() {
            return None;
        }
        let r = runs[pick % runs.len()];
        let first = (r.first_offset + cut.0).min(r.last_offset);
        let last = (r.last_offset - cut.1).max(first);
        Some((first, last))
    }

    fn pending(&self, pick: usize) -> Option<(i64, i64)> {
        let pending: Vec<(i64, i64)> = self
            .sp
            .ranges()
            .filter(|r| r.state == RecordState::TxPending)
            .map(|r| (r.first_offset, r.last_offset))
            .collect();
        (!pending.is_empty()).then(|| pending[pick % pending.len()])
    }

    fn typed(first: i64, last: i64, types: &[i8], per_offset: bool) -> AckBatch {
        let ack_types = if per_offset {
            (0..=(last - first) as usize)
                .map(|i| types[i % types.len()])
                .collect()
        } else {
            vec![types[0]]
        };
        AckBatch::new(first, last, ack_types)
    }

    fn marker_epoch(
        &mut self,
        producer: usize,
        commit: bool,
        kind: MarkerKind,
    ) -> (usize, i16, bool) {
        let current = self.epochs[producer];
        match kind {
            MarkerKind::Late => (producer, current - 1, commit),
            MarkerKind::Tv1 => (producer, current, commit),
            MarkerKind::Tv2End => {
                self.epochs[producer] += 1;
                (producer, current + 1, commit)
            }
            MarkerKind::Duplicate => self.last_marker.unwrap_or((producer, current, commit)),
        }
    }

    fn step_inner(&mut self, op: &Op) {
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
                if let Some((first, last)) = self.held(*holder, *pick, *cut) {
                    let batch = Self::typed(first, last, types, *per_offset);
                    self.acknowledge(*who, vec![batch]);
                }
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
                let batch = Self::typed(*first, first + len - 1, types, types.len() > 1);
                self.acknowledge(*who, vec![batch]);
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
            Op::AckPending {
                who,
                pick,
                types,
                per_offset,
            } => {
                if let Some((first, last)) = self.pending(*pick) {
                    let batch = Self::typed(first, last, types, *per_offset);
                    let refused = self.acknowledge(*who, vec![batch]);
                    self.defer(move |_| {
                        assert_eq!(
                            refused,
                            Some(INVALID_RECORD_STATE),
                            "acknowledging TX_PENDING"
                        );
                    });
                }
            }
            Op::Release { who } => {
                self.model
                    .release(*who, self.now, self.cfg.delivery_count_limit);
                let write = self
                    .sp
                    .release_member(&member(*who), self.now)
                    .expect("running");
                self.persist(write);
            }
            Op::Advance { ms } => self.now += ms,
            Op::Expire => {
                self.model.expire(self.now, self.cfg.delivery_count_limit);
                self.model.normalize();
                let write = self.sp.expire_locks(self.now).expect("running");
                self.persist(write);
            }
            Op::LogStart { delta } => {
                let offset = (self.log.start + delta).min(self.log.end());
                if offset > self.log.start {
                    self.log.start = offset;
                    self.model.log_start(offset);
                    let write = self.sp.update_log_start_offset(offset).expect("running");
                    self.persist(write);
                }
            }
            Op::Restart => {
                self.model.restart();
                self.reload();
            }
            Op::StageHeld {
                who,
                holder,
                pick,
                cut,
                types,
                per_offset,
                producer,
                carry,
            } => {
                if let Some((first, last)) = self.held(*holder, *pick, *cut) {
                    let batch = Self::typed(first, last, types, *per_offset);
                    let epoch = self.epochs[*producer];
                    self.broker_stage(*who, (*producer, epoch), vec![batch], *carry);
                }
            }
            Op::StageAll {
                who,
                ty,
                producer,
                carry,
            } => {
                let batches = self
                    .sp
                    .acquired_by(&member(*who))
                    .iter()
                    .map(|r| AckBatch::new(r.first_offset, r.last_offset, vec![*ty]))
                    .collect();
                let epoch = self.epochs[*producer];
                self.broker_stage(*who, (*producer, epoch), batches, *carry);
            }
            Op::StageRange {
                who,
                first,
                len,
                types,
                producer,
                carry,
            } => {
                let batch = Self::typed(*first, first + len - 1, types, types.len() > 1);
                let epoch = self.epochs[*producer];
                self.broker_stage(*who, (*producer, epoch), vec![batch], *carry);
            }
            Op::StageMulti {
                who,
                picks,
                ty,
                spoiler,
                producer,
                carry,
            } => {
                let batches = self.multi_batches(*who, picks, *ty, *spoiler);
                let epoch = self.epochs[*producer];
                self.broker_stage(*who, (*producer, epoch), batches, *carry);
            }
            Op::StageMalformed {
                who,
                kind,
                producer,
            } => {
                let (f, l) = self.held(*who, 0, (0, 0)).unwrap_or((0, 3));
                let batches = match kind {
                    0 => vec![AckBatch::new(l + 1, l, vec![1])],
                    1 => vec![
                        AckBatch::new(f, l, vec![1]),
                        AckBatch::new(l, l + 2, vec![1]),
                    ],
                    2 => vec![AckBatch::new(f, l, vec![])],
                    3 => vec![AckBatch::new(f, l + 2, vec![1, 3])],
                    4 => vec![
                        AckBatch::new(l + 5, l + 6, vec![1]),
                        AckBatch::new(f, l, vec![1]),
                    ],
                    _ => vec![AckBatch::new(f, l, vec![-1])],
                };
                let epoch = self.epochs[*producer];
                let refused = self.broker_stage(*who, (*producer, epoch), batches, true);
                let expected = if *kind < 5 {
                    INVALID_REQUEST
                } else {
                    INVALID_RECORD_STATE
                };
                let kind = *kind;
                self.defer(move |_| {
                    assert_eq!(refused, Some(expected), "malformed staging {kind}");
                });
            }
            Op::StagePending {
                who,
                pick,
                ty,
                producer,
            } => {
                if let Some((first, last)) = self.pending(*pick) {
                    let batch = AckBatch::new(first, last, vec![*ty]);
                    let epoch = self.epochs[*producer];
                    let refused = self.broker_stage(*who, (*producer, epoch), vec![batch], true);
                    self.defer(move |_| {
                        assert_eq!(
                            refused,
                            Some(INVALID_RECORD_STATE),
                            "staging TX_PENDING again"
                        );
                    });
                }
            }
            Op::ZombieStage { who, producer } => {
                let epoch = self.epochs[*producer] - 1;
                if epoch < FIRST_EPOCH {
                    return;
                }
                let batches = self
                    .sp
                    .acquired_by(&member(*who))
                    .iter()
                    .map(|r| AckBatch::new(r.first_offset, r.last_offset, vec![1]))
                    .collect();
                let refused = self.broker_stage(*who, (*producer, epoch), batches, true);
                assert_eq!(refused, Some(PRODUCER_FENCED), "a zombie's staging");
            }
            Op::Marker {
                producer,
                commit,
                kind,
            } => {
                let (p, epoch, commit) = self.marker_epoch(*producer, *commit, *kind);
                self.marker(p, epoch, commit);
            }
            Op::MarkerUnloaded {
                producer,
                commit,
                kind,
            } => {
                let (p, epoch, commit) = self.marker_epoch(*producer, *commit, *kind);
                self.marker_unloaded(p, epoch, commit);
            }
            Op::CompleteArchiving {
                pick,
                cut,
                arbitrary,
            } => {
                let range = match arbitrary {
                    Some((first, len)) => Some((*first, first + len - 1)),
                    None => self.archiving(*pick, *cut),
                };
                if let Some((first, last)) = range {
                    self.write_dead_letters(first, last);
                    self.model.complete_archiving(first, last);
                    self.effect.completed = Some((first, last));
                    let write = self.sp.complete_archiving(first, last).expect("running");
                    self.persist(write);
                    if self.sp.archiving_count() == 0 {
                        self.letters.unverified = false;
                    }
                }
            }
            Op::DeadLetterCrash { pick, cut } => {
                if let Some((first, last)) = self.archiving(*pick, *cut) {
                    self.write_dead_letters(first, last);
                    self.model.restart();
                    self.reload();
                }
            }
            Op::Bump { producer, fence } => {
                let epoch = self.epochs[*producer] + 1;
                if *fence {
                    self.marker(*producer, epoch, false);
                    self.epochs[*producer] = epoch + 1;
                    self.fenced[*producer] = epoch + 1;
                } else {
                    self.epochs[*producer] = epoch;
                }
            }
        }
    }

    /// The batches of a [`Op::StageMulti`].
    fn multi_batches(
        &self,
        who: usize,
        picks: &[(usize, (i64, i64))],
        ty: i8,
        spoiler: u8,
    ) -> Vec<AckBatch> {
        let mut ranges: Vec<(i64, i64)> = picks
            .iter()
            .filter_map(|&(pick, cut)| self.held(who, pick, cut))
            .collect();
        ranges.sort_unstable();
        ranges.dedup();
        let mut batches: Vec<AckBatch> = Vec::new();
        for (first, last) in ranges {
            if batches.last().is_none_or(|p| p.last_offset < first) {
                batches.push(AckBatch::new(first, last, vec![ty]));
            }
        }
        let pick = picks[0].0;
        let extra = match spoiler {
            1 => (0..MEMBERS)
                .filter(|&m| m != who)
                .find_map(|m| self.held(m, pick, (0, 0))),
            2 => self.pending(pick),
            3 => {
                let not_acquired: Vec<(i64, i64)> = self
                    .sp
                    .ranges()
                    .filter(|r| r.state != RecordState::Acquired)
                    .map(|r| (r.first_offset, r.last_offset))
                    .collect();
                Some(if not_acquired.is_empty() {
                    (self.sp.next_new, self.sp.next_new)
                } else {
                    not_acquired[pick % not_acquired.len()]
                })
            }
            4 => {
                if !batches.is_empty() {
                    let i = pick % batches.len();
                    batches[i].ack_types = vec![[2, 4, 7][pick % 3]];
                }
                None
            }
            5 => batches
                .first()
                .cloned()
                .map(|b| (b.first_offset, b.last_offset)),
            _ => None,
        };
        if let Some((first, last)) = extra {
            batches.push(AckBatch::new(first, last, vec![ty]));
            batches.sort_by_key(|b| (b.first_offset, b.last_offset));
        }
        batches
    }

    /// What the broker does with a TxnShareAcknowledge before the share partition (spec
    /// §3.2 step 5): an epoch older than the producer's current one is PRODUCER_FENCED and
    /// reaches nothing; otherwise the share partition stages. At core level `stage` takes
    /// whatever epoch it is given, so the test passes only what the broker lets through.
    /// Returns the error code, if refused.
    ///
    /// `carry`: the transaction carries the dead letters of its REJECTs, as the broker asks
    /// only of a group with a dead-letter queue (so with one only).
    fn broker_stage(
        &mut self,
        who: usize,
        (producer, epoch): (usize, i16),
        batches: Vec<AckBatch>,
        carry: bool,
    ) -> Option<i16> {
        if epoch < self.epochs[producer] {
            self.effect.refused = true;
            return Some(PRODUCER_FENCED);
        }
        self.stage(
            who,
            (producer, epoch),
            batches,
            carry && self.cfg.dead_letter,
        )
    }

    fn stage(
        &mut self,
        who: usize,
        (producer, epoch): (usize, i16),
        batches: Vec<AckBatch>,
        dead_lettered: bool,
    ) -> Option<i16> {
        let txn = (PRODUCERS[producer], epoch);
        let mut expected = self.model.clone();
        let limit = self.cfg.delivery_count_limit;
        let predicted = expected.stage(who, txn, &batches, self.now, (limit, dead_lettered));
        let got = self
            .sp
            .stage(self.now, &member(who), txn, &batches, dead_lettered);
        let got = match got {
            Ok(write) => {
                self.effect.staged = Some((who, txn.0, txn.1));
                self.effect.staged_batches = batches.clone();
                if dead_lettered {
                    // The broker writes the transaction's dead letters before it persists
                    // the staging, from the staged machine.
                    self.carry_dead_letters(txn, &batches);
                }
                let written = write.is_some();
                self.persist(write);
                Ok(written)
            }
            Err(e) => {
                self.effect.refused = true;
                Err((e.error_code().0, format!("{e:?}")))
            }
        };
        let code = got.as_ref().err().map(|e| e.0);
        if predicted.is_ok() && got.is_ok() {
            self.model = expected;
        }
        self.defer(move |_| match (predicted, got) {
            (Ok(()), Ok(written)) => {
                assert!(batches.is_empty() || written, "a staging is persisted");
            }
            (Err(code), Err((got, e))) => assert_eq!(got, code, "{e} for {batches:?}"),
            (p, g) => panic!("predicted {p:?}, got {g:?} for staging {batches:?}"),
        });
        code
    }

    fn marker(&mut self, producer: usize, epoch: i16, commit: bool) {
        let producer_id = PRODUCERS[producer];
        self.effect.markers.push((producer_id, epoch, commit));
        self.last_marker = Some((producer, epoch, commit));
        self.letters.resolve(producer_id, epoch, commit);
        let limit = self.cfg.delivery_count_limit;
        let policy = self.policy();
        let resolved = self.model.marker(producer_id, epoch, commit, limit);
        // The same marker applied to the persisted state alone (replaying
        // __share_group_state past the marker) must give the live write's state at and after
        // the live SPSO; below it, only terminal batches the live write pruned.
        let mut replayed = self.store.clone();
        let records = replayed.resolve_marker(producer_id, epoch, commit, |_| policy, self.now);
        for r in &records {
            replayed.replay(r);
        }
        let out = self
            .sp
            .apply_marker(producer_id, epoch, commit)
            .expect("running");
        let (got, wake, wrote) = (out.resolved, out.wake, out.write.is_some());
        let timed: i64 = out.staged_at_ms.iter().map(|(n, _)| n).sum();
        let now = self.now;
        let staged_later = out
            .staged_at_ms
            .iter()
            .any(|(_, t)| t.is_some_and(|t| t > now));
        self.persist(out.write);
        let live = self.store.state(&self.key).expect("initialized").clone();
        let replayed = replayed.state(&self.key).expect("initialized").clone();
        let store_resolved = !records.is_empty();
        self.defer(move |_| {
            assert_eq!(got, resolved, "records resolved");
            assert_eq!(timed, resolved, "staging times of every resolved record");
            assert!(!staged_later, "staged after the marker");
            assert_eq!(
                wake,
                resolved > 0,
                "a marker wakes fetches when it resolves"
            );
            assert_eq!(wrote, resolved > 0, "a no-op marker writes nothing");
            assert_eq!(store_resolved, resolved > 0, "store-level marker");
            // The store moves the start offset past the terminal records that begin the
            // share partition, as the live SPSO moves; it stops where no batch covers an
            // offset, where the live SPSO may pass an offset without data.
            assert!(replayed.start_offset <= live.start_offset, "start offset");
            if replayed.start_offset < live.start_offset {
                assert!(
                    !replayed.state_batches.iter().any(|b| {
                        b.first_offset <= replayed.start_offset
                            && replayed.start_offset <= b.last_offset
                    }),
                    "the start offset stopped at a covered offset"
                );
            }
            // Terminal records between the two starts are counted by the store only.
            let between: i64 = replayed
                .state_batches
                .iter()
                .filter(|b| b.delivery_state == 2 || b.delivery_state == 4)
                .map(|b| {
                    let first = b.first_offset.max(replayed.start_offset);
                    let last = b.last_offset.min(live.start_offset - 1);
                    (last - first + 1).max(0)
                })
                .sum();
            if replayed.delivery_complete_count >= 0 && live.delivery_complete_count >= 0 {
                assert_eq!(
                    i64::from(replayed.delivery_complete_count) - between,
                    i64::from(live.delivery_complete_count),
                    "delivery-complete count"
                );
            }
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
        });
    }

    fn marker_unloaded(&mut self, producer: usize, epoch: i16, commit: bool) {
        let producer_id = PRODUCERS[producer];
        self.effect.markers.push((producer_id, epoch, commit));
        self.last_marker = Some((producer, epoch, commit));
        self.letters.resolve(producer_id, epoch, commit);
        let limit = self.cfg.delivery_count_limit;
        let policy = self.policy();
        // Unloaded: the share partition's memory (its acquisitions) is gone.
        self.model.restart();
        let resolved = self.model.marker(producer_id, epoch, commit, limit);
        let records = self
            .store
            .resolve_marker(producer_id, epoch, commit, |_| policy, self.now);
        let store_resolved = !records.is_empty();
        for r in records {
            self.append(r);
        }
        self.reload();
        self.defer(move |_| {
            assert_eq!(store_resolved, resolved > 0, "store-level marker, unloaded");
        });
    }

    /// Returns the error code, if refused.
    fn acknowledge(&mut self, who: usize, batches: Vec<AckBatch>) -> Option<i16> {
        let mut expected = self.model.clone();
        let predicted = expected.acknowledge(who, &batches, self.now, &self.cfg);
        let got = match self.sp.acknowledge(&member(who), &batches, self.now) {
            Ok(write) => {
                self.persist(write);
                Ok(())
            }
            Err(e) => {
                self.effect.refused = true;
                Err((e.error_code().0, format!("{e:?}")))
            }
        };
        if predicted.is_ok() && got.is_ok() {
            self.model = expected;
        }
        let code = got.as_ref().err().map(|e| e.0);
        self.defer(move |_| match (predicted, got) {
            (Ok(()), Ok(())) => {}
            (Err(code), Err((got, e))) => assert_eq!(got, code, "{e} for {batches:?}"),
            (p, g) => panic!("predicted {p:?}, got {g:?} for {batches:?}"),
        });
        code
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
        let mode = if record_limit {
            AcquireMode::RecordLimit
        } else {
            AcquireMode::BatchOptimized
        };
        let req = AcquireRequest {
            member_id: &name,
            fetch_offset,
            fetched: &fetched,
            max_records,
            batch_size,
            mode,
            isolation: if read_committed {
                Isolation::ReadCommitted { aborted: &aborted }
            } else {
                Isolation::ReadUncommitted
            },
            now_ms: self.now,
        };
        let acq = self.sp.acquire(&req).expect("well-formed batches");
        let after = Model::from_machine(&self.sp);
        self.model = after.clone();
        self.persist(acq.write.clone());
        let check = AcqCheck {
            before,
            after,
            who,
            fetch_offset,
            max_records,
            mode,
            read_committed,
            acq,
            first_base: span.map_or(fetch_offset, |(f, _)| f),
        };
        self.defer(move |w| w.check_acquisition(&check));
    }

    /// Every change an acquisition made is one it may make.
    fn check_acquisition(&self, c: &AcqCheck) {
        let (before, after, acq) = (&c.before, &c.after, &c.acq);
        let limit = self.cfg.delivery_count_limit;
        let rc = c.read_committed;
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
                    owner: Some(c.who),
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
        let max = i64::from(c.max_records);
        match c.mode {
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
                    let at_limit = b.count >= limit && a.state == self.cfg.dead_letter_state();
                    b.state == RecordState::Available
                        && (a.state == RecordState::Archived || at_limit)
                        && (a.count == b.count || (aborted && a.count == b.count + 1))
                }
                (None, Some(a)) => {
                    o >= before.next_new
                        && ((a.state == RecordState::Available
                            && a.count == 0
                            && c.mode == AcquireMode::RecordLimit)
                            || (aborted && a.state == RecordState::Archived && a.count == 1))
                }
                (Some(b), None) => {
                    let stale = c.fetch_offset <= o && o < c.first_base;
                    o < after.start
                        && b.state != RecordState::Acquired
                        && b.state != RecordState::TxPending
                        && b.state != RecordState::Archiving
                        && (b.state != RecordState::Available || stale || aborted)
                }
                (None, None) => true,
            };
            assert!(
                ok,
                "offset {o}: {b:?} -> {a:?} (m{} from {}, {:?}, read_committed {rc})",
                c.who, c.fetch_offset, c.mode
            );
        }
        // The SPSO never skips data that is not done with.
        for o in before.start..after.start {
            if !before.recs.contains_key(&o) && self.log.has_data(o) {
                assert!(rc && self.log.aborted_at(o), "SPSO passed live offset {o}");
            }
        }
    }

    /// Replays every record written so far into a fresh store and loads the share partition
    /// from it, as a broker restart does.
    fn reload(&mut self) {
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
        // Loaded with ARCHIVING records: the broker verifies before it writes.
        self.letters.unverified = sp.archiving_count() > 0;
        self.sp = sp;
        self.store = fresh;
        self.effect.reloaded = true;
        self.persist(write);
    }
}

/// Cases per run: `PROPTEST_CASES` if set, else 128.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn share_partition_matches_the_reference_model(
        items in proptest::collection::vec(log_item(), 1..40),
        limit in prop_oneof![2 => Just(2i16), 1 => 3..7i16],
        locks in prop_oneof![Just(6i64), Just(15i64), Just(60i64)],
        per_snapshot in prop_oneof![Just(0u32), Just(2u32), Just(500u32)],
        ops in proptest::collection::vec(op(), 1..150),
        dead_letter in prop_oneof![1 => Just(false), 2 => Just(true)],
        commits in proptest::collection::vec(any::<bool>(), STAGERS),
    ) {
        let cfg = SharePartitionConfig {
            record_lock_duration_ms: LOCK,
            delivery_count_limit: limit,
            record_locks_max: locks,
            dead_letter,
        };
        let mut world = World::new(cfg, Log::build(&items), per_snapshot);
        world.check_state();
        world.check_model();
        for op in &ops {
            world.step(op);
        }
        world.drain(&commits);
    }
}
