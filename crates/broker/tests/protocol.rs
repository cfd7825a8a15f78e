//! The broker against raw protocol requests: versions, bad input, topics, produce and fetch.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::TestBroker;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, DeleteTopicsRequest, FetchRequest,
    MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use shoal_protocol::ErrorCode;
use shoal_storage::{encode_batch, BatchOptions};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn batch(values: &[&str]) -> Bytes {
    let records: Vec<shoal_storage::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    Bytes::from(encode_batch(
        &records,
        BatchOptions {
            // A current timestamp: an old one would roll the segment (segment.ms), as in Kafka.
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    ))
}

fn produce(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

fn fetch(topic: &str, partition: i32, offset: i64, wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

async fn create(conn: &mut shoal_client::Connection, topic: &str, partitions: i32) -> i16 {
    let response = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(partitions)
                .with_replication_factor(-1)]),
        )
        .await
        .unwrap();
    response.topics[0].error_code
}

#[tokio::test]
async fn api_versions_lists_what_is_served_and_falls_back_to_v0() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let response = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(response.error_code, 0);
    let produce = response.api_keys.iter().find(|k| k.api_key == 0).unwrap();
    assert_eq!((produce.min_version, produce.max_version), (0, 13));
    // v6: KIP-939's Enable2Pc / KeepPreparedTxn, served (Kafka 4.4 refuses KeepPreparedTxn).
    let init = response.api_keys.iter().find(|k| k.api_key == 22).unwrap();
    assert_eq!((init.min_version, init.max_version), (0, 6));
    let end_txn = response.api_keys.iter().find(|k| k.api_key == 26).unwrap();
    assert_eq!((end_txn.min_version, end_txn.max_version), (0, 5));
    // Share groups at the versions Kafka 4.2 clients use (share.version is 3 by default).
    let share_fetch = response.api_keys.iter().find(|k| k.api_key == 78).unwrap();
    assert_eq!((share_fetch.min_version, share_fetch.max_version), (1, 2));
    assert!(response.api_keys.iter().any(|k| k.api_key == 76));
    let describe_offsets = response.api_keys.iter().find(|k| k.api_key == 90).unwrap();
    assert_eq!(
        (describe_offsets.min_version, describe_offsets.max_version),
        (0, 1)
    );

    // An ApiVersions at a version the broker does not know is answered at v0.
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(99)
        .with_correlation_id(7);
    let mut frame = bytes::BytesMut::new();
    header.encode(&mut frame, 1).unwrap();
    conn.send_frame(&frame).await.unwrap();
    let reply = conn.read_frame().await.unwrap();
    assert_eq!(shoal_client::correlation_id(&reply), Some(7));
    assert_eq!(
        i16::from_be_bytes([reply[4], reply[5]]),
        ErrorCode::UNSUPPORTED_VERSION.code()
    );
    broker.stop().await;
}

#[tokio::test]
async fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut healthy = broker.connect().await;

    // Unknown api key.
    let mut bad = broker.connect().await;
    bad.send_frame(&[0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0, 0])
        .await
        .unwrap();
    assert!(bad.is_closed_by_peer().await);

    // Frame larger than socket.request.max.bytes.
    let mut big = broker.connect().await;
    big.send_raw(&(200 * 1024 * 1024i32).to_be_bytes())
        .await
        .unwrap();
    assert!(big.is_closed_by_peer().await);

    // Negative frame size.
    let mut negative = broker.connect().await;
    negative.send_raw(&(-3i32).to_be_bytes()).await.unwrap();
    assert!(negative.is_closed_by_peer().await);

    // A known api at an unsupported version (Produce v2).
    let mut old = broker.connect().await;
    old.send_frame(&[0, 0, 0, 2, 0, 0, 0, 1, 0, 0])
        .await
        .unwrap();
    assert!(old.is_closed_by_peer().await);

    // A body that does not decode: Metadata v12 whose topic array claims 2^31 entries.
    let mut garbage = broker.connect().await;
    let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 1, 0, 0, 0];
    frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    garbage.send_frame(&frame).await.unwrap();
    assert!(garbage.is_closed_by_peer().await);

    let response = healthy
        .request(12, &MetadataRequest::default().with_topics(None))
        .await
        .unwrap();
    assert_eq!(response.brokers.len(), 1);
    broker.stop().await;
}

