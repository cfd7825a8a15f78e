//! Acquisition: which records a ShareFetch locks for a member.
//!
//! The broker reads the log from `next_fetch_offset` and passes the headers of the batches it
//! read. Within the range they span (from the first base offset, not below the SPSO, to the
//! last offset):
//! - AVAILABLE tracked records are re-acquired, delivery count + 1;
//! - offsets past everything tracked are new records, acquired with delivery count 1, as
//!   whole log batches while the in-flight window has room;
//! - offsets before the first fetched batch that are still AVAILABLE have no data any more
//!   (compaction) and are archived (Kafka's `maybeArchiveStaleBatches`);
//! - with read_committed, records of aborted transactions are archived instead of returned;
//!   transaction markers are returned, for the client to acknowledge as gaps.
//!
//! Re-delivery throttling (Kafka's `throttleRecordsDeliveryLimit`): a record delivered
//! `max(2, ceil(limit / 2))` times or more is re-delivered only at the start of a response,
//! with at most `MaxRecords >> (count - throttle + 1)` records (at least one), and nothing else
//! in that response; on its last attempt (count = limit - 1, limit > 2) it goes alone.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::runs::Run;
use super::types::{
    AbortedTransaction, AcquireMode, AcquiredRecords, FetchedBatch, Isolation, RecordState,
    ShareError, StateWrite,
};
use super::{Op, SharePartition};

/// One ShareFetch's acquisition for one share partition.
#[derive(Clone, Copy, Debug)]
pub struct AcquireRequest<'a> {
    pub member_id: &'a str,
    /// The offset the log read started at (normally [`SharePartition::next_fetch_offset`]
    /// when the read began). Batches must be exactly what the log returned from there:
    /// ascending, disjoint, the first one containing `fetch_offset` or the first data after
    /// it.
    pub fetch_offset: i64,
    pub fetched: &'a [FetchedBatch],
    /// ShareFetch `MaxRecords` (a soft limit in batch-optimized mode).
    pub max_records: i32,
    /// ShareFetch `BatchSize`.
    pub batch_size: i32,
    pub mode: AcquireMode,
    pub isolation: Isolation<'a>,
    pub now_ms: i64,
}

/// What `acquire` locked for the member, and what to persist (records archived on the way,
/// a moved SPSO, expired locks), if anything.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Acquisition {
    pub records: Vec<AcquiredRecords>,
    pub write: Option<StateWrite>,
}

/// A contiguous range acquired in this call with one delivery count: (first, last, count).
type Chunk = (i64, i64, i16);

/// Progress of one acquisition.
struct Acquirer {
    member: Arc<str>,
    deadline_ms: i64,
    /// Records this call may acquire.
    remaining: i64,
    acquired: i64,
    chunks: Vec<Chunk>,
}

impl Acquirer {
    fn left(&self) -> i64 {
        self.remaining - self.acquired
    }
}

impl SharePartition {
    /// Acquires records from the fetched log batches for `member_id`, with lock deadline
    /// `now_ms + record lock duration`. Locks already due expire first.
    ///
    /// # Errors
    /// [`ShareError::InvalidFetchedBatches`] if the batches are not ascending, disjoint and
    /// well-formed (a broker bug); nothing changes then. [`ShareError::InvariantViolated`] or
    /// [`ShareError::Stopped`] (see [`SharePartition::violation`]).
    pub fn acquire(&mut self, req: &AcquireRequest<'_>) -> Result<Acquisition, ShareError> {
        self.running()?;
        validate_fetched(req.fetched)?;
        let mut op = self.begin();
        self.expire_due(req.now_ms, &mut op);
        let chunks = match (req.fetched.first(), req.fetched.last()) {
            (Some(first), Some(last)) if req.max_records > 0 => {
                self.acquire_fetched(req, first.base_offset, last.last_offset, &mut op)
            }
            _ => Vec::new(),
        };
        let chunks = match req.isolation {
            Isolation::ReadCommitted { aborted } => {
                self.archive_aborted(req, aborted, chunks, &mut op)
            }
            Isolation::ReadUncommitted => chunks,
        };
        self.advance_start();
        let write = self.finish(op)?;
        let records = split_for_response(&join_chunks(chunks), req);
        Ok(Acquisition { records, write })
    }

    fn acquire_fetched(
        &mut self,
        req: &AcquireRequest<'_>,
        first_base: i64,
        fetched_last: i64,
        op: &mut Op,
    ) -> Vec<Chunk> {
        if req.fetch_offset < first_base {
            // Nothing left in the log between the read position and the first batch.
            let from = req.fetch_offset.max(self.start);
            self.update_range(from, first_base - 1, op, archive_available);
            self.advance_start();
        }
        let req_first = first_base.max(self.start);
        let mut req_last = fetched_last;
        if req_last < req_first {
            return Vec::new();
        }
        let max_records = i64::from(req.max_records);
        let mut remaining = max_records.min(self.config.record_locks_max - self.in_flight_count());
        if remaining <= 0 {
            // At the record-lock limit only records inside the window can be re-acquired.
            let end = self.next_new - 1;
            if self.runs.is_empty() || req.fetch_offset > end {
                return Vec::new();
            }
            remaining = max_records.min(end.saturating_sub(req.fetch_offset).saturating_add(1));
            req_last = req_last.min(end);
        }
        let mut acq = Acquirer {
            member: Self::member(req.member_id),
            deadline_ms: self.lock_deadline(req.now_ms),
            remaining,
            acquired: 0,
            chunks: Vec::new(),
        };
        let stopped = self.reacquire(req, req_first, req_last, &mut acq, op);
        if !stopped && acq.left() > 0 && req_last >= self.next_new {
            self.acquire_new(req, req_first, req_last, &mut acq);
        }
        acq.chunks
    }

