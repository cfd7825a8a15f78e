//! The in-flight records as runs: maximal ranges of offsets with one state, delivery count,
//! owner and lock deadline, keyed by first offset.
//!
//! A whole acquired log batch is one run, however many records it holds, so the common path
//! (acquire batches, acknowledge them whole, move the start offset past them) costs O(log n)
//! per batch. A run splits only where an acknowledgement or acquisition covers part of it, and
//! neighbours with equal attributes are joined again ([`Runs::coalesce`]).
//!
//! Every insertion and removal goes through [`Runs::insert`] / [`Runs::remove`], which keep
//! the indexes (lock deadlines, AVAILABLE runs, records per state) exact. `insert` checks, in
//! every build, that the run is not empty, has an owner exactly when ACQUIRED and a staging
//! exactly when TX_PENDING, and that no run starts at its first offset; [`Runs::track`],
//! which stores offsets not tracked before (new records, loading), checks besides that it
//! overlaps no tracked run. Every other insertion stores a run over exactly the offsets just
//! removed (a split, a join, a change keeping the offsets), so records keep one state and at
//! most one holder. A run failing a check is not stored and the [`Violation`] is kept
//! ([`Runs::violation`]) for the share partition to stop on.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use super::types::{AcknowledgeType, RecordState, StateCounts, Violation};
use crate::share_coordinator::StagedTxn;

/// The staging of TX_PENDING records (KIP-1289).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Staging {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// ACCEPT, REJECT or GAP.
    pub ack: AcknowledgeType,
    /// The member that staged them; not persisted, so `None` after a reload.
    pub member: Option<Arc<str>>,
    /// When they were staged; not persisted, so `None` after a reload.
    pub staged_at_ms: Option<i64>,
    /// A REJECT whose dead-letter records the transaction itself carries: its COMMIT archives
    /// it at once (no ARCHIVING, no second dead letter).
    pub dead_lettered: bool,
}

impl Staging {
    /// The persisted form.
    pub fn persisted(&self) -> StagedTxn {
        StagedTxn {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            ack_type: self.ack.id(),
            dead_lettered: self.dead_lettered,
        }
    }
}

/// Offsets `[first, last]` (first is the map key) with uniform attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub last: i64,
    pub state: RecordState,
    pub delivery_count: i16,
    /// Set exactly when ACQUIRED.
    pub owner: Option<Arc<str>>,
    /// Lock deadline when ACQUIRED, else 0.
    pub deadline_ms: i64,
    /// Set exactly when TX_PENDING.
    pub txn: Option<Staging>,
}

impl Run {
    /// A run nobody holds (AVAILABLE or terminal).
    pub fn unowned(last: i64, state: RecordState, delivery_count: i16) -> Run {
        Run {
            last,
            state,
            delivery_count,
            owner: None,
            deadline_ms: 0,
            txn: None,
        }
    }

    /// A TX_PENDING run: no owner, no lock.
    pub fn staged(last: i64, delivery_count: i16, txn: Staging) -> Run {
        Run {
            last,
            state: RecordState::TxPending,
            delivery_count,
            owner: None,
            deadline_ms: 0,
            txn: Some(txn),
        }
    }

    pub fn acquired(last: i64, delivery_count: i16, owner: Arc<str>, deadline_ms: i64) -> Run {
        Run {
            last,
            state: RecordState::Acquired,
            delivery_count,
            owner: Some(owner),
            deadline_ms,
            txn: None,
        }
    }

    pub fn len(&self, first: i64) -> i64 {
        self.last - first + 1
    }

    pub fn owned_by(&self, member_id: &str) -> bool {
        self.owner.as_deref() == Some(member_id)
    }

