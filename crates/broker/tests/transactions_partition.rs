//! The partition side of transactions against raw protocol requests: transactional produce,
//! markers written through `shoal_broker::markers`, the last stable offset in Fetch and
//! ListOffsets, aborted transactions in read_committed fetches, and all of it across a restart.
//!
//! These tests play the transaction coordinator themselves (markers, TV2 epoch bumps), so the
//! broker runs with `transaction.partition.verification.enable=false`, as a Kafka broker can:
//! the produce requests carry a transactional id the coordinator never heard of.

mod common;

use bytes::Bytes;
use common::{create_topic, init_producer_id, TestBroker};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{encode_batch, encode_end_txn_marker, BatchOptions, EndTxnMarker};

const TOPIC: &str = "txn";

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A batch of `count` records; transactional/idempotent when `producer_id >= 0`.
fn batch(producer_id: i64, epoch: i16, seq: i32, count: usize, transactional: bool) -> Bytes {
    let values: Vec<String> = (0..count).map(|i| format!("v{seq}-{i}")).collect();
    let records: Vec<shoal_storage::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    Bytes::from(encode_batch(
        &records,
        BatchOptions {
            producer_id,
            producer_epoch: epoch,
            base_sequence: seq,
            transactional,
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    ))
}

fn txn(producer_id: i64, epoch: i16, seq: i32, count: usize) -> Bytes {
    batch(producer_id, epoch, seq, count, true)
}

const TRANSACTIONAL_ID: &str = "played-by-the-test";

async fn start(dir: &std::path::Path) -> TestBroker {
    TestBroker::start_with(
        dir,
        &[("transaction.partition.verification.enable", "false")],
    )
    .await
}

async fn produce(conn: &mut shoal_client::Connection, records: Bytes) -> (i16, i64) {
    produce_as(conn, Some(TRANSACTIONAL_ID), records).await
}

async fn produce_as(
    conn: &mut shoal_client::Connection,
    transactional_id: Option<&str>,
    records: Bytes,
) -> (i16, i64) {
    let request = ProduceRequest::default()
        .with_transactional_id(transactional_id.map(|id| {
            kafka_protocol::messages::TransactionalId(StrBytes::from_string(id.to_string()))
        }))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let response = conn.request(9, &request).await.unwrap();
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Fetch v11 of partition 0 from `offset` at `isolation_level`, without waiting.
async fn fetch(
    conn: &mut shoal_client::Connection,
    offset: i64,
    isolation_level: i8,
) -> PartitionData {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let mut response = conn.request(11, &request).await.unwrap();
    assert_eq!(response.error_code, 0);
    response.responses.remove(0).partitions.remove(0)
}

/// `(base offset, last offset, is control)` of every returned batch.
fn batches(data: &PartitionData) -> Vec<(i64, i64, bool)> {
    let records = data.records.clone().unwrap_or_default();
    split_batches(&records)
        .map(|b| b.unwrap().0)
        .map(|h| (h.base_offset(), h.last_offset(), h.is_control()))
        .collect()
}

fn aborted(data: &PartitionData) -> Option<Vec<(i64, i64)>> {
    data.aborted_transactions.as_ref().map(|list| {
        list.iter()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect()
    })
}

/// ListOffsets v7 of partition 0 for `timestamp` at `isolation_level`: (error, offset).
async fn list_offset(
    conn: &mut shoal_client::Connection,
    timestamp: i64,
    isolation_level: i8,
) -> (i16, i64) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let response = conn.request(7, &request).await.unwrap();
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset)
}

fn marker(
    broker: &TestBroker,
    producer_id: i64,
    epoch: i16,
    commit: bool,
) -> Result<i64, ErrorCode> {
    let b = &broker.broker;
    let partition = shoal_broker::markers::partition(b, TOPIC, 0)?;
    shoal_broker::markers::write_marker(b, &partition, producer_id, epoch, commit, 0)
}

const READ_UNCOMMITTED: i8 = 0;
const READ_COMMITTED: i8 = 1;
const LATEST: i64 = -1;

