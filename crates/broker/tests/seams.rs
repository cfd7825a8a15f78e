//! The seams a cluster needs (decision 0018), driven through a whole broker with their
//! simulated implementations: ownership that moves (`Assignments`), commits that fail or are
//! fenced, a metadata store in memory, and a clock that moves only when told.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::share::{setup_share_topic, share_fetch, GROUP, TOPIC};
use common::TestBroker;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    FetchRequest, FindCoordinatorRequest, GroupId, InitProducerIdRequest, JoinGroupRequest,
    ListOffsetsRequest, MetadataRequest, MetadataResponse, ProduceRequest, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_broker::seams::clock::{Clock, ManualClock};
use shoal_broker::seams::durability::{Committing, Durability, FailingCommits, LocalDisk};
use shoal_broker::seams::metadata_store::MemoryMetadataStore;
use shoal_broker::seams::ownership::{Assignments, Node};
use shoal_broker::seams::SeamOverrides;
use shoal_broker::topic_registry::Partition;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;
use shoal_storage::{encode_batch, BatchOptions};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// This broker is node 1 (the default `node.id`); node 2 is only a name in the table.
fn two_nodes() -> Arc<Assignments> {
    let node = |node_id, host: &str, port| Node {
        node_id,
        host: host.to_string(),
        port,
        rack: None,
    };
    Arc::new(Assignments::new(
        1,
        vec![node(1, "127.0.0.1", 1), node(2, "broker-two.test", 9093)],
    ))
}

fn with_ownership(ownership: Arc<Assignments>) -> SeamOverrides {
    SeamOverrides {
        ownership: Some(ownership),
        ..SeamOverrides::default()
    }
}

fn records(value: &str, timestamp_ms: i64) -> Bytes {
    Bytes::from(encode_batch(
        &[(None, Some(value.as_bytes()))],
        BatchOptions {
            timestamp_ms,
            ..BatchOptions::default()
        },
    ))
}

/// One Produce v9 (acks=all) of one record to `topic`-`partition`: (error, log append time).
async fn produce(conn: &mut Connection, topic: &str, partition: i32) -> (i16, i64) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records("v", common::now_ms())))])]);
    let r = conn.request(9, &request).await.unwrap();
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.log_append_time_ms)
}

/// One Fetch v12 of `topic`-`partition` from 0 made under `current_leader_epoch`: its error.
async fn fetch(conn: &mut Connection, topic: &str, partition: i32, leader_epoch: i32) -> i16 {
    let r = conn
        .request(
            12,
            &FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(s(topic)))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_current_leader_epoch(leader_epoch)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        )
        .await
        .unwrap();
    r.responses[0].partitions[0].error_code
}

/// ListOffsets v7 (latest) of `topic`-`partition` made under `current_leader_epoch`: its error.
async fn list_offsets(conn: &mut Connection, topic: &str, partition: i32, epoch: i32) -> i16 {
    let r = conn
        .request(
            7,
            &ListOffsetsRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_current_leader_epoch(epoch)
                        .with_timestamp(-1)])]),
        )
        .await
        .unwrap();
    r.topics[0].partitions[0].error_code
}

async fn metadata(conn: &mut Connection, topic: &str) -> MetadataResponse {
    conn.request(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(s(topic)))),
        ])),
    )
    .await
    .unwrap()
}

/// (error, leader id, leader epoch) of `partition` in a Metadata answer.
fn leader_of(m: &MetadataResponse, partition: i32) -> (i16, i32, i32) {
    let p = m.topics[0]
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)
        .unwrap();
    (p.error_code, p.leader_id.0, p.leader_epoch)
}

/// FindCoordinator v4 of `key` (`key_type` 0 group, 1 transaction): (error, node, host, port).
async fn find_coordinator(
    conn: &mut Connection,
    key_type: i8,
    key: &str,
) -> (i16, i32, String, i32) {
    let r = conn
        .request(
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![s(key)]),
        )
        .await
        .unwrap();
    let c = &r.coordinators[0];
    (c.error_code, c.node_id.0, c.host.to_string(), c.port)
}

