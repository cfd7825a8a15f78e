//! Property test: random produce traffic from a few producers (in-order batches, retries of
//! recent and old batches, gaps, epoch bumps, zombies, sequence wrap-around, transactions begun
//! by transactional batches and ended by COMMIT/ABORT markers (some with the bumped epoch of
//! transaction version 2, some from zombies), plain batches during a transaction, multi-batch
//! sets) with time passing and expiry, checked decision by decision against a simple reference
//! model that keeps each producer's whole history. After every step the first unstable offset
//! must be the least first offset of the model's ongoing transactions.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const PRODUCERS: usize = 4;
const PRODUCERS_MAX: usize = 3;
const EXPIRATION_MS: i64 = 10_000;

#[derive(Clone, Debug)]
enum Kind {
    Next {
        count: i32,
    },
    Retry {
        back: usize,
    },
    Gap {
        skip: i32,
    },
    BumpEpoch {
        bad_start: bool,
    },
    Zombie,
    NearWrap,
    /// Starts (or continues) a transaction with a transactional batch.
    Transactional,
    /// A batch of the wrong kind: plain during a transaction, transactional outside one.
    WrongMode,
}

#[derive(Clone, Debug)]
enum Op {
    Send {
        producer: usize,
        kind: Kind,
    },
    /// Two batches in one set, each continuing its producer's sequence.
    Pair {
        first: usize,
        second: usize,
    },
    Plain,
    Advance {
        ms: i64,
    },
    /// A transaction marker for `producer` at its epoch + `epoch_delta` (-1: a zombie
    /// coordinator, 1: transaction version 2).
    EndTxn {
        producer: usize,
        epoch_delta: i16,
    },
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => (1..4i32).prop_map(|count| Kind::Next { count }),
        3 => (0..8usize).prop_map(|back| Kind::Retry { back }),
        1 => (1..3i32).prop_map(|skip| Kind::Gap { skip }),
        1 => any::<bool>().prop_map(|bad_start| Kind::BumpEpoch { bad_start }),
        1 => Just(Kind::Zombie),
        1 => Just(Kind::NearWrap),
        3 => Just(Kind::Transactional),
        1 => Just(Kind::WrongMode),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..PRODUCERS, kind()).prop_map(|(producer, kind)| Op::Send { producer, kind }),
        2 => (0..PRODUCERS, 0..PRODUCERS).prop_map(|(first, second)| Op::Pair { first, second }),
        1 => Just(Op::Plain),
        2 => (0..6_000i64).prop_map(|ms| Op::Advance { ms }),
        2 => (0..PRODUCERS, -1..=1i16)
            .prop_map(|(producer, epoch_delta)| Op::EndTxn { producer, epoch_delta }),
    ]
}

/// The client side: what each producer sends next.
#[derive(Clone, Debug, Default)]
struct Client {
    epoch: i16,
    next_seq: i32,
    /// Whether the client believes it is in a transaction (its next batches are transactional).
    in_txn: bool,
    sent: Vec<BatchInfo>,
}

/// Reference model: each producer's epoch and every batch appended at that epoch.
#[derive(Clone, Debug)]
struct ModelProducer {
    epoch: i16,
    /// (first seq, last seq, first offset, last offset), oldest first, unbounded.
    history: Vec<(i32, i32, i64, i64)>,
    last_ts: i64,
    /// First offset of the ongoing transaction.
    txn_first: Option<i64>,
}

#[derive(Default)]
struct Model {
    producers: BTreeMap<i64, ModelProducer>,
}

fn wrap_next(seq: i32) -> i32 {
    ((i64::from(seq) + 1) % (i64::from(i32::MAX) + 1)) as i32
}

fn wrap_add(seq: i32, n: i32) -> i32 {
    ((i64::from(seq) + i64::from(n)) % (i64::from(i32::MAX) + 1)) as i32
}

impl Model {
    /// The expected outcome as (error code or 0, duplicate's first offset).
    fn decide(&self, set: &[BatchInfo]) -> (i16, Option<i64>) {
        let mut overlay: BTreeMap<i64, (i16, i32, bool)> = BTreeMap::new();
        for b in set.iter().filter(|b| b.producer_id.0 >= 0) {
            let id = b.producer_id.0;
            if b.base_sequence < 0 {
                return (INVALID_RECORD, None);
            }
            let last = wrap_add(b.base_sequence, b.last_offset_delta);
            if let Some(p) = self.producers.get(&id) {
                let recent = &p.history[p.history.len().saturating_sub(5)..];
                if p.epoch == b.producer_epoch.0 {
                    if let Some(h) = recent
                        .iter()
                        .find(|h| h.0 == b.base_sequence && h.1 == last)
                    {
                        return (0, Some(h.2));
                    }
                }
            }
            let current = overlay.get(&id).copied().or_else(|| {
                self.producers.get(&id).map(|p| {
                    (
                        p.epoch,
                        p.history.last().map_or(-1, |h| h.1),
                        p.txn_first.is_some(),
                    )
                })
            });
            if let Some((epoch, last_seq, in_txn)) = current {
                if b.producer_epoch.0 < epoch {
                    return (INVALID_PRODUCER_EPOCH, None);
                }
                let ok = if epoch == NO_PRODUCER_EPOCH {
                    true
                } else if b.producer_epoch.0 > epoch {
                    b.base_sequence == 0
                } else {
                    // No batch yet at this epoch (a marker set it): -1 + 1 = 0, as in Kafka.
                    b.base_sequence == wrap_next(last_seq)
                };
                if !ok {
                    return (OUT_OF_ORDER_SEQUENCE_NUMBER, None);
                }
                if in_txn && !b.transactional {
                    return (INVALID_TXN_STATE, None);
                }
            }
            overlay.insert(id, (b.producer_epoch.0, last, b.transactional));
        }
        (0, None)
    }

