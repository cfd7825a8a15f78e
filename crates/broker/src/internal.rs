//! Reading and writing the coordinators' internal topics (`__consumer_offsets`,
//! `__transaction_state`, `__share_group_state`): replay at load, and appending a pass's
//! records — one uncompressed batch per partition, then one group-commit fsync — before the
//! coordinator answers; a producer's transactional write (KIP-1289 stagings) is the same
//! with the producer's id, epoch and transactional bit on the batch.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::BytesMut;
use shoal_storage::batch::{encode_batch, BatchHeader, BatchOptions, KeyValue};
use shoal_storage::RecordView;

use crate::broker::{Broker, INTERNAL_DECODE_BYTES_MAX};
use crate::producers::state_config;
use shoal_core::producer_state::ProducerId;

/// Bytes read per call while replaying.
const REPLAY_READ_BYTES: usize = 8 * 1024 * 1024;

/// Partitions of an internal topic (at least 1, so partitioning by key never divides by zero).
pub fn partition_count(broker: &Broker, topic: &str) -> u32 {
    broker
        .topic(topic)
        .map(|t| t.partition_count() as u32)
        .unwrap_or(1)
        .max(1)
}

/// A record's encoded key and value (None = tombstone).
pub type EncodedRecord = (Vec<u8>, Option<Vec<u8>>);

/// What a replay visitor sees: a data record, or a control batch (transaction marker).
pub enum Replayed<'a> {
    Record {
        partition: i32,
        record: &'a RecordView,
    },
    Control {
        partition: i32,
        header: &'a BatchHeader,
        records: &'a [RecordView],
    },
}