    /// Re-acquires AVAILABLE tracked records in `[req_first, req_last]`. Returns true when
    /// throttling ended the acquisition (no new records either).
    fn reacquire(
        &mut self,
        req: &AcquireRequest<'_>,
        req_first: i64,
        req_last: i64,
        acq: &mut Acquirer,
        op: &mut Op,
    ) -> bool {
        let hi = req_last.min(self.next_new - 1);
        let limit = self.config.delivery_count_limit;
        let throttle = self.config.throttle_delivery_count();
        let mut cursor = req_first;
        while cursor <= hi && acq.left() > 0 {
            let Some((first, run)) = self.runs.at_or_after(cursor) else {
                break;
            };
            if first > hi {
                break;
            }
            let (s, e) = (first.max(cursor), run.last.min(hi));
            let (state, count) = (run.state, run.delivery_count);
            cursor = e + 1;
            if state != RecordState::Available {
                continue;
            }
            if count >= limit {
                // Only after the limit was lowered: never deliver past it.
                let dead = self.config.dead_letter_state();
                self.update_range(s, e, op, |r| {
                    (r.state == RecordState::Available)
                        .then(|| Run::unowned(r.last, dead, r.delivery_count))
                });
                continue;
            }
            let throttled = count >= throttle;
            let last_attempt = limit > 2 && count == limit - 1;
            if throttled && acq.acquired > 0 {
                return true;
            }
            let left = acq.left();
            let take_last = if last_attempt {
                s
            } else if throttled {
                let shift = u32::try_from(count - throttle + 1).unwrap_or(u32::MAX);
                s.saturating_add(left.checked_shr(shift).unwrap_or(0).max(1) - 1)
            } else {
                match req.mode {
                    AcquireMode::RecordLimit => s.saturating_add(left - 1),
                    AcquireMode::BatchOptimized => {
                        batch_end(req.fetched, s.saturating_add(left - 1))
                    }
                }
            }
            .min(e);
            self.take(s, take_last, acq, op);
            if throttled || last_attempt {
                return true;
            }
            cursor = take_last + 1;
        }
        false
    }

    /// Locks the AVAILABLE records `[first, last]` (inside one run) for the member.
    fn take(&mut self, first: i64, last: i64, acq: &mut Acquirer, op: &mut Op) {
        let mut count = 0;
        self.update_range(first, last, op, |r| {
            (r.state == RecordState::Available).then(|| {
                count = r.delivery_count.saturating_add(1);
                Run::acquired(r.last, count, acq.member.clone(), acq.deadline_ms)
            })
        });
        if count > 0 {
            acq.chunks.push((first, last, count));
            acq.acquired += last - first + 1;
        }
    }

    /// Acquires records past everything tracked, as whole log batches.
    fn acquire_new(
        &mut self,
        req: &AcquireRequest<'_>,
        req_first: i64,
        req_last: i64,
        acq: &mut Acquirer,
    ) {
        let new_first = req_first.max(self.next_new);
        let window_start = if self.runs.is_empty() {
            new_first
        } else {
            self.start
        };
        let window_left = window_start
            .saturating_add(self.config.record_locks_max)
            .saturating_sub(new_first);
        let n = acq.left().min(window_left);
        if n <= 0 {
            return;
        }
        let target = new_first.saturating_add(n - 1);
        let (acquired_last, tracked_last) = if target >= req_last {
            (req_last, req_last)
        } else {
            let end = batch_end(req.fetched, target).min(req_last);
            match req.mode {
                AcquireMode::BatchOptimized => (end, end),
                // The rest of the log batch stays AVAILABLE, never delivered.
                AcquireMode::RecordLimit => (target, end),
            }
        };
        if self.runs.is_empty() {
            // Nothing in flight: the window restarts at the first data found.
            self.start = new_first;
        }
        self.runs.track(
            new_first,
            Run::acquired(acquired_last, 1, acq.member.clone(), acq.deadline_ms),
        );
        if tracked_last > acquired_last {
            self.runs.track(
                acquired_last + 1,
                Run::unowned(tracked_last, RecordState::Available, 0),
            );
        }
        self.next_new = tracked_last + 1;
        self.runs.coalesce(new_first, tracked_last);
        acq.chunks.push((new_first, acquired_last, 1));
        acq.acquired += acquired_last - new_first + 1;
    }

