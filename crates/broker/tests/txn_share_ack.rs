//! TxnShareAcknowledge (KIP-1289) over the wire: a transactional producer stages a share
//! consumer's acknowledgements, the transaction's COMMIT acknowledges them and its ABORT makes
//! them available again, locks and members do not move staged records, and every refusal
//! stages nothing. Broker crashes are in `txn_share_ack_crash.rs`. Test names carry the
//! proposal's corner case (`caseN`) or the spec's guarantee (`gN`, spec §5) they check.

mod common;

use std::time::Duration;

use common::features::{
    advertised, api_versions, feature, set_share_version, update, SAFE_DOWNGRADE, UPGRADE,
};
use common::share::{
    ack_batch, acknowledge, heartbeat, ACCEPT, GAP, GROUP, REJECT, RELEASE, RENEW,
};
use common::txn;
use common::txn::{committed_values, txn_batch};
use common::txn_share::*;
use kafka_protocol::messages::{GroupId, ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use shoal_broker::coordinators::txn_coordinator::{COORDINATOR_EPOCH_FILE, TRANSACTION_STATE};
use shoal_broker::share::SHARE_GROUP_STATE;
use shoal_core::share_coordinator::StagedTxn;
use shoal_core::share_partition::RecordState;
use shoal_core::txn_coordinator::partition_for;
use shoal_protocol::messages::ApiKey;
use shoal_protocol::share::txn_share_acknowledge::{
    TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest, TxnShareAcknowledgeTopic,
};
use shoal_protocol::share::TxnShareAcknowledgeResponse;
use shoal_protocol::ErrorCode;
use uuid::Uuid;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

#[tokio::test]
async fn g6_commit_acknowledges_staged_records_and_abort_makes_them_available() {
    let (_dir, broker, mut conn, topic_id, mut a) = staged(60000).await;

    // Stage 0..=4 (ACCEPT, REJECT for 4) and commit.
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(
            0,
            vec![ack_batch(
                0,
                4,
                vec![ACCEPT, ACCEPT, ACCEPT, ACCEPT, REJECT],
            )],
        )],
    )
    .await;
    assert_eq!(codes(&r), (0, vec![0]));
    // Two stagings (their ack types differ), persisted as state 5.
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![
            (0, 3, RecordState::TxPending),
            (4, 4, RecordState::TxPending),
            (5, 9, RecordState::Acquired)
        ]
    );
    assert_eq!(
        persisted(&broker, topic_id, 0).await,
        vec![(0, 3, 5), (4, 4, 5)]
    );
    a.epoch = resolve(&broker, &mut conn, &a, true).await;
    // ACCEPT acknowledged, REJECT archived: the SPSO moves past them.
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(5, 9, RecordState::Acquired)]
    );
    // The persisted start offset moves past them too (the terminal batches are pruned).
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted_start(&broker, topic_id, 0).await, (5, 0));
    // Observability: the staged and committed counters, the gauge back at 0, and the
    // time-in-TX_PENDING histogram observed once per resolved record.
    let value = |name: &str| metric(&broker, name);
    assert_eq!(
        value("shoal_share_partition_txn_staged_records_total"),
        vec!["5"]
    );
    assert_eq!(
        value("shoal_share_partition_txn_committed_records_total"),
        vec!["5"]
    );
    assert_eq!(
        value("shoal_share_partition_txn_pending_records"),
        vec!["0"]
    );
    assert_eq!(
        value("shoal_share_txn_pending_time_seconds_count"),
        vec!["5"]
    );

    // Stage 5..=9 and abort: available again, and redelivered to another member at once.
    stage(&mut conn, &a, topic_id, 5, 9, ACCEPT).await;
    resolve(&broker, &mut conn, &a, false).await;
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(5, 9, RecordState::Available)]
    );
    let (_m2, acquired) = newcomer(&broker, topic_id, "m2").await;
    assert_eq!(acquired, vec![(0, 5, 9, 2)]);
    broker.stop().await;
}

