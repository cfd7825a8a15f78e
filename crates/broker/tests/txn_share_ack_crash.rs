//! TxnShareAcknowledge (KIP-1289) across broker crashes: a staging survives kill -9, and a
//! transaction's outcome reaches the share-state partition however much of its tail the crash
//! lost — the prepared commit finished by the coordinator, a lost marker written again.
//! Test names carry the proposal's corner case (`caseN`) or the spec's guarantee (`gN`,
//! spec §5) they check.

mod common;

use common::log_cut::{batches, cut_last_batch, first_segment};
use common::share::ACCEPT;
use common::txn::{committed_values, txn_batch};
use common::txn_share::*;
use common::{txn, TestBroker};
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
    let txn_partitions = transaction_state_partitions(&broker);
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
    cut_transaction_state_after_prepare_commit(dir.path(), txn_partitions);

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

/// The share-state write that races a COMMIT marker in [`marker_racing`].
#[derive(Clone, Copy, Debug)]
enum Racing {
    /// Producer B stages offsets 10..=19 (TxnShareAcknowledge).
    Staging,
    /// m1 releases offsets 10..=19 (ShareAcknowledge RELEASE).
    Release,
}

/// Producer A's COMMIT marker on a `__share_group_state` partition and another write of the
/// same share partition (`racing`), both queued while the share-state coordinator's pass is
/// busy with a third write. The coordinator must apply the marker where the log has it, and a
/// write must be computed from the state it lands after, or replay (after kill -9) differs
/// from the live state.
///
/// Before the share-state coordinator ran on the coordinator runtime (decision 0019) the
/// marker was appended as soon as the transaction coordinator wrote it and applied to the
/// store once the store was free — after the write queued ahead of it; and a state write was
/// computed under one hold of the store and appended under another. Either way the log held,
/// after the marker, a record computed before it, carrying the start offset the share
/// partition had before the commit (the first committed record). Replay applied the marker
/// (start past the committed records, their batches dropped), then that record, which moved
/// the start back over them: after the restart the committed records read back as never
/// delivered and were delivered and committed again — the 100 duplicated outputs `shoal
/// verify` found after broker kills. On that design both cases fail; on the runtime, whose
/// one serial shard emits every record and marker in log order, they pass.
///
/// The schedule is forced with locks the broker itself takes: the test holds the fsync of the
/// `__share_group_state` partition of another share partition while that share partition is
/// initialized (its pass then waits for the fsync, and every input queues behind it), queues
/// the racing write behind it, and commits A's staging meanwhile. Offsets 0..=9 are A's,
/// 10..=19 the racing write's; after the restart a new member must get none of A's records
/// again.
async fn marker_racing(racing: Racing) {
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    // Four partitions of 10 records; partition 0 gets 10 more (offsets 10..=19).
    let topic_id = setup_locked(&broker, &mut conn, 4, 30_000).await;
    let values: Vec<String> = (10..20).map(|i| format!("r{i}")).collect();
    assert_eq!(
        common::share::produce_values(&mut conn, common::share::TOPIC, 0, &values).await,
        10
    );
    // m2 joins first (m1's epoch stays the one it joins with), on its own connection.
    let mut conn2 = broker.connect().await;
    join(&mut conn2, "m2").await;
    let member_epoch = join(&mut conn, "m1").await;
    let acquired: i64 = acquire(&mut conn, topic_id, "m1", &[0])
        .await
        .iter()
        .map(|(_, first, last, _)| last - first + 1)
        .sum();
    assert_eq!(acquired, 20);
    // Producers on their own connection: m1's carries its share session.
    let mut producers = broker.connect().await;
    let ack = |(code, pid, epoch): (i16, i64, i16)| {
        assert_eq!(code, 0);
        Ack {
            pid,
            epoch,
            member: "m1",
            member_epoch,
        }
    };
    let a = ack(txn::init(&mut producers, 5, "producer-a", 60_000).await);
    let b = ack(txn::init(&mut producers, 5, "producer-b", 60_000).await);
    let r = txn_ack_as(
        &mut producers,
        "producer-a",
        &a,
        topic_id,
        vec![(0, vec![common::share::ack_batch(0, 9, vec![ACCEPT])])],
    )
    .await;
    assert_eq!(codes(&r), (0, vec![0]));

    // A share partition stored on another `__share_group_state` partition than topic-0's.
    let p = state_partition(&broker, topic_id, 0);
    let other = (1..4)
        .find(|&q| state_partition(&broker, topic_id, q) != p)
        .expect("a share partition stored elsewhere");
    let other_state = broker
        .broker
        .topic(SHARE_GROUP_STATE)
        .unwrap()
        .partition(state_partition(&broker, topic_id, other))
        .unwrap();
    let gate = other_state.flush_gate.lock().await;

    // 1. m2's first fetch of the other share partition initializes it: its write holds the
    //    store and waits for its fsync, which the test holds.
    let initializing = tokio::spawn(async move {
        acquire(&mut conn2, topic_id, "m2", &[other]).await;
        conn2
    });
    let mut store_busy = false;
    for _ in 0..200 {
        let probe = broker.broker.share.tx_pending_records(None);
        if tokio::time::timeout(Duration::from_millis(50), probe)
            .await
            .is_err()
        {
            store_busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(store_busy, "the initialization never held the store");

    // 2. The racing write of topic-0's share partition: it locks the share partition, then
    //    queues on the store.
    let mut conn3 = broker.connect().await;
    let write = tokio::spawn(async move {
        let code = match racing {
            Racing::Staging => {
                let r = txn_ack_as(
                    &mut conn3,
                    "producer-b",
                    &b,
                    topic_id,
                    vec![(0, vec![common::share::ack_batch(10, 19, vec![ACCEPT])])],
                )
                .await;
                codes(&r)
            }
            Racing::Release => {
                let batch = common::share::ack_batch(10, 19, vec![common::share::RELEASE]);
                let (top, partition) =
                    common::share::acknowledge(&mut conn, topic_id, "m1", 1, vec![batch]).await;
                (top, vec![partition])
            }
        };
        (code, conn)
    });
    let slot = broker.broker.share.slot(&key(topic_id, 0));
    for _ in 0..500 {
        if slot.state.try_lock().is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        slot.state.try_lock().is_err(),
        "the racing write never started"
    );
    // From the share partition's lock to the store's there is no wait.
    tokio::time::sleep(Duration::from_millis(100)).await;

    // 3. A commits; the coordinator writes its marker to topic-0's state partition meanwhile.
    let (code, _) = txn::end(&mut producers, 5, "producer-a", a.pid, a.epoch, true).await;
    assert_eq!(code, 0);
    tokio::time::sleep(Duration::from_millis(200)).await;

    // 4. Everything goes through.
    drop(gate);
    let _conn2 = initializing.await.unwrap();
    let (code, conn) = write.await.unwrap();
    assert_eq!(code, (0, vec![0]));
    txn::wait_complete(&broker, "producer-a").await;

    // Live: A's records acknowledged, the start past them.
    let live = (
        persisted_start(&broker, topic_id, 0).await.0,
        persisted(&broker, topic_id, 0).await,
    );
    let rest = match racing {
        Racing::Staging => (10, 19, 5),
        Racing::Release => (10, 19, 0),
    };
    assert_eq!(live, (10, vec![rest]));
    drop(conn);
    broker.crash().await;

    // Replayed: the same, and nobody gets A's committed records again.
    let broker = start(dir.path()).await;
    let replayed = (
        persisted_start(&broker, topic_id, 0).await.0,
        persisted(&broker, topic_id, 0).await,
    );
    let (_conn, acquired) = newcomer(&broker, topic_id, "m3").await;
    let expected = match racing {
        Racing::Staging => vec![],
        Racing::Release => vec![(0, 10, 19, 2)],
    };
    assert_eq!(acquired, expected, "committed records delivered again");
    assert_eq!(replayed, live);
    broker.stop().await;
}

/// [`marker_racing`] with another producer's staging.
#[tokio::test]
async fn a_marker_racing_a_staging_is_replayed_where_the_store_applied_it() {
    marker_racing(Racing::Staging).await;
}

/// [`marker_racing`] with a member's release.
#[tokio::test]
async fn a_marker_racing_a_release_is_replayed_where_the_store_applied_it() {
    marker_racing(Racing::Release).await;
}
