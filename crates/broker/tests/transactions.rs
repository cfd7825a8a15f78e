//! The transaction coordinator through the broker, with raw requests: the classic flow, the
//! KIP-890 verification of transactional produce, TV2-style implicit adds on Produce v12, the
//! coordinator's errors, and a prepared commit finished after a restart.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use common::log_cut::{cut_last_batch, cut_log_at, first_segment};
use common::txn::{self, end, end_once, txn_batch, wait_complete};
use common::TestBroker;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, CreateTopicsRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ListTransactionsRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{control_record_type, decode_records, ControlRecordType};

const TOPIC: &str = "out";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn tid(v: &str) -> TransactionalId {
    TransactionalId(s(v))
}

async fn setup(conn: &mut Connection) {
    let created = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
        )
        .await
        .unwrap();
    assert_eq!(created.topics[0].error_code, 0);
}

async fn init(conn: &mut Connection, id: &str, timeout_ms: i32) -> (i16, i64, i16) {
    txn::init(conn, 4, id, timeout_ms).await
}

async fn add(conn: &mut Connection, id: &str, pid: i64, epoch: i16) -> i16 {
    let r = conn
        .request(
            3,
            &AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid(id))
                .with_v3_and_below_producer_id(ProducerId(pid))
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s(TOPIC)))
                    .with_partitions(vec![0])]),
        )
        .await
        .unwrap();
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

/// Produce of `records` to TOPIC-0, retrying CONCURRENT_TRANSACTIONS.
async fn produce(conn: &mut Connection, version: i16, id: &str, records: Bytes) -> (i16, i64) {
    txn::produce(conn, version, id, TOPIC, 0, records).await
}

async fn produce_once(conn: &mut Connection, version: i16, id: &str, records: Bytes) -> (i16, i64) {
    common::produce_once(conn, version, Some(id), TOPIC, 0, records).await
}

/// read_committed fetch of TOPIC-0 from 0: (last stable offset, bytes of records).
async fn committed_view(conn: &mut Connection) -> (i64, usize) {
    let p = txn::read_committed(conn, TOPIC, 0).await;
    (
        p.last_stable_offset,
        p.records.as_ref().map_or(0, |r| r.len()),
    )
}

/// Waits (bounded) until the read_committed view of TOPIC-0 reaches `lso`.
async fn wait_lso(conn: &mut Connection, lso: i64) {
    txn::wait_lso(conn, TOPIC, 0, lso).await;
}

