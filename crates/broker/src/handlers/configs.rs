//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, the broker and groups.
//!
//! Topic overrides are validated against Kafka's topic keys (unknown key or bad value:
//! INVALID_CONFIG) and persisted in the metadata log. Broker resources accept the cluster-wide
//! dynamic keys Kafka allows (the topic defaults); the rest are read-only. Group resources take
//! the share-group keys of [`crate::group_configs`] through IncrementalAlterConfigs only (as in
//! Kafka, legacy AlterConfigs does not know them), whether or not the group exists.

use shoal_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use shoal_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use shoal_protocol::ErrorCode;

use super::str_bytes;
use crate::broker::{AdminError, Broker};
use crate::config::{
    broker_config_def, topic_config_def, ConfigDef, ConfigMap, Kind, BROKER_CONFIGS, TOPIC_CONFIGS,
};
use crate::group_configs::{self, group_config_def, GROUP_CONFIGS};

/// ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_GROUP: i8 = 32;

/// DescribeConfigs config sources.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;

/// Broker keys that can change at run time (Kafka's cluster-wide dynamic log configs).
pub const DYNAMIC_BROKER_KEYS: &[&str] = &[
    "log.retention.ms",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.roll.ms",
    "log.index.interval.bytes",
    "log.message.timestamp.type",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "message.max.bytes",
];

/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

fn config_type(def: &ConfigDef) -> i8 {
    match def.kind {
        Kind::Bool => 1,
        Kind::Long { max, .. } if max <= i64::from(i32::MAX) => 3,
        Kind::Long { .. } => 5,
        Kind::List(_) => 7,
        Kind::Choice(_) | Kind::Text => 2,
    }
}

fn entry(
    def: &ConfigDef,
    value: String,
    source: i8,
    read_only: bool,
    include_documentation: bool,
    synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(def.name))
        .with_value(Some(str_bytes(value)))
        .with_read_only(read_only)
        .with_config_source(source)
        .with_config_type(config_type(def))
        .with_synonyms(synonyms)
        .with_documentation(include_documentation.then(|| str_bytes(def.doc)))
}

fn wanted(keys: &Option<Vec<shoal_protocol::StrBytes>>, name: &str) -> bool {
    keys.as_ref()
        .is_none_or(|keys| keys.is_empty() || keys.iter().any(|k| k.as_str() == name))
}