    /// read_committed: archives the records of aborted transactions this call acquired and
    /// drops them from the response.
    fn archive_aborted(
        &mut self,
        req: &AcquireRequest<'_>,
        aborted: &[AbortedTransaction],
        chunks: Vec<Chunk>,
        op: &mut Op,
    ) -> Vec<Chunk> {
        let ranges = aborted_ranges(req.fetched, aborted);
        if ranges.is_empty() || chunks.is_empty() {
            return chunks;
        }
        let deadline = self.lock_deadline(req.now_ms);
        let mut kept = Vec::with_capacity(chunks.len());
        for (first, last, count) in chunks {
            let mut cursor = first;
            for &(a, b) in &ranges {
                if b < cursor || a > last {
                    continue;
                }
                if a > cursor {
                    kept.push((cursor, a - 1, count));
                }
                let (x, y) = (a.max(cursor), b.min(last));
                self.update_range(x, y, op, |r| {
                    let ours = r.state == RecordState::Acquired
                        && r.owned_by(req.member_id)
                        && r.deadline_ms == deadline;
                    ours.then(|| Run::unowned(r.last, RecordState::Archived, r.delivery_count))
                });
                cursor = y + 1;
            }
            if cursor <= last {
                kept.push((cursor, last, count));
            }
        }
        kept
    }
}

fn archive_available(r: &Run) -> Option<Run> {
    (r.state == RecordState::Available)
        .then(|| Run::unowned(r.last, RecordState::Archived, r.delivery_count))
}

/// Checks the broker's batch headers: non-negative, `base <= last < i64::MAX`, ascending and
/// disjoint.
fn validate_fetched(fetched: &[FetchedBatch]) -> Result<(), ShareError> {
    let mut previous_last: Option<i64> = None;
    for (index, b) in fetched.iter().enumerate() {
        let ordered = previous_last.is_none_or(|p| b.base_offset > p);
        if b.base_offset < 0
            || b.base_offset > b.last_offset
            || b.last_offset == i64::MAX
            || !ordered
        {
            return Err(ShareError::InvalidFetchedBatches { index });
        }
        previous_last = Some(b.last_offset);
    }
    Ok(())
}

/// The last offset of the fetched batch containing `offset`, else `offset` itself (Kafka's
/// `lastOffsetFromBatchWithRequestOffset`).
fn batch_end(fetched: &[FetchedBatch], offset: i64) -> i64 {
    let after = fetched.partition_point(|b| b.base_offset <= offset);
    match after.checked_sub(1).and_then(|i| fetched.get(i)) {
        Some(b) if b.last_offset >= offset => b.last_offset,
        _ => offset,
    }
}

/// The offset ranges of transactional batches whose transaction was aborted (Kafka's
/// `fetchAbortedTransactionRecordBatches`): walking the batches in order, a producer is
/// aborted from the first offset of its aborted transaction until its marker.
fn aborted_ranges(fetched: &[FetchedBatch], aborted: &[AbortedTransaction]) -> Vec<(i64, i64)> {
    let mut pending: Vec<AbortedTransaction> = aborted.to_vec();
    pending.sort_by_key(|t| t.first_offset);
    let mut pending = pending.into_iter().peekable();
    let mut active: BTreeSet<i64> = BTreeSet::new();
    let mut out = Vec::new();
    for b in fetched {
        while let Some(t) = pending.next_if(|t| t.first_offset <= b.last_offset) {
            active.insert(t.producer_id);
        }
        if b.is_control {
            active.remove(&b.producer_id);
        } else if b.is_transactional && active.contains(&b.producer_id) {
            out.push((b.base_offset, b.last_offset));
        }
    }
    out
}

/// Joins contiguous chunks with the same delivery count.
fn join_chunks(chunks: Vec<Chunk>) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::with_capacity(chunks.len());
    for c in chunks {
        match out.last_mut() {
            Some(prev) if prev.1 + 1 == c.0 && prev.2 == c.2 => prev.1 = c.1,
            _ => out.push(c),
        }
    }
    out
}

/// The response's AcquiredRecords: in batch-optimized mode a range is cut at the first log
/// batch boundary at least `BatchSize` records into it (Kafka's `createBatches`); in
/// record-limit mode ranges are returned as they are.
fn split_for_response(chunks: &[Chunk], req: &AcquireRequest<'_>) -> Vec<AcquiredRecords> {
    let batch_size = i64::from(req.batch_size.max(1));
    let mut out = Vec::with_capacity(chunks.len());
    for &(first, last, delivery_count) in chunks {
        let mut cursor = first;
        if req.mode == AcquireMode::BatchOptimized {
            let from = req.fetched.partition_point(|b| b.base_offset <= first);
            for b in req.fetched.iter().skip(from) {
                if b.base_offset > last {
                    break;
                }
                if b.base_offset - cursor >= batch_size {
                    out.push(AcquiredRecords {
                        first_offset: cursor,
                        last_offset: b.base_offset - 1,
                        delivery_count,
                    });
                    cursor = b.base_offset;
                }
            }
        }
        out.push(AcquiredRecords {
            first_offset: cursor,
            last_offset: last,
            delivery_count,
        });
    }
    out
}
