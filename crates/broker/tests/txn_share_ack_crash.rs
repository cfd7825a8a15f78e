//! TxnShareAcknowledge (KIP-1289) across broker crashes: a staging survives kill -9, and a
//! transaction's outcome reaches the share-state partition however much of its tail the crash
//! lost — the prepared commit finished by the coordinator, a lost marker written again.
//! Test names carry the proposal's corner case (`caseN`) or the spec's guarantee (`gN`,
//! spec §5) they check.

mod common;

use common::log_cut::{cut_last_batch, first_segment};
use common::share::ACCEPT;
use common::txn_share::*;
use common::TestBroker;
use shoal_broker::share::SHARE_GROUP_STATE;

/// g10 / case 1 / case 12: the broker crashes (kill -9) while records are TX_PENDING. The
/// staging was persisted before TxnShareAcknowledge was answered, so the restarted broker
/// replays it: the records are still TX_PENDING, staged by the producer, and delivered to
/// nobody; the transaction's COMMIT then acknowledges them, and that replays too. (The
/// proposal left this window at-least-once; persisting the staging closes it.)
#[tokio::test]
async fn g10_case1_case12_the_staging_survives_a_crash_and_the_outcome_resolves_it() {
    let (dir, broker, mut conn, topic_id, a) = staged(60000).await;
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    drop(conn);
    broker.crash().await;

    let broker = start(dir.path()).await;
    // Replayed from __share_group_state: still TX_PENDING, staged by the producer.
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 9, 5)]);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 10);
    let mut conn = broker.connect().await;
    join(&mut conn, "m2").await;
    // Nothing to deliver: the records belong to the open transaction.
    assert_eq!(acquire(&mut conn, topic_id, "m2", &[0]).await, vec![]);
    resolve(&broker, &mut conn, &a, true).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 9, 2)]);
    drop(conn);
    broker.stop().await;

    // And the resolution replays the same way.
    let broker = start(dir.path()).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 9, 2)]);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    broker.stop().await;
}

/// g4 / case 13: the broker crashes after the transaction committed and the data partitions
/// got their markers, but before the share-state partition's marker is durable. The start-up
/// rewrite of lost markers (decision 0005) writes it again and it resolves the staging:
/// without it the records would stay TX_PENDING (the assertions after the restart fail).
#[tokio::test]
async fn g4_case13_a_lost_share_state_marker_is_written_again_and_resolves_the_staging() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), LAZY_SETTINGS).await;
    let mut conn = broker.connect().await;
    let (topic_id, a) = staged_setup(&broker, &mut conn, 60000, 30_000).await;
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    resolve(&broker, &mut conn, &a, true).await;
    let n = state_partition(&broker, topic_id, 0);
    drop(conn);
    broker.crash().await;

    // The staging is the partition's first batch, the COMMIT marker its last.
    let segment = first_segment(dir.path(), SHARE_GROUP_STATE, n);
    assert!(cut_last_batch(&segment) > 0);

    let broker = TestBroker::start_with(dir.path(), LAZY_SETTINGS).await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 9, 2)]);
    broker.stop().await;
}