    /// The expected outcome of a marker: an error code or 0.
    fn decide_marker(&self, id: i64, epoch: i16) -> i16 {
        match self.producers.get(&id) {
            Some(p) if epoch < p.epoch => INVALID_PRODUCER_EPOCH,
            _ => 0,
        }
    }

    fn first_unstable_offset(&self) -> Option<i64> {
        self.producers.values().filter_map(|p| p.txn_first).min()
    }

    fn append(&mut self, b: &BatchInfo, offset: i64) {
        if b.producer_id.0 < 0 {
            return;
        }
        let id = b.producer_id.0;
        if !self.producers.contains_key(&id) && self.producers.len() >= PRODUCERS_MAX {
            // The oldest without a transaction, else the oldest.
            let key = |(id, p): &(&i64, &ModelProducer)| (p.last_ts, **id);
            let oldest = *self
                .producers
                .iter()
                .filter(|(_, p)| p.txn_first.is_none())
                .min_by_key(key)
                .or_else(|| self.producers.iter().min_by_key(key))
                .unwrap()
                .0;
            self.producers.remove(&oldest);
        }
        let p = self.producers.entry(id).or_insert(ModelProducer {
            epoch: b.producer_epoch.0,
            history: Vec::new(),
            last_ts: 0,
            txn_first: None,
        });
        if p.epoch != b.producer_epoch.0 {
            p.epoch = b.producer_epoch.0;
            p.history.clear();
        }
        p.last_ts = b.max_timestamp;
        if b.control {
            p.txn_first = None;
            return;
        }
        if b.transactional && p.txn_first.is_none() {
            p.txn_first = Some(offset);
        }
        let last = wrap_add(b.base_sequence, b.last_offset_delta);
        p.history.push((
            b.base_sequence,
            last,
            offset,
            offset + i64::from(b.last_offset_delta),
        ));
    }

    fn expire(&mut self, now: i64) {
        self.producers
            .retain(|_, p| p.txn_first.is_some() || now - p.last_ts < EXPIRATION_MS);
    }
}

fn info(id: usize, epoch: i16, seq: i32, count: i32, now: i64) -> BatchInfo {
    BatchInfo {
        producer_id: ProducerId(100 + id as i64),
        producer_epoch: ProducerEpoch(epoch),
        base_sequence: seq,
        last_offset_delta: count - 1,
        max_timestamp: now,
        transactional: false,
        control: false,
    }
}

fn next_batch(client: &mut Client, id: usize, count: i32, now: i64) -> BatchInfo {
    let mut b = info(id, client.epoch, client.next_seq, count, now);
    b.transactional = client.in_txn;
    client.next_seq = wrap_add(client.next_seq, count);
    b
}

