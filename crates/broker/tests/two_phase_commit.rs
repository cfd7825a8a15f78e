//! Two-phase-commit transactions (KIP-939) through the broker, with raw requests: InitProducerId
//! v6 with `Enable2Pc` and `KeepPreparedTxn`, a prepared transaction surviving kill -9 and
//! completed by the restarted producer, a new InitProducerId without `KeepPreparedTxn` aborting
//! it, no timeout, and the broker setting that gates it all.
//!
//! Kafka 4.4's broker answers `KeepPreparedTxn` with UNSUPPORTED_VERSION, so only the setting
//! and `Enable2Pc` parts have a Kafka reference; the recovery path is checked against KIP-939's
//! text alone.

mod common;

use std::time::Duration;

use common::txn::{self, end, end_once, txn_batch, wait_complete};
use common::{create_topic, TestBroker};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::init_producer_id::InitProducerIdV6;
use shoal_protocol::ErrorCode;

const TOPIC: &str = "out";
const ENABLED: &[(&str, &str)] = &[("transaction.two.phase.commit.enable", "true")];

/// InitProducerId v6 for `id` with the KIP-939 flags.
async fn init_v6(
    conn: &mut Connection,
    id: &str,
    timeout_ms: i32,
    enable_2pc: bool,
    keep_prepared_txn: bool,
) -> InitProducerIdResponse {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.into()))))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_enable_2_pc(enable_2pc)
        .with_keep_prepared_txn(keep_prepared_txn);
    // Retried while a previous transaction's markers are being written.
    for _ in 0..200 {
        let r = conn
            .request(6, &InitProducerIdV6(request.clone()))
            .await
            .unwrap();
        if r.error_code != ErrorCode::CONCURRENT_TRANSACTIONS.code() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("InitProducerId kept answering CONCURRENT_TRANSACTIONS");
}

/// A 2PC producer `id` that wrote "a" and "b" to TOPIC-0 in a transaction left open (the
/// client's "prepared" transaction): (producer id, epoch).
async fn prepared(conn: &mut Connection, id: &str) -> (i64, i16) {
    create_topic(conn, TOPIC, 1).await;
    let r = init_v6(conn, id, 60_000, true, false).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.ongoing_txn_producer_id.0, -1, "nothing to keep yet");
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    for (seq, v) in ["a", "b"].into_iter().enumerate() {
        let batch = txn_batch(pid, epoch, seq as i32, v);
        assert_eq!(txn::produce(conn, 12, id, TOPIC, 0, batch).await.0, 0);
    }
    (pid, epoch)
}

async fn committed(conn: &mut Connection) -> Vec<String> {
    txn::committed_values(&txn::read_committed(conn, TOPIC, 0).await)
}

async fn state_of(broker: &TestBroker, id: &str) -> (String, i32) {
    let d = broker.broker.txn.describe(vec![id.into()]).await.unwrap();
    (d[0].state.clone(), d[0].transaction_timeout_ms)
}

#[tokio::test]
async fn two_phase_commit_needs_the_broker_setting() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    for keep in [false, true] {
        let r = init_v6(&mut conn, "p", 60_000, true, keep).await;
        assert_eq!(
            r.error_code,
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()
        );
    }
    // KeepPreparedTxn alone is not a valid combination.
    let r = init_v6(&mut conn, "p", 60_000, false, true).await;
    assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code());
    // An ordinary producer at v6 is served as at v5.
    let r = init_v6(&mut conn, "p", 60_000, false, false).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 0));
    assert_eq!(r.ongoing_txn_producer_id.0, -1);
    broker.stop().await;
}