#[tokio::test]
async fn classic_flow_with_verification_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;

    let coordinator = conn
        .request(
            3,
            &FindCoordinatorRequest::default()
                .with_key(s("app"))
                .with_key_type(1),
        )
        .await
        .unwrap();
    assert_eq!(coordinator.error_code, 0);
    assert_eq!(coordinator.port, i32::from(broker.addr.port()));

    assert_eq!(
        init(&mut conn, "app", 0).await.0,
        ErrorCode::INVALID_TRANSACTION_TIMEOUT.code()
    );
    assert_eq!(
        init(&mut conn, "app", 901_000).await.0,
        ErrorCode::INVALID_TRANSACTION_TIMEOUT.code()
    );
    let (code, pid, epoch) = init(&mut conn, "app", 60_000).await;
    assert_eq!((code, epoch), (0, 0));

    // KIP-890: a transactional batch for a partition the client never added is refused.
    let (code, _) = produce(&mut conn, 9, "app", txn_batch(pid, epoch, 0, "early")).await;
    assert_eq!(code, ErrorCode::INVALID_TXN_STATE.code());
    // Produce v11+ clients know the newer, abortable error for the same case (KIP-890).
    let (code, _) = produce(&mut conn, 11, "app", txn_batch(pid, epoch, 0, "early")).await;
    assert_eq!(code, ErrorCode::TRANSACTION_ABORTABLE.code());
    assert_eq!(committed_view(&mut conn).await, (0, 0), "nothing appended");

    assert_eq!(
        add(&mut conn, "app", pid + 1, epoch).await,
        ErrorCode::INVALID_PRODUCER_ID_MAPPING.code()
    );
    assert_eq!(add(&mut conn, "app", pid, epoch).await, 0);
    assert_eq!(
        produce(&mut conn, 9, "app", txn_batch(pid, epoch, 0, "a")).await,
        (0, 0)
    );
    // The open transaction holds the last stable offset, and DescribeProducers shows it.
    assert_eq!(committed_view(&mut conn).await.0, 0);
    {
        use kafka_protocol::messages::describe_producers_request::TopicRequest;
        use kafka_protocol::messages::DescribeProducersRequest;
        let described = conn
            .request(
                0,
                &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                    .with_name(TopicName(s(TOPIC)))
                    .with_partition_indexes(vec![0])]),
            )
            .await
            .unwrap();
        let active = &described.topics[0].partitions[0].active_producers;
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].producer_id.0, pid);
        assert_eq!(active[0].current_txn_start_offset, 0);
        assert_eq!(active[0].last_sequence, 0);
    }
    assert_eq!(end(&mut conn, 3, "app", pid, epoch, true).await.0, 0);
    wait_lso(&mut conn, 2).await; // record + COMMIT marker
    assert!(committed_view(&mut conn).await.1 > 0);
    // Committing again is a retry of the same outcome; aborting it is not.
    assert_eq!(end(&mut conn, 3, "app", pid, epoch, true).await.0, 0);
    assert_eq!(
        end(&mut conn, 3, "app", pid, epoch, false).await.0,
        ErrorCode::INVALID_TXN_STATE.code()
    );

    // A new instance fences the old epoch: PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for v1.
    let (_, pid2, epoch2) = init(&mut conn, "app", 60_000).await;
    assert_eq!((pid2, epoch2), (pid, epoch + 1));
    assert_eq!(
        end(&mut conn, 3, "app", pid, epoch, true).await.0,
        ErrorCode::PRODUCER_FENCED.code()
    );
    assert_eq!(
        end(&mut conn, 1, "app", pid, epoch, true).await.0,
        ErrorCode::INVALID_PRODUCER_EPOCH.code()
    );
    assert_eq!(
        add(&mut conn, "app", pid, epoch).await,
        ErrorCode::PRODUCER_FENCED.code()
    );
    assert_eq!(
        end(&mut conn, 3, "nobody", 5, 0, true).await.0,
        ErrorCode::INVALID_PRODUCER_ID_MAPPING.code()
    );

    {
        use kafka_protocol::messages::DescribeTransactionsRequest;
        let described = conn
            .request(
                0,
                &DescribeTransactionsRequest::default()
                    .with_transactional_ids(vec![tid("app"), tid("nobody")]),
            )
            .await
            .unwrap();
        let states = &described.transaction_states;
        assert_eq!(
            (states[0].error_code, states[0].producer_epoch),
            (0, epoch + 1)
        );
        assert_eq!(
            states[1].error_code,
            ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.code()
        );
    }
    let listed = conn
        .request(1, &ListTransactionsRequest::default())
        .await
        .unwrap();
    assert_eq!(listed.transaction_states.len(), 1);
    // The fencing InitProducerId left the completed transaction Empty at the new epoch.
    assert_eq!(
        listed.transaction_states[0].transaction_state.as_str(),
        "Empty"
    );
    broker.stop().await;
}

/// TxnOffsetCommit of offset 7 of TOPIC-0 for group "g".
fn txn_offset_commit(
    id: &str,
    pid: i64,
    epoch: i16,
) -> kafka_protocol::messages::TxnOffsetCommitRequest {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TxnOffsetCommitRequest};
    TxnOffsetCommitRequest::default()
        .with_transactional_id(tid(id))
        .with_group_id(GroupId(s("g")))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(7)])])
}

