//! The idempotent producer's shell: producer-id allocation for InitProducerId and each
//! partition's producer state (the core's [`ProducerStateManager`]) kept in step with its log
//! and persisted as snapshot files.
//!
//! Producer ids: handed out from blocks of [`PRODUCER_ID_BLOCK_SIZE`]; the end of the current
//! block is written and fsynced to `producer-id-block` in the data directory *before* any id of
//! the block is handed out, so an id is never reused across restarts (a crash wastes at most the
//! rest of a block), as Kafka's AllocateProducerIds blocks do.
//!
//! Partition state: loaded on the first produce with a producer id (internal topics never
//! need it) from the newest valid snapshot at or below the log end offset plus the batches
//! after it; snapshots are written without fsync when a segment rolls or every
//! [`SNAPSHOT_INTERVAL_BYTES`], and with fsync at clean shutdown. Snapshots above the log end
//! offset (the log lost its tail in recovery) are deleted when the partition is opened, so state
//! never points past the log end.
//!
//! Invariants: a loaded [`PartitionProducers`] covers exactly the log below `end_offset`; it is
//! only used under the partition's log lock (lock order: log, then producers).
//!
//! Must not: fsync under the partition lock except at shutdown.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use shoal_core::producer_state::{
    BatchInfo, BatchMetadata, Decision, ProducerEntry, ProducerEpoch, ProducerId,
    ProducerStateConfig, ProducerStateError, ProducerStateManager,
};
use shoal_storage::batch::split_batches;
use shoal_storage::producer_snapshot::{self, ProducerSnapshot, SnapshotBatch, SnapshotEntry};
use shoal_storage::{BatchHeader, Log, StorageError};

use crate::config::BrokerConfig;

/// Producer ids reserved per fsync of the block file.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// File in the data directory holding the end of the last reserved block.
pub const PRODUCER_ID_BLOCK_FILE: &str = "producer-id-block";
/// Bytes appended to a partition between two producer snapshots.
pub const SNAPSHOT_INTERVAL_BYTES: u64 = 64 * 1024 * 1024;
/// Snapshots kept per partition (the newest; an older one is the fallback if the newest is torn).
pub const SNAPSHOTS_KEPT: usize = 2;
/// Kafka's `producer.id.expiration.check.interval.ms` default.
pub const PRODUCER_ID_EXPIRATION_CHECK_INTERVAL: Duration = Duration::from_millis(600_000);
/// Kafka's key for the producer expiration time.
pub const PRODUCER_ID_EXPIRATION_MS: &str = "producer.id.expiration.ms";

/// Hands out producer ids, never twice, also across restarts.
#[derive(Debug)]
pub struct ProducerIdAllocator {
    path: PathBuf,
    /// (next id, end of the reserved block).
    state: Mutex<(i64, i64)>,
}

/// Why no producer id could be handed out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocateError {
    #[error("cannot reserve producer ids in {path:?}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("producer ids are exhausted")]
    Exhausted,
}

impl ProducerIdAllocator {
    /// Reads the block file in `data_dir`; ids start at the end of the last reserved block.
    ///
    /// # Errors
    /// The file exists but cannot be read or parsed (refusing to start beats reusing ids).
    pub fn open(data_dir: &Path) -> anyhow::Result<Self> {
        let path = data_dir.join(PRODUCER_ID_BLOCK_FILE);
        let next = match fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| anyhow::anyhow!("{path:?} does not hold a producer id"))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => anyhow::bail!("cannot read {path:?}: {e}"),
        };
        Ok(ProducerIdAllocator {
            path,
            state: Mutex::new((next, next)),
        })
    }

    /// A fresh producer id. Blocks on an fsync once per [`PRODUCER_ID_BLOCK_SIZE`] ids.
    ///
    /// # Errors
    /// The block file cannot be written (no id is handed out), or ids are exhausted.
    pub fn allocate(&self) -> Result<i64, AllocateError> {
        let mut state = self.state.lock().expect("producer id lock poisoned");
        let (next, end) = *state;
        if next == end {
            let new_end = end
                .checked_add(PRODUCER_ID_BLOCK_SIZE)
                .ok_or(AllocateError::Exhausted)?;
            write_durably(&self.path, format!("{new_end}\n").as_bytes()).map_err(|source| {
                AllocateError::Io {
                    path: self.path.clone(),
                    source,
                }
            })?;
            state.1 = new_end;
        }
        state.0 = next + 1;
        Ok(next)
    }
}

