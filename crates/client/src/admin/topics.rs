//! Topics: create (partitions, replication factor, configs; validate only), delete, list,
//! describe (topic ids, partitions, leaders, replicas), create partitions, and the offsets of
//! a topic's partitions (ListOffsets, which resetting a group needs).
//!
//! CreateTopics, DeleteTopics and CreatePartitions go to the controller (in KRaft, a broker that
//! forwards); Metadata to any broker, read fresh rather than from the cache, whose topics are the
//! ones the client works with; ListOffsets to each partition's leader (the same path as the
//! transactions' DescribeProducers), sent again to a new leader when the partition moved.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::Request;
use shoal_protocol::uuid::Uuid;
use shoal_protocol::ApiKey;

use super::{check, in_order, s, Admin, ItemResults, Mode};
use crate::error::Error;

/// A topic to create. Partitions and replication factor default to the broker's
/// (`num.partitions`, `default.replication.factor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    name: String,
    partitions: Option<i32>,
    replication_factor: Option<i16>,
    configs: BTreeMap<String, String>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions: None,
            replication_factor: None,
            configs: BTreeMap::new(),
        }
    }

    pub fn partitions(mut self, partitions: i32) -> NewTopic {
        self.partitions = Some(partitions);
        self
    }

    pub fn replication_factor(mut self, factor: i16) -> NewTopic {
        self.replication_factor = Some(factor);
        self
    }

    /// A topic config with Kafka's key (`cleanup.policy`, `retention.ms`...).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> NewTopic {
        self.configs.insert(key.into(), value.into());
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn to_request(&self) -> CreatableTopic {
        CreatableTopic::default()
            .with_name(TopicName(s(&self.name)))
            .with_num_partitions(self.partitions.unwrap_or(-1))
            .with_replication_factor(self.replication_factor.unwrap_or(-1))
            .with_configs(
                self.configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )
    }
}

/// What the broker created (or, validating only, would create).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    /// Nil from a broker older than CreateTopics v7.
    pub topic_id: Uuid,
    /// -1 from a broker older than CreateTopics v5.
    pub partitions: i32,
    pub replication_factor: i16,
}

/// A topic in [`Admin::list_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicListing {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
}

/// A topic in [`Admin::describe_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
    /// In partition order.
    pub partitions: Vec<PartitionDescription>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    pub partition: i32,
    /// `None` while the partition has no leader.
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
}

/// Which offset [`Admin::list_offsets`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (the high watermark).
    Latest,
    /// The first offset whose timestamp is at or after this one (ms since the epoch).
    Timestamp(i64),
}

impl OffsetSpec {
    fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(ms) => ms,
        }
    }
}

/// Whether [`Admin::list_topics`] includes the internal topics (`__consumer_offsets`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Internal {
    #[default]
    Exclude,
    Include,
}

fn names<S: AsRef<str>>(topics: &[S]) -> Vec<String> {
    topics.iter().map(|t| t.as_ref().to_owned()).collect()
}

