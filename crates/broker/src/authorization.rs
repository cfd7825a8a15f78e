//! Authorization: every request checked against the ACLs where Kafka's `KafkaApis` checks it,
//! with the error Kafka returns — in this one module, not in each handler.
//!
//! With `authorizer.class.name` empty nothing here runs. Otherwise dispatch calls
//! [`screen`] before a handler sees the request:
//!
//! - a request refused as a whole (a group, transactional id or cluster check) is answered here
//!   with the API's error ([`Screen::Refuse`]) and never reaches its handler;
//! - a request refused in part (topics of a Produce, a Fetch, a Metadata, …) loses those
//!   topics before its handler runs, and [`Patch`] adds them back to the response with
//!   TOPIC_AUTHORIZATION_FAILED;
//! - Metadata for all topics is filtered to those the principal may DESCRIBE.
//!
//! A handler that needs a check in the middle of its own order of work (TxnShareAcknowledge,
//! spec §3.2 step 4) calls [`Checker`], the same decision.
//!
//! The principal is the connection's (`RequestContext::principal`), the host its peer's
//! address as Kafka formats it (`getHostAddress`).

use std::collections::HashSet;

use shoal_core::acl::{AclOperation, Action, ResourceType, CLUSTER_NAME};
use shoal_protocol::messages::{self as m};
use shoal_protocol::{ErrorCode, Request, Response, StrBytes};
use uuid::Uuid;

use crate::handlers::RequestContext;
use crate::node::NodeState;
use crate::share_state::wire;

use AclOperation::*;

/// Decides actions for one request's principal and host.
pub struct Checker<'a> {
    node: &'a NodeState,
    principal: &'a str,
    host: String,
}

impl<'a> Checker<'a> {
    pub fn new(node: &'a NodeState, ctx: &'a RequestContext) -> Self {
        Self {
            node,
            principal: &ctx.principal,
            host: ctx.peer.ip().to_canonical().to_string(),
        }
    }

    /// Whether the principal may do `operation` on `name` of `resource_type`; always with
    /// authorization off.
    pub fn allows(&self, resource_type: ResourceType, name: &str, operation: AclOperation) -> bool {
        if !self.node.authorization_enabled {
            return true;
        }
        self.node.acls().authorize(&Action {
            principal: self.principal,
            host: &self.host,
            resource_type,
            name,
            operation,
        })
    }

    pub fn topic(&self, name: &str, operation: AclOperation) -> bool {
        self.allows(ResourceType::Topic, name, operation)
    }

    pub fn group(&self, name: &str, operation: AclOperation) -> bool {
        self.allows(ResourceType::Group, name, operation)
    }

    pub fn transactional_id(&self, name: &str, operation: AclOperation) -> bool {
        self.allows(ResourceType::TransactionalId, name, operation)
    }

    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.allows(ResourceType::Cluster, CLUSTER_NAME, operation)
    }

    /// Kafka's `authorizeByResourceType`: `operation` on some resource of the type.
    pub fn any_of_type(&self, resource_type: ResourceType, operation: AclOperation) -> bool {
        if !self.node.authorization_enabled {
            return true;
        }
        self.node.acls().authorize_by_resource_type(
            self.principal,
            &self.host,
            resource_type,
            operation,
        )
    }

    /// CREATE on the cluster or on the topic, as creating a topic needs.
    pub fn may_create_topic(&self, name: &str) -> bool {
        self.cluster(Create) || self.topic(name, Create)
    }

    fn topic_name_by_id(&self, id: Uuid) -> Option<String> {
        self.node.topic_by_id(id).map(|t| t.name.clone())
    }
}

/// What dispatch does with a request after screening.
pub enum Screen {
    /// Serve it as it is.
    Pass,
    /// Answer this instead of serving it.
    Refuse(Response),
    /// Serve what is left of it, then apply the patch to the response.
    Patch(Patch),
}

/// Changes to a response for the parts of its request the principal was refused.
pub enum Patch {
    /// Produce: these topics' partitions answered TOPIC_AUTHORIZATION_FAILED.
    Produce(Vec<m::produce_request::TopicProduceData>),
    /// Fetch: these topics' partitions answered TOPIC_AUTHORIZATION_FAILED.
    Fetch(Vec<m::fetch_request::FetchTopic>),
    /// ListOffsets: likewise.
    ListOffsets(Vec<m::list_offsets_request::ListOffsetsTopic>),
    /// Metadata: these named topics answered TOPIC_AUTHORIZATION_FAILED, and (all-topics
    /// requests) only the topics the principal may DESCRIBE listed.
    Metadata {
        refused: Vec<m::metadata_request::MetadataRequestTopic>,
        filter: Option<HashSet<String>>,
    },
    /// OffsetCommit / TxnOffsetCommit: these topics' partitions answered
    /// TOPIC_AUTHORIZATION_FAILED.
    OffsetCommit(Vec<m::offset_commit_request::OffsetCommitRequestTopic>),
    TxnOffsetCommit(Vec<m::txn_offset_commit_request::TxnOffsetCommitRequestTopic>),
    /// CreateTopics / DeleteTopics / CreatePartitions: these names refused.
    CreateTopics(Vec<String>),
    DeleteTopics(Vec<String>),
    CreatePartitions(Vec<String>),
    /// DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: these resources
    /// (type, name, error) refused.
    DescribeConfigs(Vec<(i8, StrBytes, ErrorCode)>),
    AlterConfigs(Vec<(i8, StrBytes, ErrorCode)>),
    IncrementalAlterConfigs(Vec<(i8, StrBytes, ErrorCode)>),
    /// DescribeGroups / DeleteGroups / ShareGroupDescribe: these groups refused.
    DescribeGroups(Vec<m::GroupId>),
    DeleteGroups(Vec<m::GroupId>),
    ShareGroupDescribe(Vec<m::GroupId>),
    /// OffsetFetch (versions 8+): these groups refused.
    OffsetFetchGroups(Vec<m::GroupId>),
    /// DescribeTransactions: these transactional ids refused.
    DescribeTransactions(Vec<m::TransactionalId>),
    /// DeleteRecords / DescribeProducers: these topics' partitions refused.
    DeleteRecords(Vec<m::delete_records_request::DeleteRecordsTopic>),
    DescribeProducers(Vec<m::describe_producers_request::TopicRequest>),
    /// DescribeShareGroupOffsets: these groups refused.
    DescribeShareGroupOffsets(Vec<m::GroupId>),
    /// ListGroups / ListTransactions: only what the principal may DESCRIBE listed.
    ListGroups,
    ListTransactions,
}