#[tokio::test]
async fn commit_and_abort_with_read_committed_fetches_and_list_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, TOPIC, 1).await;
    let (p1, e1) = init_producer_id(&mut conn).await;
    let (p2, e2) = init_producer_id(&mut conn).await;

    assert_eq!(
        produce(&mut conn, batch(-1, -1, -1, 2, false)).await,
        (0, 0)
    );
    assert_eq!(produce(&mut conn, txn(p1, e1, 0, 3)).await, (0, 2));
    // Open transaction from offset 2: read_committed stops there.
    let committed = fetch(&mut conn, 0, READ_COMMITTED).await;
    assert_eq!(committed.error_code, 0);
    assert_eq!(
        (committed.high_watermark, committed.last_stable_offset),
        (5, 2)
    );
    assert_eq!(batches(&committed), vec![(0, 1, false)]);
    assert_eq!(aborted(&committed), Some(vec![]));
    let at_lso = fetch(&mut conn, 2, READ_COMMITTED).await;
    assert!(batches(&at_lso).is_empty());
    assert_eq!(at_lso.error_code, 0);
    // read_uncommitted sees everything; the LSO is still reported.
    let uncommitted = fetch(&mut conn, 0, READ_UNCOMMITTED).await;
    assert_eq!(uncommitted.last_stable_offset, 2);
    assert_eq!(batches(&uncommitted), vec![(0, 1, false), (2, 4, false)]);
    assert_eq!(aborted(&uncommitted), None);
    assert_eq!(list_offset(&mut conn, LATEST, READ_COMMITTED).await, (0, 2));
    assert_eq!(
        list_offset(&mut conn, LATEST, READ_UNCOMMITTED).await,
        (0, 5)
    );
    // By timestamp: the only records at or after "now - 1 min" below the LSO are 0..2; from a
    // future timestamp nothing.
    let recent = common::now_ms() - 60_000;
    assert_eq!(list_offset(&mut conn, recent, READ_COMMITTED).await, (0, 0));
    assert!(list_offset(&mut conn, -3, READ_COMMITTED).await.1 < 2);

    // Second transaction from offset 5; the first commits, the second aborts.
    assert_eq!(produce(&mut conn, txn(p2, e2, 0, 2)).await, (0, 5));
    assert_eq!(marker(&broker, p1, e1, true), Ok(7));
    assert_eq!(
        fetch(&mut conn, 0, READ_COMMITTED).await.last_stable_offset,
        5
    );
    assert_eq!(list_offset(&mut conn, LATEST, READ_COMMITTED).await, (0, 5));
    assert_eq!(marker(&broker, p2, e2, false), Ok(8));
    let all = fetch(&mut conn, 0, READ_COMMITTED).await;
    assert_eq!((all.high_watermark, all.last_stable_offset), (9, 9));
    assert_eq!(
        batches(&all),
        vec![
            (0, 1, false),
            (2, 4, false),
            (5, 6, false),
            (7, 7, true),
            (8, 8, true)
        ]
    );
    assert_eq!(aborted(&all), Some(vec![(p2, 5)]));
    // Overlap rules: the aborted txn [5, 8] is listed from fetch offset 8, not from 9, and not
    // for data ending before 5.
    assert_eq!(
        aborted(&fetch(&mut conn, 8, READ_COMMITTED).await),
        Some(vec![(p2, 5)])
    );
    assert_eq!(
        aborted(&fetch(&mut conn, 9, READ_COMMITTED).await),
        Some(vec![])
    );
    assert_eq!(list_offset(&mut conn, LATEST, READ_COMMITTED).await, (0, 9));

    // A zombie marker is refused; a marker without a transaction is written and ends nothing.
    assert_eq!(
        marker(&broker, p1, e1 - 1, false),
        Err(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    assert_eq!(marker(&broker, p1, e1, false), Ok(9));
    let after = fetch(&mut conn, 0, READ_COMMITTED).await;
    assert_eq!(after.last_stable_offset, 10);
    assert_eq!(aborted(&after), Some(vec![(p2, 5)]));
    broker.stop().await;
}

#[tokio::test]
async fn producer_state_and_markers_interplay() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, TOPIC, 1).await;
    let (p, e) = init_producer_id(&mut conn).await;

    assert_eq!(produce(&mut conn, txn(p, e, 0, 1)).await, (0, 0));
    // Plain (idempotent) batch while the transaction is ongoing.
    let (code, _) = produce(&mut conn, batch(p, e, 1, 1, false)).await;
    assert_eq!(code, ErrorCode::INVALID_TXN_STATE.code());
    // A retry of the transactional batch is a duplicate.
    assert_eq!(produce(&mut conn, txn(p, e, 0, 1)).await, (0, 0));
    assert_eq!(produce(&mut conn, txn(p, e, 1, 1)).await, (0, 1));
    // Clients may not write control batches, nor transactional batches without a producer id.
    let forged = Bytes::from(encode_end_txn_marker(
        p,
        e,
        EndTxnMarker {
            commit: true,
            coordinator_epoch: 0,
        },
        0,
    ));
    let (code, _) = produce(&mut conn, forged).await;
    assert_eq!(code, ErrorCode::INVALID_RECORD.code());
    let (code, _) = produce(&mut conn, batch(-1, -1, -1, 1, true)).await;
    assert_eq!(code, ErrorCode::INVALID_RECORD.code());
    // Transactional data needs a transactional id, as in Kafka (and unlike idempotent data).
    let (code, _) = produce_as(&mut conn, None, txn(p, e, 2, 1)).await;
    assert_eq!(
        code,
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()
    );
    assert_eq!(
        fetch(&mut conn, 0, READ_COMMITTED).await.last_stable_offset,
        0
    );

    // Transaction version 2: the abort marker carries epoch + 1, which fences the old epoch.
    assert_eq!(marker(&broker, p, e + 1, false), Ok(2));
    let (code, _) = produce(&mut conn, txn(p, e, 2, 1)).await;
    assert_eq!(code, ErrorCode::INVALID_PRODUCER_EPOCH.code());
    // The new epoch starts at sequence 0, here with a plain idempotent batch (no transaction).
    assert_eq!(
        produce(&mut conn, batch(p, e + 1, 0, 1, false)).await,
        (0, 3)
    );
    assert_eq!(produce(&mut conn, txn(p, e + 1, 1, 2)).await, (0, 4));
    let data = fetch(&mut conn, 0, READ_COMMITTED).await;
    assert_eq!(data.last_stable_offset, 4);
    assert_eq!(aborted(&data), Some(vec![(p, 0)]));
    assert_eq!(
        batches(&data),
        vec![(0, 0, false), (1, 1, false), (2, 2, true), (3, 3, false)]
    );
    // The marker's epoch check: the producer is now at e + 1.
    assert_eq!(
        marker(&broker, p, e, true),
        Err(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    assert_eq!(marker(&broker, p, e + 1, true), Ok(6));
    assert_eq!(
        fetch(&mut conn, 0, READ_COMMITTED).await.last_stable_offset,
        7
    );
    assert_eq!(
        marker(&broker, p, e + 1, true).map(|_| ()),
        Ok(()),
        "a repeated marker is harmless"
    );
    broker.stop().await;
}

#[tokio::test]
async fn last_stable_offset_and_aborted_index_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2, e) = {
        let broker = start(dir.path()).await;
        let mut conn = broker.connect().await;
        create_topic(&mut conn, TOPIC, 1).await;
        let (p1, e1) = init_producer_id(&mut conn).await;
        let (p2, e2) = init_producer_id(&mut conn).await;
        assert_eq!(e1, e2);
        assert_eq!(produce(&mut conn, txn(p1, e1, 0, 2)).await, (0, 0));
        assert_eq!(produce(&mut conn, txn(p2, e2, 0, 2)).await, (0, 2));
        let partition = shoal_broker::markers::partition(&broker.broker, TOPIC, 0).unwrap();
        let offset = shoal_broker::markers::write_marker_durably(
            &broker.broker,
            partition,
            p1,
            e1,
            false,
            3,
        )
        .await
        .unwrap();
        assert_eq!(offset, 4);
        assert_eq!(
            produce(&mut conn, batch(-1, -1, -1, 1, false)).await,
            (0, 5)
        );
        let data = fetch(&mut conn, 0, READ_COMMITTED).await;
        assert_eq!(data.last_stable_offset, 2);
        assert_eq!(aborted(&data), Some(vec![(p1, 0)]));
        broker.stop().await;
        (p1, p2, e1)
    };
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    let data = fetch(&mut conn, 0, READ_COMMITTED).await;
    assert_eq!((data.high_watermark, data.last_stable_offset), (6, 2));
    assert_eq!(aborted(&data), Some(vec![(p1, 0)]));
    assert_eq!(batches(&data), vec![(0, 1, false)]);
    assert_eq!(list_offset(&mut conn, LATEST, READ_COMMITTED).await, (0, 2));
    // p2's transaction is still ongoing after the restart: plain batches are refused.
    let (code, _) = produce(&mut conn, batch(p2, e, 2, 1, false)).await;
    assert_eq!(code, ErrorCode::INVALID_TXN_STATE.code());
    assert_eq!(marker(&broker, p2, e, true), Ok(6));
    let data = fetch(&mut conn, 0, READ_COMMITTED).await;
    assert_eq!(data.last_stable_offset, 7);
    assert_eq!(aborted(&data), Some(vec![(p1, 0)]));
    broker.stop().await;
}

