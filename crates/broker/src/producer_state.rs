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
//! Transactions: the state tracks each producer's ongoing transaction (begun by its first
//! transactional batch, ended by a COMMIT/ABORT marker), which gives the partition's last stable
//! offset ([`PartitionProducers::last_stable_offset`]). Recording an ABORT marker that ended a
//! transaction adds it to the log's aborted-transaction index, both live and on replay; loading
//! replays at least every segment whose index recovery lost (snapshot at or below
//! [`Log::aborted_index_incomplete_from`]), so the index is complete once the state is loaded.
//! Snapshots carry each ongoing transaction's first offset.
//!
//! Invariants: a loaded [`PartitionProducers`] covers exactly the log below `end_offset`; it is
//! only used under the partition's log lock (lock order: log, then producers); the log's
//! aborted-transaction index is complete while it is loaded.
//!
//! Must not: fsync under the partition lock except at shutdown.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::producer_state::{
    BatchInfo, BatchMetadata, Decision, ProducerEntry, ProducerEpoch, ProducerId,
    ProducerStateConfig, ProducerStateError, ProducerStateManager,
};
use shoal_storage::batch::split_batches;
use shoal_storage::producer_snapshot::{self, ProducerSnapshot, SnapshotBatch, SnapshotEntry};
use shoal_storage::{end_txn_marker, AbortedTxn, BatchHeader, Log, StorageError};

use crate::config::BrokerConfig;

/// Bytes of log located per step when catching the producer state up (headers are read, not
/// the records).
const CATCH_UP_SLICE_BYTES: usize = 16 << 20;

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

pub use crate::seams::metadata_store::ProducerIdBlocks;

/// Hands out producer ids, never twice, also across restarts and, in a cluster, across
/// brokers.
#[derive(Debug)]
pub struct ProducerIdAllocator {
    source: IdSource,
    state: Arc<Mutex<IdState>>,
}

#[derive(Debug)]
enum IdSource {
    /// One node: the end of the last reserved block, in a file of the data directory.
    File(PathBuf),
    /// A cluster: blocks reserved by the next one in the background, before the current one
    /// runs out.
    Shared(Arc<dyn ProducerIdBlocks>),
}

#[derive(Debug, Default)]
struct IdState {
    next: i64,
    /// End of the block `next` is in.
    end: i64,
    /// The next block, reserved ahead (a cluster).
    spare: Option<(i64, i64)>,
    refilling: bool,
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
    /// A cluster's next block is still being reserved (retriable).
    #[error("the next block of producer ids is being reserved")]
    Pending,
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
            source: IdSource::File(path),
            state: Arc::new(Mutex::new(IdState {
                next,
                end: next,
                ..IdState::default()
            })),
        })
    }

    /// A cluster broker's allocator over `blocks`, its first block reserved now.
    ///
    /// # Errors
    /// The first block cannot be reserved.
    pub async fn shared(blocks: Arc<dyn ProducerIdBlocks>) -> anyhow::Result<Self> {
        let first = blocks
            .reserve(PRODUCER_ID_BLOCK_SIZE)
            .await
            .map_err(|e| anyhow::anyhow!("cannot reserve producer ids: {e}"))?;
        Ok(ProducerIdAllocator {
            source: IdSource::Shared(blocks),
            state: Arc::new(Mutex::new(IdState {
                next: first,
                end: first + PRODUCER_ID_BLOCK_SIZE,
                ..IdState::default()
            })),
        })
    }

    /// A fresh producer id. On one node it blocks on an fsync once per
    /// [`PRODUCER_ID_BLOCK_SIZE`] ids; in a cluster the next block is reserved in the
    /// background when half of the current one is used.
    ///
    /// # Errors
    /// The block file cannot be written (no id is handed out), ids are exhausted, or (a
    /// cluster) the next block is not reserved yet.
    pub fn allocate(&self) -> Result<i64, AllocateError> {
        let mut state = self.state.lock().expect("producer id lock poisoned");
        if state.next == state.end {
            match &self.source {
                IdSource::File(path) => {
                    let new_end = state
                        .end
                        .checked_add(PRODUCER_ID_BLOCK_SIZE)
                        .ok_or(AllocateError::Exhausted)?;
                    write_durably(path, format!("{new_end}\n").as_bytes()).map_err(|source| {
                        AllocateError::Io {
                            path: path.clone(),
                            source,
                        }
                    })?;
                    state.end = new_end;
                }
                IdSource::Shared(blocks) => match state.spare.take() {
                    Some((next, end)) => (state.next, state.end) = (next, end),
                    None => {
                        self.refill(&mut state, blocks);
                        return Err(AllocateError::Pending);
                    }
                },
            }
        }
        let id = state.next;
        state.next += 1;
        if let IdSource::Shared(blocks) = &self.source {
            if state.end - state.next < PRODUCER_ID_BLOCK_SIZE / 2 {
                self.refill(&mut state, blocks);
            }
        }
        Ok(id)
    }

    /// Starts reserving the next block unless one is reserved or being reserved.
    fn refill(&self, state: &mut IdState, blocks: &Arc<dyn ProducerIdBlocks>) {
        if state.spare.is_some() || state.refilling {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        state.refilling = true;
        let (blocks, shared) = (blocks.clone(), self.state.clone());
        runtime.spawn(async move {
            let reserved = blocks.reserve(PRODUCER_ID_BLOCK_SIZE).await;
            let mut state = shared.lock().expect("producer id lock poisoned");
            state.refilling = false;
            match reserved {
                Ok(first) => state.spare = Some((first, first + PRODUCER_ID_BLOCK_SIZE)),
                Err(e) => tracing::warn!(error = %e, "cannot reserve producer ids; will retry"),
            }
        });
    }
}

