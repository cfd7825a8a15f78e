//! A cluster partition's log start (DeleteRecords, retention.ms) under a whole broker's commit
//! path (`ObjectCommits`): the owner records it in etcd before its local log moves it
//! (`shoal_cluster::retention::trim`), and a broker that takes the partition over serves the
//! same log start — ListOffsets EARLIEST, Fetch OFFSET_OUT_OF_RANGE below it — and exactly
//! the records from it. Real etcd and a real S3 server (SeaweedFS) on loopback, as
//! `tests/cluster/rig.sh install` provides them.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{member, Member};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, DeleteRecordsRequest, FetchRequest, ListOffsetsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_broker::seams::durability::{CommitError, Durability};
use shoal_client::Connection;
use shoal_cluster::commits::index;
use shoal_cluster::retention::log_start;
use shoal_cluster::rig::{create_bucket, start_etcd, start_s3, Server};
use shoal_cluster::{owners, Claim, Objects};
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{encode_batch, BatchOptions};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// One Produce v9 (acks=all) of one record `value` to `t-0` stamped `timestamp_ms`: its error
/// code.
async fn produce_at(conn: &mut Connection, value: &str, timestamp_ms: i64) -> i16 {
    let records = Bytes::from(encode_batch(
        &[(None, Some(value.as_bytes()))],
        BatchOptions {
            timestamp_ms,
            ..BatchOptions::default()
        },
    ));
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("t"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let r = conn.request(9, &request).await.unwrap();
    r.responses[0].partition_responses[0].error_code
}

async fn produce(conn: &mut Connection, value: &str) -> i16 {
    produce_at(conn, value, common::now_ms()).await
}

/// Produces `value` until it is acknowledged (the broker may not own `t-0` yet).
async fn produce_until_owned(conn: &mut Connection, value: &str, who: &str) {
    produce_until_owned_at(conn, value, common::now_ms(), who).await;
}

async fn produce_until_owned_at(conn: &mut Connection, value: &str, timestamp_ms: i64, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while produce_at(conn, value, timestamp_ms).await != 0 {
        assert!(Instant::now() < deadline, "{who} never took t-0");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// DeleteRecords of `t-0` before `offset`: (error code, low watermark).
async fn delete_records(conn: &mut Connection, offset: i64) -> (i16, i64) {
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])]);
    let r = conn.request(2, &request).await.unwrap();
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

/// ListOffsets EARLIEST of `t-0`: (error code, offset).
async fn earliest(conn: &mut Connection) -> (i16, i64) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-2)])]);
    let r = conn.request(7, &request).await.unwrap();
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// Fetch v12 of `t-0` from `offset`: (error code, log start offset, the batches' bytes).
async fn fetch(conn: &mut Connection, offset: i64) -> (i16, i64, Bytes) {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
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
    (
        p.error_code,
        p.log_start_offset,
        p.records.clone().unwrap_or_default(),
    )
}

/// Every batch of `t-0` from `offset` to the end, fetched: (base offset, bytes) of each.
async fn fetch_all(conn: &mut Connection, mut offset: i64) -> Vec<(i64, Vec<u8>)> {
    let mut batches = Vec::new();
    loop {
        let (code, _, records) = fetch(conn, offset).await;
        assert_eq!(code, 0);
        if records.is_empty() {
            return batches;
        }
        for batch in split_batches(&records) {
            let (header, range) = batch.unwrap();
            offset = header.last_offset() + 1;
            batches.push((header.base_offset(), records[range].to_vec()));
        }
    }
}

fn objects_on(s3: &Server) -> Objects {
    create_bucket(&s3.endpoint, "shoal").unwrap();
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let url = format!("s3://shoal/c?endpoint={}&region=us-east-1", s3.endpoint);
    Objects::from_url(&url).unwrap()
}

/// A dies; B takes `t-0` over (A's lease revoked, B claims it) and produces once.
async fn take_over(a: Member, b: &Member, to_b: &mut Connection) {
    a.broker.crash().await;
    b.session
        .client()
        .lease_revoke(a.session.lease())
        .await
        .unwrap();
    let Claim::Won(_) = owners::claim(&b.session, 2, "t", 0).await.unwrap() else {
        panic!("t-0 was freed with a's lease");
    };
    produce_until_owned(to_b, "b", "B").await;
}

#[tokio::test]
async fn a_new_owner_serves_the_log_start_delete_records_moved() {
    let etcd = start_etcd().unwrap();
    let s3 = start_s3().unwrap();
    let objects = objects_on(&s3);
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = member(&etcd, &objects, 1, dirs.0.path(), &[], None).await;
    let b = member(&etcd, &objects, 2, dirs.1.path(), &[], None).await;
    assert!(matches!(
        owners::claim(&a.session, 1, "t", 0).await.unwrap(),
        Claim::Won(_)
    ));
    let (mut to_a, mut to_b) = (a.broker.connect().await, b.broker.connect().await);
    common::create_topic(&mut to_a, "t", 1).await;
    common::create_topic(&mut to_b, "t", 1).await;
    // Each acknowledged produce is one commit: one index entry per offset.
    produce_until_owned(&mut to_a, "r0", "A").await;
    for i in 1..10 {
        assert_eq!(produce(&mut to_a, &format!("r{i}")).await, 0);
    }

    assert_eq!(delete_records(&mut to_a, 4).await, (0, 4));
    assert_eq!(earliest(&mut to_a).await, (0, 4));
    // Recorded where a new owner finds it, and the index trimmed below it.
    assert_eq!(log_start(&a.session, "t", 0).await.unwrap().0, 4);
    let runs = index(&a.session, "t", 0, 0).await.unwrap();
    assert_eq!(runs.first().map(|r| r.0), Some(4));
    let served = fetch_all(&mut to_a, 4).await;
    assert_eq!(served.len(), 6);
    assert_eq!(served[0].0, 4);

    take_over(a, &b, &mut to_b).await;
    assert_eq!(earliest(&mut to_b).await, (0, 4));
    let (code, _, _) = fetch(&mut to_b, 3).await;
    assert_eq!(code, ErrorCode::OFFSET_OUT_OF_RANGE.code());
    let restored = fetch_all(&mut to_b, 4).await;
    assert_eq!(restored.len(), 7, "the records from 4, and B's own");
    assert_eq!(restored[..6], served[..]);
    assert_eq!(restored[6].0, 10);
    // The new owner moves the start on from there.
    assert_eq!(delete_records(&mut to_b, -1).await, (0, 11));
    assert_eq!(log_start(&b.session, "t", 0).await.unwrap().0, 11);
    assert_eq!(earliest(&mut to_b).await, (0, 11));
    b.broker.stop().await;
}

