//! Configs: describe (with synonyms and sources, as the broker answers), alter (the legacy
//! AlterConfigs, which replaces a resource's whole dynamic config) and incremental alter
//! (SET / DELETE / APPEND / SUBTRACT one key at a time), for topics, brokers and GROUP
//! resources (KIP-848's group configs, `share.*` among them).
//!
//! A broker's own resource (its id as the name) is asked of that broker, as Kafka's admin
//! does; every other resource (topics, groups, the cluster-wide broker default with an empty
//! name) of any broker, in one request.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{
    alter_configs_request, incremental_alter_configs_request, AlterConfigsRequest,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use shoal_protocol::ApiKey;

use super::{check, in_order, s, Admin, ItemResults, Mode};
use crate::error::Error;

/// Kafka's config resource types (`ConfigResource.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Topic,
    Broker,
    BrokerLogger,
    ClientMetrics,
    Group,
}

impl ResourceType {
    fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Broker => 4,
            ResourceType::BrokerLogger => 8,
            ResourceType::ClientMetrics => 16,
            ResourceType::Group => 32,
        }
    }
}

/// A resource whose configs are described or altered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConfigResource {
    pub kind: ResourceType,
    pub name: String,
}

impl ConfigResource {
    pub fn new(kind: ResourceType, name: impl Into<String>) -> ConfigResource {
        ConfigResource {
            kind,
            name: name.into(),
        }
    }

    pub fn topic(name: impl Into<String>) -> ConfigResource {
        ConfigResource::new(ResourceType::Topic, name)
    }

    /// One broker's configs.
    pub fn broker(node_id: i32) -> ConfigResource {
        ConfigResource::new(ResourceType::Broker, node_id.to_string())
    }

    /// The cluster-wide broker defaults (the empty name).
    pub fn broker_default() -> ConfigResource {
        ConfigResource::new(ResourceType::Broker, "")
    }

    pub fn group(group_id: impl Into<String>) -> ConfigResource {
        ConfigResource::new(ResourceType::Group, group_id)
    }

    /// The broker a request about this resource must go to: a broker's (or its loggers')
    /// own configs are that broker's to answer.
    fn node(&self) -> Option<i32> {
        match self.kind {
            ResourceType::Broker | ResourceType::BrokerLogger => self.name.parse().ok(),
            _ => None,
        }
    }
}

/// Where a config's value comes from (`DescribeConfigsResponse` `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigSource {
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
    DynamicBrokerLogger,
    ClientMetrics,
    DynamicGroup,
    /// A code this client does not know, as the broker sent it.
    Unknown(i8),
}

impl ConfigSource {
    pub fn from_code(code: i8) -> ConfigSource {
        match code {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            7 => ConfigSource::ClientMetrics,
            8 => ConfigSource::DynamicGroup,
            other => ConfigSource::Unknown(other),
        }
    }
}

/// One config of a described resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for a sensitive value, or one the broker does not show.
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    pub sensitive: bool,
    /// The values this one overrides, most specific first (the effective one first).
    pub synonyms: Vec<ConfigSynonym>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// One change of IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Set the key to the value.
    Set { name: String, value: String },
    /// Remove the dynamic value: the key falls back to its default.
    Delete { name: String },
    /// Add the value to a list config.
    Append { name: String, value: String },
    /// Remove the value from a list config.
    Subtract { name: String, value: String },
}

impl AlterConfigOp {
    fn to_request(&self) -> incremental_alter_configs_request::AlterableConfig {
        let (name, op, value) = match self {
            AlterConfigOp::Set { name, value } => (name, 0, Some(value)),
            AlterConfigOp::Delete { name } => (name, 1, None),
            AlterConfigOp::Append { name, value } => (name, 2, Some(value)),
            AlterConfigOp::Subtract { name, value } => (name, 3, Some(value)),
        };
        incremental_alter_configs_request::AlterableConfig::default()
            .with_name(s(name))
            .with_config_operation(op)
            .with_value(value.map(|v| s(v)))
    }
}

/// Resources by the broker that must answer for them (`None`: any broker).
fn by_node(resources: &[ConfigResource]) -> BTreeMap<Option<i32>, Vec<ConfigResource>> {
    let mut groups: BTreeMap<Option<i32>, Vec<ConfigResource>> = BTreeMap::new();
    for r in resources {
        groups.entry(r.node()).or_default().push(r.clone());
    }
    groups
}

fn key_of(kind: i8, name: &StrBytes) -> Option<ConfigResource> {
    let kind = [
        ResourceType::Topic,
        ResourceType::Broker,
        ResourceType::BrokerLogger,
        ResourceType::ClientMetrics,
        ResourceType::Group,
    ]
    .into_iter()
    .find(|t| t.code() == kind)?;
    Some(ConfigResource::new(kind, name.as_str()))
}

