//! Reading and writing the coordinators' internal topics (`__consumer_offsets`,
//! `__transaction_state`): replay at load, and appending a pass's records — one uncompressed
//! batch per partition, then one group-commit fsync — before the coordinator answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::BytesMut;
use shoal_storage::batch::{encode_batch, BatchHeader, BatchOptions, KeyValue};
use shoal_storage::RecordView;

use crate::broker::{now_ms, Broker, INTERNAL_DECODE_BYTES_MAX};

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
        let now = now_ms();
        let batch = encode_batch(
            &pairs,
            BatchOptions {
                timestamp_ms: now,
                ..BatchOptions::default()
            },
        );
        let mut batch = BytesMut::from(&batch[..]);
        let appended = partition
            .lock()
            .append(&mut batch, now)
            .map_err(|e| e.to_string())?;
        offsets.insert(index, appended.first_offset);
        partition.wake();
        touched.push(partition);
    }
    broker.flusher.flush(touched).await?;
    Ok(offsets)
}
