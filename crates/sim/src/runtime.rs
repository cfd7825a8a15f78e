//! The coordinator runtime's I/O over the simulated disk: what `shoal_broker`'s
//! `coordinators::runtime` and `coordinators::log_io` do around the order of work they share
//! with this crate (`shoal_core::coordinator::Passes`), made synchronous.
//!
//! - [`replay`]: a shard rebuilt from its topic's logs — each record decoded with its batch's
//!   framing and reported where it landed before it is replayed, each control batch replayed
//!   as a marker — as the broker's load does.
//! - [`Coordinator::pass`]: one pass of the shard (fed inputs, queued inputs, a tick), its
//!   records appended per partition in the order emitted (consecutive records of one framing
//!   in one batch, a transactional batch recorded in the partition's producer state, a marker
//!   as a control batch of its own), every partition touched flushed, the landing reported to
//!   the shard, and only then the pass's replies and effects delivered. An append refused by
//!   the producer state (the safety net behind the shard's own fences) fails the pass: its
//!   waiters are returned, for the caller to rebuild the shard from the logs.
//!
//! What differs from the broker is only I/O: no queue (each call is one pass), no timer task,
//! no encoding of record batches (the simulated disk keeps typed batches).

use std::collections::BTreeMap;

use shoal_core::coordinator::{
    CoordinatorShard, Delivered, Emitted, Framing, Passes, Pending, Queued, ShardRecord, TxnMarker,
};
use shoal_core::producer_state::{
    BatchInfo, ProducerEpoch, ProducerId, ProducerStateConfig, ProducerStateManager,
};

use crate::disk::{log_name, Batch, Body, Disk, Record};

/// Each log's producer state, by log name.
pub type Producers = BTreeMap<String, ProducerStateManager>;

/// A marker appended to a log: (log name, offset, marker).
pub type AppendedMarker = (String, i64, TxnMarker);

pub fn batch_info(b: &Batch) -> BatchInfo {
    BatchInfo {
        producer_id: ProducerId(b.producer_id),
        producer_epoch: ProducerEpoch(b.producer_epoch),
        base_sequence: b.base_sequence,
        last_offset_delta: (b.len() - 1) as i32,
        max_timestamp: 0,
        transactional: b.transactional,
        control: b.is_control(),
    }
}

fn producer_state<'a>(producers: &'a mut Producers, name: &str) -> &'a mut ProducerStateManager {
    producers
        .entry(name.to_string())
        .or_insert_with(|| ProducerStateManager::new(ProducerStateConfig::default()))
}

/// Appends a COMMIT or ABORT marker of `marker.producer_id` to log `name` once its producer
/// state accepts it (as `shoal_broker::markers::write_marker`); returns its offset. Not
/// flushed.
///
/// # Errors
/// The producer state refuses it (an older producer epoch, a fenced coordinator epoch).
pub fn append_marker(
    disk: &mut Disk,
    producers: &mut Producers,
    name: &str,
    marker: TxnMarker,
    coordinator_epoch: i32,
) -> Result<i64, String> {
    let ps = producer_state(producers, name);
    let (pid, epoch) = (
        ProducerId(marker.producer_id),
        ProducerEpoch(marker.producer_epoch),
    );
    ps.check_marker(pid, epoch, coordinator_epoch)
        .map_err(|e| e.to_string())?;
    let batch = Batch {
        base_offset: 0,
        producer_id: marker.producer_id,
        producer_epoch: marker.producer_epoch,
        base_sequence: -1,
        transactional: true,
        body: Body::Control {
            commit: marker.commit,
            coordinator_epoch,
        },
    };
    let info = batch_info(&batch);
    let offset = disk.append(name, batch);
    ps.on_append(&info, offset);
    ps.on_marker_coordinator_epoch(pid, coordinator_epoch);
    Ok(offset)
}

