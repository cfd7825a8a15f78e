//! Random polls, deliveries (with holes and redeliveries), acknowledgements, fetches,
//! commits, answers, transaction drains and closes, against a model that keeps each offset's
//! state. Checked: every call succeeds exactly when the model says it may and a refused one
//! changes nothing; every batch taken is sorted, non-overlapping, well formed and carries
//! exactly the model's pending acknowledgements; an offset of one delivery is acknowledged at
//! most once, by the consumer or by a transaction, never both; after close nothing is left.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Action {
    Poll,
    /// Deliver `len` offsets from `first` of partition `key`, every `hole`-th without record.
    Deliver {
        key: u8,
        first: i64,
        len: i64,
        hole: i64,
    },
    Ack {
        key: u8,
        offset: i64,
        t: u8,
    },
    Take(u8),
    Commit,
    /// Answer the n-th batch sent and unanswered with the code.
    Answer(usize, i16),
    Txn,
    Forget(u8),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => Just(Action::Poll),
        3 => (0..2u8, 0..20i64, 1..6i64, 2..5i64)
            .prop_map(|(key, first, len, hole)| Action::Deliver { key, first, len, hole }),
        8 => (0..2u8, 0..26i64, 0..6u8).prop_map(|(key, offset, t)| Action::Ack { key, offset, t }),
        2 => (0..2u8).prop_map(Action::Take),
        1 => Just(Action::Commit),
        3 => (0..4usize, prop_oneof![4 => Just(0i16), 1 => Just(121i16)])
            .prop_map(|(i, c)| Action::Answer(i, c)),
        2 => Just(Action::Txn),
        1 => (0..2u8).prop_map(Action::Forget),
    ]
}

fn ack_type(t: u8) -> AcknowledgeType {
    match t {
        0 => AcknowledgeType::Gap,
        1 => AcknowledgeType::Accept,
        2 => AcknowledgeType::Release,
        3 => AcknowledgeType::Reject,
        _ => AcknowledgeType::Renew,
    }
}

/// The model's view of one offset of one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum M {
    Waiting { renewed: bool },
    Pending(AcknowledgeType),
    Sent(AcknowledgeType),
}

struct Run {
    a: Acknowledgements<u8>,
    mode: AcknowledgementMode,
    model: BTreeMap<(u8, i64), M>,
    /// Per (key, offset): the delivery it is in (bumped on every delivery).
    delivery: BTreeMap<(u8, i64), u32>,
    /// (key, offset, delivery) acknowledged by the consumer or a transaction, final types.
    acked: BTreeSet<(u8, i64, u32)>,
    sent: Vec<(u8, Vec<AckBatch>)>,
}

impl Run {
    fn check_batches(&mut self, key: u8, batches: &[AckBatch]) {
        let mut prev = None;
        for b in batches {
            assert!(b.first_offset <= b.last_offset, "{b:?}");
            let n = (b.last_offset - b.first_offset + 1) as usize;
            assert!(b.types.len() == 1 || b.types.len() == n, "{b:?}");
            assert!(
                prev.is_none_or(|p| p < b.first_offset),
                "unsorted {batches:?}"
            );
            prev = Some(b.last_offset);
            for o in b.offsets() {
                let t = b.type_of(o);
                assert_eq!(
                    self.model.get(&(key, o)),
                    Some(&M::Pending(t)),
                    "batch {b:?} offset {o}"
                );
                if t != AcknowledgeType::Renew {
                    let d = self.delivery[&(key, o)];
                    assert!(self.acked.insert((key, o, d)), "{o} acknowledged twice");
                }
                self.model.insert((key, o), M::Sent(t));
            }
        }
    }

    fn pending_in_model(&self, key: Option<u8>) -> usize {
        self.model
            .iter()
            .filter(|((k, _), m)| key.is_none_or(|x| x == *k) && matches!(m, M::Pending(_)))
            .count()
    }