/// State agrees with the model after every step, including the LSO invariant.
fn check_state(live: &ProducerStateManager, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(live.len(), model.producers.len());
    for (id, p) in &model.producers {
        let e = live.entry(ProducerId(*id)).expect("model producer is live");
        prop_assert_eq!(e.epoch().0, p.epoch);
        prop_assert_eq!(e.last_sequence(), p.history.last().map(|h| h.1));
        prop_assert_eq!(e.current_txn_first_offset(), p.txn_first);
        prop_assert!(e.batches().len() <= BATCHES_RETAINED);
    }
    prop_assert_eq!(live.first_unstable_offset(), model.first_unstable_offset());
    prop_assert!(live.ongoing_consistent());
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut live = ProducerStateManager::new(ProducerStateConfig {
        producer_id_expiration: Duration::from_millis(EXPIRATION_MS as u64),
        producers_max: PRODUCERS_MAX,
    });
    let mut model = Model::default();
    let mut clients = vec![Client::default(); PRODUCERS];
    let mut now = 1_000_000;
    let mut end = 0i64;
    let mut log: Vec<(BatchInfo, i64)> = Vec::new();
    let mut expired_any = false;
    for op in ops {
        let saved = clients.clone();
        let set: Vec<BatchInfo> = match op {
            Op::Advance { ms } => {
                now += ms;
                let n = live.expire(now);
                model.expire(now);
                expired_any |= n > 0;
                continue;
            }
            Op::EndTxn {
                producer,
                epoch_delta,
            } => {
                let c = &mut clients[*producer];
                let epoch = c.epoch.saturating_add(*epoch_delta);
                let mut m = info(*producer, epoch, NO_SEQUENCE, 1, now);
                m.transactional = true;
                m.control = true;
                let expected = model.decide_marker(m.producer_id.0, epoch);
                match live.check_marker(m.producer_id, m.producer_epoch, 0) {
                    Ok(()) => {
                        prop_assert_eq!(expected, 0, "marker {:?} accepted", m);
                        let ongoing = live
                            .entry(m.producer_id)
                            .and_then(ProducerEntry::current_txn_first_offset);
                        let done = live.on_append(&m, end);
                        prop_assert_eq!(done.map(|t| t.first_offset), ongoing);
                        prop_assert_eq!(done.map(|t| t.last_offset), ongoing.map(|_| end));
                        model.append(&m, end);
                        log.push((m, end));
                        end += 1;
                        c.in_txn = false;
                        if epoch != c.epoch {
                            c.epoch = epoch;
                            c.next_seq = 0;
                        }
                    }
                    Err(e) => prop_assert_eq!(e.error_code(), expected),
                }
                check_state(&live, &model)?;
                continue;
            }
            Op::Plain => vec![info(0, -1, -1, 2, now)]
                .into_iter()
                .map(|mut b| {
                    b.producer_id = ProducerId(NO_PRODUCER_ID);
                    b
                })
                .collect(),
            Op::Pair { first, second } => {
                let a = next_batch(&mut clients[*first], *first, 1, now);
                let b = next_batch(&mut clients[*second], *second, 2, now);
                vec![a, b]
            }
            Op::Send { producer, kind } => {
                let id = *producer;
                let c = &mut clients[id];
                match kind {
                    Kind::Next { count } => vec![next_batch(c, id, *count, now)],
                    Kind::Retry { back } => match c.sent.len().checked_sub(1 + back) {
                        Some(i) => vec![c.sent[i]],
                        None => vec![next_batch(c, id, 1, now)],
                    },
                    Kind::Gap { skip } => {
                        c.next_seq = wrap_add(c.next_seq, *skip);
                        vec![next_batch(c, id, 1, now)]
                    }
                    Kind::BumpEpoch { bad_start } => {
                        c.epoch += 1;
                        c.next_seq = i32::from(*bad_start);
                        vec![next_batch(c, id, 1, now)]
                    }
                    Kind::Zombie => vec![info(id, c.epoch - 1, c.next_seq, 1, now)],
                    Kind::NearWrap => {
                        c.epoch += 1;
                        c.next_seq = i32::MAX - 1;
                        // A new epoch must start at 0: refused unless the producer is unknown.
                        vec![next_batch(c, id, 3, now)]
                    }
                    Kind::Transactional => {
                        c.in_txn = true;
                        vec![next_batch(c, id, 1, now)]
                    }
                    Kind::WrongMode => {
                        let mut b = next_batch(c, id, 1, now);
                        b.transactional = !b.transactional;
                        vec![b]
                    }
                }
            }
        };
        let expected = model.decide(&set);
        let got = live.check(&set);
        match (&got, expected) {
            (Ok(Decision::Append), (0, None)) => {
                for b in &set {
                    live.on_append(b, end);
                    model.append(b, end);
                    log.push((*b, end));
                    end += i64::from(b.last_offset_delta) + 1;
                    if b.producer_id.0 >= 0 {
                        let c = &mut clients[(b.producer_id.0 - 100) as usize];
                        if !c.sent.contains(b) {
                            c.sent.push(*b);
                        }
                    }
                }
            }
            (Ok(Decision::Duplicate(meta)), (0, Some(offset))) => {
                prop_assert_eq!(meta.first_offset, offset, "duplicate offset for {:?}", set);
                clients = saved;
            }
            (Err(e), (code, None)) if e.error_code() == code => {
                // The client gives up on what it just sent.
                clients = saved;
            }
            _ => prop_assert!(false, "set {:?}: got {:?}, model {:?}", set, got, expected),
        }
        check_state(&live, &model)?;
    }
    if !expired_any {
        // Without expiry, replaying the log rebuilds exactly the live state.
        let mut rebuilt = ProducerStateManager::new(*live.config());
        for (b, offset) in &log {
            rebuilt.on_append(b, *offset);
        }
        prop_assert_eq!(
            rebuilt.first_unstable_offset(),
            live.first_unstable_offset()
        );
        prop_assert_eq!(rebuilt.len(), live.len());
        for (id, e) in live.entries() {
            prop_assert_eq!(Some(e), rebuilt.entry(id));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decisions_match_the_reference_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops)?;
    }
}