/// Waits (bounded) until a require-stable OffsetFetch of group "g" returns offset 7 for
/// TOPIC-0; false if it never does.
async fn offset_7_is_stable(conn: &mut Connection) -> bool {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest};
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_require_stable(true)
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_indexes(vec![0])]));
    for _ in 0..250 {
        let r = conn.request(7, &fetch).await.unwrap();
        let p = &r.topics[0].partitions[0];
        if p.error_code == 0 && p.committed_offset == 7 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Lazy flushing: with no periodic flush running in these tests, nothing fsyncs a marker, so it
/// stays listed in its transaction's Markers record and cutting it is a loss a crash could
/// cause. (Where every write is fsynced, a marker is flushed in the background right after it
/// is appended and the window for losing it is too short to hit on purpose.)
const LAZY: &[(&str, &str)] = &[("log.flush.interval.messages", "9223372036854775807")];

#[tokio::test]
async fn a_lost_marker_on_the_offsets_topic_is_written_again_and_resolves_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let (_, pid, epoch) = init(&mut conn, "offsets-lost", 60_000).await;
    // Transaction version 2: the offsets partition is added implicitly.
    let commit = txn_offset_commit("offsets-lost", pid, epoch);
    let r = conn.request(5, &commit).await.unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(
        end(&mut conn, 5, "offsets-lost", pid, epoch, true).await.0,
        0
    );
    assert!(offset_7_is_stable(&mut conn).await);
    wait_complete(&broker, "offsets-lost").await;
    drop(conn);
    broker.crash().await;

    // Group "g" lives in __consumer_offsets partition abs("g".hashCode()) % 3 = 103 % 3 = 1;
    // its last batch is the COMMIT marker, which the crash loses.
    let segment = first_segment(dir.path(), "__consumer_offsets", 1);
    assert_eq!(
        cut_last_batch(&segment),
        1,
        "the marker follows the offset commit"
    );

    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    assert!(
        offset_7_is_stable(&mut conn).await,
        "the offset commit resolves once the marker is written again"
    );
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_marker_lost_in_a_crash_is_written_again_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let (_, pid, epoch) = init(&mut conn, "lost", 60_000).await;
    assert_eq!(add(&mut conn, "lost", pid, epoch).await, 0);
    assert_eq!(
        produce(&mut conn, 3, "lost", txn_batch(pid, epoch, 0, "x")).await,
        (0, 0)
    );
    assert_eq!(end(&mut conn, 3, "lost", pid, epoch, true).await.0, 0);
    wait_lso(&mut conn, 2).await; // x + COMMIT marker at offset 1
    wait_complete(&broker, "lost").await;
    drop(conn);
    broker.crash().await;

    // The crash lost the marker: the partition now ends with the transaction's data.
    let segment = first_segment(dir.path(), TOPIC, 0);
    cut_log_at(&segment, 1);

    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    let (lso, bytes) = committed_view(&mut conn).await;
    assert_eq!(lso, 2, "the COMMIT marker is back at offset 1");
    assert!(bytes > 0, "x is readable read_committed");
    // The producer goes on: its next transaction starts after the rewritten marker.
    assert_eq!(add(&mut conn, "lost", pid, epoch).await, 0);
    assert_eq!(
        produce(&mut conn, 3, "lost", txn_batch(pid, epoch, 1, "y")).await,
        (0, 2)
    );
    assert_eq!(end(&mut conn, 3, "lost", pid, epoch, false).await.0, 0);
    wait_lso(&mut conn, 4).await;
    drop(conn);
    broker.stop().await;
}

