//! TxnShareAcknowledge (KIP-1289) across broker crashes: a staging survives kill -9, and a
//! transaction's outcome reaches the share-state partition however much of its tail the crash
//! lost — the prepared commit finished by the coordinator, a lost marker written again.
//! Test names carry the proposal's corner case (`caseN`) or the spec's guarantee (`gN`,
//! spec §5) they check.

mod common;

use common::log_cut::{batches, cut_last_batch, cut_log_at, first_segment};
use common::share::ACCEPT;
use common::txn::{committed_values, txn_batch};
use common::txn_share::*;
use common::{txn, TestBroker};
use shoal_broker::coordinators::txn_coordinator::TRANSACTION_STATE;
use shoal_broker::share::SHARE_GROUP_STATE;
use shoal_core::txn_coordinator::{partition_for, TransactionState, TxnRecord};

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
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted_start(&broker, topic_id, 0).await, (10, 0));
    drop(conn);
    broker.stop().await;

    // And the resolution replays the same way.
    let broker = start(dir.path()).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted_start(&broker, topic_id, 0).await, (10, 0));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    broker.stop().await;
}

/// g4 / case 13: the broker crashes after the transaction committed and the data partitions
/// got their markers. The share-state partition's marker cannot be lost then: the share-state
/// coordinator fsyncs it before the transaction completes (decision 0019), so with lazy
/// flushing everything a crash may drop lies past it, and the restart finds the staging
/// resolved. (Before decision 0019 the marker was flushed lazily and the start-up rewrite of
/// lost markers, decision 0005, wrote it again.)
#[tokio::test]
async fn g4_case13_the_share_state_marker_is_durable_when_the_transaction_completes() {
    let (dir, broker, mut conn, topic_id, a) = staged_with(LAZY_SETTINGS, 60000, 30_000).await;
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    resolve(&broker, &mut conn, &a, true).await;
    let n = state_partition(&broker, topic_id, 0);
    let partition = shoal_broker::markers::partition(&broker.broker, SHARE_GROUP_STATE, n).unwrap();
    let (flushed, end) = {
        let log = partition.lock();
        (log.flushed_offset(), log.log_end_offset())
    };
    drop(partition);
    drop(conn);
    broker.crash().await;

    // The staging is the partition's first batch, the COMMIT marker its last, fsynced: a
    // crash loses only what lies past the flushed offset, and nothing does.
    let segment = first_segment(dir.path(), SHARE_GROUP_STATE, n);
    let last = batches(&segment).last().unwrap().0;
    assert!(last.is_control());
    assert_eq!((flushed, end), (last.next_offset(), last.next_offset()));

    let broker = TestBroker::start_with(dir.path(), LAZY_SETTINGS).await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted_start(&broker, topic_id, 0).await, (10, 0));
    broker.stop().await;
}

/// g4, broker crash after PrepareCommit, before any marker: the transaction staged the
/// acknowledgements and produced its output, and EndTxn(COMMIT) was answered once
/// PrepareCommit was durable; the crash loses everything after it. The logs are cut to that
/// point — the COMMIT markers off the output partition and off the share-state partition, and
/// the coordinator's records after PrepareCommit (the Markers and CompleteCommit records) off
/// its `__transaction_state` partition. The restarted coordinator finds the transaction
/// prepared and finishes the commit: the output is visible to read_committed readers, the
/// staged records are ACKNOWLEDGED (persisted, and the live machine delivers nothing), and
/// nothing is TX_PENDING.
#[tokio::test]
async fn g4_a_crash_after_prepare_commit_is_finished_by_the_coordinator() {
    let (dir, broker, mut conn, topic_id, a) = staged_with(LAZY_SETTINGS, 60000, 30_000).await;
    common::create_topic(&mut conn, OUT, 1).await;
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    let output = txn_batch(a.pid, a.epoch, 0, "out-0");
    assert_eq!(
        txn::produce(&mut conn, 12, TID, OUT, 0, output).await,
        (0, 0)
    );
    resolve(&broker, &mut conn, &a, true).await;
    txn::wait_complete(&broker, TID).await;
    txn::wait_lso(&mut conn, OUT, 0, 2).await;
    let n = state_partition(&broker, topic_id, 0);
    let txn_partitions = broker
        .broker
        .topic(TRANSACTION_STATE)
        .unwrap()
        .partition_count();
    let owner = partition_for(TID, txn_partitions as u32) as i32;
    drop(conn);
    broker.crash().await;

    // The output partition: the batch, then its COMMIT marker.
    let segment = first_segment(dir.path(), OUT, 0);
    assert!(batches(&segment).last().unwrap().0.is_control());
    assert_eq!(cut_last_batch(&segment), 1);
    // The share-state partition: the staging (after the state's initialization), then the
    // COMMIT marker.
    let segment = first_segment(dir.path(), SHARE_GROUP_STATE, n);
    let header = batches(&segment).last().unwrap().0;
    assert!(header.is_control() && header.producer_id() == a.pid);
    cut_last_batch(&segment);
    // The coordinator's partition: everything after the batch holding PrepareCommit.
    let segment = first_segment(dir.path(), TRANSACTION_STATE, owner);
    let logged: Vec<(i64, Vec<TxnRecord>)> = batches(&segment)
        .into_iter()
        .map(|(header, records)| {
            let decoded = records
                .iter()
                .map(|r| TxnRecord::decode(r.key.as_deref().unwrap(), r.value.as_deref()).unwrap())
                .collect();
            (header.base_offset(), decoded)
        })
        .collect();
    let state_of = |r: &TxnRecord| match r {
        TxnRecord::Transaction { value, .. } => Some(value.state),
        _ => None,
    };
    let prepared = logged
        .iter()
        .position(|(_, records)| {
            records
                .iter()
                .any(|r| state_of(r) == Some(TransactionState::PrepareCommit))
        })
        .expect("PrepareCommit is logged");
    let after: Vec<&TxnRecord> = logged[prepared + 1..]
        .iter()
        .flat_map(|(_, records)| records)
        .collect();
    assert!(
        after.iter().any(|r| matches!(r, TxnRecord::Markers { .. })),
        "{after:?}"
    );
    assert!(
        after
            .iter()
            .any(|r| state_of(r) == Some(TransactionState::CompleteCommit)),
        "{after:?}"
    );
    cut_log_at(&segment, logged[prepared + 1].0);

    let broker = TestBroker::start_with(dir.path(), LAZY_SETTINGS).await;
    txn::wait_complete(&broker, TID).await;
    let described = broker.broker.txn.describe(vec![TID.into()]).await.unwrap();
    assert_eq!(described[0].state, "CompleteCommit");
    let mut conn = broker.connect().await;
    txn::wait_lso(&mut conn, OUT, 0, 2).await;
    let view = txn::read_committed(&mut conn, OUT, 0).await;
    assert_eq!(committed_values(&view), vec!["out-0"]);
    wait_resolved(&broker).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted_start(&broker, topic_id, 0).await, (10, 0));
    join(&mut conn, "m2").await;
    assert_eq!(acquire(&mut conn, topic_id, "m2", &[0]).await, vec![]);
    assert_eq!(live(&broker, topic_id, 0).await, vec![]);
    drop(conn);
    broker.stop().await;
}