async fn join_group(conn: &mut Connection, group: &str) -> i16 {
    let r = conn
        .request(
            7,
            &JoinGroupRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_session_timeout_ms(30_000)
                .with_rebalance_timeout_ms(30_000)
                .with_member_id(s(""))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![
                    kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(s("range"))
                        .with_metadata(Bytes::from_static(b"sub")),
                ]),
        )
        .await
        .unwrap();
    r.error_code
}

/// A standalone OffsetCommit v8 of `offset` for t-0 by `group`: its error.
async fn commit_offset(conn: &mut Connection, group: &str, offset: i64) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let r = conn
        .request(
            8,
            &kafka_protocol::messages::OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)])]),
        )
        .await
        .unwrap();
    r.topics[0].partitions[0].error_code
}

/// The offset `group` committed for t-0 (-1: none).
async fn fetch_offset(conn: &mut Connection, group: &str) -> i64 {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let r = conn
        .request(
            7,
            &kafka_protocol::messages::OffsetFetchRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partition_indexes(vec![0])])),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
    r.topics[0].partitions[0].committed_offset
}

async fn init_transactional(conn: &mut Connection, id: &str) -> i16 {
    let r = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(id))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await
        .unwrap();
    r.error_code
}

#[tokio::test]
async fn a_partition_owned_elsewhere_is_refused_and_metadata_names_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let table = two_nodes();
    let broker = TestBroker::start_with_seams(dir.path(), &[], with_ownership(table.clone())).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 2).await;
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);

    let moved = table.assign("t", 0, 2);
    assert_eq!(
        produce(&mut conn, "t", 0).await.0,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(
        fetch(&mut conn, "t", 0, -1).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(
        list_offsets(&mut conn, "t", 0, -1).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    // The other partition is still served here.
    assert_eq!(produce(&mut conn, "t", 1).await.0, 0);
    assert_eq!(fetch(&mut conn, "t", 1, 0).await, 0);
    let m = metadata(&mut conn, "t").await;
    assert_eq!(leader_of(&m, 0), (0, 2, moved.epoch));
    assert_eq!(leader_of(&m, 1), (0, 1, 0));
    let brokers: Vec<(i32, String, i32)> = m
        .brokers
        .iter()
        .map(|b| (b.node_id.0, b.host.to_string(), b.port))
        .collect();
    assert_eq!(
        brokers,
        vec![
            (1, "127.0.0.1".to_string(), 1),
            (2, "broker-two.test".to_string(), 9093)
        ]
    );

    // Back here under a newer epoch: what this node opened under epoch 0 may be stale, so it
    // is not served until the takeover reopens it under the new epoch (at most one check
    // period later); then it is, with what it held.
    let back = table.assign("t", 0, 1);
    assert!(back.epoch > moved.epoch);
    assert_eq!(
        leader_of(&metadata(&mut conn, "t").await, 0),
        (0, 1, back.epoch)
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match produce(&mut conn, "t", 0).await.0 {
            0 => break,
            code => assert_eq!(code, ErrorCode::NOT_LEADER_OR_FOLLOWER.code()),
        }
        assert!(std::time::Instant::now() < deadline, "t-0 never taken over");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let reopened = broker.broker.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(reopened.leader_epoch, back.epoch);
    assert_eq!(
        reopened.lock().log_end_offset(),
        2,
        "the first record kept, the new one added"
    );
    assert_eq!(fetch(&mut conn, "t", 0, back.epoch).await, 0);

    // Nobody owns partition 1 now.
    table.take_offline("t", 1);
    assert_eq!(
        leader_of(&metadata(&mut conn, "t").await, 1),
        (ErrorCode::LEADER_NOT_AVAILABLE.code(), -1, -1)
    );
    assert_eq!(
        produce(&mut conn, "t", 1).await.0,
        ErrorCode::LEADER_NOT_AVAILABLE.code()
    );
    broker.stop().await;
}

#[tokio::test]
async fn requests_carry_the_leader_epoch_they_were_made_under() {
    let dir = tempfile::tempdir().unwrap();
    let table = two_nodes();
    // Owned here under epoch 1 before it exists: the partition is opened under it.
    let owned = table.assign("t", 0, 1);
    assert_eq!(owned.epoch, 1);
    let broker = TestBroker::start_with_seams(dir.path(), &[], with_ownership(table.clone())).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 1).await;
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);
    assert_eq!(leader_of(&metadata(&mut conn, "t").await, 0), (0, 1, 1));
    assert_eq!(fetch(&mut conn, "t", 0, 1).await, 0);
    assert_eq!(fetch(&mut conn, "t", 0, -1).await, 0);
    assert_eq!(
        fetch(&mut conn, "t", 0, 0).await,
        ErrorCode::FENCED_LEADER_EPOCH.code()
    );
    assert_eq!(
        fetch(&mut conn, "t", 0, 2).await,
        ErrorCode::UNKNOWN_LEADER_EPOCH.code()
    );
    assert_eq!(list_offsets(&mut conn, "t", 0, 1).await, 0);
    assert_eq!(
        list_offsets(&mut conn, "t", 0, 0).await,
        ErrorCode::FENCED_LEADER_EPOCH.code()
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_coordinator_owned_elsewhere_answers_not_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let table = two_nodes();
    let broker = TestBroker::start_with_seams(dir.path(), &[], with_ownership(table.clone())).await;
    let mut conn = broker.connect().await;
    let b = &broker.broker;
    let partitions = |topic: &str| b.topic(topic).unwrap().partition_count() as u32;

    // Two groups on different `__consumer_offsets` partitions; the first one's moves away.
    let offsets = partitions("__consumer_offsets");
    let part = |g: &str| shoal_core::group_coordinator::partition_for(g, offsets) as i32;
    let (away, here) = ("g-away", "g-here");
    assert_ne!(part(away), part(here));
    table.assign("__consumer_offsets", part(away), 2);
    assert_eq!(
        find_coordinator(&mut conn, 0, away).await,
        (0, 2, "broker-two.test".to_string(), 9093)
    );
    assert_eq!(find_coordinator(&mut conn, 0, here).await.1, 1);
    assert_eq!(
        join_group(&mut conn, away).await,
        ErrorCode::NOT_COORDINATOR.code()
    );
    assert_eq!(
        join_group(&mut conn, here).await,
        ErrorCode::MEMBER_ID_REQUIRED.code()
    );

    // A transactional id whose `__transaction_state` partition is offline.
    let states = partitions("__transaction_state");
    let id = "tx-away";
    let p = shoal_core::txn_coordinator::partition_for(id, states) as i32;
    table.take_offline("__transaction_state", p);
    assert_eq!(
        find_coordinator(&mut conn, 1, id).await.0,
        ErrorCode::COORDINATOR_NOT_AVAILABLE.code()
    );
    assert_eq!(
        init_transactional(&mut conn, id).await,
        ErrorCode::COORDINATOR_NOT_AVAILABLE.code()
    );
    table.assign("__transaction_state", p, 2);
    assert_eq!(
        init_transactional(&mut conn, id).await,
        ErrorCode::NOT_COORDINATOR.code()
    );
    broker.stop().await;
}

/// LocalDisk, except that before the first commit of `topic` it gives partition 0 to node 2:
/// the partition moves between the append and its commit.
#[derive(Debug)]
struct MovesBeforeCommit {
    table: Arc<Assignments>,
    inner: LocalDisk,
    topic: &'static str,
    moved: AtomicBool,
}

impl Durability for MovesBeforeCommit {
    fn commit(&self, partitions: Vec<Arc<Partition>>) -> Committing<'_> {
        if partitions.iter().any(|p| p.topic == self.topic)
            && !self.moved.swap(true, Ordering::SeqCst)
        {
            self.table.assign(self.topic, 0, 2);
        }
        self.inner.commit(partitions)
    }
}

#[tokio::test]
async fn a_write_whose_partition_moved_before_its_commit_is_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let table = two_nodes();
    let durability = Arc::new(MovesBeforeCommit {
        table: table.clone(),
        inner: LocalDisk::new(table.clone()),
        topic: "t",
        moved: AtomicBool::new(false),
    });
    let seams = SeamOverrides {
        ownership: Some(table.clone()),
        durability: Some(durability),
        ..SeamOverrides::default()
    };
    let broker = TestBroker::start_with_seams(dir.path(), &[], seams).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 1).await;
    // Appended while owned, fenced at the commit.
    assert_eq!(
        produce(&mut conn, "t", 0).await.0,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_failed_commit_acknowledges_nothing_and_the_next_one_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let table = two_nodes();
    let commits = Arc::new(FailingCommits::new(table.clone()));
    let seams = SeamOverrides {
        ownership: Some(table),
        durability: Some(commits.clone()),
        ..SeamOverrides::default()
    };
    let broker = TestBroker::start_with_seams(dir.path(), &[], seams).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 1).await;
    commits.fail_next(1);
    assert_eq!(
        produce(&mut conn, "t", 0).await.0,
        ErrorCode::KAFKA_STORAGE_ERROR.code()
    );
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);

    // A coordinator's pass whose commit fails answers nothing of it (the client retries,
    // not knowing whether it took effect, as after a timeout) and the coordinator rebuilds
    // itself from its log and goes on serving.
    commits.fail_next(1);
    assert_eq!(
        commit_offset(&mut conn, "g", 7).await,
        ErrorCode::COORDINATOR_NOT_AVAILABLE.code()
    );
    assert_eq!(commit_offset(&mut conn, "g", 8).await, 0);
    assert_eq!(fetch_offset(&mut conn, "g").await, 8);
    broker.stop().await;
}

