//! Fetch: whole stored batches from each partition, long-polling on MinBytes/MaxWaitMs.
//!
//! Sessions (KIP-227) are not kept: a request opening one gets session id 0, which every client
//! handles by sending full fetch requests; a request naming a session gets
//! FETCH_SESSION_ID_NOT_FOUND. The response-level MaxBytes is soft for the first batch (a client
//! must always make progress), per-partition limits likewise.
//!
//! Isolation: every response carries the partition's last stable offset (as Kafka's does).
//! read_committed (isolation level 1) reads only below it and lists the aborted transactions
//! overlapping the returned range (ABORT marker at or after the fetch offset, first offset
//! below the end of the returned data), so the consumer can drop their batches; read_uncommitted
//! reads up to the high watermark with AbortedTransactions null.
//!
//! Record bytes are not read here: each partition's records are located in their segment file
//! and the response carries a placeholder for them, which the connection fills from the file
//! with `sendfile` ([`crate::outbound`]). Nothing in a Fetch answer needs to look inside them:
//! batches go out whole and as stored, and read_committed filtering is the consumer's work,
//! from the aborted transactions listed beside them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use shoal_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use shoal_protocol::ErrorCode;
use shoal_storage::FileRegion;
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::{records_field, topic_name};
use crate::broker::Broker;
use crate::producer_state::state_config;
use crate::topic_registry::Topic;

/// Longest long poll honoured, whatever the client asks.
const FETCH_WAIT_MAX: Duration = Duration::from_secs(60);

fn partition_error(index: i32, code: ErrorCode) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(code.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(Bytes::new()))
}

struct Resolved {
    name: String,
    id: Uuid,
    topic: Result<Arc<Topic>, ErrorCode>,
}

fn resolve(broker: &Broker, version: i16, request: &FetchRequest) -> Vec<Resolved> {
    request
        .topics
        .iter()
        .map(|t| {
            if version >= 13 {
                Resolved {
                    name: String::new(),
                    id: t.topic_id,
                    topic: broker
                        .topic_by_id(t.topic_id)
                        .ok_or(ErrorCode::UNKNOWN_TOPIC_ID),
                }
            } else {
                let name = t.topic.0.as_str().to_string();
                Resolved {
                    topic: broker
                        .topic(&name)
                        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    name,
                    id: Uuid::nil(),
                }
            }
        })
        .collect()
}

/// What one pass over the requested partitions found.
struct Pass {
    response: FetchResponse,
    /// The file regions its record placeholders stand for, in encoding order.
    regions: Vec<FileRegion>,
    /// Record bytes in all.
    bytes: usize,
}

