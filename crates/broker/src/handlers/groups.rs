//! Classic consumer-group APIs: wire messages to and from the core coordinator's types.

use std::collections::BTreeMap;
use std::future::Future;

use shoal_core::group_coordinator as gc;
use shoal_protocol::messages::{
    self as m, describe_groups_response, leave_group_response, list_groups_response,
    offset_commit_response, offset_delete_response, offset_fetch_response, GroupId,
};
use shoal_protocol::ErrorCode;
use uuid::Uuid;

use super::RequestContext;
use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::leadership::CoordinatorKind;

const UNAVAILABLE: i16 = ErrorCode::COORDINATOR_NOT_AVAILABLE.code();

fn s(v: &shoal_protocol::StrBytes) -> String {
    v.as_str().to_string()
}

fn opt(v: &Option<shoal_protocol::StrBytes>) -> Option<String> {
    v.as_ref().map(s)
}

/// The group a request is about, when it is about one.
fn group_of(request: &gc::GroupRequest) -> Option<&str> {
    Some(match request {
        gc::GroupRequest::JoinGroup(r) => &r.group_id,
        gc::GroupRequest::SyncGroup(r) => &r.group_id,
        gc::GroupRequest::Heartbeat(r) => &r.group_id,
        gc::GroupRequest::LeaveGroup(r) => &r.group_id,
        gc::GroupRequest::OffsetCommit(r) => &r.group_id,
        gc::GroupRequest::OffsetFetch(r) => &r.group_id,
        gc::GroupRequest::OffsetDelete(r) => &r.group_id,
        gc::GroupRequest::TxnOffsetCommit(r) => &r.group_id,
        // ListGroups, DescribeGroups, DeleteGroups: none or several groups; a marker.
        _ => return None,
    })
}

/// Sends `request` to the group coordinator, once this node is found to coordinate its
/// group. Err: the code to answer (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE).
async fn call(broker: &Broker, request: gc::GroupRequest) -> Result<gc::GroupResponse, i16> {
    if let Some(group_id) = group_of(&request) {
        broker
            .coordinates(CoordinatorKind::Group, group_id)
            .map_err(ErrorCode::code)?;
    }
    broker.groups.call(request).await.map_err(|_| UNAVAILABLE)
}

/// The code to answer for a call that failed or answered with another response type.
fn failed<T>(answer: Result<T, i16>) -> i16 {
    answer.err().unwrap_or(UNAVAILABLE)
}

/// Splits `group_ids` into those this node coordinates and the others with their codes.
fn coordinated_here(
    broker: &Broker,
    group_ids: Vec<String>,
) -> (Vec<String>, BTreeMap<String, i16>) {
    let mut here = Vec::new();
    let mut elsewhere = BTreeMap::new();
    for id in group_ids {
        match broker.coordinates(CoordinatorKind::Group, &id) {
            Ok(()) => here.push(id),
            Err(code) => {
                elsewhere.insert(id, code.code());
            }
        }
    }
    (here, elsewhere)
}