fn write_durably(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)?;
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// The producer-state configuration of the broker (`producer.id.expiration.ms` if set).
pub fn state_config(config: &BrokerConfig) -> ProducerStateConfig {
    let mut out = ProducerStateConfig::default();
    if let Some(ms) = config
        .values()
        .get(PRODUCER_ID_EXPIRATION_MS)
        .and_then(|v| v.parse::<u64>().ok())
    {
        out.producer_id_expiration = Duration::from_millis(ms);
    }
    out
}

/// The producer fields of a stored or incoming batch header.
pub fn batch_info(h: &BatchHeader) -> BatchInfo {
    BatchInfo {
        producer_id: ProducerId(h.producer_id()),
        producer_epoch: ProducerEpoch(h.producer_epoch()),
        base_sequence: h.base_sequence(),
        last_offset_delta: h.last_offset_delta(),
        max_timestamp: h.max_timestamp(),
        transactional: h.is_transactional(),
        control: h.is_control(),
    }
}

/// Deletes snapshots above the log end offset: they describe data recovery removed.
///
/// # Errors
/// `Io`.
pub fn remove_stale_snapshots(log: &Log) -> Result<(), StorageError> {
    let end = log.log_end_offset();
    let removed = producer_snapshot::delete_where(log.dir(), |o| o > end)?;
    if removed > 0 {
        tracing::info!(dir = ?log.dir(), removed, end, "removed producer snapshots past the log end");
    }
    Ok(())
}

/// One partition's producer state, in step with its log.
#[derive(Debug)]
pub struct PartitionProducers {
    state: ProducerStateManager,
    dir: PathBuf,
    /// The state covers every batch below this offset.
    end_offset: i64,
    /// Offset of the newest snapshot written or loaded (-1: none).
    snapshot_offset: i64,
    bytes_since_snapshot: u64,
    segments_at_snapshot: usize,
    last_expire_ms: i64,
}

impl PartitionProducers {
    /// Loads the state of `log`: newest valid snapshot at or below the log end, then the
    /// batches after it; expired producers are dropped.
    ///
    /// # Errors
    /// `Io` / `CorruptLog` reading the directory or the log.
    pub fn load(log: &Log, config: ProducerStateConfig, now_ms: i64) -> Result<Self, StorageError> {
        let mut me = PartitionProducers {
            state: ProducerStateManager::new(config),
            dir: log.dir().to_path_buf(),
            end_offset: 0,
            snapshot_offset: -1,
            bytes_since_snapshot: 0,
            segments_at_snapshot: log.segment_count(),
            last_expire_ms: now_ms,
        };
        me.rebuild(log, now_ms)?;
        Ok(me)
    }

    fn rebuild(&mut self, log: &Log, now_ms: i64) -> Result<(), StorageError> {
        remove_stale_snapshots(log)?;
        self.state.clear();
        let end = log.log_end_offset();
        let snapshot = producer_snapshot::load_latest(log.dir(), end)?;
        let from = match snapshot {
            Some(s) => {
                self.snapshot_offset = s.offset;
                self.restore(&s);
                s.offset
            }
            None => {
                self.snapshot_offset = -1;
                0
            }
        };
        self.end_offset = from;
        let replayed = self.catch_up(log)?;
        self.state.expire(now_ms);
        self.last_expire_ms = now_ms;
        tracing::debug!(
            dir = ?self.dir, from, end, replayed, producers = self.state.len(),
            "loaded producer state"
        );
        if replayed > 0 {
            // Save the scan for next time (not fsynced: a torn file is skipped at load).
            self.snapshot(log, false)?;
        }
        Ok(())
    }

    fn restore(&mut self, s: &ProducerSnapshot) {
        for e in &s.entries {
            let batches = e.batches.iter().map(|b| BatchMetadata {
                first_sequence: b.first_sequence,
                last_sequence: b.last_sequence,
                first_offset: b.first_offset,
                last_offset: b.last_offset,
                max_timestamp: b.max_timestamp,
            });
            let txn = (e.current_txn_first_offset >= 0).then_some(e.current_txn_first_offset);
            self.state.restore(
                ProducerId(e.producer_id),
                ProducerEntry::restore(ProducerEpoch(e.epoch), batches, e.last_timestamp, txn),
            );
        }
    }

    /// Applies the log's batches from `end_offset` to the log end; returns how many.
    fn catch_up(&mut self, log: &Log) -> Result<usize, StorageError> {
        let mut replayed = 0;
        for batch in log.iter_batches(self.end_offset) {
            let batch = batch?;
            let h = &batch.header;
            if h.next_offset() <= self.end_offset {
                continue;
            }
            self.state.on_append(&batch_info(h), h.base_offset());
            self.end_offset = h.next_offset();
            replayed += 1;
        }
        self.end_offset = log.log_end_offset();
        Ok(replayed)
    }

