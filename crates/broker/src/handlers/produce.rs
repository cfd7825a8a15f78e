//! Produce: validate each partition's record set, append it with offsets assigned in place,
//! and (acks 1 or all, with `flush.messages=1`, the default) answer only after the group-commit
//! fsync. acks=0 gets no response at all, as in Kafka.
//!
//! Batches with a producer id go through the partition's producer state under the partition
//! lock before the append: refused with Kafka's error (INVALID_PRODUCER_EPOCH,
//! OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE for a plain batch from a producer with an
//! ongoing transaction), or, for a retry of an appended batch, answered with the original base
//! offset and nothing appended. A transactional batch starts (or continues) the producer's
//! transaction on the partition; control batches (transaction markers) are written only by the
//! broker ([`crate::markers`]) and refused from clients with INVALID_RECORD, as Kafka does.
//!
//! Not checked here yet: that the coordinator added the partition to the producer's
//! transaction (Kafka's AddPartitionsToTxn verification, KIP-890); see
//! [`verify_transaction_membership`].

use std::sync::Arc;

use bytes::BytesMut;
use shoal_core::producer_state::{BatchInfo, Decision};
use shoal_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use shoal_protocol::messages::{ProduceRequest, ProduceResponse};
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{validate_record_set, ValidationLimits};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::broker::{now_ms, Broker};
use crate::handlers::metadata::auto_create;
use crate::producers::{batch_info, state_config};
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

struct PartitionAppended {
    response: PartitionProduceResponse,
    durable_wait: Option<Arc<Partition>>,
}

fn append_partition(
    broker: &Broker,
    topic: &Topic,
    index: i32,
    records: Option<&bytes::Bytes>,
    acks: i16,
) -> PartitionAppended {
    let fail = |code, message: Option<String>| PartitionAppended {
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
    let config = broker.current_config();
    let limits = ValidationLimits {
        max_message_bytes: effective(&config, &overrides, "max.message.bytes")
            .parse()
            .unwrap_or(usize::MAX),
        decompressed_bytes_max: PRODUCE_DECOMPRESSED_BYTES_MAX,
    };
    if let Err(e) = validate_record_set(records, &limits) {
        return fail(ErrorCode(e.kafka_error_code()), Some(e.to_string()));
    }
    let infos: Vec<BatchInfo> = split_batches(records)
        .filter_map(Result::ok)
        .map(|(h, _)| batch_info(&h))
        .collect();
    if let Err(message) = check_client_batches(&infos) {
        return fail(ErrorCode::INVALID_RECORD, Some(message.into()));
    }
    if let Err(code) = verify_transaction_membership(broker, topic, index, &infos) {
        return fail(code, None);
    }
    let idempotent = infos.iter().any(BatchInfo::has_producer_id);
    let mut batch = BytesMut::from(&records[..]);
    let now = now_ms();
    let flush_messages: i64 = effective(&config, &overrides, "flush.messages")
        .parse()
        .unwrap_or(1);
    let durable = acks != 0 && flush_messages == 1;
    let storage_fail = |e: shoal_storage::StorageError| {
        tracing::error!(partition = ?partition, error = %e, "producer state unavailable");
        PartitionAppended {
            response: partition_error(index, ErrorCode::KAFKA_STORAGE_ERROR, Some(e.to_string())),
            durable_wait: None,
        }
    };
    let mut log = partition.lock();
    // Only under the log lock: check, append and record are one step for the partition.
    let mut producers = if idempotent {
        match partition.producers(&mut log, state_config(&broker.config), now) {
            Ok(p) => Some(p),
            Err(e) => return storage_fail(e),
        }
    } else {
        None
    };
    if let Some(producers) = producers.as_mut() {
        match producers.check(&mut log, &infos, now) {
            Err(e) => return storage_fail(e),
            Ok(Err(e)) => return fail(ErrorCode(e.error_code()), Some(e.to_string())),
            Ok(Ok(Decision::Duplicate(original))) => {
                // A retry of an appended batch: answer as the first time, append nothing.
                // Wait for durability like the original (it may still be in flight).
                return PartitionAppended {
                    response: PartitionProduceResponse::default()
                        .with_index(index)
                        .with_base_offset(original.first_offset)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(log.log_start_offset()),
                    durable_wait: durable.then_some(partition.clone()),
                };
            }
            Ok(Ok(Decision::Append)) => {}
        }
    }
    let result = log.append(&mut batch, now);
    match result {
        Ok(info) => {
            // Producer state follows the log even for plain batches once it is loaded.
            let record = match producers.as_mut() {
                Some(p) => p.on_appended(&mut log, &batch),
                None => match partition.loaded_producers().as_mut() {
                    Some(p) => p.on_appended(&mut log, &batch),
                    None => Ok(()),
                },
            };
            if let Err(e) = record {
                // The append stands and the state is updated; only the snapshot failed.
                tracing::warn!(partition = ?partition, error = %e, "producer snapshot failed");
            }
            drop(producers);
            // Lazy policy (flush.messages > 1): flush in the background every N messages.
            let unflushed = log.log_end_offset() - log.flushed_offset();
            drop(log);
            if !durable && flush_messages > 1 && unflushed >= flush_messages {
                let flusher = broker.flusher.clone();
                let target = partition.clone();
                tokio::spawn(async move {
                    if let Err(e) = flusher.flush(vec![target]).await {
                        tracing::warn!(error = %e, "background flush failed");
                    }
                });
            }
            partition.wake();
            PartitionAppended {
                response: PartitionProduceResponse::default()
                    .with_index(index)
                    .with_base_offset(info.first_offset)
                    .with_log_append_time_ms(info.log_append_time)
                    .with_log_start_offset(info.log_start_offset),
                durable_wait: durable.then_some(partition.clone()),
            }
        }
        Err(e) => fail(ErrorCode(e.kafka_error_code()), Some(e.to_string())),
    }
}

/// Kafka's `LogValidator` rules for batches from clients that concern transactions: no control
/// batches (markers come from the coordinator through [`crate::markers`]) and no transactional
/// batch without a producer id.
fn check_client_batches(infos: &[BatchInfo]) -> Result<(), &'static str> {
    if infos.iter().any(|b| b.control) {
        return Err("clients are not allowed to write control records");
    }
    if infos
        .iter()
        .any(|b| b.transactional && !b.has_producer_id())
    {
        return Err("transactional record batch without a producer id");
    }
    Ok(())
}

