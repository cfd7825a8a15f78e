//! Random appends, sends, answers and clock moves against a model idempotent broker: it
//! appends a partition's batch only at the next expected sequence, answers a batch it
//! already has with DUPLICATE_SEQUENCE_NUMBER and a later one with
//! OUT_OF_ORDER_SEQUENCE_NUMBER; requests are lost before or after the broker applied them,
//! or refused by a moved leader. Answers come back in send order per partition (one
//! connection per broker). Checked after every step and at the end:
//! - every record completes exactly once (the end runs fault-free until nothing is left);
//! - the broker's log holds no record twice and each partition's records in append order,
//!   and every record completed as written is in it;
//! - at most `max_in_flight` batches of a partition are in flight;
//! - memory in use equals the bytes of the records not completed, within `buffer_memory`;
//! - no batch is sent once its delivery timeout has passed;
//! - the wake-up time `ready` gives is always in the future (batches held back by earlier
//!   ones in flight wait for an answer, not a time).

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Action {
    Append(u8, usize),
    Send(u8),
    /// Answer partition's oldest request: 0 fine, 1 lost before the broker applied it, 2 lost
    /// after, 3 NOT_LEADER_OR_FOLLOWER, 4 MESSAGE_TOO_LARGE (not retriable).
    Respond(u8, u8),
    Tick(i64),
    Flush,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (0..3u8, 1..60usize).prop_map(|(p, n)| Action::Append(p, n)),
        4 => (0..3u8).prop_map(Action::Send),
        5 => (0..3u8, prop_oneof![12 => Just(0u8), 2 => Just(1u8), 2 => Just(2u8), 2 => Just(3u8), 1 => Just(4u8)])
            .prop_map(|(p, f)| Action::Respond(p, f)),
        3 => (1..400i64).prop_map(Action::Tick),
        1 => Just(Action::Flush),
    ]
}

/// A batch's partition, its records (id, bytes) in append order, and its first append time.
type BatchRecords = (u8, Vec<(u64, usize)>, i64);

#[derive(Default)]
struct Broker {
    expected: i32,
    log: Vec<u64>,
}

struct Run {
    acc: Accumulator<u8>,
    cfg: AccumulatorConfig,
    now: i64,
    next_record: u64,
    /// Records of each batch, in append order, and the batch's first append time.
    batches: BTreeMap<BatchId, BatchRecords>,
    /// Sends in flight per partition, oldest first: (batch, base sequence).
    wire: BTreeMap<u8, VecDeque<(BatchId, i32)>>,
    brokers: BTreeMap<u8, Broker>,
    sequences: BTreeMap<u8, i32>,
    /// Record -> how it completed (None: written; Some(code): failed).
    completed: BTreeMap<u64, Option<ErrorCode>>,
    outstanding_bytes: usize,
    appended_order: BTreeMap<u8, Vec<u64>>,
}

impl Run {
    fn new() -> Run {
        let cfg = AccumulatorConfig {
            batch_size: 100,
            linger_ms: 20,
            buffer_memory: 600,
            max_in_flight: 3,
            delivery_timeout_ms: 700,
            retry_backoff_ms: 30,
            retry_backoff_max_ms: 240,
        };
        Run {
            acc: Accumulator::new(cfg),
            cfg,
            now: 0,
            next_record: 0,
            batches: BTreeMap::new(),
            wire: BTreeMap::new(),
            brokers: BTreeMap::new(),
            sequences: BTreeMap::new(),
            completed: BTreeMap::new(),
            outstanding_bytes: 0,
            appended_order: BTreeMap::new(),
        }
    }

    fn on_completion(&mut self, c: Completion<u8>) {
        let (p, records, _) = self
            .batches
            .remove(&c.batch)
            .expect("a batch completes once");
        assert_eq!(p, c.partition);
        assert_eq!(records.len(), c.records);
        let failed = match c.outcome {
            Completed::Written { .. } => None,
            Completed::Failed { code } => Some(code),
        };
        for (r, bytes) in records {
            assert!(
                self.completed.insert(r, failed).is_none(),
                "record {r} twice"
            );
            self.outstanding_bytes -= bytes;
        }
    }

