//! ShareGroupHeartbeat and ShareGroupDescribe (KIP-932): wire messages to and from the share
//! group coordinator (`shoal_core::group_coordinator::share`, driven by [`crate::groups`]).
//!
//! Both answer UNSUPPORTED_VERSION while the `share.version` feature is below 1, as Kafka's
//! KafkaApis does; the broker does not advertise them then.

use shoal_core::group_coordinator::share;
use shoal_protocol::messages::share_group_describe_response as describe;
use shoal_protocol::messages::share_group_heartbeat_response as heartbeat;
use shoal_protocol::messages::{
    GroupId, ShareGroupDescribeRequest, ShareGroupDescribeResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName,
};
use shoal_protocol::ErrorCode;
use uuid::Uuid;

use super::str_bytes;
use super::RequestContext;
use crate::broker::Broker;
use crate::leadership::CoordinatorKind;
use shoal_core::group_coordinator::{ShareCall, ShareReply};

use crate::coordinators::group_coordinator::share_overrides;

/// Kafka's limit on client-generated member ids.
const MEMBER_ID_MAX_CHARS: usize = 36;

fn heartbeat_error(code: ErrorCode, message: Option<String>) -> ShareGroupHeartbeatResponse {
    ShareGroupHeartbeatResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.map(str_bytes))
        .with_member_epoch(-1)
}

pub async fn share_group_heartbeat(
    broker: &Broker,
    ctx: &RequestContext,
    client_id: &str,
    r: &ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    if !broker.share_groups_enabled() {
        return heartbeat_error(ErrorCode::UNSUPPORTED_VERSION, None);
    }
    let member_id = r.member_id.as_str();
    if member_id.is_empty() || member_id.chars().count() > MEMBER_ID_MAX_CHARS {
        return heartbeat_error(
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "MemberId must be non-empty and at most {MEMBER_ID_MAX_CHARS} characters"
            )),
        );
    }
    let request = share::HeartbeatRequest {
        group_id: r.group_id.0.to_string(),
        member_id: member_id.to_string(),
        member_epoch: r.member_epoch,
        rack_id: r.rack_id.as_ref().map(|v| v.to_string()),
        subscribed_topic_names: r
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        client_id: client_id.to_string(),
        client_host: format!("/{}", ctx.peer.ip()),
    };
    if let Err(code) = broker.coordinates(CoordinatorKind::Group, &request.group_id) {
        return heartbeat_error(code, None);
    }
    let overrides = share_overrides(broker, &request.group_id);
    match broker
        .groups
        .call_share(ShareCall::Heartbeat(request, overrides))
        .await
    {
        Ok(ShareReply::Heartbeat(Ok(reply))) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(reply.member_id)))
            .with_member_epoch(reply.member_epoch)
            .with_heartbeat_interval_ms(reply.heartbeat_interval_ms)
            .with_assignment(reply.assignment.map(|topics| {
                heartbeat::Assignment::default().with_topic_partitions(
                    topics
                        .into_iter()
                        .map(|t| {
                            heartbeat::TopicPartitions::default()
                                .with_topic_id(Uuid::from_bytes(t.topic_id))
                                .with_partitions(t.partitions)
                        })
                        .collect(),
                )
            })),
        Ok(ShareReply::Heartbeat(Err(code))) => heartbeat_error(ErrorCode(code.0), None),
        _ => heartbeat_error(ErrorCode::COORDINATOR_NOT_AVAILABLE, None),
    }
}

pub async fn share_group_describe(
    broker: &Broker,
    r: &ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let not_described = |g: &GroupId, code: ErrorCode| {
        describe::DescribedGroup::default()
            .with_group_id(g.clone())
            .with_error_code(code.code())
            .with_group_state(str_bytes("Dead"))
            .with_authorized_operations(i32::MIN)
    };
    let failed = |code: ErrorCode| {
        ShareGroupDescribeResponse::default()
            .with_groups(r.group_ids.iter().map(|g| not_described(g, code)).collect())
    };
    if !broker.share_groups_enabled() {
        return failed(ErrorCode::UNSUPPORTED_VERSION);
    }
    // Groups coordinated elsewhere are answered with their code, ahead of the others.
    let mut ids = Vec::new();
    let mut elsewhere = Vec::new();
    for g in &r.group_ids {
        match broker.coordinates(CoordinatorKind::Group, g.0.as_str()) {
            Ok(()) => ids.push(g.0.to_string()),
            Err(code) => elsewhere.push(not_described(g, code)),
        }
    }
    let groups = match broker.groups.call_share(ShareCall::Describe(ids)).await {
        Ok(ShareReply::Describe(groups)) => groups,
        _ => return failed(ErrorCode::COORDINATOR_NOT_AVAILABLE),
    };
    let authorized = if r.include_authorized_operations {
        // READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: every group operation, as
        // there is no authorizer.
        (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    } else {
        i32::MIN
    };
    ShareGroupDescribeResponse::default().with_groups(
        elsewhere
            .into_iter()
            .chain(groups.into_iter().map(|g| {
                let dead = g.error_code.0 != 0;
                describe::DescribedGroup::default()
                    .with_group_id(GroupId(str_bytes(g.group_id)))
                    .with_error_code(g.error_code.0)
                    .with_error_message(
                        dead.then(|| str_bytes("Group does not exist or is not a share group.")),
                    )
                    .with_group_state(str_bytes(g.state.name()))
                    .with_group_epoch(g.group_epoch)
                    .with_assignment_epoch(g.assignment_epoch)
                    .with_assignor_name(str_bytes(g.assignor_name))
                    .with_authorized_operations(if dead { i32::MIN } else { authorized })
                    .with_members(
                        g.members
                            .into_iter()
                            .map(|m| {
                                describe::Member::default()
                                    .with_member_id(str_bytes(m.member_id))
                                    .with_rack_id(m.rack_id.map(str_bytes))
                                    .with_member_epoch(m.member_epoch)
                                    .with_client_id(str_bytes(m.client_id))
                                    .with_client_host(str_bytes(m.client_host))
                                    .with_subscribed_topic_names(
                                        m.subscribed_topic_names
                                            .into_iter()
                                            .map(|n| TopicName(str_bytes(n)))
                                            .collect(),
                                    )
                                    .with_assignment(
                                        describe::Assignment::default().with_topic_partitions(
                                            m.assignment
                                                .into_iter()
                                                .map(|t| {
                                                    describe::TopicPartitions::default()
                                                        .with_topic_id(Uuid::from_bytes(t.topic_id))
                                                        .with_topic_name(TopicName(str_bytes(
                                                            t.topic_name,
                                                        )))
                                                        .with_partitions(t.partitions)
                                                })
                                                .collect(),
                                        ),
                                    )
                            })
                            .collect(),
                    )
            }))
            .collect(),
    )
}