#[tokio::test]
async fn topics_live_in_the_metadata_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryMetadataStore::default();
    let seams = || SeamOverrides {
        metadata: Some(Arc::new(store.clone())),
        ..SeamOverrides::default()
    };
    {
        let broker = TestBroker::start_with_seams(dir.path(), &[], seams()).await;
        let mut conn = broker.connect().await;
        store.fail_next(1);
        let r = conn
            .request(
                7,
                &kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
                    kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                        .with_name(TopicName(s("t")))
                        .with_num_partitions(1)
                        .with_replication_factor(-1),
                ]),
            )
            .await
            .unwrap();
        assert_eq!(
            r.topics[0].error_code,
            ErrorCode::KAFKA_STORAGE_ERROR.code()
        );
        assert!(broker.broker.topic("t").is_none());
        common::create_topic(&mut conn, "t", 1).await;
        broker.stop().await;
    }
    // No metadata log was written to the data directory: the store is the only record.
    assert!(!dir.path().join("__cluster_metadata-0").exists());
    let broker = TestBroker::start_with_seams(dir.path(), &[], seams()).await;
    let mut conn = broker.connect().await;
    assert_eq!(leader_of(&metadata(&mut conn, "t").await, 0), (0, 1, 0));
    broker.stop().await;
}

