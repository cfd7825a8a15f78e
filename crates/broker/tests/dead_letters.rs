//! Share-group dead-letter queues (KIP-1191) on the broker: rejected records pass through
//! ARCHIVING while their dead letters are written, then ARCHIVED; and a crash at either side
//! of the dead-letter write (kill -9, the logs cut to what a lost page cache leaves) ends with
//! each dead letter written exactly once; a REJECT staged in a transaction is dead-lettered
//! only if the transaction commits.

mod common;

use std::time::Duration;

use common::log_cut::{batches, cut_last_batch, first_segment};
use common::share::{
    ack_batch, acknowledge, configure_group, setup_share_topic, ACCEPT, REJECT, RELEASE,
};
use common::txn_share::{
    acquire, join, persisted, persisted_start, resolve, stage, staged_setup, state_partition,
    wait_resolved, SETTINGS,
};
use common::{alter_configs, create_topic, TestBroker, TOPIC_RESOURCE};
use shoal_broker::share::SHARE_GROUP_STATE;
use uuid::Uuid;

const DLQ: &str = "dlq.queue";

/// (source offset, value, delivery count, message) of every dead letter in [`DLQ`]-0, in any
/// transaction's state.
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
        .filter(|(header, _)| !header.is_control())
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

/// The source offsets of the dead letters in [`DLQ`]-0 a read_committed reader sees:
/// plain ones, and transactional ones once their producer's COMMIT marker follows them.
fn committed_dead_letters(dir: &std::path::Path) -> Vec<i64> {
    let mut visible = Vec::new();
    let mut pending: std::collections::HashMap<i64, Vec<i64>> = Default::default();
    for (header, records) in batches(&first_segment(dir, DLQ, 0)) {
        if header.is_control() {
            // A control record's key: version (int16), then type (0 ABORT, 1 COMMIT).
            let commit = records[0].key.as_deref().map(|k| k[3]) == Some(1);
            let letters = pending.remove(&header.producer_id()).unwrap_or_default();
            if commit {
                visible.extend(letters);
            }
            continue;
        }
        let offsets = records.iter().map(|r| {
            let h = r
                .headers
                .iter()
                .find(|h| h.key.as_ref() == b"__dlq.errors.offset")
                .unwrap();
            std::str::from_utf8(h.value.as_ref().unwrap())
                .unwrap()
                .parse::<i64>()
                .unwrap()
        });
        if header.is_transactional() {
            pending
                .entry(header.producer_id())
                .or_default()
                .extend(offsets);
        } else {
            visible.extend(offsets);
        }
    }
    visible
}

/// The producer ids of the transactional batches in [`DLQ`]-0 (control batches left out).
fn transactional_producers(dir: &std::path::Path) -> Vec<i64> {
    batches(&first_segment(dir, DLQ, 0))
        .into_iter()
        .filter(|(h, _)| h.is_transactional() && !h.is_control())
        .map(|(h, _)| h.producer_id())
        .collect()
}

/// A broker in `dir` (started with `settings`) whose group dead-letters into [`DLQ`], m1
/// holding offsets 0..=9, and a transactional producer.
async fn transactional_setup(
    dir: &std::path::Path,
    settings: &[(&str, &str)],
) -> (
    TestBroker,
    shoal_client::Connection,
    Uuid,
    common::txn_share::Ack,
) {
    let broker = TestBroker::start_with(dir, settings).await;
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
    (broker, conn, topic_id, a)
}

/// The staged REJECTs' dead letters, as the transaction carries them: offsets 0-4, each
/// delivered once.
fn carried() -> Vec<(i64, String, String)> {
    (0..5)
        .map(|i| (i, "1".into(), "Offset rejected by client.".into()))
        .collect()
}

fn written(dir: &std::path::Path) -> Vec<(i64, String, String)> {
    dead_letters(dir)
        .into_iter()
        .map(|(offset, _, count, message)| (offset, count, message))
        .collect()
}