#[tokio::test]
async fn case10_release_renew_and_unknown_types_are_refused_and_gap_is_staged() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    for t in [RELEASE, RENEW, 9, -1] {
        let r = txn_ack(
            &mut conn,
            &a,
            topic_id,
            vec![(0, vec![ack_batch(0, 0, vec![t])])],
        )
        .await;
        let code = ErrorCode::INVALID_RECORD_STATE.code();
        assert_eq!(codes(&r), (code, vec![code]), "type {t}");
    }
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    // GAP (0) has transactional meaning: staged like REJECT.
    stage(&mut conn, &a, topic_id, 0, 0, GAP).await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 1);
    broker.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_invalid_request_and_stage_nothing() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    let invalid = ErrorCode::INVALID_REQUEST.code();
    for batches in [
        vec![ack_batch(3, 2, vec![ACCEPT])],
        vec![ack_batch(0, 3, vec![ACCEPT, ACCEPT])],
        vec![ack_batch(0, 3, vec![ACCEPT]), ack_batch(2, 5, vec![ACCEPT])],
        vec![ack_batch(4, 5, vec![ACCEPT]), ack_batch(0, 1, vec![ACCEPT])],
        vec![ack_batch(-1, 1, vec![ACCEPT])],
        vec![],
    ] {
        let r = txn_ack(&mut conn, &a, topic_id, vec![(0, batches.clone())]).await;
        assert_eq!(codes(&r), (invalid, vec![invalid]), "{batches:?}");
    }
    // Structure comes before types: a malformed batch with a RELEASE is INVALID_REQUEST.
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(3, 2, vec![RELEASE])])],
    )
    .await;
    assert_eq!(codes(&r).0, invalid);
    // A partition named twice.
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![
            (0, vec![ack_batch(0, 0, vec![ACCEPT])]),
            (0, vec![ack_batch(1, 1, vec![ACCEPT])]),
        ],
    )
    .await;
    assert_eq!(codes(&r).0, invalid);
    // Empty member id, null group id.
    let empty = Ack { member: "", ..a };
    let r = txn_ack(
        &mut conn,
        &empty,
        topic_id,
        vec![(0, vec![ack_batch(0, 0, vec![ACCEPT])])],
    )
    .await;
    assert_eq!(codes(&r).0, invalid);
    let r: TxnShareAcknowledgeResponse = conn
        .request(
            0,
            &TxnShareAcknowledgeRequest {
                transactional_id: Some(TransactionalId(s(TID))),
                group_id: None,
                producer_id: ProducerId(empty.pid),
                producer_epoch: empty.epoch,
                member_id: Some(s("m1")),
                member_epoch: empty.member_epoch,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, invalid);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    broker.stop().await;
}

#[tokio::test]
async fn case3_case8_case14_producer_and_member_checks_stage_nothing() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    let batches = || vec![(0, vec![ack_batch(0, 0, vec![ACCEPT])])];
    let cases = [
        (
            Ack {
                member_epoch: a.member_epoch - 1,
                ..a
            },
            ErrorCode::STALE_MEMBER_EPOCH,
        ),
        (
            Ack {
                member_epoch: a.member_epoch + 1,
                ..a
            },
            ErrorCode::FENCED_MEMBER_EPOCH,
        ),
        (
            Ack {
                member: "stranger",
                ..a
            },
            ErrorCode::UNKNOWN_MEMBER_ID,
        ),
        (
            Ack {
                pid: a.pid + 1000,
                ..a
            },
            ErrorCode::INVALID_PRODUCER_ID_MAPPING,
        ),
        (
            Ack {
                epoch: a.epoch + 1,
                ..a
            },
            ErrorCode::PRODUCER_FENCED,
        ),
        // The producer's error takes precedence over the member's.
        (
            Ack {
                epoch: a.epoch + 1,
                member: "stranger",
                ..a
            },
            ErrorCode::PRODUCER_FENCED,
        ),
    ];
    for (ack, expected) in cases {
        let r = txn_ack(&mut conn, &ack, topic_id, batches()).await;
        assert_eq!(
            codes(&r),
            (expected.code(), vec![expected.code()]),
            "{expected:?}"
        );
    }
    // An unknown transactional id.
    let r: TxnShareAcknowledgeResponse = conn
        .request(
            0,
            &TxnShareAcknowledgeRequest {
                transactional_id: Some(TransactionalId(s("nobody"))),
                group_id: Some(GroupId(s(GROUP))),
                producer_id: ProducerId(a.pid),
                producer_epoch: a.epoch,
                member_id: Some(s("m1")),
                member_epoch: a.member_epoch,
                topics: vec![TxnShareAcknowledgeTopic {
                    topic_id,
                    partitions: vec![TxnShareAcknowledgePartition {
                        partition_index: 0,
                        acknowledgement_batches: vec![ack_batch(0, 0, vec![ACCEPT])],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.code());
    // Unknown topic id: per partition.
    let r = txn_ack(&mut conn, &a, Uuid::new_v4(), batches()).await;
    let unknown = ErrorCode::UNKNOWN_TOPIC_ID.code();
    assert_eq!(codes(&r), (unknown, vec![unknown]));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);

    // case 3 / case 5: a new instance fences the zombie: the zombie's staging is aborted
    // (records AVAILABLE) and its later requests are fenced.
    let r = txn_ack(&mut conn, &a, topic_id, batches()).await;
    assert_eq!(codes(&r), (0, vec![0]));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 1);
    let (pid2, epoch2) = init(&mut conn, 60000).await;
    assert_eq!(pid2, a.pid);
    assert!(epoch2 > a.epoch);
    wait_resolved(&broker).await;
    assert_eq!(
        live(&broker, topic_id, 0).await[0],
        (0, 0, RecordState::Available)
    );
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(1, 1, vec![ACCEPT])])],
    )
    .await;
    let fenced = ErrorCode::PRODUCER_FENCED.code();
    assert_eq!(codes(&r), (fenced, vec![fenced]));
    broker.stop().await;
}

