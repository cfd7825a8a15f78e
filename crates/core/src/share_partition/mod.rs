//! Share-partition state machine (KIP-932): the in-flight records of one share group on one
//! topic partition, as Kafka's `SharePartition` keeps them on the partition leader.
//!
//! Owns the records between the share-partition start offset (SPSO) and end offset (SPEO):
//! their state (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED, TX_PENDING), delivery count, for
//! ACQUIRED records the member holding the acquisition lock and its deadline, and for
//! TX_PENDING records the transaction they are staged in (KIP-1289, see `txn.rs`:
//! [`SharePartition::stage`], [`SharePartition::apply_marker`]). Decides what a
//! ShareFetch acquires ([`SharePartition::acquire`]), what an acknowledgement does
//! ([`SharePartition::acknowledge`]), what a closed session or a lapsed lock releases
//! ([`SharePartition::release_member`], [`SharePartition::expire_locks`]) and how far the SPSO
//! moves.
//!
//! Protocol: the broker reads the log from [`SharePartition::next_fetch_offset`] (when
//! [`SharePartition::can_acquire_records`]), passes the batch headers it read to `acquire`,
//! and arms a timer for [`SharePartition::next_lock_deadline`]. Every state-changing call
//! returns the [`StateWrite`] to persist (WriteShareGroupState) before the broker answers;
//! acquisitions alone persist nothing, as in Kafka. A refused call (`Err`) changed nothing.
//! Loading: [`SharePartition::from_persisted`] with ReadShareGroupState's answer, or
//! [`SharePartition::new`] with the start offset the broker resolved from
//! `share.auto.offset.reset`.
//!
//! Persisted view: what the share coordinator must hold for this partition is a pure
//! function of the live state ([`SharePartition::persisted_view`]): the SPSO, and per offset at
//! or after it the (state, count) Kafka last persisted — AVAILABLE, ACKNOWLEDGED and ARCHIVED
//! records as they are, ACQUIRED records as AVAILABLE with the count *before* the acquisition
//! (Kafka never persists an acquisition; its increment reaches the persister with the next
//! transition), TX_PENDING records as state 5 with their staging and likewise the count before
//! the acquisition (so that the resolution, with the full count, wins the store's merge), and
//! records never delivered (AVAILABLE with count 0) not at all. Each call
//! writes exactly the ranges whose view changed, with the new SPSO, so replaying the writes
//! through [`crate::share_coordinator::ShareStateStore`] rebuilds the view. After a restart,
//! ACQUIRED records are therefore AVAILABLE again with their pre-acquisition count, and
//! offsets missing between persisted batches are fetched again (Kafka's persister gap window).
//!
//! Invariants: every state change is one [`RecordState::validate_transition`] allows; terminal
//! records never change; an offset is held by at most one member; delivery counts never exceed
//! the limit; the SPSO only passes terminal records and offsets with no data (or moves with the
//! log start offset); new records are acquired only while the in-flight window
//! (SPSO..=SPEO) is below `share.partition.max.record.locks`, and whole log batches are
//! acquired, so the window exceeds the limit by less than one log batch.
//!
//! Checked in production (every build, on every change, as TigerBeetle checks its state
//! machines' assertions in release), each in O(1) or one map lookup:
//! - a valid transition: every state change of a record is one
//!   [`RecordState::validate_transition`] allows (so terminal records never change);
//! - TX_PENDING changed only by its own transaction: only the COMMIT or ABORT marker of the
//!   producer that staged a record, at the staging's epoch or later, moves it on (not lock
//!   expiry, a release, an acknowledgement or another producer's marker);
//! - one holder per record: a stored range of records has an owner exactly when ACQUIRED (and
//!   a staging exactly when TX_PENDING); new records are never stored over offsets already
//!   tracked, and a change keeps a range's offsets and never stores it where another range
//!   starts; ACQUIRED records never pass to another member without being released first.
//!
//! The others (delivery counts, SPSO, per-state counts, run order) are checked by a full scan
//! in tests only (`check_invariants`, after every step of the property tests).
//!
//! On a violation (a bug in Shoal, never a client's doing): the offending change is not
//! applied (the records keep their state), the call returns
//! [`ShareError::InvariantViolated`] naming the invariant and the offsets, and drops its state
//! write, so nothing of it is persisted or answered; the share partition is then stopped:
//! every later state-changing call returns [`ShareError::Stopped`] and changes nothing. Both
//! map to UNKNOWN_SERVER_ERROR (what Kafka answers for a share partition in state FAILED).
//! Changes the same call made before the violation stay in memory but are never persisted,
//! so the persisted state (the share coordinator's) is the state before that call; the broker
//! logs the violation once and serves the group's other share partitions as before. Nothing
//! panics.
//!
//! Must not: read clocks (time comes in as `now_ms`), perform I/O, or panic on any input.
//!
//! Deliberate differences from Kafka:
//! - Acknowledgements are checked in full before anything changes: a request either applies
//!   every batch or none (Kafka applies and rolls back). Batches must be strictly ascending
//!   (Kafka's check lets a batch start at the previous batch's last offset).
//! - A lock whose deadline has passed counts as expired in every call, even before
//!   `expire_locks` ran (Kafka's timer fires asynchronously).
//! - A new SPSO is persisted by the write that moved it (Kafka writes it with the next one),
//!   including log-start-offset moves; a release that leaves the persisted view unchanged (a
//!   closed session's records) writes nothing.
//! - Run-based tracking instead of Kafka's cached batches: re-acquisition in batch-optimized
//!   mode stops at a log-batch boundary (not at a cached-batch boundary), and throttled
//!   re-delivery halves `MaxRecords` (not the cached batch's size) per delivery past
//!   `max(2, ceil(limit / 2))`.
//! - New records are only acquired up to `SPSO + max.record.locks - 1` (rounded up to the log
//!   batch), so offsets without data between SPEO and the fetched batch count toward the
//!   limit; Kafka's window can overshoot by such holes.
//! - A log start offset move drops ACQUIRED records below it at once (Kafka keeps them until
//!   their lock expires, then archives them); either way their acknowledgements are skipped.
//!   Acknowledgements of offsets without data inside the window are skipped too.
//! - An AVAILABLE record already at the delivery limit (possible only after the limit was
//!   lowered) is archived when fetched instead of delivered again.
//! - Why a record is ARCHIVING (rejected, or past the delivery limit) is kept in memory
//!   only: after a reload it is inferred from the delivery count (see `dead_letter.rs`).
//!
//! TX_PENDING around the other paths (KIP-1289; spec §2, §3.3, §3.4; decision 0011):
//! - acknowledgements (ShareAcknowledge, ShareFetch, explicit or implicit) of a TX_PENDING
//!   offset are INVALID_RECORD_STATE and leave it TX_PENDING; staging it again likewise;
//! - lock expiry, a member leaving and a session closing release ACQUIRED records only: a
//!   staged record has no lock and no owner (its member is kept for information only);
//! - the SPSO never passes TX_PENDING (not terminal) and the record-lock window
//!   (`max.record.locks`) counts it, so a long transaction can stall new acquisitions until
//!   `transaction.timeout.ms` aborts it;
//! - delivery limits: staging keeps the count; ABORT makes the record AVAILABLE with it, or
//!   ARCHIVED when it reached the limit;
//! - read_committed archiving and stale-batch archiving touch AVAILABLE records only, so never
//!   a TX_PENDING one (it was ACQUIRED, hence delivered, when staged);
//! - a log start offset move drops everything below it, TX_PENDING included (the records are
//!   gone from the log, as Kafka archives whatever lies below it); the later marker finds
//!   nothing to resolve there and is a no-op;
//! - reset (`shoal share-groups reset`, AlterShareGroupOffsets) and DeleteGroups: Kafka allows
//!   them only on an empty group (GROUP_NOT_EMPTY / NON_EMPTY_GROUP). A TX_PENDING record
//!   belongs to an open transaction even after its member left, and dropping its staging would
//!   make the transaction's COMMIT acknowledge nothing (the output would be committed, the
//!   input redelivered: processed twice). Shoal therefore treats a share partition with
//!   [`SharePartition::tx_pending_count`] > 0 as in use: the broker answers those requests
//!   as for a non-empty group until the transactions resolve (bounded by
//!   `transaction.timeout.ms`).

