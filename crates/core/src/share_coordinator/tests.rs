//! Records against hand-built bytes, and the shard's handlers and replay.

use super::*;

fn key() -> SharePartitionKey {
    let mut id = [0u8; 16];
    id[15] = 1;
    SharePartitionKey::new("g", TopicId(id), 5)
}

fn be<const N: usize>(bytes: [u8; N]) -> Vec<u8> {
    bytes.to_vec()
}

/// Concatenates byte pieces.
fn cat(pieces: &[Vec<u8>]) -> Vec<u8> {
    pieces.concat()
}

fn key_bytes(record_type: i16) -> Vec<u8> {
    let mut id = [0u8; 16];
    id[15] = 1;
    cat(&[
        be(record_type.to_be_bytes()),
        be(1i16.to_be_bytes()),
        b"g".to_vec(),
        id.to_vec(),
        be(5i32.to_be_bytes()),
    ])
}

fn batch_bytes(first: i64, last: i64, state: i8, count: i16) -> Vec<u8> {
    cat(&[
        be(first.to_be_bytes()),
        be(last.to_be_bytes()),
        be(state.to_be_bytes()),
        be(count.to_be_bytes()),
        vec![0], // no tagged fields
    ])
}

fn snapshot_value_bytes(tags: Vec<u8>) -> Vec<u8> {
    cat(&[
        be(0i16.to_be_bytes()), // version
        be(1i32.to_be_bytes()), // snapshot epoch
        be(2i32.to_be_bytes()), // state epoch
        be(3i32.to_be_bytes()), // leader epoch
        be(10i64.to_be_bytes()),
        be(100i64.to_be_bytes()),
        be(200i64.to_be_bytes()),
        vec![2], // compact array of 1
        batch_bytes(10, 19, 4, 2),
        tags,
    ])
}

fn snapshot() -> ShareStateRecord {
    ShareStateRecord::Snapshot {
        key: key(),
        value: ShareSnapshotValue {
            snapshot_epoch: 1,
            state_epoch: 2,
            leader_epoch: 3,
            start_offset: 10,
            delivery_complete_count: 7,
            create_timestamp_ms: 100,
            write_timestamp_ms: 200,
            state_batches: vec![StateBatch::new(10, 19, 4, 2)],
        },
    }
}

#[test]
fn snapshot_encodes_as_kafka_does() {
    let (k, v) = snapshot().encode().expect("encode");
    assert_eq!(k, key_bytes(0));
    // Tagged field 0 (DeliveryCompleteCount = 7): one field, tag 0, size 4, int32.
    let tags = cat(&[vec![1, 0, 4], be(7i32.to_be_bytes())]);
    assert_eq!(v, Some(snapshot_value_bytes(tags.clone())));
    assert_eq!(ShareStateRecord::decode(&k, v.as_deref()), Ok(snapshot()));
    // The default -1 is not written.
    let mut rec = snapshot();
    if let ShareStateRecord::Snapshot { value, .. } = &mut rec {
        value.delivery_complete_count = -1;
    }
    let (_, v) = rec.encode().expect("encode");
    assert_eq!(v, Some(snapshot_value_bytes(vec![0])));
}

#[test]
fn update_encodes_as_kafka_does() {
    let rec = ShareStateRecord::Update {
        key: key(),
        value: ShareUpdateValue {
            snapshot_epoch: 1,
            leader_epoch: 3,
            start_offset: -1,
            delivery_complete_count: -1,
            state_batches: vec![],
        },
    };
    let (k, v) = rec.encode().expect("encode");
    assert_eq!(k, key_bytes(1));
    let expected = cat(&[
        be(0i16.to_be_bytes()),
        be(1i32.to_be_bytes()),
        be(3i32.to_be_bytes()),
        be((-1i64).to_be_bytes()),
        vec![1], // empty compact array
        vec![0], // no tagged fields
    ]);
    assert_eq!(v, Some(expected));
    assert_eq!(ShareStateRecord::decode(&k, v.as_deref()), Ok(rec));
}