#[tokio::test]
async fn topics_are_created_validated_deleted_and_recreated_with_new_ids() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(create(&mut conn, "orders", 3).await, 0);
    assert_eq!(
        create(&mut conn, "orders", 3).await,
        ErrorCode::TOPIC_ALREADY_EXISTS.code()
    );
    assert_eq!(
        create(&mut conn, "bad name", 1).await,
        ErrorCode::INVALID_TOPIC_EXCEPTION.code()
    );
    assert_eq!(
        create(&mut conn, "zero", 0).await,
        ErrorCode::INVALID_PARTITIONS.code()
    );

    let metadata = |topics: Vec<&str>| {
        MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(Some(
                topics
                    .into_iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                    .collect(),
            ))
    };
    let first = conn
        .request(12, &metadata(vec!["orders", "missing"]))
        .await
        .unwrap();
    assert_eq!(first.topics[0].partitions.len(), 3);
    let old_id = first.topics[0].topic_id;
    assert!(!old_id.is_nil());
    assert_eq!(
        first.topics[1].error_code,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
    );

    let deleted = conn
        .request(
            6,
            &DeleteTopicsRequest::default().with_topics(vec![
                kafka_protocol::messages::delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(name("orders"))),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(deleted.responses[0].error_code, 0);
    assert_eq!(create(&mut conn, "orders", 1).await, 0);
    let second = conn.request(12, &metadata(vec!["orders"])).await.unwrap();
    assert_ne!(second.topics[0].topic_id, old_id);

    // The old partitions were moved aside at once and are removed in the background.
    let leftovers = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("orders-"))
            .collect();
        names.sort();
        names
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while leftovers() != ["orders-0"] && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(leftovers(), ["orders-0"]);

    // A fetch by the old topic id is told the id is unknown.
    let mut by_old_id = fetch("", 0, 0, 0);
    by_old_id.topics[0].topic_id = old_id;
    let response = conn.request(13, &by_old_id).await.unwrap();
    assert_eq!(
        response.responses[0].partitions[0].error_code,
        ErrorCode::UNKNOWN_TOPIC_ID.code()
    );
    broker.stop().await;
}

#[tokio::test]
async fn produce_validates_batches_and_fetch_returns_them_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(create(&mut conn, "t", 1).await, 0);

    let good = batch(&["a", "b", "c"]);
    let response = conn
        .request(9, &produce("t", 0, good.clone(), -1))
        .await
        .unwrap();
    let p = &response.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0));

    let mut corrupt = good.to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let response = conn
        .request(9, &produce("t", 0, Bytes::from(corrupt), -1))
        .await
        .unwrap();
    assert_eq!(
        response.responses[0].partition_responses[0].error_code,
        ErrorCode::CORRUPT_MESSAGE.code()
    );

    let response = conn
        .request(9, &produce("t", 7, good.clone(), -1))
        .await
        .unwrap();
    assert_eq!(
        response.responses[0].partition_responses[0].error_code,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
    );
    let response = conn
        .request(9, &produce("t", 0, good.clone(), 2))
        .await
        .unwrap();
    assert_eq!(
        response.responses[0].partition_responses[0].error_code,
        ErrorCode::INVALID_REQUIRED_ACKS.code()
    );

    let second = batch(&["d"]);
    let response = conn
        .request(9, &produce("t", 0, second.clone(), 1))
        .await
        .unwrap();
    assert_eq!(response.responses[0].partition_responses[0].base_offset, 3);

    let fetched = conn.request(12, &fetch("t", 0, 0, 0)).await.unwrap();
    let data = &fetched.responses[0].partitions[0];
    assert_eq!(data.high_watermark, 4);
    let records = data.records.clone().unwrap();
    // Stored byte-exact except the base offset, which the broker assigns (bytes 0..8).
    assert_eq!(records.len(), good.len() + second.len());
    assert_eq!(&records[8..good.len()], &good[8..]);
    assert_eq!(&records[good.len() + 8..], &second[8..]);
    assert_eq!(
        i64::from_be_bytes(records[good.len()..good.len() + 8].try_into().unwrap()),
        3
    );

    let out_of_range = conn.request(12, &fetch("t", 0, 99, 0)).await.unwrap();
    assert_eq!(
        out_of_range.responses[0].partitions[0].error_code,
        ErrorCode::OFFSET_OUT_OF_RANGE.code()
    );
    broker.stop().await;
}