mod acknowledge;
mod acquire;
mod dead_letter;
mod runs;
mod txn;
mod types;

#[cfg(test)]
mod invariant_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;

use std::sync::Arc;

pub use acknowledge::validate_acknowledge_batches;
pub use acquire::{AcquireRequest, Acquisition};
pub use dead_letter::{DeadLetterCause, DeadLetterRange};
pub use txn::{stage_all, StagedCopy};
pub use types::*;

use crate::share_coordinator::{ReadState, StagedTxn, StateBatch};
use runs::{Run, Runs, Staging};

/// One share group's state on one topic partition.
#[derive(Clone, Debug)]
pub struct SharePartition {
    config: SharePartitionConfig,
    state_epoch: i32,
    /// SPSO: every offset below it is done with (or gone from the log).
    start: i64,
    /// One past the last offset ever tracked; new records are acquired from here. Runs lie
    /// in `[start, next_new)`, and when there are runs the last one ends at `next_new - 1`.
    next_new: i64,
    runs: Runs,
    txn_stats: TxnStats,
}

/// Bookkeeping of one state-changing call: what to persist at its end.
#[derive(Debug)]
struct Op {
    start_before: i64,
    /// Ranges whose persisted view changed.
    touched: Vec<(i64, i64)>,
    /// The transaction marker (producer id, epoch) this call applies: the only thing allowed
    /// to change TX_PENDING records, and only those that transaction staged.
    marker: Option<(i64, i16)>,
}