pub async fn join_group(
    broker: &Broker,
    ctx: &RequestContext,
    client_id: &str,
    version: i16,
    r: &m::JoinGroupRequest,
) -> m::JoinGroupResponse {
    let request = gc::JoinGroupRequest {
        group_id: s(&r.group_id.0),
        member_id: s(&r.member_id),
        group_instance_id: opt(&r.group_instance_id),
        client_id: client_id.to_string(),
        client_host: format!("/{}", ctx.peer.ip()),
        session_timeout_ms: r.session_timeout_ms,
        rebalance_timeout_ms: if version >= 1 {
            r.rebalance_timeout_ms
        } else {
            r.session_timeout_ms
        },
        protocol_type: s(&r.protocol_type),
        protocols: r
            .protocols
            .iter()
            .map(|p| (s(&p.name), p.metadata.clone()))
            .collect(),
        reason: opt(&r.reason),
        require_known_member_id: version >= 4,
        skip_assignment_supported: version >= 9,
    };
    let mut out = m::JoinGroupResponse::default().with_generation_id(-1);
    match call(broker, gc::GroupRequest::JoinGroup(request)).await {
        Ok(gc::GroupResponse::JoinGroup(j)) => {
            out.error_code = j.error_code.code();
            out.generation_id = j.generation_id;
            out.protocol_type = j.protocol_type.map(str_bytes);
            out.protocol_name = j.protocol_name.map(str_bytes);
            if version < 7 && out.protocol_name.is_none() {
                out.protocol_name = Some(str_bytes(""));
            }
            out.leader = str_bytes(j.leader);
            out.skip_assignment = j.skip_assignment;
            out.member_id = str_bytes(j.member_id);
            out.members = j
                .members
                .into_iter()
                .map(|mm| {
                    m::join_group_response::JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(mm.member_id))
                        .with_group_instance_id(mm.group_instance_id.map(str_bytes))
                        .with_metadata(mm.metadata)
                })
                .collect();
        }
        other => {
            out.error_code = failed(other);
            out.member_id = r.member_id.clone();
            out.protocol_name = (version < 7).then(|| str_bytes(""));
        }
    }
    out
}

pub async fn sync_group(
    broker: &Broker,
    version: i16,
    r: &m::SyncGroupRequest,
) -> m::SyncGroupResponse {
    let request = gc::SyncGroupRequest {
        group_id: s(&r.group_id.0),
        generation_id: r.generation_id,
        member_id: s(&r.member_id),
        group_instance_id: opt(&r.group_instance_id),
        protocol_type: if version >= 5 {
            opt(&r.protocol_type)
        } else {
            None
        },
        protocol_name: if version >= 5 {
            opt(&r.protocol_name)
        } else {
            None
        },
        assignments: r
            .assignments
            .iter()
            .map(|a| (s(&a.member_id), a.assignment.clone()))
            .collect(),
    };
    let mut out = m::SyncGroupResponse::default();
    match call(broker, gc::GroupRequest::SyncGroup(request)).await {
        Ok(gc::GroupResponse::SyncGroup(sr)) => {
            out.error_code = sr.error_code.code();
            out.protocol_type = sr.protocol_type.map(str_bytes);
            out.protocol_name = sr.protocol_name.map(str_bytes);
            out.assignment = sr.assignment;
        }
        other => out.error_code = failed(other),
    }
    out
}

pub async fn heartbeat(broker: &Broker, r: &m::HeartbeatRequest) -> m::HeartbeatResponse {
    let request = gc::HeartbeatRequest {
        group_id: s(&r.group_id.0),
        generation_id: r.generation_id,
        member_id: s(&r.member_id),
        group_instance_id: opt(&r.group_instance_id),
    };
    let code = match call(broker, gc::GroupRequest::Heartbeat(request)).await {
        Ok(gc::GroupResponse::Heartbeat(h)) => h.error_code.code(),
        other => failed(other),
    };
    m::HeartbeatResponse::default().with_error_code(code)
}

pub async fn leave_group(
    broker: &Broker,
    version: i16,
    r: &m::LeaveGroupRequest,
) -> m::LeaveGroupResponse {
    let members = if version >= 3 {
        r.members
            .iter()
            .map(|mm| gc::LeavingMember {
                member_id: s(&mm.member_id),
                group_instance_id: opt(&mm.group_instance_id),
            })
            .collect()
    } else {
        vec![gc::LeavingMember {
            member_id: s(&r.member_id),
            group_instance_id: None,
        }]
    };
    let request = gc::LeaveGroupRequest {
        group_id: s(&r.group_id.0),
        members,
    };
    let mut out = m::LeaveGroupResponse::default();
    match call(broker, gc::GroupRequest::LeaveGroup(request)).await {
        Ok(gc::GroupResponse::LeaveGroup(l)) => {
            out.error_code = l.error_code.code();
            if version >= 3 {
                out.members = l
                    .members
                    .into_iter()
                    .map(|mm| {
                        leave_group_response::MemberResponse::default()
                            .with_member_id(str_bytes(mm.member_id))
                            .with_group_instance_id(mm.group_instance_id.map(str_bytes))
                            .with_error_code(mm.error_code.code())
                    })
                    .collect();
            } else if out.error_code == 0 {
                out.error_code = l
                    .members
                    .first()
                    .map(|mm| mm.error_code.code())
                    .unwrap_or(0);
            }
        }
        other => out.error_code = failed(other),
    }
    out
}