/// Transaction version 2 bumps the epoch at every end, and the client starts its next
/// transaction as soon as EndTxn answers, while the previous one's markers may still be on
/// their way. A batch at the new epoch must then be added to the new transaction, not taken
/// as part of the old one still open on the partition (which its marker would commit, leaving
/// the new transaction empty and its EndTxn INVALID_TXN_STATE).
#[tokio::test]
async fn back_to_back_tv2_transactions_each_add_their_partition() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let (_, pid, mut epoch) = init(&mut conn, "b2b", 60_000).await;
    const TXNS: i64 = 60;
    for t in 0..TXNS {
        let seq = 0; // every epoch starts its sequence at 0
        let (code, _) = produce_once(&mut conn, 12, "b2b", txn_batch(pid, epoch, seq, "v")).await;
        assert!(
            code == 0 || code == ErrorCode::CONCURRENT_TRANSACTIONS.code(),
            "txn {t}: produce {code}"
        );
        if code != 0 {
            let (code, _) = produce(&mut conn, 12, "b2b", txn_batch(pid, epoch, seq, "v")).await;
            assert_eq!(code, 0, "txn {t}: produce");
        }
        let (code, bumped) = end(&mut conn, 5, "b2b", pid, epoch, t % 3 != 2).await;
        assert_eq!(code, 0, "txn {t}: EndTxn");
        assert_eq!(bumped, epoch + 1);
        epoch = bumped;
    }
    // Every transaction got its own marker: one batch and one marker each.
    wait_lso(&mut conn, 2 * TXNS).await;
    let described = broker
        .broker
        .txn
        .describe(vec!["b2b".into()])
        .await
        .unwrap();
    assert_eq!(described[0].producer_epoch, epoch);
    let last_committed = (TXNS - 1) % 3 != 2;
    let want = if last_committed {
        "CompleteCommit"
    } else {
        "CompleteAbort"
    };
    assert_eq!(described[0].state, want);
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn produce_v12_adds_partitions_implicitly_and_a_restart_finishes_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let (_, pid, epoch) = init(&mut conn, "tv2", 60_000).await;
    // Transaction version 2: no AddPartitionsToTxn; Produce v12 adds the partition.
    assert_eq!(
        produce(&mut conn, 12, "tv2", txn_batch(pid, epoch, 0, "x")).await,
        (0, 0)
    );
    let (code, bumped) = end(&mut conn, 5, "tv2", pid, epoch, true).await;
    assert_eq!((code, bumped), (0, epoch + 1), "EndTxn v5 bumps the epoch");
    wait_lso(&mut conn, 2).await;
    drop(conn);
    broker.stop().await;

    // The next transaction is open when the broker restarts; it stays open (not lost, not
    // committed) and is aborted by its producer after the restart.
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    // (Offset 2, or 3 if the restart re-sent the COMMIT marker before its completion was
    // recorded: duplicate markers are harmless.)
    let (code, y_offset) = produce(&mut conn, 12, "tv2", txn_batch(pid, bumped, 0, "y")).await;
    assert_eq!(code, 0);
    assert!(y_offset == 2 || y_offset == 3, "y at {y_offset}");
    drop(conn);
    broker.stop().await;
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(
        committed_view(&mut conn).await.0,
        y_offset,
        "the open transaction holds the LSO"
    );
    assert_eq!(
        end(&mut conn, 5, "tv2", pid, bumped, false).await,
        (0, bumped + 1)
    );
    wait_lso(&mut conn, y_offset + 2).await; // y + ABORT marker
    broker.stop().await;
}

