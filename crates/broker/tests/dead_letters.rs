//! Share-group dead-letter queues (KIP-1191) on the broker: rejected records pass through
//! ARCHIVING while their dead letters are written, then ARCHIVED; and a crash at either side
//! of the dead-letter write (kill -9, the logs cut to what a lost page cache leaves) ends with
//! each dead letter written exactly once; a REJECT staged in a transaction is dead-lettered
//! only if the transaction commits.

mod common;

use std::time::Duration;

use common::log_cut::{batches, cut_last_batch, first_segment};
use common::share::{ack_batch, acknowledge, configure_group, setup_share_topic, ACCEPT, REJECT};
use common::txn_share::{
    acquire, join, persisted, persisted_start, resolve, stage, staged_setup, state_partition,
};
use common::{alter_configs, create_topic, TestBroker, TOPIC_RESOURCE};
use shoal_broker::share::SHARE_GROUP_STATE;
use uuid::Uuid;

const DLQ: &str = "dlq.queue";

/// (source offset, value, delivery count, message) of every dead letter in [`DLQ`]-0.
fn dead_letters(dir: &std::path::Path) -> Vec<(i64, Option<String>, String, String)> {
    let header = |r: &shoal_storage::RecordView, name: &str| {
        let h = r
            .headers
            .iter()
            .rev()
            .find(|h| h.key.as_ref() == name.as_bytes());
        String::from_utf8(h.unwrap().value.clone().unwrap().to_vec()).unwrap()
    };
    batches(&first_segment(dir, DLQ, 0))
        .into_iter()
        .flat_map(|(_, records)| records)
        .map(|r| {
            (
                header(&r, "__dlq.errors.offset").parse().unwrap(),
                r.value
                    .as_ref()
                    .map(|v| String::from_utf8(v.to_vec()).unwrap()),
                header(&r, "__dlq.errors.delivery.count"),
                header(&r, "__dlq.errors.message"),
            )
        })
        .collect()
}

/// Waits until the share partition's persisted start offset is `start`.
async fn wait_start(broker: &TestBroker, topic_id: Uuid, start: i64) {
    for _ in 0..250 {
        if persisted_start(broker, topic_id, 0).await.0 == start {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "start offset {:?}, persisted {:?}",
        persisted_start(broker, topic_id, 0).await,
        persisted(broker, topic_id, 0).await
    );
}

/// A broker in `dir` whose group dead-letters into [`DLQ`] (copying records), with ten records
/// of which 0-4 were rejected and 5-9 accepted, and every dead letter written.
async fn rejected(dir: &std::path::Path) -> (TestBroker, Uuid) {
    rejected_at(dir, None).await
}

/// [`rejected`], with `share.version` moved to `share_version` first.
async fn rejected_at(dir: &std::path::Path, share_version: Option<i16>) -> (TestBroker, Uuid) {
    let broker = TestBroker::start(dir).await;
    let mut conn = broker.connect().await;
    if let Some(level) = share_version {
        common::features::set_share_version(&mut conn, level, common::features::SAFE_DOWNGRADE)
            .await;
    }
    create_topic(&mut conn, DLQ, 1).await;
    alter_configs(
        &mut conn,
        TOPIC_RESOURCE,
        DLQ,
        &[("errors.deadletterqueue.group.enable", "true")],
    )
    .await;
    let configs = [
        ("share.auto.offset.reset", "earliest"),
        ("errors.deadletterqueue.topic.name", DLQ),
        ("errors.deadletterqueue.copy.record.enable", "true"),
    ];
    let topic_id = setup_share_topic(&broker, &mut conn, 1, &[10], &configs).await;
    join(&mut conn, "m1").await;
    assert_eq!(
        acquire(&mut conn, topic_id, "m1", &[0]).await,
        vec![(0, 0, 9, 1)]
    );
    let acks = vec![ack_batch(0, 4, vec![REJECT]), ack_batch(5, 9, vec![ACCEPT])];
    assert_eq!(
        acknowledge(&mut conn, topic_id, "m1", 1, acks).await,
        (0, 0)
    );
    wait_start(&broker, topic_id, 10).await;
    drop(conn);
    (broker, topic_id)
}

fn expected() -> Vec<(i64, Option<String>, String, String)> {
    (0..5)
        .map(|i| {
            (
                i,
                Some(format!("r{i}")),
                "1".to_string(),
                "Offset rejected by client.".to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn rejected_records_are_dead_lettered_then_archived() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, topic_id) = rejected(dir.path()).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(dead_letters(dir.path()), expected());
    broker.stop().await;
}

/// Below `share.version` 2 (Kafka 4.2's level) the group's dead-letter topic has no effect:
/// rejected records are archived at once, as before.
#[tokio::test]
async fn below_share_version_2_rejected_records_get_no_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, topic_id) = rejected_at(dir.path(), Some(1)).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![]);
    assert_eq!(dead_letters(dir.path()), vec![]);
    broker.stop().await;
}