/// Calls `visit` for every record of every partition of `topic`, in log order per partition.
/// A missing topic replays nothing.
///
/// # Errors
/// A storage error reading or decoding the log.
pub fn replay_topic(
    broker: &Broker,
    topic: &str,
    mut visit: impl FnMut(Replayed<'_>),
) -> anyhow::Result<()> {
    let Some(topic) = broker.topic(topic) else {
        return Ok(());
    };
    for partition in topic.partitions() {
        let log = partition.lock();
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let read = log.read(offset, REPLAY_READ_BYTES, None)?;
            if read.records.is_empty() {
                break;
            }
            for batch in shoal_storage::batch::split_batches(&read.records) {
                let (header, range) = batch?;
                offset = header.next_offset();
                let records =
                    shoal_storage::decode_records(&read.records[range], INTERNAL_DECODE_BYTES_MAX)?;
                if header.is_control() {
                    visit(Replayed::Control {
                        partition: partition.index,
                        header: &header,
                        records: &records,
                    });
                    continue;
                }
                for record in &records {
                    visit(Replayed::Record {
                        partition: partition.index,
                        record,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Appends each partition's records of `topic` as one batch and fsyncs them all.
///
/// # Errors
/// The topic or a partition is missing, an append fails, or the fsync fails.
pub async fn append_and_flush(
    broker: &Arc<Broker>,
    topic: &str,
    by_partition: BTreeMap<u32, Vec<EncodedRecord>>,
) -> Result<(), String> {
    append_and_flush_at(broker, topic, by_partition)
        .await
        .map(|_| ())
}

/// [`append_and_flush`], returning the offset of each partition's batch (its first record's).
///
/// # Errors
/// As [`append_and_flush`].
pub async fn append_and_flush_at(
    broker: &Arc<Broker>,
    topic: &str,
    by_partition: BTreeMap<u32, Vec<EncodedRecord>>,
) -> Result<BTreeMap<u32, i64>, String> {
    append_batches(broker, topic, None, by_partition)
        .await
        .map_err(|e| e.to_string())
}

/// The producer a transactional write to an internal topic belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// [`append_and_flush_at`] as `producer`'s transactional batches: each partition's records
/// are one batch with the producer's id and epoch and the transactional bit, recorded in the
/// partition's producer state (so its last stable offset stays below the batch until the
/// transaction's marker), with no sequence (the coordinator writes them, as Kafka's coordinator
/// runtime writes transactional offset commits). The transaction's COMMIT or ABORT marker on
/// each partition resolves them (KIP-1289 stagings in `__share_group_state`).
///
/// # Errors
/// [`AppendError::Fenced`] if a marker of a newer epoch of the producer is already on a
/// partition (nothing is appended there, nor after it); otherwise as [`append_and_flush`], or
/// the producer state cannot be loaded.
pub async fn append_transactional_and_flush_at(
    broker: &Arc<Broker>,
    topic: &str,
    producer: TxnProducer,
    by_partition: BTreeMap<u32, Vec<EncodedRecord>>,
) -> Result<BTreeMap<u32, i64>, AppendError> {
    append_batches(broker, topic, Some(producer), by_partition).await
}

/// Why an internal append failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// A transactional write's producer epoch is older than a marker already on a partition.
    Fenced,
    /// The topic or a partition is missing, an append or the fsync failed.
    Failed(String),
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::Fenced => f.write_str("the producer's transaction already ended"),
            AppendError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<String> for AppendError {
    fn from(e: String) -> Self {
        AppendError::Failed(e)
    }
}

async fn append_batches(
    broker: &Arc<Broker>,
    topic: &str,
    producer: Option<TxnProducer>,
    by_partition: BTreeMap<u32, Vec<EncodedRecord>>,
) -> Result<BTreeMap<u32, i64>, AppendError> {
    let mut offsets = BTreeMap::new();
    if by_partition.is_empty() {
        return Ok(offsets);
    }
    let t = broker
        .topic(topic)
        .ok_or_else(|| format!("{topic} is missing"))?;
    let mut touched = Vec::new();
    for (index, encoded) in by_partition {
        let partition = t
            .partition(index as i32)
            .ok_or_else(|| format!("{topic}-{index} is missing"))?;
        let pairs: Vec<KeyValue<'_>> = encoded
            .iter()
            .map(|(k, v)| (Some(&k[..]), v.as_deref()))
            .collect();
        let now = broker.now_ms();
        let mut options = BatchOptions {
            timestamp_ms: now,
            ..BatchOptions::default()
        };
        if let Some(p) = producer {
            options.producer_id = p.producer_id;
            options.producer_epoch = p.producer_epoch;
            options.transactional = true;
        }
        let batch = encode_batch(&pairs, options);
        let mut batch = BytesMut::from(&batch[..]);
        let first_offset = {
            let mut log = partition.lock();
            let mut producers = match producer {
                Some(_) => Some(
                    partition
                        .producers(&mut log, state_config(&broker.config), now)
                        .map_err(|e| AppendError::Failed(e.to_string()))?,
                ),
                None => None,
            };
            if let (Some(p), Some(state)) = (producer, producers.as_ref()) {
                // A marker of a newer epoch already ended this producer's transaction here
                // (the coordinator aborted it meanwhile): the write would belong to no
                // transaction and nothing would ever resolve it.
                let current = state
                    .state()
                    .entry(ProducerId(p.producer_id))
                    .map(|e| e.epoch().0);
                if current.is_some_and(|epoch| epoch > p.producer_epoch) {
                    return Err(AppendError::Fenced);
                }
            }
            let appended = log
                .append(&mut batch, now)
                .map_err(|e| AppendError::Failed(e.to_string()))?;
            if let Some(p) = producers.as_mut() {
                if let Err(e) = p.on_appended(&mut log, &batch) {
                    // The batch and the in-memory state stand; a snapshot write failed.
                    tracing::warn!(topic, partition = index, error = %e,
                        "recording a transactional internal batch");
                }
            }
            appended.first_offset
        };
        offsets.insert(index, first_offset);
        partition.wake();
        touched.push(partition);
    }
    if let Err(e) = broker.durability.commit(touched).await {
        return Err(AppendError::Failed(e.to_string()));
    }
    Ok(offsets)
}
