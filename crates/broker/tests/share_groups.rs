//! Share-group membership over the wire: `share.version` gating, ShareGroupHeartbeat joins,
//! shared and rebalanced assignments, leave, ShareGroupDescribe, ListGroups with the type
//! filter, the group-id namespace shared with classic groups, DeleteGroups, and the group
//! surviving a restart.

mod common;

use common::{create_topic, TestBroker};
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DeleteGroupsRequest, GroupId, JoinGroupRequest, ListGroupsRequest,
    ShareGroupDescribeRequest, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
    UpdateFeaturesRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn set_share_version(conn: &mut Connection, level: i16) {
    let r = conn
        .request(
            1,
            &UpdateFeaturesRequest::default()
                .with_timeout_ms(5000)
                .with_feature_updates(vec![FeatureUpdateKey::default()
                    .with_feature(s("share.version"))
                    .with_max_version_level(level)
                    .with_upgrade_type(if level == 0 { 2 } else { 1 })]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.results[0].error_code, 0,
        "{:?}",
        r.results[0].error_message
    );
}

async fn advertises_share(conn: &mut Connection) -> bool {
    let r = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    r.api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::ShareGroupHeartbeat as i16)
}

async fn heartbeat(
    conn: &mut Connection,
    group: &str,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
) -> ShareGroupHeartbeatResponse {
    conn.request(
        1,
        &ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(
                topics.map(|t| t.iter().map(|n| TopicName(s(n))).collect()),
            ),
    )
    .await
    .unwrap()
}

/// Partitions of the assignment in a heartbeat response (None: unchanged / not sent).
fn assigned(r: &ShareGroupHeartbeatResponse) -> Option<Vec<i32>> {
    r.assignment.as_ref().map(|a| {
        let mut p: Vec<i32> = a
            .topic_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().copied())
            .collect();
        p.sort_unstable();
        p
    })
}

