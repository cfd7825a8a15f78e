//! The share-state shard: replayed state equals live state (property test over random
//! initializes, writes, stagings, markers, resets and deletes), a fenced staging leaves
//! nothing behind, markers resolve stagings, pruning offsets follow the snapshots.

use proptest::prelude::*;

use super::*;
use crate::share_coordinator::{StagedTxn, TopicId, UNINITIALIZED_START_OFFSET};

const PARTITIONS: u32 = 3;
const PENDING: i8 = crate::share_coordinator::TX_PENDING_STATE_ID;

fn shard() -> ShareStateShard {
    let config = ShareCoordinatorConfig {
        snapshot_update_records_per_snapshot: 2,
        ..ShareCoordinatorConfig::default()
    };
    ShareStateShard::new(config, PARTITIONS, DeliveryLimits::default()).unwrap()
}

fn key(n: u8) -> SharePartitionKey {
    SharePartitionKey::new("g", TopicId([n; 16]), i32::from(n % 2))
}

fn write(batches: Vec<StateBatch>) -> WriteState {
    WriteState {
        state_epoch: -1,
        leader_epoch: -1,
        start_offset: -1,
        delivery_complete_count: -1,
        state_batches: batches,
    }
}

fn staged(
    first: i64,
    last: i64,
    producer_id: i64,
    producer_epoch: i16,
    accept: bool,
) -> StateBatch {
    StateBatch::new(first, last, PENDING, 0).with_staged_txn(Some(StagedTxn {
        producer_id,
        producer_epoch,
        ack_type: if accept { 1 } else { 3 },
        dead_lettered: false,
    }))
}

/// One step of the live shard: the input, its reply, and the records it emitted.
fn step(
    s: &mut ShareStateShard,
    now: i64,
    input: ShareStateInput,
) -> (ShareStateReply, Vec<ShareShardRecord>) {
    let mut out = Emitted::default();
    s.handle(now, ReplyToken(1), input, &mut out);
    let (_, reply) = out.replies.pop().expect("every input is answered at once");
    (reply, out.records)
}

fn initialize(s: &mut ShareStateShard, k: &SharePartitionKey) -> Vec<ShareShardRecord> {
    let input = ShareStateInput::Initialize {
        key: k.clone(),
        state: InitializeState {
            state_epoch: 0,
            start_offset: 0,
        },
    };
    let (reply, records) = step(s, 1, input);
    assert_eq!(reply, ShareStateReply::Done);
    records
}

fn marker(partition: i32, producer_id: i64, producer_epoch: i16, commit: bool) -> TxnMarker {
    TxnMarker {
        partition,
        producer_id,
        producer_epoch,
        commit,
    }
}

/// The shard as the runtime rebuilds it: each record encoded and decoded (with its batch's
/// framing), each marker replayed, in log order; then the coordinator epochs of the markers
/// seeded, as the broker seeds them from the partitions' producer state (a marker read back
/// as a `TxnMarker` does not carry it).
fn replayed(log: &[ShareShardRecord]) -> ShareStateShard {
    let mut s = shard();
    let mut seeds = Vec::new();
    for (offset, r) in log.iter().enumerate() {
        let partition = r.partition(PARTITIONS) as i32;
        match r {
            ShareShardRecord::Marker {
                marker,
                coordinator_epoch,
            } => {
                s.landed(partition, offset as i64, None);
                CoordinatorShard::replay_marker(&mut s, *marker);
                seeds.push((*marker, *coordinator_epoch));
            }
            _ => {
                let (k, v) = r.encode().unwrap();
                let back = ShareShardRecord::decode(&k, v.as_deref())
                    .unwrap()
                    .with_framing(r.framing());
                assert_eq!(&back, r);
                s.landed(partition, offset as i64, Some(&back));
                CoordinatorShard::replay(&mut s, back);
            }
        }
    }
    for (m, coordinator_epoch) in seeds {
        s.seed_producer(
            m.partition,
            m.producer_id,
            m.producer_epoch,
            coordinator_epoch,
        );
    }
    s
}

