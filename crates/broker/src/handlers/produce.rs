//! Produce: validate each partition's record set, append it with offsets assigned in place,
//! and (acks 1 or all, with `flush.messages=1`, the default) answer only after the group-commit
//! fsync. acks=0 gets no response at all, as in Kafka; when such a produce fails anywhere the
//! connection is closed instead (Kafka's way of telling the producer to refresh its metadata).
//!
//! Batches with a producer id go through the partition's producer state under the partition
//! lock before the append: refused with Kafka's error (INVALID_PRODUCER_EPOCH,
//! OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE for a plain batch from a producer with an
//! ongoing transaction), or, for a retry of an appended batch, answered with the original base
//! offset and nothing appended. A transactional batch starts (or continues) the producer's
//! transaction on the partition; control batches (transaction markers) are written only by the
//! broker ([`crate::markers`]) and refused from clients with INVALID_RECORD, as Kafka does.
//!
//! The first transactional batch of a producer on a partition (no transaction of its own open
//! there yet) is checked with the transaction coordinator before it is appended, as Kafka's
//! `AddPartitionsToTxnManager` does (KIP-890): Produce v12+ (transaction version 2 clients) adds
//! the partition to the transaction implicitly; older versions only verify that the client
//! added it, so a batch for a partition the coordinator does not know cannot open a
//! transaction that no marker would ever close. `transaction.partition.verification.enable=false`
//! turns that check off, as in Kafka. Transactional data in a request without a transactional id
//! is refused as a whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::BytesMut;
use shoal_core::producer_state::{BatchInfo, Decision, ProducerEpoch, ProducerId};
use shoal_core::txn_coordinator::{self as tc, TopicPartition, TxnRequest, TxnResponse};
use shoal_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use shoal_protocol::messages::{ProduceRequest, ProduceResponse};
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::batch::{
    validate_record_set_with, RecordError, RecordFault, RecordRules, TimestampWindow,
};
use shoal_storage::ValidationLimits;
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::config::{BrokerConfig, ConfigMap};
use crate::handlers::metadata::auto_create;
use crate::producer_state::{batch_info, state_config};
use crate::topic_registry::{effective, Partition, Topic};

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
    verified: &HashMap<(String, i32), ErrorCode>,
) -> PartitionAppended {
    let fail = |code, message: Option<String>| PartitionAppended {
        response: partition_error(index, code, message),
        durable_wait: None,
    };
    let partition = match broker.led_partition(topic, index) {
        Ok(p) => p,
        Err(code) => return fail(code, None),
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
    let now = broker.now_ms();
    let rules = record_rules(&config, &overrides, now);
    let faults = match validate_record_set_with(records, &limits, &rules) {
        Ok((headers, faults)) => {
            if headers.len() > 1 {
                // Kafka takes exactly one v2 batch per partition from a client.
                return fail(
                    ErrorCode::INVALID_RECORD,
                    Some("more than one record batch for a partition".into()),
                );
            }
            faults
        }
        Err(e) => return fail(ErrorCode(e.kafka_error_code()), Some(e.to_string())),
    };
    if !faults.is_empty() {
        let log_start_offset = partition.lock().log_start_offset();
        return PartitionAppended {
            response: record_errors_response(topic, index, &faults)
                .with_log_start_offset(log_start_offset),
            durable_wait: None,
        };
    }
    let infos: Vec<BatchInfo> = split_batches(records)
        .filter_map(Result::ok)
        .map(|(h, _)| batch_info(&h))
        .collect();
    if let Err(message) = check_client_batches(&infos) {
        return fail(ErrorCode::INVALID_RECORD, Some(message.into()));
    }
    if let Some(code) = verified.get(&(topic.name.clone(), index)) {
        return fail(*code, None);
    }
    let idempotent = infos.iter().any(BatchInfo::has_producer_id);
    let mut batch = BytesMut::from(&records[..]);
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
                let durability = broker.durability.clone();
                let target = partition.clone();
                tokio::spawn(async move {
                    if let Err(e) = durability.commit(vec![target]).await {
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

/// The per-record rules of Kafka's log validator for this topic: keys on compacted topics and,
/// for CreateTime topics, `message.timestamp.before.max.ms` / `after.max.ms` around `now`.
fn record_rules(config: &BrokerConfig, overrides: &ConfigMap, now: i64) -> RecordRules {
    let long = |key: &str, default: i64| {
        effective(config, overrides, key)
            .parse::<i64>()
            .unwrap_or(default)
    };
    let create_time = effective(config, overrides, "message.timestamp.type") != "LogAppendTime";
    RecordRules {
        require_key: effective(config, overrides, "cleanup.policy")
            .split(',')
            .any(|p| p.trim() == "compact"),
        timestamps: create_time.then(|| TimestampWindow {
            now_ms: now,
            before_max_ms: long("message.timestamp.before.max.ms", i64::MAX),
            after_max_ms: long("message.timestamp.after.max.ms", 3_600_000),
        }),
    }
}

/// KIP-467: a batch refused for some of its records names each of them (`record_errors`) and
/// nothing of it is appended. Any timestamp fault makes the partition's error
/// INVALID_TIMESTAMP, otherwise it is INVALID_RECORD, as in Kafka.
fn record_errors_response(
    topic: &Topic,
    index: i32,
    faults: &[RecordError],
) -> PartitionProduceResponse {
    let describe = |e: &RecordError| match e.fault {
        RecordFault::MissingKey => format!(
            "compacted topic cannot accept a record without a key in topic partition {}-{index}",
            topic.name
        ),
        RecordFault::TimestampOutOfRange { timestamp } => format!(
            "timestamp {timestamp} of record {} is outside the topic's window \
             (message.timestamp.before.max.ms / after.max.ms)",
            e.batch_index
        ),
        RecordFault::LogAppendTimeFromClient => {
            "producers must not set the LogAppendTime timestamp type".to_string()
        }
    };
    let timestamp_fault = faults.iter().any(|e| e.fault != RecordFault::MissingKey);
    let (code, message) = if timestamp_fault {
        (
            ErrorCode::INVALID_TIMESTAMP,
            "one or more records were refused for their timestamp".to_string(),
        )
    } else {
        let first: Vec<String> = faults.iter().take(3).map(describe).collect();
        (
            ErrorCode::INVALID_RECORD,
            format!(
                "{} record(s) refused; the first: {}",
                faults.len(),
                first.join("; ")
            ),
        )
    };
    partition_error(index, code, Some(message)).with_record_errors(
        faults
            .iter()
            .map(|e| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(e.batch_index)
                    .with_batch_index_error_message(Some(str_bytes(describe(e))))
            })
            .collect(),
    )
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

/// The producer of a transactional record set, if it is one.
fn transactional_producer(records: Option<&bytes::Bytes>) -> Option<(i64, i16)> {
    let (header, _) = split_batches(records?).next()?.ok()?;
    (header.is_transactional() && header.producer_id() >= 0)
        .then(|| (header.producer_id(), header.producer_epoch()))
}

/// Whether `producer_id` has no transaction open on `partition` at `epoch` yet (its batch
/// would begin one; see `ProducerStateManager::has_ongoing_txn` for why the epoch matters).
/// Loads the partition's producer state if needed; on a storage error the append path reports
/// it, so this answers "no check needed".
fn begins_transaction(
    broker: &Broker,
    partition: &Partition,
    producer_id: i64,
    epoch: i16,
) -> bool {
    let mut log = partition.lock();
    match partition.producers(&mut log, state_config(&broker.config), broker.now_ms()) {
        Ok(p) => !p.state().has_ongoing_txn(
            shoal_core::producer_state::ProducerId(producer_id),
            shoal_core::producer_state::ProducerEpoch(epoch),
        ),
        Err(_) => false,
    }
}

/// Asks the transaction coordinator about every partition where a transactional batch would
/// begin a transaction; returns the partitions to refuse, with Kafka's error for the version.
async fn verify_transactions(
    broker: &Arc<Broker>,
    version: i16,
    request: &ProduceRequest,
) -> HashMap<(String, i32), ErrorCode> {
    let mut refused = HashMap::new();
    let Some(transactional_id) = request.transactional_id.as_ref() else {
        return refused;
    };
    if !broker
        .current_config()
        .bool("transaction.partition.verification.enable")
    {
        return refused;
    }
    let mut by_producer: BTreeMap<(i64, i16), Vec<TopicPartition>> = BTreeMap::new();
    for topic_data in &request.topic_data {
        let topic = if version >= 13 {
            broker.topic_by_id(topic_data.topic_id)
        } else {
            broker.topic(topic_data.name.0.as_str())
        };
        let Some(topic) = topic else { continue };
        for p in &topic_data.partition_data {
            let (Some(partition), Some((pid, epoch))) = (
                topic.partition(p.index),
                transactional_producer(p.records.as_ref()),
            ) else {
                continue;
            };
            if begins_transaction(broker, &partition, pid, epoch) {
                by_producer
                    .entry((pid, epoch))
                    .or_default()
                    .push(TopicPartition {
                        topic: topic.name.clone(),
                        partition: p.index,
                    });
            }
        }
    }
    for ((pid, epoch), partitions) in by_producer {
        let request = if version >= 12 {
            TxnRequest::AddPartitionsImplicit(tc::AddPartitionsImplicitRequest {
                transactional_id: transactional_id.0.to_string(),
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(epoch),
                partitions: partitions.clone(),
            })
        } else {
            TxnRequest::AddPartitions(tc::AddPartitionsRequest {
                transactional_id: transactional_id.0.to_string(),
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(epoch),
                partitions: partitions.clone(),
                verify_only: true,
            })
        };
        let results =
            ask_coordinator(broker, transactional_id.0.as_str(), request, partitions).await;
        for (tp, code) in results {
            if code.is_ok() {
                continue;
            }
            // Kafka's mapping for producers: fenced is INVALID_PRODUCER_EPOCH; clients older
            // than Produce v11 do not know TRANSACTION_ABORTABLE.
            let code = if code == ErrorCode::PRODUCER_FENCED {
                ErrorCode::INVALID_PRODUCER_EPOCH
            } else if code == ErrorCode::TRANSACTION_ABORTABLE && version <= 10 {
                ErrorCode::INVALID_TXN_STATE
            } else {
                code
            };
            refused.insert((tp.topic, tp.partition), code);
        }
    }
    refused
}

/// `request` (adding or verifying `partitions`) answered by the transaction coordinator of
/// `transactional_id`: this broker's own, or in a cluster the broker that owns the id's
/// partition of `__transaction_state`, through AddPartitionsToTxn v5 (the version only brokers
/// send, batched, with `VerifyOnly`), as Kafka's partition leaders ask theirs.
async fn ask_coordinator(
    broker: &Arc<Broker>,
    transactional_id: &str,
    request: TxnRequest,
    partitions: Vec<TopicPartition>,
) -> Vec<(TopicPartition, ErrorCode)> {
    use crate::leadership::CoordinatorKind;
    let elsewhere = broker.in_cluster()
        && broker.coordinates(CoordinatorKind::Transaction, transactional_id)
            == Err(ErrorCode::NOT_COORDINATOR);
    if elsewhere {
        return ask_remote_coordinator(broker, transactional_id, request, partitions).await;
    }
    match broker.txn.call(request).await {
        Ok(TxnResponse::AddPartitions(r)) | Ok(TxnResponse::AddPartitionsImplicit(r)) => r
            .results
            .into_iter()
            .map(|e| {
                (
                    TopicPartition {
                        topic: e.topic,
                        partition: e.partition,
                    },
                    ErrorCode(e.error_code.code()),
                )
            })
            .collect(),
        _ => partitions
            .into_iter()
            .map(|tp| (tp, ErrorCode::COORDINATOR_NOT_AVAILABLE))
            .collect(),
    }
}

async fn ask_remote_coordinator(
    broker: &Arc<Broker>,
    transactional_id: &str,
    request: TxnRequest,
    partitions: Vec<TopicPartition>,
) -> Vec<(TopicPartition, ErrorCode)> {
    use crate::leadership::CoordinatorKind;
    use shoal_protocol::messages::add_partitions_to_txn_request as apr;
    use shoal_protocol::messages::{AddPartitionsToTxnRequest, TopicName, TransactionalId};
    let unavailable = |partitions: Vec<TopicPartition>| {
        partitions
            .into_iter()
            .map(|tp| (tp, ErrorCode::COORDINATOR_NOT_AVAILABLE))
            .collect()
    };
    let (producer_id, producer_epoch, verify_only) = match &request {
        TxnRequest::AddPartitions(r) => (r.producer_id, r.producer_epoch, r.verify_only),
        TxnRequest::AddPartitionsImplicit(r) => (r.producer_id, r.producer_epoch, false),
        _ => return unavailable(partitions),
    };
    let Ok(node) = broker.coordinator_node(CoordinatorKind::Transaction, transactional_id) else {
        return unavailable(partitions);
    };
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in &partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let topics = by_topic
        .iter()
        .map(|(topic, indexes)| {
            apr::AddPartitionsToTxnTopic::default()
                .with_name(TopicName(str_bytes(*topic)))
                .with_partitions(indexes.clone())
        })
        .collect();
    let ask = AddPartitionsToTxnRequest::default().with_transactions(vec![
        apr::AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
            .with_producer_id(shoal_protocol::messages::ProducerId(producer_id.0))
            .with_producer_epoch(producer_epoch.0)
            .with_verify_only(verify_only)
            .with_topics(topics),
    ]);
    let response = match broker.peers.request(&node, 5, &ask).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach the transaction coordinator");
            return unavailable(partitions);
        }
    };
    if response.error_code != 0 {
        let code = ErrorCode(response.error_code);
        return partitions.into_iter().map(|tp| (tp, code)).collect();
    }
    let mut answers: BTreeMap<(String, i32), ErrorCode> = BTreeMap::new();
    for t in &response.results_by_transaction {
        if t.transactional_id.0.as_str() != transactional_id {
            continue;
        }
        for topic in &t.topic_results {
            for p in &topic.results_by_partition {
                answers.insert(
                    (topic.name.0.to_string(), p.partition_index),
                    ErrorCode(p.partition_error_code),
                );
            }
        }
    }
    partitions
        .into_iter()
        .map(|tp| {
            // A partition the answer leaves out was not added.
            let code = answers
                .get(&(tp.topic.clone(), tp.partition))
                .copied()
                .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
            (tp, code)
        })
        .collect()
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

    /// The first partition that failed, as "topic-partition: error code", if any.
    pub fn failure(&self) -> Option<String> {
        self.responses.iter().find_map(|t| {
            t.partition_responses
                .iter()
                .find(|p| p.error_code != 0)
                .map(|p| format!("{}-{}: error {}", t.name.0, p.index, p.error_code))
        })
    }

    /// Waits for durability and builds the response; `None` for acks=0 (no response).
    pub async fn finish(self, broker: Arc<Broker>) -> Option<ProduceResponse> {
        let Appended {
            acks,
            mut responses,
            to_flush,
        } = self;
        if !to_flush.is_empty() {
            if let Err(e) = broker.durability.commit(to_flush).await {
                // The data may be in the log but we cannot promise it survives (or this node
                // lost the partition meanwhile): report it.
                for topic in &mut responses {
                    for p in &mut topic.partition_responses {
                        if p.error_code == 0 {
                            *p = partition_error(p.index, e.error_code(), Some(e.to_string()));
                        }
                    }
                }
            }
        }
        (acks != 0).then(|| ProduceResponse::default().with_responses(responses))
    }
}

/// Whether any batch of the request is transactional (Kafka's `hasTransactionalRecords`).
fn has_transactional_records(request: &ProduceRequest) -> bool {
    request.topic_data.iter().any(|t| {
        t.partition_data.iter().any(|p| {
            p.records.as_ref().is_some_and(|records| {
                split_batches(records)
                    .filter_map(Result::ok)
                    .any(|(h, _)| h.is_transactional())
            })
        })
    })
}

/// The same error for every partition of the request, nothing appended.
fn refuse_all(request: &ProduceRequest, version: i16, code: ErrorCode) -> Appended {
    let by_id = version >= 13;
    let responses = request
        .topic_data
        .iter()
        .map(|t| {
            TopicProduceResponse::default()
                .with_name(topic_name(if by_id {
                    String::new()
                } else {
                    t.name.0.as_str().to_string()
                }))
                .with_topic_id(if by_id { t.topic_id } else { Uuid::nil() })
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| partition_error(p.index, code, None))
                        .collect(),
                )
        })
        .collect();
    Appended {
        acks: request.acks,
        responses,
        to_flush: Vec::new(),
    }
}

/// Validates and appends every partition of a produce request, in order. The caller then
/// awaits [`Appended::finish`] (possibly after handling later requests of the connection).
pub async fn append(broker: &Arc<Broker>, version: i16, request: &ProduceRequest) -> Appended {
    let acks = request.acks;
    if request.transactional_id.is_none() && has_transactional_records(request) {
        // Kafka refuses the whole request: only a transactional id's producer may write
        // transactional data (and only its coordinator can ever end that transaction).
        return refuse_all(
            request,
            version,
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        );
    }
    let verified = verify_transactions(broker, version, request).await;
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
                        let appended = append_partition(
                            broker,
                            topic,
                            p.index,
                            p.records.as_ref(),
                            acks,
                            &verified,
                        );
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