#[tokio::test]
async fn transaction_version_is_a_finalized_feature() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::messages::{ApiVersionsRequest, UpdateFeaturesRequest};
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let level = |r: &kafka_protocol::messages::ApiVersionsResponse| {
        r.finalized_features
            .iter()
            .find(|f| f.name.as_str() == "transaction.version")
            .map(|f| f.max_version_level)
    };
    // v4: below it Kafka leaves out supported ranges starting at 0, as this one does.
    let versions = conn
        .request(4, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(
        level(&versions),
        Some(2),
        "a new directory starts at the newest level"
    );
    let supported = versions
        .supported_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .unwrap();
    assert_eq!((supported.min_version, supported.max_version), (0, 2));

    let update = |level: i16, upgrade_type: i8| {
        UpdateFeaturesRequest::default().with_feature_updates(vec![FeatureUpdateKey::default()
            .with_feature(s("transaction.version"))
            .with_max_version_level(level)
            .with_upgrade_type(upgrade_type)])
    };
    let refused = conn.request(1, &update(3, 1)).await.unwrap();
    assert_eq!(
        refused.results[0].error_code,
        ErrorCode::INVALID_UPDATE_VERSION.code()
    );
    let refused = conn.request(1, &update(1, 1)).await.unwrap();
    assert_eq!(
        refused.results[0].error_code,
        ErrorCode::INVALID_UPDATE_VERSION.code(),
        "a downgrade needs a downgrade type"
    );
    let done = conn.request(1, &update(1, 2)).await.unwrap();
    assert_eq!(done.results[0].error_code, 0);
    drop(conn);
    broker.stop().await;
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let versions = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(level(&versions), Some(1), "the level survives a restart");
    broker.stop().await;
}

#[tokio::test]
async fn txn_offset_commit_needs_the_offsets_partition_in_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let (_, pid, epoch) = init(&mut conn, "offsets", 60_000).await;
    let commit = txn_offset_commit("offsets", pid, epoch);
    // Classic (v3): the client must have sent AddOffsetsToTxn first.
    let r = conn.request(3, &commit).await.unwrap();
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ErrorCode::INVALID_TXN_STATE.code()
    );
    // Transaction version 2 (v5): the partition is added implicitly.
    let r = conn.request(5, &commit).await.unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(end(&mut conn, 5, "offsets", pid, epoch, true).await.0, 0);
    // The commit marker reaches __consumer_offsets and the offset becomes visible.
    assert!(
        offset_7_is_stable(&mut conn).await,
        "the transactional offset never became visible"
    );
    broker.stop().await;
}

/// A transaction whose marker can never be written never completes; requests of its id held
/// for it are answered CONCURRENT_TRANSACTIONS after a while, as Kafka answers at once, instead
/// of waiting into the client's timeout.
#[tokio::test]
async fn requests_held_for_a_marker_that_cannot_be_written_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let (_, pid, epoch) = init(&mut conn, "stuck", 60_000).await;
    assert_eq!(add(&mut conn, "stuck", pid, epoch).await, 0);
    assert_eq!(
        produce(&mut conn, 3, "stuck", txn_batch(pid, epoch, 0, "x")).await,
        (0, 0)
    );
    // A marker at a newer epoch (an admin tool, or a zombie coordinator) ends the transaction
    // on the partition and moves the producer's epoch there past the coordinator's.
    let newer = txn::write_marker(&mut conn, pid, epoch + 1, false, i32::MAX, TOPIC, 0).await;
    assert_eq!(newer, 0);
    // The coordinator's COMMIT marker (at `epoch`) is now refused on every attempt.
    assert_eq!(end_once(&mut conn, 3, "stuck", pid, epoch, true).await.0, 0);
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        end_once(&mut conn, 3, "stuck", pid, epoch, true),
    )
    .await
    .expect("the held EndTxn retry is answered");
    assert_eq!(answered.0, ErrorCode::CONCURRENT_TRANSACTIONS.code());
    let described = broker
        .broker
        .txn
        .describe(vec!["stuck".into()])
        .await
        .unwrap();
    assert_eq!(described[0].state, "PrepareCommit");
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn write_txn_markers_aborts_a_hanging_transaction() {
    let dir = tempfile::tempdir().unwrap();
    // Without the coordinator's check (KIP-890 verification off, as a Kafka broker can run) a
    // transactional batch the coordinator never heard of leaves a transaction open that no
    // marker will close.
    let broker = TestBroker::start_with(
        dir.path(),
        &[("transaction.partition.verification.enable", "false")],
    )
    .await;
    let mut conn = broker.connect().await;
    setup(&mut conn).await;
    let r = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await
        .unwrap();
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    assert!(pid >= 0);
    let mut request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(txn_batch(pid, epoch, 0, "hanging")))])]);
    // Transactional data without a transactional id is refused outright, as in Kafka.
    let refused = conn.request(9, &request).await.unwrap();
    assert_eq!(
        refused.responses[0].partition_responses[0].error_code,
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()
    );
    request.transactional_id = Some(TransactionalId(s("lost")));
    let produced = conn.request(9, &request).await.unwrap();
    assert_eq!(
        produced.responses[0].partition_responses[0].error_code, 0,
        "{:?}",
        produced.responses[0].partition_responses[0].error_message
    );
    assert_eq!(
        committed_view(&mut conn).await.0,
        0,
        "stuck behind the open transaction"
    );

    // What kafka-transactions abort does: an ABORT marker for that producer.
    let abort = txn::write_marker(&mut conn, pid, epoch, false, 0, TOPIC, 0).await;
    assert_eq!(abort, 0);
    let (lso, bytes) = committed_view(&mut conn).await;
    assert_eq!(lso, 2, "record + ABORT marker, nothing open");
    assert!(
        bytes > 0,
        "the aborted batch is returned with AbortedTransactions"
    );
    // A marker for a partition that does not exist is refused per partition.
    assert_eq!(
        txn::write_marker(&mut conn, pid, epoch, false, 0, TOPIC, 9).await,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
    );
    broker.stop().await;
}