/// How a run's records appear in the persisted view (see the module docs).
fn persisted(run: &Run) -> Option<(RecordState, i16, Option<StagedTxn>)> {
    let (state, delivery_count) = (run.state, run.delivery_count);
    match state {
        RecordState::Available => (delivery_count > 0).then_some((state, delivery_count, None)),
        RecordState::Acquired => {
            (delivery_count > 1).then_some((RecordState::Available, delivery_count - 1, None))
        }
        RecordState::Acknowledged | RecordState::Archiving | RecordState::Archived => {
            Some((state, delivery_count, None))
        }
        // The pre-acquisition count, as for ACQUIRED: the combiner then lets the resolution
        // (the full count) win over the staging (see the module docs).
        RecordState::TxPending => Some((
            state,
            delivery_count.saturating_sub(1),
            run.txn.as_ref().map(Staging::persisted),
        )),
    }
}

/// Whether a change of the run at `first` from `old` to `new` keeps the invariants: a valid
/// state transition ([`RecordState::validate_transition`]); TX_PENDING records changed only by
/// `marker`, the marker of the transaction that staged them (its producer, at the staging's
/// epoch or later); ACQUIRED records never passed to another holder (a lock renewal keeps
/// the holder). Attribute consistency (owner, staging) is checked by [`Runs::insert`].
///
/// # Errors
/// The broken invariant.
fn check_change(
    first: i64,
    old: &Run,
    new: &Run,
    marker: Option<(i64, i16)>,
) -> Result<(), Violation> {
    let last = old.last;
    if new.state != old.state {
        old.state
            .validate_transition(new.state)
            .map_err(|e| Violation::Transition {
                first,
                last,
                from: e.from,
                to: e.to,
            })?;
    }
    if let Some(t) = &old.txn {
        let own = marker.is_some_and(|(producer_id, producer_epoch)| {
            t.producer_id == producer_id && t.producer_epoch <= producer_epoch
        });
        if !own && new != old {
            return Err(Violation::ForeignTxPending {
                first,
                last,
                producer_id: t.producer_id,
                producer_epoch: t.producer_epoch,
            });
        }
    }
    if old.state == RecordState::Acquired
        && new.state == RecordState::Acquired
        && new.owner != old.owner
    {
        return Err(Violation::HolderChanged { first, last });
    }
    Ok(())
}

fn saturating_i32(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX })
}

