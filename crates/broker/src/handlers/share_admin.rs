//! The admin share-offset APIs (KIP-932): DescribeShareGroupOffsets (v0-1, with lag),
//! AlterShareGroupOffsets and DeleteShareGroupOffsets.
//!
//! A share group's "offset" on a partition is its share-partition start offset (SPSO) in
//! `__share_group_state`. Lag (v1) is the records at or past the SPSO that are not yet
//! acknowledged or archived: high watermark − SPSO − delivery-complete records, as KIP-1226
//! defines it; -1 when unknown. Altering and deleting need an empty group (NON_EMPTY_GROUP
//! otherwise), as in Kafka; altering restarts each named share partition at the given offset
//! with a new state epoch, deleting removes its state (the next consumer starts from
//! `share.auto.offset.reset`).

use std::sync::Arc;

use shoal_core::share_coordinator::{SharePartitionKey, TopicId};
use shoal_protocol::messages::{
    alter_share_group_offsets_response as alter, delete_share_group_offsets_response as delete,
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, TopicName,
};
use shoal_protocol::share::describe_share_group_offsets as describe;
use shoal_protocol::ErrorCode;
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::leadership::CoordinatorKind;
use shoal_core::group_coordinator::{ShareCall, ShareReply};

/// Whether `group_id` is a share group, and whether it has members.
async fn group_members(broker: &Broker, group_id: &str) -> Result<usize, ErrorCode> {
    broker.coordinates(CoordinatorKind::Group, group_id)?;
    match broker
        .groups
        .call_share(ShareCall::Describe(vec![group_id.to_string()]))
        .await
    {
        Ok(ShareReply::Describe(groups)) => match groups.first() {
            Some(g) if g.error_code.0 == 0 => Ok(g.members.len()),
            _ => Err(ErrorCode::GROUP_ID_NOT_FOUND),
        },
        _ => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
    }
}

fn key(group_id: &str, topic_id: Uuid, partition: i32) -> SharePartitionKey {
    SharePartitionKey::new(group_id, TopicId(*topic_id.as_bytes()), partition)
}

async fn describe_partition(
    broker: &Broker,
    group_id: &str,
    topic_id: Uuid,
    partition: i32,
    version: i16,
) -> describe::DescribeShareGroupOffsetsResponsePartition {
    let mut out = describe::DescribeShareGroupOffsetsResponsePartition {
        partition_index: partition,
        start_offset: -1,
        leader_epoch: -1,
        lag: -1,
        ..Default::default()
    };
    let Some(p) = broker
        .topic_by_id(topic_id)
        .and_then(|t| t.partition(partition))
    else {
        out.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code();
        return out;
    };
    let Some(summary) = broker
        .share
        .summary(broker, &key(group_id, topic_id, partition))
        .await
    else {
        // Never consumed by this group: Kafka answers start offset -1 without an error.
        return out;
    };
    out.start_offset = summary.start_offset;
    out.leader_epoch = summary.leader_epoch;
    if version >= 1 && summary.start_offset >= 0 && summary.delivery_complete_count >= 0 {
        let high_watermark = p.lock().log_end_offset();
        out.lag =
            (high_watermark - summary.start_offset - i64::from(summary.delivery_complete_count))
                .max(0);
    }
    out
}

pub async fn describe_share_group_offsets(
    broker: &Broker,
    version: i16,
    r: &describe::DescribeShareGroupOffsetsRequest,
) -> describe::DescribeShareGroupOffsetsResponse {
    let mut groups = Vec::with_capacity(r.groups.len());
    for g in &r.groups {
        let group_id = g.group_id.0.to_string();
        let mut out = describe::DescribeShareGroupOffsetsResponseGroup {
            group_id: g.group_id.clone(),
            ..Default::default()
        };
        if !broker.share_groups_enabled() {
            out.error_code = ErrorCode::UNSUPPORTED_VERSION.code();
            groups.push(out);
            continue;
        }
        if let Err(code) = group_members(broker, &group_id).await {
            out.error_code = code.code();
            groups.push(out);
            continue;
        }
        // The named topics, or every topic the group has state for.
        let wanted: Vec<(String, Option<Uuid>, Vec<i32>)> = match &g.topics {
            Some(topics) => topics
                .iter()
                .map(|t| {
                    let name = t.topic_name.0.to_string();
                    let id = broker.topic(&name).map(|tp| tp.id);
                    (name, id, t.partitions.clone())
                })
                .collect(),
            None => {
                let mut by_topic: std::collections::BTreeMap<Uuid, Vec<i32>> =
                    std::collections::BTreeMap::new();
                for k in broker.share.keys_of_group(&group_id).await {
                    by_topic
                        .entry(Uuid::from_bytes(k.topic_id.0))
                        .or_default()
                        .push(k.partition);
                }
                by_topic
                    .into_iter()
                    .filter_map(|(id, partitions)| {
                        broker
                            .topic_by_id(id)
                            .map(|t| (t.name.clone(), Some(id), partitions))
                    })
                    .collect()
            }
        };
        for (name, id, partitions) in wanted {
            let mut topic = describe::DescribeShareGroupOffsetsResponseTopic {
                topic_name: TopicName(str_bytes(name)),
                topic_id: id.unwrap_or(Uuid::nil()),
                ..Default::default()
            };
            for partition in partitions {
                topic.partitions.push(match id {
                    Some(id) => describe_partition(broker, &group_id, id, partition, version).await,
                    None => describe::DescribeShareGroupOffsetsResponsePartition {
                        partition_index: partition,
                        start_offset: -1,
                        leader_epoch: -1,
                        lag: -1,
                        error_code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(),
                        ..Default::default()
                    },
                });
            }
            out.topics.push(topic);
        }
        groups.push(out);
    }
    describe::DescribeShareGroupOffsetsResponse {
        groups,
        ..Default::default()
    }
}

