//! Answers that must match Kafka's exactly (see tests/interop/test_parity.py for the same
//! checks against Kafka itself): KIP-467 record errors, offsets of unknown topics.

mod common;

use bytes::Bytes;
use common::TestBroker;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeGroupsRequest, FetchRequest, GroupId, ListOffsetsRequest,
    OffsetCommitRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::Encodable;
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::ErrorCode;
use shoal_storage::{encode_batch, BatchOptions};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn batch(records: &[shoal_storage::batch::KeyValue<'_>], timestamp_ms: i64) -> Vec<u8> {
    encode_batch(
        records,
        BatchOptions {
            timestamp_ms,
            ..BatchOptions::default()
        },
    )
}

async fn create(conn: &mut shoal_client::Connection, topic: &str, configs: &[(&str, &str)]) {
    let response = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(1)
                .with_replication_factor(-1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )]),
        )
        .await
        .unwrap();
    assert_eq!(response.topics[0].error_code, 0);
}

async fn produce(
    conn: &mut shoal_client::Connection,
    topic: &str,
    records: Vec<u8>,
) -> PartitionProduceResponse {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(records)))])]);
    let mut response = conn.request(9, &request).await.unwrap();
    response.responses.remove(0).partition_responses.remove(0)
}

fn indexes(p: &PartitionProduceResponse) -> Vec<i32> {
    p.record_errors.iter().map(|e| e.batch_index).collect()
}

#[tokio::test]
async fn refused_records_are_named_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let now = common::now_ms();

    create(&mut conn, "compacted", &[("cleanup.policy", "compact")]).await;
    let keyless = batch(
        &[(Some(b"a"), Some(b"1")), (None, Some(b"2")), (None, None)],
        now,
    );
    let p = produce(&mut conn, "compacted", keyless).await;
    assert_eq!(ErrorCode(p.error_code), ErrorCode::INVALID_RECORD);
    assert_eq!(indexes(&p), vec![1, 2]);
    assert_eq!(p.base_offset, -1);
    let p = produce(&mut conn, "compacted", batch(&[(Some(b"a"), None)], now)).await;
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 0),
        "nothing was appended before"
    );

    create(
        &mut conn,
        "windowed",
        &[("message.timestamp.before.max.ms", "60000")],
    )
    .await;
    let stale = batch(&[(Some(b"a"), None)], now - 3_600_000);
    let p = produce(&mut conn, "windowed", stale).await;
    assert_eq!(ErrorCode(p.error_code), ErrorCode::INVALID_TIMESTAMP);
    assert_eq!(indexes(&p), vec![0]);
    let future = batch(&[(Some(b"a"), None)], now + 2 * 3_600_000);
    let p = produce(&mut conn, "windowed", future).await;
    assert_eq!(ErrorCode(p.error_code), ErrorCode::INVALID_TIMESTAMP);

    let mut two = batch(&[(Some(b"a"), None)], now);
    two.extend(batch(&[(Some(b"b"), None)], now));
    let p = produce(&mut conn, "windowed", two).await;
    assert_eq!(ErrorCode(p.error_code), ErrorCode::INVALID_RECORD);
    assert!(p.record_errors.is_empty());
    let p = produce(&mut conn, "windowed", batch(&[(Some(b"a"), None)], now)).await;
    assert_eq!((p.error_code, p.base_offset), (0, 0));
    broker.stop().await;
}

#[tokio::test]
async fn offset_commit_refuses_unknown_topics_and_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create(&mut conn, "known", &[]).await;
    let partitions = |indexes: &[i32]| {
        indexes
            .iter()
            .map(|&i| {
                OffsetCommitRequestPartition::default()
                    .with_partition_index(i)
                    .with_committed_offset(5)
            })
            .collect::<Vec<_>>()
    };
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name("missing"))
                .with_partitions(partitions(&[0])),
            OffsetCommitRequestTopic::default()
                .with_name(name("known"))
                .with_partitions(partitions(&[7, 0])),
        ]);
    let response = conn.request(8, &request).await.unwrap();
    let codes: Vec<(String, i32, i16)> = response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    let unknown = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code();
    assert_eq!(
        codes,
        vec![
            ("missing".to_string(), 0, unknown),
            ("known".to_string(), 7, unknown),
            ("known".to_string(), 0, 0),
        ]
    );
    broker.stop().await;
}