/// Appends one batch of `framing` holding `records` to log `name`; returns its base offset.
fn append_batch(
    disk: &mut Disk,
    producers: &mut Producers,
    name: &str,
    framing: Framing,
    records: Vec<Record>,
) -> Result<i64, String> {
    match framing {
        Framing::Marker {
            marker,
            coordinator_epoch,
        } => append_marker(disk, producers, name, marker, coordinator_epoch),
        Framing::Plain => Ok(disk.append(name, Batch::plain(records))),
        Framing::Transactional {
            producer_id,
            producer_epoch,
        } => append_for_producer(
            disk,
            producers,
            name,
            (producer_id, producer_epoch),
            records,
        ),
    }
}

/// Appends `records` to log `name` as a transactional batch of the producer without a
/// sequence, recorded in the log's producer state (as `shoal_broker::markers::
/// append_for_producer`); returns its base offset. Not flushed.
///
/// # Errors
/// A newer epoch of the producer already wrote there (its transaction here is over).
pub fn append_for_producer(
    disk: &mut Disk,
    producers: &mut Producers,
    name: &str,
    (producer_id, producer_epoch): (i64, i16),
    records: Vec<Record>,
) -> Result<i64, String> {
    let ps = producer_state(producers, name);
    let current = ps.entry(ProducerId(producer_id)).map(|e| e.epoch().0);
    if current.is_some_and(|epoch| epoch > producer_epoch) {
        return Err(format!(
            "transactional batch of producer {producer_id} at epoch {producer_epoch} fenced on {name}"
        ));
    }
    let batch = Batch {
        base_offset: 0,
        producer_id,
        producer_epoch,
        base_sequence: -1,
        transactional: true,
        body: Body::Data(records),
    };
    let info = batch_info(&batch);
    let offset = disk.append(name, batch);
    ps.on_append(&info, offset);
    Ok(offset)
}

/// Replays `topic` (`partitions` logs) into `shard`: records with their batch's framing,
/// control batches as markers, each reported where it landed first. Undecodable records are
/// skipped with a note, as the broker skips them with a warning.
pub fn replay<S: CoordinatorShard>(
    shard: &mut S,
    topic: &str,
    partitions: u32,
    disk: &Disk,
    notes: &mut Vec<String>,
) {
    for p in 0..partitions as i32 {
        for batch in disk.log(&log_name(topic, p)).batches() {
            match &batch.body {
                Body::Control { commit, .. } => {
                    shard.landed(p, batch.base_offset, None);
                    shard.replay_marker(TxnMarker {
                        partition: p,
                        producer_id: batch.producer_id,
                        producer_epoch: batch.producer_epoch,
                        commit: *commit,
                    });
                }
                Body::Data(records) => {
                    let framing = if batch.transactional {
                        Framing::Transactional {
                            producer_id: batch.producer_id,
                            producer_epoch: batch.producer_epoch,
                        }
                    } else {
                        Framing::Plain
                    };
                    for (i, r) in records.iter().enumerate() {
                        match S::Record::decode(&r.key, r.value.as_deref()) {
                            Ok(record) => {
                                let record = record.with_framing(framing);
                                shard.landed(p, batch.base_offset + i as i64, Some(&record));
                                shard.replay(record);
                            }
                            Err(e) => notes.push(format!("undecodable {topic} record: {e}")),
                        }
                    }
                }
            }
        }
    }
}

/// What a durable pass gave: its deliveries, and the markers it appended.
pub struct Appended<S: CoordinatorShard, W> {
    pub delivered: Delivered<S, W>,
    pub markers: Vec<AppendedMarker>,
}

/// One coordinator driven over the simulated disk.
pub struct Coordinator<S: CoordinatorShard, W> {
    topic: &'static str,
    partitions: u32,
    passes: Passes<S, W>,
}

