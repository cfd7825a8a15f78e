//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, the broker and groups.
//!
//! Topic overrides are validated against Kafka's topic keys (unknown key or bad value:
//! INVALID_CONFIG) and persisted in the metadata log. Broker resources accept the keys Kafka
//! updates dynamically (per-broker ones only with the node id as resource name); altering a
//! read-only key or giving a bad value is INVALID_REQUEST, as in Kafka. The TLS store keys
//! (`ssl.keystore.*`, `ssl.truststore.*`, `ssl.key.password`, also as
//! `listener.name.<l>.ssl.…`) are loaded before they are stored: stores that do not load, or a
//! certificate whose subject changes, are INVALID_REQUEST and the stores in use stay
//! ([`crate::tls`] swaps them for new connections once stored). Shoal keeps one set of
//! dynamic broker values, reported as DYNAMIC_DEFAULT_BROKER_CONFIG whichever resource name set
//! them (decision 0007); describing the name "" (the cluster default) lists only those values.
//! APPEND and SUBTRACT apply to LIST keys only (INVALID_CONFIG otherwise). Group resources take the keys of [`crate::group_configs`] through
//! IncrementalAlterConfigs only (as in Kafka, legacy AlterConfigs does not know them), whether
//! or not the group exists. Keys Kafka marks internal are accepted but listed only when asked
//! for by name; secrets (PASSWORD keys) are described as null and sensitive.

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
use crate::config::listeners::{parse_listeners, split_listener_key};
use crate::config::{
    broker_config_def, check_topic_values, topic_config_def, ConfigDef, ConfigMap, Type, Update,
    BROKER_CONFIGS, TOPIC_CONFIGS,
};
use crate::group_configs::{self, group_config_def, GROUP_CONFIGS};
use crate::tls;

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

/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// Whether a broker key may be altered at run time (Kafka's dynamic broker configs).
pub fn is_dynamic_broker_key(key: &str) -> bool {
    broker_config_def(key).is_some_and(|d| d.update != Update::ReadOnly)
}

/// Options of one DescribeConfigs request.
#[derive(Clone, Copy)]
struct Want<'a> {
    keys: &'a Option<Vec<shoal_protocol::StrBytes>>,
    synonyms: bool,
    docs: bool,
}

impl Want<'_> {
    /// Listed keys, or every key Kafka describes (internal ones only when asked by name).
    fn wants(&self, def: &ConfigDef) -> bool {
        match self.keys.as_ref().filter(|keys| !keys.is_empty()) {
            Some(keys) => keys.iter().any(|k| k.as_str() == def.name),
            None => !def.internal,
        }
    }
}

fn synonym(name: &str, value: Option<&str>, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(value.map(str_bytes))
        .with_source(source)
}

fn entry(
    def: &ConfigDef,
    value: Option<&str>,
    source: i8,
    read_only: bool,
    want: Want<'_>,
    synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    // Secrets are never described, whatever their value.
    let value = if def.sensitive() { None } else { value };
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(def.name))
        .with_value(value.map(str_bytes))
        .with_read_only(read_only)
        .with_is_sensitive(def.sensitive())
        .with_config_source(source)
        .with_config_type(def.kind.config_type() as i8)
        .with_synonyms(if want.synonyms { synonyms } else { Vec::new() })
        .with_documentation(want.docs.then(|| str_bytes(def.doc)))
}

/// The broker-level synonyms of `key`, highest precedence first: the dynamic cluster default,
/// the static value (server.properties, environment, flags), Kafka's default.
fn broker_synonyms(broker: &Broker, key: &str) -> Vec<DescribeConfigsSynonym> {
    let mut list = Vec::new();
    if let Some(v) = broker.dynamic_broker_overrides().get(key) {
        list.push(synonym(key, Some(v), SOURCE_DYNAMIC_DEFAULT_BROKER));
    }
    if broker.config.is_explicit(key) {
        list.push(synonym(
            key,
            broker.config.get_opt(key),
            SOURCE_STATIC_BROKER,
        ));
    }
    if let Some(def) = broker_config_def(key).filter(|d| d.default.is_some()) {
        list.push(synonym(key, def.default, SOURCE_DEFAULT));
    }
    list
}