#[tokio::test]
async fn time_comes_from_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    // Started at the real time: records the tests stamp with it must not look from the future.
    let clock = Arc::new(ManualClock::new(common::now_ms()));
    let seams = SeamOverrides {
        clock: Some(clock.clone()),
        ..SeamOverrides::default()
    };
    let broker = TestBroker::start_with_seams(
        dir.path(),
        &[("group.share.min.record.lock.duration.ms", "1000")],
        seams,
    )
    .await;
    let mut a = broker.connect().await;
    let mut b = broker.connect().await;

    // Timestamps the broker assigns.
    common::create_topic(&mut a, "t", 1).await;
    common::alter_configs(
        &mut a,
        common::TOPIC_RESOURCE,
        "t",
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await;
    assert_eq!(produce(&mut a, "t", 0).await, (0, clock.now_ms()));
    clock.advance(5_000);
    assert_eq!(produce(&mut a, "t", 0).await, (0, clock.now_ms()));

    // Acquisition locks: 60 s by the clock, which passes in no time.
    let topic_id = setup_share_topic(
        &broker,
        &mut a,
        1,
        &[3],
        &[
            ("share.auto.offset.reset", "earliest"),
            ("share.record.lock.duration.ms", "60000"),
        ],
    )
    .await;
    let acquired = |r: &shoal_protocol::share::ShareFetchResponse| -> Vec<(i64, i64, i16)> {
        r.responses
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| {
                p.acquired_records
                    .iter()
                    .map(|x| (x.first_offset, x.last_offset, x.delivery_count))
                    .collect()
            })
            .unwrap_or_default()
    };
    let r = share_fetch(&mut a, topic_id, "a", 0, vec![(0, vec![])], 500, 1 << 20).await;
    assert_eq!(acquired(&r), vec![(0, 2, 1)]);
    let r = share_fetch(&mut b, topic_id, "b", 0, vec![(0, vec![])], 0, 1 << 20).await;
    assert_eq!(acquired(&r), vec![]);
    clock.advance(60_001);
    // The lock timer runs every 100 ms of real time; bounded wait for b's second delivery.
    let mut got = Vec::new();
    for epoch in 1..=20 {
        let r = share_fetch(
            &mut b,
            topic_id,
            "b",
            epoch,
            vec![(0, vec![])],
            200,
            1 << 20,
        )
        .await;
        got = acquired(&r);
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got, vec![(0, 2, 2)], "{GROUP} on {TOPIC}");
    broker.stop().await;
}