/// Everything but record timestamps (a marker's resolution takes the time of its pass).
fn view(s: &ShareStateShard) -> Vec<(SharePartitionKey, i64, i32, i32, Vec<StateBatch>)> {
    s.store()
        .keys()
        .map(|k| {
            let o = s.store().state(k).unwrap();
            (
                k.clone(),
                o.start_offset,
                o.state_epoch,
                o.delivery_complete_count,
                o.state_batches.clone(),
            )
        })
        .collect()
}

#[test]
fn a_fenced_staging_leaves_nothing_behind() {
    let mut s = shard();
    let k = key(1);
    initialize(&mut s, &k);
    let p = state_partition(&k, PARTITIONS);
    // The coordinator aborted producer 7's transaction at epoch 3 (marker epoch 4) after
    // the TxnShareAcknowledge registered the partition; its staging arrives late.
    let (reply, records) = step(
        &mut s,
        2,
        ShareStateInput::WriteMarker {
            marker: marker(p, 7, 4, false),
            coordinator_epoch: 1,
        },
    );
    assert_eq!(reply, ShareStateReply::Marker(Ok(Vec::new())));
    assert_eq!(records.len(), 1);
    let before = view(&s);
    let (reply, records) = step(
        &mut s,
        3,
        ShareStateInput::Stage {
            producer_id: 7,
            producer_epoch: 3,
            writes: vec![(k.clone(), write(vec![staged(0, 4, 7, 3, true)]))],
        },
    );
    assert_eq!(
        reply,
        ShareStateReply::StageRefused(StageRefused::Fenced { state_partition: p })
    );
    assert!(records.is_empty(), "nothing to append");
    assert_eq!(view(&s), before, "nothing staged in memory");
    assert_eq!(s.store().tx_pending_count(None), 0);
    // The producer's next transaction (epoch 4) stages.
    let (reply, _) = step(
        &mut s,
        4,
        ShareStateInput::Stage {
            producer_id: 7,
            producer_epoch: 4,
            writes: vec![(k.clone(), write(vec![staged(0, 4, 7, 4, true)]))],
        },
    );
    assert_eq!(reply, ShareStateReply::Done);
    assert_eq!(s.store().tx_pending_count(None), 5);
}

#[test]
fn a_staging_refused_on_one_partition_is_staged_on_none() {
    let mut s = shard();
    // Two share partitions on different state partitions.
    let (a, b) = (1..=40u8)
        .flat_map(|i| (1..=40u8).map(move |j| (key(i), key(j))))
        .find(|(a, b)| state_partition(a, PARTITIONS) != state_partition(b, PARTITIONS))
        .unwrap();
    initialize(&mut s, &a);
    initialize(&mut s, &b);
    let pb = state_partition(&b, PARTITIONS);
    step(
        &mut s,
        2,
        ShareStateInput::WriteMarker {
            marker: marker(pb, 9, 1, false),
            coordinator_epoch: 1,
        },
    );
    let (reply, records) = step(
        &mut s,
        3,
        ShareStateInput::Stage {
            producer_id: 9,
            producer_epoch: 0,
            writes: vec![
                (a.clone(), write(vec![staged(0, 1, 9, 0, true)])),
                (b.clone(), write(vec![staged(0, 1, 9, 0, true)])),
            ],
        },
    );
    assert!(matches!(
        reply,
        ShareStateReply::StageRefused(StageRefused::Fenced { .. })
    ));
    assert!(records.is_empty());
    assert_eq!(s.store().tx_pending_count(None), 0);
}