/// The prepared transaction survives kill -9 of the broker; the restarted producer keeps it
/// (KeepPreparedTxn), sees which transaction it got, and commits it: every record is
/// visible exactly once.
#[tokio::test]
async fn a_prepared_transaction_survives_kill_9_and_is_committed_by_the_new_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), ENABLED).await;
    let mut conn = broker.connect().await;
    let (pid, epoch) = prepared(&mut conn, "p").await;
    assert_eq!(state_of(&broker, "p").await, ("Ongoing".into(), i32::MAX));
    drop(conn);
    broker.crash().await;

    let broker = TestBroker::start_with(dir.path(), ENABLED).await;
    let mut conn = broker.connect().await;
    assert_eq!(state_of(&broker, "p").await, ("Ongoing".into(), i32::MAX));
    assert_eq!(committed(&mut conn).await, Vec::<String>::new());
    let listed = conn
        .request(1, &ListTransactionsRequest::default())
        .await
        .unwrap();
    assert!(
        listed
            .transaction_states
            .iter()
            .any(|t| t.transactional_id.0.as_str() == "p"
                && t.transaction_state.as_str() == "Ongoing")
    );

    let r = init_v6(&mut conn, "p", 60_000, true, true).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        (r.ongoing_txn_producer_id.0, r.ongoing_txn_producer_epoch),
        (pid, epoch)
    );
    assert_eq!((r.producer_id.0, r.producer_epoch), (pid, epoch + 1));
    // The incarnation from before the crash is fenced.
    assert_eq!(
        end_once(&mut conn, 5, "p", pid, epoch, true).await.0,
        ErrorCode::PRODUCER_FENCED.code()
    );
    assert_eq!(end(&mut conn, 5, "p", pid, epoch + 1, true).await.0, 0);
    wait_complete(&broker, "p").await;
    txn::wait_lso(&mut conn, TOPIC, 0, 3).await; // a, b, COMMIT
    assert_eq!(committed(&mut conn).await, vec!["a", "b"]);
    // Completing again finds nothing to keep: the recovery is idempotent.
    let r = init_v6(&mut conn, "p", 60_000, true, true).await;
    assert_eq!((r.error_code, r.ongoing_txn_producer_id.0), (0, -1));
    assert_eq!(committed(&mut conn).await, vec!["a", "b"]);
    drop(conn);
    broker.stop().await;
}

/// A new InitProducerId without KeepPreparedTxn aborts the prepared transaction, as it aborts
/// any ongoing one.
#[tokio::test]
async fn init_without_keep_prepared_aborts_the_prepared_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), ENABLED).await;
    let mut conn = broker.connect().await;
    let (pid, epoch) = prepared(&mut conn, "p").await;
    let r = init_v6(&mut conn, "p", 60_000, true, false).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.ongoing_txn_producer_id.0, -1);
    assert_eq!(r.producer_id.0, pid);
    assert!(r.producer_epoch > epoch);
    // Answered once the abort completed.
    assert_eq!(state_of(&broker, "p").await.0, "Empty");
    txn::wait_lso(&mut conn, TOPIC, 0, 3).await; // a, b, ABORT
    assert_eq!(committed(&mut conn).await, Vec::<String>::new());
    broker.stop().await;
}

/// transaction.max.timeout.ms does not apply: an ordinary transaction asking for 300 ms is
/// aborted by then, a two-phase-commit one is still open long after.
#[tokio::test]
async fn two_phase_transactions_do_not_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), ENABLED).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, TOPIC, 1).await;
    for (id, two_phase) in [("ordinary", false), ("2pc", true)] {
        let r = init_v6(&mut conn, id, 300, two_phase, false).await;
        assert_eq!(r.error_code, 0);
        let batch = txn_batch(r.producer_id.0, r.producer_epoch, 0, id);
        assert_eq!(txn::produce(&mut conn, 12, id, TOPIC, 0, batch).await.0, 0);
    }
    wait_complete(&broker, "ordinary").await;
    assert_eq!(state_of(&broker, "ordinary").await.0, "CompleteAbort");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(state_of(&broker, "2pc").await, ("Ongoing".into(), i32::MAX));
    broker.stop().await;
}