#[tokio::test]
async fn g9_case11_a_refused_partition_stages_nothing_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    let topic_id = setup(&broker, &mut conn, 2).await;
    let member_epoch = join(&mut conn, "m1").await;
    // A new group's first fetch takes one initialising partition, as Kafka's; the next the other.
    let mut acquired = acquire(&mut conn, topic_id, "m1", &[0, 1]).await;
    let next = common::share::share_fetch(&mut conn, topic_id, "m1", 1, vec![], 2000, 1 << 20);
    acquired.extend(common::share::acquired_ranges(&next.await));
    assert_eq!(acquired, vec![(0, 0, 9, 1), (1, 0, 9, 1)]);
    let (pid, epoch) = init(&mut conn, 60000).await;
    let a = Ack {
        pid,
        epoch,
        member: "m1",
        member_epoch,
    };
    // Partition 1's offset 10 was never acquired.
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![
            (0, vec![ack_batch(0, 9, vec![ACCEPT])]),
            (1, vec![ack_batch(5, 10, vec![ACCEPT])]),
        ],
    )
    .await;
    let invalid = ErrorCode::INVALID_RECORD_STATE.code();
    assert_eq!(codes(&r), (invalid, vec![invalid, invalid]));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(0, 9, RecordState::Acquired)]
    );
    assert_eq!(
        live(&broker, topic_id, 1).await,
        vec![(0, 9, RecordState::Acquired)]
    );
    // Both valid: both staged.
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![
            (0, vec![ack_batch(0, 9, vec![ACCEPT])]),
            (1, vec![ack_batch(0, 9, vec![REJECT])]),
        ],
    )
    .await;
    assert_eq!(codes(&r), (0, vec![0, 0]));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 20);
    broker.stop().await;
}

#[tokio::test]
async fn tx_pending_records_refuse_other_acknowledgements_and_outlive_their_member() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    stage(&mut conn, &a, topic_id, 0, 4, ACCEPT).await;
    let released = acknowledge(
        &mut conn,
        topic_id,
        "m1",
        1,
        vec![ack_batch(0, 0, vec![RELEASE])],
    )
    .await;
    assert_eq!(released, (0, ErrorCode::INVALID_RECORD_STATE.code()));
    // The member's connection closes (its session ends): ACQUIRED 5..=9 are released,
    // TX_PENDING 0..=4 stay with the transaction.
    drop(conn);
    let mut released = false;
    for _ in 0..250 {
        if live(&broker, topic_id, 0).await
            == vec![
                (0, 4, RecordState::TxPending),
                (5, 9, RecordState::Available),
            ]
        {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(released, "{:?}", live(&broker, topic_id, 0).await);
    let mut conn = broker.connect().await;
    resolve(&broker, &mut conn, &a, true).await;
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(5, 9, RecordState::Available)]
    );
    broker.stop().await;
}

#[tokio::test]
async fn g3_case7_a_transaction_that_times_out_makes_its_staged_records_available() {
    let (_dir, broker, mut conn, topic_id, a) = staged(1000).await;
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    // The coordinator aborts the abandoned transaction (transaction.timeout.ms = 1 s; its
    // timer is bounded by the wait below).
    for _ in 0..1000 {
        if broker.broker.share.tx_pending_records(None).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_resolved(&broker).await;
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(0, 9, RecordState::Available)]
    );
    broker.stop().await;
}