/// One pass over every requested partition.
fn read_all(
    broker: &Broker,
    version: i16,
    request: &FetchRequest,
    resolved: &[Resolved],
    fetch_bytes_max: usize,
) -> Pass {
    let mut regions = Vec::new();
    let read_committed = request.isolation_level == 1;
    let producer_config = state_config(&broker.config);
    let now = broker.now_ms();
    let mut remaining = usize::try_from(request.max_bytes).unwrap_or(0);
    if version < 3 || request.max_bytes <= 0 {
        remaining = usize::MAX;
    }
    remaining = remaining.min(fetch_bytes_max);
    let mut total = 0usize;
    let mut topics = Vec::with_capacity(request.topics.len());
    for (fetch_topic, r) in request.topics.iter().zip(resolved) {
        let partitions = fetch_topic
            .partitions
            .iter()
            .map(|fp| {
                let topic = match &r.topic {
                    Ok(t) => t,
                    Err(code) => return partition_error(fp.partition, *code),
                };
                let partition =
                    match broker.led_partition_at(topic, fp.partition, fp.current_leader_epoch) {
                        Ok(p) => p,
                        Err(code) => return partition_error(fp.partition, code),
                    };
                let mut log = partition.lock();
                let high_watermark = log.log_end_offset();
                let log_start = log.log_start_offset();
                let last_stable = match partition.last_stable_offset(&mut log, producer_config, now)
                {
                    Ok(lso) => lso,
                    Err(e) => {
                        tracing::error!(partition = ?partition, error = %e,
                                "producer state unavailable");
                        return partition_error(fp.partition, ErrorCode::KAFKA_STORAGE_ERROR);
                    }
                };
                let max_offset = if read_committed {
                    last_stable
                } else {
                    high_watermark
                };
                let mut data = PartitionData::default()
                    .with_partition_index(fp.partition)
                    .with_high_watermark(high_watermark)
                    .with_last_stable_offset(last_stable)
                    .with_log_start_offset(log_start)
                    .with_preferred_read_replica(BrokerId(-1))
                    .with_aborted_transactions(read_committed.then(Vec::new))
                    .with_records(Some(Bytes::new()));
                if fp.fetch_offset < log_start || fp.fetch_offset > high_watermark {
                    // Kafka answers an out-of-range fetch with no offsets at all (-1).
                    return data
                        .with_error_code(ErrorCode::OFFSET_OUT_OF_RANGE.code())
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1);
                }
                if fp.fetch_offset >= max_offset || remaining == 0 {
                    return data;
                }
                let partition_max = usize::try_from(fp.partition_max_bytes).unwrap_or(0);
                let limit = partition_max.min(remaining).max(1);
                match log.read_slice(fp.fetch_offset, limit, Some(max_offset), false) {
                    Ok(read) => {
                        let n = read.region.as_ref().map_or(0, FileRegion::len);
                        if total > 0 && n > remaining {
                            return data;
                        }
                        total += n;
                        remaining = remaining.saturating_sub(n);
                        if read_committed {
                            let aborted = log
                                .collect_aborted(fp.fetch_offset, read.next_offset)
                                .into_iter()
                                .map(|(producer_id, first_offset)| {
                                    AbortedTransaction::default()
                                        .with_producer_id(ProducerId(producer_id))
                                        .with_first_offset(first_offset)
                                })
                                .collect();
                            data.aborted_transactions = Some(aborted);
                        }
                        if let Some(region) = read.region {
                            match records_field(region) {
                                Ok((records, sent_apart)) => {
                                    data.records = Some(records);
                                    regions.extend(sent_apart);
                                }
                                Err(e) => {
                                    tracing::error!(error = %e, "reading records failed");
                                    data.error_code = ErrorCode::KAFKA_STORAGE_ERROR.code();
                                }
                            }
                        }
                    }
                    Err(e) => data.error_code = e.kafka_error_code(),
                }
                data
            })
            .collect();
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(topic_name(r.name.clone()))
                .with_topic_id(r.id)
                .with_partitions(partitions),
        );
    }
    Pass {
        response: FetchResponse::default().with_responses(topics),
        regions,
        bytes: total,
    }
}

/// Registers `waker` on every requested partition that exists.
fn watch_all(resolved: &[Resolved], request: &FetchRequest, waker: &Arc<Notify>) {
    for (fetch_topic, r) in request.topics.iter().zip(resolved) {
        if let Ok(topic) = &r.topic {
            for fp in &fetch_topic.partitions {
                if let Some(p) = topic.partition(fp.partition) {
                    p.watch(waker);
                }
            }
        }
    }
}

/// Answers a Fetch: the response, and the file regions its record placeholders stand for (in
/// encoding order; see [`crate::outbound::encode`]).
pub async fn handle(
    broker: &Arc<Broker>,
    version: i16,
    request: &FetchRequest,
) -> (FetchResponse, Vec<FileRegion>) {
    if version >= 7 && request.session_id != 0 {
        let response = FetchResponse::default()
            .with_error_code(ErrorCode::FETCH_SESSION_ID_NOT_FOUND.code())
            .with_session_id(0);
        return (response, Vec::new());
    }
    let wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MAX);
    let deadline = Instant::now() + wait;
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let fetch_bytes_max = broker.config.long("fetch.max.bytes") as usize;
    let waker = Arc::new(Notify::new());
    loop {
        // Register for wake-ups before reading, so an append between the read and the wait is
        // not missed.
        let resolved = resolve(broker, version, request);
        watch_all(&resolved, request, &waker);
        let pass = read_all(broker, version, request, &resolved, fetch_bytes_max);
        let has_error = pass
            .response
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.error_code != 0);
        if pass.bytes >= min_bytes || has_error || Instant::now() >= deadline {
            return (pass.response, pass.regions);
        }
        if tokio::time::timeout_at(deadline, waker.notified())
            .await
            .is_err()
        {
            let pass = read_all(
                broker,
                version,
                request,
                &resolve(broker, version, request),
                fetch_bytes_max,
            );
            return (pass.response, pass.regions);
        }
    }
}
