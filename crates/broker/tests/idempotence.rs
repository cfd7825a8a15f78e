//! The idempotent producer against raw protocol requests: InitProducerId, duplicate and
//! out-of-order batches, fencing, and producer state across restarts.

mod common;

use bytes::Bytes;
use common::{create_topic, init_producer_id, TestBroker};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, InitProducerIdRequest, ProduceRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::ErrorCode;
use shoal_storage::{encode_batch, BatchOptions};

const TOPIC: &str = "idem";

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// An idempotent batch of `count` records starting at sequence `seq`.
fn batch(producer_id: i64, epoch: i16, seq: i32, count: usize) -> Bytes {
    let values: Vec<String> = (0..count).map(|i| format!("v{seq}-{i}")).collect();
    let records: Vec<shoal_storage::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    Bytes::from(encode_batch(
        &records,
        BatchOptions {
            producer_id,
            producer_epoch: epoch,
            base_sequence: seq,
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    ))
}

fn produce_request(records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

/// Produces and returns (error code, base offset).
async fn produce(conn: &mut shoal_client::Connection, records: Bytes) -> (i16, i64) {
    let response = conn.request(9, &produce_request(records)).await.unwrap();
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn log_end(broker: &TestBroker) -> i64 {
    broker
        .broker
        .topic(TOPIC)
        .unwrap()
        .partition(0)
        .unwrap()
        .lock()
        .log_end_offset()
}

#[tokio::test]
async fn init_producer_id_is_advertised_and_transactional_ids_need_a_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let versions = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    let init = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::InitProducerId as i16)
        .expect("InitProducerId advertised");
    // v6 adds two-phase commit (KIP-939, decision 0021; tests/two_phase_commit.rs); an
    // idempotent producer's request is the same at every version up to 5, asked here.
    assert_eq!((init.min_version, init.max_version), (0, 6));
    for version in 0..=5 {
        let response = conn
            .request(
                version,
                &InitProducerIdRequest::default().with_transactional_id(None),
            )
            .await
            .unwrap();
        assert_eq!(response.error_code, 0, "v{version}");
        assert_eq!(response.producer_epoch, 0);
    }
    // A transactional id goes to the transaction coordinator, which checks the timeout.
    let txn = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx")))),
        )
        .await
        .unwrap();
    assert_eq!(
        txn.error_code,
        ErrorCode::INVALID_TRANSACTION_TIMEOUT.code()
    );
    assert_eq!(txn.producer_id.0, -1);
    let empty = conn
        .request(4, &InitProducerIdRequest::default())
        .await
        .unwrap();
    assert_eq!(empty.error_code, ErrorCode::INVALID_REQUEST.code());
    broker.stop().await;
}

#[tokio::test]
async fn duplicates_gaps_and_fencing_follow_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, TOPIC, 1).await;
    let (pid, epoch) = init_producer_id(&mut conn).await;

    assert_eq!(produce(&mut conn, batch(pid, epoch, 0, 3)).await, (0, 0));
    assert_eq!(produce(&mut conn, batch(pid, epoch, 3, 2)).await, (0, 3));
    // A retry of the first batch: the original offset, nothing appended.
    assert_eq!(produce(&mut conn, batch(pid, epoch, 0, 3)).await, (0, 0));
    assert_eq!(produce(&mut conn, batch(pid, epoch, 3, 2)).await, (0, 3));
    assert_eq!(log_end(&broker), 5);

    // A gap.
    let (code, _) = produce(&mut conn, batch(pid, epoch, 7, 1)).await;
    assert_eq!(code, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.code());
    // A new epoch must start at 0.
    let (code, _) = produce(&mut conn, batch(pid, epoch + 1, 5, 1)).await;
    assert_eq!(code, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.code());
    assert_eq!(
        produce(&mut conn, batch(pid, epoch + 1, 0, 1)).await,
        (0, 5)
    );
    // The old epoch is fenced.
    let (code, _) = produce(&mut conn, batch(pid, epoch, 5, 1)).await;
    assert_eq!(code, ErrorCode::INVALID_PRODUCER_EPOCH.code());
    // Transactional data needs a transactional id: an idempotent producer's transactional
    // batch is refused outright (Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
    let txn = encode_batch(
        &[(None, Some(&b"t"[..]))],
        BatchOptions {
            producer_id: pid,
            producer_epoch: epoch + 1,
            base_sequence: 1,
            transactional: true,
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    );
    let (code, _) = produce(&mut conn, Bytes::from(txn)).await;
    assert_eq!(
        code,
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()
    );
    assert_eq!(
        produce(&mut conn, batch(pid, epoch + 1, 1, 1)).await,
        (0, 6),
        "nothing was appended and the sequence did not move"
    );
    // Another producer is independent; plain batches are not checked.
    let (other, _) = init_producer_id(&mut conn).await;
    assert_ne!(other, pid);
    assert_eq!(produce(&mut conn, batch(other, 0, 0, 1)).await, (0, 7));
    assert_eq!(produce(&mut conn, batch(-1, -1, -1, 1)).await, (0, 8));
    assert_eq!(log_end(&broker), 9);
    broker.stop().await;
}