/// Topic name of a topic id, for the id-based OffsetCommit/OffsetFetch versions.
fn name_of(broker: &Broker, id: Uuid) -> Option<String> {
    broker.topic_by_id(id).map(|t| t.name.clone())
}

/// Whether the topic exists with this partition: offsets of anything else are refused with
/// UNKNOWN_TOPIC_OR_PARTITION by OffsetCommit and TxnOffsetCommit, as in Kafka.
fn partition_exists(broker: &Broker, topic: &str, partition: i32) -> bool {
    broker
        .topic(topic)
        .is_some_and(|t| t.partition(partition).is_some())
}

/// OffsetCommit. The commit is queued on the group coordinator before this returns, so the
/// commits of one connection take effect in the order they were sent; the returned future
/// answers once the commit is durable. A client that pipelines commits (librdkafka sends
/// every asynchronous one at once) has them share the coordinator's passes and fsyncs.
pub async fn offset_commit(
    broker: &Broker,
    version: i16,
    r: &m::OffsetCommitRequest,
) -> impl Future<Output = m::OffsetCommitResponse> + Send + 'static {
    let by_id = version >= 10;
    let mut offsets = Vec::new();
    // Per topic: its name and id as sent, and per partition either the code known now or
    // the name to look its result up under.
    let mut answers = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let name = if by_id {
            name_of(broker, t.topic_id)
        } else {
            Some(s(&t.name.0))
        };
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let answer = match &name {
                // Kafka answers partitions its metadata does not know without asking the
                // group coordinator.
                None => Err(ErrorCode::UNKNOWN_TOPIC_ID.code()),
                Some(name) if !partition_exists(broker, name, p.partition_index) => {
                    Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code())
                }
                Some(name) => {
                    offsets.push(gc::OffsetCommitPartition {
                        topic: name.clone(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: opt(&p.committed_metadata),
                    });
                    Ok(name.clone())
                }
            };
            partitions.push((p.partition_index, answer));
        }
        answers.push((t.name.clone(), t.topic_id, partitions));
    }
    let request = gc::OffsetCommitRequest {
        group_id: s(&r.group_id.0),
        generation_id: r.generation_id_or_member_epoch,
        member_id: s(&r.member_id),
        group_instance_id: opt(&r.group_instance_id),
        offsets,
    };
    let reply = match broker.coordinates(CoordinatorKind::Group, &request.group_id) {
        Ok(()) => broker
            .groups
            .submit(gc::GroupRequest::OffsetCommit(request))
            .await
            .map_err(|_| UNAVAILABLE),
        Err(code) => Err(code.code()),
    };
    async move {
        let (results, failure): (BTreeMap<(String, i32), i16>, i16) = match reply {
            Ok(reply) => match reply.await {
                Ok(gc::GroupResponse::OffsetCommit(c)) => (
                    c.partitions
                        .into_iter()
                        .map(|p| ((p.topic, p.partition), p.error_code.code()))
                        .collect(),
                    UNAVAILABLE,
                ),
                _ => (BTreeMap::new(), UNAVAILABLE),
            },
            Err(code) => (BTreeMap::new(), code),
        };
        let topics = answers
            .into_iter()
            .map(|(name, topic_id, partitions)| {
                let partitions = partitions
                    .into_iter()
                    .map(|(index, answer)| {
                        let code = match answer {
                            Err(code) => code,
                            Ok(name) => *results.get(&(name, index)).unwrap_or(&failure),
                        };
                        offset_commit_response::OffsetCommitResponsePartition::default()
                            .with_partition_index(index)
                            .with_error_code(code)
                    })
                    .collect();
                offset_commit_response::OffsetCommitResponseTopic::default()
                    .with_name(name)
                    .with_topic_id(topic_id)
                    .with_partitions(partitions)
            })
            .collect();
        m::OffsetCommitResponse::default().with_topics(topics)
    }
}