impl SharePartition {
    /// A share partition without persisted records, starting at `start_offset` (resolved by
    /// the broker from `share.auto.offset.reset`).
    ///
    /// # Errors
    /// An invalid config or a negative start offset.
    pub fn new(
        config: SharePartitionConfig,
        start_offset: i64,
        state_epoch: i32,
    ) -> Result<SharePartition, ShareError> {
        config.validate()?;
        if start_offset < 0 {
            return Err(ShareError::InvalidPersistedState(
                "start offset must not be negative",
            ));
        }
        Ok(SharePartition {
            config,
            state_epoch,
            start: start_offset,
            next_new: start_offset,
            runs: Runs::default(),
            txn_stats: TxnStats::default(),
        })
    }

    /// A share partition from ReadShareGroupState's answer. Persisted batches load without
    /// owner; offsets between them are tracked as never delivered, so they are fetched again.
    /// Returns the write to persist if loading moved the SPSO past terminal records (state
    /// written by Kafka moves it lazily); persisting it is optional.
    ///
    /// # Errors
    /// An invalid config; an uninitialized (-1) start offset; batches that are unsorted,
    /// overlapping, before the start offset, with a negative count or a state other than
    /// AVAILABLE, ACKNOWLEDGED or ARCHIVED.
    pub fn from_persisted(
        config: SharePartitionConfig,
        state: &ReadState,
    ) -> Result<(SharePartition, Option<StateWrite>), ShareError> {
        let mut sp = SharePartition::new(config, state.start_offset, state.state_epoch)?;
        // Batches are checked before they are stored; `Runs::insert` checks the runs again.
        let mut cursor = sp.start;
        for b in &state.state_batches {
            let run = check_persisted_batch(b, cursor)?;
            if b.first_offset > cursor {
                sp.runs.track(
                    cursor,
                    Run::unowned(b.first_offset - 1, RecordState::Available, 0),
                );
            }
            sp.runs.track(b.first_offset, run);
            cursor = b.last_offset + 1;
        }
        sp.next_new = cursor;
        sp.runs.coalesce(sp.start, cursor);
        let op = sp.begin();
        sp.advance_start();
        let write = sp.finish(op)?;
        Ok((sp, write))
    }

    pub fn config(&self) -> &SharePartitionConfig {
        &self.config
    }

    /// Applies changed group configs (`share.record.lock.duration.ms`, ...) to later calls;
    /// existing locks keep their deadlines.
    ///
    /// # Errors
    /// An invalid config; the old one stays.
    pub fn set_config(&mut self, config: SharePartitionConfig) -> Result<(), ShareError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    /// The broken invariant that stopped this share partition, if one did: every
    /// state-changing call then fails with [`ShareError::Stopped`].
    pub fn violation(&self) -> Option<&Violation> {
        self.runs.violation()
    }

    /// Stops this share partition on `violation`, found on a copy of it (a
    /// [`stage_all`] that failed with [`ShareError::InvariantViolated`]); a partition
    /// already stopped keeps its first violation.
    pub fn stop(&mut self, violation: Violation) {
        self.runs.flag(violation);
    }

    /// `Ok` while no invariant was found broken.
    ///
    /// # Errors
    /// [`ShareError::Stopped`] with the first violation.
    fn running(&self) -> Result<(), ShareError> {
        match self.runs.violation() {
            Some(v) => Err(ShareError::Stopped(v.clone())),
            None => Ok(()),
        }
    }

    /// SPSO.
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// SPEO, as Kafka reports it: the last offset acquired, or the SPSO when nothing is in
    /// flight.
    pub fn end_offset(&self) -> i64 {
        if self.runs.is_empty() {
            self.start
        } else {
            self.next_new - 1
        }
    }

    /// Where the next log read starts: the first AVAILABLE record, else the first offset
    /// never fetched.
    pub fn next_fetch_offset(&self) -> i64 {
        self.runs.first_available().unwrap_or(self.next_new)
    }

    /// Kafka's `canAcquireRecords`: records are waiting for redelivery, or the in-flight
    /// window is below `share.partition.max.record.locks`.
    pub fn can_acquire_records(&self) -> bool {
        self.runs.counts().available > 0 || self.in_flight_count() < self.config.record_locks_max
    }

    /// Records in the in-flight window SPSO..=SPEO (Kafka's `numInFlightRecords`, which counts
    /// offsets without data too).
    pub fn in_flight_count(&self) -> i64 {
        if self.runs.is_empty() {
            0
        } else {
            self.next_new - self.start
        }
    }