#[tokio::test]
async fn acks_zero_gets_no_response_and_fetch_long_polls_until_data() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(create(&mut conn, "t", 1).await, 0);

    // acks=0: no response, so the next response on the connection is the metadata one.
    let mut raw = broker.connect().await;
    let header = RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(9)
        .with_correlation_id(100);
    let mut frame = bytes::BytesMut::new();
    header.encode(&mut frame, 2).unwrap();
    produce("t", 0, batch(&["y"]), 0)
        .encode(&mut frame, 9)
        .unwrap();
    raw.send_frame(&frame).await.unwrap();
    let metadata = raw
        .request(12, &MetadataRequest::default().with_topics(None))
        .await
        .unwrap();
    assert!(!metadata.topics.is_empty());

    // A fetch at the end waits, and returns once a produce lands.
    let mut fetcher = broker.connect().await;
    let end = broker
        .broker
        .topic("t")
        .unwrap()
        .partition(0)
        .unwrap()
        .lock()
        .log_end_offset();
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let response = fetcher
            .request(12, &fetch("t", 0, end, 10_000))
            .await
            .unwrap();
        (response, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut producer = broker.connect().await;
    producer
        .request(9, &produce("t", 0, batch(&["z"]), -1))
        .await
        .unwrap();
    let (response, elapsed) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(!response.responses[0].partitions[0]
        .records
        .as_ref()
        .unwrap()
        .is_empty());
    assert!(
        elapsed < Duration::from_secs(10),
        "woken by the produce, not the timeout"
    );
    broker.stop().await;
}

#[tokio::test]
async fn data_survives_restart_and_a_second_broker_cannot_share_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(create(&mut conn, "keep", 2).await, 0);
    conn.request(9, &produce("keep", 1, batch(&["one", "two"]), -1))
        .await
        .unwrap();

    let second = shoal_broker::Broker::open(
        shoal_broker::BrokerConfig::default(),
        shoal_broker::BrokerOptions {
            data_dir: dir.path().to_path_buf(),
            advertised_host: "127.0.0.1".into(),
            advertised_port: 1,
            seams: Default::default(),
        },
    )
    .await;
    let message = second.expect_err("second broker must refuse").to_string();
    assert!(
        message.contains("in use by another Shoal broker"),
        "{message}"
    );

    drop(conn);
    broker.stop().await;
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let fetched = conn.request(12, &fetch("keep", 1, 0, 0)).await.unwrap();
    assert_eq!(fetched.responses[0].partitions[0].high_watermark, 2);
    broker.stop().await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    use kafka_protocol::protocol::HeaderVersion;
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(create(&mut conn, "p", 1).await, 0);
    // Write a slow request (a long-polling fetch) followed by quick ones, without reading.
    let mut frames = Vec::new();
    let mut add =
        |key: ApiKey, version: i16, correlation_id: i32, body: &dyn Fn(&mut bytes::BytesMut)| {
            let mut frame = bytes::BytesMut::new();
            let header = RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(version)
                .with_correlation_id(correlation_id)
                .with_client_id(Some(StrBytes::from_static_str("pipeline")));
            let header_version = match key {
                ApiKey::Fetch => FetchRequest::header_version(version),
                ApiKey::Metadata => MetadataRequest::header_version(version),
                _ => ApiVersionsRequest::header_version(version),
            };
            header.encode(&mut frame, header_version).unwrap();
            body(&mut frame);
            frames.push(frame);
        };
    add(ApiKey::Fetch, 12, 1, &|b| {
        fetch("p", 0, 0, 300).encode(b, 12).unwrap()
    });
    add(ApiKey::Metadata, 12, 2, &|b| {
        MetadataRequest::default()
            .with_topics(None)
            .encode(b, 12)
            .unwrap()
    });
    add(ApiKey::ApiVersions, 3, 3, &|b| {
        ApiVersionsRequest::default().encode(b, 3).unwrap()
    });
    for frame in &frames {
        conn.send_frame(frame).await.unwrap();
    }
    for expected in 1..=3 {
        let reply = conn.read_frame().await.unwrap();
        assert_eq!(shoal_client::correlation_id(&reply), Some(expected));
    }
    broker.stop().await;
}