fn code(e: ErrorCode) -> i16 {
    e.code()
}

fn message(text: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(text.to_string()))
}

/// Screens `request` (see the module docs). Call only with authorization on.
pub fn screen(
    node: &NodeState,
    ctx: &RequestContext,
    version: i16,
    request: &mut Request,
) -> Screen {
    let check = Checker::new(node, ctx);
    match request {
        Request::Produce(r) => screen_produce(&check, r),
        Request::Fetch(r) => {
            let refused = take_refused(&mut r.topics, |t| {
                let name = fetch_topic_name(&check, t);
                name.is_some_and(|n| !check.topic(&n, Read))
            });
            if !refused.is_empty() && r.topics.is_empty() && r.forgotten_topics_data.is_empty() {
                // Nothing left to read: answer at once rather than wait max_wait_ms for
                // nothing, as Kafka does.
                let mut response: Response = m::FetchResponse::default().into();
                Patch::Fetch(refused).apply(&mut response, node, ctx);
                return Screen::Refuse(response);
            }
            patch_if_any(refused, Patch::Fetch)
        }
        Request::ListOffsets(r) => {
            let refused = take_refused(&mut r.topics, |t| !check.topic(t.name.as_str(), Describe));
            patch_if_any(refused, Patch::ListOffsets)
        }
        Request::Metadata(r) => screen_metadata(&check, version, r),
        Request::OffsetCommit(r) => {
            if !check.group(r.group_id.as_str(), Read) {
                return refuse_offset_commit(r);
            }
            let refused = take_refused(&mut r.topics, |t| {
                let name = if t.name.is_empty() {
                    check.topic_name_by_id(t.topic_id)
                } else {
                    Some(t.name.to_string())
                };
                name.is_some_and(|n| !check.topic(&n, Read))
            });
            patch_if_any(refused, Patch::OffsetCommit)
        }
        Request::TxnOffsetCommit(r) => {
            if !check.transactional_id(r.transactional_id.as_str(), Write) {
                return refuse_txn_offset_commit(
                    r,
                    ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                );
            }
            if !check.group(r.group_id.as_str(), Read) {
                return refuse_txn_offset_commit(r, ErrorCode::GROUP_AUTHORIZATION_FAILED);
            }
            let refused = take_refused(&mut r.topics, |t| !check.topic(t.name.as_str(), Read));
            patch_if_any(refused, Patch::TxnOffsetCommit)
        }
        Request::CreateTopics(r) => {
            let refused = take_refused(&mut r.topics, |t| !check.may_create_topic(t.name.as_str()));
            patch_if_any(
                refused.into_iter().map(|t| t.name.to_string()).collect(),
                Patch::CreateTopics,
            )
        }
        Request::DeleteTopics(r) => screen_delete_topics(&check, r),
        Request::CreatePartitions(r) => {
            let refused = take_refused(&mut r.topics, |t| !check.topic(t.name.as_str(), Alter));
            patch_if_any(
                refused.into_iter().map(|t| t.name.to_string()).collect(),
                Patch::CreatePartitions,
            )
        }
        Request::DescribeConfigs(r) => {
            let refused = take_refused(&mut r.resources, |c| {
                config_refusal(&check, c.resource_type, &c.resource_name, DescribeConfigs).is_some()
            });
            patch_if_any(
                config_refusals(&check, refused, DescribeConfigs),
                Patch::DescribeConfigs,
            )
        }
        Request::AlterConfigs(r) => {
            let refused = take_refused(&mut r.resources, |c| {
                config_refusal(&check, c.resource_type, &c.resource_name, AlterConfigs).is_some()
            });
            patch_if_any(
                config_refusals(&check, refused, AlterConfigs),
                Patch::AlterConfigs,
            )
        }
        Request::IncrementalAlterConfigs(r) => {
            let refused = take_refused(&mut r.resources, |c| {
                config_refusal(&check, c.resource_type, &c.resource_name, AlterConfigs).is_some()
            });
            patch_if_any(
                config_refusals(&check, refused, AlterConfigs),
                Patch::IncrementalAlterConfigs,
            )
        }
        Request::DescribeGroups(r) => {
            let refused = take_refused(&mut r.groups, |g| !check.group(g.as_str(), Describe));
            patch_if_any(refused, Patch::DescribeGroups)
        }
        Request::DeleteGroups(r) => {
            let refused = take_refused(&mut r.groups_names, |g| !check.group(g.as_str(), Delete));
            patch_if_any(refused, Patch::DeleteGroups)
        }
        Request::ShareGroupDescribe(r) => {
            let refused = take_refused(&mut r.group_ids, |g| !check.group(g.as_str(), Describe));
            patch_if_any(refused, Patch::ShareGroupDescribe)
        }
        Request::OffsetFetch(r) if version >= 8 => {
            let refused = take_refused(&mut r.groups, |g| {
                !check.group(g.group_id.as_str(), Describe)
            });
            patch_if_any(
                refused.into_iter().map(|g| g.group_id).collect(),
                Patch::OffsetFetchGroups,
            )
        }
        Request::DescribeTransactions(r) => {
            let refused = take_refused(&mut r.transactional_ids, |t| {
                !check.transactional_id(t.as_str(), Describe)
            });
            patch_if_any(refused, Patch::DescribeTransactions)
        }
        Request::DeleteRecords(r) => {
            let refused = take_refused(&mut r.topics, |t| !check.topic(t.name.as_str(), Delete));
            patch_if_any(refused, Patch::DeleteRecords)
        }
        Request::DescribeProducers(r) => {
            let refused = take_refused(&mut r.topics, |t| !check.topic(t.name.as_str(), Read));
            patch_if_any(refused, Patch::DescribeProducers)
        }
        Request::DescribeShareGroupOffsets(r) => {
            let refused = take_refused(&mut r.groups, |g| {
                !check.group(g.group_id.as_str(), Describe)
            });
            patch_if_any(
                refused.into_iter().map(|g| g.group_id).collect(),
                Patch::DescribeShareGroupOffsets,
            )
        }
        Request::ListGroups(_) if !check.cluster(Describe) => Screen::Patch(Patch::ListGroups),
        Request::ListTransactions(_) => Screen::Patch(Patch::ListTransactions),
        other => whole(&check, other).map_or(Screen::Pass, Screen::Refuse),
    }
}