#[tokio::test]
async fn reset_and_delete_wait_for_the_transactions_holding_a_group() {
    use common::share::{alter_offsets, delete_offsets};
    use kafka_protocol::messages::DeleteGroupsRequest;
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    stage(&mut conn, &a, topic_id, 0, 4, ACCEPT).await;
    // The member leaves: the group has no member, but its records are staged.
    heartbeat(&mut conn, "m1", -1).await;
    let alter = alter_offsets(0);
    let delete_offsets = delete_offsets();
    let delete_group = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(GROUP))]);
    let non_empty = ErrorCode::NON_EMPTY_GROUP.code();
    assert_eq!(conn.request(0, &alter).await.unwrap().error_code, non_empty);
    assert_eq!(
        conn.request(0, &delete_offsets).await.unwrap().error_code,
        non_empty
    );
    let deleted = conn.request(2, &delete_group).await.unwrap();
    assert_eq!(deleted.results[0].error_code, non_empty);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 5);
    // Once the transaction commits, the group is free.
    resolve(&broker, &mut conn, &a, true).await;
    assert_eq!(persisted_start(&broker, topic_id, 0).await.0, 5);
    assert_eq!(conn.request(0, &alter).await.unwrap().error_code, 0);
    let deleted = conn.request(2, &delete_group).await.unwrap();
    assert_eq!(deleted.results[0].error_code, 0);
    broker.stop().await;
}

/// case 6: an acquisition lock does not expire TX_PENDING records (spec §2, "locks do not
/// expire TX_PENDING"). m1 stages 0..=4 and keeps 5..=9 merely acquired, under 1 s locks. Once
/// the lock deadline is past and the broker's lock timer has run, 5..=9 are AVAILABLE again
/// (so the timer did run over this partition), while 0..=4 are still TX_PENDING in the
/// transaction, held by no member under no deadline, and another member acquires only 5..=9.
/// The transaction's COMMIT then acknowledges 0..=4.
#[tokio::test]
async fn case6_an_expired_lock_leaves_tx_pending_records_to_their_transaction() {
    let (_dir, broker, mut conn, topic_id, a) = staged_locked(60000, 1000).await;
    let deadline = lock_deadline(&broker, topic_id).await;
    stage(&mut conn, &a, topic_id, 0, 4, ACCEPT).await;
    let staged_txn = Some(StagedTxn {
        producer_id: a.pid,
        producer_epoch: a.epoch,
        ack_type: ACCEPT,
        dead_lettered: false,
    });
    let tx_pending = unheld(0, 4, RecordState::TxPending, 1, staged_txn);
    let expired = unheld(5, 9, RecordState::Available, 1, None);
    wait_ranges_after(
        &broker,
        topic_id,
        deadline,
        vec![tx_pending.clone(), expired],
    )
    .await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 5);
    let (_m2, acquired) = newcomer(&broker, topic_id, "m2").await;
    assert_eq!(acquired, vec![(0, 5, 9, 2)]);
    assert_eq!(ranges(&broker, topic_id, 0).await[0], tx_pending);
    resolve(&broker, &mut conn, &a, true).await;
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(5, 9, RecordState::Acquired)]
    );
    // Acknowledged: the persisted start offset moved past them.
    assert_eq!(persisted_start(&broker, topic_id, 0).await.0, 5);
    broker.stop().await;
}

/// g1, consumer crash before begin: m1 acquires records and dies before any transaction
/// began: its connection drops and it never leaves the group. Nothing is lost or duplicated:
/// once its 1 s acquisition lock is past, the records are AVAILABLE with m1's attempt
/// counted, none is TX_PENDING, and another member gets every one of them exactly once more
/// (delivery count 2). (Shoal ends a share session with its connection and releases what it
/// held at once; the lock bounds the wait either way.)
#[tokio::test]
async fn g1_a_consumer_crash_before_begin_redelivers_its_records_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    let (topic_id, _) = acquired_setup(&broker, &mut conn, 1000).await;
    let deadline = lock_deadline(&broker, topic_id).await;
    drop(conn);
    let released = unheld(0, 9, RecordState::Available, 1, None);
    wait_ranges_after(&broker, topic_id, deadline, vec![released]).await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    let (_m2, acquired) = newcomer(&broker, topic_id, "m2").await;
    assert_eq!(acquired, vec![(0, 0, 9, 2)]);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    broker.stop().await;
}