/// Produces 0..3 and 3..5 for one producer, restarts (optionally removing the snapshots), and
/// checks retries, the next sequence and a gap against the restored state.
async fn state_survives_restart(remove_snapshots: bool) {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, TOPIC, 1).await;
    let (pid, epoch) = init_producer_id(&mut conn).await;
    assert_eq!(produce(&mut conn, batch(pid, epoch, 0, 3)).await, (0, 0));
    assert_eq!(produce(&mut conn, batch(pid, epoch, 3, 2)).await, (0, 3));
    assert_eq!(produce(&mut conn, batch(-1, -1, -1, 2)).await, (0, 5));
    drop(conn);
    broker.stop().await;

    let partition_dir = dir.path().join(format!("{TOPIC}-0"));
    let snapshots = shoal_storage::producer_snapshot::list(&partition_dir).unwrap();
    assert_eq!(
        snapshots.last(),
        Some(&7),
        "clean shutdown writes a snapshot at the log end"
    );
    if remove_snapshots {
        shoal_storage::producer_snapshot::delete_where(&partition_dir, |_| true).unwrap();
    }

    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(produce(&mut conn, batch(pid, epoch, 3, 2)).await, (0, 3));
    assert_eq!(produce(&mut conn, batch(pid, epoch, 0, 3)).await, (0, 0));
    let (code, _) = produce(&mut conn, batch(pid, epoch, 6, 1)).await;
    assert_eq!(code, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.code());
    let (code, _) = produce(&mut conn, batch(pid, epoch - 1, 5, 1)).await;
    assert_eq!(code, ErrorCode::INVALID_PRODUCER_EPOCH.code());
    assert_eq!(produce(&mut conn, batch(pid, epoch, 5, 1)).await, (0, 7));
    assert_eq!(log_end(&broker), 8);
    // Ids handed out before the restart are not handed out again.
    let (next, _) = init_producer_id(&mut conn).await;
    assert!(next > pid, "{next} <= {pid}");
    broker.stop().await;
}

#[tokio::test]
async fn producer_state_survives_a_clean_restart() {
    state_survives_restart(false).await;
}

#[tokio::test]
async fn producer_state_is_rebuilt_from_the_log_without_a_snapshot() {
    state_survives_restart(true).await;
}

#[tokio::test]
async fn a_snapshot_past_the_log_end_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, TOPIC, 1).await;
    let (pid, _) = init_producer_id(&mut conn).await;
    assert_eq!(produce(&mut conn, batch(pid, 0, 0, 2)).await, (0, 0));
    drop(conn);
    broker.stop().await;
    // A snapshot claiming later state (as if the log had lost its tail in recovery) with a
    // different epoch: it must be removed, not loaded.
    let partition_dir = dir.path().join(format!("{TOPIC}-0"));
    let bogus = shoal_storage::producer_snapshot::ProducerSnapshot {
        offset: 50,
        entries: vec![shoal_storage::producer_snapshot::SnapshotEntry {
            producer_id: pid,
            epoch: 9,
            last_timestamp: common::now_ms(),
            current_txn_first_offset: -1,
            coordinator_epoch: -1,
            batches: vec![],
        }],
    };
    shoal_storage::producer_snapshot::write(&partition_dir, &bogus, true).unwrap();

    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(produce(&mut conn, batch(pid, 0, 0, 2)).await, (0, 0));
    assert_eq!(produce(&mut conn, batch(pid, 0, 2, 1)).await, (0, 2));
    assert!(!shoal_storage::producer_snapshot::list(&partition_dir)
        .unwrap()
        .contains(&50));
    broker.stop().await;
}

#[tokio::test]
async fn producer_ids_are_unique_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let broker = TestBroker::start(dir.path()).await;
        let mut conn = broker.connect().await;
        for _ in 0..5 {
            let (id, epoch) = init_producer_id(&mut conn).await;
            assert_eq!(epoch, 0);
            assert!(seen.insert(id), "producer id {id} handed out twice");
        }
        drop(conn);
        broker.stop().await;
    }
}