/// The check of a config resource (Kafka's ConfigResource types: 2 topic, 4 broker,
/// 8 broker logger, 16 client metrics, 32 group) and the error a refusal carries.
fn config_refusal(
    check: &Checker<'_>,
    resource_type: i8,
    name: &StrBytes,
    operation: AclOperation,
) -> Option<ErrorCode> {
    match resource_type {
        2 => (!check.topic(name.as_str(), operation))
            .then_some(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
        32 => (!check.group(name.as_str(), operation))
            .then_some(ErrorCode::GROUP_AUTHORIZATION_FAILED),
        _ => (!check.cluster(operation)).then_some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED),
    }
}

trait ConfigResourceLike {
    fn kind(&self) -> i8;
    fn name(&self) -> &StrBytes;
}

impl ConfigResourceLike for m::describe_configs_request::DescribeConfigsResource {
    fn kind(&self) -> i8 {
        self.resource_type
    }
    fn name(&self) -> &StrBytes {
        &self.resource_name
    }
}

impl ConfigResourceLike for m::alter_configs_request::AlterConfigsResource {
    fn kind(&self) -> i8 {
        self.resource_type
    }
    fn name(&self) -> &StrBytes {
        &self.resource_name
    }
}

impl ConfigResourceLike for m::incremental_alter_configs_request::AlterConfigsResource {
    fn kind(&self) -> i8 {
        self.resource_type
    }
    fn name(&self) -> &StrBytes {
        &self.resource_name
    }
}

fn config_refusals<R: ConfigResourceLike>(
    check: &Checker<'_>,
    refused: Vec<R>,
    operation: AclOperation,
) -> Vec<(i8, StrBytes, ErrorCode)> {
    refused
        .into_iter()
        .filter_map(|r| {
            config_refusal(check, r.kind(), r.name(), operation)
                .map(|e| (r.kind(), r.name().clone(), e))
        })
        .collect()
}