/// g5, zombie producer: instance A (producer and member m1) staged its records when instance
/// B of the same transactional id starts. B's InitProducerId fences A and aborts A's
/// transaction: the records are AVAILABLE with A's attempt counted. B's member acquires them,
/// B stages and commits: acknowledged, once (10 committed, 10 aborted, nothing pending). A's
/// late TxnShareAcknowledge and EndTxn are refused PRODUCER_FENCED and change nothing.
#[tokio::test]
async fn g5_a_zombie_producer_is_fenced_and_its_records_are_processed_once() {
    let (_dir, broker, mut zombie, topic_id, a) = staged(60000).await;
    stage(&mut zombie, &a, topic_id, 0, 9, ACCEPT).await;

    let mut conn = broker.connect().await;
    let (pid, epoch) = init(&mut conn, 60000).await;
    assert_eq!(pid, a.pid);
    assert!(epoch > a.epoch, "B's epoch {epoch} fences A's {}", a.epoch);
    wait_resolved(&broker).await;
    assert_eq!(
        ranges(&broker, topic_id, 0).await,
        vec![unheld(0, 9, RecordState::Available, 1, None)]
    );
    let member_epoch = join(&mut conn, "m2").await;
    assert_eq!(
        acquire(&mut conn, topic_id, "m2", &[0]).await,
        vec![(0, 0, 9, 2)]
    );
    let b = Ack {
        pid,
        epoch,
        member: "m2",
        member_epoch,
    };
    stage(&mut conn, &b, topic_id, 0, 9, ACCEPT).await;
    resolve(&broker, &mut conn, &b, true).await;
    // All acknowledged: the persisted start offset is past them, nothing left in flight.
    let acknowledged = (vec![], (10, 0));
    let persisted_now = || async {
        (
            persisted(&broker, topic_id, 0).await,
            persisted_start(&broker, topic_id, 0).await,
        )
    };
    assert_eq!(persisted_now().await, acknowledged);

    // The zombie wakes up.
    let fenced = ErrorCode::PRODUCER_FENCED.code();
    let r = txn_ack(
        &mut zombie,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(0, 9, vec![ACCEPT])])],
    )
    .await;
    assert_eq!(codes(&r), (fenced, vec![fenced]));
    assert_eq!(end(&mut zombie, a.pid, a.epoch, true).await.0, fenced);
    assert_eq!(persisted_now().await, acknowledged);
    assert_eq!(live(&broker, topic_id, 0).await, vec![]);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    let counted = |name: &str| metric(&broker, name);
    assert_eq!(
        counted("shoal_share_partition_txn_committed_records_total"),
        vec!["10"]
    );
    assert_eq!(
        counted("shoal_share_partition_txn_aborted_records_total"),
        vec!["10"]
    );
    let described = broker.broker.txn.describe(vec![TID.into()]).await.unwrap();
    assert_eq!(described[0].state, "CompleteCommit");
    assert!(described[0].producer_epoch > epoch);
    broker.stop().await;
}

/// case 9: `share.version` below 3, as on a cluster that has not finalized KIP-1289 (the
/// draft's client then refuses before sending): ApiVersions does not list TxnShareAcknowledge,
/// and one sent anyway, well formed, from a real member and producer, is answered
/// UNSUPPORTED_VERSION with nothing staged and nothing added to the transaction. Back at 3 the
/// same request stages.
#[tokio::test]
async fn case9_below_share_version_3_txn_share_acknowledge_is_unsupported() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    set_share_version(&mut conn, 2, SAFE_DOWNGRADE).await;
    let listed = |r| advertised(&r, ApiKey::TxnShareAcknowledge);
    assert_eq!(listed(api_versions(&mut conn).await), None);
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(0, 9, vec![ACCEPT])])],
    )
    .await;
    // The feature gate answers before the handler, at the top level only (what the draft's
    // client reads first); no partition is reported staged.
    let unsupported = ErrorCode::UNSUPPORTED_VERSION.code();
    let (top, partitions) = codes(&r);
    assert_eq!(top, unsupported);
    assert!(
        partitions.iter().all(|&c| c == unsupported),
        "{partitions:?}"
    );
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(0, 9, RecordState::Acquired)]
    );
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    let described = broker.broker.txn.describe(vec![TID.into()]).await.unwrap();
    assert_eq!(described[0].state, "Empty");

    set_share_version(&mut conn, 3, UPGRADE).await;
    assert_eq!(listed(api_versions(&mut conn).await), Some((0, 0)));
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 9, 5)]);
    broker.stop().await;
}