async fn fetch_group(
    broker: &Broker,
    group_id: &str,
    partitions: Option<Vec<(String, i32)>>,
    require_stable: bool,
) -> Result<gc::OffsetFetchResponse, i16> {
    let request = gc::OffsetFetchRequest {
        group_id: group_id.to_string(),
        partitions,
        require_stable,
    };
    match call(broker, gc::GroupRequest::OffsetFetch(request)).await {
        Ok(gc::GroupResponse::OffsetFetch(f)) => Ok(f),
        other => Err(failed(other)),
    }
}

fn by_topic(fetched: &gc::OffsetFetchResponse) -> BTreeMap<String, Vec<&gc::FetchedOffset>> {
    let mut map: BTreeMap<String, Vec<&gc::FetchedOffset>> = BTreeMap::new();
    for p in &fetched.partitions {
        map.entry(p.topic.clone()).or_default().push(p);
    }
    map
}

pub async fn offset_fetch(
    broker: &Broker,
    version: i16,
    r: &m::OffsetFetchRequest,
) -> m::OffsetFetchResponse {
    let mut out = m::OffsetFetchResponse::default();
    if version < 8 {
        let partitions = r.topics.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| t.partition_indexes.iter().map(move |&p| (s(&t.name.0), p)))
                .collect()
        });
        match fetch_group(broker, r.group_id.0.as_str(), partitions, r.require_stable).await {
            Ok(f) => {
                out.error_code = f.error_code.code();
                out.topics = by_topic(&f)
                    .into_iter()
                    .map(|(name, parts)| {
                        offset_fetch_response::OffsetFetchResponseTopic::default()
                            .with_name(topic_name(name))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|p| {
                                        offset_fetch_response::OffsetFetchResponsePartition::default()
                                            .with_partition_index(p.partition)
                                            .with_committed_offset(p.offset)
                                            .with_committed_leader_epoch(p.leader_epoch)
                                            .with_metadata(Some(str_bytes(p.metadata.clone())))
                                            .with_error_code(p.error_code.code())
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            }
            Err(code) => out.error_code = code,
        }
        return out;
    }
    let by_id = version >= 10;
    for g in &r.groups {
        let mut ids: BTreeMap<String, Uuid> = BTreeMap::new();
        let partitions = g.topics.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| {
                    let name = if by_id {
                        name_of(broker, t.topic_id).unwrap_or_default()
                    } else {
                        s(&t.name.0)
                    };
                    ids.insert(name.clone(), t.topic_id);
                    t.partition_indexes.iter().map(move |&p| (name.clone(), p))
                })
                .collect()
        });
        let mut group = offset_fetch_response::OffsetFetchResponseGroup::default()
            .with_group_id(GroupId(g.group_id.0.clone()));
        match fetch_group(broker, g.group_id.0.as_str(), partitions, r.require_stable).await {
            Ok(f) => {
                group.error_code = f.error_code.code();
                group.topics = by_topic(&f)
                    .into_iter()
                    .map(|(name, parts)| {
                        let id = ids
                            .get(&name)
                            .copied()
                            .or_else(|| broker.topic(&name).map(|t| t.id))
                            .unwrap_or_default();
                        offset_fetch_response::OffsetFetchResponseTopics::default()
                            .with_name(topic_name(if by_id { String::new() } else { name }))
                            .with_topic_id(if by_id { id } else { Uuid::nil() })
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|p| {
                                        offset_fetch_response::OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p.partition)
                                            .with_committed_offset(p.offset)
                                            .with_committed_leader_epoch(p.leader_epoch)
                                            .with_metadata(Some(str_bytes(p.metadata.clone())))
                                            .with_error_code(p.error_code.code())
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            }
            Err(code) => group.error_code = code,
        }
        out.groups.push(group);
    }
    out
}