/// Checks of requests refused or served as a whole: the response to refuse with, if any.
fn whole(check: &Checker<'_>, request: &Request) -> Option<Response> {
    let group =
        |name: &str, op| (!check.group(name, op)).then_some(ErrorCode::GROUP_AUTHORIZATION_FAILED);
    let txn = |name: &str| {
        (!check.transactional_id(name, Write))
            .then_some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    };
    let cluster = |op| (!check.cluster(op)).then_some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
    match request {
        Request::JoinGroup(r) => group(r.group_id.as_str(), Read).map(|e| {
            m::JoinGroupResponse::default()
                .with_error_code(code(e))
                .with_generation_id(-1)
                .into()
        }),
        Request::SyncGroup(r) => group(r.group_id.as_str(), Read)
            .map(|e| m::SyncGroupResponse::default().with_error_code(code(e)).into()),
        Request::Heartbeat(r) => group(r.group_id.as_str(), Read)
            .map(|e| m::HeartbeatResponse::default().with_error_code(code(e)).into()),
        Request::LeaveGroup(r) => group(r.group_id.as_str(), Read)
            .map(|e| m::LeaveGroupResponse::default().with_error_code(code(e)).into()),
        Request::FindCoordinator(r) => refuse_find_coordinator(check, r),
        Request::InitProducerId(r) => {
            let refused = match &r.transactional_id {
                // KIP-939: enabling two-phase commit also needs TWO_PHASE_COMMIT (which only
                // ALL implies), refused with the same error as a missing WRITE.
                Some(id) if !id.is_empty() => txn(id.as_str()).or_else(|| {
                    (r.enable_2_pc && !check.transactional_id(id.as_str(), TwoPhaseCommit))
                        .then_some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                }),
                _ => (!check.cluster(IdempotentWrite)
                    && !check.any_of_type(ResourceType::Topic, Write))
                .then_some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED),
            };
            refused.map(|e| {
                m::InitProducerIdResponse::default()
                    .with_error_code(code(e))
                    .with_producer_id(m::ProducerId(-1))
                    .with_producer_epoch(-1)
                    .into()
            })
        }
        Request::AddPartitionsToTxn(r) => refuse_add_partitions(check, r),
        Request::AddOffsetsToTxn(r) => txn(r.transactional_id.as_str())
            .or_else(|| group(r.group_id.as_str(), Read))
            .map(|e| m::AddOffsetsToTxnResponse::default().with_error_code(code(e)).into()),
        Request::EndTxn(r) => txn(r.transactional_id.as_str()).map(|e| {
            m::EndTxnResponse::default()
                .with_error_code(code(e))
                .with_producer_id(m::ProducerId(-1))
                .with_producer_epoch(-1)
                .into()
        }),
        // The share-state RPCs: between brokers only, as WriteTxnMarkers.
        Request::InitializeShareGroupState(r) => cluster(ClusterAction)
            .map(|e| wire::refuse_initialize(r, code(e)).into()),
        Request::ReadShareGroupState(r) => {
            cluster(ClusterAction).map(|e| wire::refuse_read(r, code(e)).into())
        }
        Request::WriteShareGroupState(r) => {
            cluster(ClusterAction).map(|e| wire::refuse_write(r, code(e)).into())
        }
        Request::DeleteShareGroupState(r) => {
            cluster(ClusterAction).map(|e| wire::refuse_delete(r, code(e)).into())
        }
        Request::ReadShareGroupStateSummary(r) => {
            cluster(ClusterAction).map(|e| wire::refuse_summary(r, code(e)).into())
        }
        Request::WriteTxnMarkers(_) => cluster(ClusterAction).map(|_| {
            // Between brokers only; a client without CLUSTER_ACTION gets nothing marked.
            m::WriteTxnMarkersResponse::default().into()
        }),
        Request::UpdateFeatures(_) => cluster(Alter).map(|e| {
            m::UpdateFeaturesResponse::default()
                .with_error_code(code(e))
                .with_error_message(message("Cluster authorization failed."))
                .into()
        }),
        Request::CreateAcls(r) => cluster(Alter).map(|e| {
            let results = r
                .creations
                .iter()
                .map(|_| {
                    m::create_acls_response::AclCreationResult::default()
                        .with_error_code(code(e))
                        .with_error_message(message("Cluster authorization failed."))
                })
                .collect();
            m::CreateAclsResponse::default().with_results(results).into()
        }),
        Request::DeleteAcls(r) => cluster(Alter).map(|e| {
            let results = r
                .filters
                .iter()
                .map(|_| {
                    m::delete_acls_response::DeleteAclsFilterResult::default()
                        .with_error_code(code(e))
                        .with_error_message(message("Cluster authorization failed."))
                })
                .collect();
            m::DeleteAclsResponse::default().with_filter_results(results).into()
        }),
        Request::DescribeAcls(_) => cluster(Describe).map(|e| {
            m::DescribeAclsResponse::default()
                .with_error_code(code(e))
                .with_error_message(message("Cluster authorization failed."))
                .into()
        }),
        Request::DescribeUserScramCredentials(_) => cluster(Describe).map(|e| {
            m::DescribeUserScramCredentialsResponse::default()
                .with_error_code(code(e))
                .with_error_message(message("Cluster authorization failed."))
                .into()
        }),
        Request::AlterUserScramCredentials(r) => cluster(Alter).map(|e| {
            let users = r
                .deletions
                .iter()
                .map(|d| d.name.clone())
                .chain(r.upsertions.iter().map(|u| u.name.clone()));
            let mut seen = HashSet::new();
            let results = users
                .filter(|u| seen.insert(u.clone()))
                .map(|user| {
                    m::alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                        .with_user(user)
                        .with_error_code(code(e))
                })
                .collect();
            m::AlterUserScramCredentialsResponse::default()
                .with_results(results)
                .into()
        }),
        Request::OffsetFetch(r) => group(r.group_id.as_str(), Describe).map(|e| {
            m::OffsetFetchResponse::default()
                .with_error_code(code(e))
                .into()
        }),
        Request::OffsetDelete(r) => group(r.group_id.as_str(), Delete).map(|e| {
            m::OffsetDeleteResponse::default()
                .with_error_code(code(e))
                .into()
        }),
        Request::AlterReplicaLogDirs(r) => cluster(Alter).map(|e| {
            use m::alter_replica_log_dirs_response as resp;
            let results = r
                .dirs
                .iter()
                .flat_map(|d| d.topics.iter())
                .map(|t| {
                    resp::AlterReplicaLogDirTopicResult::default()
                        .with_topic_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    resp::AlterReplicaLogDirPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_error_code(code(e))
                                })
                                .collect(),
                        )
                })
                .collect();
            m::AlterReplicaLogDirsResponse::default()
                .with_results(results)
                .into()
        }),
        Request::DescribeLogDirs(_) => cluster(Describe).map(|e| {
            m::DescribeLogDirsResponse::default()
                .with_error_code(code(e))
                .into()
        }),
        Request::AlterShareGroupOffsets(r) => group(r.group_id.as_str(), Read).map(|e| {
            m::AlterShareGroupOffsetsResponse::default()
                .with_error_code(code(e))
                .with_error_message(message("Group authorization failed."))
                .into()
        }),
        Request::DeleteShareGroupOffsets(r) => group(r.group_id.as_str(), Delete).map(|e| {
            m::DeleteShareGroupOffsetsResponse::default()
                .with_error_code(code(e))
                .with_error_message(message("Group authorization failed."))
                .into()
        }),
        Request::ShareGroupHeartbeat(r) => {
            let refused = group(r.group_id.as_str(), Read).or_else(|| {
                let topics = r.subscribed_topic_names.iter().flatten();
                topics
                    .into_iter()
                    .any(|t| !check.topic(t.as_str(), Describe))
                    .then_some(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
            });
            refused.map(|e| {
                m::ShareGroupHeartbeatResponse::default()
                    .with_error_code(code(e))
                    .into()
            })
        }
        Request::ShareFetch(r) => {
            let group_id = r.group_id.as_ref().map(|g| g.as_str()).unwrap_or("");
            let topics = r.topics.iter().map(|t| t.topic_id);
            share_refusal(check, group_id, topics).map(|e| {
                shoal_protocol::share::ShareFetchResponse {
                    error_code: code(e),
                    ..Default::default()
                }
                .into()
            })
        }
        Request::ShareAcknowledge(r) => {
            let group_id = r.group_id.as_ref().map(|g| g.as_str()).unwrap_or("");
            let topics = r.topics.iter().map(|t| t.topic_id);
            share_refusal(check, group_id, topics).map(|e| {
                shoal_protocol::share::ShareAcknowledgeResponse {
                    error_code: code(e),
                    ..Default::default()
                }
                .into()
            })
        }
        _ => None,
    }
}

