//! Metadata: brokers, cluster id, controller, and topics with ids and partitions. Unknown
//! topics are created when both the request and `auto.create.topics.enable` allow it.

use std::sync::Arc;

use shoal_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use shoal_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use shoal_protocol::ErrorCode;
use uuid::Uuid;

use super::{str_bytes, topic_name, RequestContext};
use crate::broker::Broker;
use crate::config::ConfigMap;
use crate::topic_registry::{validate_topic_name, Topic};

/// Authorized operations are reported as "not requested" until ACLs exist.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

fn topic_entry(broker: &Broker, topic: &Topic) -> MetadataResponseTopic {
    let partitions = topic
        .partitions()
        .iter()
        .map(|p| {
            let leader = broker.leader(&topic.name, p.index);
            // The owner holds the only copy a client reads; the durable copy is the store's.
            let replicas = if leader.node_id >= 0 {
                vec![BrokerId(leader.node_id)]
            } else {
                Vec::new()
            };
            let error = if leader.node_id >= 0 {
                ErrorCode::NONE
            } else {
                ErrorCode::LEADER_NOT_AVAILABLE
            };
            MetadataResponsePartition::default()
                .with_error_code(error.code())
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(leader.node_id))
                .with_leader_epoch(leader.epoch)
                .with_replica_nodes(replicas.clone())
                .with_isr_nodes(replicas)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(topic.name.clone())))
        .with_topic_id(topic.id)
        .with_is_internal(topic.internal)
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn error_entry(name: Option<&str>, id: Uuid, code: ErrorCode) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(name.map(|n| topic_name(n.to_string())))
        .with_topic_id(id)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// Creates `name` with the broker defaults if auto-creation is on; returns the topic or the
/// error to report for it.
pub async fn auto_create(broker: &Broker, name: &str) -> Result<Arc<Topic>, ErrorCode> {
    if let Some(topic) = broker.topic(name) {
        return Ok(topic);
    }
    if !broker.config.bool("auto.create.topics.enable") {
        return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    }
    if validate_topic_name(name).is_err() {
        return Err(ErrorCode::INVALID_TOPIC_EXCEPTION);
    }
    let partitions = broker.config.long("num.partitions") as u32;
    match broker
        .create_topic(name, partitions, ConfigMap::new())
        .await
    {
        Ok(topic) => Ok(topic),
        // Someone else created it meanwhile.
        Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => {
            broker.topic(name).ok_or(ErrorCode::LEADER_NOT_AVAILABLE)
        }
        Err(e) => Err(e.code),
    }
}

pub async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    version: i16,
    request: &MetadataRequest,
) -> MetadataResponse {
    let allow_auto_create = version < 4 || request.allow_auto_topic_creation;
    let topics = match &request.topics {
        None => broker
            .topic_list()
            .iter()
            .map(|t| topic_entry(broker, t))
            .collect(),
        Some(list) if list.is_empty() && version == 0 => broker
            .topic_list()
            .iter()
            .map(|t| topic_entry(broker, t))
            .collect(),
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for requested in list {
                let entry = match requested.name.as_ref().map(|n| n.0.as_str()) {
                    Some(name) => {
                        let found = match broker.topic(name) {
                            Some(t) => Ok(t),
                            None if allow_auto_create => auto_create(broker, name).await,
                            None if validate_topic_name(name).is_err() => {
                                Err(ErrorCode::INVALID_TOPIC_EXCEPTION)
                            }
                            None => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                        };
                        match found {
                            Ok(t) => topic_entry(broker, &t),
                            Err(code) => error_entry(Some(name), Uuid::nil(), code),
                        }
                    }
                    None => match broker.topic_by_id(requested.topic_id) {
                        Some(t) => topic_entry(broker, &t),
                        None => error_entry(None, requested.topic_id, ErrorCode::UNKNOWN_TOPIC_ID),
                    },
                };
                out.push(entry);
            }
            out
        }
    };
    MetadataResponse::default()
        .with_brokers(
            broker
                .ownership
                .nodes()
                .into_iter()
                .map(|n| ctx.endpoint(broker.node_id, n))
                .map(|n| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(n.node_id))
                        .with_host(str_bytes(n.host))
                        .with_port(i32::from(n.port))
                        .with_rack(n.rack.map(str_bytes))
                })
                .collect(),
        )
        .with_cluster_id(Some(str_bytes(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(broker.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
