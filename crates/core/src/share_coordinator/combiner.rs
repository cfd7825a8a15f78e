//! Merging state batches, with the result of Kafka's `PersisterStateBatchCombiner`.
//!
//! Kafka merges the batches it has with the batches of a write (or of a replayed update) into
//! a sorted list of non-overlapping batches:
//! 1. prune: unless the start offset is -1, batches ending before it are dropped and a batch
//!    straddling it is cut to start there;
//! 2. where batches overlap, each offset takes the batch of highest *priority*: the higher
//!    delivery count, and for equal counts the higher delivery state id (Kafka's
//!    `compareBatchDeliveryInfo`). It is not "the later batch wins": a share partition only
//!    ever moves an offset's persisted (count, state) up in this order, so for its writes the
//!    two coincide;
//! 3. neighbouring batches with the same state, count and TX_PENDING staging are joined (the
//!    winner's staging goes with its offsets).
//!
//! Kafka reaches this result pairwise over a `TreeSet`; here one sweep over the batch
//! boundaries computes it in O(n log n). Batches with `first_offset > last_offset` cover no
//! offset and are ignored.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::StateBatch;

/// The start offset that means "unchanged, prune nothing".
pub const NO_START_OFFSET: i64 = -1;

/// Kafka's merge order of two batches' delivery information: count, then state.
fn priority(b: &StateBatch) -> (i16, i8) {
    (b.delivery_count, b.delivery_state)
}

/// Merges `so_far` and `new` as Kafka's combiner does, pruning below `start_offset` unless it
/// is [`NO_START_OFFSET`].
pub fn combine_state_batches(
    so_far: &[StateBatch],
    new: &[StateBatch],
    start_offset: i64,
) -> Vec<StateBatch> {
    let prune = start_offset != NO_START_OFFSET;
    let mut batches: Vec<StateBatch> = so_far
        .iter()
        .chain(new.iter())
        .filter(|b| b.first_offset <= b.last_offset)
        .filter(|b| !prune || b.last_offset >= start_offset)
        .map(|b| {
            let mut b = *b;
            if prune && b.first_offset < start_offset {
                b.first_offset = start_offset;
            }
            b
        })
        .collect();
    batches.sort_by_key(|b| b.first_offset);

    // Elementary intervals start at every first offset and after every last offset; i128 so
    // that `last + 1` cannot overflow.
    let mut bounds: Vec<i128> = Vec::with_capacity(batches.len() * 2);
    for b in &batches {
        bounds.push(i128::from(b.first_offset));
        bounds.push(i128::from(b.last_offset) + 1);
    }
    bounds.sort_unstable();
    bounds.dedup();

    let mut out: Vec<StateBatch> = Vec::new();
    // Max-heap of (priority, end exclusive, index) of the batches covering the interval;
    // entries that ended are dropped lazily when they reach the top.
    let mut active: BinaryHeap<((i16, i8), Reverse<i128>, usize)> = BinaryHeap::new();
    let mut next = 0usize;
    for window in bounds.windows(2) {
        let &[lo, hi] = window else {
            continue;
        };
        while let Some(b) = batches.get(next) {
            if i128::from(b.first_offset) > lo {
                break;
            }
            active.push((priority(b), Reverse(i128::from(b.last_offset) + 1), next));
            next += 1;
        }
        while active.peek().is_some_and(|(_, Reverse(end), _)| *end <= lo) {
            active.pop();
        }
        let Some(&(_, _, winner)) = active.peek() else {
            continue;
        };
        let Some(w) = batches.get(winner) else {
            continue;
        };
        // lo and hi - 1 lie within the winner's offsets, so they fit i64.
        let (Ok(first), Ok(last)) = (i64::try_from(lo), i64::try_from(hi - 1)) else {
            continue;
        };
        match out.last_mut() {
            Some(prev)
                if i128::from(prev.last_offset) + 1 == lo
                    && priority(prev) == priority(w)
                    && prev.staged_txn == w.staged_txn =>
            {
                prev.last_offset = last;
            }
            _ => out.push(
                StateBatch::new(first, last, w.delivery_state, w.delivery_count)
                    .with_staged_txn(w.staged_txn),
            ),
        }
    }
    out
}
