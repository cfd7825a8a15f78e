//! The coordinator runtime's I/O on the coordinators' internal topics (`__consumer_offsets`,
//! `__transaction_state`, `__share_group_state`): replay at load, and the append of a pass's
//! records before the coordinator answers — per partition, in the order emitted, consecutive
//! records of one framing in one uncompressed batch (plain, or a producer's transactional
//! batch recorded in the partition's producer state), a marker as a control batch of its own;
//! then one group-commit fsync of every partition touched.
//!
//! Must not: append a transactional batch of a producer whose newer marker is already on the
//! partition, or a marker the partition's producer state refuses (the shard decides these
//! first; this is the safety net, and it fails the pass).

use std::collections::BTreeMap;

use bytes::BytesMut;
use shoal_core::coordinator::{EncodedRecord, Framing};
use shoal_storage::batch::{encode_batch, BatchHeader, BatchOptions, KeyValue};
use shoal_storage::RecordView;

use crate::node::{NodeState, INTERNAL_DECODE_BYTES_MAX};
use crate::topic_registry::Partition;

/// Partitions of an internal topic (at least 1, so partitioning by key never divides by zero).
pub fn partition_count(node: &NodeState, topic: &str) -> u32 {
    node.topic(topic)
        .map(|t| t.partition_count() as u32)
        .unwrap_or(1)
        .max(1)
}

/// What a replay visitor sees: a data record, or a control batch (transaction marker).
pub enum Replayed<'a> {
    Record {
        partition: i32,
        record: &'a RecordView,
        /// Its batch's: plain, or a producer's transactional batch.
        framing: Framing,
    },
    Control {
        partition: i32,
        header: &'a BatchHeader,
        records: &'a [RecordView],
    },
}

/// Calls `visit` for every record of the partitions `only` of `topic`, in log order per
/// partition. A missing topic replays nothing.
///
/// # Errors
/// A storage error reading or decoding the log.
pub fn replay_topic(
    node: &NodeState,
    topic: &str,
    only: &[i32],
    mut visit: impl FnMut(Replayed<'_>),
) -> anyhow::Result<()> {
    let Some(topic) = node.topic(topic) else {
        return Ok(());
    };
    for partition in topic.partitions() {
        if !only.contains(&partition.index) {
            continue;
        }
        let log = partition.lock();
        for batch in log.iter_batches(0) {
            let batch = batch?;
            let header = &batch.header;
            let records = shoal_storage::decode_records(&batch.bytes, INTERNAL_DECODE_BYTES_MAX)?;
            if header.is_control() {
                visit(Replayed::Control {
                    partition: partition.index,
                    header,
                    records: &records,
                });
                continue;
            }
            let framing = if header.is_transactional() {
                Framing::Transactional {
                    producer_id: header.producer_id(),
                    producer_epoch: header.producer_epoch(),
                }
            } else {
                Framing::Plain
            };
            for record in &records {
                visit(Replayed::Record {
                    partition: partition.index,
                    record,
                    framing,
                });
            }
        }
    }
    Ok(())
}

/// One record of a pass to append: its partition, framing and bytes (None for a marker).
pub struct ToAppend {
    pub partition: u32,
    pub framing: Framing,
    pub encoded: Option<EncodedRecord>,
}

/// Appends a pass's records to `topic` (see the module docs) and fsyncs every partition
/// touched. Returns each record's (partition, offset), in the order given.
///
/// # Errors
/// The topic or a partition is missing, a batch is refused (a fenced transactional batch or
/// marker), an append or the fsync fails. Batches before the failure may be in the log (not
/// known durable): the caller rebuilds its state from the log.
pub async fn append_pass(
    node: &NodeState,
    topic: &str,
    records: Vec<ToAppend>,
) -> Result<Vec<(i32, i64)>, String> {
    let mut landed = vec![(0, 0); records.len()];
    if records.is_empty() {
        return Ok(landed);
    }
    let t = node
        .topic(topic)
        .ok_or_else(|| format!("{topic} is missing"))?;
    let mut by_partition: BTreeMap<u32, Vec<(usize, ToAppend)>> = BTreeMap::new();
    for (i, r) in records.into_iter().enumerate() {
        by_partition.entry(r.partition).or_default().push((i, r));
    }
    let mut touched = Vec::with_capacity(by_partition.len());
    for (index, records) in by_partition {
        let partition = t
            .partition(index as i32)
            .ok_or_else(|| format!("{topic}-{index} is missing"))?;
        let mut rest = &records[..];
        while let Some((_, head)) = rest.first() {
            let framing = head.framing;
            let n = match framing {
                Framing::Marker { .. } => 1,
                _ => rest
                    .iter()
                    .take_while(|(_, r)| r.framing == framing)
                    .count(),
            };
            let (batch, after) = rest.split_at(n);
            let base = append_batch(node, &partition, framing, batch)?;
            for (k, (i, _)) in batch.iter().enumerate() {
                landed[*i] = (index as i32, base + k as i64);
            }
            rest = after;
        }
        partition.wake();
        touched.push(partition);
    }
    node.durability
        .commit(touched)
        .await
        .map_err(|e| e.to_string())?;
    Ok(landed)
}

/// Appends one batch of `framing` holding `records` to `partition`; returns its base offset.
fn append_batch(
    node: &NodeState,
    partition: &Partition,
    framing: Framing,
    records: &[(usize, ToAppend)],
) -> Result<i64, String> {
    let (producer_id, producer_epoch) = match framing {
        Framing::Marker {
            marker,
            coordinator_epoch,
        } => {
            return crate::markers::write_marker(
                node,
                partition,
                marker.producer_id,
                marker.producer_epoch,
                marker.commit,
                coordinator_epoch,
            )
            .map_err(|code| format!("marker refused on {partition:?}: error {}", code.0));
        }
        Framing::Transactional {
            producer_id,
            producer_epoch,
        } => (Some(producer_id), producer_epoch),
        Framing::Plain => (None, 0),
    };
    let pairs: Vec<KeyValue<'_>> = records
        .iter()
        .filter_map(|(_, r)| r.encoded.as_ref())
        .map(|(k, v)| (Some(&k[..]), v.as_deref()))
        .collect();
    let now = node.now_ms();
    let mut options = BatchOptions {
        timestamp_ms: now,
        ..BatchOptions::default()
    };
    if let Some(id) = producer_id {
        options.producer_id = id;
        options.producer_epoch = producer_epoch;
        options.transactional = true;
    }
    let batch = encode_batch(&pairs, options);
    let mut batch = BytesMut::from(&batch[..]);
    let Some(id) = producer_id else {
        let appended = partition
            .lock()
            .append(&mut batch, now)
            .map_err(|e| e.to_string())?;
        return Ok(appended.first_offset);
    };
    crate::markers::append_for_producer(node, partition, id, producer_epoch, &mut batch)
}