/// Seam for the coordinator-side check that each transactional batch's producer has added this
/// partition to its ongoing transaction (Kafka's `AddPartitionsToTxnManager` verification with
/// AddPartitionsToTxn v4+ `VerifyOnly`, and the implicit add of transaction version 2 on Produce
/// v12+). Not implemented: every transactional batch that passes the producer-state checks is
/// accepted and starts a transaction on the partition. To be filled in together with the
/// transaction coordinator; the errors it would return are INVALID_TXN_STATE /
/// TRANSACTION_ABORTABLE / INVALID_PRODUCER_EPOCH.
fn verify_transaction_membership(
    _broker: &Broker,
    _topic: &Topic,
    _index: i32,
    _infos: &[BatchInfo],
) -> Result<(), ErrorCode> {
    Ok(())
}

/// A produce whose appends are done and whose answer may still wait for an fsync.
pub struct Appended {
    acks: i16,
    responses: Vec<TopicProduceResponse>,
    to_flush: Vec<Arc<Partition>>,
}

impl Appended {
    /// Whether the answer waits for the group-commit fsync.
    pub fn waits(&self) -> bool {
        !self.to_flush.is_empty()
    }

    /// Waits for durability and builds the response; `None` for acks=0 (no response).
    pub async fn finish(self, broker: Arc<Broker>) -> Option<ProduceResponse> {
        let Appended {
            acks,
            mut responses,
            to_flush,
        } = self;
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
        (acks != 0).then(|| ProduceResponse::default().with_responses(responses))
    }
}

/// Validates and appends every partition of a produce request, in order. The caller then
/// awaits [`Appended::finish`] (possibly after handling later requests of the connection).
pub async fn append(broker: &Arc<Broker>, version: i16, request: &ProduceRequest) -> Appended {
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
    Appended {
        acks,
        responses,
        to_flush,
    }
}