/// xorshift64*: a deterministic generator, so a failing seed replays exactly.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Produce v12 (transaction version 2: the partition is added implicitly) of one batch to
/// `topic`-`partition`; panics unless it succeeded.
async fn produce_to(conn: &mut Connection, id: &str, topic: &str, partition: i32, records: Bytes) {
    let (code, _) = txn::produce(conn, 12, id, topic, partition, records).await;
    assert_eq!(code, 0, "produce to {topic}-{partition}");
}

/// Random transactions, then a crash that loses a random part of every data partition's
/// unflushed tail (with lazy flushing: everything after the topic was created), then a
/// restart. Whatever survived must be resolved as the coordinator decided: no transaction left
/// open (last stable offset = high watermark), and every surviving transactional batch
/// followed by a marker of its producer that is COMMIT iff its transaction was committed.
#[tokio::test]
async fn random_losses_of_unflushed_tails_leave_every_transaction_resolved_as_decided() {
    for seed in 1..=8u64 {
        crash_case(seed).await;
    }
}

async fn crash_case(seed: u64) {
    const TOPIC_C: &str = "crash";
    const PARTITIONS: i32 = 3;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, TOPIC_C, PARTITIONS).await;
    let ids = ["a", "b", "c"];
    let mut producers = Vec::new();
    for id in ids {
        let (code, pid, epoch) = init(&mut conn, id, 60_000).await;
        assert_eq!(code, 0);
        producers.push((pid, epoch));
    }
    // value "<id>-<k>" -> committed?
    let mut decided: HashMap<String, bool> = HashMap::new();
    for k in 0..24 {
        let which = rng.below(ids.len() as u64) as usize;
        let (id, (pid, epoch)) = (ids[which], producers[which]);
        let value = format!("{id}-{k}");
        let mask = 1 + rng.below((1 << PARTITIONS) - 1);
        for partition in 0..PARTITIONS {
            if mask & (1 << partition) != 0 {
                // Every transaction has a new epoch, so each partition's sequence restarts.
                produce_to(
                    &mut conn,
                    id,
                    TOPIC_C,
                    partition,
                    txn_batch(pid, epoch, 0, &value),
                )
                .await;
            }
        }
        let commit = rng.below(3) != 0;
        let (code, bumped) = end(&mut conn, 5, id, pid, epoch, commit).await;
        assert_eq!((code, bumped), (0, epoch + 1), "seed {seed} txn {k}");
        producers[which].1 = bumped;
        decided.insert(value, commit);
    }
    for id in ids {
        wait_complete(&broker, id).await;
    }
    let topic = broker.broker.topic(TOPIC_C).unwrap();
    let partitions: Vec<_> = (0..PARTITIONS)
        .map(|i| topic.partition(i).unwrap())
        .collect();
    drop(topic);
    drop(conn);
    broker.crash().await;

    // Lose a random suffix of each partition's unflushed tail, at a batch boundary.
    for (i, p) in partitions.iter().enumerate() {
        let flushed = p.lock().flushed_offset();
        let segment = first_segment(dir.path(), TOPIC_C, i as i32);
        let bytes = std::fs::read(&segment).unwrap();
        let mut bases = Vec::new();
        for batch in split_batches(&bytes) {
            let base = batch.unwrap().0.base_offset();
            if base >= flushed {
                bases.push(base);
            }
        }
        let pick = rng.below(bases.len() as u64 + 1) as usize;
        if pick < bases.len() {
            cut_log_at(&segment, bases[pick]);
        }
    }
    drop(partitions);

    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    for partition in 0..PARTITIONS {
        let p = &txn::fetch(&mut conn, TOPIC_C, partition, 0).await;
        assert_eq!(
            p.last_stable_offset, p.high_watermark,
            "seed {seed} partition {partition}: a transaction was left open"
        );
        let records = p.records.clone().unwrap_or_default();
        let batches: Vec<_> = split_batches(&records)
            .map(|b| {
                let (header, range) = b.unwrap();
                (header, records.slice(range))
            })
            .collect();
        for (i, (header, bytes)) in batches.iter().enumerate() {
            if header.is_control() || !header.is_transactional() {
                continue;
            }
            let value = decode_records(bytes, 1 << 20).unwrap()[0]
                .value
                .clone()
                .unwrap();
            let value = String::from_utf8(value.to_vec()).unwrap();
            let committed = decided[&value];
            let marker = batches[i + 1..]
                .iter()
                .find(|(h, _)| h.is_control() && h.producer_id() == header.producer_id())
                .unwrap_or_else(|| panic!("seed {seed}: {value} has no marker"));
            let kind = control_record_type(&marker.1).unwrap();
            let want = if committed {
                ControlRecordType::Commit
            } else {
                ControlRecordType::Abort
            };
            assert_eq!(kind, want, "seed {seed} partition {partition}: {value}");
        }
    }
    drop(conn);
    broker.stop().await;
}