/// case 2: the transaction coordinator cannot register the share-state partition. Its log
/// partition for the transactional id is shut down, as a clean shutdown leaves every log (and
/// as a failing disk fails every append): the coordinator cannot persist the registration and
/// so cannot answer it. TxnShareAcknowledge is answered COORDINATOR_NOT_AVAILABLE (retriable:
/// the producer aborts and tries again) and nothing is staged: the records stay ACQUIRED by the
/// member, nothing is persisted, and the transaction did not take the share-state partition.
#[tokio::test]
async fn case2_a_failed_coordinator_registration_stages_nothing() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    let txn_state = broker.broker.topic(TRANSACTION_STATE).unwrap();
    let owner = partition_for(TID, txn_state.partition_count() as u32) as i32;
    txn_state.partition(owner).unwrap().shutdown().unwrap();
    drop(txn_state);
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(0, 9, vec![ACCEPT])])],
    )
    .await;
    let unavailable = ErrorCode::COORDINATOR_NOT_AVAILABLE.code();
    assert_eq!(codes(&r), (unavailable, vec![unavailable]));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![(0, 9, RecordState::Acquired)]
    );
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    let described = broker.broker.txn.describe(vec![TID.into()]).await.unwrap();
    assert_eq!(described[0].state, "Empty");
    assert!(described[0].partitions.is_empty());
    broker.stop().await;
}

/// g2, crash after produce, before commit: the application acquired its input, produced its
/// output in a transaction (Produce v12 adds the partition) and then stopped dead before
/// staging or committing, its consumer connection left open and silent. The coordinator
/// aborts the transaction when its 1 s transaction.timeout.ms is past: a read_committed reader
/// of the output is answered a last stable offset past the ABORT marker with the batch listed
/// as aborted, so it reads nothing. The input's 1 s locks expire and the records go to another
/// member as their second delivery; none was ever TX_PENDING.
#[tokio::test]
async fn g2_a_crash_after_produce_aborts_the_output_and_redelivers_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut consumer = broker.connect().await;
    let (topic_id, _) = acquired_setup(&broker, &mut consumer, 1000).await;
    let deadline = lock_deadline(&broker, topic_id).await;
    common::create_topic(&mut consumer, OUT, 1).await;
    let mut producer = broker.connect().await;
    let (pid, epoch) = init(&mut producer, 1000).await;
    let output = txn_batch(pid, epoch, 0, "out-0");
    assert_eq!(
        txn::produce(&mut producer, 12, TID, OUT, 0, output).await,
        (0, 0)
    );
    drop(producer);

    txn::wait_complete(&broker, TID).await;
    let described = broker.broker.txn.describe(vec![TID.into()]).await.unwrap();
    assert_eq!(described[0].state, "CompleteAbort");
    txn::wait_lso(&mut consumer, OUT, 0, 2).await;
    let view = txn::read_committed(&mut consumer, OUT, 0).await;
    assert_eq!((view.high_watermark, view.last_stable_offset), (2, 2));
    let aborted: Vec<(i64, i64)> = view
        .aborted_transactions
        .iter()
        .flatten()
        .map(|t| (t.producer_id.0, t.first_offset))
        .collect();
    assert_eq!(aborted, vec![(pid, 0)]);
    assert_eq!(committed_values(&view), Vec::<String>::new());
    // The batch is there (read_uncommitted sees it); only its abort hides it.
    let uncommitted = txn::fetch(&mut consumer, OUT, 0, 0).await;
    assert_eq!(committed_values(&uncommitted), vec!["out-0"]);

    let expired = unheld(0, 9, RecordState::Available, 1, None);
    wait_ranges_after(&broker, topic_id, deadline, vec![expired]).await;
    let (_m2, acquired) = newcomer(&broker, topic_id, "m2").await;
    assert_eq!(acquired, vec![(0, 0, 9, 2)]);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    drop(consumer);
    broker.stop().await;
}

/// g7, partial produce failure: the application staged its acknowledgements and produced its
/// output to two partitions in one Produce; the broker takes the batch for one partition and
/// refuses the other's (larger than the topic's max.message.bytes: MESSAGE_TOO_LARGE), so the
/// client aborts. Everything rolls back: a read_committed reader finds no output on either
/// partition, and the staged records are AVAILABLE again with their delivery count (1: the
/// attempt counted), live and persisted.
#[tokio::test]
async fn g7_a_partial_produce_failure_rolls_back_output_and_acknowledgements() {
    let (_dir, broker, mut conn, topic_id, a) = staged(60000).await;
    common::create_topic(&mut conn, OUT, 2).await;
    common::alter_configs(
        &mut conn,
        common::TOPIC_RESOURCE,
        OUT,
        &[("max.message.bytes", "1024")],
    )
    .await;
    stage(&mut conn, &a, topic_id, 0, 9, ACCEPT).await;
    let too_large = "x".repeat(4096);
    let answers = common::produce_partitions(
        &mut conn,
        12,
        Some(TID),
        OUT,
        vec![
            (0, txn_batch(a.pid, a.epoch, 0, "out-0")),
            (1, txn_batch(a.pid, a.epoch, 0, &too_large)),
        ],
    )
    .await;
    assert_eq!(answers[0], (0, 0));
    assert_eq!(answers[1].0, ErrorCode::MESSAGE_TOO_LARGE.code());

    resolve(&broker, &mut conn, &a, false).await;
    txn::wait_lso(&mut conn, OUT, 0, 2).await;
    for partition in [0, 1] {
        let view = txn::read_committed(&mut conn, OUT, partition).await;
        assert_eq!(view.last_stable_offset, view.high_watermark);
        assert_eq!(committed_values(&view), Vec::<String>::new(), "{partition}");
    }
    let uncommitted = txn::fetch(&mut conn, OUT, 0, 0).await;
    assert_eq!(committed_values(&uncommitted), vec!["out-0"]);
    assert_eq!(
        ranges(&broker, topic_id, 0).await,
        vec![unheld(0, 9, RecordState::Available, 1, None)]
    );
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 9, 0)]);
    let batch = &persisted_batches(&broker, topic_id, 0).await[0];
    assert_eq!((batch.delivery_count, batch.staged_txn), (1, None));
    broker.stop().await;
}