pub async fn list_groups(broker: &Broker, r: &m::ListGroupsRequest) -> m::ListGroupsResponse {
    let request = gc::ListGroupsRequest {
        states_filter: r.states_filter.iter().map(s).collect(),
        types_filter: r.types_filter.iter().map(s).collect(),
    };
    let mut out = m::ListGroupsResponse::default();
    match call(broker, gc::GroupRequest::ListGroups(request)).await {
        Ok(gc::GroupResponse::ListGroups(l)) => {
            out.error_code = l.error_code.code();
            out.groups = l
                .groups
                .into_iter()
                .map(|g| {
                    list_groups_response::ListedGroup::default()
                        .with_group_id(GroupId(str_bytes(g.group_id)))
                        .with_protocol_type(str_bytes(g.protocol_type))
                        .with_group_state(str_bytes(g.group_state))
                        .with_group_type(str_bytes(g.group_type))
                })
                .collect();
        }
        other => out.error_code = failed(other),
    }
    out
}

pub async fn describe_groups(
    broker: &Broker,
    version: i16,
    r: &m::DescribeGroupsRequest,
) -> m::DescribeGroupsResponse {
    let (group_ids, elsewhere) =
        coordinated_here(broker, r.groups.iter().map(|g| s(&g.0)).collect());
    let not_here = |id: &GroupId, code: i16| {
        describe_groups_response::DescribedGroup::default()
            .with_error_code(code)
            .with_group_id(id.clone())
    };
    let mut out = m::DescribeGroupsResponse::default();
    let request = gc::DescribeGroupsRequest { group_ids };
    match call(broker, gc::GroupRequest::DescribeGroups(request)).await {
        Ok(gc::GroupResponse::DescribeGroups(d)) => {
            let mut described: BTreeMap<String, _> = d
                .groups
                .into_iter()
                .map(|g| (g.group_id.clone(), g))
                .collect();
            // In request order; the groups coordinated elsewhere with their code.
            out.groups = r
                .groups
                .iter()
                .filter_map(|id| match elsewhere.get(id.0.as_str()) {
                    Some(code) => Some(Err(not_here(id, *code))),
                    None => described.remove(id.0.as_str()).map(Ok),
                })
                .map(|g| {
                    let g = match g {
                        Ok(g) => g,
                        Err(not_here) => return not_here,
                    };
                    // Before v6 an unknown group is described as Dead without an error.
                    let code = if version < 6 && g.error_code == gc::ErrorCode::GROUP_ID_NOT_FOUND {
                        0
                    } else {
                        g.error_code.code()
                    };
                    describe_groups_response::DescribedGroup::default()
                        .with_error_code(code)
                        .with_group_id(GroupId(str_bytes(g.group_id)))
                        .with_group_state(str_bytes(g.group_state))
                        .with_protocol_type(str_bytes(g.protocol_type))
                        .with_protocol_data(str_bytes(g.protocol_data))
                        .with_authorized_operations(i32::MIN)
                        .with_members(
                            g.members
                                .into_iter()
                                .map(|mm| {
                                    describe_groups_response::DescribedGroupMember::default()
                                        .with_member_id(str_bytes(mm.member_id))
                                        .with_group_instance_id(mm.group_instance_id.map(str_bytes))
                                        .with_client_id(str_bytes(mm.client_id))
                                        .with_client_host(str_bytes(mm.client_host))
                                        .with_member_metadata(mm.member_metadata)
                                        .with_member_assignment(mm.member_assignment)
                                })
                                .collect(),
                        )
                })
                .collect();
        }
        other => {
            let code = failed(other);
            out.groups = r
                .groups
                .iter()
                .map(|g| not_here(g, elsewhere.get(g.0.as_str()).copied().unwrap_or(code)))
                .collect()
        }
    }
    out
}

