//! Share groups over the wire for the integration tests: a topic of records for one share
//! group, the group's configs, membership (ShareGroupHeartbeat) and ShareFetch.

use bytes::Bytes;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest, GroupId,
    ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::share::share_acknowledge::{
    AcknowledgePartition, AcknowledgeTopic, ShareAcknowledgeRequest,
};
use shoal_protocol::share::share_fetch::{FetchPartition, FetchTopic, ShareFetchRequest};
use shoal_protocol::share::{AcknowledgementBatch, ShareFetchResponse};
use shoal_storage::{encode_batch, BatchOptions};
use uuid::Uuid;

use super::TestBroker;

/// The topic the share group reads.
pub const TOPIC: &str = "queue";
/// The share group.
pub const GROUP: &str = "workers";

/// Acknowledge types (KIP-932; GAP and RENEW as KIP-1289 lists them).
pub const GAP: i8 = 0;
pub const ACCEPT: i8 = 1;
pub const RELEASE: i8 = 2;
pub const REJECT: i8 = 3;
pub const RENEW: i8 = 4;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Creates [`TOPIC`] with `partitions` partitions, produces to each one batch per entry of
/// `batches` (that many records, valued `r<offset>`), and sets `configs` on [`GROUP`];
/// returns the topic id.
pub async fn setup_share_topic(
    broker: &TestBroker,
    conn: &mut Connection,
    partitions: i32,
    batches: &[i64],
    configs: &[(&str, &str)],
) -> Uuid {
    super::create_topic(conn, TOPIC, partitions).await;
    for partition in 0..partitions {
        let mut first = 0;
        for &count in batches {
            let values: Vec<String> = (first..first + count).map(|i| format!("r{i}")).collect();
            assert_eq!(produce_values(conn, TOPIC, partition, &values).await, first);
            first += count;
        }
    }
    configure_group(conn, configs).await;
    broker.broker.topic(TOPIC).unwrap().id
}

/// Produces `values` as one non-transactional batch to `topic`-`partition` (acks=all);
/// returns its base offset.
pub async fn produce_values(
    conn: &mut Connection,
    topic: &str,
    partition: i32,
    values: &[String],
) -> i64 {
    let records: Vec<shoal_storage::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    let batch = Bytes::from(encode_batch(
        &records,
        BatchOptions {
            timestamp_ms: super::now_ms(),
            ..BatchOptions::default()
        },
    ));
    let (code, base_offset) = super::produce_once(conn, 9, None, topic, partition, batch).await;
    assert_eq!(code, 0, "produce to {topic}-{partition}");
    base_offset
}

/// Sets `configs` on [`GROUP`] (IncrementalAlterConfigs, SET); panics unless it succeeded.
pub async fn configure_group(conn: &mut Connection, configs: &[(&str, &str)]) {
    super::alter_configs(conn, super::GROUP_RESOURCE, GROUP, configs).await;
}

/// ShareGroupHeartbeat of `member` in [`GROUP`] at `epoch` (0 joins, subscribed to [`TOPIC`];
/// -1 leaves); panics unless it succeeded; returns the member's new epoch.
pub async fn heartbeat(conn: &mut Connection, member: &str, epoch: i32) -> i32 {
    let r = conn
        .request(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_member_id(s(member))
                .with_member_epoch(epoch)
                .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s(TOPIC))])),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.member_epoch
}

/// ShareFetch v1 for `member` of [`GROUP`] at share-session epoch `session_epoch`: the
/// `partitions` of `topic_id`, each with the acknowledgements it carries.
pub async fn share_fetch(
    conn: &mut Connection,
    topic_id: Uuid,
    member: &str,
    session_epoch: i32,
    partitions: Vec<(i32, Vec<AcknowledgementBatch>)>,
    max_wait_ms: i32,
    max_bytes: i32,
) -> ShareFetchResponse {
    conn.request(
        2,
        &ShareFetchRequest {
            group_id: Some(GroupId(s(GROUP))),
            member_id: Some(s(member)),
            share_session_epoch: session_epoch,
            max_wait_ms,
            min_bytes: 1,
            max_bytes,
            max_records: 500,
            batch_size: 500,
            topics: vec![FetchTopic {
                topic_id,
                partitions: partitions
                    .into_iter()
                    .map(
                        |(partition_index, acknowledgement_batches)| FetchPartition {
                            partition_index,
                            acknowledgement_batches,
                            ..Default::default()
                        },
                    )
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// ShareAcknowledge v1 for `member` at share-session epoch `epoch` of `acks` on partition 0 of
/// `topic_id`: (top-level error, the partition's error or -1 if none is answered).
pub async fn acknowledge(
    conn: &mut Connection,
    topic_id: Uuid,
    member: &str,
    epoch: i32,
    acks: Vec<AcknowledgementBatch>,
) -> (i16, i16) {
    let r = conn
        .request(
            2,
            &ShareAcknowledgeRequest {
                group_id: Some(GroupId(s(GROUP))),
                member_id: Some(s(member)),
                share_session_epoch: epoch,
                topics: vec![AcknowledgeTopic {
                    topic_id,
                    partitions: vec![AcknowledgePartition {
                        partition_index: 0,
                        acknowledgement_batches: acks,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let partition = r
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .map_or(-1, |p| p.error_code);
    (r.error_code, partition)
}

/// Every acquired range of a ShareFetch response: (partition, first, last, delivery count),
/// sorted.
pub fn acquired_ranges(r: &ShareFetchResponse) -> Vec<(i32, i64, i64, i16)> {
    let mut out: Vec<(i32, i64, i64, i16)> = r
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| {
            p.acquired_records.iter().map(|a| {
                (
                    p.partition_index,
                    a.first_offset,
                    a.last_offset,
                    a.delivery_count,
                )
            })
        })
        .collect();
    out.sort_unstable();
    out
}

/// An acknowledgement batch: `types` holds one type for the whole range or one per offset.
pub fn ack_batch(first: i64, last: i64, types: Vec<i8>) -> AcknowledgementBatch {
    AcknowledgementBatch {
        first_offset: first,
        last_offset: last,
        acknowledge_types: types,
        ..Default::default()
    }
}

/// AlterShareGroupOffsets of [`GROUP`]: [`TOPIC`]-0 restarts at `start_offset`.
pub fn alter_offsets(start_offset: i64) -> AlterShareGroupOffsetsRequest {
    AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
            .with_topic_name(TopicName(s(TOPIC)))
            .with_partitions(vec![
                AlterShareGroupOffsetsRequestPartition::default()
                    .with_partition_index(0)
                    .with_start_offset(start_offset),
            ])])
}

/// DeleteShareGroupOffsets of [`GROUP`] for [`TOPIC`].
pub fn delete_offsets() -> DeleteShareGroupOffsetsRequest {
    DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(vec![
            DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(s(TOPIC)))
        ])
}