pub(crate) fn write_durably(path: &Path, contents: &[u8]) -> std::io::Result<()> {
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
    pub fn load(
        log: &mut Log,
        config: ProducerStateConfig,
        now_ms: i64,
    ) -> Result<Self, StorageError> {
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

    fn rebuild(&mut self, log: &mut Log, now_ms: i64) -> Result<(), StorageError> {
        remove_stale_snapshots(log)?;
        self.state.clear();
        let end = log.log_end_offset();
        // Replay every segment whose aborted-transaction index was lost.
        let replay_from = log
            .aborted_index_incomplete_from()
            .map_or(end, |base| base.min(end));
        let snapshot = producer_snapshot::load_latest(log.dir(), replay_from)?;
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
        if let Err(e) = log.mark_aborted_index_complete() {
            // The index is complete in memory; the file is rewritten at the next seal or load.
            tracing::warn!(dir = ?self.dir, error = %e, "cannot write transaction index files");
        }
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

    /// Logs the violation that stopped the producer state during a step, once: when it was
    /// not stopped before the step (`was_stopped`) and is now. From then on every produce to
    /// the partition fails with UNKNOWN_SERVER_ERROR (see `shoal_core::producer_state`).
    fn report_stop(&self, was_stopped: bool) {
        if was_stopped {
            return;
        }
        if let Some(v) = self.state.violation() {
            tracing::error!(
                dir = ?self.dir,
                invariant = v.invariant(),
                violation = %v,
                "producer state stopped: invariant violated, produce requests to this partition \
                 now fail with UNKNOWN_SERVER_ERROR until the broker restarts"
            );
        }
    }

    fn restore(&mut self, s: &ProducerSnapshot) {
        let was_stopped = self.state.violation().is_some();
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
                ProducerEntry::restore(
                    ProducerEpoch(e.epoch),
                    batches,
                    e.last_timestamp,
                    txn,
                    e.coordinator_epoch,
                ),
            );
        }
        self.report_stop(was_stopped);
    }

    /// Records one batch in the state; an ABORT marker that ended a transaction is pushed to
    /// `aborted` (for the log's index) with the LSO right after it, as Kafka computes it.
    fn record(&mut self, h: &BatchHeader, bytes: &[u8], aborted: &mut Vec<AbortedTxn>) {
        let was_stopped = self.state.violation().is_some();
        let done = self.state.on_append(&batch_info(h), h.base_offset());
        self.report_stop(was_stopped);
        if !h.is_control() {
            return;
        }
        let marker = end_txn_marker(bytes);
        if let Ok(Some(m)) = &marker {
            self.state
                .on_marker_coordinator_epoch(ProducerId(h.producer_id()), m.coordinator_epoch);
        }
        let Some(done) = done else {
            return;
        };
        match marker {
            Ok(Some(marker)) if !marker.commit => aborted.push(AbortedTxn {
                producer_id: done.producer_id.0,
                first_offset: done.first_offset,
                last_offset: done.last_offset,
                last_stable_offset: self
                    .state
                    .first_unstable_offset()
                    .unwrap_or(done.last_offset.saturating_add(1)),
            }),
            Ok(_) => {}
            Err(e) => {
                // Control batches are written by us and CRC-checked: this is not expected.
                tracing::error!(dir = ?self.dir, offset = h.base_offset(), error = %e,
                    "unreadable control batch; treated as COMMIT");
            }
        }
    }

    /// Applies the log's batches from `end_offset` to the log end; returns how many.
    ///
    /// Walks batch headers only ([`Log::read_slice`]) and reads the bytes of control batches
    /// alone: after a crash this replays whole segments, and reading every record of them
    /// cost more than the recovery scan itself.
    fn catch_up(&mut self, log: &mut Log) -> Result<usize, StorageError> {
        let mut replayed = 0;
        let mut aborted = Vec::new();
        let end = log.log_end_offset();
        let mut offset = self.end_offset.max(log.log_start_offset());
        while offset < end {
            let slice = log.read_slice(offset, CATCH_UP_SLICE_BYTES, None, true)?;
            let Some(region) = &slice.region else { break };
            for (h, pos) in &slice.batches {
                if h.next_offset() <= self.end_offset {
                    continue;
                }
                let bytes = if h.is_control() {
                    let at = (pos - region.position()) as usize;
                    region
                        .sub(at, h.size_bytes())
                        .read()
                        .map_err(|source| StorageError::Io {
                            op: "read",
                            path: log.dir().to_path_buf(),
                            source,
                        })?
                } else {
                    bytes::Bytes::new()
                };
                self.record(h, &bytes, &mut aborted);
                self.end_offset = h.next_offset();
                replayed += 1;
            }
            if slice.next_offset <= offset {
                break;
            }
            offset = slice.next_offset;
        }
        self.end_offset = log.log_end_offset();
        for txn in aborted {
            log.append_aborted_txn(txn)?;
        }
        Ok(replayed)
    }

    fn catch_up_or_rebuild(&mut self, log: &mut Log) -> Result<(), StorageError> {
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
        log: &mut Log,
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

    /// Checks a transaction marker for `producer_id` at `epoch` before it is appended (see
    /// [`ProducerStateManager::check_marker`]), after bringing the state in step with the log.
    ///
    /// # Errors
    /// Outer: the log could not be read to catch up. Inner: the producer-state refusal.
    pub fn check_marker(
        &mut self,
        log: &mut Log,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
    ) -> Result<Result<(), ProducerStateError>, StorageError> {
        self.catch_up_or_rebuild(log)?;
        Ok(self
            .state
            .check_marker(producer_id, epoch, coordinator_epoch))
    }

    /// Brings the state in step with the log (after appends that did not report to it).
    ///
    /// # Errors
    /// `Io` / `CorruptLog` reading the log.
    pub fn sync_with(&mut self, log: &mut Log) -> Result<(), StorageError> {
        self.catch_up_or_rebuild(log)
    }

    /// The first offset of the earliest ongoing transaction, if any.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.state.first_unstable_offset()
    }

    /// The last stable offset: the first offset of the earliest ongoing transaction, else the
    /// high watermark (the log end offset on one node), never below the log start offset.
    /// O(log n); call after [`PartitionProducers::sync_with`] if appends may have bypassed the
    /// state.
    pub fn last_stable_offset(&self, log: &Log) -> i64 {
        let end = log.log_end_offset();
        self.state
            .first_unstable_offset()
            .map_or(end, |first| first.min(end))
            .max(log.log_start_offset())
    }

    /// Records a batch set just appended (`appended` holds it with the assigned offsets): the
    /// producer state, and the aborted-transaction index for ABORT markers; then writes a
    /// snapshot when a segment rolled or enough bytes went by.
    ///
    /// # Errors
    /// `Io` writing a snapshot or an index file (the state and the in-memory index are updated
    /// regardless).
    pub fn on_appended(&mut self, log: &mut Log, appended: &[u8]) -> Result<(), StorageError> {
        let first_base = split_batches(appended)
            .next()
            .and_then(Result::ok)
            .map(|(h, _)| h.base_offset());
        if first_base == Some(self.end_offset) {
            let mut aborted = Vec::new();
            for item in split_batches(appended) {
                let (h, range) = item?;
                self.record(&h, &appended[range], &mut aborted);
                self.end_offset = h.next_offset();
            }
            for txn in aborted {
                log.append_aborted_txn(txn)?;
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
                    coordinator_epoch: e.coordinator_epoch(),
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
    /// Whether the newest snapshot describes the state as it is now.
    pub fn snapshot_is_current(&self) -> bool {
        self.snapshot_offset == self.end_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_storage::{
        encode_batch, encode_end_txn_marker, BatchOptions, EndTxnMarker, LogConfig,
    };

    fn append(log: &mut Log, producers: &mut PartitionProducers, mut bytes: Vec<u8>) -> i64 {
        let offset = log.append(&mut bytes, 0).unwrap().first_offset;
        producers.on_appended(log, &bytes).unwrap();
        offset
    }

    fn txn_batch(pid: i64, seq: i32) -> Vec<u8> {
        encode_batch(
            &[(None, Some(b"a transactional record"))],
            BatchOptions {
                producer_id: pid,
                producer_epoch: 0,
                base_sequence: seq,
                transactional: true,
                ..BatchOptions::default()
            },
        )
    }

    fn marker(pid: i64, commit: bool) -> Vec<u8> {
        let marker = EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        };
        encode_end_txn_marker(pid, 0, marker, 0)
    }

    #[test]
    fn unclean_restart_replays_markers_into_the_aborted_index() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 300,
            retention_ms: -1,
            ..LogConfig::default()
        };
        let state = ProducerStateConfig::default();
        let mut log = Log::open(dir.path(), config).unwrap();
        let mut producers = PartitionProducers::load(&mut log, state, 0).unwrap();
        // A long transaction of producer 99 spans every segment and stays open.
        let open_from = append(&mut log, &mut producers, txn_batch(99, 0));
        for pid in 0..6 {
            append(&mut log, &mut producers, txn_batch(pid, 0));
            append(&mut log, &mut producers, txn_batch(pid, 1));
            // The last marker (in the active segment) is an ABORT.
            append(&mut log, &mut producers, marker(pid, pid % 2 == 0));
        }
        assert!(log.segment_count() > 3);
        let aborted = log.collect_aborted_txns(0, i64::MAX);
        assert_eq!(aborted.len(), 3);
        assert!(aborted.iter().all(|t| t.last_stable_offset == open_from));
        assert_eq!(producers.last_stable_offset(&log), open_from);
        log.sync().unwrap();
        drop(producers);
        drop(log); // no shutdown: the active segment is rescanned and its index lost

        let mut log = Log::open(dir.path(), config).unwrap();
        assert!(log.aborted_index_incomplete_from().is_some());
        assert!(log.collect_aborted_txns(0, i64::MAX).len() < aborted.len());
        let producers = PartitionProducers::load(&mut log, state, 0).unwrap();
        assert_eq!(log.aborted_index_incomplete_from(), None);
        assert_eq!(log.collect_aborted_txns(0, i64::MAX), aborted);
        assert_eq!(producers.last_stable_offset(&log), open_from);
    }

    /// A cluster's counter of reserved ids, as etcd keeps it.
    #[derive(Debug, Default)]
    struct Counter(std::sync::atomic::AtomicI64);

    impl ProducerIdBlocks for Counter {
        fn reserve(
            &self,
            count: i64,
        ) -> crate::seams::metadata_store::Pending<'_, Result<i64, String>> {
            let first = self.0.fetch_add(count, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::ready(Ok(first)))
        }
    }

    #[tokio::test]
    async fn brokers_of_a_cluster_hand_out_ids_from_blocks_reserved_ahead() {
        let counter = Arc::new(Counter::default());
        let brokers = [
            ProducerIdAllocator::shared(counter.clone()).await.unwrap(),
            ProducerIdAllocator::shared(counter.clone()).await.unwrap(),
        ];
        let mut seen = std::collections::BTreeSet::new();
        let mut waited = 0;
        for _ in 0..3 * PRODUCER_ID_BLOCK_SIZE {
            for broker in &brokers {
                loop {
                    match broker.allocate() {
                        Ok(id) => {
                            assert!(seen.insert(id), "{id} handed out twice");
                            break;
                        }
                        Err(AllocateError::Pending) => {
                            waited += 1;
                            tokio::task::yield_now().await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            // Other work runs meanwhile, as a broker's requests leave the runtime time.
            tokio::task::yield_now().await;
        }
        assert_eq!(seen.len() as i64, 6 * PRODUCER_ID_BLOCK_SIZE);
        // Reserved ahead: the next block was there before the current one ran out.
        assert_eq!(waited, 0);
    }

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
