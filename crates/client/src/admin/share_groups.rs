//! Share groups (KIP-932): list (ListGroups with a type filter, from every broker), describe
//! (ShareGroupDescribe), the share-partition start offsets (describe, alter and delete:
//! DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets), and deleting
//! groups (DeleteGroups, any group type).
//!
//! Every request about a group goes to its coordinator, one request per group, retried while
//! the coordinator loads or moves (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR).

use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteGroupsRequest,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, GroupId, ListGroupsRequest,
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use shoal_protocol::share::describe_share_group_offsets::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic, DescribeShareGroupOffsetsResponse,
};
use shoal_protocol::uuid::Uuid;
use shoal_protocol::ApiKey;

use super::{check, in_order, s, Admin, ItemResults};
use crate::cluster::CoordinatorType;
use crate::error::Error;

/// A group in [`Admin::list_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// `Stable`, `Empty`, `Dead`... as the coordinator names it.
    pub state: String,
    /// `share`, `consumer`, `classic`, `streams` (ListGroups v5+; empty from older brokers).
    pub group_type: String,
    pub protocol_type: String,
}

/// A share group in [`Admin::describe_share_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    pub group_id: String,
    pub state: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ShareMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub rack: Option<String>,
    pub subscribed_topics: Vec<String>,
    /// Topic name, topic id, partitions, in the coordinator's order.
    pub assignment: Vec<(String, Uuid, Vec<i32>)>,
}

/// A share partition's state in [`Admin::describe_share_group_offsets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharePartitionOffset {
    pub topic_id: Uuid,
    /// The share-partition start offset (-1: no state yet).
    pub start_offset: i64,
    pub leader_epoch: i32,
    /// Records not yet delivered and acknowledged (DescribeShareGroupOffsets v1; -1 when
    /// unknown).
    pub lag: i64,
}

/// A topic-partition as a result key.
pub type TopicPartition = (String, i32);