impl Admin {
    /// Sends one request per broker that must answer (see [`ConfigResource`]), and collects the
    /// results in the order asked.
    async fn per_node<R, T, B, M>(
        &self,
        api: ApiKey,
        resources: &[ConfigResource],
        build: B,
        map: M,
    ) -> Result<ItemResults<ConfigResource, T>, Error>
    where
        R: Request,
        B: Fn(&[ConfigResource]) -> R,
        M: Fn(R::Response) -> Vec<(ConfigResource, Result<T, Error>)>,
    {
        let mut answers = Vec::new();
        for (node, group) in by_node(resources) {
            let results = self
                .per_item(&group, |open| {
                    let request = build(&open);
                    let map = &map;
                    async move {
                        let response = match node {
                            Some(id) => self.cluster.send(id, &request).await?,
                            None => self.cluster.send_any(&request).await?,
                        };
                        Ok(in_order(api, &open, map(response)))
                    }
                })
                .await?;
            answers.extend(results);
        }
        Ok(in_order(api, resources, answers))
    }

    /// Describes resources' configs with their sources and synonyms (DescribeConfigs).
    ///
    /// # Errors
    /// When a request could not be made; per resource, UNKNOWN_TOPIC_OR_PARTITION,
    /// GROUP_ID_NOT_FOUND, INVALID_REQUEST...
    pub async fn describe_configs(
        &self,
        resources: &[ConfigResource],
    ) -> Result<ItemResults<ConfigResource, Vec<ConfigEntry>>, Error> {
        let build = |group: &[ConfigResource]| {
            DescribeConfigsRequest::default()
                .with_resources(
                    group
                        .iter()
                        .map(|r| {
                            DescribeConfigsResource::default()
                                .with_resource_type(r.kind.code())
                                .with_resource_name(s(&r.name))
                                .with_configuration_keys(None)
                        })
                        .collect(),
                )
                .with_include_synonyms(true)
        };
        self.per_node(ApiKey::DescribeConfigs, resources, build, configs_described)
            .await
    }