async fn list_share_groups(conn: &mut Connection) -> Vec<(String, String)> {
    let r = conn
        .request(
            5,
            &ListGroupsRequest::default().with_types_filter(vec![s("share")]),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
    r.groups
        .iter()
        .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
        .collect()
}

#[tokio::test]
async fn share_group_membership_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let (m1, m2) = ("member-one-0000000000000000000000", "member-two");
    {
        let broker = TestBroker::start(dir.path()).await;
        let mut conn = broker.connect().await;
        create_topic(&mut conn, "queue", 3).await;

        // share.version is finalized at 3 by default. At 0 the share RPCs are not advertised
        // and answer UNSUPPORTED_VERSION (the connection stays usable).
        assert!(advertises_share(&mut conn).await);
        set_share_version(&mut conn, 0).await;
        assert!(!advertises_share(&mut conn).await);
        let r = heartbeat(&mut conn, "q", m1, 0, Some(&["queue"])).await;
        assert_eq!(r.error_code, ErrorCode::UNSUPPORTED_VERSION.code());
        set_share_version(&mut conn, 1).await;
        assert!(advertises_share(&mut conn).await);

        // Bad member ids.
        for bad in ["", "0123456789012345678901234567890123456"] {
            let r = heartbeat(&mut conn, "q", bad, 0, Some(&["queue"])).await;
            assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code(), "{bad:?}");
        }
        // Join: the only member gets every partition.
        let r = heartbeat(&mut conn, "q", m1, 0, Some(&["queue"])).await;
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        assert_eq!(r.member_id.as_deref(), Some(m1));
        assert_eq!(r.heartbeat_interval_ms, 5000);
        assert_eq!(assigned(&r), Some(vec![0, 1, 2]));
        let e1 = r.member_epoch;
        assert!(e1 > 0);
        // A second member: the partitions are split between the two.
        let r2 = heartbeat(&mut conn, "q", m2, 0, Some(&["queue"])).await;
        assert_eq!(r2.error_code, 0);
        let p2 = assigned(&r2).unwrap();
        let r1 = heartbeat(&mut conn, "q", m1, e1, None).await;
        assert_eq!(r1.error_code, 0);
        let p1 = assigned(&r1).unwrap();
        let mut all: Vec<i32> = p1.iter().chain(&p2).copied().collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2], "{p1:?} + {p2:?}");
        assert!(p1.len().abs_diff(p2.len()) <= 1);
        // A wrong epoch is fenced; an unknown member is refused.
        let r = heartbeat(&mut conn, "q", m1, r1.member_epoch + 5, None).await;
        assert_eq!(r.error_code, ErrorCode::FENCED_MEMBER_EPOCH.code());
        let r = heartbeat(&mut conn, "q", "stranger", 3, None).await;
        assert_eq!(r.error_code, ErrorCode::UNKNOWN_MEMBER_ID.code());

        // Describe and list.
        let d = conn
            .request(
                1,
                &ShareGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(s("q")), GroupId(s("none"))]),
            )
            .await
            .unwrap();
        assert_eq!(d.groups[0].error_code, 0);
        assert_eq!(d.groups[0].group_state.as_str(), "Stable");
        assert_eq!(d.groups[0].assignor_name.as_str(), "simple");
        assert_eq!(d.groups[0].members.len(), 2);
        assert!(d.groups[0].members.iter().all(|m| m
            .assignment
            .topic_partitions
            .iter()
            .all(|t| t.topic_name.0.as_str() == "queue")));
        assert_eq!(d.groups[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
        assert_eq!(
            list_share_groups(&mut conn).await,
            vec![("q".to_string(), "Stable".to_string())]
        );
        // One namespace: a classic join of a share group's id is refused.
        let j = conn
            .request(
                5,
                &JoinGroupRequest::default()
                    .with_group_id(GroupId(s("q")))
                    .with_session_timeout_ms(10_000)
                    .with_rebalance_timeout_ms(10_000)
                    .with_protocol_type(s("consumer")),
            )
            .await
            .unwrap();
        assert_eq!(j.error_code, ErrorCode::INCONSISTENT_GROUP_PROTOCOL.code());
        // A non-empty share group cannot be deleted.
        let del = conn
            .request(
                2,
                &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("q"))]),
            )
            .await
            .unwrap();
        assert_eq!(del.results[0].error_code, ErrorCode::NON_EMPTY_GROUP.code());
        // m2 leaves: m1 gets everything back.
        let r = heartbeat(&mut conn, "q", m2, -1, None).await;
        assert_eq!((r.error_code, r.member_epoch), (0, -1));
        let r = heartbeat(&mut conn, "q", m1, r1.member_epoch, None).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(assigned(&r), Some(vec![0, 1, 2]));
        broker.stop().await;
    }
    // The group and its member are durable; partitions added later are assigned.
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    assert!(advertises_share(&mut conn).await, "share.version persisted");
    assert_eq!(
        list_share_groups(&mut conn).await,
        vec![("q".to_string(), "Stable".to_string())]
    );
    let r = heartbeat(&mut conn, "q", m1, 0, Some(&["queue"])).await;
    assert_eq!(r.error_code, 0, "a known member may rejoin with epoch 0");
    assert_eq!(assigned(&r), Some(vec![0, 1, 2]));
    {
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        use kafka_protocol::messages::CreatePartitionsRequest;
        let grown = conn
            .request(
                1,
                &CreatePartitionsRequest::default()
                    .with_timeout_ms(5000)
                    .with_topics(vec![CreatePartitionsTopic::default()
                        .with_name(TopicName(s("queue")))
                        .with_count(4)
                        // No manual assignment (an empty list is one, and is refused).
                        .with_assignments(None)]),
            )
            .await
            .unwrap();
        assert_eq!(grown.results[0].error_code, 0);
    }
    let r = heartbeat(&mut conn, "q", m1, r.member_epoch, None).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        assigned(&r),
        Some(vec![0, 1, 2, 3]),
        "the new partition is assigned"
    );
    let left = heartbeat(&mut conn, "q", m1, -1, None).await;
    assert_eq!(left.error_code, 0);
    assert_eq!(
        list_share_groups(&mut conn).await,
        vec![("q".to_string(), "Empty".to_string())]
    );
    let del = conn
        .request(
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("q"))]),
        )
        .await
        .unwrap();
    assert_eq!(del.results[0].error_code, 0);
    assert!(list_share_groups(&mut conn).await.is_empty());
    broker.stop().await;
}
