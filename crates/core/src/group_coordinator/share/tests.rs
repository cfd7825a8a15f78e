//! Unit tests: every error case of ShareGroupHeartbeat, the record sequences of joins, leaves,
//! expiry, metadata changes and deletion, and the exact record byte layouts.

use std::collections::{BTreeMap, BTreeSet};

use super::assignor::{assign, AssignmentMember};
use super::records::*;
use super::*;

const G: &str = "g";

fn tid(n: u8) -> TopicId {
    [n; 16]
}

fn image(topics: &[(&str, u8, i32)]) -> TopicsImage {
    TopicsImage::new(
        topics
            .iter()
            .map(|(name, id, parts)| (name.to_string(), tid(*id), *parts)),
    )
}

fn coordinator(topics: &[(&str, u8, i32)]) -> ShareGroupCoordinator {
    let mut c = ShareGroupCoordinator::new(ShareGroupConfig::default());
    let out = c.on_metadata_change(image(topics));
    assert!(out.records.is_empty());
    c
}

fn request(member: &str, epoch: i32, subs: Option<&[&str]>) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: G.to_string(),
        member_id: member.to_string(),
        member_epoch: epoch,
        rack_id: None,
        subscribed_topic_names: subs.map(|s| s.iter().map(|t| t.to_string()).collect()),
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
    }
}

fn hb(
    c: &mut ShareGroupCoordinator,
    now: i64,
    member: &str,
    epoch: i32,
    subs: Option<&[&str]>,
) -> Output<HeartbeatResponse> {
    c.heartbeat(now, &request(member, epoch, subs), GroupIdUse::Free)
        .expect("heartbeat accepted")
}

fn assignment_of(resp: &HeartbeatResponse) -> Assignment {
    resp.assignment
        .iter()
        .flatten()
        .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
        .collect()
}

fn parts(topic: u8, ps: &[i32]) -> Assignment {
    BTreeMap::from([(tid(topic), ps.iter().copied().collect())])
}