#[tokio::test]
async fn markers_from_an_older_coordinator_are_fenced_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let write = |broker: &TestBroker, pid: i64, epoch: i16, coordinator_epoch: i32| {
        let b = &broker.broker;
        let partition = shoal_broker::markers::partition(b, TOPIC, 0)?;
        shoal_broker::markers::write_marker(b, &partition, pid, epoch, true, coordinator_epoch)
    };
    let (p, e) = {
        let broker = start(dir.path()).await;
        let mut conn = broker.connect().await;
        create_topic(&mut conn, TOPIC, 1).await;
        let (p, e) = init_producer_id(&mut conn).await;
        assert_eq!(produce(&mut conn, txn(p, e, 0, 1)).await, (0, 0));
        assert_eq!(write(&broker, p, e, 7), Ok(1));
        assert_eq!(
            write(&broker, p, e, 6),
            Err(ErrorCode::TRANSACTION_COORDINATOR_FENCED)
        );
        // DescribeProducers reports it, for `kafka-transactions abort`.
        {
            use kafka_protocol::messages::describe_producers_request::TopicRequest;
            use kafka_protocol::messages::DescribeProducersRequest;
            let described = conn
                .request(
                    0,
                    &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                        .with_name(name(TOPIC))
                        .with_partition_indexes(vec![0])]),
                )
                .await
                .unwrap();
            let active = &described.topics[0].partitions[0].active_producers;
            assert_eq!(active[0].coordinator_epoch, 7);
        }
        broker.stop().await;
        (p, e)
    };
    // From the snapshot written at shutdown, and from the log without it.
    for remove_snapshots in [false, true] {
        if remove_snapshots {
            let partition_dir = dir.path().join(format!("{TOPIC}-0"));
            for offset in shoal_storage::producer_snapshot::list(&partition_dir).unwrap() {
                std::fs::remove_file(shoal_storage::producer_snapshot::snapshot_path(
                    &partition_dir,
                    offset,
                ))
                .unwrap();
            }
        }
        let broker = start(dir.path()).await;
        assert_eq!(
            write(&broker, p, e, 6),
            Err(ErrorCode::TRANSACTION_COORDINATOR_FENCED),
            "remove_snapshots={remove_snapshots}"
        );
        broker.stop().await;
    }
    let broker = start(dir.path()).await;
    assert!(write(&broker, p, e, 8).is_ok());
    broker.stop().await;
}