/// DeleteGroups for classic and share groups; a deleted share group's persisted share-partition
/// state goes with it.
pub async fn delete_groups(
    broker: &std::sync::Arc<Broker>,
    r: &m::DeleteGroupsRequest,
) -> m::DeleteGroupsResponse {
    // A share group whose records are staged in an open transaction (KIP-1289) is in use
    // until the transaction ends (decision 0011): refused as a group with members is.
    let (here, elsewhere) =
        coordinated_here(broker, r.groups_names.iter().map(|g| s(&g.0)).collect());
    let mut in_use = Vec::new();
    let mut group_ids = Vec::new();
    for id in here {
        if broker.share.group_tx_pending(&id).await > 0 {
            in_use.push(id);
        } else {
            group_ids.push(id);
        }
    }
    let result = |id: &str, code: i16| {
        m::delete_groups_response::DeletableGroupResult::default()
            .with_group_id(GroupId(str_bytes(id.to_string())))
            .with_error_code(code)
    };
    let refused = elsewhere.iter().map(|(id, code)| result(id, *code)).chain(
        in_use
            .iter()
            .map(|id| result(id, ErrorCode::NON_EMPTY_GROUP.code())),
    );
    if group_ids.is_empty() {
        return m::DeleteGroupsResponse::default().with_results(refused.collect());
    }
    let request = gc::DeleteGroupsRequest { group_ids };
    let results = match call(broker, gc::GroupRequest::DeleteGroups(request)).await {
        Ok(gc::GroupResponse::DeleteGroups(d)) => {
            let mut results: Vec<_> = refused.collect();
            for g in d.results {
                let mut code = g.error_code.code();
                if code == 0 {
                    let keys = broker.share.keys_of_group(&g.group_id).await;
                    if let Err(e) = broker.share.delete(broker, &keys).await {
                        code = e.code();
                    }
                }
                results.push(
                    m::delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(GroupId(str_bytes(g.group_id)))
                        .with_error_code(code),
                );
            }
            results
        }
        other => {
            let code = failed(other);
            r.groups_names
                .iter()
                .map(|g| {
                    result(
                        g.0.as_str(),
                        elsewhere.get(g.0.as_str()).copied().unwrap_or(code),
                    )
                })
                .collect()
        }
    };
    m::DeleteGroupsResponse::default().with_results(results)
}

pub async fn offset_delete(broker: &Broker, r: &m::OffsetDeleteRequest) -> m::OffsetDeleteResponse {
    let request = gc::OffsetDeleteRequest {
        group_id: s(&r.group_id.0),
        partitions: r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (s(&t.name.0), p.partition_index))
            })
            .collect(),
    };
    let mut out = m::OffsetDeleteResponse::default();
    let (top, results): (i16, BTreeMap<(String, i32), i16>) =
        match call(broker, gc::GroupRequest::OffsetDelete(request)).await {
            Ok(gc::GroupResponse::OffsetDelete(d)) => (
                d.error_code.code(),
                d.partitions
                    .into_iter()
                    .map(|p| ((p.topic, p.partition), p.error_code.code()))
                    .collect(),
            ),
            other => (failed(other), BTreeMap::new()),
        };
    out.error_code = top;
    if top == 0 {
        out.topics = r
            .topics
            .iter()
            .map(|t| {
                offset_delete_response::OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                offset_delete_response::OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(
                                        *results
                                            .get(&(s(&t.name.0), p.partition_index))
                                            .unwrap_or(&0),
                                    )
                            })
                            .collect(),
                    )
            })
            .collect();
    }
    out
}