    /// Runs of tracked records (Kafka's in-flight batch count metric); the memory in use is
    /// proportional to it.
    pub fn in_flight_batch_count(&self) -> usize {
        self.runs.len()
    }

    /// Tracked records per state (`tx_pending` is the `txn-pending-records` gauge).
    pub fn counts(&self) -> StateCounts {
        self.runs.counts()
    }

    /// KIP-1226 `deliveryCompleteCount`: terminal records at or after the SPSO.
    pub fn delivery_complete_count(&self) -> i64 {
        self.runs.counts().terminal()
    }

    /// When the earliest acquisition lock expires; the broker calls
    /// [`SharePartition::expire_locks`] then.
    pub fn next_lock_deadline(&self) -> Option<i64> {
        self.runs.next_deadline()
    }

    /// Runs of tracked records (one state, count, owner and deadline each), in offset order.
    pub fn ranges(&self) -> impl Iterator<Item = RecordRange> + '_ {
        self.runs.iter().map(|(first, r)| RecordRange {
            first_offset: first,
            last_offset: r.last,
            state: r.state,
            delivery_count: r.delivery_count,
            member_id: r.owner.as_deref().map(str::to_string),
            lock_deadline_ms: r.owner.as_ref().map(|_| r.deadline_ms),
            staged_txn: r.txn.as_ref().map(Staging::persisted),
        })
    }

    /// The records `member_id` holds, with their delivery counts.
    pub fn acquired_by(&self, member_id: &str) -> Vec<AcquiredRecords> {
        self.runs
            .iter()
            .filter(|(_, r)| r.state == RecordState::Acquired && r.owned_by(member_id))
            .map(|(first, r)| AcquiredRecords {
                first_offset: first,
                last_offset: r.last,
                delivery_count: r.delivery_count,
            })
            .collect()
    }

    /// The complete persisted view (see the module docs): what the share coordinator holds
    /// once every write returned so far is applied.
    pub fn persisted_view(&self) -> StateWrite {
        StateWrite {
            start_offset: self.start,
            state_epoch: self.state_epoch,
            delivery_complete_count: saturating_i32(self.delivery_complete_count()),
            batches: self.persisted_batches(self.start, self.next_new.saturating_sub(1)),
        }
    }

    fn begin(&self) -> Op {
        Op {
            start_before: self.start,
            touched: Vec::new(),
            marker: None,
        }
    }

    /// The write for `op`, if the SPSO or any persisted range changed.
    ///
    /// # Errors
    /// [`ShareError::InvariantViolated`] if an invariant broke during the call (the call
    /// started on a running partition, see [`SharePartition::running`]): its write is dropped.
    fn finish(&self, mut op: Op) -> Result<Option<StateWrite>, ShareError> {
        if let Some(v) = self.runs.violation() {
            return Err(ShareError::InvariantViolated(v.clone()));
        }
        if op.touched.is_empty() && op.start_before == self.start {
            return Ok(None);
        }
        op.touched.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(op.touched.len());
        for (first, last) in op.touched {
            match merged.last_mut() {
                Some(prev) if first <= prev.1.saturating_add(1) => prev.1 = prev.1.max(last),
                _ => merged.push((first, last)),
            }
        }
        let mut batches = Vec::new();
        for (first, last) in merged {
            let first = first.max(self.start);
            if first <= last {
                append_joined(&mut batches, self.persisted_batches(first, last));
            }
        }
        Ok(Some(StateWrite {
            start_offset: self.start,
            state_epoch: self.state_epoch,
            delivery_complete_count: saturating_i32(self.delivery_complete_count()),
            batches,
        }))
    }

    /// The persisted view of the tracked offsets in `[first, last]`, joined.
    fn persisted_batches(&self, first: i64, last: i64) -> Vec<PersistedBatch> {
        let mut out: Vec<PersistedBatch> = Vec::new();
        if first > last {
            return out;
        }
        for k in self.runs.keys_intersecting(first, last) {
            let Some(run) = self.runs.get(k) else {
                continue;
            };
            let Some((state, delivery_count, staged_txn)) = persisted(run) else {
                continue;
            };
            let batch = PersistedBatch {
                first_offset: k.max(first),
                last_offset: run.last.min(last),
                state,
                delivery_count,
                staged_txn,
            };
            append_joined(&mut out, vec![batch]);
        }
        out
    }

    /// Applies `change` to every tracked run in `[first, last]`, splitting runs at the edges.
    /// `change` returns the new attributes (offsets are kept) or `None` to leave a run as is.
    /// A change [`check_change`] refuses is not applied and stops the partition (callers
    /// check first; this is the backstop, in every build).
    fn update_range(
        &mut self,
        first: i64,
        last: i64,
        op: &mut Op,
        mut change: impl FnMut(&Run) -> Option<Run>,
    ) {
        if first > last {
            return;
        }
        self.runs.split_at(first);
        self.runs.split_at(last.saturating_add(1));
        for key in self.runs.keys_intersecting(first, last) {
            let Some(old) = self.runs.remove(key) else {
                continue;
            };
            let new = match change(&old) {
                Some(mut new) => {
                    new.last = old.last;
                    match check_change(key, &old, &new, op.marker) {
                        Ok(()) => new,
                        Err(v) => {
                            self.runs.flag(v);
                            old.clone()
                        }
                    }
                }
                None => old.clone(),
            };
            if persisted(&old) != persisted(&new) {
                op.touched.push((key, new.last));
            }
            self.runs.insert(key, new);
        }
        self.runs.coalesce(first, last);
    }

    /// Moves the SPSO past terminal records and offsets without data (untracked offsets
    /// inside the window), dropping the terminal runs it passes.
    fn advance_start(&mut self) {
        loop {
            let Some((first, run)) = self.runs.first() else {
                self.start = self.next_new;
                return;
            };
            if first > self.start {
                self.start = first;
            }
            if !run.state.is_terminal() {
                return;
            }
            let next = run.last + 1;
            self.runs.remove(first);
            self.start = next;
        }
    }

    /// Releases every lock whose deadline is at or before `now_ms`: AVAILABLE again, or
    /// ARCHIVED at the delivery limit (Kafka's acquisition lock timeout).
    fn expire_due(&mut self, now_ms: i64, op: &mut Op) {
        let limit = self.config.delivery_count_limit;
        let dead = self.config.dead_letter_state();
        if crate::faults::active(crate::faults::Fault::LockExpiresTxPending) {
            self.expire_staged(now_ms, op);
        }
        for key in self.runs.expired(now_ms) {
            let Some((first, last)) = self
                .runs
                .covering(key)
                .filter(|(_, r)| r.state == RecordState::Acquired && r.deadline_ms <= now_ms)
                .map(|(first, r)| (first, r.last))
            else {
                continue;
            };
            self.update_range(first, last, op, |r| {
                if r.state != RecordState::Acquired || r.deadline_ms > now_ms {
                    return None;
                }
                let state = if r.delivery_count >= limit {
                    dead
                } else {
                    RecordState::Available
                };
                Some(Run::unowned(r.last, state, r.delivery_count))
            });
        }
    }

    /// The [`crate::faults::Fault::LockExpiresTxPending`] bug: a staged record's lock, still
    /// running from its staging, makes it AVAILABLE when it lapses.
    fn expire_staged(&mut self, now_ms: i64, op: &mut Op) {
        let duration = self.config.record_lock_duration_ms;
        let due = |r: &Run| {
            r.state == RecordState::TxPending
                && r.txn
                    .as_ref()
                    .and_then(|t| t.staged_at_ms)
                    .is_some_and(|at| at.saturating_add(duration) <= now_ms)
        };
        for key in self.runs.staged_keys() {
            let Some(last) = self.runs.get(key).filter(|r| due(r)).map(|r| r.last) else {
                continue;
            };
            self.update_range(key, last, op, |r| {
                due(r).then(|| Run::unowned(r.last, RecordState::Available, r.delivery_count))
            });
        }
    }

    fn lock_deadline(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.config.record_lock_duration_ms)
    }

    fn member(member_id: &str) -> Arc<str> {
        Arc::from(member_id)
    }

    /// Checks every invariant by a full scan (tests only: it is O(runs); production checks
    /// each change as it is made, see the module docs).
    #[cfg(test)]
    fn check_invariants(&self) {
        assert_eq!(self.violation(), None, "invariant violated");
        assert!(
            self.start <= self.next_new,
            "start {} > next {}",
            self.start,
            self.next_new
        );
        let mut prev_last: Option<i64> = None;
        let mut counts = StateCounts::default();
        for (first, r) in self.runs.iter() {
            assert!(
                first >= self.start && r.last < self.next_new,
                "run {first}..={}",
                r.last
            );
            assert!(first <= r.last);
            if let Some(p) = prev_last {
                assert!(first > p, "runs overlap at {first}");
            }
            assert_eq!(r.owner.is_some(), r.state == RecordState::Acquired);
            assert_eq!(r.txn.is_some(), r.state == RecordState::TxPending);
            assert!(r.delivery_count >= 0 && r.delivery_count <= self.config.delivery_count_limit);
            *counts.slot(r.state) += r.len(first);
            prev_last = Some(r.last);
        }
        if let Some((_, last)) = self.runs.last() {
            assert_eq!(
                last.last,
                self.next_new - 1,
                "last run ends at next_new - 1"
            );
        }
        if let Some((first, r)) = self.runs.first() {
            assert!(!r.state.is_terminal(), "terminal run at the start");
            assert_eq!(first, self.start, "start is the first run's offset");
        }
        assert_eq!(counts, self.runs.counts());
    }
}

