//! The record accumulator: per-partition batches that fill up to `batch.size` or wait
//! `linger.ms`, bounded by `buffer.memory`, drained to the sender at most
//! `max.in.flight.requests.per.connection` per partition, retried in sequence order, and
//! failed once `delivery.timeout.ms` has passed. Sans-IO: times are the caller's
//! milliseconds, and the sender reports each batch's outcome.
//!
//! Ordered retries (idempotence): a batch keeps the base sequence it was first sent with.
//! When a batch fails with a retriable error, the broker rejects the batches sent after it
//! too (OUT_OF_ORDER_SEQUENCE_NUMBER, retriable here), so they all come back; they return to
//! the front of the queue in sequence order, and a batch with a sequence is sent again only
//! when no batch with a lower sequence is in flight. DUPLICATE_SEQUENCE_NUMBER means the
//! broker already has the batch: it succeeded.
//!
//! Invariants (checked by the property test against a model broker that accepts a partition's
//! batches only in sequence order and drops or fails requests at random): every record
//! appended completes exactly once; a partition's records are acknowledged in the order they
//! were appended; at most `max_in_flight` batches of a partition are in flight; the memory
//! in use is the bytes of the batches not completed and never exceeds `buffer_memory`; a
//! batch is never sent once its delivery timeout has passed.

use std::collections::{BTreeMap, VecDeque};

use shoal_protocol::ErrorCode;

/// Settings (Kafka's producer defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccumulatorConfig {
    /// `batch.size`: bytes a batch fills up to (a larger record gets a batch of its own).
    pub batch_size: usize,
    /// `linger.ms`.
    pub linger_ms: i64,
    /// `buffer.memory`: bytes of records not yet completed, at most.
    pub buffer_memory: usize,
    /// `max.in.flight.requests.per.connection` (at most 5 with idempotence).
    pub max_in_flight: usize,
    /// `delivery.timeout.ms`: from append to completion, at most.
    pub delivery_timeout_ms: i64,
    /// `retry.backoff.ms`, doubled per attempt up to `retry.backoff.max.ms`.
    pub retry_backoff_ms: i64,
    pub retry_backoff_max_ms: i64,
}

impl Default for AccumulatorConfig {
    fn default() -> Self {
        AccumulatorConfig {
            batch_size: 16_384,
            linger_ms: 5,
            buffer_memory: 32 * 1024 * 1024,
            max_in_flight: 5,
            delivery_timeout_ms: 120_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1_000,
        }
    }
}

/// A batch's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

/// Where an appended record is: its batch and its index in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub batch: BatchId,
    pub index: usize,
}

/// Why a record was not appended (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// `buffer.memory` is used up: wait for completions (`max.block.ms`) and try again.
    #[error("buffer.memory exhausted ({used} of {max} bytes in use)")]
    BufferFull { used: usize, max: usize },
    /// The record can never fit (`buffer.memory` smaller than the record).
    #[error("a record of {size} bytes exceeds buffer.memory ({max})")]
    RecordTooLarge { size: usize, max: usize },
    /// The accumulator is closed to new records.
    #[error("the producer is closing")]
    Closed,
}

/// A batch handed to the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drained<P> {
    pub partition: P,
    pub batch: BatchId,
    pub records: usize,
    pub bytes: usize,
    /// The base sequence to write (set at its first send; kept on retries), if sequenced.
    pub base_sequence: Option<i32>,
    /// 1 for the first send.
    pub attempt: u32,
}

/// How a batch ended, for its records' delivery futures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completed {
    /// Written; `base_offset` from the broker (-1 with acks=0).
    Written { base_offset: i64 },
    /// Failed with the broker's code, or with REQUEST_TIMED_OUT once the delivery timeout
    /// passed.
    Failed { code: ErrorCode },
}

/// A batch's end: which records (their count) and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion<P> {
    pub partition: P,
    pub batch: BatchId,
    pub records: usize,
    pub outcome: Completed,
}