/// Checks with the transaction coordinator that the group's `__consumer_offsets` partition is
/// in the producer's transaction: TxnOffsetCommit v5+ (transaction version 2 clients send no
/// AddOffsetsToTxn) adds it implicitly, older versions only verify it, as Kafka does.
async fn verify_offsets_partition(
    broker: &Broker,
    version: i16,
    r: &m::TxnOffsetCommitRequest,
) -> Result<(), i16> {
    use shoal_core::txn_coordinator as tc;
    let partitions =
        crate::coordinators::log_io::partition_count(broker, crate::broker::CONSUMER_OFFSETS);
    let partition = tc::TopicPartition {
        topic: crate::broker::CONSUMER_OFFSETS.to_string(),
        partition: gc::partition_for(r.group_id.0.as_str(), partitions) as i32,
    };
    let (id, pid, epoch) = (
        r.transactional_id.0.to_string(),
        tc::ProducerId(r.producer_id.0),
        tc::ProducerEpoch(r.producer_epoch),
    );
    let request = if version >= 5 {
        tc::TxnRequest::AddPartitionsImplicit(tc::AddPartitionsImplicitRequest {
            transactional_id: id,
            producer_id: pid,
            producer_epoch: epoch,
            partitions: vec![partition],
        })
    } else {
        tc::TxnRequest::AddPartitions(tc::AddPartitionsRequest {
            transactional_id: id,
            producer_id: pid,
            producer_epoch: epoch,
            partitions: vec![partition],
            verify_only: true,
        })
    };
    let code = match broker.txn.call(request).await {
        Ok(response) => response.error_code().code(),
        Err(_) => UNAVAILABLE,
    };
    match ErrorCode(code) {
        ErrorCode::NONE => Ok(()),
        ErrorCode::PRODUCER_FENCED => Err(ErrorCode::INVALID_PRODUCER_EPOCH.code()),
        ErrorCode::TRANSACTION_ABORTABLE if version < 4 => Err(ErrorCode::INVALID_TXN_STATE.code()),
        other => Err(other.code()),
    }
}

pub async fn txn_offset_commit(
    broker: &Broker,
    version: i16,
    r: &m::TxnOffsetCommitRequest,
) -> m::TxnOffsetCommitResponse {
    if let Err(code) = verify_offsets_partition(broker, version, r).await {
        let topics = r
            .topics
            .iter()
            .map(|t| {
                m::txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                m::txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        return m::TxnOffsetCommitResponse::default().with_topics(topics);
    }
    let offsets = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| partition_exists(broker, t.name.0.as_str(), p.partition_index))
                .map(move |p| gc::OffsetCommitPartition {
                    topic: s(&t.name.0),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: opt(&p.committed_metadata),
                })
        })
        .collect();
    let request = gc::TxnOffsetCommitRequest {
        group_id: s(&r.group_id.0),
        producer_id: r.producer_id.0,
        producer_epoch: r.producer_epoch,
        generation_id: r.generation_id,
        member_id: s(&r.member_id),
        group_instance_id: opt(&r.group_instance_id),
        offsets,
    };
    let (results, failure): (BTreeMap<(String, i32), i16>, i16) =
        match call(broker, gc::GroupRequest::TxnOffsetCommit(request)).await {
            Ok(gc::GroupResponse::TxnOffsetCommit(c)) => (
                c.partitions
                    .into_iter()
                    .map(|p| ((p.topic, p.partition), p.error_code.code()))
                    .collect(),
                UNAVAILABLE,
            ),
            other => (BTreeMap::new(), failed(other)),
        };
    let topics = r
        .topics
        .iter()
        .map(|t| {
            m::txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            m::txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(
                                    if partition_exists(broker, t.name.0.as_str(), p.partition_index) {
                                        *results
                                            .get(&(s(&t.name.0), p.partition_index))
                                            .unwrap_or(&failure)
                                    } else {
                                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
                                    },
                                )
                        })
                        .collect(),
                )
        })
        .collect();
    m::TxnOffsetCommitResponse::default().with_topics(topics)
}