/// Appends `batches` to `out`, joining a batch with its predecessor when contiguous and equal.
fn append_joined(out: &mut Vec<PersistedBatch>, batches: Vec<PersistedBatch>) {
    for b in batches {
        match out.last_mut() {
            Some(prev)
                if prev.last_offset + 1 == b.first_offset
                    && prev.state == b.state
                    && prev.delivery_count == b.delivery_count
                    && prev.staged_txn == b.staged_txn =>
            {
                prev.last_offset = b.last_offset;
            }
            _ => out.push(b),
        }
    }
}

/// Validates one persisted batch that must start at or after `cursor`; returns its run.
fn check_persisted_batch(b: &StateBatch, cursor: i64) -> Result<Run, ShareError> {
    if b.first_offset > b.last_offset || b.last_offset == i64::MAX {
        return Err(ShareError::InvalidPersistedState(
            "batch with first offset after last offset",
        ));
    }
    if b.first_offset < cursor {
        return Err(ShareError::InvalidPersistedState(
            "batches unsorted, overlapping or before the start offset",
        ));
    }
    if b.delivery_count < 0 {
        return Err(ShareError::InvalidPersistedState("negative delivery count"));
    }
    let state = RecordState::from_id(b.delivery_state);
    if b.staged_txn.is_some() != (state == Some(RecordState::TxPending)) {
        return Err(ShareError::InvalidPersistedState(
            "transaction staging on a batch that is not TX_PENDING, or missing on one that is",
        ));
    }
    match state {
        Some(
            s @ (RecordState::Available
            | RecordState::Acknowledged
            | RecordState::Archiving
            | RecordState::Archived),
        ) => Ok(Run::unowned(b.last_offset, s, b.delivery_count)),
        Some(RecordState::TxPending) => {
            let staging = b.staged_txn.and_then(|t| {
                let ack = AcknowledgeType::from_id(t.ack_type).filter(|a| a.is_transactional())?;
                Some(Staging {
                    producer_id: t.producer_id,
                    producer_epoch: t.producer_epoch,
                    ack,
                    member: None,
                    staged_at_ms: None,
                    dead_lettered: t.dead_lettered && ack == AcknowledgeType::Reject,
                })
            });
            let Some(staging) = staging else {
                return Err(ShareError::InvalidPersistedState(
                    "TX_PENDING staged with an acknowledge type other than ACCEPT, REJECT or GAP",
                ));
            };
            // Persisted with the pre-acquisition count (see `persisted`).
            Ok(Run::staged(
                b.last_offset,
                b.delivery_count.saturating_add(1),
                staging,
            ))
        }
        Some(RecordState::Acquired) | None => Err(ShareError::InvalidPersistedState(
            "delivery state is not AVAILABLE, ACKNOWLEDGED, ARCHIVING, ARCHIVED or TX_PENDING",
        )),
    }
}