/// ShareFetch and ShareAcknowledge: READ on the group, then READ on every topic named (by
/// id; an unknown id is the handler's UNKNOWN_TOPIC_ID).
fn share_refusal(
    check: &Checker<'_>,
    group_id: &str,
    mut topics: impl Iterator<Item = Uuid>,
) -> Option<ErrorCode> {
    if !check.group(group_id, Read) {
        return Some(ErrorCode::GROUP_AUTHORIZATION_FAILED);
    }
    topics
        .any(|id| {
            check
                .topic_name_by_id(id)
                .is_some_and(|name| !check.topic(&name, Read))
        })
        .then_some(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
}

/// TxnShareAcknowledge's step 4 (spec §3.2): WRITE on the transactional id, READ on the
/// group, READ on each topic (by id; an unknown id is left to step 7), in that order.
pub fn txn_share_ack_refusal(
    node: &NodeState,
    ctx: &RequestContext,
    transactional_id: &str,
    group_id: &str,
    topics: impl Iterator<Item = Uuid>,
) -> Option<ErrorCode> {
    let check = Checker::new(node, ctx);
    if !check.transactional_id(transactional_id, Write) {
        return Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    share_refusal(&check, group_id, topics)
}

fn refuse_find_coordinator(check: &Checker<'_>, r: &m::FindCoordinatorRequest) -> Option<Response> {
    // Key type 0: group; 1: transaction; 2: share ("group:topicId:partition").
    let refusal = |key: &str| match r.key_type {
        1 => (!check.transactional_id(key, Describe))
            .then_some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        2 => {
            let group = key.split(':').next().unwrap_or(key);
            (!check.group(group, Describe)).then_some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
        }
        _ => (!check.group(key, Describe)).then_some(ErrorCode::GROUP_AUTHORIZATION_FAILED),
    };
    if r.coordinator_keys.is_empty() {
        // Versions 0-3: one key.
        return refusal(r.key.as_str()).map(|e| {
            m::FindCoordinatorResponse::default()
                .with_error_code(code(e))
                .with_node_id(m::BrokerId(-1))
                .with_port(-1)
                .into()
        });
    }
    // Versions 4+: refused only when every key is; otherwise the handler answers them all
    // and the refused keys are refused in the patch-free way Kafka's coordinator does not
    // need (each key's lookup is independent), so a mixed batch is served in full only for
    // the allowed keys.
    let refused: Vec<(StrBytes, ErrorCode)> = r
        .coordinator_keys
        .iter()
        .filter_map(|k| refusal(k.as_str()).map(|e| (k.clone(), e)))
        .collect();
    if refused.is_empty() {
        return None;
    }
    if refused.len() == r.coordinator_keys.len() {
        let coordinators = refused
            .into_iter()
            .map(|(key, e)| {
                m::find_coordinator_response::Coordinator::default()
                    .with_key(key)
                    .with_node_id(m::BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(code(e))
            })
            .collect();
        return Some(
            m::FindCoordinatorResponse::default()
                .with_coordinators(coordinators)
                .into(),
        );
    }
    // Mixed: refuse the whole batch with each key's own answer (allowed keys get
    // COORDINATOR_NOT_AVAILABLE, retriable); clients send one key per request in practice.
    let coordinators = r
        .coordinator_keys
        .iter()
        .map(|k| {
            let e = refusal(k.as_str()).unwrap_or(ErrorCode::COORDINATOR_NOT_AVAILABLE);
            m::find_coordinator_response::Coordinator::default()
                .with_key(k.clone())
                .with_node_id(m::BrokerId(-1))
                .with_port(-1)
                .with_error_code(code(e))
        })
        .collect();
    Some(
        m::FindCoordinatorResponse::default()
            .with_coordinators(coordinators)
            .into(),
    )
}

fn refuse_add_partitions(
    check: &Checker<'_>,
    r: &m::AddPartitionsToTxnRequest,
) -> Option<Response> {
    use m::add_partitions_to_txn_response as resp;
    if !r.transactions.is_empty() {
        // Versions 4+: batches between brokers, which need CLUSTER_ACTION.
        return (!check.cluster(ClusterAction)).then(|| {
            m::AddPartitionsToTxnResponse::default()
                .with_error_code(code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED))
                .into()
        });
    }
    // Versions 0-3, a client's: WRITE on the transactional id, then WRITE on each topic;
    // with any refused, nothing is added and the rest is OPERATION_NOT_ATTEMPTED.
    let txn_denied = !check.transactional_id(r.v3_and_below_transactional_id.as_str(), Write);
    let topic_denied: HashSet<&str> = r
        .v3_and_below_topics
        .iter()
        .map(|topic| topic.name.as_str())
        .filter(|name| !check.topic(name, Write))
        .collect();
    if !txn_denied && topic_denied.is_empty() {
        return None;
    }
    let results = r
        .v3_and_below_topics
        .iter()
        .map(|topic| {
            let e = if txn_denied {
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            } else if topic_denied.contains(topic.name.as_str()) {
                ErrorCode::TOPIC_AUTHORIZATION_FAILED
            } else {
                ErrorCode::OPERATION_NOT_ATTEMPTED
            };
            resp::AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name.clone())
                .with_results_by_partition(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            resp::AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code(e))
                        })
                        .collect(),
                )
        })
        .collect();
    Some(
        m::AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(results)
            .into(),
    )
}

