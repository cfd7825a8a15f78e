//! Fetch answers whose records travel from the segment files to the socket (`sendfile`): many
//! partitions in one response, segments rolled under the reader, response and partition byte
//! limits, pipelined with other requests. Every record must arrive once, in order, byte-exact.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::{create_topic, produce_partitions, TestBroker};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use shoal_storage::batch::split_batches;
use shoal_storage::{decode_records, encode_batch, BatchOptions};

const PARTITIONS: i32 = 5;

fn value(partition: i32, n: usize) -> Vec<u8> {
    // Sizes vary so batch boundaries fall anywhere against the byte limits.
    let pad = "v".repeat((n * 131 + partition as usize * 17) % 9000);
    format!("p{partition}:{n}:{pad}").into_bytes()
}

fn batch(partition: i32, from: usize, count: usize) -> Bytes {
    let values: Vec<Vec<u8>> = (from..from + count).map(|n| value(partition, n)).collect();
    let records: Vec<shoal_storage::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    Bytes::from(encode_batch(
        &records,
        BatchOptions {
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    ))
}

fn fetch(
    topic_id: uuid::Uuid,
    offsets: &BTreeMap<i32, i64>,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("files")))
            .with_topic_id(topic_id)
            .with_partitions(
                offsets
                    .iter()
                    .map(|(p, offset)| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_fetch_offset(*offset)
                            .with_partition_max_bytes(partition_max_bytes)
                    })
                    .collect(),
            )])
}

/// Reads every partition to its end with these limits; each partition's values in order.
async fn read_everything(
    conn: &mut shoal_client::Connection,
    topic_id: uuid::Uuid,
    version: i16,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> BTreeMap<i32, Vec<Vec<u8>>> {
    let mut offsets: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let mut got: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();
    for _ in 0..10_000 {
        let response = conn
            .request(
                version,
                &fetch(topic_id, &offsets, max_bytes, partition_max_bytes),
            )
            .await
            .unwrap();
        let mut progressed = false;
        for p in &response.responses[0].partitions {
            assert_eq!(p.error_code, 0);
            let records = p.records.clone().unwrap_or_default();
            let mut total = 0;
            for batch in split_batches(&records) {
                let (header, range) = batch.expect("whole, valid batches");
                total += range.len();
                for r in decode_records(&records[range], usize::MAX).unwrap() {
                    if r.offset >= offsets[&p.partition_index] {
                        got.entry(p.partition_index)
                            .or_default()
                            .push(r.value.unwrap().to_vec());
                    }
                }
                offsets.insert(p.partition_index, header.next_offset());
                progressed = true;
            }
            assert_eq!(total, records.len(), "no partial batch at the end");
        }
        if !progressed {
            return got;
        }
    }
    panic!("reading never finished");
}

#[tokio::test]
async fn records_from_files_arrive_once_in_order_under_every_limit() {
    let dir = tempfile::tempdir().unwrap();
    // The smallest segments allowed, so the reads cross rolled segments.
    let broker = TestBroker::start_with(dir.path(), &[("log.segment.bytes", "1048576")]).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, "files", PARTITIONS).await;
    let mut produced: BTreeMap<i32, usize> = BTreeMap::new();
    for round in 0..150 {
        let batches = (0..PARTITIONS)
            .map(|p| {
                let count = 1 + (round + p as usize) % 7;
                let from = produced.get(&p).copied().unwrap_or(0);
                produced.insert(p, from + count);
                (p, batch(p, from, count))
            })
            .collect();
        for (error, _) in produce_partitions(&mut conn, 9, None, "files", batches).await {
            assert_eq!(error, 0);
        }
    }
    let topic_id = broker.broker.topic("files").unwrap().id;
    let segments = walk_logs(dir.path());
    assert!(
        segments > PARTITIONS as usize,
        "{segments} segment files: the reads must cross rolled segments"
    );
    let expected: BTreeMap<i32, Vec<Vec<u8>>> = produced
        .iter()
        .map(|(p, n)| (*p, (0..*n).map(|i| value(*p, i)).collect()))
        .collect();
    // Whole logs at once, then tight and odd limits (a first batch larger than the limit still
    // comes whole), at an old and a current version.
    for (version, max_bytes, partition_max_bytes) in [
        (12, 64 << 20, 64 << 20),
        (16, 1 << 20, 1 << 20),
        (12, 100_000, 30_000),
        (4, 7_000, 1_000_000),
        (16, 1, 1),
    ] {
        let got =
            read_everything(&mut conn, topic_id, version, max_bytes, partition_max_bytes).await;
        assert_eq!(
            got, expected,
            "version {version}, limits {max_bytes}/{partition_max_bytes}"
        );
    }
    broker.stop().await;
}

/// Segment files of the topic under `dir`.
fn walk_logs(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            n += walk_logs(&path);
        } else if path.extension().is_some_and(|e| e == "log")
            && path.to_string_lossy().contains("files-")
        {
            n += 1;
        }
    }
    n
}
