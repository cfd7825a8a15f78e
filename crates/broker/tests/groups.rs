//! Group coordinator through the broker: committed offsets and group membership are records in
//! `__consumer_offsets` and come back after a restart.

mod common;

use common::TestBroker;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    DescribeGroupsRequest, GroupId, HeartbeatRequest, JoinGroupRequest, ListGroupsRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::ErrorCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn commit(group: &str, generation: i32, member: &str, offset: i64) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s("orders")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)
                .with_committed_metadata(Some(s("meta")))])])
}

fn fetch_offsets(group: &str) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(s("orders")))
            .with_partition_indexes(vec![0, 1])]))
}

#[tokio::test]
async fn committed_offsets_and_groups_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    // Offsets are committed only for partitions that exist, as in Kafka.
    common::create_topic(&mut conn, "orders", 1).await;

    // A standalone commit (generation -1) on a group with no members.
    let response = conn
        .request(8, &commit("standalone", -1, "", 42))
        .await
        .unwrap();
    assert_eq!(response.topics[0].partitions[0].error_code, 0);

    // A real member: join (v4+ first gets MEMBER_ID_REQUIRED), sync, commit.
    let join = |member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("members")))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(bytes::Bytes::from_static(b"sub"))])
    };
    let first = conn.request(7, &join("")).await.unwrap();
    assert_eq!(first.error_code, ErrorCode::MEMBER_ID_REQUIRED.code());
    let member = first.member_id.to_string();
    let joined = conn.request(7, &join(&member)).await.unwrap();
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.leader.as_str(), member);
    let generation = joined.generation_id;
    let synced = conn
        .request(
            5,
            &SyncGroupRequest::default()
                .with_group_id(GroupId(s("members")))
                .with_generation_id(generation)
                .with_member_id(s(&member))
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")))
                .with_assignments(vec![SyncGroupRequestAssignment::default()
                    .with_member_id(s(&member))
                    .with_assignment(bytes::Bytes::from_static(b"assigned"))]),
        )
        .await
        .unwrap();
    assert_eq!(synced.error_code, 0);
    assert_eq!(&synced.assignment[..], b"assigned");
    let response = conn
        .request(8, &commit("members", generation, &member, 7))
        .await
        .unwrap();
    assert_eq!(response.topics[0].partitions[0].error_code, 0);
    let stale = conn
        .request(8, &commit("members", generation + 5, &member, 8))
        .await
        .unwrap();
    assert_eq!(
        stale.topics[0].partitions[0].error_code,
        ErrorCode::ILLEGAL_GENERATION.code()
    );

    drop(conn);
    broker.stop().await;
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;

    let fetched = conn.request(7, &fetch_offsets("standalone")).await.unwrap();
    let partitions = &fetched.topics[0].partitions;
    assert_eq!(partitions[0].committed_offset, 42);
    assert_eq!(
        partitions[0].metadata.as_ref().map(|m| m.as_str()),
        Some("meta")
    );
    assert_eq!(
        partitions[1].committed_offset, -1,
        "nothing committed for partition 1"
    );
    let fetched = conn.request(7, &fetch_offsets("members")).await.unwrap();
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, 7);

    // The member came back with the group and can keep heartbeating at its generation.
    let heartbeat = conn
        .request(
            4,
            &HeartbeatRequest::default()
                .with_group_id(GroupId(s("members")))
                .with_generation_id(generation)
                .with_member_id(s(&member)),
        )
        .await
        .unwrap();
    assert_eq!(heartbeat.error_code, 0);
    let described = conn
        .request(
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s("members"))]),
        )
        .await
        .unwrap();
    assert_eq!(described.groups[0].group_state.as_str(), "Stable");
    assert_eq!(described.groups[0].members.len(), 1);
    let listed = conn
        .request(4, &ListGroupsRequest::default())
        .await
        .unwrap();
    let mut names: Vec<_> = listed
        .groups
        .iter()
        .map(|g| g.group_id.0.to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["members".to_string(), "standalone".to_string()]);
    broker.stop().await;
}

/// The offset `group` has committed for orders-0, asked of the coordinator.
async fn committed(broker: &TestBroker, group: &str) -> i64 {
    use shoal_core::group_coordinator as gc;
    let fetched = broker
        .broker
        .groups
        .call(gc::GroupRequest::OffsetFetch(gc::OffsetFetchRequest {
            group_id: group.to_string(),
            partitions: Some(vec![("orders".to_string(), 0)]),
            require_stable: false,
        }))
        .await
        .unwrap();
    match fetched {
        gc::GroupResponse::OffsetFetch(r) => r.partitions[0].offset,
        other => panic!("unexpected reply {other:?}"),
    }
}

