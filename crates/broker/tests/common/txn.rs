//! Transactions over the wire for the integration tests, with raw requests: InitProducerId,
//! transactional Produce, EndTxn, WriteTxnMarkers, and what a read_committed consumer sees.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    EndTxnRequest, FetchRequest, InitProducerIdRequest, ProducerId, TopicName, TransactionalId,
    WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{decode_records, encode_batch, BatchOptions};

use super::TestBroker;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn tid(v: &str) -> TransactionalId {
    TransactionalId(s(v))
}

/// Evaluates `$attempt` (an `(error, ..)` tuple) again while it answers
/// CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written),
/// waiting a little in between as clients do, a bounded number of times.
macro_rules! retry_concurrent {
    ($attempt:expr) => {{
        let mut tries = 0;
        loop {
            let answer = $attempt;
            if answer.0 != ErrorCode::CONCURRENT_TRANSACTIONS.code() {
                break answer;
            }
            tries += 1;
            assert!(tries < 200, "the transaction did not complete");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

/// One transactional batch of a single record `value` from producer `pid` at `epoch`, first
/// sequence `seq`.
pub fn txn_batch(pid: i64, epoch: i16, seq: i32, value: &str) -> Bytes {
    Bytes::from(encode_batch(
        &[(None, Some(value.as_bytes()))],
        BatchOptions {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            transactional: true,
            timestamp_ms: super::now_ms(),
            ..BatchOptions::default()
        },
    ))
}

/// InitProducerId (request `version`) for the transactional id `id`: (error, producer id,
/// epoch).
pub async fn init(
    conn: &mut Connection,
    version: i16,
    id: &str,
    timeout_ms: i32,
) -> (i16, i64, i16) {
    let r = conn
        .request(
            version,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(tid(id)))
                .with_transaction_timeout_ms(timeout_ms)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await
        .unwrap();
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// Produce (request `version`; 12 adds the partition to the transaction implicitly) of
/// `records` to `topic`-`partition` as the transactional id `id`, retrying
/// CONCURRENT_TRANSACTIONS: (error, base offset).
pub async fn produce(
    conn: &mut Connection,
    version: i16,
    id: &str,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> (i16, i64) {
    retry_concurrent!(
        super::produce_once(conn, version, Some(id), topic, partition, records.clone()).await
    )
}

/// EndTxn (request `version`; 5 is transaction version 2) for `id`, retrying
/// CONCURRENT_TRANSACTIONS: (error, the producer epoch answered).
pub async fn end(
    conn: &mut Connection,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> (i16, i16) {
    retry_concurrent!(end_once(conn, version, id, pid, epoch, commit).await)
}

/// One EndTxn, not retried: (error, the producer epoch answered).
pub async fn end_once(
    conn: &mut Connection,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> (i16, i16) {
    let r = conn
        .request(
            version,
            &EndTxnRequest::default()
                .with_transactional_id(tid(id))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(commit),
        )
        .await
        .unwrap();
    (r.error_code, r.producer_epoch)
}

/// WriteTxnMarkers v1 of one COMMIT (`commit`) or ABORT marker for producer `pid` at `epoch`
/// to `topic`-`partition`: the partition's error.
pub async fn write_marker(
    conn: &mut Connection,
    pid: i64,
    epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    topic: &str,
    partition: i32,
) -> i16 {
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_transaction_result(commit)
            .with_coordinator_epoch(coordinator_epoch)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![partition])])]);
    let written = conn.request(1, &request).await.unwrap();
    written.markers[0].topics[0].partitions[0].error_code
}

/// A Fetch v12 of `topic`-`partition` from offset 0 at `isolation_level` (0
/// read_uncommitted, 1 read_committed): the partition's answer (high watermark, last stable
/// offset, records, aborted transactions).
pub async fn fetch(
    conn: &mut Connection,
    topic: &str,
    partition: i32,
    isolation_level: i8,
) -> PartitionData {
    let r = conn
        .request(
            12,
            &FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 22)
                .with_isolation_level(isolation_level)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(s(topic)))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 22)])]),
        )
        .await
        .unwrap();
    let p = r.responses[0].partitions[0].clone();
    assert_eq!(p.error_code, 0, "fetch {topic}-{partition}");
    p
}

/// What a read_committed consumer fetching `topic`-`partition` from 0 is answered.
pub async fn read_committed(conn: &mut Connection, topic: &str, partition: i32) -> PartitionData {
    fetch(conn, topic, partition, 1).await
}

/// Waits (bounded) until the read_committed view of `topic`-`partition` reaches `lso`:
/// markers are written after EndTxn is answered.
pub async fn wait_lso(conn: &mut Connection, topic: &str, partition: i32, lso: i64) {
    for _ in 0..200 {
        if read_committed(conn, topic, partition)
            .await
            .last_stable_offset
            >= lso
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{topic}-{partition}: last stable offset did not reach {lso}");
}

/// Waits (bounded) until `id`'s transaction is CompleteCommit or CompleteAbort: its Complete
/// record, and the Markers record before it, are then durable.
pub async fn wait_complete(broker: &TestBroker, id: &str) {
    for _ in 0..250 {
        let described = broker.broker.txn.describe(vec![id.into()]).await.unwrap();
        if described[0].state.starts_with("Complete") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{id}: the transaction did not complete");
}

/// The values a read_committed consumer takes from a Fetch answer `p`, as Kafka's consumer
/// filters it: control batches dropped, and every transactional batch of a producer from an
/// aborted transaction's first offset (listed in AbortedTransactions) until its ABORT marker.
pub fn committed_values(p: &PartitionData) -> Vec<String> {
    let mut aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.first_offset, a.producer_id.0))
        .collect();
    aborted.sort_unstable();
    let mut aborted = aborted.into_iter().peekable();
    let mut aborting = std::collections::HashSet::new();
    let records = p.records.clone().unwrap_or_default();
    let mut values = Vec::new();
    for batch in split_batches(&records) {
        let (header, range) = batch.unwrap();
        while let Some((_, pid)) = aborted.next_if(|(first, _)| *first <= header.base_offset()) {
            aborting.insert(pid);
        }
        if header.is_control() {
            aborting.remove(&header.producer_id());
            continue;
        }
        if header.is_transactional() && aborting.contains(&header.producer_id()) {
            continue;
        }
        for record in decode_records(&records[range], 1 << 20).unwrap() {
            let value = record.value.unwrap_or_default();
            values.push(String::from_utf8(value.to_vec()).unwrap());
        }
    }
    values
}