impl Admin {
    /// Creates topics (CreateTopics), one result per topic.
    ///
    /// # Errors
    /// When the request could not be made; per topic, the broker's error
    /// (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG...).
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        mode: Mode,
    ) -> Result<ItemResults<String, CreatedTopic>, Error> {
        let keys: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
        self.per_item(&keys, |open| async move {
            let request = CreateTopicsRequest::default()
                .with_topics(
                    topics
                        .iter()
                        .filter(|t| open.contains(&t.name))
                        .map(NewTopic::to_request)
                        .collect(),
                )
                .with_timeout_ms(self.timeout_ms())
                .with_validate_only(mode.validate_only());
            let (_, response) = self.controller_once(|_| request.clone()).await?;
            Ok(created(&open, response))
        })
        .await
    }

    /// Deletes topics by name (DeleteTopics), one result per topic.
    ///
    /// # Errors
    /// When the request could not be made; per topic, UNKNOWN_TOPIC_OR_PARTITION and the like.
    pub async fn delete_topics<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<ItemResults<String, ()>, Error> {
        let keys = names(topics);
        self.per_item(&keys, |open| async move {
            let (_, response) = self
                .controller_once(|version| {
                    // v6 names topics in `topics` (by name or id), earlier ones in `topic_names`.
                    let request = DeleteTopicsRequest::default().with_timeout_ms(self.timeout_ms());
                    if version >= 6 {
                        request.with_topics(
                            open.iter()
                                .map(|t| {
                                    DeleteTopicState::default().with_name(Some(TopicName(s(t))))
                                })
                                .collect(),
                        )
                    } else {
                        request.with_topic_names(open.iter().map(|t| TopicName(s(t))).collect())
                    }
                })
                .await?;
            Ok(deleted(&open, response))
        })
        .await
    }

    /// Every topic's name and id (Metadata for all topics), in name order.
    ///
    /// # Errors
    /// When no broker answered.
    pub async fn list_topics(&self, internal: Internal) -> Result<Vec<TopicListing>, Error> {
        let request = MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false);
        let response = self
            .cluster
            .retry(|| self.cluster.send_any(&request))
            .await?;
        let mut listed: Vec<TopicListing> = response
            .topics
            .into_iter()
            .filter(|t| t.error_code == 0 && (internal == Internal::Include || !t.is_internal))
            .filter_map(|t| {
                Some(TopicListing {
                    name: t.name?.0.to_string(),
                    topic_id: t.topic_id,
                    is_internal: t.is_internal,
                })
            })
            .collect();
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        listed.dedup_by(|a, b| a.name == b.name);
        Ok(listed)
    }

    /// Describes topics (Metadata, never creating them): ids, partitions, leaders, replicas.
    ///
    /// # Errors
    /// When no broker answered; per topic, UNKNOWN_TOPIC_OR_PARTITION,
    /// TOPIC_AUTHORIZATION_FAILED...
    pub async fn describe_topics<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<ItemResults<String, TopicDescription>, Error> {
        let keys = names(topics);
        let request = MetadataRequest::default()
            .with_topics(Some(
                keys.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(s(t)))))
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false);
        let response = self
            .cluster
            .retry(|| self.cluster.send_any(&request))
            .await?;
        Ok(described(&keys, response))
    }

    /// Raises topics' partition counts to the totals given (CreatePartitions).
    ///
    /// # Errors
    /// When the request could not be made; per topic, INVALID_PARTITIONS and the like.
    pub async fn create_partitions<S: AsRef<str>>(
        &self,
        totals: &[(S, i32)],
        mode: Mode,
    ) -> Result<ItemResults<String, ()>, Error> {
        let keys: Vec<String> = totals.iter().map(|(t, _)| t.as_ref().to_owned()).collect();
        self.per_item(&keys, |open| async move {
            let request = CreatePartitionsRequest::default()
                .with_topics(
                    totals
                        .iter()
                        .filter(|(t, _)| open.iter().any(|o| o == t.as_ref()))
                        .map(|(t, count)| {
                            CreatePartitionsTopic::default()
                                .with_name(TopicName(s(t.as_ref())))
                                .with_count(*count)
                                // Null: the controller places the new partitions. An empty
                                // list would assign none (Kafka: INVALID_REPLICA_ASSIGNMENT).
                                .with_assignments(None)
                        })
                        .collect(),
                )
                .with_timeout_ms(self.timeout_ms())
                .with_validate_only(mode.validate_only());
            let (_, response) = self.controller_once(|_| request.clone()).await?;
            Ok(partitions_created(&open, response))
        })
        .await
    }

    /// The offset `spec` names of each of `partitions` of `topic` (ListOffsets to each
    /// partition's leader), one result per partition.
    ///
    /// # Errors
    /// The topic's metadata error (UNKNOWN_TOPIC_OR_PARTITION...), or a leader that could not
    /// be reached; per partition, the leader's error.
    pub async fn list_offsets(
        &self,
        topic: &str,
        partitions: &[i32],
        spec: OffsetSpec,
    ) -> Result<ItemResults<i32, i64>, Error> {
        let build = |asked: &[i32]| {
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(
                        asked
                            .iter()
                            .map(|p| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(*p)
                                    .with_current_leader_epoch(-1)
                                    .with_timestamp(spec.timestamp())
                            })
                            .collect(),
                    )])
        };
        self.per_leader(ApiKey::ListOffsets, topic, partitions, build, |r| {
            offsets_listed(topic, r)
        })
        .await
    }
}