/// The contract the connection's order rests on: a request submitted to the coordinator is
/// queued when `submit` returns, so two commits take effect in submission order even when the
/// later one's reply is awaited first. A `submit` that queued lazily (on first poll) would
/// apply 2 before 1 here and leave the group at 1.
#[tokio::test]
async fn submitted_commits_take_effect_in_submission_order_whoever_is_awaited_first() {
    use shoal_core::group_coordinator as gc;
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "orders", 1).await;
    let request = |offset: i64| {
        gc::GroupRequest::OffsetCommit(gc::OffsetCommitRequest {
            group_id: "ordered".to_string(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            offsets: vec![gc::OffsetCommitPartition {
                topic: "orders".to_string(),
                partition: 0,
                offset,
                leader_epoch: -1,
                metadata: None,
            }],
        })
    };
    let groups = &broker.broker.groups;
    let first = groups.submit(request(1)).await.unwrap();
    let second = groups.submit(request(2)).await.unwrap();
    assert!(second.await.is_ok());
    assert!(first.await.is_ok());
    assert_eq!(committed(&broker, "ordered").await, 2);
    drop(conn);
    broker.stop().await;
}

/// librdkafka sends every asynchronous OffsetCommit at once on the coordinator connection,
/// then a synchronous one (interop `test_many_async_commits_then_a_sync_one`). All are
/// answered in order without error, the last one sent is the one committed, also after a
/// restart, and the pipelined commits share the coordinator's appends (handled one request
/// at a time, the 201 commits would take 201 batches, one fsync each).
#[tokio::test]
async fn pipelined_commits_of_one_connection_take_effect_in_order_and_share_appends() {
    use kafka_protocol::messages::{ApiKey, RequestHeader};
    use kafka_protocol::protocol::{Encodable, HeaderVersion};
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "orders", 1).await;
    let offsets: Vec<i64> = (0..200).chain([500]).collect();
    let mut wire = bytes::BytesMut::new();
    for (i, offset) in offsets.iter().enumerate() {
        let mut frame = bytes::BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(8)
            .with_request_api_version(8)
            .with_correlation_id(i as i32 + 1)
            .encode(&mut frame, OffsetCommitRequest::header_version(8))
            .unwrap();
        commit("async", -1, "", *offset)
            .encode(&mut frame, 8)
            .unwrap();
        wire.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        wire.extend_from_slice(&frame);
    }
    conn.send_raw(&wire).await.unwrap();
    for expected in 1..=offsets.len() as i32 {
        let reply = tokio::time::timeout(std::time::Duration::from_secs(30), conn.read_frame())
            .await
            .unwrap_or_else(|_| panic!("no answer to commit {expected}"))
            .unwrap();
        let (correlation_id, response) =
            shoal_protocol::response::decode_response(ApiKey::OffsetCommit, 8, reply).unwrap();
        assert_eq!(correlation_id, expected);
        let shoal_protocol::response::Response::OffsetCommit(response) = response else {
            panic!("not an OffsetCommit response");
        };
        assert_eq!(
            response.topics[0].partitions[0].error_code, 0,
            "commit {expected} failed"
        );
    }
    assert_eq!(committed(&broker, "async").await, 500);

    // Count the batches the commits took in __consumer_offsets.
    let partition = shoal_core::group_coordinator::partition_for("async", 3) as i32;
    let segment = common::log_cut::first_segment(dir.path(), "__consumer_offsets", partition);
    let commit_batches = common::log_cut::batches(&segment)
        .into_iter()
        .filter(|(_, records)| {
            records.iter().any(|r| {
                r.key
                    .as_deref()
                    .is_some_and(|k| k.windows(5).any(|w| w == b"async"))
            })
        })
        .count();
    assert!(
        commit_batches < offsets.len(),
        "{commit_batches} batches for {} pipelined commits",
        offsets.len()
    );
    drop(conn);
    broker.stop().await;
    let broker = TestBroker::start(dir.path()).await;
    assert_eq!(committed(&broker, "async").await, 500);
    broker.stop().await;
}