/// The same seam over a real etcd (`shoal_cluster`): the owners and brokers it holds are what
/// Metadata answers and what the broker serves, and a move made in etcd reaches the broker
/// through its watch.
#[tokio::test]
async fn ownership_from_etcd_routes_requests_as_etcd_says() {
    use shoal_broker::seams::ownership::EtcdOwnership;
    use shoal_cluster::owners::{self, Claim};
    use shoal_cluster::rig::start_etcd;
    use shoal_cluster::session::{self, Session};
    use shoal_cluster::{Keys, OwnerTable};

    let etcd = start_etcd().unwrap();
    let start = || async {
        let client = session::connect(
            std::slice::from_ref(&etcd.endpoint),
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
        Session::start(client, Keys::new("c").unwrap(), 2)
            .await
            .unwrap()
    };
    let (here, other) = (start().await, start().await);
    other.register(2, "broker-two.test:9093").await.unwrap();
    let Claim::Won(mine) = owners::claim(&here, 1, "t", 0).await.unwrap() else {
        panic!("t-0 free");
    };
    let Claim::Won(theirs) = owners::claim(&other, 2, "t", 1).await.unwrap() else {
        panic!("t-1 free");
    };
    let table = OwnerTable::start(here.client(), here.keys().clone())
        .await
        .unwrap();
    let seams = SeamOverrides {
        ownership: Some(Arc::new(EtcdOwnership::new(1, Arc::new(table)))),
        ..SeamOverrides::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with_seams(dir.path(), &[], seams).await;
    here.register(1, &broker.addr.to_string()).await.unwrap();
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 2).await;

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let m = loop {
        let m = metadata(&mut conn, "t").await;
        if m.brokers.len() == 2 {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "both brokers in Metadata"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(leader_of(&m, 0), (0, 1, mine.leader_epoch));
    assert_eq!(leader_of(&m, 1), (0, 2, theirs.leader_epoch));
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);
    assert_eq!(
        produce(&mut conn, "t", 1).await.0,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );

    // Broker 2 dies; nobody owns t-1 until a broker claims it.
    let mut admin = here.client();
    admin.lease_revoke(other.lease()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while leader_of(&metadata(&mut conn, "t").await, 1).0 != ErrorCode::LEADER_NOT_AVAILABLE.code()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "t-1 still owned after its owner died"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        produce(&mut conn, "t", 1).await.0,
        ErrorCode::LEADER_NOT_AVAILABLE.code()
    );
    broker.stop().await;
}

/// A cluster's commits, over a real etcd and a real S3 server: the broker's takeover of the
/// partition happens inside the commit of its second write, as a zombie's would.
struct TakenOverDuringCommit {
    inner: Arc<shoal_broker::seams::object_commits::ObjectCommits>,
    here_lease: i64,
    other: Arc<shoal_cluster::Session>,
    armed: AtomicBool,
}

impl std::fmt::Debug for TakenOverDuringCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TakenOverDuringCommit")
    }
}