/// Where a broker key's current value comes from.
fn broker_source(broker: &Broker, key: &str) -> i8 {
    if broker.dynamic_broker_overrides().get(key).is_some() {
        SOURCE_DYNAMIC_DEFAULT_BROKER
    } else if broker.config.is_explicit(key) {
        SOURCE_STATIC_BROKER
    } else {
        SOURCE_DEFAULT
    }
}

fn describe_topic(
    broker: &Broker,
    name: &str,
    want: Want<'_>,
) -> Result<Vec<DescribeConfigsResourceResult>, ErrorCode> {
    let topic = broker
        .topic(name)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let overrides = topic.overrides();
    let config = broker.current_config();
    Ok(TOPIC_CONFIGS
        .iter()
        .filter(|(def, _)| want.wants(def))
        .map(|(def, synonym_key)| {
            let mut list = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                list.push(synonym(def.name, Some(v), SOURCE_DYNAMIC_TOPIC));
            }
            if let Some(key) = synonym_key {
                list.extend(broker_synonyms(broker, key));
            }
            let (value, source) = match overrides.get(def.name) {
                Some(v) => (Some(v.to_string()), SOURCE_DYNAMIC_TOPIC),
                None => match synonym_key {
                    Some(key) if config.get_opt(key).is_some() => (
                        config.get_opt(key).map(str::to_string),
                        broker_source(broker, key),
                    ),
                    _ => (def.default.map(str::to_string), SOURCE_DEFAULT),
                },
            };
            entry(def, value.as_deref(), source, false, want, list)
        })
        .collect())
}