    fn step(&mut self, a: &Action) {
        match a {
            Action::Append(p, bytes) => match self.acc.append(p, *bytes, self.now) {
                Ok((at, _closed)) => {
                    let r = self.next_record;
                    self.next_record += 1;
                    let entry = self
                        .batches
                        .entry(at.batch)
                        .or_insert_with(|| (*p, Vec::new(), self.now));
                    assert_eq!(entry.1.len(), at.index, "records indexed in order");
                    entry.1.push((r, *bytes));
                    self.outstanding_bytes += bytes;
                    self.appended_order.entry(*p).or_default().push(r);
                }
                Err(AppendError::BufferFull { used, max }) => {
                    assert!(used + bytes > max);
                    assert_eq!(used, self.outstanding_bytes);
                }
                Err(e) => panic!("{e}"),
            },
            Action::Send(p) => {
                let seqs = &mut self.sequences;
                let mut next = |n: usize| {
                    let s = seqs.entry(*p).or_insert(0);
                    let base = *s;
                    *s += n as i32;
                    base
                };
                if let Some(d) = self.acc.drain(p, self.now, Some(&mut next)) {
                    let created = self.batches[&d.batch].2;
                    assert!(
                        self.now < created + self.cfg.delivery_timeout_ms,
                        "sent after its delivery timeout"
                    );
                    let wire = self.wire.entry(*p).or_default();
                    wire.push_back((d.batch, d.base_sequence.expect("sequenced")));
                    assert!(wire.len() <= self.cfg.max_in_flight, "too many in flight");
                }
            }
            Action::Respond(p, fault) => {
                let Some((batch, seq)) = self.wire.get_mut(p).and_then(|w| w.pop_front()) else {
                    return;
                };
                let records: Vec<u64> = self.batches[&batch].1.iter().map(|r| r.0).collect();
                let broker = self.brokers.entry(*p).or_default();
                let n = records.len() as i32;
                let has_it = seq < broker.expected;
                let mut apply = || {
                    if seq == broker.expected {
                        let base = broker.log.len() as i64;
                        broker.log.extend(&records);
                        broker.expected += n;
                        SendResult::Ok { base_offset: base }
                    } else if seq < broker.expected {
                        SendResult::Err(ErrorCode::DUPLICATE_SEQUENCE_NUMBER)
                    } else {
                        SendResult::Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
                    }
                };
                let (result, retriable) = match fault {
                    0 => {
                        let r = apply();
                        (
                            r,
                            matches!(r, SendResult::Err(c) if c == ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
                        )
                    }
                    1 => (SendResult::Err(ErrorCode::REQUEST_TIMED_OUT), true),
                    2 => {
                        apply();
                        (SendResult::Err(ErrorCode::REQUEST_TIMED_OUT), true)
                    }
                    3 => (SendResult::Err(ErrorCode::NOT_LEADER_OR_FOLLOWER), true),
                    // A broker that has the batch answers DUPLICATE_SEQUENCE_NUMBER instead.
                    _ if has_it => (apply(), false),
                    _ => (SendResult::Err(ErrorCode::MESSAGE_TOO_LARGE), false),
                };
                let completion = self.acc.complete(p, batch, result, retriable, self.now);
                if !retriable {
                    // Not retriable: it completes now, as it was answered.
                    let c = completion.as_ref().expect("a refused batch completes");
                    if let SendResult::Err(code) = result {
                        if code != ErrorCode::DUPLICATE_SEQUENCE_NUMBER {
                            assert_eq!(c.outcome, Completed::Failed { code });
                        }
                    }
                }
                if let Some(c) = completion {
                    self.on_completion(c);
                }
            }
            Action::Tick(dt) => {
                self.now += dt;
                for c in self.acc.expire(self.now) {
                    self.on_completion(c);
                }
            }
            Action::Flush => self.acc.begin_flush(),
        }
        self.check();
    }

    fn check(&self) {
        // The sender sleeps until `next`: one that has already come would make it spin.
        let (_, next) = self.acc.ready(self.now);
        assert!(
            next.is_none_or(|at| at > self.now),
            "wake-up time {next:?} not after now {}",
            self.now
        );
        assert_eq!(self.acc.memory_in_use(), self.outstanding_bytes);
        assert!(self.acc.memory_in_use() <= self.cfg.buffer_memory);
        for (p, broker) in &self.brokers {
            // No record twice, and in append order.
            let order = &self.appended_order[p];
            let position: BTreeMap<u64, usize> =
                order.iter().enumerate().map(|(i, r)| (*r, i)).collect();
            let mut last = None;
            for r in &broker.log {
                let at = position[r];
                assert!(
                    last.is_none_or(|l| l < at),
                    "log out of order or duplicated"
                );
                last = Some(at);
            }
        }
        let logged: std::collections::BTreeSet<u64> = self
            .brokers
            .values()
            .flat_map(|b| b.log.iter().copied())
            .collect();
        for (r, failed) in &self.completed {
            match failed {
                None => assert!(logged.contains(r), "record {r} written but not in the log"),
                // A record in the log is reported written, unless its outcome is unknown
                // (the delivery timeout passed while a request was unanswered).
                Some(code) => assert!(
                    !logged.contains(r) || *code == ErrorCode::REQUEST_TIMED_OUT,
                    "record {r} in the log but failed with {code:?}"
                ),
            }
        }
    }

    /// No more faults: everything completes (written, or failed by its delivery timeout).
    fn finish(&mut self) {
        self.acc.begin_flush();
        for _ in 0..10_000 {
            if self.acc.incomplete() == 0 {
                break;
            }
            for p in 0..3u8 {
                self.step(&Action::Send(p));
            }
            for p in 0..3u8 {
                self.step(&Action::Respond(p, 0));
            }
            self.step(&Action::Tick(10));
        }
        assert_eq!(self.acc.incomplete(), 0, "stalled");
        assert_eq!(
            self.completed.len() as u64,
            self.next_record,
            "every record completed"
        );
        assert_eq!(self.acc.memory_in_use(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_record_completes_once_and_lands_once_in_order(
        actions in prop::collection::vec(action(), 1..200),
    ) {
        let mut run = Run::new();
        for a in &actions {
            run.step(a);
        }
        run.finish();
    }
}
