//! Produce: validate each partition's record set, append it with offsets assigned in place,
//! and (acks 1 or all, with `flush.messages=1`, the default) answer only after the group-commit
//! fsync. acks=0 gets no response at all, as in Kafka.

use std::sync::Arc;

use bytes::BytesMut;
use shoal_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use shoal_protocol::messages::{ProduceRequest, ProduceResponse};
use shoal_protocol::ErrorCode;
use shoal_storage::{validate_record_set, ValidationLimits};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::broker::{now_ms, Broker};
use crate::handlers::metadata::auto_create;
use crate::topics::{effective, Partition, Topic};

/// Budget for decompressing one produced batch during validation (decompression bombs).
pub const PRODUCE_DECOMPRESSED_BYTES_MAX: usize = 256 * 1024 * 1024;

fn partition_error(
    index: i32,
    code: ErrorCode,
    message: Option<String>,
) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(message.map(str_bytes))
}

struct Appended {
    response: PartitionProduceResponse,
    durable_wait: Option<Arc<Partition>>,
}

fn append_partition(
    broker: &Broker,
    topic: &Topic,
    index: i32,
    records: Option<&bytes::Bytes>,
    acks: i16,
) -> Appended {
    let fail = |code, message: Option<String>| Appended {
        response: partition_error(index, code, message),
        durable_wait: None,
    };
    let Some(partition) = topic.partition(index) else {
        return fail(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, None);
    };
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return fail(ErrorCode::CORRUPT_MESSAGE, Some("empty record set".into()));
    };
    let overrides = topic.overrides();
    let limits = ValidationLimits {
        max_message_bytes: effective(&broker.config, &overrides, "max.message.bytes")
            .parse()
            .unwrap_or(usize::MAX),
        decompressed_bytes_max: PRODUCE_DECOMPRESSED_BYTES_MAX,
    };
    if let Err(e) = validate_record_set(records, &limits) {
        return fail(ErrorCode(e.kafka_error_code()), Some(e.to_string()));
    }
    let mut batch = BytesMut::from(&records[..]);
    let now = now_ms();
    let result = partition.lock().append(&mut batch, now);
    match result {
        Ok(info) => {
            broker.appended.notify_waiters();
            let durable =
                acks != 0 && effective(&broker.config, &overrides, "flush.messages") == "1";
            Appended {
                response: PartitionProduceResponse::default()
                    .with_index(index)
                    .with_base_offset(info.first_offset)
                    .with_log_append_time_ms(info.log_append_time)
                    .with_log_start_offset(info.log_start_offset),
                durable_wait: durable.then_some(partition),
            }
        }
        Err(e) => fail(ErrorCode(e.kafka_error_code()), Some(e.to_string())),
    }
}

/// Handles a produce request; `None` means no response is sent (acks=0).
pub async fn handle(
    broker: &Arc<Broker>,
    version: i16,
    request: &ProduceRequest,
) -> Option<ProduceResponse> {
    let acks = request.acks;
    let mut responses = Vec::with_capacity(request.topic_data.len());
    let mut to_flush = Vec::new();
    for topic_data in &request.topic_data {
        let by_id = version >= 13;
        let name = topic_data.name.0.as_str().to_string();
        let topic = if by_id {
            broker
                .topic_by_id(topic_data.topic_id)
                .ok_or(ErrorCode::UNKNOWN_TOPIC_ID)
        } else {
            auto_create(broker, &name).await
        };
        let topic = topic.and_then(|t| {
            if t.internal {
                Err(ErrorCode::INVALID_TOPIC_EXCEPTION)
            } else {
                Ok(t)
            }
        });
        let partitions = topic_data
            .partition_data
            .iter()
            .map(|p| {
                if !matches!(acks, -1..=1) {
                    return partition_error(p.index, ErrorCode::INVALID_REQUIRED_ACKS, None);
                }
                match &topic {
                    Err(code) => partition_error(p.index, *code, None),
                    Ok(topic) => {
                        let appended =
                            append_partition(broker, topic, p.index, p.records.as_ref(), acks);
                        to_flush.extend(appended.durable_wait);
                        appended.response
                    }
                }
            })
            .collect::<Vec<_>>();
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic_name(if by_id { String::new() } else { name }))
                .with_topic_id(if by_id {
                    topic_data.topic_id
                } else {
                    Uuid::nil()
                })
                .with_partition_responses(partitions),
        );
    }
    if !to_flush.is_empty() {
        if let Err(e) = broker.flusher.flush(to_flush).await {
            // The data may be in the log but we cannot promise it survives: report it.
            for topic in &mut responses {
                for p in &mut topic.partition_responses {
                    if p.error_code == 0 {
                        *p = partition_error(
                            p.index,
                            ErrorCode::KAFKA_STORAGE_ERROR,
                            Some(e.clone()),
                        );
                    }
                }
            }
        }
    }
    if acks == 0 {
        return None;
    }
    Some(ProduceResponse::default().with_responses(responses))
}
