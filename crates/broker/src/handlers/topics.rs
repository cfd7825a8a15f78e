//! CreateTopics, DeleteTopics and CreatePartitions.

use shoal_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use shoal_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use shoal_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use shoal_protocol::messages::delete_topics_response::DeletableTopicResult;
use shoal_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use shoal_protocol::ErrorCode;
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::broker::{AdminError, Broker};
use crate::config::{
    check_topic_values, validate_topic_configs, ConfigError, ConfigMap, TOPIC_CONFIGS,
};
use crate::topic_registry::{effective, validate_topic_name};

/// Partitions per topic at most (a limit on everything).
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Config source codes of DescribeConfigs/CreateTopics.
pub const SOURCE_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 4;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

fn config_error(e: ConfigError) -> AdminError {
    AdminError::new(ErrorCode::INVALID_CONFIG, e.to_string())
}

/// Checks one creatable topic; returns its partition count and overrides.
fn check(
    broker: &Broker,
    name: &str,
    num_partitions: i32,
    replication_factor: i16,
    has_assignments: bool,
    configs: &[(String, Option<String>)],
) -> Result<(u32, ConfigMap), AdminError> {
    validate_topic_name(name)
        .map_err(|m| AdminError::new(ErrorCode::INVALID_TOPIC_EXCEPTION, m))?;
    if broker.topic(name).is_some() {
        return Err(AdminError::new(
            ErrorCode::TOPIC_ALREADY_EXISTS,
            format!("Topic '{name}' already exists."),
        ));
    }
    if let Some(existing) = broker.colliding_topic(name) {
        return Err(AdminError::new(
            ErrorCode::INVALID_TOPIC_EXCEPTION,
            format!("Topic '{name}' collides with existing topic: {existing}"),
        ));
    }
    if has_assignments {
        return Err(AdminError::new(
            ErrorCode::INVALID_REQUEST,
            "Manual replica assignments are not supported on a single node.",
        ));
    }
    let partitions = match num_partitions {
        -1 => broker.config.long("num.partitions") as i32,
        n if (1..=PARTITIONS_PER_TOPIC_MAX).contains(&n) => n,
        n => {
            return Err(AdminError::new(
                ErrorCode::INVALID_PARTITIONS,
                format!(
                "Number of partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, was {n}."
            ),
            ))
        }
    };
    if !(replication_factor == -1 || replication_factor == 1) {
        let message = if replication_factor <= 0 {
            "Replication factor must be larger than 0, or -1 to use the default value.".to_string()
        } else {
            format!("Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only 1 broker(s) are registered.")
        };
        return Err(AdminError::new(
            ErrorCode::INVALID_REPLICATION_FACTOR,
            message,
        ));
    }
    let mut pairs = Vec::new();
    for (k, v) in configs {
        let Some(v) = v else {
            return Err(AdminError::new(
                ErrorCode::INVALID_CONFIG,
                format!("Null value not supported for topic configs: {k}"),
            ));
        };
        pairs.push((k.as_str(), v.as_str()));
    }
    let overrides = validate_topic_configs(pairs).map_err(config_error)?;
    check_topic_values(&broker.current_config(), &overrides).map_err(config_error)?;
    Ok((partitions as u32, overrides))
}

fn described_configs(broker: &Broker, overrides: &ConfigMap) -> Vec<CreatableTopicConfigs> {
    TOPIC_CONFIGS
        .iter()
        .filter(|(def, _)| !def.internal)
        .map(|(def, _)| {
            let source = if overrides.get(def.name).is_some() {
                SOURCE_TOPIC
            } else {
                SOURCE_DEFAULT
            };
            CreatableTopicConfigs::default()
                .with_name(str_bytes(def.name))
                .with_value(Some(str_bytes(effective(
                    &broker.config,
                    overrides,
                    def.name,
                ))))
                .with_config_source(source)
        })
        .collect()
}