/// A client may pipeline more requests than the broker keeps in flight per connection (librdkafka
/// sends every asynchronous OffsetCommit at once). Frames already read past the limit must be
/// taken once there is room again, not left in the buffer while the broker waits for more bytes.
#[tokio::test]
async fn more_pipelined_requests_than_the_in_flight_limit_are_all_answered() {
    use kafka_protocol::protocol::HeaderVersion;
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let count = 3 * shoal_broker::connection::IN_FLIGHT_REQUESTS_MAX as i32 + 1;
    // Every frame in one write, so the broker reads them all before answering any.
    let mut wire = bytes::BytesMut::new();
    for correlation_id in 1..=count {
        let mut frame = bytes::BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::ApiVersions as i16)
            .with_request_api_version(3)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("pipeline")))
            .encode(&mut frame, ApiVersionsRequest::header_version(3))
            .unwrap();
        ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("pipeline"))
            .with_client_software_version(StrBytes::from_static_str("1"))
            .encode(&mut frame, 3)
            .unwrap();
        wire.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        wire.extend_from_slice(&frame);
    }
    conn.send_raw(&wire).await.unwrap();
    for expected in 1..=count {
        let reply = tokio::time::timeout(Duration::from_secs(10), conn.read_frame())
            .await
            .unwrap_or_else(|_| panic!("no answer to request {expected} of {count}"))
            .unwrap();
        assert_eq!(shoal_client::correlation_id(&reply), Some(expected));
    }
    broker.stop().await;
}

#[tokio::test]
async fn list_offsets_and_delete_records() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, ListOffsetsRequest};
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(create(&mut conn, "l", 1).await, 0);
    let base = common::now_ms();
    for (i, ts) in [base, base + 10, base + 5].iter().enumerate() {
        let records = Bytes::from(encode_batch(
            &[(None, Some(format!("r{i}").as_bytes()))],
            BatchOptions {
                timestamp_ms: *ts,
                ..BatchOptions::default()
            },
        ));
        let response = conn
            .request(9, &produce("l", 0, records, -1))
            .await
            .unwrap();
        assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    }
    let list = |timestamp: i64| {
        ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("l"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])])
    };
    let offset = |r: &kafka_protocol::messages::ListOffsetsResponse| {
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    };
    assert_eq!(offset(&conn.request(7, &list(-2)).await.unwrap()).1, 0);
    assert_eq!(offset(&conn.request(7, &list(-1)).await.unwrap()).1, 3);
    assert_eq!(
        offset(&conn.request(7, &list(-3)).await.unwrap()),
        (0, 1, base + 10)
    );
    assert_eq!(
        offset(&conn.request(7, &list(base + 3)).await.unwrap()),
        (0, 1, base + 10)
    );
    assert_eq!(
        offset(&conn.request(7, &list(base + 11)).await.unwrap()).1,
        -1
    );

    let delete = |offset: i64| {
        DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("l"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])])
    };
    let deleted = conn.request(2, &delete(2)).await.unwrap();
    assert_eq!(deleted.topics[0].partitions[0].low_watermark, 2);
    assert_eq!(offset(&conn.request(7, &list(-2)).await.unwrap()).1, 2);
    let beyond = conn.request(2, &delete(99)).await.unwrap();
    assert_eq!(
        beyond.topics[0].partitions[0].error_code,
        ErrorCode::OFFSET_OUT_OF_RANGE.code()
    );
    let below = conn.request(12, &fetch("l", 0, 0, 0)).await.unwrap();
    assert_eq!(
        below.responses[0].partitions[0].error_code,
        ErrorCode::OFFSET_OUT_OF_RANGE.code()
    );
    broker.stop().await;
}