/// What the sender reports for a drained batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendResult {
    Ok {
        base_offset: i64,
    },
    /// The partition's error code (a request that got no answer: REQUEST_TIMED_OUT or
    /// NETWORK_EXCEPTION).
    Err(ErrorCode),
}

#[derive(Clone, Debug)]
struct Batch {
    id: BatchId,
    records: usize,
    bytes: usize,
    created_ms: i64,
    /// Closed to new records (full, or drained once).
    closed: bool,
    base_sequence: Option<i32>,
    attempts: u32,
    /// Not before this time (retry backoff).
    retry_at_ms: i64,
}

#[derive(Clone, Debug, Default)]
struct Queue {
    /// Waiting to be sent, in send order.
    waiting: VecDeque<Batch>,
    /// Sent, answer pending, in send order.
    in_flight: Vec<Batch>,
}

/// The accumulator, for partitions of type `P` (see the module docs).
#[derive(Clone, Debug)]
pub struct Accumulator<P: Ord + Clone> {
    config: AccumulatorConfig,
    queues: BTreeMap<P, Queue>,
    used: usize,
    next_batch: u64,
    flushing: bool,
    closed: bool,
}

impl<P: Ord + Clone> Accumulator<P> {
    pub fn new(config: AccumulatorConfig) -> Self {
        Accumulator {
            config,
            queues: BTreeMap::new(),
            used: 0,
            next_batch: 0,
            flushing: false,
            closed: false,
        }
    }

    pub fn config(&self) -> &AccumulatorConfig {
        &self.config
    }

    /// Bytes of records not yet completed.
    pub fn memory_in_use(&self) -> usize {
        self.used
    }

    /// Batches waiting or in flight.
    pub fn incomplete(&self) -> usize {
        self.queues
            .values()
            .map(|q| q.waiting.len() + q.in_flight.len())
            .sum()
    }

    /// Appends a record of `bytes` (its encoded size) to `partition`'s open batch, or to a
    /// new batch when it does not fit. Returns the batch that closed to make room, if any
    /// (the sticky partitioner moves on then).
    ///
    /// # Errors
    /// [`AppendError`]; nothing changed.
    pub fn append(
        &mut self,
        partition: &P,
        bytes: usize,
        now_ms: i64,
    ) -> Result<(Appended, Option<BatchId>), AppendError> {
        if self.closed {
            return Err(AppendError::Closed);
        }
        let max = self.config.buffer_memory;
        if bytes > max {
            return Err(AppendError::RecordTooLarge { size: bytes, max });
        }
        if self.used + bytes > max {
            return Err(AppendError::BufferFull {
                used: self.used,
                max,
            });
        }
        let batch_size = self.config.batch_size;
        let queue = self.queues.entry(partition.clone()).or_default();
        let mut closed = None;
        if let Some(open) = queue.waiting.back_mut().filter(|b| !b.closed) {
            if open.bytes + bytes <= batch_size {
                open.records += 1;
                open.bytes += bytes;
                if open.bytes >= batch_size {
                    open.closed = true;
                }
                self.used += bytes;
                return Ok((
                    Appended {
                        batch: open.id,
                        index: open.records - 1,
                    },
                    None,
                ));
            }
            open.closed = true;
            closed = Some(open.id);
        }
        let id = BatchId(self.next_batch);
        self.next_batch += 1;
        queue.waiting.push_back(Batch {
            id,
            records: 1,
            bytes,
            created_ms: now_ms,
            closed: bytes >= batch_size,
            base_sequence: None,
            attempts: 0,
            retry_at_ms: now_ms,
        });
        self.used += bytes;
        Ok((
            Appended {
                batch: id,
                index: 0,
            },
            closed,
        ))
    }

    /// Sends everything waiting without lingering, until [`Accumulator::flush_done`] (or
    /// forever once closed).
    pub fn begin_flush(&mut self) {
        self.flushing = true;
    }