impl Admin {
    /// The groups of the given types on every broker (ListGroups v5's type filter; empty for
    /// every type), broker by broker in the order each answered (a group is listed by its
    /// coordinator only).
    ///
    /// # Errors
    /// A broker that could not be asked, or answered with an error; UNSUPPORTED_VERSION
    /// (encoding) with a type filter for a broker older than ListGroups v5.
    pub async fn list_groups<S: AsRef<str>>(
        &self,
        types: &[S],
    ) -> Result<Vec<GroupListing>, Error> {
        let request = ListGroupsRequest::default()
            .with_types_filter(types.iter().map(|t| s(t.as_ref())).collect());
        let answers = self
            .on_every_broker(ApiKey::ListGroups, &request, |r| r.error_code)
            .await?;
        let listed = answers
            .into_iter()
            .flat_map(|r| r.groups)
            .map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                state: g.group_state.to_string(),
                group_type: g.group_type.to_string(),
                protocol_type: g.protocol_type.to_string(),
            })
            .collect();
        Ok(listed)
    }

    /// [`Admin::list_groups`] of type `share`.
    ///
    /// # Errors
    /// As [`Admin::list_groups`].
    pub async fn list_share_groups(&self) -> Result<Vec<GroupListing>, Error> {
        self.list_groups(&["share"]).await
    }

    /// Describes share groups: state, epochs, members and their assignments.
    ///
    /// # Errors
    /// Per group: GROUP_ID_NOT_FOUND, a group of another type (INVALID_GROUP_ID in Kafka),
    /// GROUP_AUTHORIZATION_FAILED, or the coordinator not found in time.
    pub async fn describe_share_groups<S: AsRef<str>>(
        &self,
        groups: &[S],
    ) -> Result<ItemResults<String, ShareGroupDescription>, Error> {
        let mut results = Vec::new();
        for group in groups {
            let group = group.as_ref();
            let request =
                ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]);
            let result = self
                .coordinator_call(CoordinatorType::Group, group, &request, |r| {
                    share_group_described(group, r)
                })
                .await;
            results.push((group.to_owned(), result));
        }
        Ok(results)
    }

    /// The start offset, leader epoch and lag of a share group's share partitions: of the
    /// topics and partitions given, or (`None`) of every one the group has state for.
    ///
    /// # Errors
    /// The group's error (GROUP_ID_NOT_FOUND...); per partition, the share coordinator's.
    pub async fn describe_share_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<ItemResults<TopicPartition, SharePartitionOffset>, Error> {
        let topics = partitions.map(|asked| {
            let mut topics: Vec<DescribeShareGroupOffsetsRequestTopic> = Vec::new();
            for (topic, partition) in asked {
                match topics.iter_mut().find(|t| t.topic_name.0.as_str() == topic) {
                    Some(t) => t.partitions.push(*partition),
                    None => topics.push(DescribeShareGroupOffsetsRequestTopic {
                        topic_name: TopicName(s(topic)),
                        partitions: vec![*partition],
                        ..Default::default()
                    }),
                }
            }
            topics
        });
        let request = DescribeShareGroupOffsetsRequest {
            groups: vec![DescribeShareGroupOffsetsRequestGroup {
                group_id: GroupId(s(group)),
                topics,
                ..Default::default()
            }],
            ..Default::default()
        };
        let answers = self
            .coordinator_call(CoordinatorType::Group, group, &request, |r| {
                share_offsets_described(group, r)
            })
            .await?;
        Ok(match partitions {
            Some(asked) => in_order(ApiKey::DescribeShareGroupOffsets, asked, answers),
            None => answers,
        })
    }

    /// Sets an empty share group's start offsets.
    ///
    /// # Errors
    /// The group's error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...); per partition, the
    /// coordinator's.
    pub async fn alter_share_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<ItemResults<TopicPartition, ()>, Error> {
        let mut topics: Vec<AlterShareGroupOffsetsRequestTopic> = Vec::new();
        for ((topic, partition), offset) in offsets {
            let p = AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(*partition)
                .with_start_offset(*offset);
            match topics.iter_mut().find(|t| t.topic_name.0.as_str() == topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(
                    AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(s(topic)))
                        .with_partitions(vec![p]),
                ),
            }
        }
        let request = AlterShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(topics);
        let keys: Vec<TopicPartition> = offsets.iter().map(|(tp, _)| tp.clone()).collect();
        self.coordinator_call(CoordinatorType::Group, group, &request, |r| {
            share_offsets_altered(&keys, r)
        })
        .await
    }

    /// Deletes a share group's state for whole topics.
    ///
    /// # Errors
    /// The group's error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...); per topic, the
    /// coordinator's.
    pub async fn delete_share_group_offsets<S: AsRef<str>>(
        &self,
        group: &str,
        topics: &[S],
    ) -> Result<ItemResults<String, ()>, Error> {
        let keys: Vec<String> = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        let request = DeleteShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(
                keys.iter()
                    .map(|t| {
                        DeleteShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(TopicName(s(t)))
                    })
                    .collect(),
            );
        self.coordinator_call(CoordinatorType::Group, group, &request, |r| {
            share_offsets_deleted(&keys, r)
        })
        .await
    }

    /// Deletes empty groups (any type), one DeleteGroups per group to its coordinator.
    ///
    /// # Errors
    /// Per group: NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_AUTHORIZATION_FAILED...
    pub async fn delete_groups<S: AsRef<str>>(
        &self,
        groups: &[S],
    ) -> Result<ItemResults<String, ()>, Error> {
        let mut results = Vec::new();
        for group in groups {
            let group = group.as_ref();
            let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
            let result = self
                .coordinator_call(CoordinatorType::Group, group, &request, |r| {
                    let answers = r.results.into_iter().map(|g| {
                        let result = check(ApiKey::DeleteGroups, g.error_code, None);
                        (g.group_id.0.to_string(), result)
                    });
                    let mut one = in_order(ApiKey::DeleteGroups, &[group.to_owned()], answers);
                    one.pop().map_or(Ok(()), |(_, r)| r)
                })
                .await;
            results.push((group.to_owned(), result));
        }
        Ok(results)
    }
}

fn missing(api: ApiKey, group: &str) -> Error {
    Error::IncompleteResponse {
        api,
        item: format!("group {group}"),
    }
}

