//! The batch format against itself and against bytes pinned from the encoders it replaced.

use super::*;
use proptest::prelude::*;

fn sample(n: usize) -> Vec<u8> {
    let recs: Vec<KeyValue<'_>> = (0..n)
        .map(|_| (Some(&b"k"[..]), Some(&b"value"[..])))
        .collect();
    encode_batch(
        &recs,
        BatchOptions {
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 3,
            timestamp_ms: 1000,
            ..BatchOptions::default()
        },
    )
}

fn fix_crc(b: &mut [u8]) {
    let crc = crc32c(&b[CRC_START..]);
    b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn header_accessors() {
    let b = sample(3);
    let h = BatchHeader::parse(&b).unwrap();
    assert_eq!(h.size_bytes(), b.len());
    assert_eq!(h.record_count(), 3);
    assert_eq!(h.last_offset(), 2);
    assert_eq!(h.next_offset(), 3);
    assert_eq!(h.producer_id(), 7);
    assert_eq!(h.producer_epoch(), 1);
    assert_eq!(h.base_sequence(), 3);
    assert_eq!(h.max_timestamp(), 1000);
    assert_eq!(h.compression(), Compression::None);
    assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
    assert!(!h.is_transactional() && !h.is_control() && !h.has_delete_horizon());
    assert_eq!(check_batch(&b).unwrap(), (h, &b[..]));
}

#[test]
fn control_and_transactional_bits() {
    let b = encode_batch(
        &[(Some(&[0, 0, 0, 1][..]), Some(&[0, 0, 0, 0, 0, 5][..]))],
        BatchOptions {
            transactional: true,
            control: true,
            ..BatchOptions::default()
        },
    );
    let h = BatchHeader::parse(&b).unwrap();
    assert!(h.is_transactional() && h.is_control());
}

#[test]
fn assign_offsets_keeps_crc() {
    let mut b = sample(2);
    assign_offsets(&mut b, 1234).unwrap();
    set_partition_leader_epoch(&mut b, 9).unwrap();
    let (h, _) = check_batch(&b).unwrap();
    assert_eq!(h.base_offset(), 1234);
    assert_eq!(h.partition_leader_epoch(), 9);
    let recs = decode_records(&b, 1 << 20).unwrap();
    assert_eq!(recs[1].offset, 1235);
}

#[test]
fn log_append_time_recomputes_crc() {
    let mut b = sample(2);
    set_log_append_time(&mut b, 5555).unwrap();
    let (h, _) = check_batch(&b).unwrap();
    assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
    let recs = decode_records(&b, 1 << 20).unwrap();
    assert!(recs.iter().all(|r| r.timestamp == 5555));
}

#[test]
fn bad_crc_magic_and_lengths_are_errors() {
    let mut b = sample(2);
    let last = b.len() - 1;
    b[last] ^= 0xff;
    assert!(matches!(
        check_batch(&b),
        Err(BatchError::CrcMismatch { .. })
    ));
    let mut b = sample(1);
    b[MAGIC_POS] = 1;
    assert_eq!(
        BatchHeader::parse(&b),
        Err(BatchError::UnsupportedMagic { magic: 1 })
    );
    let b = sample(2);
    assert!(matches!(
        check_batch(&b[..b.len() - 1]),
        Err(BatchError::Truncated { .. })
    ));
    let mut short = b.clone();
    short[BATCH_LENGTH_POS..BATCH_LENGTH_POS + 4].copy_from_slice(&10i32.to_be_bytes());
    assert_eq!(
        BatchHeader::parse(&short),
        Err(BatchError::InvalidBatchLength { batch_length: 10 })
    );
    let mut codec = sample(1);
    codec[ATTRIBUTES_POS + 1] |= 0x05;
    fix_crc(&mut codec);
    assert_eq!(
        BatchHeader::parse(&codec),
        Err(BatchError::UnknownCompression { codec: 5 })
    );
}

#[test]
fn split_batches_walks_a_record_set() {
    let mut set = sample(2);
    set.extend_from_slice(&sample(5));
    let items: Vec<_> = split_batches(&set).map(Result::unwrap).collect();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].0.record_count(), 5);
    assert_eq!(items[1].1.end, set.len());
    let cut = &set[..set.len() - 1];
    assert!(split_batches(cut).nth(1).unwrap().is_err());
}

#[test]
fn the_writer_keeps_headers_in_order_and_compresses_with_every_codec() {
    let headers: [(&[u8], Option<&[u8]>); 3] =
        [(b"d", Some(b"1")), (b"x", None), (b"d", Some(b"2"))];
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut w = BatchWriter::default();
        w.push(100, Some(b"k"), Some(&[7; 3000]), headers.iter().copied())
            .unwrap();
        w.push(90, None, None, std::iter::empty()).unwrap();
        let opts = BatchOptions {
            producer_id: 42,
            transactional: true,
            ..BatchOptions::default()
        };
        let b = w.finish(&opts, codec).unwrap();
        let (h, _) = check_batch(&b).unwrap();
        assert_eq!(h.compression(), codec);
        assert_eq!((h.base_timestamp(), h.max_timestamp()), (100, 100));
        assert!(h.is_transactional());
        let recs = decode_records(&b, 1 << 20).unwrap();
        assert_eq!(recs[1].timestamp, 90, "{codec:?}");
        let got: Vec<_> = recs[0]
            .headers
            .iter()
            .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
            .collect();
        let want: Vec<_> = headers
            .iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(got, want, "{codec:?}");
    }
    assert!(BatchWriter::default()
        .finish(&BatchOptions::default(), Compression::None)
        .is_err());
}