    /// Whether a flush has nothing left (call when it began: every batch completed).
    pub fn flush_done(&mut self) -> bool {
        let done = self.incomplete() == 0;
        if done {
            self.flushing = false;
        }
        done
    }

    /// Refuses new records; what is in the accumulator is sent without lingering.
    pub fn close(&mut self) {
        self.closed = true;
        self.flushing = true;
    }

    /// Whether `q`'s head may be sent at `now_ms`.
    fn sendable(&self, q: &Queue, now_ms: i64) -> bool {
        let Some(head) = q.waiting.front() else {
            return false;
        };
        if q.in_flight.len() >= self.config.max_in_flight || now_ms < head.retry_at_ms {
            return false;
        }
        // Past its delivery timeout a batch is never sent again ([`Accumulator::expire`]
        // fails it).
        if now_ms
            >= head
                .created_ms
                .saturating_add(self.config.delivery_timeout_ms)
        {
            return false;
        }
        // A retried batch goes again only after every earlier sequence is answered.
        if waits_for_earlier(q, head) {
            return false;
        }
        head.closed
            || self.flushing
            || head.attempts > 0
            || now_ms >= head.created_ms.saturating_add(self.config.linger_ms)
    }

    /// Partitions with a batch to send now, and the next time (ms) one may become ready.
    pub fn ready(&self, now_ms: i64) -> (Vec<P>, Option<i64>) {
        let mut ready = Vec::new();
        let mut next: Option<i64> = None;
        for (p, q) in &self.queues {
            if self.sendable(q, now_ms) {
                ready.push(p.clone());
            } else if let Some(head) = q.waiting.front() {
                // A head held back by batches in flight becomes ready with an answer, not
                // at a time; only a time that has not yet come is a wake-up time.
                if q.in_flight.len() >= self.config.max_in_flight || waits_for_earlier(q, head) {
                    continue;
                }
                let at = if head.attempts > 0 {
                    head.retry_at_ms
                } else {
                    head.created_ms.saturating_add(self.config.linger_ms)
                };
                if at > now_ms {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
        }
        (ready, next)
    }

    /// Takes `partition`'s head batch for sending, if it may go now. `sequence` assigns a
    /// first send's base sequence (from the transaction manager) given the record count;
    /// a retry keeps its own.
    pub fn drain(
        &mut self,
        partition: &P,
        now_ms: i64,
        sequence: Option<&mut dyn FnMut(usize) -> i32>,
    ) -> Option<Drained<P>> {
        let q = self.queues.get(partition)?;
        if !self.sendable(q, now_ms) {
            return None;
        }
        let q = self.queues.get_mut(partition)?;
        let mut batch = q.waiting.pop_front()?;
        batch.closed = true;
        batch.attempts += 1;
        if batch.base_sequence.is_none() {
            if let Some(next) = sequence {
                batch.base_sequence = Some(next(batch.records));
            }
        }
        let drained = Drained {
            partition: partition.clone(),
            batch: batch.id,
            records: batch.records,
            bytes: batch.bytes,
            base_sequence: batch.base_sequence,
            attempt: batch.attempts,
        };
        q.in_flight.push(batch);
        Some(drained)
    }

    /// The sender's outcome for an in-flight batch. A retriable error before the delivery
    /// timeout puts the batch back in sequence order; otherwise it completes.
    pub fn complete(
        &mut self,
        partition: &P,
        batch: BatchId,
        result: SendResult,
        retriable: bool,
        now_ms: i64,
    ) -> Option<Completion<P>> {
        let q = self.queues.get_mut(partition)?;
        let at = q.in_flight.iter().position(|b| b.id == batch)?;
        let b = q.in_flight.remove(at);
        let outcome = match result {
            SendResult::Ok { base_offset } => Completed::Written { base_offset },
            SendResult::Err(code) if code == ErrorCode::DUPLICATE_SEQUENCE_NUMBER => {
                Completed::Written { base_offset: -1 }
            }
            SendResult::Err(code) => {
                let expired =
                    now_ms >= b.created_ms.saturating_add(self.config.delivery_timeout_ms);
                if retriable && !expired {
                    let shift = b.attempts.saturating_sub(1).min(20);
                    let backoff = self
                        .config
                        .retry_backoff_ms
                        .saturating_mul(1i64 << shift)
                        .min(self.config.retry_backoff_max_ms);
                    let mut b = b;
                    b.retry_at_ms = now_ms.saturating_add(backoff);
                    insert_in_sequence_order(&mut q.waiting, b);
                    return None;
                }
                Completed::Failed {
                    code: if expired && retriable {
                        ErrorCode::REQUEST_TIMED_OUT
                    } else {
                        code
                    },
                }
            }
        };
        self.used -= b.bytes;
        let completion = Completion {
            partition: partition.clone(),
            batch: b.id,
            records: b.records,
            outcome,
        };
        self.forget_if_empty(partition);
        Some(completion)
    }

    /// Fails the waiting batches whose delivery timeout has passed (never sent again).
    pub fn expire(&mut self, now_ms: i64) -> Vec<Completion<P>> {
        let timeout = self.config.delivery_timeout_ms;
        let mut out = Vec::new();
        let keys: Vec<P> = self.queues.keys().cloned().collect();
        for p in keys {
            let Some(q) = self.queues.get_mut(&p) else {
                continue;
            };
            let (keep, gone): (VecDeque<Batch>, VecDeque<Batch>) = q
                .waiting
                .drain(..)
                .partition(|b| now_ms < b.created_ms.saturating_add(timeout));
            q.waiting = keep;
            for b in gone {
                self.used -= b.bytes;
                out.push(Completion {
                    partition: p.clone(),
                    batch: b.id,
                    records: b.records,
                    outcome: Completed::Failed {
                        code: ErrorCode::REQUEST_TIMED_OUT,
                    },
                });
            }
            self.forget_if_empty(&p);
        }
        out
    }

    /// Fails every batch not in flight with `code` (an aborted transaction, a fatal error).
    pub fn abort_waiting(&mut self, code: ErrorCode) -> Vec<Completion<P>> {
        let mut out = Vec::new();
        for (p, q) in self.queues.iter_mut() {
            for b in q.waiting.drain(..) {
                self.used -= b.bytes;
                out.push(Completion {
                    partition: p.clone(),
                    batch: b.id,
                    records: b.records,
                    outcome: Completed::Failed { code },
                });
            }
        }
        self.queues.retain(|_, q| !q.in_flight.is_empty());
        out
    }

    /// Forgets every batch's sequence (the producer id or epoch changed: sequences restart).
    /// Only valid with nothing in flight.
    pub fn reset_sequences(&mut self) {
        for q in self.queues.values_mut() {
            for b in q.waiting.iter_mut() {
                b.base_sequence = None;
            }
        }
    }

    fn forget_if_empty(&mut self, p: &P) {
        if self
            .queues
            .get(p)
            .is_some_and(|q| q.waiting.is_empty() && q.in_flight.is_empty())
        {
            self.queues.remove(p);
        }
    }
}

/// Puts a batch back among the waiting ones: sequenced batches first, in sequence order,
/// before the batches never sent.
/// Whether `head`, a retried batch, must wait for a batch with a lower sequence in flight.
fn waits_for_earlier(q: &Queue, head: &Batch) -> bool {
    head.base_sequence.is_some_and(|seq| {
        q.in_flight
            .iter()
            .any(|b| b.base_sequence.is_some_and(|s| s < seq))
    })
}

fn insert_in_sequence_order(waiting: &mut VecDeque<Batch>, b: Batch) {
    let seq = b.base_sequence;
    let at = waiting
        .iter()
        .position(|w| match (w.base_sequence, seq) {
            (Some(ws), Some(s)) => ws > s,
            (None, _) => true,
            (Some(_), None) => false,
        })
        .unwrap_or(waiting.len());
    waiting.insert(at, b);
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