fn share_group_described(
    group: &str,
    response: ShareGroupDescribeResponse,
) -> Result<ShareGroupDescription, Error> {
    let g = response
        .groups
        .into_iter()
        .find(|g| g.group_id.0.as_str() == group)
        .ok_or_else(|| missing(ApiKey::ShareGroupDescribe, group))?;
    check(
        ApiKey::ShareGroupDescribe,
        g.error_code,
        g.error_message.as_ref(),
    )?;
    Ok(ShareGroupDescription {
        group_id: group.to_owned(),
        state: g.group_state.to_string(),
        epoch: g.group_epoch,
        assignment_epoch: g.assignment_epoch,
        assignor: g.assignor_name.to_string(),
        members: g
            .members
            .into_iter()
            .map(|m| ShareMember {
                member_id: m.member_id.to_string(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                rack: m.rack_id.map(|r| r.to_string()),
                subscribed_topics: m
                    .subscribed_topic_names
                    .into_iter()
                    .map(|t| t.0.to_string())
                    .collect(),
                assignment: m
                    .assignment
                    .topic_partitions
                    .into_iter()
                    .map(|t| (t.topic_name.0.to_string(), t.topic_id, t.partitions))
                    .collect(),
            })
            .collect(),
    })
}

fn share_offsets_described(
    group: &str,
    response: DescribeShareGroupOffsetsResponse,
) -> Result<ItemResults<TopicPartition, SharePartitionOffset>, Error> {
    let g = response
        .groups
        .into_iter()
        .find(|g| g.group_id.0.as_str() == group)
        .ok_or_else(|| missing(ApiKey::DescribeShareGroupOffsets, group))?;
    check(
        ApiKey::DescribeShareGroupOffsets,
        g.error_code,
        g.error_message.as_ref(),
    )?;
    let mut out = Vec::new();
    for t in g.topics {
        for p in t.partitions {
            let result = check(
                ApiKey::DescribeShareGroupOffsets,
                p.error_code,
                p.error_message.as_ref(),
            )
            .map(|()| SharePartitionOffset {
                topic_id: t.topic_id,
                start_offset: p.start_offset,
                leader_epoch: p.leader_epoch,
                lag: p.lag,
            });
            out.push(((t.topic_name.0.to_string(), p.partition_index), result));
        }
    }
    Ok(out)
}

fn share_offsets_altered(
    keys: &[TopicPartition],
    response: AlterShareGroupOffsetsResponse,
) -> Result<ItemResults<TopicPartition, ()>, Error> {
    check(
        ApiKey::AlterShareGroupOffsets,
        response.error_code,
        response.error_message.as_ref(),
    )?;
    let answers = response.responses.into_iter().flat_map(|t| {
        let topic = t.topic_name.0.to_string();
        t.partitions.into_iter().map(move |p| {
            let result = check(
                ApiKey::AlterShareGroupOffsets,
                p.error_code,
                p.error_message.as_ref(),
            );
            ((topic.clone(), p.partition_index), result)
        })
    });
    Ok(in_order(ApiKey::AlterShareGroupOffsets, keys, answers))
}

fn share_offsets_deleted(
    keys: &[String],
    response: DeleteShareGroupOffsetsResponse,
) -> Result<ItemResults<String, ()>, Error> {
    check(
        ApiKey::DeleteShareGroupOffsets,
        response.error_code,
        response.error_message.as_ref(),
    )?;
    let answers = response.responses.into_iter().map(|t| {
        let result = check(
            ApiKey::DeleteShareGroupOffsets,
            t.error_code,
            t.error_message.as_ref(),
        );
        (t.topic_name.0.to_string(), result)
    });
    Ok(in_order(ApiKey::DeleteShareGroupOffsets, keys, answers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::alter_share_group_offsets_response::{
        AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
    };
    use kafka_protocol::messages::share_group_describe_response::DescribedGroup;
    use shoal_protocol::ErrorCode;

    #[test]
    fn a_described_group_missing_from_the_answer_is_an_error() {
        let response = ShareGroupDescribeResponse::default().with_groups(vec![
            DescribedGroup::default().with_group_id(GroupId(s("other"))),
        ]);
        let e = share_group_described("g", response).unwrap_err();
        assert!(matches!(
            e,
            Error::IncompleteResponse {
                api: ApiKey::ShareGroupDescribe,
                ..
            }
        ));
        let response =
            ShareGroupDescribeResponse::default().with_groups(vec![DescribedGroup::default()
                .with_group_id(GroupId(s("g")))
                .with_error_code(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.0)]);
        let e = share_group_described("g", response).unwrap_err();
        assert!(e.is_retriable(), "the coordinator call retries it: {e}");
    }

    #[test]
    fn altered_offsets_fail_the_group_or_one_partition() {
        let keys = vec![("t".to_string(), 0), ("t".to_string(), 1)];
        let response =
            AlterShareGroupOffsetsResponse::default().with_error_code(ErrorCode::NON_EMPTY_GROUP.0);
        let e = share_offsets_altered(&keys, response).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NON_EMPTY_GROUP);
        let response = AlterShareGroupOffsetsResponse::default().with_responses(vec![
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(s("t")))
                .with_partitions(vec![AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(1)
                    .with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0)]),
        ]);
        let results = share_offsets_altered(&keys, response).unwrap();
        assert!(matches!(
            results[0].1,
            Err(Error::IncompleteResponse { .. })
        ));
        assert_eq!(
            results[1].1.as_ref().unwrap_err().code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
    }
}