#[tokio::test]
async fn list_offsets_special_timestamps_need_their_version() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create(&mut conn, "t", &[]).await;
    let now = common::now_ms();
    produce(&mut conn, "t", batch(&[(Some(b"k"), None)], now)).await;
    let unsupported = ErrorCode::UNSUPPORTED_VERSION.code();
    for (version, timestamp, code) in [
        (6, -3, unsupported),
        (7, -3, 0),
        (7, -4, unsupported),
        (8, -4, 0),
        (8, -5, unsupported),
        (9, -5, 0),
        (10, -6, unsupported),
        (10, -7, unsupported),
        (10, -2, 0),
        (2, -2, 0), // found offset, no LeaderEpoch field before v4
    ] {
        let request = ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
        let r = conn.request(version, &request).await.unwrap();
        assert_eq!(
            r.topics[0].partitions[0].error_code, code,
            "v{version} timestamp {timestamp}"
        );
    }
    broker.stop().await;
}

#[tokio::test]
async fn describe_unknown_group_errs_from_v6_only() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_static_str("nobody"))]);
    for (version, code) in [(5, 0), (6, ErrorCode::GROUP_ID_NOT_FOUND.code())] {
        let r = conn.request(version, &request).await.unwrap();
        assert_eq!(r.groups[0].error_code, code, "v{version}");
        assert_eq!(r.groups[0].group_state.as_str(), "Dead");
    }
    broker.stop().await;
}

#[tokio::test]
async fn out_of_range_fetch_carries_no_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create(&mut conn, "t", &[]).await;
    let now = common::now_ms();
    produce(&mut conn, "t", batch(&[(Some(b"k"), None)], now)).await;
    for offset in [99, -5] {
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("t"))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]);
        let r = conn.request(12, &request).await.unwrap();
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, ErrorCode::OFFSET_OUT_OF_RANGE.code());
        assert_eq!(
            (p.high_watermark, p.last_stable_offset, p.log_start_offset),
            (-1, -1, -1),
            "offset {offset}"
        );
    }
    broker.stop().await;
}

/// A Produce with acks=0 that fails closes the connection, as Kafka does (the producer gets
/// no answer to learn from otherwise); a successful one leaves it open.
#[tokio::test]
async fn failed_produce_with_acks_zero_closes_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create(&mut conn, "compacted", &[("cleanup.policy", "compact")]).await;
    let now = common::now_ms();
    let acks_zero = |partition: i32, records: Vec<u8>| {
        ProduceRequest::default()
            .with_acks(0)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("compacted"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(Bytes::from(records)))])])
    };
    let describe =
        DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_static_str("g"))]);
    for (partition, key, closes) in [
        (0, Some(&b"k"[..]), false),
        (0, None, true),
        (5, Some(&b"k"[..]), true),
    ] {
        let mut conn = broker.connect().await;
        let header = RequestHeader::default()
            .with_request_api_key(0)
            .with_request_api_version(9)
            .with_correlation_id(100);
        let mut frame = bytes::BytesMut::new();
        header.encode(&mut frame, 2).unwrap();
        acks_zero(partition, batch(&[(key, None)], now))
            .encode(&mut frame, 9)
            .unwrap();
        conn.send_frame(&frame).await.unwrap();
        let next = conn.request(5, &describe).await;
        assert_eq!(next.is_err(), closes, "partition {partition}, key {key:?}");
    }
    broker.stop().await;
}