/// A REJECT staged through TxnShareAcknowledge writes its dead letters into the transaction
/// (issue 31): in the log at once, as the producer's transactional batch, invisible to
/// read_committed readers until the COMMIT marker; a commit makes them visible and archives
/// the records at once (nothing written again), an abort hides them for good and makes the
/// records available again.
async fn transactional_reject(commit: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut conn, topic_id, a) = transactional_setup(dir.path(), SETTINGS).await;
    stage(&mut conn, &a, topic_id, 0, 4, REJECT).await;
    assert_eq!(written(dir.path()), carried(), "written with the staging");
    assert_eq!(transactional_producers(dir.path()), vec![a.pid]);
    assert_eq!(committed_dead_letters(dir.path()), Vec::<i64>::new());
    let view = common::txn::read_committed(&mut conn, DLQ, 0).await;
    assert_eq!(
        view.last_stable_offset, 0,
        "the open transaction holds them"
    );
    resolve(&broker, &mut conn, &a, commit).await;
    common::txn::wait_lso(&mut conn, DLQ, 0, 6).await;
    if commit {
        assert_eq!(committed_dead_letters(dir.path()), vec![0, 1, 2, 3, 4]);
        // ARCHIVED by the marker itself: the start moves past them, no ARCHIVING step.
        wait_start(&broker, topic_id, 5).await;
    } else {
        assert_eq!(committed_dead_letters(dir.path()), Vec::<i64>::new());
        assert_eq!(persisted_start(&broker, topic_id, 0).await.0, 0);
    }
    // Nothing is written after the outcome (the dead-letter task runs every 100 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(written(dir.path()), carried());
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_committed_transactional_reject_carries_its_dead_letters_once() {
    transactional_reject(true).await;
}

#[tokio::test]
async fn an_aborted_transactional_reject_is_never_dead_lettered() {
    transactional_reject(false).await;
}

/// At the delivery limit an aborted REJECT is archived (Kafka's rule for an abort at the
/// limit), through ARCHIVING: the aborted transaction's dead letter does not count, and the
/// dead-letter task writes a visible one — once.
#[tokio::test]
async fn an_aborted_reject_at_the_delivery_limit_is_dead_lettered_after_the_abort() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut conn, topic_id, a) = transactional_setup(dir.path(), SETTINGS).await;
    // Delivered twice more: the third delivery reaches the group's limit of 3.
    for count in [2, 3] {
        let release = vec![ack_batch(0, 9, vec![RELEASE])];
        assert_eq!(
            acknowledge(&mut conn, topic_id, "m1", 1, release).await,
            (0, 0)
        );
        // At its last delivery a record is handed out alone (Kafka's rule near the limit).
        let last = if count == 3 { 0 } else { 9 };
        assert_eq!(
            acquire(&mut conn, topic_id, "m1", &[0]).await,
            vec![(0, 0, last, count)]
        );
    }
    stage(&mut conn, &a, topic_id, 0, 0, REJECT).await;
    resolve(&broker, &mut conn, &a, false).await;
    wait_start(&broker, topic_id, 1).await;
    assert_eq!(committed_dead_letters(dir.path()), vec![0]);
    let mut all = written(dir.path());
    all.sort();
    let exceeded = |i: i64| {
        (
            i,
            "3".to_string(),
            "Offset delivery count exceeded the threshold.".to_string(),
        )
    };
    assert_eq!(
        all,
        vec![exceeded(0), exceeded(0)],
        "the aborted copy and the visible one"
    );
    drop(conn);
    broker.stop().await;
}

/// kill -9 after the staging: the restarted broker holds the records TX_PENDING with their
/// dead letters in the still-open transaction; its outcome then decides them as live.
async fn crash_after_staging(commit: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut conn, topic_id, a) = transactional_setup(dir.path(), SETTINGS).await;
    stage(&mut conn, &a, topic_id, 0, 4, REJECT).await;
    drop(conn);
    broker.crash().await;

    let broker = TestBroker::start_with(dir.path(), SETTINGS).await;
    assert_eq!(persisted(&broker, topic_id, 0).await, vec![(0, 4, 5)]);
    assert_eq!(written(dir.path()), carried());
    let mut conn = broker.connect().await;
    resolve(&broker, &mut conn, &a, commit).await;
    common::txn::wait_lso(&mut conn, DLQ, 0, 6).await;
    let expected: Vec<i64> = if commit { (0..5).collect() } else { vec![] };
    assert_eq!(committed_dead_letters(dir.path()), expected);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(written(dir.path()), carried());
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_crash_after_staging_then_commit_shows_each_dead_letter_once() {
    crash_after_staging(true).await;
}