    fn catch_up_or_rebuild(&mut self, log: &Log) -> Result<(), StorageError> {
        let end = log.log_end_offset();
        if self.end_offset > end {
            // The log lost its tail under us (truncation): rebuild rather than point past it.
            tracing::warn!(dir = ?self.dir, state = self.end_offset, end, "log truncated; rebuilding producer state");
            let now_ms = self.last_expire_ms;
            self.rebuild(log, now_ms)?;
        } else if self.end_offset < end {
            self.catch_up(log)?;
        }
        Ok(())
    }

    /// Decides what to do with a produce request's batches (headers as received). Brings the
    /// state in step with the log first and expires idle producers when due.
    ///
    /// # Errors
    /// Outer: the log could not be read to catch up. Inner: the producer-state refusal.
    pub fn check(
        &mut self,
        log: &Log,
        batches: &[BatchInfo],
        now_ms: i64,
    ) -> Result<Result<Decision, ProducerStateError>, StorageError> {
        self.catch_up_or_rebuild(log)?;
        let interval = PRODUCER_ID_EXPIRATION_CHECK_INTERVAL.as_millis() as i64;
        if now_ms.saturating_sub(self.last_expire_ms) >= interval {
            let expired = self.state.expire(now_ms);
            if expired > 0 {
                tracing::debug!(dir = ?self.dir, expired, "expired idle producers");
            }
            self.last_expire_ms = now_ms;
        }
        Ok(self.state.check(batches))
    }

    /// Records a batch set just appended (`appended` holds it with the assigned offsets) and
    /// writes a snapshot when a segment rolled or enough bytes went by.
    ///
    /// # Errors
    /// `Io` writing a snapshot (the state itself is updated regardless).
    pub fn on_appended(&mut self, log: &Log, appended: &[u8]) -> Result<(), StorageError> {
        let first_base = split_batches(appended)
            .next()
            .and_then(Result::ok)
            .map(|(h, _)| h.base_offset());
        if first_base == Some(self.end_offset) {
            for item in split_batches(appended) {
                let (h, _) = item?;
                self.state.on_append(&batch_info(&h), h.base_offset());
                self.end_offset = h.next_offset();
            }
        }
        if self.end_offset != log.log_end_offset() {
            // Someone else appended (or truncated) meanwhile: read the log instead.
            self.catch_up_or_rebuild(log)?;
        }
        self.bytes_since_snapshot += appended.len() as u64;
        if log.segment_count() != self.segments_at_snapshot
            || self.bytes_since_snapshot >= SNAPSHOT_INTERVAL_BYTES
        {
            self.snapshot(log, false)?;
        }
        Ok(())
    }

    /// Writes a snapshot at the current end offset (fsynced if `durable`) and deletes all but
    /// the newest [`SNAPSHOTS_KEPT`].
    ///
    /// # Errors
    /// `Io`.
    pub fn snapshot(&mut self, log: &Log, durable: bool) -> Result<(), StorageError> {
        let snapshot = ProducerSnapshot {
            offset: self.end_offset,
            entries: self
                .state
                .entries()
                .map(|(id, e)| SnapshotEntry {
                    producer_id: id.0,
                    epoch: e.epoch().0,
                    last_timestamp: e.last_timestamp(),
                    current_txn_first_offset: e.current_txn_first_offset().unwrap_or(-1),
                    batches: e
                        .batches()
                        .map(|b| SnapshotBatch {
                            first_sequence: b.first_sequence,
                            last_sequence: b.last_sequence,
                            first_offset: b.first_offset,
                            last_offset: b.last_offset,
                            max_timestamp: b.max_timestamp,
                        })
                        .collect(),
                })
                .collect(),
        };
        producer_snapshot::write(&self.dir, &snapshot, durable)?;
        producer_snapshot::retain_newest(&self.dir, SNAPSHOTS_KEPT)?;
        self.snapshot_offset = self.end_offset;
        self.bytes_since_snapshot = 0;
        self.segments_at_snapshot = log.segment_count();
        Ok(())
    }

    /// The core state (for tests and DescribeProducers).
    pub fn state(&self) -> &ProducerStateManager {
        &self.state
    }

    /// The offset the state covers up to.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_never_reused_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let a = ProducerIdAllocator::open(dir.path()).unwrap();
        let first: Vec<i64> = (0..3).map(|_| a.allocate().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(a);
        let b = ProducerIdAllocator::open(dir.path()).unwrap();
        assert_eq!(b.allocate().unwrap(), PRODUCER_ID_BLOCK_SIZE);
        fs::write(dir.path().join(PRODUCER_ID_BLOCK_FILE), "junk").unwrap();
        assert!(ProducerIdAllocator::open(dir.path()).is_err());
    }
}