    /// Equal attributes (everything but the offsets): neighbours that may be joined.
    fn joins(&self, other: &Run) -> bool {
        self.state == other.state
            && self.delivery_count == other.delivery_count
            && self.owner == other.owner
            && self.deadline_ms == other.deadline_ms
            && self.txn == other.txn
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Runs {
    map: BTreeMap<i64, Run>,
    /// (deadline, first) of every ACQUIRED run.
    locks: BTreeSet<(i64, i64)>,
    /// First offsets of AVAILABLE runs.
    available: BTreeSet<i64>,
    /// (producer id, first) of every TX_PENDING run.
    pending: BTreeSet<(i64, i64)>,
    counts: StateCounts,
    /// The first broken invariant found, if any.
    violation: Option<Violation>,
}

impl Runs {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of runs.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn counts(&self) -> StateCounts {
        self.counts
    }

    pub fn first(&self) -> Option<(i64, &Run)> {
        self.map.iter().next().map(|(k, r)| (*k, r))
    }

    pub fn last(&self) -> Option<(i64, &Run)> {
        self.map.iter().next_back().map(|(k, r)| (*k, r))
    }

    pub fn iter(&self) -> impl Iterator<Item = (i64, &Run)> {
        self.map.iter().map(|(k, r)| (*k, r))
    }

    pub fn get(&self, first: i64) -> Option<&Run> {
        self.map.get(&first)
    }

    pub fn first_available(&self) -> Option<i64> {
        self.available.iter().next().copied()
    }

    pub fn next_deadline(&self) -> Option<i64> {
        self.locks.iter().next().map(|(d, _)| *d)
    }

    /// First offsets of ACQUIRED runs whose lock deadline is at or before `now_ms`.
    pub fn expired(&self, now_ms: i64) -> Vec<i64> {
        self.locks
            .range(..=(now_ms, i64::MAX))
            .map(|(_, first)| *first)
            .collect()
    }

    /// First offsets of the TX_PENDING runs staged by `producer_id`.
    pub fn staged_by(&self, producer_id: i64) -> Vec<i64> {
        self.pending
            .range((producer_id, i64::MIN)..=(producer_id, i64::MAX))
            .map(|(_, first)| *first)
            .collect()
    }

    /// First offsets of every TX_PENDING run.
    pub fn staged_keys(&self) -> Vec<i64> {
        let mut keys: Vec<i64> = self.pending.iter().map(|(_, first)| *first).collect();
        keys.sort_unstable();
        keys
    }

    /// The run containing `offset`.
    pub fn covering(&self, offset: i64) -> Option<(i64, &Run)> {
        self.map
            .range(..=offset)
            .next_back()
            .filter(|(_, r)| r.last >= offset)
            .map(|(k, r)| (*k, r))
    }

    /// The run containing `offset`, else the first run after it.
    pub fn at_or_after(&self, offset: i64) -> Option<(i64, &Run)> {
        self.covering(offset).or_else(|| {
            self.map
                .range((Bound::Excluded(offset), Bound::Unbounded))
                .next()
                .map(|(k, r)| (*k, r))
        })
    }

    /// First offsets of the runs intersecting `[first, last]`.
    pub fn keys_intersecting(&self, first: i64, last: i64) -> Vec<i64> {
        let mut keys = Vec::new();
        if let Some((k, _)) = self.covering(first) {
            keys.push(k);
        }
        if first < last {
            keys.extend(
                self.map
                    .range((Bound::Excluded(first), Bound::Included(last)))
                    .map(|(k, _)| *k),
            );
        }
        keys
    }

    /// The first broken invariant found, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    /// Records a broken invariant (the first one is kept).
    pub fn flag(&mut self, violation: Violation) {
        if self.violation.is_none() {
            self.violation = Some(violation);
        }
    }

    /// Whether `run`, to be stored at `first`, is well formed: not empty, owner and staging
    /// matching its state.
    fn check_run(first: i64, run: &Run) -> Result<(), Violation> {
        let last = run.last;
        if first > last {
            return Err(Violation::EmptyRange { first, last });
        }
        let owner = run.owner.is_some();
        let staging = run.txn.is_some();
        if owner != (run.state == RecordState::Acquired)
            || staging != (run.state == RecordState::TxPending)
        {
            return Err(Violation::Attributes {
                first,
                last,
                state: run.state,
                owner,
                staging,
            });
        }
        Ok(())
    }

    /// Stores `run` at `first`, over offsets not tracked before (new records, loading): as
    /// [`Runs::insert`], and the run must overlap no tracked run (one lookup).
    pub fn track(&mut self, first: i64, run: Run) {
        // The tracked run starting last at or before `run.last` is the only one that can
        // overlap.
        let last = run.last;
        if let Some((&other, r)) = self.map.range(..=last).next_back() {
            if first <= last && (other >= first || r.last >= first) {
                self.flag(Violation::Overlap { first, last, other });
                return;
            }
        }
        self.insert(first, run);
    }

    /// Stores `run` at `first` if it is well formed and no run starts at `first`; else keeps
    /// the violation and leaves the runs as they were. Callers store a run over exactly the
    /// offsets they just removed, or use [`Runs::track`].
    pub fn insert(&mut self, first: i64, run: Run) {
        if let Err(v) = Self::check_run(first, &run) {
            self.flag(v);
            return;
        }
        let (state, deadline_ms, len) = (run.state, run.deadline_ms, run.len(first));
        let producer_id = run.txn.as_ref().map(|t| t.producer_id);
        match self.map.entry(first) {
            Entry::Occupied(_) => {
                let last = run.last;
                self.flag(Violation::Overlap {
                    first,
                    last,
                    other: first,
                });
                return;
            }
            Entry::Vacant(slot) => {
                slot.insert(run);
            }
        }
        match state {
            RecordState::Acquired => {
                self.locks.insert((deadline_ms, first));
            }
            RecordState::Available => {
                self.available.insert(first);
            }
            RecordState::TxPending => {
                if let Some(producer_id) = producer_id {
                    self.pending.insert((producer_id, first));
                }
            }
            RecordState::Acknowledged | RecordState::Archiving | RecordState::Archived => {}
        }
        *self.counts.slot(state) += len;
    }

    pub fn remove(&mut self, first: i64) -> Option<Run> {
        let run = self.map.remove(&first)?;
        self.unindex(first, &run);
        Some(run)
    }

    fn unindex(&mut self, first: i64, run: &Run) {
        match run.state {
            RecordState::Acquired => {
                self.locks.remove(&(run.deadline_ms, first));
            }
            RecordState::Available => {
                self.available.remove(&first);
            }
            RecordState::TxPending => {
                if let Some(t) = &run.txn {
                    self.pending.remove(&(t.producer_id, first));
                }
            }
            RecordState::Acknowledged | RecordState::Archiving | RecordState::Archived => {}
        }
        *self.counts.slot(run.state) -= run.len(first);
    }

    /// Makes `at` the first offset of a run if a run covers it.
    pub fn split_at(&mut self, at: i64) {
        let Some((first, _)) = self.covering(at) else {
            return;
        };
        if first == at {
            return;
        }
        let Some(mut head) = self.remove(first) else {
            return;
        };
        let tail = head.clone();
        head.last = at - 1;
        self.insert(first, head);
        self.insert(at, tail);
    }

    /// Joins neighbouring runs with equal attributes among those touching `[first, last]`
    /// (and the runs just before and after it).
    pub fn coalesce(&mut self, first: i64, last: i64) {
        let lo = self
            .covering(first.saturating_sub(1))
            .map_or(first, |(k, _)| k);
        let hi = last.saturating_add(1);
        let keys: Vec<i64> = self.map.range(lo..=hi).map(|(k, _)| *k).collect();
        let mut current: Option<i64> = None;
        for key in keys {
            let joined = match current.and_then(|c| self.map.get(&c).map(|r| (c, r))) {
                Some((c, prev)) => match self.map.get(&key) {
                    Some(next) if prev.last + 1 == key && prev.joins(next) => Some(c),
                    _ => None,
                },
                None => None,
            };
            match joined {
                Some(c) => {
                    let (Some(mut prev), Some(next)) = (self.remove(c), self.remove(key)) else {
                        current = Some(key);
                        continue;
                    };
                    prev.last = next.last;
                    self.insert(c, prev);
                }
                None => current = Some(key),
            }
        }
    }
}
