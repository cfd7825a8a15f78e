//! Writes small, valid seed inputs for the fuzz targets into `<dir>/<target>/` (default
//! `fuzz/seeds`). Run from the repo root:
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --features seeds --example gen_seeds -- fuzz/seeds
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::{BufMut, BytesMut};
use shoal_core::group_coordinator::{GroupMetadataValue, GroupRecord, MemberMetadataValue};
use shoal_core::share_coordinator::{
    SharePartitionKey, ShareSnapshotValue, ShareStateRecord, ShareUpdateValue, StagedTxn,
    StateBatch, TopicId, STAGED_TXN_TAG, TX_PENDING_STATE_ID,
};
use shoal_core::txn_coordinator::{
    PendingMarker, ProducerEpoch, ProducerId, TopicPartition, TransactionLogValue,
    TransactionResult, TransactionState, TransactionVersion, TxnRecord,
};
use shoal_protocol::kafka_protocol::messages::{
    produce_request::{PartitionProduceData, TopicProduceData},
    ApiKey, ApiVersionsRequest, FetchRequest, FindCoordinatorRequest, JoinGroupRequest,
    MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use shoal_protocol::kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use shoal_protocol::share::txn_share_acknowledge::{
    AcknowledgementBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgeTopic,
};
use shoal_protocol::share::TxnShareAcknowledgeRequest;
use shoal_storage::{
    decode_records, encode_batch, validate_record_set, BatchOptions, Compression, TimestampType,
    ValidationLimits,
};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn frame<T: Encodable + HeaderVersion>(
    key: impl Into<shoal_protocol::ApiKey>,
    version: i16,
    body: &T,
) -> Vec<u8> {
    let key: shoal_protocol::ApiKey = key.into();
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, T::header_version(version)).unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

/// Re-encodes the uncompressed payload of `batch` with `codec` and fixes length, attributes and
/// CRC.
fn compress(batch: &[u8], codec: Compression) -> Vec<u8> {
    const HEADER: usize = 61;
    let payload = &batch[HEADER..];
    let packed = match codec {
        Compression::None => payload.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(payload).unwrap();
            e.finish().unwrap()
        }
        Compression::Snappy => snap::raw::Encoder::new().compress_vec(payload).unwrap(),
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(payload).unwrap();
            e.finish().unwrap()
        }
        Compression::Zstd => zstd::encode_all(payload, 1).unwrap(),
    };
    let mut out = batch[..HEADER].to_vec();
    out.extend_from_slice(&packed);
    let batch_length = i32::try_from(out.len() - 12).unwrap();
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = i16::from_be_bytes([out[21], out[22]]) & !0x07 | i16::from(codec.id());
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c_of(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

fn crc32c_of(bytes: &[u8]) -> u32 {
    // Bitwise CRC-32C (Castagnoli), reflected polynomial 0x82F63B78.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

fn main() {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/seeds".into()));

    // record_batch_validate
    let dir = root.join("record_batch_validate");
    let one = encode_batch(&[(Some(b"k"), Some(b"v"))], BatchOptions::default());
    let several = encode_batch(
        &[
            (None, Some(b"value-1".as_slice())),
            (Some(b"key-2"), None),
            (Some(b"key-3"), Some(b"value-3")),
        ],
        BatchOptions {
            base_offset: 42,
            partition_leader_epoch: 3,
            producer_id: 1000,
            producer_epoch: 1,
            base_sequence: 0,
            transactional: true,
            timestamp_ms: 1_700_000_000_000,
            timestamp_type: TimestampType::LogAppendTime,
            ..BatchOptions::default()
        },
    );
    assert_eq!(compress(&one, Compression::None), one, "crc32c_of agrees with the batch code");
    write(&dir, "one_record", &one);
    write(&dir, "three_records_txn", &several);
    write(&dir, "two_batches", &[one.clone(), several.clone()].concat());
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let batch = compress(&several, codec);
        let records = decode_records(&batch, 1 << 20).expect("compressed seed decodes");
        assert_eq!(records.len(), 3);
        write(&dir, &format!("three_records_{}", codec.name()), &batch);
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        validate_record_set(&bytes, &ValidationLimits::default()).expect("seed batch is valid");
    }

    // request_decode: bare frames, plus one length-prefixed stream of two frames.
    let dir = root.join("request_decode");
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(one.clone().into()))])]);
    let frames = [
        ("api_versions_v3", frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("fuzz"))
            .with_client_software_version(StrBytes::from_static_str("1")))),
        ("metadata_v1", frame(ApiKey::Metadata, 1, &MetadataRequest::default())),
        ("metadata_v12", frame(ApiKey::Metadata, 12, &MetadataRequest::default())),
        ("produce_v3", frame(ApiKey::Produce, 3, &produce)),
        ("produce_v9", frame(ApiKey::Produce, 9, &produce)),
        ("fetch_v12", frame(ApiKey::Fetch, 12, &FetchRequest::default().with_max_wait_ms(100))),
        ("find_coordinator_v4", frame(ApiKey::FindCoordinator, 4, &FindCoordinatorRequest::default()
            .with_coordinator_keys(vec![StrBytes::from_static_str("g")]))),
        ("join_group_v5", frame(ApiKey::JoinGroup, 5, &JoinGroupRequest::default()
            .with_group_id(StrBytes::from_static_str("g").into())
            .with_protocol_type(StrBytes::from_static_str("consumer")))),
    ];
    // TxnShareAcknowledge (api key 95, KIP-1289): one partition with a uniform and a per-offset
    // batch, and the same with null ids (which the broker refuses with INVALID_REQUEST).
    let txn_ack = TxnShareAcknowledgeRequest {
        transactional_id: Some(StrBytes::from_static_str("tx").into()),
        group_id: Some(StrBytes::from_static_str("g").into()),
        producer_id: 1000.into(),
        producer_epoch: 1,
        member_id: Some(StrBytes::from_static_str("m")),
        member_epoch: 2,
        topics: vec![TxnShareAcknowledgeTopic {
            topic_id: shoal_protocol::uuid::Uuid::from_bytes([7; 16]),
            partitions: vec![TxnShareAcknowledgePartition {
                partition_index: 0,
                acknowledgement_batches: vec![
                    AcknowledgementBatch {
                        first_offset: 0,
                        last_offset: 4,
                        acknowledge_types: vec![1],
                        ..Default::default()
                    },
                    AcknowledgementBatch {
                        first_offset: 5,
                        last_offset: 7,
                        acknowledge_types: vec![1, 0, 3],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let txn_ack_null_ids = TxnShareAcknowledgeRequest {
        transactional_id: None,
        group_id: None,
        member_id: None,
        ..txn_ack.clone()
    };
    let frames = [
        frames.as_slice(),
        &[
            (
                "txn_share_acknowledge_v0",
                frame(shoal_protocol::ApiKey::TxnShareAcknowledge, 0, &txn_ack),
            ),
            (
                "txn_share_acknowledge_v0_null_ids",
                frame(shoal_protocol::ApiKey::TxnShareAcknowledge, 0, &txn_ack_null_ids),
            ),
        ],
    ]
    .concat();
    let mut stream = Vec::new();
    for (name, f) in &frames {
        shoal_protocol::decode_request(f.clone().into()).expect("seed request decodes");
        write(&dir, name, f);
    }
    for (_, f) in &frames[..2] {
        stream.put_i32(i32::try_from(f.len()).unwrap());
        stream.extend_from_slice(f);
    }
    write(&dir, "stream_two_frames", &stream);

    // metadata_record_decode: ctl byte (split << 1 | value present), key, value.
    let dir = root.join("metadata_record_decode");
    let records = [
        GroupRecord::OffsetCommit {
            group_id: "g".into(),
            topic: "t".into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 1,
        },
        GroupRecord::OffsetTombstone { group_id: "g".into(), topic: "t".into(), partition: 1 },
        GroupRecord::GroupMetadata {
            group_id: "g".into(),
            value: GroupMetadataValue {
                protocol_type: Some("consumer".into()),
                generation: 1,
                protocol_name: Some("range".into()),
                leader: Some("m".into()),
                current_state_timestamp_ms: 2,
                members: vec![MemberMetadataValue {
                    member_id: "m".into(),
                    group_instance_id: None,
                    client_id: "c".into(),
                    client_host: "h".into(),
                    rebalance_timeout_ms: 300,
                    session_timeout_ms: 100,
                    subscription: bytes::Bytes::from_static(b"s"),
                    assignment: bytes::Bytes::from_static(b"a"),
                }],
            },
        },
        GroupRecord::GroupTombstone { group_id: "g".into() },
    ];
    for (i, r) in records.iter().enumerate() {
        let (key, value) = r.encode();
        let ctl = u8::try_from(key.len() << 1).unwrap() | u8::from(value.is_some());
        let mut input = vec![ctl];
        input.extend_from_slice(&key);
        input.extend_from_slice(value.as_deref().unwrap_or(&[]));
        write(&dir, &format!("record_{i}"), &input);
    }
    // __transaction_state records in the same target (key version 0 and 1).
    let mut txn_value = TransactionLogValue {
        producer_id: ProducerId(7),
        prev_producer_id: ProducerId(-1),
        next_producer_id: ProducerId(-1),
        producer_epoch: ProducerEpoch(3),
        last_producer_epoch: ProducerEpoch(2),
        txn_timeout_ms: 60_000,
        state: TransactionState::Ongoing,
        partitions: Default::default(),
        txn_start_timestamp_ms: 1,
        txn_last_update_timestamp_ms: 2,
        client_transaction_version: TransactionVersion::Tv2,
    };
    txn_value.partitions.insert(TopicPartition::new("t", 0));
    txn_value.partitions.insert(TopicPartition::new("t", 2));
    let txn_records = [
        TxnRecord::Transaction { transactional_id: "x".into(), value: txn_value },
        TxnRecord::Tombstone { transactional_id: "x".into() },
        TxnRecord::Markers {
            transactional_id: "x".into(),
            markers: vec![PendingMarker {
                partition: TopicPartition::new("t", 2),
                offset: 41,
                producer_id: ProducerId(7),
                producer_epoch: ProducerEpoch(4),
                result: TransactionResult::Commit,
            }],
        },
    ];
    for (i, r) in txn_records.iter().enumerate() {
        let (key, value) = r.encode();
        assert_eq!(TxnRecord::decode(&key, value.as_deref()).as_ref(), Ok(r));
        let ctl = u8::try_from(key.len() << 1).unwrap() | u8::from(value.is_some());
        let mut input = vec![ctl];
        input.extend_from_slice(&key);
        input.extend_from_slice(value.as_deref().unwrap_or(&[]));
        write(&dir, &format!("txn_record_{i}"), &input);
    }
    // __share_group_state records in the same target, TX_PENDING (KIP-1289) included: a
    // state-5 batch carries its staging as tagged field STAGED_TXN_TAG of the StateBatch.
    let key = SharePartitionKey::new("g", TopicId([7; 16]), 3);
    let staged = |producer_epoch, ack_type| {
        Some(StagedTxn { producer_id: 1000, producer_epoch, ack_type })
    };
    let share_records = [
        ShareStateRecord::Snapshot {
            key: key.clone(),
            value: ShareSnapshotValue {
                snapshot_epoch: 1,
                state_epoch: 0,
                leader_epoch: 2,
                start_offset: 10,
                delivery_complete_count: 3,
                create_timestamp_ms: 1,
                write_timestamp_ms: 2,
                state_batches: vec![
                    StateBatch::new(10, 12, 0, 1),
                    StateBatch::new(13, 15, TX_PENDING_STATE_ID, 0)
                        .with_staged_txn(staged(4, 1)),
                    StateBatch::new(16, 18, 2, 1),
                    StateBatch::new(19, 19, TX_PENDING_STATE_ID, 1)
                        .with_staged_txn(staged(4, 3)),
                ],
            },
        },
        ShareStateRecord::Update {
            key: key.clone(),
            value: ShareUpdateValue {
                snapshot_epoch: 1,
                leader_epoch: 2,
                start_offset: -1,
                delivery_complete_count: -1,
                state_batches: vec![StateBatch::new(20, 24, TX_PENDING_STATE_ID, 2)
                    .with_staged_txn(staged(5, 0))],
            },
        },
        ShareStateRecord::Update {
            key: key.clone(),
            value: ShareUpdateValue {
                snapshot_epoch: 1,
                leader_epoch: 2,
                start_offset: 25,
                delivery_complete_count: 0,
                state_batches: vec![StateBatch::new(20, 24, 0, 3)],
            },
        },
        ShareStateRecord::Tombstone { key },
    ];
    let mut share_inputs = Vec::new();
    for r in &share_records {
        let (key, value) = r.encode().unwrap();
        assert_eq!(ShareStateRecord::decode(&key, value.as_deref()).as_ref(), Ok(r));
        share_inputs.push((key, value));
    }
    // The staged batch of the second record again, with an unknown tagged field after the
    // staging (Kafka's tagged-field rule: readers skip tags they do not know).
    let (key, value) = share_inputs[1].clone();
    let mut value = value.unwrap();
    // One tagged field: tag, size 11, producer id, epoch, ack type.
    let staging =
        [&[1u8, STAGED_TXN_TAG as u8, 11][..], &1000i64.to_be_bytes(), &5i16.to_be_bytes(), &[0]]
            .concat();
    let at = value.windows(staging.len()).position(|w| w == staging).expect("staging bytes");
    // Two tagged fields: the staging, then tag 1 of size 2.
    value[at] = 2;
    let end = at + staging.len();
    value.splice(end..end, [1u8, 2, 0xab, 0xcd]);
    let ShareStateRecord::Update { value: expected, .. } = &share_records[1] else {
        unreachable!()
    };
    match ShareStateRecord::decode(&key, Some(&value)) {
        Ok(ShareStateRecord::Update { value: got, .. }) => assert_eq!(&got, expected),
        other => panic!("unknown tag not skipped: {other:?}"),
    }
    share_inputs.push((key, Some(value)));
    for (i, (key, value)) in share_inputs.iter().enumerate() {
        let ctl = u8::try_from(key.len() << 1).unwrap() | u8::from(value.is_some());
        let mut input = vec![ctl];
        input.extend_from_slice(key);
        input.extend_from_slice(value.as_deref().unwrap_or(&[]));
        write(&dir, &format!("share_state_record_{i}"), &input);
    }
    eprintln!("seeds written under {}", root.display());
}