impl Admin {
    /// Sends one request per leader of `partitions` of `topic` (`build` makes it for the
    /// partitions that leader has) and maps each answer with `map`. A partition whose leader
    /// moved (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE) is sent again after metadata is
    /// refreshed, as Kafka's admin client does for requests to partition leaders.
    ///
    /// # Errors
    /// The topic's metadata error (UNKNOWN_TOPIC_OR_PARTITION after retries), or a leader
    /// that could not be reached.
    pub(crate) async fn per_leader<R, T, B, M>(
        &self,
        api: ApiKey,
        topic: &str,
        partitions: &[i32],
        build: B,
        map: M,
    ) -> Result<ItemResults<i32, T>, Error>
    where
        R: Request,
        B: Fn(&[i32]) -> R,
        M: Fn(R::Response) -> Vec<(i32, Result<T, Error>)>,
    {
        let (build, map) = (&build, &map);
        self.per_item(partitions, move |open| async move {
            let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
            for p in &open {
                let leader = self.cluster.try_leader(topic, *p).await?;
                by_leader.entry(leader).or_default().push(*p);
            }
            let mut answers = Vec::new();
            for (leader, asked) in by_leader {
                let response = self.cluster.send(leader, &build(&asked)).await?;
                answers.extend(map(response));
            }
            Ok(in_order(api, &open, answers))
        })
        .await
    }
}

fn created(keys: &[String], response: CreateTopicsResponse) -> ItemResults<String, CreatedTopic> {
    let answers = response.topics.into_iter().map(|t| {
        let result =
            check(ApiKey::CreateTopics, t.error_code, t.error_message.as_ref()).map(|()| {
                CreatedTopic {
                    topic_id: t.topic_id,
                    partitions: t.num_partitions,
                    replication_factor: t.replication_factor,
                }
            });
        (t.name.0.to_string(), result)
    });
    in_order(ApiKey::CreateTopics, keys, answers)
}

fn deleted(keys: &[String], response: DeleteTopicsResponse) -> ItemResults<String, ()> {
    let answers = response.responses.into_iter().filter_map(|t| {
        let result = check(ApiKey::DeleteTopics, t.error_code, t.error_message.as_ref());
        Some((t.name?.0.to_string(), result))
    });
    in_order(ApiKey::DeleteTopics, keys, answers)
}

fn partitions_created(
    keys: &[String],
    response: CreatePartitionsResponse,
) -> ItemResults<String, ()> {
    let answers = response.results.into_iter().map(|t| {
        let result = check(
            ApiKey::CreatePartitions,
            t.error_code,
            t.error_message.as_ref(),
        );
        (t.name.0.to_string(), result)
    });
    in_order(ApiKey::CreatePartitions, keys, answers)
}