fn screen_produce(check: &Checker<'_>, r: &mut m::ProduceRequest) -> Screen {
    if let Some(id) = r.transactional_id.as_ref().filter(|id| !id.is_empty()) {
        if !check.transactional_id(id.as_str(), Write) {
            let all = std::mem::take(&mut r.topic_data);
            return Screen::Refuse(
                produce_errors(all, ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED).into(),
            );
        }
    }
    let refused = take_refused(&mut r.topic_data, |t| {
        let name = if t.name.is_empty() {
            check.topic_name_by_id(t.topic_id)
        } else {
            Some(t.name.to_string())
        };
        name.is_some_and(|n| !check.topic(&n, Write))
    });
    patch_if_any(refused, Patch::Produce)
}

fn produce_errors(
    topics: Vec<m::produce_request::TopicProduceData>,
    e: ErrorCode,
) -> m::ProduceResponse {
    m::ProduceResponse::default().with_responses(produce_topic_errors(topics, e))
}

fn produce_topic_errors(
    topics: Vec<m::produce_request::TopicProduceData>,
    e: ErrorCode,
) -> Vec<m::produce_response::TopicProduceResponse> {
    topics
        .into_iter()
        .map(|t| {
            m::produce_response::TopicProduceResponse::default()
                .with_name(t.name)
                .with_topic_id(t.topic_id)
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            m::produce_response::PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code(e))
                                .with_base_offset(-1)
                                .with_log_append_time_ms(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect(),
                )
        })
        .collect()
}

fn fetch_topic_name(check: &Checker<'_>, t: &m::fetch_request::FetchTopic) -> Option<String> {
    if t.topic.is_empty() {
        check.topic_name_by_id(t.topic_id)
    } else {
        Some(t.topic.to_string())
    }
}

fn screen_metadata(check: &Checker<'_>, version: i16, r: &mut m::MetadataRequest) -> Screen {
    let all_topics = match &r.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    if all_topics {
        let allowed: HashSet<String> = check
            .node
            .topic_list()
            .iter()
            .filter(|t| check.topic(&t.name, Describe))
            .map(|t| t.name.clone())
            .collect();
        return Screen::Patch(Patch::Metadata {
            refused: Vec::new(),
            filter: Some(allowed),
        });
    }
    let auto_create = (version < 4 || r.allow_auto_topic_creation)
        && check.node.config.bool("auto.create.topics.enable");
    let Some(list) = r.topics.as_mut() else {
        return Screen::Pass;
    };
    let refused = take_refused(list, |t| match &t.name {
        Some(name) => {
            !check.topic(name.as_str(), Describe)
                || (auto_create
                    && check.node.topic(name.as_str()).is_none()
                    && !check.may_create_topic(name.as_str()))
        }
        None => check
            .topic_name_by_id(t.topic_id)
            .is_some_and(|n| !check.topic(&n, Describe)),
    });
    if refused.is_empty() {
        return Screen::Pass;
    }
    Screen::Patch(Patch::Metadata {
        refused,
        filter: None,
    })
}

fn screen_delete_topics(check: &Checker<'_>, r: &mut m::DeleteTopicsRequest) -> Screen {
    let mut refused: Vec<String> = Vec::new();
    let names: Vec<String> = r.topic_names.iter().map(|n| n.to_string()).collect();
    r.topic_names.retain(|n| check.topic(n.as_str(), Delete));
    refused.extend(names.into_iter().filter(|n| !check.topic(n, Delete)));
    let by_state = take_refused(&mut r.topics, |t| {
        let name = match &t.name {
            Some(n) => Some(n.to_string()),
            None => check.topic_name_by_id(t.topic_id),
        };
        name.is_some_and(|n| !check.topic(&n, Delete))
    });
    refused.extend(by_state.into_iter().filter_map(|t| {
        t.name
            .map(|n| n.to_string())
            .or_else(|| check.topic_name_by_id(t.topic_id))
    }));
    patch_if_any(refused, Patch::DeleteTopics)
}