const SHARE_STATE: &str = "__share_group_state";

/// AddPartitionsToTxn (v3) of `topic`-`partition`.
async fn add_partition(
    conn: &mut Connection,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    partition: i32,
) -> i16 {
    let r = conn
        .request(
            3,
            &AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid(id))
                .with_v3_and_below_producer_id(ProducerId(pid))
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![partition])]),
        )
        .await
        .unwrap();
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

/// The transaction markers in `__share_group_state`-0, in log order: (offset, producer id,
/// commit).
fn share_state_markers(broker: &TestBroker) -> Vec<(i64, i64, bool)> {
    use shoal_broker::coordinators::log_io::Replayed;
    use shoal_broker::participants::marker_from_control;
    let mut markers = Vec::new();
    shoal_broker::coordinators::log_io::replay_topic(&broker.broker, SHARE_STATE, &[0], |item| {
        if let Replayed::Control {
            partition: 0,
            header,
            records,
        } = item
        {
            let marker = marker_from_control(0, header, records).unwrap();
            markers.push((header.base_offset(), marker.producer_id, marker.commit));
        }
    })
    .unwrap();
    markers
}

async fn share_markers_applied(broker: &TestBroker) -> (u64, u64) {
    let applied = broker.broker.share.markers_applied().await;
    (applied.commits, applied.aborts)
}

