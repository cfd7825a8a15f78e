//! ListOffsets (earliest, latest, by timestamp, max timestamp) and DeleteRecords.
//!
//! DeleteRecords in a cluster records the new log start through the durability seam
//! (`Durability::record_log_start`) before the local log moves it, so that a node taking the
//! partition over serves the same EARLIEST; a record refused (this node lost the partition, or
//! etcd failed) answers NOT_LEADER_OR_FOLLOWER or KAFKA_STORAGE_ERROR and moves nothing.
//!
//! Isolation (ListOffsets v2+): with read_committed, LATEST is the last stable offset and a
//! timestamp or max-timestamp lookup whose answer is at or above it finds nothing (offset -1),
//! as Kafka's `fetchOffsetForTimestamp` filters by the last fetchable offset; read_uncommitted
//! bounds by the high watermark (the log end offset on one node).

use shoal_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use shoal_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use shoal_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
};
use shoal_protocol::ErrorCode;

use crate::broker::Broker;
use crate::producer_state::state_config;

/// Special timestamps of ListOffsets.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// The version a special timestamp needs; any other negative timestamp is unsupported, as in
/// Kafka (EARLIEST_PENDING_UPLOAD, -6, needs v11, which is not served).
fn unsupported(timestamp: i64, version: i16) -> bool {
    let needs = match timestamp {
        LATEST | EARLIEST => 0,
        MAX_TIMESTAMP => 7,
        EARLIEST_LOCAL => 8,
        LATEST_TIERED => 9,
        ts if ts >= 0 => 0,
        _ => i16::MAX,
    };
    version < needs
}

/// `IsolationLevel` READ_COMMITTED.
const READ_COMMITTED: i8 = 1;

fn lookup(
    broker: &Broker,
    topic: &str,
    index: i32,
    current_leader_epoch: i32,
    timestamp: i64,
    isolation_level: i8,
) -> Result<(i64, i64), ErrorCode> {
    let topic = broker
        .topic(topic)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let partition = broker.led_partition_at(&topic, index, current_leader_epoch)?;
    let mut log = partition.lock();
    let storage = |e: shoal_storage::StorageError| ErrorCode(e.kafka_error_code());
    let last_fetchable = if isolation_level == READ_COMMITTED {
        partition
            .last_stable_offset(&mut log, state_config(&broker.config), broker.now_ms())
            .map_err(|e| {
                tracing::error!(partition = ?partition, error = %e, "producer state unavailable");
                ErrorCode::KAFKA_STORAGE_ERROR
            })?
    } else {
        log.log_end_offset()
    };
    // Kafka: a found offset must be below the last fetchable offset (except for EARLIEST).
    let fetchable = |found: (i64, i64)| {
        if found.1 < last_fetchable {
            found
        } else {
            (-1, -1)
        }
    };
    Ok(match timestamp {
        LATEST => (-1, last_fetchable),
        EARLIEST | EARLIEST_LOCAL => (-1, log.log_start_offset()),
        // Nothing is tiered: the latest tiered offset is "none".
        LATEST_TIERED => (-1, -1),
        MAX_TIMESTAMP => log
            .max_timestamp_offset()
            .map_err(storage)?
            .map(|(offset, ts)| fetchable((ts, offset)))
            .unwrap_or((-1, -1)),
        ts if ts >= 0 => log
            .offset_for_timestamp(ts)
            .map_err(storage)?
            .map(|(offset, ts)| fetchable((ts, offset)))
            .unwrap_or((-1, -1)),
        _ => return Err(ErrorCode::INVALID_REQUEST),
    })
}

pub fn handle(broker: &Broker, version: i16, request: &ListOffsetsRequest) -> ListOffsetsResponse {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut out = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(0);
                    if unsupported(p.timestamp, version) {
                        return out
                            .with_error_code(ErrorCode::UNSUPPORTED_VERSION.code())
                            .with_leader_epoch(-1);
                    }
                    match lookup(
                        broker,
                        t.name.0.as_str(),
                        p.partition_index,
                        p.current_leader_epoch,
                        p.timestamp,
                        request.isolation_level,
                    ) {
                        Ok((ts, offset)) => {
                            out.timestamp = ts;
                            out.offset = offset;
                            if offset < 0 {
                                out.leader_epoch = -1;
                            }
                        }
                        Err(code) => {
                            out.error_code = code.code();
                            out.leader_epoch = -1;
                        }
                    }
                    if version < 4 {
                        // No LeaderEpoch before v4: a value would not encode.
                        out.leader_epoch = -1;
                    }
                    out
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

async fn delete_before(
    broker: &Broker,
    topic: &str,
    index: i32,
    offset: i64,
) -> Result<i64, ErrorCode> {
    let topic = broker
        .topic(topic)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let partition = broker.led_partition(&topic, index)?;
    let in_range = |log: &shoal_storage::Log| {
        let high_watermark = log.log_end_offset();
        let offset = if offset == -1 { high_watermark } else { offset };
        if offset < 0 || offset > high_watermark {
            return Err(ErrorCode::OFFSET_OUT_OF_RANGE);
        }
        Ok(offset)
    };
    let storage = |e: shoal_storage::StorageError| ErrorCode(e.kafka_error_code());
    if !broker.durability.records_log_start() {
        let mut log = partition.lock();
        let offset = in_range(&log)?;
        return log.delete_records_before(offset).map_err(storage);
    }
    // A cluster: the start is recorded where a new owner finds it before the local log moves
    // it; a refused record leaves the local start where it was.
    let (offset, start) = {
        let log = partition.lock();
        (in_range(&log)?, log.log_start_offset())
    };
    if offset > start {
        broker
            .durability
            .record_log_start(partition.clone(), offset)
            .await
            .map_err(|e| {
                tracing::warn!(partition = ?partition, error = %e, "log start not recorded");
                e.error_code()
            })?;
    }
    let mut log = partition.lock();
    log.delete_records_before(offset).map_err(storage)
}

/// DeleteRecords: each partition's log start moves to the offset asked (-1: the high
/// watermark), through the durability seam in a cluster.
pub async fn delete_records(
    broker: &Broker,
    request: &DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let mut out = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            match delete_before(broker, t.name.0.as_str(), p.partition_index, p.offset).await {
                Ok(low) => out.low_watermark = low,
                Err(code) => out.error_code = code.code(),
            }
            partitions.push(out);
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
