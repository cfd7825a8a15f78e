//! The cluster's index compaction and object collection (`shoal_cluster::maintenance`) under
//! a whole broker's commit path (`ObjectCommits`): the records a broker acknowledged are the
//! ones a broker that takes its partition over restores, byte for byte, after the index was
//! compacted and the replaced objects collected. Real etcd and a real S3 server (SeaweedFS)
//! on loopback, as `tests/cluster/rig.sh install` provides them.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::member;
use common::TestBroker;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_cluster::collector::Collector;
use shoal_cluster::commits::{committed_end, index};
use shoal_cluster::compaction::Policy;
use shoal_cluster::maintenance::compact_owned;
use shoal_cluster::rig::{create_bucket, start_etcd, start_s3};
use shoal_cluster::{owners, Claim, Objects};
use shoal_storage::{encode_batch, BatchOptions};

/// One Produce v9 (acks=all) of one record `value` to `t-0`: its error code.
async fn produce(conn: &mut Connection, value: &str) -> i16 {
    let records = Bytes::from(encode_batch(
        &[(None, Some(value.as_bytes()))],
        BatchOptions {
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    ));
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let r = conn.request(9, &request).await.unwrap();
    r.responses[0].partition_responses[0].error_code
}

fn log_bytes(broker: &TestBroker, end: i64) -> Bytes {
    let partition = broker.broker.topic("t").unwrap().partition(0).unwrap();
    let log = partition.lock();
    assert_eq!(log.log_end_offset(), end);
    let slice = log.read_slice(0, usize::MAX, Some(end), false).unwrap();
    slice.region.unwrap().read().unwrap()
}

#[tokio::test]
async fn a_broker_restores_a_compacted_and_collected_partition_exactly() {
    let etcd = start_etcd().unwrap();
    let s3 = start_s3().unwrap();
    create_bucket(&s3.endpoint, "shoal").unwrap();
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let url = format!("s3://shoal/c?endpoint={}&region=us-east-1", s3.endpoint);
    let objects = Objects::from_url(&url).unwrap();
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
    // Each acknowledged produce is one commit: one object, one index entry.
    let deadline = Instant::now() + Duration::from_secs(20);
    while produce(&mut to_a, "r").await != 0 {
        assert!(Instant::now() < deadline, "A never took t-0");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 1..30 {
        assert_eq!(produce(&mut to_a, &format!("record {i}")).await, 0);
    }
    assert_eq!(index(&a.session, "t", 0, 0).await.unwrap().len(), 30);
    let acknowledged = log_bytes(&a.broker, 30);

    // A's upkeep compacts what it owns; the collector deletes the replaced objects.
    let policy = Policy {
        runs_max: 4,
        segment_bytes: 1024 * 1024,
    };
    compact_owned(&a.session, 1, &a.table, &objects, policy).await;
    assert_eq!(index(&a.session, "t", 0, 0).await.unwrap().len(), 2);
    let done = Collector::new(Duration::ZERO)
        .round(&a.session, &objects)
        .await
        .unwrap();
    assert_eq!((done.deleted, done.referenced), (29, 2), "{done:?}");
    // A commits on over the compacted index.
    assert_eq!(produce(&mut to_a, "after").await, 0);
    let acknowledged_all = log_bytes(&a.broker, 31);
    assert_eq!(acknowledged_all.slice(..acknowledged.len()), acknowledged);

    // A dies; B takes t-0 over and restores exactly what A acknowledged.
    a.broker.crash().await;
    b.session
        .client()
        .lease_revoke(a.session.lease())
        .await
        .unwrap();
    let Claim::Won(_) = owners::claim(&b.session, 2, "t", 0).await.unwrap() else {
        panic!("t-0 was freed with a's lease");
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while produce(&mut to_b, "b").await != 0 {
        assert!(Instant::now() < deadline, "B never took t-0 over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restored = log_bytes(&b.broker, 32);
    assert_eq!(restored.slice(..acknowledged_all.len()), acknowledged_all);
    assert_eq!(committed_end(&b.session, "t", 0).await.unwrap(), 32);
    b.broker.stop().await;
}