#[test]
fn markers_resolve_stagings_and_refuse_older_epochs() {
    let mut s = shard();
    let k = key(2);
    initialize(&mut s, &k);
    let p = state_partition(&k, PARTITIONS);
    let (reply, records) = step(
        &mut s,
        2,
        ShareStateInput::Stage {
            producer_id: 5,
            producer_epoch: 0,
            writes: vec![(
                k.clone(),
                write(vec![staged(0, 2, 5, 0, true), staged(3, 3, 5, 0, false)]),
            )],
        },
    );
    assert_eq!(reply, ShareStateReply::Done);
    assert_eq!(
        records[0].framing(),
        Framing::Transactional {
            producer_id: 5,
            producer_epoch: 0
        }
    );
    assert_eq!(s.store().tx_pending_count(Some(&k)), 4);
    // A marker on another state partition resolves nothing here.
    let other = (p + 1) % PARTITIONS as i32;
    let (reply, _) = step(
        &mut s,
        3,
        ShareStateInput::WriteMarker {
            marker: marker(other, 5, 1, true),
            coordinator_epoch: 1,
        },
    );
    assert_eq!(reply, ShareStateReply::Marker(Ok(Vec::new())));
    assert_eq!(s.store().tx_pending_count(Some(&k)), 4);
    let (reply, records) = step(
        &mut s,
        4,
        ShareStateInput::WriteMarker {
            marker: marker(p, 5, 1, true),
            coordinator_epoch: 1,
        },
    );
    assert_eq!(reply, ShareStateReply::Marker(Ok(vec![k.clone()])));
    assert!(matches!(records[..], [ShareShardRecord::Marker { .. }]));
    let state = s.store().state(&k).unwrap();
    assert_eq!(
        state.start_offset, 4,
        "ACCEPT acknowledged, REJECT archived"
    );
    assert_eq!(s.store().tx_pending_count(None), 0);
    // An older epoch's marker, or an older coordinator's, is refused and writes nothing.
    let (reply, records) = step(
        &mut s,
        5,
        ShareStateInput::WriteMarker {
            marker: marker(p, 5, 0, false),
            coordinator_epoch: 1,
        },
    );
    assert_eq!(
        reply,
        ShareStateReply::Marker(Err(MarkerRefused::InvalidProducerEpoch { current: 1 }))
    );
    assert!(records.is_empty());
    let (reply, _) = step(
        &mut s,
        5,
        ShareStateInput::WriteMarker {
            marker: marker(p, 5, 1, false),
            coordinator_epoch: 0,
        },
    );
    assert_eq!(
        reply,
        ShareStateReply::Marker(Err(MarkerRefused::CoordinatorFenced { current: 1 }))
    );
}

#[test]
fn prune_offsets_follow_the_latest_snapshots() {
    let mut s = shard();
    let k = key(3);
    let p = state_partition(&k, PARTITIONS);
    let mut log = initialize(&mut s, &k);
    for i in 0..4 {
        let (_, records) = step(
            &mut s,
            2,
            ShareStateInput::Write {
                key: k.clone(),
                state: write(vec![StateBatch::new(i, i, 2, 1)]),
            },
        );
        log.extend(records);
    }
    // Offsets as one partition would give them; the third write is a snapshot (two updates
    // per snapshot).
    for (offset, r) in log.iter().enumerate() {
        s.landed(p, offset as i64, Some(r));
    }
    let snapshot_at = log
        .iter()
        .rposition(|r| {
            matches!(
                r,
                ShareShardRecord::State(ShareStateRecord::Snapshot { .. })
            )
        })
        .unwrap();
    assert!(snapshot_at > 0);
    let (reply, _) = step(&mut s, 3, ShareStateInput::PruneOffsets);
    assert_eq!(
        reply,
        ShareStateReply::PruneOffsets([(p, snapshot_at as i64)].into_iter().collect())
    );
    let (_, tomb) = step(&mut s, 4, ShareStateInput::Delete(vec![k.clone()]));
    s.landed(p, log.len() as i64, Some(&tomb[0]));
    let (reply, _) = step(&mut s, 5, ShareStateInput::PruneOffsets);
    assert_eq!(
        reply,
        ShareStateReply::PruneOffsets([(p, log.len() as i64 + 1)].into_iter().collect()),
        "with nothing stored there, everything written is superseded"
    );
}