fn refuse_offset_commit(r: &m::OffsetCommitRequest) -> Screen {
    use m::offset_commit_response as resp;
    let topics = r
        .topics
        .iter()
        .map(|t| {
            resp::OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            resp::OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(ErrorCode::GROUP_AUTHORIZATION_FAILED))
                        })
                        .collect(),
                )
        })
        .collect();
    Screen::Refuse(
        m::OffsetCommitResponse::default()
            .with_topics(topics)
            .into(),
    )
}

fn offset_commit_errors(
    topics: Vec<m::offset_commit_request::OffsetCommitRequestTopic>,
) -> Vec<m::offset_commit_response::OffsetCommitResponseTopic> {
    use m::offset_commit_response as resp;
    topics
        .into_iter()
        .map(|t| {
            resp::OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            resp::OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                        })
                        .collect(),
                )
        })
        .collect()
}

fn txn_offset_commit_errors(
    topics: &[m::txn_offset_commit_request::TxnOffsetCommitRequestTopic],
    e: ErrorCode,
) -> Vec<m::txn_offset_commit_response::TxnOffsetCommitResponseTopic> {
    use m::txn_offset_commit_response as resp;
    topics
        .iter()
        .map(|t| {
            resp::TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            resp::TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(e))
                        })
                        .collect(),
                )
        })
        .collect()
}

fn refuse_txn_offset_commit(r: &m::TxnOffsetCommitRequest, e: ErrorCode) -> Screen {
    Screen::Refuse(
        m::TxnOffsetCommitResponse::default()
            .with_topics(txn_offset_commit_errors(&r.topics, e))
            .into(),
    )
}

/// Removes the items `refused` picks from `items`, returning them in order.
fn take_refused<T>(items: &mut Vec<T>, mut refused: impl FnMut(&T) -> bool) -> Vec<T> {
    let mut taken = Vec::new();
    let mut kept = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        if refused(&item) {
            taken.push(item);
        } else {
            kept.push(item);
        }
    }
    *items = kept;
    taken
}

fn patch_if_any<T>(refused: Vec<T>, patch: impl FnOnce(Vec<T>) -> Patch) -> Screen {
    if refused.is_empty() {
        Screen::Pass
    } else {
        Screen::Patch(patch(refused))
    }
}

impl Patch {
    /// Whether a Produce with acks=0 must close its connection: it had a refused part, and
    /// Kafka closes such a connection so that the producer notices.
    pub fn refuses_something(&self) -> bool {
        !matches!(self, Patch::Metadata { refused, .. } if refused.is_empty())
    }