    fn step(&mut self, action: &Action) {
        match action {
            Action::Poll => {
                let blocked = self.mode == AcknowledgementMode::Explicit
                    && self
                        .model
                        .values()
                        .any(|m| *m == M::Waiting { renewed: false });
                let r = self.a.begin_poll();
                assert_eq!(r.is_err(), blocked, "{r:?}");
                if r.is_ok() && self.mode == AcknowledgementMode::Implicit {
                    for m in self.model.values_mut() {
                        if matches!(m, M::Waiting { .. }) {
                            *m = M::Pending(AcknowledgeType::Accept);
                        }
                    }
                }
            }
            Action::Deliver {
                key,
                first,
                len,
                hole,
            } => {
                let last = first + len - 1;
                // The broker never hands out an offset whose acknowledgement is in flight.
                if (*first..=last).any(|o| matches!(self.model.get(&(*key, o)), Some(M::Sent(_)))) {
                    return;
                }
                let present: Vec<i64> = (*first..=last).filter(|o| o % hole != 0).collect();
                self.a
                    .deliver(
                        key,
                        &[Acquired {
                            first_offset: *first,
                            last_offset: last,
                            delivery_count: 1,
                        }],
                        &present,
                    )
                    .unwrap();
                for o in *first..=last {
                    let m = if present.contains(&o) {
                        M::Waiting { renewed: false }
                    } else {
                        M::Pending(AcknowledgeType::Gap)
                    };
                    self.model.insert((*key, o), m);
                    *self.delivery.entry((*key, o)).or_default() += 1;
                }
            }
            Action::Ack { key, offset, t } => {
                let t = ack_type(*t);
                let waiting = matches!(self.model.get(&(*key, *offset)), Some(M::Waiting { .. }));
                let allowed = self.mode == AcknowledgementMode::Explicit
                    && t != AcknowledgeType::Gap
                    && waiting;
                let before = (self.a.waiting(), self.a.pending());
                let r = self.a.acknowledge(key, *offset, t);
                assert_eq!(r.is_ok(), allowed, "{r:?}");
                if r.is_ok() {
                    self.model.insert((*key, *offset), M::Pending(t));
                } else {
                    assert_eq!(before, (self.a.waiting(), self.a.pending()));
                }
            }
            Action::Take(key) => {
                let expected = self.pending_in_model(Some(*key));
                let batches = self.a.take(key);
                let got: usize = batches.iter().map(|b| b.offsets().count()).sum();
                assert_eq!(got, expected, "took what was pending");
                self.check_batches(*key, &batches);
                if !batches.is_empty() {
                    self.sent.push((*key, batches));
                }
            }
            Action::Commit => {
                if self.mode == AcknowledgementMode::Implicit {
                    for m in self.model.values_mut() {
                        if matches!(m, M::Waiting { .. }) {
                            *m = M::Pending(AcknowledgeType::Accept);
                        }
                    }
                }
                let expected = self.pending_in_model(None);
                let all = self.a.commit();
                let mut got = 0;
                for (key, batches) in all {
                    got += batches.iter().map(|b| b.offsets().count()).sum::<usize>();
                    self.check_batches(key, &batches);
                    self.sent.push((key, batches));
                }
                assert_eq!(got, expected);
            }
            Action::Answer(i, code) => {
                if self.sent.is_empty() {
                    return;
                }
                let (key, batches) = self.sent.remove(i % self.sent.len());
                self.a.on_sent(&key, &batches, *code);
                for b in &batches {
                    for o in b.offsets() {
                        if self.model.get(&(key, o)) != Some(&M::Sent(b.type_of(o))) {
                            continue;
                        }
                        if b.type_of(o) == AcknowledgeType::Renew && *code == 0 {
                            self.model.insert((key, o), M::Waiting { renewed: true });
                        } else {
                            self.model.remove(&(key, o));
                        }
                    }
                }
            }
            Action::Txn => {
                let blocked = self
                    .model
                    .values()
                    .any(|m| matches!(m, M::Pending(t) if !t.transactional()));
                let allowed = self.mode == AcknowledgementMode::Explicit && !blocked;
                let before = self.pending_in_model(None);
                let r = self.a.for_transaction();
                assert_eq!(r.is_ok(), allowed, "{r:?}");
                match r {
                    Err(_) => assert_eq!(self.a.pending(), before),
                    Ok(drained) => {
                        for (key, batches) in drained {
                            for b in &batches {
                                for o in b.offsets() {
                                    let t = b.type_of(o);
                                    assert!(t.transactional());
                                    assert_eq!(self.model.remove(&(key, o)), Some(M::Pending(t)));
                                    let d = self.delivery[&(key, o)];
                                    assert!(self.acked.insert((key, o, d)), "{o} twice");
                                }
                            }
                        }
                    }
                }
            }
            Action::Forget(key) => {
                self.a.forget(key);
                self.model.retain(|(k, _), _| k != key);
                self.sent.retain(|(k, _)| k != key);
            }
        }
        assert_eq!(
            self.a.pending(),
            self.pending_in_model(None),
            "pending after {action:?}"
        );
        assert_eq!(
            self.a.waiting(),
            self.model
                .values()
                .filter(|m| matches!(m, M::Waiting { .. }))
                .count(),
            "waiting after {action:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn acknowledgements_are_sent_once_and_never_both_ways(
        explicit in any::<bool>(),
        actions in prop::collection::vec(action(), 1..120),
    ) {
        let mode = if explicit { AcknowledgementMode::Explicit } else { AcknowledgementMode::Implicit };
        let mut run = Run {
            a: Acknowledgements::new(mode),
            mode,
            model: BTreeMap::new(),
            delivery: BTreeMap::new(),
            acked: BTreeSet::new(),
            sent: Vec::new(),
        };
        for a in &actions {
            run.step(a);
        }
        // Close: every waiting record accepted (implicit) or released (explicit), every
        // pending acknowledgement taken.
        let t = if explicit { AcknowledgeType::Release } else { AcknowledgeType::Accept };
        for m in run.model.values_mut() {
            if matches!(m, M::Waiting { .. }) {
                *m = M::Pending(t);
            }
        }
        let closed = run.a.close();
        for (key, batches) in closed {
            run.check_batches(key, &batches);
        }
        prop_assert_eq!(run.a.waiting() + run.a.pending(), 0);
    }
}