impl Durability for TakenOverDuringCommit {
    fn commit(&self, partitions: Vec<Arc<Partition>>) -> Committing<'_> {
        Box::pin(async move {
            let user = partitions.iter().any(|p| p.topic == "t");
            if user && self.armed.swap(false, Ordering::SeqCst) {
                let mut admin = self.other.client();
                admin.lease_revoke(self.here_lease).await.unwrap();
                let claim = shoal_cluster::owners::claim(&self.other, 2, "t", 0).await;
                assert!(matches!(claim, Ok(shoal_cluster::Claim::Won(_))));
            }
            self.inner.commit(partitions).await
        })
    }
}

#[tokio::test]
async fn a_cluster_commit_puts_the_bytes_in_an_object_and_a_zombie_commits_nothing() {
    use shoal_broker::seams::object_commits::ObjectCommits;
    use shoal_broker::seams::ownership::EtcdOwnership;
    use shoal_cluster::commits::{committed_end, index};
    use shoal_cluster::rig::start_etcd;
    use shoal_cluster::session::{self, Session};
    use shoal_cluster::{owners, Keys, OwnerTable};

    let etcd = start_etcd().unwrap();
    let (_s3, objects) = s3_objects();
    let start = || async {
        let client = session::connect(
            std::slice::from_ref(&etcd.endpoint),
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
        Arc::new(
            Session::start(client, Keys::new("c").unwrap(), 2)
                .await
                .unwrap(),
        )
    };
    let (here, other) = (start().await, start().await);
    assert!(matches!(
        owners::claim(&here, 1, "t", 0).await.unwrap(),
        shoal_cluster::Claim::Won(_)
    ));
    let table = Arc::new(
        OwnerTable::start(here.client(), here.keys().clone())
            .await
            .unwrap(),
    );
    let commits = Arc::new(ObjectCommits::new(
        1,
        here.clone(),
        table.clone(),
        objects.clone(),
    ));
    let durability = Arc::new(TakenOverDuringCommit {
        inner: commits,
        here_lease: here.lease(),
        other: other.clone(),
        armed: AtomicBool::new(false),
    });
    let seams = SeamOverrides {
        ownership: Some(Arc::new(EtcdOwnership::new(1, table))),
        durability: Some(durability.clone()),
        ..SeamOverrides::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with_seams(dir.path(), &[], seams).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 1).await;

    // Acknowledged once its bytes are in an object and etcd recorded them.
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);
    assert_eq!(committed_end(&here, "t", 0).await.unwrap(), 1);
    let entries = index(&here, "t", 0, 0).await.unwrap();
    assert_eq!(entries.len(), 1);
    let stored = objects.get(&entries[0].1).await.unwrap();
    let local = {
        let partition = broker.broker.topic("t").unwrap().partition(0).unwrap();
        let log = partition.lock();
        let slice = log.read_slice(0, usize::MAX, None, false).unwrap();
        slice.region.unwrap().read().unwrap()
    };
    assert_eq!(stored, local, "the object holds exactly the log's batch");

    // Taken over while its second write commits: not acknowledged, not recorded.
    durability.armed.store(true, Ordering::SeqCst);
    assert_eq!(
        produce(&mut conn, "t", 0).await.0,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(committed_end(&other, "t", 0).await.unwrap(), 1);
    assert_eq!(index(&other, "t", 0, 0).await.unwrap().len(), 1);
    broker.stop().await;
}

/// A real S3-protocol server (SeaweedFS) with bucket `shoal`, and the object store over it
/// under prefix `c` (the credentials set for the client; the server checks none).
fn s3_objects() -> (shoal_cluster::rig::Server, shoal_cluster::Objects) {
    use shoal_cluster::rig::{create_bucket, start_s3};
    let s3 = start_s3().unwrap();
    create_bucket(&s3.endpoint, "shoal").unwrap();
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let url = format!("s3://shoal/c?endpoint={}&region=us-east-1", s3.endpoint);
    let objects = shoal_cluster::Objects::from_url(&url).unwrap();
    (s3, objects)
}

/// How long the cluster brokers of these tests let an object's PUT take.
const PUT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// One broker of a cluster over `etcd` and `objects`: its session, and the seams over it.
async fn cluster_broker(
    etcd: &shoal_cluster::rig::Server,
    objects: &shoal_cluster::Objects,
    node_id: i32,
    dir: &std::path::Path,
) -> (Arc<shoal_cluster::Session>, TestBroker) {
    let m = common::cluster::member(etcd, objects, node_id, dir, &[], Some(PUT_DEADLINE)).await;
    (m.session, m.broker)
}

#[tokio::test]
async fn a_broker_takes_over_a_crashed_owners_partition_with_its_committed_records() {
    use shoal_cluster::commits::committed_end;
    use shoal_cluster::rig::start_etcd;
    use shoal_cluster::{owners, Claim, Objects};

    let etcd = start_etcd().unwrap();
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = tempfile::tempdir().unwrap();
    let objects = Objects::from_url(&format!("file://{}", store.path().display())).unwrap();
    let (sa, a) = cluster_broker(&etcd, &objects, 1, dirs.0.path()).await;
    let (sb, b) = cluster_broker(&etcd, &objects, 2, dirs.1.path()).await;
    assert!(matches!(
        owners::claim(&sa, 1, "t", 0).await.unwrap(),
        Claim::Won(_)
    ));
    let (mut to_a, mut to_b) = (a.connect().await, b.connect().await);
    // Topics are not in etcd yet: each broker is told of the topic.
    common::create_topic(&mut to_a, "t", 1).await;
    common::create_topic(&mut to_b, "t", 1).await;
    for _ in 0..3 {
        assert_eq!(produce(&mut to_a, "t", 0).await.0, 0);
    }
    assert_eq!(
        produce(&mut to_b, "t", 0).await.0,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );

    // A dies; its lease goes; B claims the partition and takes it over.
    a.crash().await;
    let mut admin = sb.client();
    admin.lease_revoke(sa.lease()).await.unwrap();
    let Claim::Won(owner) = owners::claim(&sb, 2, "t", 0).await.unwrap() else {
        panic!("t-0 was freed with a's lease");
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match produce(&mut to_b, "t", 0).await.0 {
            0 => break,
            code => assert!(
                code == ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
                    || code == ErrorCode::LEADER_NOT_AVAILABLE.code(),
                "{code}"
            ),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "B never took t-0 over"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A's three acknowledged records, then B's.
    let partition = b.broker.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(partition.leader_epoch, owner.leader_epoch);
    assert_eq!(partition.lock().log_end_offset(), 4);
    assert_eq!(committed_end(&sb, "t", 0).await.unwrap(), 4);
    assert_eq!(fetch(&mut to_b, "t", 0, owner.leader_epoch).await, 0);
    b.stop().await;
}

#[tokio::test]
async fn a_commit_whose_object_is_not_stored_leaves_nothing_behind() {
    use shoal_cluster::commits::{committed_end, index};
    use shoal_cluster::rig::start_etcd;
    use shoal_cluster::{owners, Claim, Objects};

    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let objects_dir = store.path().join("objects");
    let objects = Objects::from_url(&format!("file://{}", objects_dir.display())).unwrap();
    let (s, broker) = cluster_broker(&etcd, &objects, 1, dir.path()).await;
    assert!(matches!(
        owners::claim(&s, 1, "t", 0).await.unwrap(),
        Claim::Won(_)
    ));
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 1).await;
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);

    // The object store fails (its directory is gone, a file in its place): the write is not
    // acknowledged, and the local log drops it rather than commit it later unannounced.
    std::fs::rename(&objects_dir, store.path().join("away")).unwrap();
    std::fs::write(&objects_dir, b"not a directory").unwrap();
    assert_eq!(
        produce(&mut conn, "t", 0).await.0,
        ErrorCode::KAFKA_STORAGE_ERROR.code()
    );
    let partition = broker.broker.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(partition.lock().log_end_offset(), 1);

    // Back: the next write takes the offset the failed one had.
    std::fs::remove_file(&objects_dir).unwrap();
    std::fs::rename(store.path().join("away"), &objects_dir).unwrap();
    let (code, _) = produce(&mut conn, "t", 0).await;
    assert_eq!(code, 0);
    assert_eq!(partition.lock().log_end_offset(), 2);
    assert_eq!(committed_end(&s, "t", 0).await.unwrap(), 2);
    assert_eq!(index(&s, "t", 0, 0).await.unwrap().len(), 2);
    broker.stop().await;
}

#[tokio::test]
async fn a_produce_to_more_partitions_than_one_etcd_transaction_takes_is_committed() {
    use shoal_cluster::commits::committed_end;
    use shoal_cluster::rig::start_etcd;
    use shoal_cluster::{owners, Claim, Objects};

    const PARTITIONS: i32 = 120;
    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let objects = Objects::from_url(&format!("file://{}", store.path().display())).unwrap();
    let (session, broker) = cluster_broker(&etcd, &objects, 1, dir.path()).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "wide", PARTITIONS).await;
    for p in 0..PARTITIONS {
        assert!(matches!(
            owners::claim(&session, 1, "wide", p).await.unwrap(),
            Claim::Won(_)
        ));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (0..PARTITIONS).any(|p| {
        broker
            .broker
            .topic("wide")
            .unwrap()
            .partition(p)
            .unwrap()
            .leader_epoch
            == shoal_broker::seams::ownership::NOT_OWNED
    }) {
        assert!(std::time::Instant::now() < deadline, "not taken over");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // One request, one record to each partition: one commit of 120 partitions.
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s("wide")))
            .with_partition_data(
                (0..PARTITIONS)
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(records("v", common::now_ms())))
                    })
                    .collect(),
            )]);
    let r = conn.request(9, &request).await.unwrap();
    let codes: Vec<i16> = r.responses[0]
        .partition_responses
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert!(codes.iter().all(|c| *c == 0), "{codes:?}");
    for p in 0..PARTITIONS {
        assert_eq!(
            committed_end(&session, "wide", p).await.unwrap(),
            1,
            "wide-{p}"
        );
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_stalled_object_store_fails_writes_retriably_and_they_resume_when_it_is_back() {
    use std::time::Duration;

    use shoal_cluster::commits::{committed_end, index};
    use shoal_cluster::rig::start_etcd;
    use shoal_cluster::{owners, Claim};

    let etcd = start_etcd().unwrap();
    let (s3, objects) = s3_objects();
    let dir = tempfile::tempdir().unwrap();
    let (session, broker) = cluster_broker(&etcd, &objects, 1, dir.path()).await;
    assert!(matches!(
        owners::claim(&session, 1, "t", 0).await.unwrap(),
        Claim::Won(_)
    ));
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "t", 1).await;
    // The store's first PUT may be slow (it allocates its volumes): retried as a producer would.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match produce(&mut conn, "t", 0).await.0 {
            0 => break,
            code => assert_eq!(code, ErrorCode::KAFKA_STORAGE_ERROR.code()),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the store never took a write"
        );
    }

    // The store stops answering (SIGSTOP: connections accepted, nothing answered). Each write
    // is refused with a retriable error while it is still stopped — not held until the S3
    // client's own timeouts and retries give up, minutes later — and is not kept.
    s3.signal("STOP").unwrap();
    let partition = broker.broker.topic("t").unwrap().partition(0).unwrap();
    for _ in 0..2 {
        // Less than the S3 client's own request timeout (30 s): without the deadline, no answer.
        let answer = tokio::time::timeout(Duration::from_secs(25), produce(&mut conn, "t", 0))
            .await
            .expect("no answer to a write while the store was stalled");
        assert_eq!(answer.0, ErrorCode::KAFKA_STORAGE_ERROR.code());
        assert_eq!(partition.lock().log_end_offset(), 1);
    }
    assert_eq!(committed_end(&session, "t", 0).await.unwrap(), 1);

    // Back: writes resume where the acknowledged ones end; the PUTs given up on (which may
    // land now) are named by no commit.
    s3.signal("CONT").unwrap();
    assert_eq!(produce(&mut conn, "t", 0).await.0, 0);
    assert_eq!(partition.lock().log_end_offset(), 2);
    assert_eq!(committed_end(&session, "t", 0).await.unwrap(), 2);
    let entries = index(&session, "t", 0, 0).await.unwrap();
    assert_eq!(entries.len(), 2);
    for (_, object) in &entries {
        objects.get(object).await.unwrap();
    }
    broker.stop().await;
}