/// g8 / case 5, duplicate and late markers: once a COMMIT resolved a staging, the same marker
/// delivered again to the share-state partition (a coordinator's retry, WriteTxnMarkers) is
/// appended and handed to the share-state participant, which finds nothing TX_PENDING: the
/// live and persisted states are unchanged. An ABORT at the staging's epoch, older than the
/// producer's since the commit bumped it, is refused INVALID_PRODUCER_EPOCH. And when the
/// producer's next transaction has staged more records, a late marker at the older epoch
/// does not resolve them: they stay TX_PENDING until their own transaction commits.
#[tokio::test]
async fn g8_case5_duplicate_and_late_markers_change_nothing() {
    let (dir, broker, mut conn, topic_id, mut a) = staged(60000).await;
    let n = state_partition(&broker, topic_id, 0);
    let states = || async {
        (
            ranges(&broker, topic_id, 0).await,
            persisted_batches(&broker, topic_id, 0).await,
            persisted_start(&broker, topic_id, 0).await,
        )
    };
    stage(&mut conn, &a, topic_id, 0, 4, ACCEPT).await;
    let older = a.epoch;
    a.epoch = resolve(&broker, &mut conn, &a, true).await;
    let resolved = states().await;
    // 0..=4 acknowledged: the persisted start offset moved past them.
    assert_eq!((resolved.1.len(), resolved.2), (0, (5, 0)), "{resolved:?}");
    let commits = broker.broker.share.markers_applied().await.commits;

    // The COMMIT again (transaction version 2 markers carry the bumped epoch).
    let code = share_state_marker(&mut conn, dir.path(), n, a.pid, a.epoch, true).await;
    assert_eq!(code, 0);
    assert_eq!(
        broker.broker.share.markers_applied().await.commits,
        commits + 1
    );
    assert_eq!(states().await, resolved);
    // An ABORT of the resolved transaction, at its epoch.
    let code = share_state_marker(&mut conn, dir.path(), n, a.pid, older, false).await;
    assert_eq!(code, ErrorCode::INVALID_PRODUCER_EPOCH.code());
    assert_eq!(states().await, resolved);

    // The next transaction stages 5..=9; a late marker of the older epoch leaves them be.
    stage(&mut conn, &a, topic_id, 5, 9, REJECT).await;
    let pending = states().await;
    let staging = StagedTxn {
        producer_id: a.pid,
        producer_epoch: a.epoch,
        ack_type: REJECT,
        dead_lettered: false,
    };
    assert_eq!(
        pending.0,
        vec![unheld(5, 9, RecordState::TxPending, 1, Some(staging))]
    );
    for commit in [true, false] {
        let code = share_state_marker(&mut conn, dir.path(), n, a.pid, older, commit).await;
        assert_eq!(code, ErrorCode::INVALID_PRODUCER_EPOCH.code());
    }
    assert_eq!(states().await, pending);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 5);
    // Their own COMMIT resolves them (REJECT: archived), and everything is terminal.
    resolve(&broker, &mut conn, &a, true).await;
    assert_eq!(live(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(persisted_start(&broker, topic_id, 0).await, (10, 0));
    broker.stop().await;
}

/// WriteTxnMarkers of a COMMIT (`commit`) or ABORT marker of producer `pid` at `epoch` to
/// `__share_group_state`-`n`, at the coordinator epoch of the data directory `dir`'s current
/// transaction coordinator: the partition's error.
async fn share_state_marker(
    conn: &mut shoal_client::Connection,
    dir: &std::path::Path,
    n: i32,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> i16 {
    let coordinator_epoch = std::fs::read_to_string(dir.join(COORDINATOR_EPOCH_FILE))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    txn::write_marker(
        conn,
        pid,
        epoch,
        commit,
        coordinator_epoch,
        SHARE_GROUP_STATE,
        n,
    )
    .await
}

/// Spec §3.5: a downgrade below `share.version` 3 sent together with a staging is ordered
/// against it (the broker's feature gate): either the downgrade comes first and the staging
/// is refused with UNSUPPORTED_VERSION, or the staging comes first and the downgrade counts
/// its record and is refused. Never both, which would leave a record TX_PENDING under a
/// level that serves no TxnShareAcknowledge. Each round stages one more offset and sends the
/// downgrade a little later, so that rounds land in the staging's window between its level
/// check and its write. (The race is timing-dependent: with the handler's share of the gate
/// removed, some runs see both succeed and fail here; with it, none can.)
#[tokio::test]
async fn a_downgrade_racing_a_staging_never_leaves_records_tx_pending_below_level_3() {
    let (_dir, broker, mut conn, topic_id, mut a) = staged(60000).await;
    let mut admin = broker.connect().await;
    let delays_us = [0, 100, 200, 400, 700, 1000, 1500, 2000, 3000, 5000];
    for (offset, delay_us) in delays_us.into_iter().enumerate() {
        let offset = offset as i64;
        let (staged, downgraded) = tokio::join!(
            txn_ack(
                &mut conn,
                &a,
                topic_id,
                vec![(0, vec![ack_batch(offset, offset, vec![ACCEPT])])],
            ),
            async {
                tokio::time::sleep(Duration::from_micros(delay_us)).await;
                let downgrade = feature("share.version", 2, SAFE_DOWNGRADE);
                update(&mut admin, vec![downgrade], false).await[0].1
            },
        );
        let staged = codes(&staged).0;
        let pending = broker.broker.share.tx_pending_records(None).await;
        match (staged, downgraded) {
            (0, code) => {
                assert_eq!(code, ErrorCode::INVALID_UPDATE_VERSION.code());
                assert_eq!(pending, 1);
                // Commit, so that the next round's downgrade may pass again.
                a.epoch = resolve(&broker, &mut conn, &a, true).await;
            }
            (code, 0) => {
                assert_eq!(code, ErrorCode::UNSUPPORTED_VERSION.code());
                assert_eq!(pending, 0);
                set_share_version(&mut admin, 3, UPGRADE).await;
            }
            other => panic!("round {offset}: staging and downgrade answered {other:?}"),
        }
    }
    drop((conn, admin));
    broker.stop().await;
}

/// Decision 0019: a staging whose transaction already ended on its state partition is refused
/// PRODUCER_FENCED by the share-state coordinator, and nothing is staged. The window is a
/// TxnShareAcknowledge registered with the transaction coordinator whose staging arrives after
/// a marker of a newer epoch reached `__share_group_state`-N; here the marker is sent with
/// WriteTxnMarkers (as `kafka-transactions abort` would) while the coordinator still sees the
/// transaction Ongoing, so the registration passes and only the share-state coordinator can
/// refuse. Staged anyway, the records would stay TX_PENDING for ever: no marker of that
/// transaction would come again.
#[tokio::test]
async fn a_staging_after_its_transaction_ended_on_the_state_partition_is_fenced() {
    let (dir, broker, mut conn, topic_id, a) = staged(60000).await;
    let n = state_partition(&broker, topic_id, 0);
    // The transaction is open at the coordinator (it produced), and already ended on
    // __share_group_state-N: an ABORT of the next epoch is there.
    stage(&mut conn, &a, topic_id, 0, 0, ACCEPT).await;
    let code = share_state_marker(&mut conn, dir.path(), n, a.pid, a.epoch + 1, false).await;
    assert_eq!(code, 0);
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    let before = persisted_batches(&broker, topic_id, 0).await;
    let r = txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(1, 3, vec![ACCEPT])])],
    )
    .await;
    let fenced = ErrorCode::PRODUCER_FENCED.code();
    assert_eq!(codes(&r), (fenced, vec![fenced]));
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    assert_eq!(persisted_batches(&broker, topic_id, 0).await, before);
    assert_eq!(
        live(&broker, topic_id, 0).await,
        vec![
            (0, 0, RecordState::Available),
            (1, 9, RecordState::Acquired)
        ],
        "offset 0 made available again by the ABORT, the rest still the member's"
    );
    broker.stop().await;
}