fn describe_topic(
    broker: &Broker,
    name: &str,
    keys: &Option<Vec<shoal_protocol::StrBytes>>,
    synonyms: bool,
    docs: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, ErrorCode> {
    let topic = broker
        .topic(name)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let overrides = topic.overrides();
    let config = broker.current_config();
    let dynamic = broker.dynamic_broker_overrides();
    Ok(TOPIC_CONFIGS
        .iter()
        .filter(|(def, _)| wanted(keys, def.name))
        .map(|(def, synonym)| {
            let broker_source = |key: &str| {
                if dynamic.get(key).is_some() {
                    SOURCE_DYNAMIC_DEFAULT_BROKER
                } else if broker.config.values().get(key)
                    != broker_config_def(key).map(|d| d.default)
                {
                    SOURCE_STATIC_BROKER
                } else {
                    SOURCE_DEFAULT
                }
            };
            let (value, source) = match overrides.get(def.name) {
                Some(v) => (v.to_string(), SOURCE_DYNAMIC_TOPIC),
                None => match synonym {
                    Some(key) => (config.get(key).to_string(), broker_source(key)),
                    None => (def.default.to_string(), SOURCE_DEFAULT),
                },
            };
            let mut list = Vec::new();
            if synonyms {
                if let Some(v) = overrides.get(def.name) {
                    list.push(
                        DescribeConfigsSynonym::default()
                            .with_name(str_bytes(def.name))
                            .with_value(Some(str_bytes(v)))
                            .with_source(SOURCE_DYNAMIC_TOPIC),
                    );
                }
                if let Some(key) = synonym {
                    list.push(
                        DescribeConfigsSynonym::default()
                            .with_name(str_bytes(*key))
                            .with_value(Some(str_bytes(config.get(key))))
                            .with_source(broker_source(key)),
                    );
                }
            }
            entry(def, value, source, false, docs, list)
        })
        .collect())
}

fn describe_broker(
    broker: &Broker,
    name: &str,
    keys: &Option<Vec<shoal_protocol::StrBytes>>,
    docs: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, AdminError> {
    check_broker_name(broker, name)?;
    let config = broker.current_config();
    let dynamic = broker.dynamic_broker_overrides();
    Ok(BROKER_CONFIGS
        .iter()
        .filter(|def| wanted(keys, def.name))
        .map(|def| {
            let source = if dynamic.get(def.name).is_some() {
                SOURCE_DYNAMIC_DEFAULT_BROKER
            } else if broker.config.get(def.name) != def.default {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            let read_only = !DYNAMIC_BROKER_KEYS.contains(&def.name);
            entry(
                def,
                config.get(def.name).to_string(),
                source,
                read_only,
                docs,
                Vec::new(),
            )
        })
        .collect())
}

fn check_group_name(name: &str) -> Result<(), AdminError> {
    if name.is_empty() {
        Err(AdminError::new(
            ErrorCode::INVALID_REQUEST,
            "Group name must not be empty",
        ))
    } else {
        Ok(())
    }
}

fn describe_group(
    broker: &Broker,
    name: &str,
    keys: &Option<Vec<shoal_protocol::StrBytes>>,
    docs: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, AdminError> {
    check_group_name(name)?;
    let overrides = broker.group_config_overrides(name);
    let config = broker.current_config();
    Ok(GROUP_CONFIGS
        .iter()
        .filter(|(def, _)| wanted(keys, def.name))
        .map(|(def, _)| {
            let source = if overrides.get(def.name).is_some() {
                SOURCE_GROUP
            } else {
                SOURCE_DEFAULT
            };
            let value = group_configs::effective(&config, &overrides, def.name);
            entry(def, value, source, false, docs, Vec::new())
        })
        .collect())
}

fn check_broker_name(broker: &Broker, name: &str) -> Result<(), AdminError> {
    if name.is_empty() || name == broker.node_id.to_string() {
        Ok(())
    } else {
        Err(AdminError::new(
            ErrorCode::INVALID_REQUEST,
            format!(
                "Unexpected broker id, expected {} or empty string, but received {name}",
                broker.node_id
            ),
        ))
    }
}

pub fn describe(broker: &Broker, request: &DescribeConfigsRequest) -> DescribeConfigsResponse {
    let results = request
        .resources
        .iter()
        .map(|r| {
            let name = r.resource_name.as_str();
            let mut result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let configs = match r.resource_type {
                RESOURCE_TOPIC => describe_topic(
                    broker,
                    name,
                    &r.configuration_keys,
                    request.include_synonyms,
                    request.include_documentation,
                )
                .map_err(|code| AdminError::new(code, format!("Topic {name} not found"))),
                RESOURCE_BROKER => describe_broker(
                    broker,
                    name,
                    &r.configuration_keys,
                    request.include_documentation,
                ),
                RESOURCE_GROUP => describe_group(
                    broker,
                    name,
                    &r.configuration_keys,
                    request.include_documentation,
                ),
                other => Err(AdminError::new(
                    ErrorCode::INVALID_REQUEST,
                    format!("Unsupported resource type {other}"),
                )),
            };
            match configs {
                Ok(configs) => result.configs = configs,
                Err(e) => {
                    result.error_code = e.code.code();
                    result.error_message = Some(str_bytes(e.message));
                }
            }
            result
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// A change to one resource's overrides.
enum Change<'a> {
    /// Legacy AlterConfigs: the given set replaces every override.
    Replace(Vec<(&'a str, Option<&'a str>)>),
    /// IncrementalAlterConfigs: (key, op, value).
    Incremental(Vec<(&'a str, i8, Option<&'a str>)>),
}

fn invalid(message: String) -> AdminError {
    AdminError::new(ErrorCode::INVALID_CONFIG, message)
}

fn list_values(v: Option<&str>) -> Vec<String> {
    v.map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

fn apply_change(
    mut overrides: ConfigMap,
    change: &Change<'_>,
    known: &dyn Fn(&str) -> Result<(), AdminError>,
    default_of: &dyn Fn(&str) -> Option<String>,
    validate: &dyn Fn(&str, &str) -> Result<String, AdminError>,
) -> Result<ConfigMap, AdminError> {
    match change {
        Change::Replace(pairs) => {
            let mut out = ConfigMap::new();
            for (key, value) in pairs {
                let value =
                    value.ok_or_else(|| invalid(format!("Null value not supported for {key}")))?;
                out.insert(*key, validate(key, value)?);
            }
            Ok(out)
        }
        Change::Incremental(ops) => {
            for (key, op, value) in ops {
                match *op {
                    OP_SET => {
                        let value = value.ok_or_else(|| {
                            invalid(format!("Null value not supported for {key}"))
                        })?;
                        let value = validate(key, value)?;
                        overrides.insert(*key, value);
                    }
                    OP_DELETE => {
                        known(key)?;
                        overrides.remove(key);
                    }
                    OP_APPEND | OP_SUBTRACT => {
                        let current = overrides
                            .get(key)
                            .map(str::to_string)
                            .or_else(|| default_of(key));
                        let mut items = list_values(current.as_deref());
                        for item in list_values(*value) {
                            if *op == OP_APPEND {
                                if !items.contains(&item) {
                                    items.push(item);
                                }
                            } else {
                                items.retain(|i| i != &item);
                            }
                        }
                        let joined = items.join(",");
                        let value = validate(key, &joined)?;
                        overrides.insert(*key, value);
                    }
                    other => {
                        return Err(AdminError::new(
                            ErrorCode::INVALID_REQUEST,
                            format!("Unknown config operation {other}"),
                        ))
                    }
                }
            }
            Ok(overrides)
        }
    }
}

fn known_topic_key(key: &str) -> Result<(), AdminError> {
    topic_config_def(key)
        .map(|_| ())
        .ok_or_else(|| invalid(format!("unknown configuration '{key}'")))
}

fn known_broker_key(key: &str) -> Result<(), AdminError> {
    if DYNAMIC_BROKER_KEYS.contains(&key) {
        Ok(())
    } else {
        Err(invalid(format!(
            "Cannot update these configs dynamically: [{key}]"
        )))
    }
}

fn validate_topic_key(key: &str, value: &str) -> Result<String, AdminError> {
    let (def, _) =
        topic_config_def(key).ok_or_else(|| invalid(format!("unknown configuration '{key}'")))?;
    def.validate(value).map_err(|e| invalid(e.to_string()))
}

fn validate_broker_key(key: &str, value: &str) -> Result<String, AdminError> {
    let def =
        broker_config_def(key).ok_or_else(|| invalid(format!("unknown configuration '{key}'")))?;
    if !DYNAMIC_BROKER_KEYS.contains(&key) {
        return Err(invalid(format!(
            "Cannot update these configs dynamically: [{key}]"
        )));
    }
    def.validate(value).map_err(|e| invalid(e.to_string()))
}

async fn alter_resource(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    change: Change<'_>,
    validate_only: bool,
) -> Result<(), AdminError> {
    match resource_type {
        RESOURCE_TOPIC => {
            let topic = broker.topic(name).ok_or_else(|| {
                AdminError::new(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("Topic {name} not found"),
                )
            })?;
            let updated = apply_change(
                topic.overrides(),
                &change,
                &known_topic_key,
                &|key| broker.current_config().topic_default(key),
                &validate_topic_key,
            )?;
            if validate_only {
                return Ok(());
            }
            broker.set_topic_configs(name, updated).await
        }
        RESOURCE_BROKER => {
            check_broker_name(broker, name)?;
            let updated = apply_change(
                broker.dynamic_broker_overrides(),
                &change,
                &known_broker_key,
                &|key| Some(broker.current_config().get(key).to_string()),
                &validate_broker_key,
            )?;
            if validate_only {
                return Ok(());
            }
            broker.set_broker_overrides(updated).await
        }
        RESOURCE_GROUP if matches!(change, Change::Incremental(_)) => {
            check_group_name(name)?;
            let updated = apply_change(
                broker.group_config_overrides(name),
                &change,
                &|key| {
                    group_config_def(key)
                        .map(|_| ())
                        .ok_or_else(|| invalid(format!("Unknown group config name: {key}")))
                },
                &|key| {
                    Some(group_configs::effective(
                        &broker.current_config(),
                        &ConfigMap::new(),
                        key,
                    ))
                },
                &|key, value| group_configs::validate_value(key, value).map_err(invalid),
            )?;
            group_configs::validate(&broker.current_config(), &updated).map_err(invalid)?;
            if validate_only {
                return Ok(());
            }
            broker.set_group_configs(name, updated).await
        }
        other => Err(AdminError::new(
            ErrorCode::INVALID_REQUEST,
            format!("Unsupported resource type {other}"),
        )),
    }
}

pub async fn alter(broker: &Broker, request: &AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for r in &request.resources {
        let pairs = r
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_ref().map(|v| v.as_str())))
            .collect();
        let outcome = alter_resource(
            broker,
            r.resource_type,
            r.resource_name.as_str(),
            Change::Replace(pairs),
            request.validate_only,
        )
        .await;
        let mut out = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        if let Err(e) = outcome {
            out.error_code = e.code.code();
            out.error_message = Some(str_bytes(e.message));
        }
        responses.push(out);
    }
    AlterConfigsResponse::default().with_responses(responses)
}

pub async fn incremental_alter(
    broker: &Broker,
    request: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for r in &request.resources {
        let ops = r
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.config_operation,
                    c.value.as_ref().map(|v| v.as_str()),
                )
            })
            .collect();
        let outcome = alter_resource(
            broker,
            r.resource_type,
            r.resource_name.as_str(),
            Change::Incremental(ops),
            request.validate_only,
        )
        .await;
        let mut out = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        if let Err(e) = outcome {
            out.error_code = e.code.code();
            out.error_message = Some(str_bytes(e.message));
        }
        responses.push(out);
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