#[test]
fn tombstones_use_the_snapshot_key() {
    let rec = ShareStateRecord::Tombstone { key: key() };
    let (k, v) = rec.encode().expect("encode");
    assert_eq!((k.clone(), v), (key_bytes(0), None));
    assert_eq!(ShareStateRecord::decode(&k, None), Ok(rec));
    assert_eq!(
        ShareStateRecord::decode(&key_bytes(1), None),
        Err(DecodeError::MissingValue { record_type: 1 })
    );
}

#[test]
fn unknown_tagged_fields_are_skipped() {
    // Tag 0 = 9 and an unknown tag 5 with 2 bytes, in any order.
    let tags = cat(&[vec![2, 5, 2, 0xab, 0xcd, 0, 4], be(9i32.to_be_bytes())]);
    let rec = ShareStateRecord::decode(&key_bytes(0), Some(&snapshot_value_bytes(tags)));
    match rec {
        Ok(ShareStateRecord::Snapshot { value, .. }) => {
            assert_eq!(value.delivery_complete_count, 9)
        }
        other => panic!("{other:?}"),
    }
    // A state batch with an unknown tagged field decodes too.
    let mut v = snapshot_value_bytes(vec![0]);
    let batch_tags_at = v.len() - 2; // the batch's tagged-field count, then the value's
    v.splice(batch_tags_at..batch_tags_at + 1, [1, 3, 1, 0xff]);
    assert!(ShareStateRecord::decode(&key_bytes(0), Some(&v)).is_ok());
}

