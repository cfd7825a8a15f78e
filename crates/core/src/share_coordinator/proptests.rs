//! Properties of the records (round trip, no panics on any bytes), of the combiner (against
//! a per-offset reference) and of the shard (updates and snapshots rebuild the same state,
//! replay from the encoded log equals the live state).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn batch() -> impl Strategy<Value = StateBatch> {
    (
        0..40i64,
        0..6i64,
        prop_oneof![Just(0i8), Just(2i8), Just(4i8)],
        0..4i16,
    )
        .prop_map(|(first, len, state, count)| StateBatch::new(first, first + len, state, count))
}

fn any_batch() -> impl Strategy<Value = StateBatch> + Clone {
    (any::<i64>(), any::<i64>(), any::<i8>(), any::<i16>())
        .prop_map(|(f, l, s, c)| StateBatch::new(f, l, s, c))
}

fn key() -> impl Strategy<Value = SharePartitionKey> {
    (".{0,6}", any::<[u8; 16]>(), any::<i32>())
        .prop_map(|(g, id, p)| SharePartitionKey::new(g, TopicId(id), p))
}

fn record() -> impl Strategy<Value = ShareStateRecord> {
    let batches = proptest::collection::vec(any_batch(), 0..5);
    prop_oneof![
        (key(), any::<[i32; 4]>(), any::<[i64; 3]>(), batches.clone()).prop_map(
            |(key, [se, st, le, dcc], [so, c, w], state_batches)| ShareStateRecord::Snapshot {
                key,
                value: ShareSnapshotValue {
                    snapshot_epoch: se,
                    state_epoch: st,
                    leader_epoch: le,
                    start_offset: so,
                    delivery_complete_count: dcc,
                    create_timestamp_ms: c,
                    write_timestamp_ms: w,
                    state_batches,
                },
            }
        ),
        (key(), any::<[i32; 3]>(), any::<i64>(), batches).prop_map(
            |(key, [se, le, dcc], so, state_batches)| ShareStateRecord::Update {
                key,
                value: ShareUpdateValue {
                    snapshot_epoch: se,
                    leader_epoch: le,
                    start_offset: so,
                    delivery_complete_count: dcc,
                    state_batches,
                },
            }
        ),
        key().prop_map(|key| ShareStateRecord::Tombstone { key }),
    ]
}

/// Per offset, the highest (count, state) covering it after pruning; then joined.
fn reference_combine(so_far: &[StateBatch], new: &[StateBatch], start: i64) -> Vec<StateBatch> {
    let mut best: BTreeMap<i64, (i16, i8)> = BTreeMap::new();
    for b in so_far.iter().chain(new) {
        for o in b.first_offset..=b.last_offset {
            if start != -1 && o < start {
                continue;
            }
            let p = (b.delivery_count, b.delivery_state);
            let e = best.entry(o).or_insert(p);
            *e = (*e).max(p);
        }
    }
    let mut out: Vec<StateBatch> = Vec::new();
    for (o, (count, state)) in best {
        match out.last_mut() {
            Some(p)
                if p.last_offset + 1 == o
                    && (p.delivery_count, p.delivery_state) == (count, state) =>
            {
                p.last_offset = o;
            }
            _ => out.push(StateBatch::new(o, o, state, count)),
        }
    }
    out
}

fn write_state() -> impl Strategy<Value = WriteState> {
    (
        prop_oneof![2 => Just(-1i64), 3 => 0..30i64],
        0..10i32,
        proptest::collection::vec(batch(), 0..4),
    )
        .prop_map(|(start_offset, dcc, state_batches)| WriteState {
            state_epoch: 0,
            leader_epoch: 0,
            start_offset,
            delivery_complete_count: dcc,
            state_batches,
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn records_round_trip(rec in record()) {
        let (k, v) = rec.encode().expect("encodes");
        prop_assert_eq!(ShareStateRecord::decode(&k, v.as_deref()), Ok(rec));
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        key in proptest::collection::vec(any::<u8>(), 0..40),
        value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..120)),
    ) {
        let _ = ShareStateRecord::decode(&key, value.as_deref());
    }

    #[test]
    fn decoding_mutated_records_never_panics(
        rec in record(),
        flip in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<usize>(),
    ) {
        let (mut k, v) = rec.encode().expect("encodes");
        if let Some(mut v) = v {
            let i = flip % v.len();
            v[i] = byte;
            v.truncate(cut % (v.len() + 1));
            let _ = ShareStateRecord::decode(&k, Some(&v));
        }
        let i = flip % k.len();
        k[i] = byte;
        let _ = ShareStateRecord::decode(&k, None);
    }

    #[test]
    fn combiner_keeps_the_highest_priority_per_offset(
        so_far in proptest::collection::vec(batch(), 0..6),
        new in proptest::collection::vec(batch(), 0..6),
        start in prop_oneof![Just(-1i64), 0..45i64],
    ) {
        let got = combine_state_batches(&so_far, &new, start);
        prop_assert_eq!(&got, &reference_combine(&so_far, &new, start));
        // Sorted, disjoint, fully joined, nothing below the start offset.
        for w in got.windows(2) {
            let joinable = w[0].last_offset + 1 == w[1].first_offset
                && (w[0].delivery_state, w[0].delivery_count) == (w[1].delivery_state, w[1].delivery_count);
            prop_assert!(w[0].last_offset < w[1].first_offset && !joinable);
        }
        prop_assert!(start == -1 || got.iter().all(|b| b.first_offset >= start));
        // Combining again changes nothing.
        prop_assert_eq!(combine_state_batches(&got, &[], start), got.clone());
    }

    #[test]
    fn updates_and_snapshots_rebuild_the_same_state(
        writes in proptest::collection::vec(write_state(), 0..25),
        per_snapshot in 0..5u32,
    ) {
        let k = SharePartitionKey::new("g", TopicId([1; 16]), 0);
        let mut with_updates = ShareStateStore::new(ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: per_snapshot,
            ..ShareCoordinatorConfig::default()
        }).expect("config");
        let mut snapshots_only = ShareStateStore::new(ShareCoordinatorConfig {
            snapshot_update_records_per_snapshot: 0,
            ..ShareCoordinatorConfig::default()
        }).expect("config");
        let mut log = Vec::new();
        let init = InitializeState { state_epoch: 0, start_offset: 0 };
        for (i, w) in std::iter::once(None).chain(writes.iter().map(Some)).enumerate() {
            for (n, s) in [&mut with_updates, &mut snapshots_only].into_iter().enumerate() {
                let rec = match w {
                    None => s.initialize(&k, init, 0).expect("init"),
                    Some(w) => s.write(&k, w, i as i64).expect("write"),
                };
                s.replay(&rec);
                if n == 0 {
                    log.push(rec.encode().expect("encodes"));
                }
            }
            let (a, b) = (
                with_updates.state(&k).expect("state"),
                snapshots_only.state(&k).expect("state"),
            );
            prop_assert_eq!(&a.state_batches, &b.state_batches);
            prop_assert_eq!(
                (a.start_offset, a.delivery_complete_count, a.state_epoch, a.leader_epoch),
                (b.start_offset, b.delivery_complete_count, b.state_epoch, b.leader_epoch)
            );
        }
        let mut replayed = ShareStateStore::new(with_updates.config().clone()).expect("config");
        for (key_bytes, value) in &log {
            replayed.replay(&ShareStateRecord::decode(key_bytes, value.as_deref()).expect("decodes"));
        }
        prop_assert_eq!(replayed.state(&k), with_updates.state(&k));
    }
}