/// A transaction with `__share_group_state`-0 among its partitions: its COMMIT and ABORT
/// markers are appended there and handed to the share-state participant, live, and again to
/// the participant by the replay of the topic at the next start.
#[tokio::test]
async fn a_marker_on_the_share_state_topic_is_appended_and_handed_to_its_participant() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert_eq!(share_markers_applied(&broker).await, (0, 0));
    let (_, pid, epoch) = init(&mut conn, "share-marker", 60_000).await;
    assert_eq!(
        add_partition(&mut conn, "share-marker", pid, epoch, SHARE_STATE, 0).await,
        0
    );
    assert_eq!(
        end(&mut conn, 3, "share-marker", pid, epoch, true).await.0,
        0
    );
    // The participant is handed the marker before the transaction completes.
    wait_complete(&broker, "share-marker").await;
    assert_eq!(share_markers_applied(&broker).await, (1, 0));
    assert_eq!(
        add_partition(&mut conn, "share-marker", pid, epoch, SHARE_STATE, 0).await,
        0
    );
    assert_eq!(
        end(&mut conn, 3, "share-marker", pid, epoch, false).await.0,
        0
    );
    wait_complete(&broker, "share-marker").await;
    assert_eq!(share_markers_applied(&broker).await, (1, 1));
    assert_eq!(
        share_state_markers(&broker),
        vec![(0, pid, true), (1, pid, false)]
    );
    drop(conn);
    broker.stop().await;

    let broker = TestBroker::start(dir.path()).await;
    assert_eq!(
        share_markers_applied(&broker).await,
        (1, 1),
        "the replay of __share_group_state hands its markers to the participant"
    );
    broker.stop().await;
}

/// Decision 0019 on `__share_group_state`: the share-state coordinator writes the markers there
/// and fsyncs them before its answer, so a COMMIT marker there is durable by the time its
/// transaction completes (where decision 0005 leaves a data partition's marker to its lazy
/// flush, listed for the rewrite at start): a crash right after the commit, with lazy flushing,
/// keeps it, and the replay hands it to the participant.
#[tokio::test]
async fn a_marker_on_the_share_state_topic_is_durable_when_its_transaction_completes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    let mut conn = broker.connect().await;
    let (_, pid, epoch) = init(&mut conn, "share-lost", 60_000).await;
    assert_eq!(
        add_partition(&mut conn, "share-lost", pid, epoch, SHARE_STATE, 0).await,
        0
    );
    assert_eq!(end(&mut conn, 3, "share-lost", pid, epoch, true).await.0, 0);
    wait_complete(&broker, "share-lost").await;
    assert_eq!(share_markers_applied(&broker).await, (1, 0));
    let partition = shoal_broker::markers::partition(&broker.broker, SHARE_STATE, 0).unwrap();
    let (flushed, end_offset) = {
        let log = partition.lock();
        (log.flushed_offset(), log.log_end_offset())
    };
    assert_eq!(
        (flushed, end_offset),
        (1, 1),
        "the marker is its only batch, fsynced"
    );
    drop(partition);
    drop(conn);
    broker.crash().await;

    let broker = TestBroker::start_with(dir.path(), LAZY).await;
    assert_eq!(share_state_markers(&broker), vec![(0, pid, true)]);
    assert_eq!(
        share_markers_applied(&broker).await,
        (1, 0),
        "the marker is handed to the participant by the replay"
    );
    broker.stop().await;
}

/// WriteTxnMarkers (what `kafka-transactions abort` sends) takes the same path: an ABORT marker
/// for `__share_group_state`-0 is appended there and handed to the share-state participant.
#[tokio::test]
async fn write_txn_markers_on_the_share_state_topic_reach_its_participant() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let abort = txn::write_marker(&mut conn, 4242, 0, false, 0, SHARE_STATE, 0).await;
    assert_eq!(abort, 0);
    assert_eq!(share_state_markers(&broker), vec![(0, 4242, false)]);
    assert_eq!(share_markers_applied(&broker).await, (0, 1));
    drop(conn);
    broker.stop().await;
}