#[derive(Clone, Debug)]
enum Op {
    Init(u8),
    Write(u8, i64, i8),
    Stage(Vec<u8>, i64, i16, i64, bool),
    Marker(u8, i64, i16, bool),
    Reset(u8, i64),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..4u8;
    prop_oneof![
        k.clone().prop_map(Op::Init),
        (
            k.clone(),
            0..20i64,
            prop_oneof![Just(0i8), Just(2i8), Just(4i8)]
        )
            .prop_map(|(k, o, st)| Op::Write(k, o, st)),
        (
            proptest::collection::vec(k.clone(), 1..3),
            1..3i64,
            0..3i16,
            0..20i64,
            any::<bool>()
        )
            .prop_map(|(ks, p, e, o, a)| Op::Stage(ks, p, e, o, a)),
        (0..PARTITIONS as u8, 1..3i64, 0..4i16, any::<bool>())
            .prop_map(|(n, p, e, c)| Op::Marker(n, p, e, c)),
        (k.clone(), 0..20i64).prop_map(|(k, o)| Op::Reset(k, o)),
        k.prop_map(Op::Delete),
    ]
}

fn input(op: &Op) -> ShareStateInput {
    match op.clone() {
        Op::Init(k) => ShareStateInput::Initialize {
            key: key(k),
            state: InitializeState {
                state_epoch: -1,
                start_offset: if k == 3 {
                    UNINITIALIZED_START_OFFSET
                } else {
                    0
                },
            },
        },
        Op::Write(k, o, st) => ShareStateInput::Write {
            key: key(k),
            state: write(vec![StateBatch::new(o, o + 1, st, 1)]),
        },
        Op::Stage(mut ks, p, e, o, accept) => {
            ks.sort_unstable();
            ks.dedup();
            ShareStateInput::Stage {
                producer_id: p,
                producer_epoch: e,
                writes: ks
                    .into_iter()
                    .map(|k| (key(k), write(vec![staged(o, o + 2, p, e, accept)])))
                    .collect(),
            }
        }
        Op::Marker(n, p, e, commit) => ShareStateInput::WriteMarker {
            marker: marker(i32::from(n), p, e, commit),
            coordinator_epoch: 0,
        },
        Op::Reset(k, o) => ShareStateInput::Reset {
            key: key(k),
            start_offset: o,
        },
        Op::Delete(k) => ShareStateInput::Delete(vec![key(k)]),
    }
}

proptest! {
    /// What the shard holds after any inputs is what replaying its records and markers from
    /// the log rebuilds, fences included: an input refused live is refused after a reload.
    #[test]
    fn replayed_state_equals_live_state(ops in proptest::collection::vec(op(), 1..60)) {
        let mut live = shard();
        let mut log = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let (_, records) = step(&mut live, i as i64, input(op));
            log.extend(records);
        }
        let mut again = replayed(&log);
        prop_assert_eq!(view(&again), view(&live));
        prop_assert_eq!(again.markers, live.markers);
        prop_assert_eq!(&again.producers, &live.producers);
        // Every later input is answered the same way by both.
        for op in &ops {
            let a = step(&mut live, 1_000, input(op));
            let b = step(&mut again, 1_000, input(op));
            prop_assert_eq!(a.0, b.0);
            prop_assert_eq!(a.1.len(), b.1.len());
        }
    }

    /// Nothing the store holds is TX_PENDING for a producer whose marker of a newer epoch is
    /// already on the share partition's state partition.
    #[test]
    fn no_staging_outlives_its_transaction(ops in proptest::collection::vec(op(), 1..60)) {
        let mut s = shard();
        let mut ended: BTreeMap<(i32, i64), i16> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            let (_, records) = step(&mut s, i as i64, input(op));
            for r in &records {
                if let ShareShardRecord::Marker { marker: m, .. } = r {
                    let e = ended.entry((m.partition, m.producer_id)).or_insert(m.producer_epoch);
                    *e = (*e).max(m.producer_epoch);
                }
            }
            for k in s.store().keys() {
                let p = state_partition(k, PARTITIONS);
                for b in &s.store().state(k).unwrap().state_batches {
                    let Some(t) = b.staged_txn.filter(|_| b.delivery_state == PENDING) else {
                        continue;
                    };
                    let over = ended.get(&(p, t.producer_id)).is_some_and(|e| *e > t.producer_epoch);
                    prop_assert!(!over, "{:?} staged by a producer whose marker is in", b);
                }
            }
        }
    }
}