    /// Applies the patch to the handler's response.
    pub fn apply(self, response: &mut Response, node: &NodeState, ctx: &RequestContext) {
        let check = Checker::new(node, ctx);
        match (self, response) {
            (Patch::ListGroups, Response::ListGroups(r)) => {
                r.groups
                    .retain(|g| check.group(g.group_id.as_str(), Describe));
            }
            (Patch::ListTransactions, Response::ListTransactions(r)) => {
                r.transaction_states
                    .retain(|t| check.transactional_id(t.transactional_id.as_str(), Describe));
            }
            (Patch::Produce(topics), Response::Produce(r)) => r.responses.extend(
                produce_topic_errors(topics, ErrorCode::TOPIC_AUTHORIZATION_FAILED),
            ),
            (Patch::Fetch(topics), Response::Fetch(r)) => {
                r.responses.extend(topics.into_iter().map(|t| {
                    m::fetch_response::FetchableTopicResponse::default()
                        .with_topic(t.topic)
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    m::fetch_response::PartitionData::default()
                                        .with_partition_index(p.partition)
                                        .with_error_code(code(
                                            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                                        ))
                                        .with_high_watermark(-1)
                                        .with_last_stable_offset(-1)
                                        .with_log_start_offset(-1)
                                        .with_records(Some(bytes::Bytes::new()))
                                })
                                .collect(),
                        )
                }))
            }
            (Patch::ListOffsets(topics), Response::ListOffsets(r)) => {
                r.topics.extend(topics.into_iter().map(|t| {
                    m::list_offsets_response::ListOffsetsTopicResponse::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    m::list_offsets_response::ListOffsetsPartitionResponse::default(
                                    )
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                                    .with_timestamp(-1)
                                    .with_offset(-1)
                                    .with_leader_epoch(-1)
                                })
                                .collect(),
                        )
                }))
            }
            (Patch::Metadata { refused, filter }, Response::Metadata(r)) => {
                if let Some(allowed) = filter {
                    r.topics.retain(|t| {
                        t.name
                            .as_ref()
                            .is_some_and(|n| allowed.contains(n.as_str()))
                    });
                }
                r.topics.extend(refused.into_iter().map(|t| {
                    m::metadata_response::MetadataResponseTopic::default()
                        .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                        .with_name(t.name)
                        .with_topic_id(t.topic_id)
                        .with_topic_authorized_operations(i32::MIN)
                }));
            }
            (Patch::OffsetCommit(topics), Response::OffsetCommit(r)) => {
                r.topics.extend(offset_commit_errors(topics));
            }
            (Patch::TxnOffsetCommit(topics), Response::TxnOffsetCommit(r)) => r.topics.extend(
                txn_offset_commit_errors(&topics, ErrorCode::TOPIC_AUTHORIZATION_FAILED),
            ),
            (Patch::CreateTopics(names), Response::CreateTopics(r)) => {
                r.topics.extend(names.into_iter().map(|n| {
                    m::create_topics_response::CreatableTopicResult::default()
                        .with_name(m::TopicName(StrBytes::from_string(n)))
                        .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                        .with_error_message(message("Authorization failed."))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_topic_config_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                }))
            }
            (Patch::DeleteTopics(names), Response::DeleteTopics(r)) => {
                r.responses.extend(names.into_iter().map(|n| {
                    m::delete_topics_response::DeletableTopicResult::default()
                        .with_name(Some(m::TopicName(StrBytes::from_string(n))))
                        .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                }))
            }
            (Patch::CreatePartitions(names), Response::CreatePartitions(r)) => {
                r.results.extend(names.into_iter().map(|n| {
                    m::create_partitions_response::CreatePartitionsTopicResult::default()
                        .with_name(m::TopicName(StrBytes::from_string(n)))
                        .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                        .with_error_message(message("Authorization failed."))
                }))
            }
            (Patch::DescribeConfigs(refused), Response::DescribeConfigs(r)) => {
                r.results.extend(refused.into_iter().map(|(kind, name, e)| {
                    m::describe_configs_response::DescribeConfigsResult::default()
                        .with_error_code(code(e))
                        .with_error_message(message("Authorization failed."))
                        .with_resource_type(kind)
                        .with_resource_name(name)
                }))
            }
            (Patch::AlterConfigs(refused), Response::AlterConfigs(r)) => {
                r.responses
                    .extend(refused.into_iter().map(|(kind, name, e)| {
                        m::alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_error_code(code(e))
                            .with_error_message(message("Authorization failed."))
                            .with_resource_type(kind)
                            .with_resource_name(name)
                    }))
            }
            (Patch::IncrementalAlterConfigs(refused), Response::IncrementalAlterConfigs(r)) => r
                .responses
                .extend(refused.into_iter().map(|(kind, name, e)| {
                    m::incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                        .with_error_code(code(e))
                        .with_error_message(message("Authorization failed."))
                        .with_resource_type(kind)
                        .with_resource_name(name)
                })),
            (Patch::DescribeGroups(groups), Response::DescribeGroups(r)) => {
                r.groups.extend(groups.into_iter().map(|g| {
                    m::describe_groups_response::DescribedGroup::default()
                        .with_error_code(code(ErrorCode::GROUP_AUTHORIZATION_FAILED))
                        .with_group_id(g)
                        .with_authorized_operations(i32::MIN)
                }))
            }
            (Patch::DeleteGroups(groups), Response::DeleteGroups(r)) => {
                r.results.extend(groups.into_iter().map(|g| {
                    m::delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(code(ErrorCode::GROUP_AUTHORIZATION_FAILED))
                }))
            }
            (Patch::ShareGroupDescribe(groups), Response::ShareGroupDescribe(r)) => {
                r.groups.extend(groups.into_iter().map(|g| {
                    m::share_group_describe_response::DescribedGroup::default()
                        .with_error_code(code(ErrorCode::GROUP_AUTHORIZATION_FAILED))
                        .with_group_id(g)
                        .with_authorized_operations(i32::MIN)
                }))
            }
            (Patch::OffsetFetchGroups(groups), Response::OffsetFetch(r)) => {
                r.groups.extend(groups.into_iter().map(|g| {
                    m::offset_fetch_response::OffsetFetchResponseGroup::default()
                        .with_group_id(g)
                        .with_error_code(code(ErrorCode::GROUP_AUTHORIZATION_FAILED))
                }))
            }
            (Patch::DeleteRecords(topics), Response::DeleteRecords(r)) => {
                r.topics.extend(topics.into_iter().map(|t| {
                    m::delete_records_response::DeleteRecordsTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    m::delete_records_response::DeleteRecordsPartitionResult::default()
                                        .with_partition_index(p.partition_index)
                                        .with_low_watermark(-1)
                                        .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                                })
                                .collect(),
                        )
                }))
            }
            (Patch::DescribeProducers(topics), Response::DescribeProducers(r)) => {
                r.topics.extend(topics.into_iter().map(|t| {
                    m::describe_producers_response::TopicResponse::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|p| {
                                    m::describe_producers_response::PartitionResponse::default()
                                        .with_partition_index(*p)
                                        .with_error_code(code(ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                                })
                                .collect(),
                        )
                }))
            }
            (Patch::DescribeShareGroupOffsets(groups), Response::DescribeShareGroupOffsets(r)) => {
                r.groups.extend(groups.into_iter().map(|g| {
                    shoal_protocol::share::describe_share_group_offsets::DescribeShareGroupOffsetsResponseGroup {
                        group_id: g,
                        error_code: code(ErrorCode::GROUP_AUTHORIZATION_FAILED),
                        error_message: message("Group authorization failed."),
                        ..Default::default()
                    }
                }))
            }
            (Patch::DescribeTransactions(ids), Response::DescribeTransactions(r)) => {
                r.transaction_states.extend(ids.into_iter().map(|id| {
                    m::describe_transactions_response::TransactionState::default()
                        .with_error_code(code(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
                        .with_transactional_id(id)
                        .with_producer_id(m::ProducerId(-1))
                        .with_producer_epoch(-1)
                        .with_transaction_start_time_ms(-1)
                }))
            }
            (patch, response) => {
                debug_assert!(false, "patch for another API: {:?}", response.api_key());
                let _ = patch;
            }
        }
    }
}