fn described(keys: &[String], response: MetadataResponse) -> ItemResults<String, TopicDescription> {
    let nodes = |ids: Vec<BrokerId>| ids.into_iter().map(|b| b.0).collect::<Vec<i32>>();
    let answers = response.topics.into_iter().filter_map(|t| {
        let name = t.name?.0.to_string();
        let result = check(ApiKey::Metadata, t.error_code, None).map(|()| {
            let mut partitions: Vec<PartitionDescription> = t
                .partitions
                .into_iter()
                .map(|p| PartitionDescription {
                    partition: p.partition_index,
                    leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
                    leader_epoch: p.leader_epoch,
                    replicas: nodes(p.replica_nodes),
                    isr: nodes(p.isr_nodes),
                    offline_replicas: nodes(p.offline_replicas),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicDescription {
                name: name.clone(),
                topic_id: t.topic_id,
                is_internal: t.is_internal,
                partitions,
            }
        });
        Some((name, result))
    });
    in_order(ApiKey::Metadata, keys, answers)
}

fn offsets_listed(topic: &str, response: ListOffsetsResponse) -> Vec<(i32, Result<i64, Error>)> {
    response
        .topics
        .into_iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions)
        .map(|p| {
            let result = check(ApiKey::ListOffsets, p.error_code, None).map(|()| p.offset);
            (p.partition_index, result)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponsePartition, MetadataResponseTopic,
    };
    use shoal_protocol::ErrorCode;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn create_topics_maps_each_topic_and_a_missing_one() {
        let id = Uuid::from_u128(7);
        let response = CreateTopicsResponse::default().with_topics(vec![
            CreatableTopicResult::default()
                .with_name(TopicName(s("b")))
                .with_error_code(ErrorCode::TOPIC_ALREADY_EXISTS.0)
                .with_error_message(Some(s("Topic 'b' already exists."))),
            CreatableTopicResult::default()
                .with_name(TopicName(s("a")))
                .with_topic_id(id)
                .with_num_partitions(3)
                .with_replication_factor(1),
        ]);
        let results = created(&keys(&["a", "b", "c"]), response);
        assert_eq!(results[0].0, "a");
        assert_eq!(
            results[0].1.as_ref().unwrap(),
            &CreatedTopic {
                topic_id: id,
                partitions: 3,
                replication_factor: 1
            }
        );
        match &results[1].1 {
            Err(Error::Kafka { code, api, message }) => {
                assert_eq!(*code, ErrorCode::TOPIC_ALREADY_EXISTS);
                assert_eq!(*api, ApiKey::CreateTopics);
                assert_eq!(message.as_deref(), Some("Topic 'b' already exists."));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            results[2].1,
            Err(Error::IncompleteResponse { .. })
        ));
    }

    #[test]
    fn describe_sorts_partitions_and_reads_no_leader_as_none() {
        let response = MetadataResponse::default().with_topics(vec![
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(s("t"))))
                .with_topic_id(Uuid::from_u128(1))
                .with_partitions(vec![
                    MetadataResponsePartition::default()
                        .with_partition_index(1)
                        .with_leader_id(BrokerId(-1))
                        .with_replica_nodes(vec![BrokerId(1)]),
                    MetadataResponsePartition::default()
                        .with_partition_index(0)
                        .with_leader_id(BrokerId(1))
                        .with_isr_nodes(vec![BrokerId(1)]),
                ]),
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(s("gone"))))
                .with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0),
            // A nameless topic (an id-only answer) is not one we asked about.
            MetadataResponseTopic::default().with_name(None),
        ]);
        let results = described(&keys(&["t", "gone"]), response);
        let t = results[0].1.as_ref().unwrap();
        assert_eq!(t.partitions[0].partition, 0);
        assert_eq!(t.partitions[0].leader, Some(1));
        assert_eq!(t.partitions[0].isr, vec![1]);
        assert_eq!(t.partitions[1].leader, None);
        assert_eq!(t.partitions[1].replicas, vec![1]);
        assert_eq!(
            results[1].1.as_ref().unwrap_err().code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
    }

    #[test]
    fn new_topic_defaults_to_the_broker_s_counts() {
        let t = NewTopic::new("t")
            .config("cleanup.policy", "compact")
            .to_request();
        assert_eq!((t.num_partitions, t.replication_factor), (-1, -1));
        assert_eq!(t.configs[0].name.as_str(), "cleanup.policy");
        let t = NewTopic::new("t")
            .partitions(3)
            .replication_factor(1)
            .to_request();
        assert_eq!((t.num_partitions, t.replication_factor), (3, 1));
    }
}