fn size(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// Asserts the call was refused with `code` and changed nothing.
fn refused(
    c: &mut ShareGroupCoordinator,
    req: HeartbeatRequest,
    id_use: GroupIdUse,
    code: ErrorCode,
) {
    let before = c.durable_state();
    assert_eq!(
        c.heartbeat(0, &req, id_use).map(|o| o.reply),
        Err(code),
        "{req:?}"
    );
    assert_eq!(c.durable_state(), before);
}

// ---------------------------------------------------------------------------------------------
// Join, heartbeat, epochs
// ---------------------------------------------------------------------------------------------

#[test]
fn first_join_writes_kafka_record_sequence() {
    let mut c = coordinator(&[("t", 1, 3)]);
    let out = hb(&mut c, 0, "m1", 0, Some(&["t"]));
    assert_eq!(out.reply.member_epoch, 1);
    assert_eq!(out.reply.heartbeat_interval_ms, 5_000);
    assert_eq!(assignment_of(&out.reply), parts(1, &[0, 1, 2]));
    let hash = group::metadata_hash(["t"], c.topics());
    assert_ne!(hash, 0);
    let expected = vec![
        ShareGroupRecord::MemberMetadata {
            group_id: G.into(),
            member_id: "m1".into(),
            value: Some(MemberMetadataValue {
                rack_id: None,
                client_id: "client".into(),
                client_host: "/127.0.0.1".into(),
                subscribed_topic_names: BTreeSet::from(["t".to_string()]),
            }),
        },
        ShareGroupRecord::GroupMetadata {
            group_id: G.into(),
            value: Some(GroupMetadataValue {
                epoch: 1,
                metadata_hash: hash,
            }),
        },
        ShareGroupRecord::TargetAssignmentMember {
            group_id: G.into(),
            member_id: "m1".into(),
            value: Some(parts(1, &[0, 1, 2])),
        },
        ShareGroupRecord::TargetAssignmentMetadata {
            group_id: G.into(),
            value: Some(1),
        },
        ShareGroupRecord::CurrentMemberAssignment {
            group_id: G.into(),
            member_id: "m1".into(),
            value: Some(CurrentAssignmentValue {
                member_epoch: 1,
                previous_member_epoch: 0,
                state: MEMBER_STATE_STABLE,
                assigned_partitions: parts(1, &[0, 1, 2]),
            }),
        },
    ];
    assert_eq!(out.records, expected);
    c.check_invariants().expect("invariants");
}

#[test]
fn second_member_moves_both_to_the_new_epoch_without_revocation() {
    let mut c = coordinator(&[("t", 1, 4)]);
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    let out = hb(&mut c, 10, "m2", 0, Some(&["t"]));
    assert_eq!(out.reply.member_epoch, 2);
    let m2 = assignment_of(&out.reply);
    assert_eq!(size(&m2), 2);
    // m1's target shrank at epoch 2 (one target record for m1, one for m2).
    let targets = out
        .records
        .iter()
        .filter(|r| matches!(r, ShareGroupRecord::TargetAssignmentMember { .. }))
        .count();
    assert_eq!(targets, 2);
    // m1 still at epoch 1 until it heartbeats; then it jumps to 2 with the rest.
    let out = hb(&mut c, 20, "m1", 1, None);
    assert_eq!(out.reply.member_epoch, 2);
    let m1 = assignment_of(&out.reply);
    assert_eq!(size(&m1), 2);
    assert!(m1.get(&tid(1)).is_some_and(|p| p.is_disjoint(&m2[&tid(1)])));
    // Stickiness: m1 kept partitions it had.
    assert!(m1[&tid(1)].is_subset(&BTreeSet::from([0, 1, 2, 3])));
    // Nothing changed: no records, no assignment in the response.
    let out = hb(&mut c, 30, "m1", 2, None);
    assert!(out.records.is_empty());
    assert_eq!(out.reply.assignment, None);
    assert_eq!(out.reply.member_epoch, 2);
    c.check_invariants().expect("invariants");
}

#[test]
fn previous_epoch_is_accepted_other_epochs_are_fenced() {
    let mut c = coordinator(&[("t", 1, 2)]);
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    hb(&mut c, 0, "m2", 0, Some(&["t"]));
    // m1: epoch 1 → 2 (previous 1).
    let bump = hb(&mut c, 0, "m1", 1, None).reply;
    assert_eq!(bump.member_epoch, 2);
    let moved_to = assignment_of(&bump);
    assert_eq!(size(&moved_to), 1);
    // The response was lost: m1 retries with 1, its previous epoch, and is sent the
    // assignment it missed.
    let out = hb(&mut c, 0, "m1", 1, None);
    assert_eq!(out.reply.member_epoch, 2);
    assert!(out.records.is_empty());
    assert_eq!(assignment_of(&out.reply), moved_to);
    // Once caught up, a steady heartbeat carries no assignment.
    assert!(hb(&mut c, 0, "m1", 2, None).reply.assignment.is_none());
    refused(
        &mut c,
        request("m1", 3, None),
        GroupIdUse::Free,
        FENCED_MEMBER_EPOCH,
    );
    hb(&mut c, 0, "m3", 0, Some(&["t"]));
    assert_eq!(hb(&mut c, 0, "m1", 2, None).reply.member_epoch, 3);
    // Now previous = 2: epoch 1 is too old.
    refused(
        &mut c,
        request("m1", 1, None),
        GroupIdUse::Free,
        FENCED_MEMBER_EPOCH,
    );
}

#[test]
fn rejoin_with_epoch_zero_keeps_epoch_and_returns_assignment() {
    let mut c = coordinator(&[("t", 1, 2)]);
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    let out = hb(&mut c, 0, "m1", 0, Some(&["t"]));
    assert_eq!(out.reply.member_epoch, 1);
    assert_eq!(assignment_of(&out.reply), parts(1, &[0, 1]));
    // Only the (unchanged) metadata: nothing is written, the group epoch stays.
    assert!(out.records.is_empty());
    assert_eq!(c.describe(&[G.to_string()])[0].group_epoch, 1);
}

#[test]
fn assignment_sent_on_full_request_and_on_change_only() {
    let mut c = coordinator(&[("t", 1, 2), ("u", 2, 1)]);
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    // Full request (subscription present, unchanged): assignment sent, nothing written.
    let out = hb(&mut c, 0, "m1", 1, Some(&["t"]));
    assert_eq!(assignment_of(&out.reply), parts(1, &[0, 1]));
    assert!(out.records.is_empty());
    // Subscription change: epoch bump and new assignment.
    let out = hb(&mut c, 0, "m1", 1, Some(&["t", "u"]));
    assert_eq!(out.reply.member_epoch, 2);
    let mut expected = parts(1, &[0, 1]);
    expected.insert(tid(2), BTreeSet::from([0]));
    assert_eq!(assignment_of(&out.reply), expected);
    // Client id change: metadata record, no bump, no assignment.
    let mut req = request("m1", 2, None);
    req.client_id = "other".into();
    let out = c.heartbeat(0, &req, GroupIdUse::Free).expect("ok");
    assert_eq!(out.reply.assignment, None);
    assert!(matches!(
        out.records.as_slice(),
        [ShareGroupRecord::MemberMetadata { .. }]
    ));
}

#[test]
fn rack_id_is_kept_when_absent() {
    let mut c = coordinator(&[("t", 1, 1)]);
    let mut req = request("m1", 0, Some(&["t"]));
    req.rack_id = Some("r1".into());
    c.heartbeat(0, &req, GroupIdUse::Free).expect("ok");
    hb(&mut c, 0, "m1", 1, None);
    let d = &c.describe(&[G.to_string()])[0];
    assert_eq!(d.members[0].rack_id.as_deref(), Some("r1"));
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_requests() {
    let mut c = coordinator(&[("t", 1, 1)]);
    let free = GroupIdUse::Free;
    let bad = ErrorCode::INVALID_REQUEST;
    refused(&mut c, request("", 0, Some(&["t"])), free, bad);
    let long = "x".repeat(37);
    refused(&mut c, request(&long, 0, Some(&["t"])), free, bad);
    let mut req = request("m", 0, Some(&["t"]));
    req.group_id = String::new();
    refused(&mut c, req, free, bad);
    let mut req = request("m", 0, Some(&["t"]));
    req.rack_id = Some(String::new());
    refused(&mut c, req, free, bad);
    refused(&mut c, request("m", 0, None), free, bad);
    refused(&mut c, request("m", 0, Some(&[])), free, bad);
    refused(&mut c, request("m", -2, None), free, bad);
    let mut c = ShareGroupCoordinator::new(ShareGroupConfig {
        subscribed_topics_max: 1,
        ..ShareGroupConfig::default()
    });
    refused(&mut c, request("m", 0, Some(&["t", "u"])), free, bad);
    // 36 characters is fine.
    let ok = "y".repeat(36);
    assert!(c.heartbeat(0, &request(&ok, 0, Some(&["t"])), free).is_ok());
}

#[test]
fn unknown_group_member_and_classic_ids() {
    let mut c = coordinator(&[("t", 1, 1)]);
    let free = GroupIdUse::Free;
    refused(
        &mut c,
        request("m", 1, None),
        free,
        ErrorCode::GROUP_ID_NOT_FOUND,
    );
    refused(
        &mut c,
        request("m", -1, None),
        free,
        ErrorCode::GROUP_ID_NOT_FOUND,
    );
    let classic = GroupIdUse::Classic;
    refused(
        &mut c,
        request("m", 0, Some(&["t"])),
        classic,
        ErrorCode::GROUP_ID_NOT_FOUND,
    );
    refused(
        &mut c,
        request("m", -1, None),
        classic,
        ErrorCode::GROUP_ID_NOT_FOUND,
    );
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    refused(
        &mut c,
        request("m2", 1, None),
        free,
        ErrorCode::UNKNOWN_MEMBER_ID,
    );
    refused(
        &mut c,
        request("m2", -1, None),
        free,
        ErrorCode::UNKNOWN_MEMBER_ID,
    );
    assert!(c.contains_group(G));
}

#[test]
fn group_size_limit_and_override() {
    let mut c = ShareGroupCoordinator::new(ShareGroupConfig {
        max_size: 2,
        ..ShareGroupConfig::default()
    });
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    hb(&mut c, 0, "m2", 0, Some(&["t"]));
    let full = ErrorCode::GROUP_MAX_SIZE_REACHED;
    refused(
        &mut c,
        request("m3", 0, Some(&["t"])),
        GroupIdUse::Free,
        full,
    );
    // Kafka checks the size before the member: an unknown member gets the size error too.
    refused(&mut c, request("m3", 5, None), GroupIdUse::Free, full);
    // Known members still heartbeat and rejoin.
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    c.set_group_overrides(
        G,
        GroupOverrides {
            max_size: Some(3),
            ..GroupOverrides::default()
        },
    );
    hb(&mut c, 0, "m3", 0, Some(&["t"]));
    c.set_group_overrides(
        G,
        GroupOverrides {
            max_size: Some(1),
            ..GroupOverrides::default()
        },
    );
    refused(
        &mut c,
        request("m4", 0, Some(&["t"])),
        GroupIdUse::Free,
        full,
    );
}

#[test]
fn too_many_groups_is_backpressure() {
    let mut c = ShareGroupCoordinator::new(ShareGroupConfig {
        groups_max: 1,
        ..ShareGroupConfig::default()
    });
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    let mut req = request("m1", 0, Some(&["t"]));
    req.group_id = "other".into();
    refused(
        &mut c,
        req,
        GroupIdUse::Free,
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
    );
}

// ---------------------------------------------------------------------------------------------
// Leave, expiry, metadata
// ---------------------------------------------------------------------------------------------

#[test]
fn leave_writes_tombstones_and_bumps() {
    let mut c = coordinator(&[("t", 1, 2)]);
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    hb(&mut c, 0, "m2", 0, Some(&["t"]));
    let out = hb(&mut c, 0, "m2", -1, None);
    assert_eq!(
        out.reply,
        HeartbeatResponse {
            member_id: "m2".into(),
            member_epoch: -1,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    );
    let hash = group::metadata_hash(["t"], c.topics());
    assert_eq!(
        out.records[..4],
        [
            ShareGroupRecord::CurrentMemberAssignment {
                group_id: G.into(),
                member_id: "m2".into(),
                value: None
            },
            ShareGroupRecord::TargetAssignmentMember {
                group_id: G.into(),
                member_id: "m2".into(),
                value: None
            },
            ShareGroupRecord::MemberMetadata {
                group_id: G.into(),
                member_id: "m2".into(),
                value: None
            },
            ShareGroupRecord::GroupMetadata {
                group_id: G.into(),
                value: Some(GroupMetadataValue {
                    epoch: 3,
                    metadata_hash: hash
                })
            },
        ]
    );
    // m1 takes everything back at epoch 3.
    assert_eq!(
        out.records.last(),
        Some(&ShareGroupRecord::TargetAssignmentMetadata {
            group_id: G.into(),
            value: Some(3)
        })
    );
    // m1 never learnt of epoch 2: it moves to 3 and, its assignment being the same as
    // before, gets none in the response.
    let out = hb(&mut c, 0, "m1", 1, None);
    assert_eq!(out.reply.member_epoch, 3);
    assert_eq!(out.reply.assignment, None);
    let d = &c.describe(&[G.to_string()])[0];
    assert_eq!(d.members[0].assignment[0].partitions, vec![0, 1]);
    // The last member leaving empties the group; epochs catch up, hash goes to 0.
    let out = hb(&mut c, 0, "m1", -1, None);
    assert!(out.records.contains(&ShareGroupRecord::GroupMetadata {
        group_id: G.into(),
        value: Some(GroupMetadataValue {
            epoch: 4,
            metadata_hash: 0
        })
    }));
    let d = &c.describe(&[G.to_string()])[0];
    assert_eq!(
        (d.state, d.group_epoch, d.assignment_epoch),
        (ShareGroupState::Empty, 4, 4)
    );
    c.check_invariants().expect("invariants");
}

#[test]
fn session_timeout_expires_members() {
    let mut c = coordinator(&[("t", 1, 2)]);
    hb(&mut c, 1_000, "m1", 0, Some(&["t"]));
    hb(&mut c, 2_000, "m2", 0, Some(&["t"]));
    assert_eq!(c.next_deadline(), Some(46_000));
    assert!(c.expire(45_999).reply.is_empty());
    hb(&mut c, 40_000, "m1", 1, None);
    let out = c.expire(46_000);
    assert_eq!(out.reply.len(), 0);
    assert_eq!(c.next_deadline(), Some(47_000));
    let out = c.expire(47_000);
    assert_eq!(
        out.reply,
        vec![ExpiredMember {
            group_id: G.into(),
            member_id: "m2".into()
        }]
    );
    assert!(out.records.len() >= 5);
    refused(
        &mut c,
        request("m2", 2, None),
        GroupIdUse::Free,
        ErrorCode::UNKNOWN_MEMBER_ID,
    );
    assert_eq!(c.next_deadline(), Some(85_000));
    c.check_invariants().expect("invariants");
}

#[test]
fn group_overrides_apply_to_session_and_interval() {
    let mut c = coordinator(&[("t", 1, 1)]);
    c.set_group_overrides(
        G,
        GroupOverrides {
            session_timeout_ms: Some(50_000),
            heartbeat_interval_ms: Some(7_000),
            max_size: None,
        },
    );
    let out = hb(&mut c, 0, "m1", 0, Some(&["t"]));
    assert_eq!(out.reply.heartbeat_interval_ms, 7_000);
    assert_eq!(c.next_deadline(), Some(50_000));
    c.set_group_overrides(G, GroupOverrides::default());
    assert_eq!(
        hb(&mut c, 0, "m1", 1, None).reply.heartbeat_interval_ms,
        5_000
    );
}

#[test]
fn metadata_changes_follow_topics() {
    let mut c = coordinator(&[("t", 1, 2)]);
    hb(&mut c, 0, "m1", 0, Some(&["t", "later"]));
    // Partition growth.
    let out = c.on_metadata_change(image(&[("t", 1, 3)]));
    assert!(out.records.iter().any(|r| matches!(
        r,
        ShareGroupRecord::GroupMetadata { value: Some(v), .. } if v.epoch == 2
    )));
    let out = hb(&mut c, 0, "m1", 1, None);
    assert_eq!(assignment_of(&out.reply), parts(1, &[0, 1, 2]));
    // A subscribed topic appears.
    c.on_metadata_change(image(&[("t", 1, 3), ("later", 2, 1)]));
    let out = hb(&mut c, 0, "m1", 2, None);
    let mut both = parts(1, &[0, 1, 2]);
    both.insert(tid(2), BTreeSet::from([0]));
    assert_eq!(assignment_of(&out.reply), both);
    // Deleted and re-created under a new id.
    c.on_metadata_change(image(&[("later", 2, 1)]));
    let out = hb(&mut c, 0, "m1", 3, None);
    assert_eq!(assignment_of(&out.reply), parts(2, &[0]));
    c.on_metadata_change(image(&[("t", 9, 1), ("later", 2, 1)]));
    let out = hb(&mut c, 0, "m1", 4, None);
    let mut recreated = parts(2, &[0]);
    recreated.insert(tid(9), BTreeSet::from([0]));
    assert_eq!(assignment_of(&out.reply), recreated);
    // An unrelated topic changes nothing.
    let out = c.on_metadata_change(image(&[("t", 9, 1), ("later", 2, 1), ("x", 7, 4)]));
    assert!(out.records.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Describe, list, delete, share-partition state
// ---------------------------------------------------------------------------------------------

#[test]
fn describe_list_and_delete() {
    let mut c = coordinator(&[("t", 1, 2)]);
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    let d = c.describe(&[G.to_string(), "nope".to_string()]);
    assert_eq!(d[0].error_code, ErrorCode::NONE);
    assert_eq!(d[0].state, ShareGroupState::Stable);
    assert_eq!(d[0].assignor_name, "simple");
    assert_eq!((d[0].group_epoch, d[0].assignment_epoch), (1, 1));
    let m = &d[0].members[0];
    assert_eq!(m.member_id, "m1");
    assert_eq!(m.member_epoch, 1);
    assert_eq!(m.client_id, "client");
    assert_eq!(m.client_host, "/127.0.0.1");
    assert_eq!(m.subscribed_topic_names, vec!["t".to_string()]);
    assert_eq!(
        m.assignment,
        vec![DescribedTopicPartitions {
            topic_id: tid(1),
            topic_name: "t".into(),
            partitions: vec![0, 1]
        }]
    );
    assert_eq!(d[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND);
    assert_eq!(d[1].state, ShareGroupState::Dead);

    let listed = c.list_groups(&[], &[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].group_state.as_str(),
            listed[0].group_type.as_str(),
            listed[0].protocol_type.as_str()
        ),
        ("Stable", "share", "share")
    );
    assert!(c.list_groups(&["empty".into()], &[]).is_empty());
    assert_eq!(
        c.list_groups(&["STABLE".into()], &["Share".into()]).len(),
        1
    );
    assert!(c.list_groups(&[], &["classic".into()]).is_empty());

    assert_eq!(
        c.delete_group(G).map(|o| o.reply),
        Err(ErrorCode::NON_EMPTY_GROUP)
    );
    assert_eq!(
        c.delete_group("nope").map(|o| o.reply),
        Err(ErrorCode::GROUP_ID_NOT_FOUND)
    );
    c.mark_initialized(G, tid(1), &[0, 1]).expect("init");
    hb(&mut c, 0, "m1", -1, None);
    assert_eq!(
        c.list_groups(&["Empty".into()], &[])[0].group_state,
        "Empty"
    );
    let out = c.delete_group(G).expect("deleted");
    assert_eq!(
        out.reply,
        vec![ShareStateTopic {
            topic_id: tid(1),
            topic_name: "t".into(),
            partitions: BTreeSet::from([0, 1])
        }]
    );
    assert_eq!(
        out.records,
        vec![
            ShareGroupRecord::TargetAssignmentMetadata {
                group_id: G.into(),
                value: None
            },
            ShareGroupRecord::StatePartitionMetadata {
                group_id: G.into(),
                value: None
            },
            ShareGroupRecord::GroupMetadata {
                group_id: G.into(),
                value: None
            },
        ]
    );
    assert!(!c.contains_group(G));
    assert!(c.durable_state().groups.is_empty());
    // The id is free again: a new group starts from epoch 1.
    assert_eq!(hb(&mut c, 0, "m1", 0, Some(&["t"])).reply.member_epoch, 1);
}

#[test]
fn share_partition_state_tracking() {
    let mut c = coordinator(&[("t", 1, 3), ("u", 2, 1)]);
    assert_eq!(
        c.mark_initialized(G, tid(1), &[0]).map(|o| o.reply),
        Err(ErrorCode::GROUP_ID_NOT_FOUND)
    );
    hb(&mut c, 0, "m1", 0, Some(&["t"]));
    let expected: BTreeSet<SharePartitionKey> =
        (0..3).map(|p| (G.to_string(), tid(1), p)).collect();
    assert_eq!(c.assigned_share_partitions(), expected);
    assert_eq!(c.uninitialized_partitions(G), parts(1, &[0, 1, 2]));
    assert_eq!(
        c.mark_initialized(G, tid(7), &[0]).map(|o| o.reply),
        Err(UNKNOWN_TOPIC_ID)
    );
    assert_eq!(
        c.mark_initialized(G, tid(1), &[3]).map(|o| o.reply),
        Err(ErrorCode::INVALID_REQUEST)
    );
    let out = c.mark_initialized(G, tid(1), &[0, 2]).expect("init");
    assert_eq!(
        out.records,
        vec![ShareGroupRecord::StatePartitionMetadata {
            group_id: G.into(),
            value: Some(StatePartitionMetadataValue {
                initialized_topics: BTreeMap::from([(
                    tid(1),
                    TopicPartitionsInfo {
                        topic_name: "t".into(),
                        partitions: BTreeSet::from([0, 2])
                    }
                )]),
                ..StatePartitionMetadataValue::default()
            })
        }]
    );
    assert_eq!(c.uninitialized_partitions(G), parts(1, &[1]));
    // Idempotent.
    assert!(c
        .mark_initialized(G, tid(1), &[0])
        .expect("init")
        .records
        .is_empty());
    // The topic is deleted: its state is forgotten.
    let out = c.on_metadata_change(image(&[("u", 2, 1)]));
    assert!(out.records.iter().any(|r| matches!(
        r,
        ShareGroupRecord::StatePartitionMetadata { value: Some(v), .. } if v.is_empty()
    )));
    assert!(c.initialized_partitions(G).is_empty());
    assert!(c.assigned_share_partitions().is_empty());
}

#[test]
fn replay_rebuilds_the_same_durable_state() {
    let mut c = coordinator(&[("t", 1, 4), ("u", 2, 2)]);
    let mut log = Vec::new();
    log.extend(hb(&mut c, 0, "m1", 0, Some(&["t"])).records);
    log.extend(hb(&mut c, 0, "m2", 0, Some(&["t", "u"])).records);
    log.extend(hb(&mut c, 0, "m1", 1, None).records);
    log.extend(c.mark_initialized(G, tid(2), &[0]).expect("init").records);
    log.extend(hb(&mut c, 0, "m2", -1, None).records);
    log.extend(c.on_metadata_change(image(&[("t", 1, 5)])).records);
    let mut r = ShareGroupCoordinator::new(ShareGroupConfig::default());
    for record in &log {
        let (key, value) = record.encode().expect("encodes");
        let back = ShareGroupRecord::decode(&key, value.as_deref()).expect("decodes");
        assert_eq!(&back, record);
        r.replay(&back);
    }
    r.loaded(100);
    assert!(r
        .on_metadata_change(image(&[("t", 1, 5)]))
        .records
        .is_empty());
    assert_eq!(r.durable_state(), c.durable_state());
    assert_eq!(r.next_deadline(), Some(45_100));
    // The member carries on after the restart.
    assert_eq!(hb(&mut r, 200, "m1", 2, None).reply.member_epoch, 4);
    r.check_invariants().expect("invariants");
}

// ---------------------------------------------------------------------------------------------
// Assignor
// ---------------------------------------------------------------------------------------------

fn run_assign(
    subs: &[(&str, &[&str])],
    previous: &BTreeMap<String, Assignment>,
    img: &TopicsImage,
) -> BTreeMap<String, Assignment> {
    let subs: BTreeMap<String, BTreeSet<String>> = subs
        .iter()
        .map(|(m, s)| (m.to_string(), s.iter().map(|t| t.to_string()).collect()))
        .collect();
    let members = subs
        .iter()
        .map(|(id, s)| {
            let member = AssignmentMember {
                subscribed_topic_names: s,
                previous: previous.get(id),
            };
            (id.clone(), member)
        })
        .collect();
    assign(&members, img)
}

#[test]
fn assignor_shares_partitions_when_members_outnumber_them() {
    let img = image(&[("t", 1, 2)]);
    let subs: Vec<(&str, &[&str])> = vec![
        ("a", &["t"]),
        ("b", &["t"]),
        ("c", &["t"]),
        ("d", &["t"]),
        ("e", &["t"]),
    ];
    let out = run_assign(&subs, &BTreeMap::new(), &img);
    // ceil(5 / 2) = 3 members per partition, 6 slots: one member gets both.
    let mut holders = [0; 2];
    for a in out.values() {
        for p in a.get(&tid(1)).into_iter().flatten() {
            holders[*p as usize] += 1;
        }
        assert!((1..=2).contains(&size(a)));
    }
    assert_eq!(holders, [3, 3]);
}

#[test]
fn assignor_balances_each_topic_among_its_subscribers() {
    let img = image(&[("t", 1, 4), ("u", 2, 2)]);
    let subs: Vec<(&str, &[&str])> = vec![("a", &["t"]), ("b", &["u"]), ("c", &["t", "u"])];
    let out = run_assign(&subs, &BTreeMap::new(), &img);
    assert_eq!(out["a"].get(&tid(1)).map(BTreeSet::len), Some(2));
    assert_eq!(out["c"].get(&tid(1)).map(BTreeSet::len), Some(2));
    assert_eq!(out["b"].get(&tid(2)).map(BTreeSet::len), Some(1));
    assert_eq!(out["c"].get(&tid(2)).map(BTreeSet::len), Some(1));
    assert!(!out["a"].contains_key(&tid(2)));
    assert!(!out["b"].contains_key(&tid(1)));
}

#[test]
fn assignor_is_sticky_when_a_member_joins() {
    let img = image(&[("t", 1, 6)]);
    let subs: Vec<(&str, &[&str])> = vec![("a", &["t"]), ("b", &["t"])];
    let first = run_assign(&subs, &BTreeMap::new(), &img);
    let subs3: Vec<(&str, &[&str])> = vec![("a", &["t"]), ("b", &["t"]), ("c", &["t"])];
    let second = run_assign(&subs3, &first, &img);
    for m in ["a", "b"] {
        assert_eq!(size(&second[m]), 2);
        assert!(second[m][&tid(1)].is_subset(&first[m][&tid(1)]));
    }
    assert_eq!(size(&second["c"]), 2);
    // Stable: the same inputs give the same assignment.
    assert_eq!(run_assign(&subs3, &second, &img), second);
}

// ---------------------------------------------------------------------------------------------
// Record byte layouts (hand-built vectors)
// ---------------------------------------------------------------------------------------------

fn bytes_of(record: &ShareGroupRecord) -> (Vec<u8>, Option<Vec<u8>>) {
    let encoded = record.encode().expect("encodes");
    let back = ShareGroupRecord::decode(&encoded.0, encoded.1.as_deref()).expect("decodes");
    assert_eq!(&back, record);
    encoded
}

#[test]
fn group_metadata_layout() {
    let (key, value) = bytes_of(&ShareGroupRecord::GroupMetadata {
        group_id: "g".into(),
        value: Some(GroupMetadataValue {
            epoch: 1,
            metadata_hash: 0x0102_0304_0506_0708,
        }),
    });
    assert_eq!(key, [0, 11, 0, 1, b'g']);
    assert_eq!(
        value,
        Some(vec![0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0])
    );
    let (key, value) = bytes_of(&ShareGroupRecord::GroupMetadata {
        group_id: "g".into(),
        value: None,
    });
    assert_eq!((key, value), (vec![0, 11, 0, 1, b'g'], None));
}

#[test]
fn member_metadata_layout() {
    let (key, value) = bytes_of(&ShareGroupRecord::MemberMetadata {
        group_id: "g".into(),
        member_id: "m".into(),
        value: Some(MemberMetadataValue {
            rack_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            subscribed_topic_names: BTreeSet::from(["a".to_string(), "b".to_string()]),
        }),
    });
    assert_eq!(key, [0, 10, 0, 1, b'g', 0, 1, b'm']);
    assert_eq!(
        value,
        Some(vec![
            0, 0, // version
            0, // null rack
            2, b'c', // client id
            2, b'h', // client host
            3, 2, b'a', 2, b'b', // two names
            0,    // tagged fields
        ])
    );
    let (_, value) = bytes_of(&ShareGroupRecord::MemberMetadata {
        group_id: "g".into(),
        member_id: "m".into(),
        value: Some(MemberMetadataValue {
            rack_id: Some("r".into()),
            ..MemberMetadataValue::default()
        }),
    });
    assert_eq!(value, Some(vec![0, 0, 2, b'r', 1, 1, 1, 0]));
}

#[test]
fn target_assignment_layouts() {
    let (key, value) = bytes_of(&ShareGroupRecord::TargetAssignmentMetadata {
        group_id: "g".into(),
        value: Some(5),
    });
    assert_eq!(key, [0, 12, 0, 1, b'g']);
    assert_eq!(value, Some(vec![0, 0, 0, 0, 0, 5, 0]));

    let (key, value) = bytes_of(&ShareGroupRecord::TargetAssignmentMember {
        group_id: "g".into(),
        member_id: "m".into(),
        value: Some(parts(1, &[0, 2])),
    });
    assert_eq!(key, [0, 13, 0, 1, b'g', 0, 1, b'm']);
    let mut expected = vec![0, 0, 2];
    expected.extend([1u8; 16]);
    expected.extend([3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0]);
    assert_eq!(value, Some(expected));
}

#[test]
fn current_assignment_layout() {
    let (key, value) = bytes_of(&ShareGroupRecord::CurrentMemberAssignment {
        group_id: "g".into(),
        member_id: "m".into(),
        value: Some(CurrentAssignmentValue {
            member_epoch: 3,
            previous_member_epoch: 2,
            state: MEMBER_STATE_STABLE,
            assigned_partitions: parts(1, &[1]),
        }),
    });
    assert_eq!(key, [0, 14, 0, 1, b'g', 0, 1, b'm']);
    let mut expected = vec![0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 2];
    expected.extend([1u8; 16]);
    expected.extend([2, 0, 0, 0, 1, 0, 0]);
    assert_eq!(value, Some(expected));
}

#[test]
fn state_partition_metadata_layout() {
    let (key, value) = bytes_of(&ShareGroupRecord::StatePartitionMetadata {
        group_id: "g".into(),
        value: Some(StatePartitionMetadataValue {
            initializing_topics: BTreeMap::new(),
            initialized_topics: BTreeMap::from([(
                tid(2),
                TopicPartitionsInfo {
                    topic_name: "t".into(),
                    partitions: BTreeSet::from([0]),
                },
            )]),
            deleting_topics: BTreeMap::from([(tid(3), "u".to_string())]),
        }),
    });
    assert_eq!(key, [0, 15, 0, 1, b'g']);
    let mut expected = vec![0, 0, 1, 2];
    expected.extend([2u8; 16]);
    expected.extend([2, b't', 2, 0, 0, 0, 0, 0, 2]);
    expected.extend([3u8; 16]);
    expected.extend([2, b'u', 0, 0]);
    assert_eq!(value, Some(expected));
}

#[test]
fn long_strings_use_multi_byte_varints() {
    let client_id = "c".repeat(200);
    let (_, value) = bytes_of(&ShareGroupRecord::MemberMetadata {
        group_id: "g".into(),
        member_id: "m".into(),
        value: Some(MemberMetadataValue {
            client_id: client_id.clone(),
            ..MemberMetadataValue::default()
        }),
    });
    let value = value.expect("value");
    // 201 = 0xc9 0x01.
    assert_eq!(&value[..5], &[0, 0, 0, 0xc9, 0x01]);
}

#[test]
fn decode_errors_and_tagged_fields() {
    let key = [0, 11, 0, 1, b'g'];
    // Unknown tagged fields are skipped.
    let value = [
        0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5, 2, 0xaa, 0xbb,
    ];
    assert_eq!(
        ShareGroupRecord::decode(&key, Some(&value)),
        Ok(ShareGroupRecord::GroupMetadata {
            group_id: "g".into(),
            value: Some(GroupMetadataValue {
                epoch: 7,
                metadata_hash: 0
            })
        })
    );
    assert_eq!(
        ShareGroupRecord::decode(&[0, 9, 0, 1, b'g'], None),
        Err(DecodeError::UnknownRecordType(9))
    );
    assert_eq!(
        ShareGroupRecord::decode(&[0, 2, 0, 1, b'g'], None),
        Err(DecodeError::UnknownRecordType(2))
    );
    assert_eq!(
        ShareGroupRecord::decode(&key, Some(&[0, 1, 0])),
        Err(DecodeError::UnsupportedVersion {
            record_type: 11,
            version: 1
        })
    );
    assert!(matches!(
        ShareGroupRecord::decode(&key, Some(&[0, 0, 0, 0])),
        Err(DecodeError::Truncated { .. })
    ));
    assert_eq!(
        ShareGroupRecord::decode(&[0, 11, 0, 1, b'g', 9], None),
        Err(DecodeError::TrailingBytes { count: 1 })
    );
    // A key string of length -1 is a null where none is allowed; other negatives are invalid.
    assert!(matches!(
        ShareGroupRecord::decode(&[0, 11, 0xff, 0xff], None),
        Err(DecodeError::UnexpectedNull { .. })
    ));
    assert!(matches!(
        ShareGroupRecord::decode(&[0, 11, 0xff, 0xfe], None),
        Err(DecodeError::InvalidLength { .. })
    ));
    // A huge array count is refused before anything is reserved.
    let mut huge = vec![0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
    huge.extend([0; 8]);
    assert!(matches!(
        ShareGroupRecord::decode(&[0, 13, 0, 1, b'g', 0, 1, b'm'], Some(&huge)),
        Err(DecodeError::InvalidLength { .. })
    ));
    // A varint longer than 5 bytes.
    assert!(matches!(
        ShareGroupRecord::decode(
            &[0, 12, 0, 1, b'g'],
            Some(&[0, 0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0])
        ),
        Err(DecodeError::InvalidVarint { .. })
    ));
    // Null where Kafka requires a value.
    assert!(matches!(
        ShareGroupRecord::decode(
            &[0, 10, 0, 1, b'g', 0, 1, b'm'],
            Some(&[0, 0, 0, 0, 1, 1, 0])
        ),
        Err(DecodeError::UnexpectedNull { .. })
    ));
    assert_eq!(record_type(&key), Some(11));
    assert!(is_share_record_type(15) && !is_share_record_type(9) && !is_share_record_type(16));
}

#[test]
fn overlong_key_strings_do_not_encode() {
    let record = ShareGroupRecord::GroupMetadata {
        group_id: "g".repeat(40_000),
        value: None,
    };
    assert_eq!(
        record.encode(),
        Err(EncodeError::KeyStringTooLong { length: 40_000 })
    );
}