/// (size, CRC-32C of the whole batch) as storage's encoders wrote them before `shoal-codec`, for
/// the same inputs: the bytes must not change.
#[test]
fn encoded_bytes_are_those_of_the_encoders_replaced() {
    let keys: Vec<Vec<u8>> = (0..500u32)
        .map(|i| format!("key-{}", i % 50).into_bytes())
        .collect();
    let vals: Vec<Vec<u8>> = (0..500u32)
        .map(|i| {
            format!("value {i} ")
                .repeat((i % 9) as usize + 1)
                .into_bytes()
        })
        .collect();
    let recs: Vec<KeyValue<'_>> = (0..500)
        .map(|i| {
            (
                (i % 5 != 0).then(|| &keys[i][..]),
                (i % 7 != 0).then(|| &vals[i][..]),
            )
        })
        .collect();
    let options = [
        BatchOptions {
            base_offset: 100,
            producer_id: 9,
            producer_epoch: 2,
            base_sequence: 5,
            timestamp_ms: 1_700_000_000_000,
            transactional: true,
            ..BatchOptions::default()
        },
        BatchOptions {
            control: true,
            timestamp_type: TimestampType::LogAppendTime,
            partition_leader_epoch: 4,
            ..BatchOptions::default()
        },
    ];
    let encoded = [(27475, 0xe42c_cc66), (27475, 0x5e45_6aa7)];
    let rebuilt = [
        [
            (8627, 0x090b_c582),
            (1844, 0x04e7_dcf8),
            (2557, 0xb7d8_8a11),
            (2783, 0x42fa_6f16),
            (1579, 0x610f_6927),
        ],
        [
            (7792, 0xb34c_877a),
            (1844, 0xad1f_f3d3),
            (2534, 0x22dd_f9a8),
            (2783, 0x0520_f245),
            (1628, 0xa551_9b14),
        ],
    ];
    let empty = [0xb768_a06c, 0x8173_fba4];
    let pin = |b: &[u8]| (b.len(), crc32c(b));
    for (n, opts) in options.into_iter().enumerate() {
        let b = encode_batch(&recs, opts);
        assert_eq!(pin(&b), encoded[n], "encode_batch {n}");
        let all = decode_records(&b, 1 << 30).unwrap();
        let kept: Vec<_> = all.into_iter().step_by(3).collect();
        for codec in 0..5u8 {
            let mut c = b.clone();
            c[ATTRIBUTES_POS + 1] = (c[ATTRIBUTES_POS + 1] & !7) | codec;
            let h = BatchHeader::parse(&c).unwrap();
            let horizon = (codec % 2 == 0).then_some(1_800_000_000_000);
            let r = rebuild_batch(&h, &kept, horizon).unwrap();
            assert_eq!(
                pin(&r),
                rebuilt[n][usize::from(codec)],
                "rebuild {n} {codec}"
            );
            let e = empty_placeholder(&h).unwrap();
            assert_eq!(pin(&e), (61, empty[n]), "empty {n} {codec}");
        }
    }
    let marker = encode_end_txn_marker(
        7,
        3,
        EndTxnMarker {
            commit: true,
            coordinator_epoch: 11,
        },
        1234,
    );
    assert_eq!(pin(&marker), (78, 0x5971_4678));
}

type Rec = (Option<Vec<u8>>, Option<Vec<u8>>);

proptest! {
    #[test]
    fn encode_decode_round_trip(
        recs in proptest::collection::vec(
            (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
             proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200))),
            1..20),
        base in 0i64..1_000_000,
        ts in 0i64..2_000_000_000_000,
        pid in -1i64..1000,
        txn: bool,
    ) {
        let recs: Vec<Rec> = recs;
        let refs: Vec<KeyValue<'_>> =
            recs.iter().map(|(k, v)| (k.as_deref(), v.as_deref())).collect();
        let b = encode_batch(&refs, BatchOptions {
            base_offset: base, timestamp_ms: ts, producer_id: pid, transactional: txn,
            ..BatchOptions::default()
        });
        let (h, _) = check_batch(&b).unwrap();
        prop_assert_eq!(h.record_count() as usize, recs.len());
        prop_assert_eq!(h.is_transactional(), txn);
        let out = decode_records(&b, 1 << 20).unwrap();
        prop_assert_eq!(out.len(), recs.len());
        for (i, (r, (k, v))) in out.iter().zip(&recs).enumerate() {
            prop_assert_eq!(r.offset, base + i as i64);
            prop_assert_eq!(r.timestamp, ts);
            prop_assert_eq!(r.key.as_deref(), k.as_deref());
            prop_assert_eq!(r.value.as_deref(), v.as_deref());
            prop_assert!(r.headers.is_empty());
        }
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode_records(&bytes, 1 << 16);
        let _ = split_batches(&bytes).count();
    }

    #[test]
    fn mutated_batch_never_panics(pos in 0usize..200, val: u8, n in 1usize..5) {
        let mut b = sample(n);
        let p = pos % b.len();
        b[p] = val;
        // Re-CRC so mutations reach the record walker.
        if b.len() >= BATCH_HEADER_BYTES { fix_crc(&mut b); }
        let _ = decode_records(&b, 1 << 16);
    }
}