#[tokio::test]
async fn a_crash_after_staging_then_abort_shows_no_dead_letter() {
    crash_after_staging(false).await;
}

/// kill -9 after the commit, with the dead-letter partition's COMMIT marker lost (lazy
/// flushing lets a crash lose it; the share-state partition's is fsynced before the
/// transaction completes, decision 0019): the restarted coordinator writes it again (decision
/// 0005), and each dead letter is visible once, the records archived. With
/// `after_prepare_commit`, the crash came right after PrepareCommit: the coordinator's later
/// records and the share-state marker are cut too, and the restarted coordinator finishes the
/// commit.
async fn crash_after_the_commit(after_prepare_commit: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut conn, topic_id, a) =
        transactional_setup(dir.path(), common::txn_share::LAZY_SETTINGS).await;
    stage(&mut conn, &a, topic_id, 0, 4, REJECT).await;
    resolve(&broker, &mut conn, &a, true).await;
    common::txn::wait_complete(&broker, common::txn_share::TID).await;
    common::txn::wait_lso(&mut conn, DLQ, 0, 6).await;
    let n = state_partition(&broker, topic_id, 0);
    let txn_partitions = common::txn_share::transaction_state_partitions(&broker);
    drop(conn);
    broker.crash().await;

    let segment = first_segment(dir.path(), DLQ, 0);
    assert!(batches(&segment).last().unwrap().0.is_control());
    cut_last_batch(&segment);
    assert_eq!(committed_dead_letters(dir.path()), Vec::<i64>::new());
    if after_prepare_commit {
        let segment = first_segment(dir.path(), SHARE_GROUP_STATE, n);
        let header = batches(&segment).last().unwrap().0;
        assert!(header.is_control() && header.producer_id() == a.pid);
        cut_last_batch(&segment);
        common::txn_share::cut_transaction_state_after_prepare_commit(dir.path(), txn_partitions);
    }
    let broker = TestBroker::start_with(dir.path(), common::txn_share::LAZY_SETTINGS).await;
    common::txn::wait_complete(&broker, common::txn_share::TID).await;
    let mut conn = broker.connect().await;
    common::txn::wait_lso(&mut conn, DLQ, 0, 6).await;
    wait_resolved(&broker).await;
    wait_start(&broker, topic_id, 5).await;
    assert_eq!(committed_dead_letters(dir.path()), vec![0, 1, 2, 3, 4]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(written(dir.path()), carried());
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_lost_dead_letter_marker_is_written_again() {
    crash_after_the_commit(false).await;
}

#[tokio::test]
async fn a_crash_after_prepare_commit_is_finished_with_each_dead_letter_once() {
    crash_after_the_commit(true).await;
}

/// A zombie: a new instance of the transactional id fences the producer that staged REJECTs
/// with their dead letters. Its transaction is aborted (the carried dead letters never become
/// visible, the records are available again) and its later REJECT is refused with
/// PRODUCER_FENCED before any dead letter is written.
#[tokio::test]
async fn a_fenced_zombie_never_makes_a_dead_letter_visible() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut conn, topic_id, a) = transactional_setup(dir.path(), SETTINGS).await;
    stage(&mut conn, &a, topic_id, 0, 4, REJECT).await;
    let (pid, epoch) = common::txn_share::init(&mut conn, 60_000).await;
    assert_eq!(pid, a.pid);
    assert!(epoch > a.epoch);
    wait_resolved(&broker).await;
    common::txn::wait_lso(&mut conn, DLQ, 0, 6).await;
    assert_eq!(committed_dead_letters(dir.path()), Vec::<i64>::new());
    assert_eq!(persisted_start(&broker, topic_id, 0).await.0, 0);
    let r = common::txn_share::txn_ack(
        &mut conn,
        &a,
        topic_id,
        vec![(0, vec![ack_batch(5, 9, vec![REJECT])])],
    )
    .await;
    let fenced = shoal_protocol::ErrorCode::PRODUCER_FENCED.code();
    assert_eq!(common::txn_share::codes(&r), (fenced, vec![fenced]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        written(dir.path()),
        carried(),
        "nothing written for the zombie"
    );
    assert_eq!(committed_dead_letters(dir.path()), Vec::<i64>::new());
    drop(conn);
    broker.stop().await;
}