#[tokio::test]
async fn a_new_owner_serves_the_log_start_retention_moved() {
    let etcd = start_etcd().unwrap();
    let s3 = start_s3().unwrap();
    let objects = objects_on(&s3);
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let settings = [("log.retention.check.interval.ms", "100")];
    let a = member(&etcd, &objects, 1, dirs.0.path(), &settings, None).await;
    let b = member(&etcd, &objects, 2, dirs.1.path(), &settings, None).await;
    assert!(matches!(
        owners::claim(&a.session, 1, "t", 0).await.unwrap(),
        Claim::Won(_)
    ));
    let (mut to_a, mut to_b) = (a.broker.connect().await, b.broker.connect().await);
    // One batch per segment; records older than ten minutes go.
    let configs = [
        ("internal.segment.bytes", "100"),
        ("retention.ms", "600000"),
    ];
    for conn in [&mut to_a, &mut to_b] {
        common::create_topic(conn, "t", 1).await;
        common::alter_configs(conn, common::TOPIC_RESOURCE, "t", &configs).await;
    }
    let old = common::now_ms() - 3_600_000;
    produce_until_owned_at(&mut to_a, "r0", old, "A").await;
    for i in 1..4 {
        assert_eq!(produce_at(&mut to_a, &format!("r{i}"), old).await, 0);
    }
    for i in 4..10 {
        assert_eq!(produce(&mut to_a, &format!("r{i}")).await, 0);
    }

    // A's retention moves the start past the old records, recording it first.
    let deadline = Instant::now() + Duration::from_secs(20);
    while earliest(&mut to_a).await != (0, 4) {
        assert!(Instant::now() < deadline, "A's retention never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(log_start(&a.session, "t", 0).await.unwrap().0, 4);
    let runs = index(&a.session, "t", 0, 0).await.unwrap();
    assert_eq!(runs.first().map(|r| r.0), Some(4));
    let served = fetch_all(&mut to_a, 4).await;
    assert_eq!(served.len(), 6);

    take_over(a, &b, &mut to_b).await;
    assert_eq!(earliest(&mut to_b).await, (0, 4));
    let (code, _, _) = fetch(&mut to_b, 3).await;
    assert_eq!(code, ErrorCode::OFFSET_OUT_OF_RANGE.code());
    let restored = fetch_all(&mut to_b, 4).await;
    assert_eq!(restored.len(), 7, "the records from 4, and B's own");
    assert_eq!(restored[..6], served[..]);
    b.broker.stop().await;
}

#[tokio::test]
async fn a_log_start_refused_to_a_former_owner_moves_nothing() {
    let etcd = start_etcd().unwrap();
    let s3 = start_s3().unwrap();
    let objects = objects_on(&s3);
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = member(&etcd, &objects, 1, dirs.0.path(), &[], None).await;
    let b = member(&etcd, &objects, 2, dirs.1.path(), &[], None).await;
    assert!(matches!(
        owners::claim(&a.session, 1, "t", 0).await.unwrap(),
        Claim::Won(_)
    ));
    let (mut to_a, mut to_b) = (a.broker.connect().await, b.broker.connect().await);
    common::create_topic(&mut to_a, "t", 1).await;
    common::create_topic(&mut to_b, "t", 1).await;
    produce_until_owned(&mut to_a, "r0", "A").await;
    for i in 1..6 {
        assert_eq!(produce(&mut to_a, &format!("r{i}")).await, 0);
    }
    let partition = a.broker.broker.topic("t").unwrap().partition(0).unwrap();

    // A loses t-0 (its lease revoked, B claims it) but lives on.
    b.session
        .client()
        .lease_revoke(a.session.lease())
        .await
        .unwrap();
    let Claim::Won(_) = owners::claim(&b.session, 2, "t", 0).await.unwrap() else {
        panic!("t-0 was freed with a's lease");
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.table.owner("t", 0).map(|o| o.node_id) != Some(2) {
        assert!(Instant::now() < deadline, "A never saw B own t-0");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its seam refuses the start, and neither etcd nor its log moves.
    let refused = a.commits.record_log_start(partition.clone(), 3).await;
    assert!(
        matches!(refused, Err(CommitError::Fenced { .. })),
        "{refused:?}"
    );
    let (code, _) = delete_records(&mut to_a, 3).await;
    assert_eq!(code, ErrorCode::NOT_LEADER_OR_FOLLOWER.code());
    assert_eq!(log_start(&b.session, "t", 0).await.unwrap().0, 0);
    assert_eq!(partition.lock().log_start_offset(), 0);
    a.broker.stop().await;
    b.broker.stop().await;
}