fn describe_broker(
    broker: &Broker,
    name: &str,
    want: Want<'_>,
) -> Result<Vec<DescribeConfigsResourceResult>, AdminError> {
    check_broker_name(broker, name)?;
    let config = broker.current_config();
    // The empty name is the cluster default: Kafka describes only the values set there.
    let dynamic = broker.dynamic_broker_overrides();
    let cluster_default = name.is_empty();
    Ok(BROKER_CONFIGS
        .iter()
        .filter(|def| want.wants(def))
        .filter(|def| !cluster_default || dynamic.get(def.name).is_some())
        .map(|def| {
            entry(
                def,
                config.get_opt(def.name),
                broker_source(broker, def.name),
                def.update == Update::ReadOnly,
                want,
                broker_synonyms(broker, def.name),
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
    want: Want<'_>,
) -> Result<Vec<DescribeConfigsResourceResult>, AdminError> {
    check_group_name(name)?;
    let overrides = broker.group_config_overrides(name);
    let config = broker.current_config();
    Ok(GROUP_CONFIGS
        .iter()
        .filter(|(def, _)| want.wants(def))
        .map(|(def, synonym_key)| {
            let mut list = Vec::new();
            let source = match overrides.get(def.name) {
                Some(v) => {
                    list.push(synonym(def.name, Some(v), SOURCE_GROUP));
                    SOURCE_GROUP
                }
                None => SOURCE_DEFAULT,
            };
            match synonym_key {
                Some(key) => list.extend(broker_synonyms(broker, key)),
                None => list.push(synonym(def.name, def.default, SOURCE_DEFAULT)),
            }
            let value = group_configs::effective(&config, &overrides, def.name);
            let value = (def.default.is_some() || !value.is_empty()).then_some(value);
            entry(def, value.as_deref(), source, false, want, list)
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
            let want = Want {
                keys: &r.configuration_keys,
                synonyms: request.include_synonyms,
                docs: request.include_documentation,
            };
            let configs = match r.resource_type {
                RESOURCE_TOPIC => describe_topic(broker, name, want)
                    .map_err(|code| AdminError::new(code, format!("Topic {name} not found"))),
                RESOURCE_BROKER => describe_broker(broker, name, want),
                RESOURCE_GROUP => describe_group(broker, name, want),
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

/// Whether `key` is a LIST (APPEND and SUBTRACT apply to lists only, as in Kafka).
fn is_list_key(key: &str) -> bool {
    topic_config_def(key)
        .map(|(d, _)| d)
        .or_else(|| broker_config_def(key))
        .or_else(|| group_config_def(key).map(|(d, _)| d))
        .is_some_and(|d| d.kind.config_type() == Type::List)
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
                        known(key)?;
                        if !is_list_key(key) {
                            return Err(invalid(format!(
                                "Config value append is not allowed for config key: {key}"
                            )));
                        }
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
        .ok_or_else(|| invalid(format!("Unknown topic config name: {key}")))
}

/// Kafka answers INVALID_REQUEST for a broker key it cannot change: read-only keys, per-broker
/// keys on the cluster default (empty resource name). Unknown keys are INVALID_CONFIG
/// (decision 0007: Kafka would store them).
fn check_broker_key(key: &str, cluster_default: bool) -> Result<&'static ConfigDef, AdminError> {
    let def = match split_listener_key(key) {
        // A listener's own TLS stores, which Kafka reloads (`listener.name.<l>.ssl.…`).
        Some((_, suffix)) if tls::RELOADABLE_KEYS.contains(&suffix) => broker_config_def(suffix),
        _ => broker_config_def(key),
    }
    .ok_or_else(|| invalid(format!("Unknown broker config name: {key}")))?;
    match def.update {
        Update::ReadOnly => Err(AdminError::new(
            ErrorCode::INVALID_REQUEST,
            format!("Cannot update these configs dynamically: [{key}]"),
        )),
        Update::PerBroker if cluster_default => Err(AdminError::new(
            ErrorCode::INVALID_REQUEST,
            format!(
                "Cannot update these configs at default cluster level, broker id must be specified: [{key}]"
            ),
        )),
        _ => Ok(def),
    }
}

/// A dynamic update of TLS store keys must give stores every TLS listener can load (and keep
/// its certificate's subject), or it is refused with INVALID_REQUEST and the stores in use
/// stay, as Kafka validates an update of its SSL factories before it applies it.
fn check_tls_update(broker: &Broker, updated: &ConfigMap) -> Result<(), AdminError> {
    let current = broker.current_config();
    let candidate = crate::node::with_overrides(&broker.config, updated);
    let refused = |message: String| AdminError::new(ErrorCode::INVALID_REQUEST, message);
    let listeners = parse_listeners(&current).map_err(|e| refused(e.to_string()))?;
    for listener in listeners.iter().filter(|l| l.protocol.uses_tls()) {
        tls::check_update(&current, &candidate, &listener.name).map_err(|e| {
            refused(format!(
                "Validation of dynamic config update of SSLFactory failed: {e:#}"
            ))
        })?;
    }
    Ok(())
}

fn validate_topic_key(key: &str, value: &str) -> Result<String, AdminError> {
    let (def, _) = topic_config_def(key)
        .ok_or_else(|| invalid(format!("Unknown topic config name: {key}")))?;
    def.validate(value).map_err(|e| invalid(e.to_string()))
}

fn validate_broker_key(
    key: &str,
    value: &str,
    cluster_default: bool,
) -> Result<String, AdminError> {
    check_broker_key(key, cluster_default)?
        .validate(value)
        .map_err(|e| AdminError::new(ErrorCode::INVALID_REQUEST, e.to_string()))
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
            check_topic_values(&broker.current_config(), &updated)
                .map_err(|e| invalid(e.to_string()))?;
            if validate_only {
                return Ok(());
            }
            broker.set_topic_configs(name, updated).await
        }
        RESOURCE_BROKER => {
            check_broker_name(broker, name)?;
            let cluster_default = name.is_empty();
            let updated = apply_change(
                broker.dynamic_broker_overrides(),
                &change,
                &|key| check_broker_key(key, cluster_default).map(|_| ()),
                &|key| broker.current_config().get_opt(key).map(str::to_string),
                &|key, value| validate_broker_key(key, value, cluster_default),
            )?;
            let value = |key: &str| match updated.get(key) {
                Some(v) => v.to_string(),
                None => broker.config.get(key).to_string(),
            };
            crate::conn_limits::check_together(
                &value("max.connections.per.ip"),
                &value("max.connections.per.ip.overrides"),
            )
            .map_err(|e| AdminError::new(ErrorCode::INVALID_REQUEST, e))?;
            check_tls_update(broker, &updated)?;
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
