//! TxnShareAcknowledge (KIP-1289) over the wire for the integration tests: a share topic, a
//! member holding its records, a transactional producer staging them, and the live and
//! persisted states the tests compare.

use std::time::Duration;

use kafka_protocol::messages::{GroupId, ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use shoal_broker::share::SHARE_GROUP_STATE;
use shoal_client::Connection;
use shoal_core::share_coordinator::{SharePartitionKey, StagedTxn, StateBatch, TopicId};
use shoal_core::share_partition::{RecordRange, RecordState};
use shoal_protocol::share::txn_share_acknowledge::{
    TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest, TxnShareAcknowledgeTopic,
};
use shoal_protocol::share::{AcknowledgementBatch, TxnShareAcknowledgeResponse};
use uuid::Uuid;

use super::share::{ack_batch, acquired_ranges, heartbeat, setup_share_topic, share_fetch, GROUP};
use super::txn;
use super::TestBroker;

/// The output topic of the read-process-write tests.
pub const OUT: &str = "out";

/// The transactional id of the tests' producer.
pub const TID: &str = "pipeline";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The tests' broker settings: share groups may lock records for as little as 1 s (their
/// groups lock for 30 s unless a test says otherwise).
pub const SETTINGS: &[(&str, &str)] = &[("group.share.min.record.lock.duration.ms", "1000")];

/// [`SETTINGS`] with lazy flushing: nothing fsyncs a transaction marker (the coordinator
/// lists it in its Markers record instead) nor a produced batch, so cutting one off a log is a
/// loss a crash could cause.
pub const LAZY_SETTINGS: &[(&str, &str)] = &[
    ("group.share.min.record.lock.duration.ms", "1000"),
    ("log.flush.interval.messages", "9223372036854775807"),
];

/// Starts a broker in `dir` with [`SETTINGS`].
pub async fn start(dir: &std::path::Path) -> TestBroker {
    TestBroker::start_with(dir, SETTINGS).await
}

/// Creates [`super::share::TOPIC`] with `partitions` partitions holding 10 records each (one
/// batch), and configures the group (earliest, 30 s locks, delivery limit 3); returns the
/// topic id.
pub async fn setup(broker: &TestBroker, conn: &mut Connection, partitions: i32) -> Uuid {
    setup_locked(broker, conn, partitions, 30_000).await
}

/// [`setup`] with acquisition locks of `lock_ms`.
pub async fn setup_locked(
    broker: &TestBroker,
    conn: &mut Connection,
    partitions: i32,
    lock_ms: i64,
) -> Uuid {
    let lock_ms = lock_ms.to_string();
    let configs = [
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", lock_ms.as_str()),
        ("share.delivery.count.limit", "3"),
    ];
    setup_share_topic(broker, conn, partitions, &[10], &configs).await
}

/// Joins the share group as `member`; returns its epoch.
pub async fn join(conn: &mut Connection, member: &str) -> i32 {
    heartbeat(conn, member, 0).await
}

/// Opens a share session for `member` on `partitions` and acquires what it can: the acquired
/// (partition, first, last, delivery count) ranges.
pub async fn acquire(
    conn: &mut Connection,
    topic_id: Uuid,
    member: &str,
    partitions: &[i32],
) -> Vec<(i32, i64, i64, i16)> {
    let partitions = partitions.iter().map(|&p| (p, Vec::new())).collect();
    let r = share_fetch(conn, topic_id, member, 0, partitions, 2000, 1 << 20).await;
    assert_eq!(r.error_code, 0);
    acquired_ranges(&r)
}

/// A new connection on which `member` joins and acquires what it can of partition 0 of
/// `topic_id`: the connection (its session holds what it acquired until it is dropped) and
/// the acquired ranges.
pub async fn newcomer(
    broker: &TestBroker,
    topic_id: Uuid,
    member: &str,
) -> (Connection, Vec<(i32, i64, i64, i16)>) {
    let mut conn = broker.connect().await;
    join(&mut conn, member).await;
    let acquired = acquire(&mut conn, topic_id, member, &[0]).await;
    (conn, acquired)
}

/// InitProducerId v5 for `TID`: (producer id, epoch).
pub async fn init(conn: &mut Connection, timeout_ms: i32) -> (i64, i16) {
    let (code, pid, epoch) = txn::init(conn, 5, TID, timeout_ms).await;
    assert_eq!(code, 0);
    (pid, epoch)
}

/// EndTxn v5 (transaction version 2) for `TID`, retrying CONCURRENT_TRANSACTIONS a bounded
/// number of times; returns the error and the new epoch.
pub async fn end(conn: &mut Connection, pid: i64, epoch: i16, commit: bool) -> (i16, i16) {
    txn::end(conn, 5, TID, pid, epoch, commit).await
}

/// Who stages: the transactional producer (id, epoch) and the share-group member (id,
/// epoch) whose records they are.
pub struct Ack {
    pub pid: i64,
    pub epoch: i16,
    pub member: &'static str,
    pub member_epoch: i32,
}

/// TxnShareAcknowledge v0 as `a` of `partitions` of `topic_id`, each with its batches.
pub async fn txn_ack(
    conn: &mut Connection,
    a: &Ack,
    topic_id: Uuid,
    partitions: Vec<(i32, Vec<AcknowledgementBatch>)>,
) -> TxnShareAcknowledgeResponse {
    txn_ack_as(conn, TID, a, topic_id, partitions).await
}

/// [`txn_ack`] for the producer of transactional id `tid`.
pub async fn txn_ack_as(
    conn: &mut Connection,
    tid: &str,
    a: &Ack,
    topic_id: Uuid,
    partitions: Vec<(i32, Vec<AcknowledgementBatch>)>,
) -> TxnShareAcknowledgeResponse {
    conn.request(
        0,
        &TxnShareAcknowledgeRequest {
            transactional_id: Some(TransactionalId(s(tid))),
            group_id: Some(GroupId(s(GROUP))),
            producer_id: ProducerId(a.pid),
            producer_epoch: a.epoch,
            member_id: Some(s(a.member)),
            member_epoch: a.member_epoch,
            topics: vec![TxnShareAcknowledgeTopic {
                topic_id,
                partitions: partitions
                    .into_iter()
                    .map(|(p, batches)| TxnShareAcknowledgePartition {
                        partition_index: p,
                        acknowledgement_batches: batches,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// Stages `ack_type` for offsets `first..=last` of partition 0 as `a`; panics unless the
/// broker staged them.
pub async fn stage(
    conn: &mut Connection,
    a: &Ack,
    topic_id: Uuid,
    first: i64,
    last: i64,
    ack_type: i8,
) {
    let r = txn_ack(
        conn,
        a,
        topic_id,
        vec![(0, vec![ack_batch(first, last, vec![ack_type])])],
    )
    .await;
    assert_eq!(codes(&r), (0, vec![0]), "staging {first}..={last}");
}

/// The top-level code and each partition's code.
pub fn codes(r: &TxnShareAcknowledgeResponse) -> (i16, Vec<i16>) {
    (
        r.error_code,
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
    )
}

/// The share partition of [`GROUP`] on `topic_id`-`partition`.
pub fn key(topic_id: Uuid, partition: i32) -> SharePartitionKey {
    SharePartitionKey::new(GROUP, TopicId(*topic_id.as_bytes()), partition)
}

/// The live record ranges of a share partition (none while it has no machine).
pub async fn ranges(broker: &TestBroker, topic_id: Uuid, partition: i32) -> Vec<RecordRange> {
    broker
        .broker
        .share
        .live_ranges(&key(topic_id, partition))
        .await
        .unwrap_or_default()
}

/// A live range no member holds and no lock deadline covers (AVAILABLE, or TX_PENDING in
/// `staged_txn`).
pub fn unheld(
    first_offset: i64,
    last_offset: i64,
    state: RecordState,
    delivery_count: i16,
    staged_txn: Option<StagedTxn>,
) -> RecordRange {
    RecordRange {
        first_offset,
        last_offset,
        state,
        delivery_count,
        member_id: None,
        staged_txn,
        lock_deadline_ms: None,
    }
}

/// The live states of a share partition: (first, last, state).
pub async fn live(
    broker: &TestBroker,
    topic_id: Uuid,
    partition: i32,
) -> Vec<(i64, i64, RecordState)> {
    ranges(broker, topic_id, partition)
        .await
        .into_iter()
        .map(|r| (r.first_offset, r.last_offset, r.state))
        .collect()
}

/// The persisted state batches of a share partition (none without persisted state).
pub async fn persisted_batches(
    broker: &TestBroker,
    topic_id: Uuid,
    partition: i32,
) -> Vec<StateBatch> {
    broker
        .broker
        .share
        .persisted_batches(&key(topic_id, partition))
        .await
        .unwrap_or_default()
}

/// The persisted batches of a share partition: (first, last, state id).
pub async fn persisted(broker: &TestBroker, topic_id: Uuid, partition: i32) -> Vec<(i64, i64, i8)> {
    persisted_batches(broker, topic_id, partition)
        .await
        .into_iter()
        .map(|b| (b.first_offset, b.last_offset, b.delivery_state))
        .collect()
}

/// The persisted start offset and delivery-complete count of a share partition (what
/// DescribeShareGroupOffsets answers).
pub async fn persisted_start(broker: &TestBroker, topic_id: Uuid, partition: i32) -> (i64, i32) {
    let summary = broker
        .broker
        .share
        .summary(&broker.broker, &key(topic_id, partition))
        .await
        .expect("persisted state");
    (summary.start_offset, summary.delivery_complete_count)
}

/// The `__share_group_state` partition holding the state of `topic_id`-`partition`.
pub fn state_partition(broker: &TestBroker, topic_id: Uuid, partition: i32) -> i32 {
    let partitions = broker
        .broker
        .topic(SHARE_GROUP_STATE)
        .unwrap()
        .partition_count() as u32;
    shoal_broker::share::state_partition(&key(topic_id, partition), partitions)
}

/// The values of the metric samples named `name` (every label set), in exposition order.
pub fn metric(broker: &TestBroker, name: &str) -> Vec<String> {
    broker
        .broker
        .render_metrics()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next().map(str::to_string))
        .collect()
}

/// Waits (bounded) until the broker holds no TX_PENDING offset (the markers were applied).
pub async fn wait_resolved(broker: &TestBroker) {
    for _ in 0..250 {
        if broker.broker.share.tx_pending_records(None).await == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("staged acknowledgements were never resolved");
}

/// Ends `a`'s transaction (COMMIT if `commit`), checks EndTxn succeeded and waits until its
/// marker resolved every staging; returns the producer's new epoch.
pub async fn resolve(broker: &TestBroker, conn: &mut Connection, a: &Ack, commit: bool) -> i16 {
    let (code, epoch) = end(conn, a.pid, a.epoch, commit).await;
    assert_eq!(code, 0, "EndTxn");
    wait_resolved(broker).await;
    epoch
}

/// Creates the share topic (see [`setup_locked`]) and has the member m1 join and acquire
/// offsets 0..=9 of partition 0 under locks of `lock_ms`: the topic id and m1's epoch.
pub async fn acquired_setup(
    broker: &TestBroker,
    conn: &mut Connection,
    lock_ms: i64,
) -> (Uuid, i32) {
    let topic_id = setup_locked(broker, conn, 1, lock_ms).await;
    let member_epoch = join(conn, "m1").await;
    assert_eq!(
        acquire(conn, topic_id, "m1", &[0]).await,
        vec![(0, 0, 9, 1)]
    );
    (topic_id, member_epoch)
}

/// When the lock on the first live range of `topic_id`-0 expires; panics if it has none.
pub async fn lock_deadline(broker: &TestBroker, topic_id: Uuid) -> i64 {
    ranges(broker, topic_id, 0).await[0]
        .lock_deadline_ms
        .expect("the first records are held under a lock")
}

/// [`acquired_setup`], and a fresh transactional producer whose transactions time out after
/// `txn_timeout_ms`.
pub async fn staged_setup(
    broker: &TestBroker,
    conn: &mut Connection,
    txn_timeout_ms: i32,
    lock_ms: i64,
) -> (Uuid, Ack) {
    let (topic_id, member_epoch) = acquired_setup(broker, conn, lock_ms).await;
    let (pid, epoch) = init(conn, txn_timeout_ms).await;
    (
        topic_id,
        Ack {
            pid,
            epoch,
            member: "m1",
            member_epoch,
        },
    )
}

/// What [`staged`] gives: the broker's directory, the broker, a connection, the topic id and
/// who stages.
pub type Staged = (tempfile::TempDir, TestBroker, Connection, Uuid, Ack);

/// A broker started in a fresh directory (see [`start`]), a connection to it, and on it the
/// member m1 holding offsets 0..=9 of partition 0 (30 s locks) and a fresh transactional
/// producer (see [`staged_setup`]).
pub async fn staged(txn_timeout_ms: i32) -> Staged {
    staged_locked(txn_timeout_ms, 30_000).await
}

/// [`staged`] with acquisition locks of `lock_ms`.
pub async fn staged_locked(txn_timeout_ms: i32, lock_ms: i64) -> Staged {
    staged_with(SETTINGS, txn_timeout_ms, lock_ms).await
}

/// [`staged_locked`] on a broker started with `settings`.
pub async fn staged_with(settings: &[(&str, &str)], txn_timeout_ms: i32, lock_ms: i64) -> Staged {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), settings).await;
    let mut conn = broker.connect().await;
    let (topic_id, a) = staged_setup(&broker, &mut conn, txn_timeout_ms, lock_ms).await;
    (dir, broker, conn, topic_id, a)
}

/// Waits until the lock `deadline_ms` is past and then (bounded: the broker's lock timer runs
/// every 100 ms, but the machine may be busy) until the live ranges of `topic_id`-0 are
/// `expected`; panics with what they are if they never become it.
pub async fn wait_ranges_after(
    broker: &TestBroker,
    topic_id: Uuid,
    deadline_ms: i64,
    expected: Vec<RecordRange>,
) {
    let wait = deadline_ms + 100 - super::now_ms();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
    for _ in 0..250 {
        if ranges(broker, topic_id, 0).await == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ranges(broker, topic_id, 0).await, expected);
}

/// Cuts the `__transaction_state` partition that owns [`TID`] (in the crashed broker's `dir`)
/// right after the batch holding the transaction's PrepareCommit, checking that its Markers
/// and CompleteCommit records followed: what a crash after PrepareCommit leaves when the rest
/// was not yet written back.
pub fn cut_transaction_state_after_prepare_commit(dir: &std::path::Path, partitions: usize) {
    use super::log_cut::{batches, cut_log_at, first_segment};
    use shoal_broker::coordinators::txn_coordinator::TRANSACTION_STATE;
    use shoal_core::txn_coordinator::{partition_for, TransactionState, TxnRecord};

    let owner = partition_for(TID, partitions as u32) as i32;
    let segment = first_segment(dir, TRANSACTION_STATE, owner);
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
}

/// How many partitions `__transaction_state` has on `broker`.
pub fn transaction_state_partitions(broker: &TestBroker) -> usize {
    broker
        .broker
        .topic(shoal_broker::coordinators::txn_coordinator::TRANSACTION_STATE)
        .unwrap()
        .partition_count()
}