/// kill -9 after the dead letters were written and before ARCHIVED was persisted: the
/// restarted broker finds the records ARCHIVING, finds their dead letters already in the
/// dead-letter partition, and archives them without writing them again. With `lost_letters`,
/// the crash lost the dead letters too (written, not yet written back): they are written
/// after the restart, once.
async fn crash_while_archiving(lost_letters: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (broker, topic_id) = rejected(dir.path()).await;
    let n = state_partition(&broker, topic_id, 0);
    broker.crash().await;
    cut_last_batch(&first_segment(dir.path(), SHARE_GROUP_STATE, n));
    if lost_letters {
        cut_last_batch(&first_segment(dir.path(), DLQ, 0));
        assert_eq!(dead_letters(dir.path()), vec![]);
    }

    let broker = TestBroker::start(dir.path()).await;
    // The crash left the records ARCHIVING (state 3), the accepted ones ACKNOWLEDGED.
    assert_eq!(
        persisted(&broker, topic_id, 0).await,
        vec![(0, 4, 3), (5, 9, 2)]
    );
    let mut conn = broker.connect().await;
    join(&mut conn, "m2").await;
    // The share partition loads: nothing to deliver, and the ARCHIVING records finish.
    assert_eq!(acquire(&mut conn, topic_id, "m2", &[0]).await, vec![]);
    wait_start(&broker, topic_id, 10).await;
    assert_eq!(dead_letters(dir.path()), expected());
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_crash_after_the_dead_letters_does_not_write_them_twice() {
    crash_while_archiving(false).await;
}

#[tokio::test]
async fn a_crash_before_the_dead_letters_writes_them_once_after_the_restart() {
    crash_while_archiving(true).await;
}

/// A REJECT staged through TxnShareAcknowledge is dead-lettered when the transaction commits
/// (the COMMIT marker makes the records ARCHIVING), and never when it aborts (the records are
/// AVAILABLE again, below the delivery limit).
async fn transactional_reject(commit: bool) {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::txn_share::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, DLQ, 1).await;
    alter_configs(
        &mut conn,
        TOPIC_RESOURCE,
        DLQ,
        &[("errors.deadletterqueue.group.enable", "true")],
    )
    .await;
    configure_group(&mut conn, &[("errors.deadletterqueue.topic.name", DLQ)]).await;
    let (topic_id, a) = staged_setup(&broker, &mut conn, 60_000, 30_000).await;
    stage(&mut conn, &a, topic_id, 0, 4, REJECT).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        dead_letters(dir.path()),
        vec![],
        "nothing before the outcome"
    );
    resolve(&broker, &mut conn, &a, commit).await;
    if commit {
        wait_start(&broker, topic_id, 5).await;
        let letters: Vec<(i64, String, String)> = dead_letters(dir.path())
            .into_iter()
            .map(|(offset, _, count, message)| (offset, count, message))
            .collect();
        let expected: Vec<(i64, String, String)> = (0..5)
            .map(|i| (i, "1".into(), "Offset rejected by client.".into()))
            .collect();
        assert_eq!(letters, expected);
    } else {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(dead_letters(dir.path()), vec![]);
        assert_eq!(persisted_start(&broker, topic_id, 0).await.0, 0);
    }
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_committed_transactional_reject_is_dead_lettered_once() {
    transactional_reject(true).await;
}

#[tokio::test]
async fn an_aborted_transactional_reject_is_never_dead_lettered() {
    transactional_reject(false).await;
}