/// The group-level error of Alter/DeleteShareGroupOffsets, if any.
async fn check_empty_group(broker: &Broker, group_id: &str) -> Option<ErrorCode> {
    if !broker.share_groups_enabled() {
        return Some(ErrorCode::UNSUPPORTED_VERSION);
    }
    match group_members(broker, group_id).await {
        // Records staged in an open transaction (KIP-1289) keep the group in use until the
        // transaction ends: a reset would drop stagings its COMMIT must still apply.
        Ok(0) if broker.share.group_tx_pending(group_id).await > 0 => {
            Some(ErrorCode::NON_EMPTY_GROUP)
        }
        Ok(0) => None,
        Ok(_) => Some(ErrorCode::NON_EMPTY_GROUP),
        Err(code) => Some(code),
    }
}

pub async fn alter_share_group_offsets(
    broker: &Arc<Broker>,
    r: &AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let group_id = r.group_id.0.to_string();
    if let Some(code) = check_empty_group(broker, &group_id).await {
        return AlterShareGroupOffsetsResponse::default().with_error_code(code.code());
    }
    let mut responses = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let topic = broker.topic(t.topic_name.0.as_str());
        let mut out = alter::AlterShareGroupOffsetsResponseTopic::default()
            .with_topic_name(t.topic_name.clone())
            .with_topic_id(topic.as_ref().map_or(Uuid::nil(), |tp| tp.id));
        for p in &t.partitions {
            let code = match &topic {
                None => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Some(tp) => match tp.partition(p.partition_index) {
                    None => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(part) => {
                        let (start, end) = {
                            let log = part.lock();
                            (log.log_start_offset(), log.log_end_offset())
                        };
                        if p.start_offset < start || p.start_offset > end {
                            ErrorCode::INVALID_REQUEST
                        } else {
                            match broker
                                .share
                                .reset(
                                    broker,
                                    &key(&group_id, tp.id, p.partition_index),
                                    p.start_offset,
                                )
                                .await
                            {
                                Ok(()) => ErrorCode::NONE,
                                Err(code) => code,
                            }
                        }
                    }
                },
            };
            out.partitions.push(
                alter::AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code.code()),
            );
        }
        responses.push(out);
    }
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

pub async fn delete_share_group_offsets(
    broker: &Arc<Broker>,
    r: &DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let group_id = r.group_id.0.to_string();
    if let Some(code) = check_empty_group(broker, &group_id).await {
        return DeleteShareGroupOffsetsResponse::default().with_error_code(code.code());
    }
    let keys = broker.share.keys_of_group(&group_id).await;
    let mut responses = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let topic = broker.topic(t.topic_name.0.as_str());
        let mut out = delete::DeleteShareGroupOffsetsResponseTopic::default()
            .with_topic_name(t.topic_name.clone())
            .with_topic_id(topic.as_ref().map_or(Uuid::nil(), |tp| tp.id));
        match topic {
            None => out.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(),
            Some(tp) => {
                let id = TopicId(*tp.id.as_bytes());
                let of_topic: Vec<SharePartitionKey> =
                    keys.iter().filter(|k| k.topic_id == id).cloned().collect();
                if let Err(code) = broker.share.delete(broker, &of_topic).await {
                    out.error_code = code.code();
                }
            }
        }
        responses.push(out);
    }
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}