pub async fn create_topics(
    broker: &Broker,
    version: i16,
    request: &CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let name = t.name.0.as_str();
        let configs: Vec<(String, Option<String>)> = t
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let mut result = CreatableTopicResult::default()
            .with_name(t.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        let checked = check(
            broker,
            name,
            t.num_partitions,
            t.replication_factor,
            !t.assignments.is_empty(),
            &configs,
        );
        let outcome = match checked {
            Ok((partitions, overrides)) if request.validate_only => {
                Ok((partitions, overrides, Uuid::nil()))
            }
            Ok((partitions, overrides)) => broker
                .create_topic(name, partitions, overrides.clone())
                .await
                .map(|topic| (partitions, overrides, topic.id)),
            Err(e) => Err(e),
        };
        match outcome {
            Ok((partitions, overrides, id)) => {
                result.topic_id = id;
                result.num_partitions = partitions as i32;
                result.replication_factor = 1;
                if version >= 5 {
                    result.configs = Some(described_configs(broker, &overrides));
                }
            }
            Err(e) => {
                result.error_code = e.code.code();
                result.error_message = Some(str_bytes(e.message));
            }
        }
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}

pub async fn delete_topics(
    broker: &Broker,
    version: i16,
    request: &DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // v0-5 name topics in TopicNames; v6 in Topics, by name or by id.
    let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
        request
            .topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let mut result = DeletableTopicResult::default().with_topic_id(id);
        let resolved = match (&name, id.is_nil()) {
            (Some(name), _) => broker
                .topic(name)
                .map(|t| (t.name.clone(), t.id))
                .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            (None, false) => broker
                .topic_by_id(id)
                .map(|t| (t.name.clone(), t.id))
                .ok_or(ErrorCode::UNKNOWN_TOPIC_ID),
            (None, true) => Err(ErrorCode::INVALID_REQUEST),
        };
        result.name = name.clone().map(topic_name);
        match resolved {
            Err(code) => result.error_code = code.code(),
            Ok((topic, _)) if !broker.config.bool("delete.topic.enable") => {
                let _ = topic;
                result.error_code = ErrorCode::TOPIC_DELETION_DISABLED.code();
            }
            Ok((topic, topic_id)) if broker.topic(&topic).is_some_and(|t| t.internal) => {
                result.topic_id = topic_id;
                result.error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
                result.error_message = Some(str_bytes("Internal topics cannot be deleted"));
            }
            Ok((topic, topic_id)) => {
                result.name = Some(topic_name(topic.clone()));
                result.topic_id = topic_id;
                if let Err(e) = broker.delete_topic(&topic).await {
                    result.error_code = e.code.code();
                    result.error_message = Some(str_bytes(e.message));
                }
            }
        }
        responses.push(result);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

/// Manual assignments of the new partitions, checked as Kafka's controller checks them once
/// the topic exists and the count is an increase (those refusals come from the broker's
/// `create_partitions`): one assignment per added partition, none empty, no broker twice,
/// every broker registered (here: this node), and the topic's replication factor (1).
fn check_assignments(broker: &Broker, t: &CreatePartitionsTopic) -> Result<(), AdminError> {
    let Some(assignments) = t.assignments.as_ref() else {
        return Ok(());
    };
    let Some(existing) = broker.topic(t.name.0.as_str()).map(|x| x.partition_count()) else {
        return Ok(());
    };
    let Some(added) = usize::try_from(t.count).ok().filter(|c| *c > existing) else {
        return Ok(());
    };
    let added = added - existing;
    let refuse = |message: String| {
        Err(AdminError::new(
            ErrorCode::INVALID_REPLICA_ASSIGNMENT,
            message,
        ))
    };
    if assignments.len() != added {
        return refuse(format!(
            "Attempted to add {added} additional partition(s), but only {} assignment(s) were specified.",
            assignments.len()
        ));
    }
    for a in assignments {
        if a.broker_ids.is_empty() {
            return refuse(
                "The manual partition assignment includes an empty replica list.".into(),
            );
        }
        // In broker id order, as Kafka's controller looks at them.
        let mut ids: Vec<i32> = a.broker_ids.iter().map(|id| id.0).collect();
        ids.sort_unstable();
        for (i, id) in ids.iter().enumerate() {
            if *id != broker.node_id {
                return refuse(format!(
                    "The manual partition assignment includes broker {id}, but no such broker is registered."
                ));
            }
            if i > 0 && ids[i - 1] == *id {
                return refuse(format!(
                    "The manual partition assignment includes the broker {id} more than once."
                ));
            }
        }
        if ids.len() != 1 {
            return refuse(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have 1 replica(s).",
                ids.len()
            ));
        }
    }
    Ok(())
}

pub async fn create_partitions(
    broker: &Broker,
    request: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        let outcome = if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&t.count) {
            Err(AdminError::new(
                ErrorCode::INVALID_PARTITIONS,
                format!("Number of partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}."),
            ))
        } else {
            match check_assignments(broker, t) {
                Err(e) => Err(e),
                Ok(()) => {
                    broker
                        .create_partitions(t.name.0.as_str(), t.count as u32, request.validate_only)
                        .await
                }
            }
        };
        if let Err(e) = outcome {
            result.error_code = e.code.code();
            result.error_message = Some(str_bytes(e.message));
        }
        results.push(result);
    }
    CreatePartitionsResponse::default().with_results(results)
}