    /// Replaces resources' dynamic configs with the ones given (the legacy AlterConfigs: a
    /// key left out loses its dynamic value).
    ///
    /// # Errors
    /// When a request could not be made; per resource, INVALID_CONFIG and the like.
    pub async fn alter_configs(
        &self,
        changes: &[(ConfigResource, Vec<(String, String)>)],
        mode: Mode,
    ) -> Result<ItemResults<ConfigResource, ()>, Error> {
        let resources: Vec<ConfigResource> = changes.iter().map(|(r, _)| r.clone()).collect();
        let build = |group: &[ConfigResource]| {
            AlterConfigsRequest::default()
                .with_validate_only(mode.validate_only())
                .with_resources(
                    changes
                        .iter()
                        .filter(|(r, _)| group.contains(r))
                        .map(|(r, configs)| {
                            alter_configs_request::AlterConfigsResource::default()
                                .with_resource_type(r.kind.code())
                                .with_resource_name(s(&r.name))
                                .with_configs(
                                    configs
                                        .iter()
                                        .map(|(k, v)| {
                                            alter_configs_request::AlterableConfig::default()
                                                .with_name(s(k))
                                                .with_value(Some(s(v)))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        };
        let map = |response: kafka_protocol::messages::AlterConfigsResponse| {
            let answers = response.responses.into_iter().map(|r| {
                (
                    r.resource_type,
                    r.resource_name,
                    r.error_code,
                    r.error_message,
                )
            });
            resources_altered(ApiKey::AlterConfigs, answers)
        };
        self.per_node(ApiKey::AlterConfigs, &resources, build, map)
            .await
    }

    /// Changes resources' configs key by key (IncrementalAlterConfigs).
    ///
    /// # Errors
    /// When a request could not be made; per resource, INVALID_CONFIG and the like.
    pub async fn incremental_alter_configs(
        &self,
        changes: &[(ConfigResource, Vec<AlterConfigOp>)],
        mode: Mode,
    ) -> Result<ItemResults<ConfigResource, ()>, Error> {
        let resources: Vec<ConfigResource> = changes.iter().map(|(r, _)| r.clone()).collect();
        let build = |group: &[ConfigResource]| {
            IncrementalAlterConfigsRequest::default()
                .with_validate_only(mode.validate_only())
                .with_resources(
                    changes
                        .iter()
                        .filter(|(r, _)| group.contains(r))
                        .map(|(r, ops)| {
                            incremental_alter_configs_request::AlterConfigsResource::default()
                                .with_resource_type(r.kind.code())
                                .with_resource_name(s(&r.name))
                                .with_configs(ops.iter().map(AlterConfigOp::to_request).collect())
                        })
                        .collect(),
                )
        };
        let map = |response: kafka_protocol::messages::IncrementalAlterConfigsResponse| {
            let answers = response.responses.into_iter().map(|r| {
                (
                    r.resource_type,
                    r.resource_name,
                    r.error_code,
                    r.error_message,
                )
            });
            resources_altered(ApiKey::IncrementalAlterConfigs, answers)
        };
        self.per_node(ApiKey::IncrementalAlterConfigs, &resources, build, map)
            .await
    }
}

/// The per-resource results of AlterConfigs and IncrementalAlterConfigs, from each answer's
/// (resource type, resource name, error code, error message).
fn resources_altered(
    api: ApiKey,
    answers: impl Iterator<Item = (i8, StrBytes, i16, Option<StrBytes>)>,
) -> Vec<(ConfigResource, Result<(), Error>)> {
    answers
        .filter_map(|(kind, name, code, message)| {
            Some((key_of(kind, &name)?, check(api, code, message.as_ref())))
        })
        .collect()
}

fn configs_described(
    response: DescribeConfigsResponse,
) -> Vec<(ConfigResource, Result<Vec<ConfigEntry>, Error>)> {
    let text = |v: Option<StrBytes>| v.map(|v| v.to_string());
    response
        .results
        .into_iter()
        .filter_map(|r| {
            let key = key_of(r.resource_type, &r.resource_name)?;
            let result = check(
                ApiKey::DescribeConfigs,
                r.error_code,
                r.error_message.as_ref(),
            )
            .map(|()| {
                r.configs
                    .into_iter()
                    .map(|c| ConfigEntry {
                        name: c.name.to_string(),
                        value: text(c.value),
                        source: ConfigSource::from_code(c.config_source),
                        read_only: c.read_only,
                        sensitive: c.is_sensitive,
                        synonyms: c
                            .synonyms
                            .into_iter()
                            .map(|y| ConfigSynonym {
                                name: y.name.to_string(),
                                value: text(y.value),
                                source: ConfigSource::from_code(y.source),
                            })
                            .collect(),
                    })
                    .collect()
            });
            Some((key, result))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
    };
    use shoal_protocol::ErrorCode;

    #[test]
    fn broker_resources_go_to_their_broker_and_the_rest_to_any() {
        let resources = [
            ConfigResource::topic("t"),
            ConfigResource::broker(2),
            ConfigResource::group("g"),
            ConfigResource::broker_default(),
        ];
        let groups = by_node(&resources);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[&Some(2)], vec![ConfigResource::broker(2)]);
        assert_eq!(groups[&None].len(), 3);
    }

    #[test]
    fn described_configs_keep_sources_synonyms_and_errors() {
        let response = DescribeConfigsResponse::default().with_results(vec![
            DescribeConfigsResult::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_configs(vec![DescribeConfigsResourceResult::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("1000")))
                    .with_config_source(1)
                    .with_synonyms(vec![
                        DescribeConfigsSynonym::default()
                            .with_name(s("retention.ms"))
                            .with_value(Some(s("1000")))
                            .with_source(1),
                        DescribeConfigsSynonym::default()
                            .with_name(s("log.retention.hours"))
                            .with_value(Some(s("168")))
                            .with_source(5),
                    ])]),
            DescribeConfigsResult::default()
                .with_resource_type(32)
                .with_resource_name(s("g"))
                .with_error_code(ErrorCode::GROUP_ID_NOT_FOUND.0)
                .with_error_message(Some(s("no such group"))),
            // An unknown resource type is not one we asked about.
            DescribeConfigsResult::default()
                .with_resource_type(99)
                .with_resource_name(s("x")),
        ]);
        let asked = [
            ConfigResource::topic("t"),
            ConfigResource::group("g"),
            ConfigResource::broker(1),
        ];
        let results = in_order(ApiKey::DescribeConfigs, &asked, configs_described(response));
        let entries = results[0].1.as_ref().unwrap();
        assert_eq!(entries[0].source, ConfigSource::DynamicTopic);
        assert_eq!(entries[0].synonyms[1].source, ConfigSource::Default);
        assert_eq!(entries[0].synonyms[1].value.as_deref(), Some("168"));
        let e = results[1].1.as_ref().unwrap_err();
        assert_eq!(e.code(), ErrorCode::GROUP_ID_NOT_FOUND);
        assert!(e.to_string().contains("no such group"), "{e}");
        assert!(matches!(
            results[2].1,
            Err(Error::IncompleteResponse { .. })
        ));
    }

    #[test]
    fn incremental_ops_carry_kafka_s_operation_codes() {
        let op = |o: AlterConfigOp| {
            let r = o.to_request();
            (r.config_operation, r.value.map(|v| v.to_string()))
        };
        let n = || "cleanup.policy".to_string();
        assert_eq!(
            op(AlterConfigOp::Set {
                name: n(),
                value: "compact".into()
            }),
            (0, Some("compact".into()))
        );
        assert_eq!(op(AlterConfigOp::Delete { name: n() }), (1, None));
        assert_eq!(
            op(AlterConfigOp::Append {
                name: n(),
                value: "delete".into()
            })
            .0,
            2
        );
        assert_eq!(
            op(AlterConfigOp::Subtract {
                name: n(),
                value: "delete".into()
            })
            .0,
            3
        );
    }
}