#[test]
fn malformed_bytes_are_errors() {
    let k = key_bytes(0);
    let good = snapshot_value_bytes(vec![0]);
    let cases: Vec<(Vec<u8>, Vec<u8>, DecodeError)> = vec![
        (
            cat(&[be(2i16.to_be_bytes())]),
            good.clone(),
            DecodeError::UnknownRecordType(2),
        ),
        (
            k.clone(),
            cat(&[be(1i16.to_be_bytes()), good[2..].to_vec()]),
            DecodeError::UnsupportedVersion {
                record_type: 0,
                version: 1,
            },
        ),
        (
            k.clone(),
            cat(&[good.clone(), vec![0]]),
            DecodeError::TrailingBytes { count: 1 },
        ),
        (
            k.clone(),
            snapshot_value_bytes(cat(&[vec![1, 0, 2], vec![0, 7]])),
            DecodeError::InvalidTaggedFieldSize {
                tag: 0,
                size: 2,
                expected: 4,
            },
        ),
        (
            cat(&[be(0i16.to_be_bytes()), be((-1i16).to_be_bytes())]),
            good.clone(),
            DecodeError::UnexpectedNull { at: 2 },
        ),
        (
            cat(&[be(0i16.to_be_bytes()), be(1i16.to_be_bytes()), vec![0xff]]),
            good.clone(),
            DecodeError::InvalidUtf8 { at: 2 },
        ),
    ];
    for (k, v, err) in cases {
        assert_eq!(ShareStateRecord::decode(&k, Some(&v)), Err(err));
    }
    // Array counts: null, and more elements than bytes (refused before allocating).
    let header = &good[..good.len() - 1 - 20 - 1];
    let null_array = cat(&[header.to_vec(), vec![0], vec![0]]);
    let at = header.len();
    assert_eq!(
        ShareStateRecord::decode(&k, Some(&null_array)),
        Err(DecodeError::UnexpectedNull { at })
    );
    let huge = cat(&[header.to_vec(), vec![0xff, 0xff, 0xff, 0xff, 0x0f], vec![0]]);
    assert_eq!(
        ShareStateRecord::decode(&k, Some(&huge)),
        Err(DecodeError::InvalidLength {
            at,
            length: i64::from(u32::MAX - 1)
        })
    );
    let too_long = cat(&[header.to_vec(), vec![0xff, 0xff, 0xff, 0xff, 0x10]]);
    assert_eq!(
        ShareStateRecord::decode(&k, Some(&too_long)),
        Err(DecodeError::InvalidVarint { at })
    );
    assert!(matches!(
        ShareStateRecord::decode(&k, Some(&good[..10])),
        Err(DecodeError::Truncated { .. })
    ));
    assert!(matches!(
        ShareStateRecord::decode(&[], None),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn group_ids_too_long_for_the_key_are_refused() {
    let rec = ShareStateRecord::Tombstone {
        key: SharePartitionKey::new("x".repeat(40_000), TopicId::default(), 0),
    };
    assert_eq!(
        rec.encode(),
        Err(EncodeError::GroupIdTooLong {
            len: 40_000,
            max: 32_767
        })
    );
}

#[test]
fn partition_for_matches_kafka() {
    // abs(javaHash("group:topic:partition")) % 50, computed independently.
    assert_eq!(partition_for("g", "AAAAAAAAAAAAAAAAAAAAAA", 0, 50), 49);
    assert_eq!(partition_for("group1", "AAAAAAAAAAAAAAAAAAAAAQ", 3, 50), 23);
    assert_eq!(
        partition_for("my-share-group", "W8gW5z8pRLyuWb7QkOxWtw", 12, 50),
        6
    );
    assert_eq!(
        partition_for("g", "x", 0, 0),
        0,
        "0 partitions is treated as 1"
    );
}

fn store(per_snapshot: u32) -> ShareStateStore {
    ShareStateStore::new(ShareCoordinatorConfig {
        snapshot_update_records_per_snapshot: per_snapshot,
        ..ShareCoordinatorConfig::default()
    })
    .expect("config")
}

fn init(s: &mut ShareStateStore, state_epoch: i32, start_offset: i64) {
    let rec = s
        .initialize(
            &key(),
            InitializeState {
                state_epoch,
                start_offset,
            },
            1,
        )
        .expect("initialize");
    s.replay(&rec);
}

fn write(start_offset: i64, batches: &[(i64, i64, i8, i16)]) -> WriteState {
    WriteState {
        state_epoch: 0,
        leader_epoch: 0,
        start_offset,
        delivery_complete_count: 4,
        state_batches: batches
            .iter()
            .map(|&(f, l, s, c)| StateBatch::new(f, l, s, c))
            .collect(),
    }
}

fn apply(s: &mut ShareStateStore, w: &WriteState) -> ShareStateRecord {
    let rec = s.write(&key(), w, 50).expect("write");
    s.replay(&rec);
    rec
}

fn batches_of(s: &ShareStateStore) -> Vec<(i64, i64, i8, i16)> {
    s.state(&key())
        .expect("state")
        .state_batches
        .iter()
        .map(|b| {
            (
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count,
            )
        })
        .collect()
}

#[test]
fn initialize_writes_a_fresh_snapshot() {
    let mut s = store(500);
    assert_eq!(s.read(&key(), 0, 0), Err(ShareStateError::Uninitialized));
    assert_eq!(
        ShareStateError::Uninitialized.error_code(),
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        s.write(&key(), &write(0, &[]), 0),
        Err(ShareStateError::Uninitialized)
    );
    assert_eq!(s.read_summary(&key()), None);
    init(&mut s, 0, -1);
    let state = s.state(&key()).expect("state");
    assert_eq!(
        (
            state.snapshot_epoch,
            state.start_offset,
            state.delivery_complete_count
        ),
        (0, -1, -1)
    );
    init(&mut s, 1, 20);
    let state = s.state(&key()).expect("state");
    assert_eq!(
        (
            state.snapshot_epoch,
            state.state_epoch,
            state.start_offset,
            state.delivery_complete_count
        ),
        (1, 1, 20, 0)
    );
    assert_eq!(state.leader_epoch, INITIAL_LEADER_EPOCH);
    let (read, record) = s.read(&key(), 0, 2).expect("read");
    assert_eq!(
        (
            read.start_offset,
            read.state_epoch,
            read.state_batches.len(),
            record
        ),
        (20, 1, 0, None)
    );
}

#[test]
fn writes_are_updates_until_the_snapshot_threshold() {
    let mut s = store(2);
    init(&mut s, 0, 0);
    let kinds: Vec<i16> = (0..6)
        .map(|i| apply(&mut s, &write(-1, &[(i, i, 2, 1)])).record_type())
        .collect();
    assert_eq!(kinds, vec![1, 1, 0, 1, 1, 0]);
    assert_eq!(s.state(&key()).expect("state").snapshot_epoch, 2);
    assert_eq!(batches_of(&s), vec![(0, 5, 2, 1)]);
    // 0 means every write is a snapshot.
    let mut s = store(0);
    init(&mut s, 0, 0);
    assert_eq!(apply(&mut s, &write(-1, &[(0, 0, 2, 1)])).record_type(), 0);
    assert_eq!(apply(&mut s, &write(-1, &[(1, 1, 2, 1)])).record_type(), 0);
    assert!(ShareStateStore::new(ShareCoordinatorConfig {
        snapshot_update_records_per_snapshot: 501,
        ..ShareCoordinatorConfig::default()
    })
    .is_err());
}

#[test]
fn updates_merge_by_priority_and_prune_below_the_start_offset() {
    for per_snapshot in [0, 500] {
        let mut s = store(per_snapshot);
        init(&mut s, 0, 0);
        apply(&mut s, &write(0, &[(0, 9, 0, 1)]));
        apply(&mut s, &write(0, &[(5, 7, 2, 1)]));
        assert_eq!(
            batches_of(&s),
            vec![(0, 4, 0, 1), (5, 7, 2, 1), (8, 9, 0, 1)]
        );
        // A lower (count, state) does not override: Kafka's combiner keeps the higher one.
        apply(&mut s, &write(0, &[(5, 9, 0, 1)]));
        assert_eq!(
            batches_of(&s),
            vec![(0, 4, 0, 1), (5, 7, 2, 1), (8, 9, 0, 1)]
        );
        apply(&mut s, &write(0, &[(0, 2, 0, 2)]));
        assert_eq!(
            batches_of(&s),
            vec![(0, 2, 0, 2), (3, 4, 0, 1), (5, 7, 2, 1), (8, 9, 0, 1)]
        );
        // -1 keeps the start offset; a new one prunes.
        apply(&mut s, &write(-1, &[]));
        assert_eq!(s.state(&key()).expect("state").start_offset, 0);
        apply(&mut s, &write(6, &[]));
        assert_eq!(batches_of(&s), vec![(6, 7, 2, 1), (8, 9, 0, 1)]);
        let summary = s.read_summary(&key()).expect("summary");
        assert_eq!(
            (summary.start_offset, summary.delivery_complete_count),
            (6, 4)
        );
    }
}

#[test]
fn stale_epochs_are_fenced() {
    let mut s = store(500);
    init(&mut s, 3, 0);
    let mut w = write(0, &[]);
    w.state_epoch = 2;
    let err = s.write(&key(), &w, 0).expect_err("fenced");
    assert_eq!(
        err,
        ShareStateError::FencedStateEpoch {
            current: 3,
            requested: 2
        }
    );
    assert_eq!(err.error_code(), error_codes::FENCED_STATE_EPOCH);
    w.state_epoch = -1;
    apply(&mut s, &w);
    w.state_epoch = 4;
    apply(&mut s, &w);
    let err = s
        .initialize(
            &key(),
            InitializeState {
                state_epoch: 2,
                start_offset: 0,
            },
            0,
        )
        .expect_err("fenced");
    assert_eq!(err.error_code(), error_codes::FENCED_STATE_EPOCH);
    // Leader epochs: a read with a newer one stores it; writes never raise it.
    let (_, record) = s.read(&key(), 5, 9).expect("read");
    let record = record.expect("leader epoch record");
    assert!(
        matches!(&record, ShareStateRecord::Update { value, .. } if value.leader_epoch == 5 && value.state_batches.is_empty())
    );
    s.replay(&record);
    assert_eq!(s.read(&key(), 5, 9).expect("read").1, None);
    let err = s.read(&key(), 4, 9).expect_err("fenced");
    assert_eq!(err.error_code(), error_codes::FENCED_LEADER_EPOCH);
    let mut w = write(0, &[]);
    w.state_epoch = 3;
    w.leader_epoch = 4;
    assert_eq!(
        s.write(&key(), &w, 0),
        Err(ShareStateError::FencedLeaderEpoch {
            current: 5,
            requested: 4
        })
    );
    w.leader_epoch = 9;
    let rec = apply(&mut s, &w);
    assert!(matches!(rec, ShareStateRecord::Update { value, .. } if value.leader_epoch == 5));
    assert_eq!(s.read_summary(&key()).expect("summary").leader_epoch, 5);
}

#[test]
fn invalid_requests_and_limits() {
    let mut s = store(500);
    let negative = SharePartitionKey {
        partition: -1,
        ..key()
    };
    assert!(matches!(
        s.initialize(
            &negative,
            InitializeState {
                state_epoch: 0,
                start_offset: 0
            },
            0
        ),
        Err(ShareStateError::InvalidRequest(_))
    ));
    init(&mut s, 0, 0);
    for bad in [write(0, &[(5, 4, 0, 1)]), write(0, &[(-2, 4, 0, 1)])] {
        let err = s.write(&key(), &bad, 0).expect_err("invalid");
        assert_eq!(err.error_code(), error_codes::INVALID_REQUEST);
    }
    let mut small = ShareStateStore::new(ShareCoordinatorConfig {
        share_partitions_max: 1,
        state_batches_max: 2,
        ..ShareCoordinatorConfig::default()
    })
    .expect("config");
    init(&mut small, 0, 0);
    let other = SharePartitionKey {
        partition: 6,
        ..key()
    };
    let err = small
        .initialize(
            &other,
            InitializeState {
                state_epoch: 0,
                start_offset: 0,
            },
            0,
        )
        .expect_err("limit");
    assert_eq!(err.error_code(), error_codes::COORDINATOR_NOT_AVAILABLE);
    assert!(small
        .initialize(
            &key(),
            InitializeState {
                state_epoch: 0,
                start_offset: 0
            },
            0
        )
        .is_ok());
    let err = small
        .write(
            &key(),
            &write(0, &[(0, 0, 0, 1), (1, 1, 0, 1), (2, 2, 0, 1)]),
            0,
        )
        .expect_err("too many");
    assert_eq!(
        err,
        ShareStateError::TooManyStateBatches { count: 3, max: 2 }
    );
}

#[test]
fn deletes_write_tombstones() {
    let mut s = store(500);
    let keys = [
        key(),
        SharePartitionKey {
            partition: 6,
            ..key()
        },
        SharePartitionKey::new("h", TopicId([9; 16]), 0),
    ];
    for k in &keys {
        let rec = s
            .initialize(
                k,
                InitializeState {
                    state_epoch: 0,
                    start_offset: 0,
                },
                0,
            )
            .expect("init");
        s.replay(&rec);
    }
    assert_eq!(s.len(), 3);
    assert_eq!(s.delete_group("g").len(), 2);
    assert_eq!(
        s.delete_topics(&[TopicId([9; 16])]),
        vec![ShareStateRecord::Tombstone {
            key: keys[2].clone()
        }]
    );
    let rec = s.delete(&keys[0]).expect("tombstone");
    s.replay(&rec);
    assert_eq!(s.state(&keys[0]), None);
    assert_eq!(s.delete(&keys[0]), None, "nothing to delete");
    assert_eq!(s.keys().count(), 2);
    // A tombstone forgets the epochs too.
    let rec = s
        .initialize(
            &keys[0],
            InitializeState {
                state_epoch: 0,
                start_offset: 0,
            },
            0,
        )
        .expect("init");
    assert!(matches!(rec, ShareStateRecord::Snapshot { value, .. } if value.snapshot_epoch == 0));
}

#[test]
fn an_update_without_snapshot_replays_as_kafka_does() {
    let mut s = store(500);
    let rec = ShareStateRecord::Update {
        key: key(),
        value: ShareUpdateValue {
            snapshot_epoch: 0,
            leader_epoch: 2,
            start_offset: 4,
            delivery_complete_count: 1,
            state_batches: vec![StateBatch::new(4, 4, 2, 1)],
        },
    };
    s.replay(&rec);
    let state = s.state(&key()).expect("state");
    assert_eq!(
        (state.state_epoch, state.leader_epoch, state.start_offset),
        (0, 2, 4)
    );
    // No state epoch is known yet, so any is accepted.
    let mut w = write(-1, &[]);
    w.state_epoch = 0;
    w.leader_epoch = 2;
    assert!(s.write(&key(), &w, 0).is_ok());
}

#[test]
fn combiner_cases() {
    let b = |f, l, s, c| StateBatch::new(f, l, s, c);
    // Contiguous equal batches join; different ones stay apart.
    assert_eq!(
        combine_state_batches(&[b(0, 4, 0, 1)], &[b(5, 9, 0, 1)], -1),
        vec![b(0, 9, 0, 1)]
    );
    assert_eq!(
        combine_state_batches(&[b(0, 4, 0, 1)], &[b(5, 9, 2, 1)], -1),
        vec![b(0, 4, 0, 1), b(5, 9, 2, 1)]
    );
    // Swallowed: the higher priority splits the lower around it.
    assert_eq!(
        combine_state_batches(&[b(0, 9, 0, 1)], &[b(3, 5, 4, 1)], 0),
        vec![b(0, 2, 0, 1), b(3, 5, 4, 1), b(6, 9, 0, 1)]
    );
    // Higher count wins over higher state.
    assert_eq!(
        combine_state_batches(&[b(0, 9, 2, 1)], &[b(0, 9, 0, 2)], 0),
        vec![b(0, 9, 0, 2)]
    );
    // Pruning cuts a straddling batch; -1 prunes nothing.
    assert_eq!(
        combine_state_batches(&[b(0, 9, 0, 1)], &[], 5),
        vec![b(5, 9, 0, 1)]
    );
    assert_eq!(combine_state_batches(&[b(0, 9, 0, 1)], &[], 10), vec![]);
    // Empty ranges are ignored; extreme offsets do not overflow.
    assert_eq!(
        combine_state_batches(&[b(5, 4, 0, 1)], &[b(i64::MAX, i64::MAX, 2, 1)], -1),
        vec![b(i64::MAX, i64::MAX, 2, 1)]
    );
}

#[test]
fn combiner_keeps_tx_pending_stagings_apart_and_lets_their_resolution_win() {
    let txn = |pid| {
        Some(StagedTxn {
            producer_id: pid,
            producer_epoch: 0,
            ack_type: 1,
            dead_lettered: false,
        })
    };
    let staged =
        |f, l, c, pid| StateBatch::new(f, l, TX_PENDING_STATE_ID, c).with_staged_txn(txn(pid));
    // Two producers' stagings side by side are not joined; each keeps its staging.
    assert_eq!(
        combine_state_batches(&[staged(0, 4, 0, 7)], &[staged(5, 9, 0, 8)], -1),
        vec![staged(0, 4, 0, 7), staged(5, 9, 0, 8)]
    );
    // The same staging joins.
    assert_eq!(
        combine_state_batches(&[staged(0, 4, 0, 7)], &[staged(5, 9, 0, 7)], -1),
        vec![staged(0, 9, 0, 7)]
    );
    // A staging (count - 1, 5) wins over the AVAILABLE batch it replaces, and is split
    // around with its staging kept.
    assert_eq!(
        combine_state_batches(&[StateBatch::new(0, 9, 0, 1)], &[staged(3, 5, 1, 7)], 0),
        vec![
            StateBatch::new(0, 2, 0, 1),
            staged(3, 5, 1, 7),
            StateBatch::new(6, 9, 0, 1)
        ]
    );
    // Its resolution (the full count) wins over it: ABORT to AVAILABLE, COMMIT to ACKNOWLEDGED.
    for state in [0, 2, 4] {
        assert_eq!(
            combine_state_batches(&[staged(0, 9, 1, 7)], &[StateBatch::new(0, 9, state, 2)], 0),
            vec![StateBatch::new(0, 9, state, 2)]
        );
    }
}

#[test]
fn markers_resolve_persisted_stagings_of_their_producer_only() {
    for (commit, ack_type, limit, expected) in [
        (true, 1, 5, 2),
        (true, 3, 5, 4),
        (true, 0, 5, 4),
        (false, 1, 5, 0),
        (false, 1, 3, 4),
    ] {
        let mut s = store(500);
        init(&mut s, 0, 0);
        let staging = StagedTxn {
            producer_id: 7,
            producer_epoch: 2,
            ack_type,
            dead_lettered: false,
        };
        let mut w = write(0, &[]);
        w.state_batches = vec![
            StateBatch::new(0, 4, TX_PENDING_STATE_ID, 2).with_staged_txn(Some(staging)),
            StateBatch::new(5, 9, TX_PENDING_STATE_ID, 2).with_staged_txn(Some(StagedTxn {
                producer_id: 8,
                ..staging
            })),
        ];
        apply(&mut s, &w);
        assert_eq!(s.tx_pending_count(Some(&key())), 10);
        assert_eq!(s.tx_pending_count(None), 10);
        // Older epoch, other producer: nothing.
        assert!(s.resolve_marker(7, 1, commit, |_| limit, 60).is_empty());
        assert!(s.resolve_marker(9, 5, commit, |_| limit, 60).is_empty());
        let records = s.resolve_marker(7, 3, commit, |_| limit, 60);
        assert_eq!(records.len(), 1);
        s.replay(&records[0]);
        // Resolved with the full count (3); producer 8's staging is untouched. Terminal
        // records at the start move it past them (and leave the delivery-complete count).
        let state = s.state(&key()).expect("state").clone();
        if expected == 0 {
            assert_eq!(
                batches_of(&s),
                vec![(0, 4, expected, 3), (5, 9, TX_PENDING_STATE_ID, 2)]
            );
            assert_eq!(state.start_offset, 0);
        } else {
            assert_eq!(batches_of(&s), vec![(5, 9, TX_PENDING_STATE_ID, 2)]);
            assert_eq!(state.start_offset, 5);
        }
        assert_eq!(state.delivery_complete_count, 0);
        // Producer 8's five offsets are still pending.
        assert_eq!(s.tx_pending_count(None), 5);
        // Duplicate: nothing left to resolve.
        assert!(s.resolve_marker(7, 3, commit, |_| limit, 60).is_empty());
    }
}

#[test]
fn a_resolution_moves_the_start_offset_past_the_terminal_prefix_only() {
    let limit = 5;
    let mut s = store(500);
    init(&mut s, 0, 0);
    let staged = Some(StagedTxn {
        producer_id: 7,
        producer_epoch: 2,
        ack_type: 1,
        dead_lettered: false,
    });
    let mut w = write(0, &[]);
    w.state_batches = vec![
        StateBatch::new(0, 2, 2, 1),
        StateBatch::new(3, 5, TX_PENDING_STATE_ID, 0).with_staged_txn(staged),
        StateBatch::new(6, 6, 4, 1),
        StateBatch::new(8, 9, TX_PENDING_STATE_ID, 0).with_staged_txn(staged),
        StateBatch::new(10, 11, 2, 1),
    ];
    apply(&mut s, &w);
    for r in s.resolve_marker(7, 2, true, |_| limit, 60) {
        s.replay(&r);
    }
    let state = s.state(&key()).expect("state").clone();
    // 0–6 are terminal from the start; offset 7 was never delivered (AVAILABLE), so the
    // start stops there even though 8–11 are terminal too, and those 4 stay counted.
    assert_eq!(state.start_offset, 7);
    assert_eq!(state.delivery_complete_count, 4);
    assert_eq!(batches_of(&s), vec![(8, 11, 2, 1)]);
    assert_eq!(
        start_past_terminal(0, &[StateBatch::new(0, 3, 0, 1)]),
        0,
        "AVAILABLE stops it"
    );
    assert_eq!(start_past_terminal(-1, &[StateBatch::new(0, 3, 2, 1)]), -1);
    assert_eq!(start_past_terminal(2, &[StateBatch::new(0, 3, 2, 1)]), 4);
    assert_eq!(start_past_terminal(2, &[]), 2);
}

#[test]
fn a_stale_start_offset_written_after_a_resolution_does_not_uncover_resolved_records() {
    // The soak's duplicate: a marker resolves records at the start here (the start moves past
    // them and their batches are pruned); before the live share partition applies the marker
    // too, it writes with its old start. For every snapshot threshold (update and snapshot).
    for per_snapshot in [500, 1] {
        let mut s = store(per_snapshot);
        init(&mut s, 0, 0);
        let staged = Some(StagedTxn {
            producer_id: 7,
            producer_epoch: 2,
            ack_type: 1,
            dead_lettered: false,
        });
        let mut w = write(0, &[]);
        w.state_batches =
            vec![StateBatch::new(0, 9, TX_PENDING_STATE_ID, 0).with_staged_txn(staged)];
        apply(&mut s, &w);
        for r in s.resolve_marker(7, 3, true, |_| 5, 60) {
            s.replay(&r);
        }
        assert_eq!(s.state(&key()).expect("state").start_offset, 10);
        // The live machine, still at start 0, acquires offsets 10–11.
        apply(&mut s, &write(0, &[(10, 11, 1, 1)]));
        let state = s.state(&key()).expect("state").clone();
        assert_eq!(state.start_offset, 10, "0–9 were acknowledged");
        assert_eq!(batches_of(&s), vec![(10, 11, 1, 1)]);
        // A write that moves the start forward still does, and -1 leaves it.
        apply(&mut s, &write(12, &[]));
        apply(&mut s, &write(-1, &[]));
        assert_eq!(s.state(&key()).expect("state").start_offset, 12);
    }
}

#[test]
fn a_committed_reject_that_carried_its_dead_letter_is_archived_even_with_a_queue() {
    let staged = |dead_lettered| {
        StateBatch::new(0, 4, TX_PENDING_STATE_ID, 1).with_staged_txn(Some(StagedTxn {
            producer_id: 7,
            producer_epoch: 2,
            ack_type: 3,
            dead_lettered,
        }))
    };
    let policy = MarkerPolicy {
        delivery_count_limit: 5,
        dead_letter: true,
    };
    let state = |dead_lettered, commit| {
        resolve_staged_batches(&[staged(dead_lettered)], 7, 2, commit, policy)[0].delivery_state
    };
    assert_eq!(state(true, true), 4, "carried: ARCHIVED");
    assert_eq!(state(false, true), 3, "not carried: ARCHIVING");
    assert_eq!(state(true, false), 0, "aborted: AVAILABLE");
}