impl<S: CoordinatorShard, W> Coordinator<S, W> {
    /// Drives `shard`, already replayed from `topic`'s `partitions` logs.
    pub fn new(topic: &'static str, partitions: u32, shard: S) -> Self {
        Self {
            topic,
            partitions: partitions.max(1),
            passes: Passes::new(shard),
        }
    }

    pub fn shard(&self) -> &S {
        self.passes.shard()
    }

    /// Replaces the shard (a reload after a failed pass).
    pub fn replace(&mut self, shard: S) {
        self.passes.replace(shard);
    }

    /// The first pass after a load: what the load emitted, made durable.
    ///
    /// # Errors
    /// The append failed: the waiters dropped (none, after a load).
    pub fn resume(
        &mut self,
        disk: &mut Disk,
        producers: &mut Producers,
        loaded: Emitted<S>,
    ) -> Result<Appended<S, W>, Vec<W>> {
        let pending = self.passes.resume(loaded);
        self.finish(disk, producers, pending)
    }

    /// One pass at `now_ms`: `fed`, then `queued` in order, then a tick; appended, flushed,
    /// then delivered.
    ///
    /// # Errors
    /// The append failed: every waiter, dropped, for the caller to rebuild the shard.
    pub fn pass(
        &mut self,
        disk: &mut Disk,
        producers: &mut Producers,
        now_ms: i64,
        fed: Vec<S::Input>,
        queued: Vec<Queued<S, W>>,
    ) -> Result<Appended<S, W>, Vec<W>> {
        let pending = self.passes.pass(now_ms, fed, queued);
        self.finish(disk, producers, pending)
    }

    fn finish(
        &mut self,
        disk: &mut Disk,
        producers: &mut Producers,
        pending: Pending<S, W>,
    ) -> Result<Appended<S, W>, Vec<W>> {
        match self.append(disk, producers, &pending.records) {
            Ok((landed, markers)) => {
                for (record, (partition, offset)) in pending.records.iter().zip(landed) {
                    self.passes
                        .shard_mut()
                        .landed(partition, offset, Some(record));
                }
                Ok(Appended {
                    delivered: self.passes.durable(pending),
                    markers,
                })
            }
            Err(_) => Err(self.passes.failed(pending)),
        }
    }

    /// Appends `records` as their framing says and flushes every log touched. Returns where
    /// each landed and the markers appended.
    #[allow(clippy::type_complexity)]
    fn append(
        &self,
        disk: &mut Disk,
        producers: &mut Producers,
        records: &[S::Record],
    ) -> Result<(Vec<(i32, i64)>, Vec<AppendedMarker>), String> {
        let mut landed = vec![(0, 0); records.len()];
        let mut markers = Vec::new();
        let mut by_partition: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            by_partition
                .entry(r.partition(self.partitions))
                .or_default()
                .push(i);
        }
        let mut touched = Vec::new();
        for (p, indices) in by_partition {
            let name = log_name(self.topic, p as i32);
            let mut rest = &indices[..];
            while let Some(&head) = rest.first() {
                let framing = records[head].framing();
                let n = match framing {
                    Framing::Marker { .. } => 1,
                    _ => rest
                        .iter()
                        .take_while(|&&i| records[i].framing() == framing)
                        .count(),
                };
                let (batch, after) = rest.split_at(n);
                let encoded = match framing {
                    Framing::Marker { .. } => Vec::new(),
                    _ => batch
                        .iter()
                        .map(|&i| {
                            records[i]
                                .encode()
                                .map(|(key, value)| Record { key, value })
                        })
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| e.to_string())?,
                };
                let base = append_batch(disk, producers, &name, framing, encoded)?;
                if let Framing::Marker { marker, .. } = framing {
                    markers.push((name.clone(), base, marker));
                }
                for (k, &i) in batch.iter().enumerate() {
                    landed[i] = (p as i32, base + k as i64);
                }
                rest = after;
            }
            touched.push(name);
        }
        for name in touched {
            disk.flush(&name);
        }
        Ok((landed, markers))
    }
}
