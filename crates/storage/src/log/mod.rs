//! The partition log: one directory of segments (`{base_offset:020}.log` with `.index`,
//! `.timeindex` and `.txnindex`), a `log-start-offset` checkpoint and a `clean_shutdown` marker.
//!
//! Owns: offset assignment, segment rolling, reads by offset and timestamp, the log start offset,
//! retention, compaction ([`cleaner`]), truncation, recovery after a crash, the flushed offset
//! (recovery point), and the per-segment aborted-transaction index ([`txn_index`]). The log does
//! not know where a transaction began, so the caller (the producer state) adds the index entries
//! when it records an ABORT marker, and replays segments whose index was lost in recovery
//! ([`Log::aborted_index_incomplete_from`], then [`Log::mark_aborted_index_complete`]).
//!
//! Invariants: there is always at least one segment and the last one is the active segment;
//! segments are sorted by base offset and do not overlap (compacted segments may leave gaps of
//! offsets between and inside them); `log_start_offset <= log_end_offset`;
//! `flushed_offset <= log_end_offset`; data below `flushed_offset` has been fsynced; the
//! `clean_shutdown` marker exists only while no `Log` has the directory open; the active
//! segment is sealed only between an open that loaded it from its index files and the first
//! append after it.
//!
//! Must not: fsync on append (the broker decides when, through [`Log::sync`] or a
//! [`SyncHandle`]), lock the directory, read clocks, or panic on bytes read from disk.

mod checkpoint;
pub mod cleaner;
mod files;
mod segment;
pub mod txn_index;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{
    assign_offsets, decode_records, set_log_append_time, split_batches, BatchHeader, TimestampType,
    DECOMPRESSED_BYTES_MAX_DEFAULT, MAX_MESSAGE_BYTES_DEFAULT,
};
use crate::error::{Result, StorageError};

use checkpoint::{
    read_log_start_offset, read_recovery_point, remove_hint, remove_recovery_point, sync_dir,
    write_clean_shutdown_marker, write_hint, write_initial_log_start_offset,
    write_log_start_offset, write_recovery_point, RecoveryPoint, CLEAN_SHUTDOWN_FILE,
    RECOVERY_INDEX_FILE, RECOVERY_TIME_INDEX_FILE, RECOVERY_TXN_INDEX_FILE, TMP_SUFFIX,
};
pub use cleaner::{
    offset_map_entries, CleanStats, CleanTask, CleanedLog, CompactionConfig, DirtyStats, Throttler,
};
pub use files::{
    close_idle_files, open_files, open_files_limit, set_open_files_limit, OPEN_FILES_LIMIT_DEFAULT,
};
use segment::{read_bounded, remove_index_files, DurablePrefix, Opened, Segment};
pub use txn_index::AbortedTxn;

/// Largest `segment.bytes`: file positions in the offset index are u32 and Kafka caps it at
/// `Int.MaxValue`.
pub const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;
/// Smallest `segment.bytes` (one batch header).
pub const SEGMENT_BYTES_MIN: u64 = crate::batch::BATCH_HEADER_BYTES as u64;
/// Bytes [`BatchIter`] reads at a time.
const ITER_READ_BYTES: usize = 1024 * 1024;

const _: () = assert!(SEGMENT_BYTES_MIN < SEGMENT_BYTES_MAX);
const _: () = assert!(SEGMENT_BYTES_MAX <= u32::MAX as u64);

/// Per-partition log configuration, with Kafka's topic config names and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would exceed this (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment is older than this (default 7 days).
    pub segment_ms: i64,
    /// `retention.ms`: delete segments whose newest timestamp is older (-1 = forever; 7 days).
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest segments while the log exceeds this (-1 = unlimited).
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest batch accepted (default 1048588).
    pub max_message_bytes: usize,
    /// `index.interval.bytes`: bytes between offset index entries (default 4096).
    pub index_interval_bytes: u32,
    /// Largest decompressed payload of one batch when decoding or validating.
    pub decompressed_bytes_max: usize,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            max_message_bytes: MAX_MESSAGE_BYTES_DEFAULT,
            index_interval_bytes: 4096,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
            message_timestamp_type: TimestampType::CreateTime,
        }
    }
}

impl LogConfig {
    /// Checks every value is in range.
    ///
    /// # Errors
    /// `InvalidConfig` naming the first bad key.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason| Err(StorageError::InvalidConfig { field, reason });
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return bad("segment.bytes", "must be between 61 and 2147483647");
        }
        if self.segment_ms <= 0 {
            return bad("segment.ms", "must be positive");
        }
        if self.retention_ms < -1 {
            return bad("retention.ms", "must be -1 or non-negative");
        }
        if self.retention_bytes < -1 {
            return bad("retention.bytes", "must be -1 or non-negative");
        }
        if self.max_message_bytes < crate::batch::BATCH_HEADER_BYTES {
            return bad("max.message.bytes", "smaller than a batch header");
        }
        if self.index_interval_bytes == 0 {
            return bad("index.interval.bytes", "must be positive");
        }
        Ok(())
    }

    /// The validation limits implied by this config.
    pub fn validation_limits(&self) -> crate::batch::ValidationLimits {
        crate::batch::ValidationLimits {
            max_message_bytes: self.max_message_bytes,
            decompressed_bytes_max: self.decompressed_bytes_max,
        }
    }
}

/// What [`Log::append`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record.
    pub first_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Greatest batch `maxTimestamp` appended (`now_ms` under LogAppendTime).
    pub max_timestamp: i64,
    /// `now_ms` if the log uses LogAppendTime, else -1 (as in ProduceResponse).
    pub log_append_time: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
    /// Number of batches appended.
    pub batch_count: usize,
}

/// What [`Log::read`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches, byte-exact as stored (empty if none).
    pub records: Bytes,
    /// The offset to read from next: after the last returned batch (where compaction left a
    /// gap, the base offset of the batch after it); the start offset if empty.
    pub next_offset: i64,
    /// Log start offset at read time.
    pub log_start_offset: i64,
    /// Log end offset at read time.
    pub log_end_offset: i64,
}

/// What [`Log::read_slice`] located: whole batches, byte-exact as stored, still in their file.
#[derive(Clone, Debug)]
pub struct LogSlice {
    /// Where the batches are (`None` if there are none).
    pub region: Option<FileRegion>,
    /// Each batch's header and file position, when asked for (in order).
    pub batches: Vec<(BatchHeader, u64)>,
    /// The offset to read from next, as in [`ReadResult::next_offset`].
    pub next_offset: i64,
    /// Log start offset at read time.
    pub log_start_offset: i64,
    /// Log end offset at read time.
    pub log_end_offset: i64,
}

/// A byte range of a segment file holding whole batches.
///
/// Holding a region keeps the file open, so its bytes stay readable even if retention,
/// compaction or deletion removes the segment meanwhile: segments are append-only, and the
/// bytes of a region were written before it was taken.
#[derive(Clone, Debug)]
pub struct FileRegion {
    file: Arc<File>,
    /// Index of the segment at read time (for [`Log::read`], under the same borrow).
    segment: usize,
    position: u64,
    len: usize,
}

impl FileRegion {
    /// The segment file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where the bytes start in the file.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// How many bytes there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The part `[from, from + len)` of this region (relative to its start), clamped to it.
    pub fn sub(&self, from: usize, len: usize) -> FileRegion {
        let from = from.min(self.len);
        FileRegion {
            position: self.position + from as u64,
            len: len.min(self.len - from),
            ..self.clone()
        }
    }

    /// Copies the bytes out (for a caller that must look inside them).
    ///
    /// # Errors
    /// The read failed, or the file is shorter than the region.
    pub fn read(&self) -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(Bytes::from(buf))
    }
}

/// One stored batch, as yielded by [`BatchIter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Its parsed header.
    pub header: BatchHeader,
    /// Its bytes, header included.
    pub bytes: Bytes,
}

/// Files to fsync, captured under the partition lock and synced outside it (group commit).
///
/// Holding a handle keeps the files open, even if the log deletes them meanwhile.
#[derive(Debug)]
pub struct SyncHandle {
    files: Vec<(Arc<File>, PathBuf)>,
    dir: Option<PathBuf>,
    /// The parent of a directory made by [`Log::create`], until its first sync.
    parent: Option<PathBuf>,
    dir_seq: u64,
    end_offset: i64,
    generation: u64,
    /// The active segment when the handle was taken: its recovery point once synced.
    active: RecoveryPoint,
}

impl SyncHandle {
    /// Fsyncs the captured files (and the directory, if segments were created since the last
    /// sync). Safe to call without the partition lock and from any thread.
    ///
    /// # Errors
    /// `Io` if an fsync fails; the data must then be treated as not durable.
    pub fn sync(&self) -> Result<()> {
        for (f, path) in &self.files {
            f.sync_data()
                .map_err(|e| StorageError::io("fsync", path, e))?;
        }
        if let Some(dir) = &self.dir {
            sync_dir(dir)?;
        }
        if let Some(parent) = &self.parent {
            sync_dir(parent)?;
        }
        Ok(())
    }

    /// The log end offset when the handle was taken: everything below it is durable once
    /// [`SyncHandle::sync`] returns `Ok`.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }
}

/// A partition log. Not internally synchronised: the broker serialises calls per partition.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    /// Sorted by base offset, never empty; the last is the active segment.
    segments: Vec<Segment>,
    log_start_offset: i64,
    flushed_offset: i64,
    /// Bumped when data is removed from the end, so stale sync handles cannot mark new data
    /// as flushed.
    generation: u64,
    /// Bumped when a file is created in the directory; `dir_synced_seq` catches up on fsync.
    dir_dirty_seq: u64,
    dir_synced_seq: u64,
    /// Made by [`Log::create`] and not yet fsynced: the first sync fsyncs the parent too.
    new_dir: bool,
    /// Set by [`Log::shutdown`]: appends are refused from then on.
    closed: bool,
    /// End of the last clean (see [`cleaner`]); read through [`Log::cleaner_checkpoint`].
    cleaner_offset: i64,
    /// Earliest delete horizon left by the last clean (not persisted: after a restart the
    /// next clean due to new data finds them).
    delete_horizon_ms: Option<i64>,
    /// The active segment's fsynced prefix as last known, and as last written to the
    /// `recovery-point` file ([`Log::checkpoint_recovery_point`]).
    recovery_point: Option<RecoveryPoint>,
    recovery_point_written: Option<RecoveryPoint>,
    /// Bytes scanned with CRC checks when the log was opened, and bytes of the durable prefix
    /// walked by batch headers.
    recovery_scanned_bytes: u64,
    recovery_walked_bytes: u64,
}

fn parse_segment_name(name: &str) -> Option<(i64, &str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, ext))
}

impl Log {
    /// Creates the log of a new partition in `dir`, whose parent must exist; if `dir` exists
    /// already, opens it instead ([`Log::open`]).
    ///
    /// Cheaper than opening a missing directory: nothing is fsynced and no checkpoint is
    /// written, because an empty log lost in a crash is what the next open creates anyway. The
    /// first [`SyncHandle`] fsyncs the new directory and its parent along with the first data.
    ///
    /// # Errors
    /// `InvalidConfig`, or `Io` if the directory or segment cannot be created.
    pub fn create(dir: &Path, config: LogConfig) -> Result<Log> {
        config.validate()?;
        match fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Log::open(dir, config)
            }
            Err(e) => return Err(StorageError::io("create directory", dir, e)),
        }
        let interval = u64::from(config.index_interval_bytes);
        let segment = Segment::create_at(segment::log_path(dir, 0), 0, interval)?;
        segment.release_file();
        // Saves the first open an fsynced checkpoint write.
        write_initial_log_start_offset(dir, 0)?;
        Ok(Log {
            dir: dir.to_path_buf(),
            config,
            segments: vec![segment],
            log_start_offset: 0,
            flushed_offset: 0,
            generation: 0,
            dir_dirty_seq: 1,
            dir_synced_seq: 0,
            new_dir: true,
            closed: false,
            cleaner_offset: 0,
            delete_horizon_ms: None,
            recovery_point: None,
            recovery_point_written: None,
            recovery_scanned_bytes: 0,
            recovery_walked_bytes: 0,
        })
    }

    /// Opens the log in `dir`, creating it if absent, recovering it if it was not closed cleanly.
    ///
    /// After an unclean shutdown the active segment (and any segment without valid index
    /// files) is scanned with CRC checks and cut at the first torn or corrupt batch; segments
    /// after a cut are deleted. After a clean one, index files are trusted (still validated).
    ///
    /// # Errors
    /// `InvalidConfig`, or `Io` if the directory cannot be read or written.
    pub fn open(dir: &Path, config: LogConfig) -> Result<Log> {
        config.validate()?;
        fs::create_dir_all(dir).map_err(|e| StorageError::io("create directory", dir, e))?;
        cleaner::recover_swaps(dir)?;
        let mut bases = Vec::new();
        let mut index_bases = Vec::new();
        let entries = fs::read_dir(dir).map_err(|e| StorageError::io("read directory", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("read directory", dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(TMP_SUFFIX) {
                let path = entry.path();
                fs::remove_file(&path).map_err(|e| StorageError::io("remove", &path, e))?;
                continue;
            }
            match parse_segment_name(name) {
                Some((base, "log")) => bases.push(base),
                Some((base, "index" | "timeindex" | "txnindex")) => index_bases.push(base),
                _ => {}
            }
        }
        bases.sort_unstable();
        for base in index_bases {
            if bases.binary_search(&base).is_err() {
                remove_index_files(dir, base)?;
            }
        }
        let clean = dir.join(CLEAN_SHUTDOWN_FILE).exists();
        let point = if clean {
            None
        } else {
            read_recovery_point(dir)
        };
        let mut recovery_scanned_bytes = 0;
        let mut recovery_walked_bytes = 0;
        let interval = u64::from(config.index_interval_bytes);
        let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
        let mut cut = false;
        for (i, &base) in bases.iter().enumerate() {
            if cut {
                // A segment before this one lost data: later offsets would leave a hole.
                tracing::warn!(base, ?dir, "deleting segment after a truncated one");
                fs::remove_file(segment::log_path(dir, base))
                    .map_err(|e| StorageError::io("remove", segment::log_path(dir, base), e))?;
                remove_index_files(dir, base)?;
                continue;
            }
            let is_last = i + 1 == bases.len();
            let durable = point
                .filter(|p| is_last && p.base == base)
                .map(|p| DurablePrefix {
                    position: p.position,
                    next_offset: p.next_offset,
                    index: read_bounded(&dir.join(RECOVERY_INDEX_FILE), p.position)
                        .and_then(|idx| {
                            read_bounded(&dir.join(RECOVERY_TIME_INDEX_FILE), p.position)
                                .map(|tidx| (idx, tidx))
                        })
                        .ok(),
                    aborted: fs::read(dir.join(RECOVERY_TXN_INDEX_FILE))
                        .ok()
                        .filter(|bytes| bytes.len() as u64 <= p.position)
                        .and_then(|bytes| txn_index::decode(&bytes, base, p.next_offset).ok()),
                });
            let (seg, how) = Segment::open(dir, base, interval, clean || !is_last, durable)?;
            if let Opened::Recovered {
                scanned_bytes,
                walked_bytes,
            } = how
            {
                recovery_scanned_bytes += scanned_bytes;
                recovery_walked_bytes += walked_bytes;
            }
            if let Some(prev) = segments.last() {
                if seg.base_offset < prev.next_offset {
                    tracing::warn!(base, ?dir, "deleting segment overlapping its predecessor");
                    seg.delete_files(dir)?;
                    cut = true;
                    continue;
                }
            }
            cut = matches!(how, Opened::Truncated { .. });
            segments.push(seg);
        }
        // An empty segment can only be the active one.
        let last = segments.len().saturating_sub(1);
        let mut kept = Vec::with_capacity(segments.len());
        for (i, seg) in segments.into_iter().enumerate() {
            if seg.is_empty() && i != last {
                seg.delete_files(dir)?;
            } else {
                kept.push(seg);
            }
        }
        let mut segments = kept;

        let checkpoint = read_log_start_offset(dir)?;
        let first_base = segments.first().map_or(0, |s| s.base_offset);
        let log_start_offset = checkpoint.unwrap_or(first_base).max(first_base);
        let log_end_offset = segments.last().map_or(log_start_offset, |s| s.next_offset);
        if segments.is_empty() || log_start_offset > log_end_offset {
            for seg in segments.drain(..) {
                seg.delete_files(dir)?;
            }
            segments.push(Segment::create(dir, log_start_offset, interval)?);
        }
        if checkpoint != Some(log_start_offset) {
            write_log_start_offset(dir, log_start_offset)?;
        }

        // Segments scanned now are durable from here on: fsync them, then seal the inactive
        // ones so the next recovery can skip them. An active segment loaded from its index
        // files stays sealed until the first append (an idle partition never rewrites them).
        let n = segments.len();
        for (i, seg) in segments.iter_mut().enumerate() {
            if !seg.sealed && !clean {
                seg.file()?
                    .sync_data()
                    .map_err(|e| StorageError::io("fsync", seg.path(), e))?;
            }
            if i + 1 < n && !seg.sealed {
                seg.seal(dir)?;
            }
        }
        if clean {
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            fs::remove_file(&marker).map_err(|e| StorageError::io("remove", &marker, e))?;
        }
        sync_dir(dir)?;
        // Opened lazily from here on: an idle partition holds no descriptor.
        for seg in &segments {
            seg.release_file();
        }
        let flushed_offset = segments.last().map_or(log_start_offset, |s| s.next_offset);
        let cleaner_offset = cleaner::read_cleaner_checkpoint(dir)?.unwrap_or(log_start_offset);
        // Everything is fsynced now: the whole active segment is the recovery point.
        let recovery_point = segments.last().map(|active| RecoveryPoint {
            base: active.base_offset,
            position: active.size,
            next_offset: active.next_offset,
        });
        Ok(Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset,
            flushed_offset,
            generation: 0,
            dir_dirty_seq: 0,
            dir_synced_seq: 0,
            new_dir: false,
            closed: false,
            cleaner_offset,
            delete_horizon_ms: None,
            recovery_point,
            recovery_point_written: point,
            recovery_scanned_bytes,
            recovery_walked_bytes,
        })
    }

    /// The directory this log lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The configuration in force.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// Replaces the configuration (e.g. after IncrementalAlterConfigs); takes effect on the
    /// next append / retention run. Index density changes apply to new segments' entries.
    ///
    /// # Errors
    /// `InvalidConfig`.
    pub fn set_config(&mut self, config: LogConfig) -> Result<()> {
        config.validate()?;
        self.config = config;
        Ok(())
    }
    /// The first offset readable.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }
    /// Everything below this offset has been fsynced (the recovery point).
    /// Bumped by every truncation of the end: a writer that saw another generation when it
    /// appended knows its records may be gone.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn flushed_offset(&self) -> i64 {
        self.flushed_offset
    }
    /// Bytes in all segment files.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }
    /// Number of segments (at least 1).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Records an aborted transaction in the index of the segment holding its ABORT marker
    /// (`txn.last_offset`); call right after appending the marker, and when replaying the log.
    /// An entry for a marker already indexed is ignored.
    ///
    /// # Errors
    /// `OffsetOutOfRange` if no segment holds `last_offset`; `InvalidBatchHeader` if the entry
    /// is inconsistent; `Io` rewriting a sealed segment's file.
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> Result<()> {
        if txn.first_offset > txn.last_offset || txn.first_offset < 0 {
            return Err(StorageError::InvalidBatchHeader {
                reason: "aborted transaction ends before it begins",
            });
        }
        let i = self.segment_index(txn.last_offset);
        let seg = &self.segments[i];
        if txn.last_offset < seg.base_offset || txn.last_offset >= seg.next_offset {
            return Err(self.out_of_range(txn.last_offset));
        }
        let dir = self.dir.clone();
        self.segments[i].add_aborted(&dir, txn)
    }

    /// The aborted transactions overlapping `[start, end)` — ABORT marker at or after `start`
    /// and first offset below `end` — searching from the segment holding `start` onwards
    /// (Kafka's `collectAbortedTransactions`). Read committed fetches pass the fetch offset and
    /// the end of the returned data.
    pub fn collect_aborted_txns(&self, start: i64, end: i64) -> Vec<AbortedTxn> {
        let mut out = Vec::new();
        if start >= end {
            return out;
        }
        for seg in &self.segments[self.segment_index(start)..] {
            if txn_index::collect(&seg.aborted, start, end, &mut out) {
                break;
            }
        }
        out
    }

    /// [`Log::collect_aborted_txns`] as `(producer id, first offset)`, the fetch response's
    /// AbortedTransactions.
    pub fn collect_aborted(&self, start: i64, end: i64) -> Vec<(i64, i64)> {
        self.collect_aborted_txns(start, end)
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// Where the aborted-transaction index stops being known: the base offset of the first
    /// segment whose index was lost (recovered by a scan, or its `.txnindex` missing or
    /// invalid), or, for an active segment recovered from a recovery point that saved its
    /// index, that point's offset; `None` if every index is complete.
    /// The caller replays the log from at or below it and then calls
    /// [`Log::mark_aborted_index_complete`].
    pub fn aborted_index_incomplete_from(&self) -> Option<i64> {
        self.segments
            .iter()
            .find(|s| !s.aborted_complete)
            .map(|s| s.aborted_known_below.unwrap_or(s.base_offset))
    }

    /// Declares every segment's aborted-transaction index complete (the caller replayed them)
    /// and writes the files of sealed segments that lacked one.
    ///
    /// # Errors
    /// `Io` writing a file (the indexes in memory are complete regardless).
    pub fn mark_aborted_index_complete(&mut self) -> Result<()> {
        let dir = self.dir.clone();
        let mut first_error = None;
        for seg in self.segments.iter_mut().filter(|s| !s.aborted_complete) {
            seg.aborted_complete = true;
            seg.aborted_known_below = None;
            if seg.sealed {
                if let Err(e) = seg.write_txn_index(&dir) {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log always has an active segment")
    }

    /// Appends already-validated batches (see [`crate::validate_record_set`]): assigns
    /// consecutive offsets from the log end offset in place, stamps LogAppendTime if configured,
    /// rolls the active segment first if needed, and writes the bytes. Does not fsync.
    ///
    /// # Errors
    /// Structural errors if `batch_set` is not whole v2 batches; `RecordSetTooLarge` if it is
    /// larger than `segment.bytes`; `Io` if the write fails (the log is then unchanged).
    pub fn append(&mut self, batch_set: &mut [u8], now_ms: i64) -> Result<AppendInfo> {
        if self.closed {
            return Err(StorageError::io(
                "append",
                &self.dir,
                std::io::Error::other("the log was shut down"),
            ));
        }
        let mut ranges = Vec::new();
        let mut offset_count: i64 = 0;
        for item in split_batches(batch_set) {
            let (header, range) = item?;
            if header.last_offset_delta() < 0 {
                return Err(StorageError::InvalidBatchHeader {
                    reason: "negative lastOffsetDelta",
                });
            }
            offset_count += i64::from(header.last_offset_delta()) + 1;
            ranges.push(range);
        }
        if ranges.is_empty() {
            return Err(StorageError::Truncated {
                what: "record set",
                needed: crate::batch::BATCH_HEADER_BYTES,
                available: 0,
            });
        }
        if batch_set.len() as u64 > self.config.segment_bytes {
            return Err(StorageError::RecordSetTooLarge {
                size: batch_set.len(),
                segment_bytes: self.config.segment_bytes,
            });
        }
        let first_offset = self.log_end_offset();
        let last_offset = first_offset + offset_count - 1;
        self.maybe_roll(batch_set.len() as u64, last_offset, now_ms)?;
        if !self.active().fits_offset(last_offset) {
            // Only reachable with unvalidated input: validated batches hold >= 1 byte a record.
            return Err(StorageError::InvalidBatchHeader {
                reason: "record set spans more than 2^32 offsets",
            });
        }

        let log_append = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        let mut headers = Vec::with_capacity(ranges.len());
        let mut next = first_offset;
        let mut max_timestamp = crate::batch::NO_TIMESTAMP;
        for range in ranges {
            let batch = &mut batch_set[range];
            assign_offsets(batch, next)?;
            if log_append {
                set_log_append_time(batch, now_ms)?;
            }
            let header = BatchHeader::parse(batch)?;
            next = header.next_offset();
            max_timestamp = max_timestamp.max(header.max_timestamp());
            headers.push(header);
        }
        if self.active().sealed {
            let dir = self.dir.clone();
            self.active_mut().unseal(&dir)?;
        }
        let active = self.active_mut();
        active.append(batch_set, &headers)?;
        if active.roll_base_ms.is_none() {
            active.roll_base_ms = Some(now_ms);
        }
        debug_assert_eq!(self.log_end_offset(), last_offset + 1);
        Ok(AppendInfo {
            first_offset,
            last_offset,
            max_timestamp,
            log_append_time: if log_append { now_ms } else { -1 },
            log_start_offset: self.log_start_offset,
            batch_count: headers.len(),
        })
    }

    fn maybe_roll(&mut self, incoming_bytes: u64, last_offset: i64, now_ms: i64) -> Result<()> {
        let active = self.active();
        if active.is_empty() {
            return Ok(());
        }
        let too_big = active.size + incoming_bytes > self.config.segment_bytes;
        let too_old = active
            .roll_base_ms
            .is_some_and(|base| now_ms.saturating_sub(base) > self.config.segment_ms);
        let offsets_overflow = !active.fits_offset(last_offset);
        if too_big || too_old || offsets_overflow {
            self.roll()?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end offset. The old one is sealed (index files
    /// written) once a sync covers it.
    fn roll(&mut self) -> Result<()> {
        let base = self.log_end_offset();
        let seg = Segment::create(&self.dir, base, u64::from(self.config.index_interval_bytes))?;
        tracing::debug!(dir = ?self.dir, base, "rolled segment");
        self.segments.push(seg);
        self.dir_dirty_seq += 1;
        Ok(())
    }

    /// Captures what must be fsynced to make everything below the current log end offset
    /// durable. Cheap (clones `Arc`s; opens a file only if the pool closed it since the
    /// write); call under the partition lock, then run [`SyncHandle::sync`] outside it and pass
    /// the handle to [`Log::mark_flushed`].
    ///
    /// # Errors
    /// `Io` if a segment file cannot be opened again.
    pub fn sync_handle(&self) -> Result<SyncHandle> {
        let files = self
            .segments
            .iter()
            .filter(|s| s.next_offset > self.flushed_offset && !s.sealed)
            .map(|s| Ok((s.file()?, s.path().to_path_buf())))
            .collect::<Result<_>>()?;
        let dir_dirty = self.dir_dirty_seq != self.dir_synced_seq;
        let active = self.active();
        Ok(SyncHandle {
            files,
            dir: dir_dirty.then(|| self.dir.clone()),
            parent: self
                .new_dir
                .then(|| self.dir.parent().map(Path::to_path_buf))
                .flatten(),
            dir_seq: self.dir_dirty_seq,
            end_offset: self.log_end_offset(),
            generation: self.generation,
            active: RecoveryPoint {
                base: active.base_offset,
                position: active.size,
                next_offset: active.next_offset,
            },
        })
    }

    /// Records that `handle` was synced successfully: advances the flushed offset and seals
    /// rolled segments now wholly durable. A handle taken before a truncation is ignored.
    pub fn mark_flushed(&mut self, handle: &SyncHandle) {
        if handle.generation != self.generation {
            return;
        }
        if handle.dir.is_some() {
            self.dir_synced_seq = self.dir_synced_seq.max(handle.dir_seq);
        }
        if handle.parent.is_some() {
            self.new_dir = false;
        }
        let end = handle.end_offset.min(self.log_end_offset());
        self.flushed_offset = self.flushed_offset.max(end);
        let point = handle.active;
        if point.base == self.active().base_offset
            && self
                .recovery_point
                .is_none_or(|p| p.base != point.base || p.next_offset < point.next_offset)
        {
            self.recovery_point = Some(point);
        }
        let flushed = self.flushed_offset;
        let n = self.segments.len();
        for seg in &mut self.segments[..n - 1] {
            if !seg.sealed && seg.next_offset <= flushed {
                if let Err(e) = seg.seal(&self.dir) {
                    // Not fatal: the segment is rescanned on the next unclean open.
                    tracing::warn!(segment = ?seg.path(), error = %e, "cannot write index files");
                }
            }
        }
    }

    /// Writes the active segment's fsynced prefix to the `recovery-point` file if it moved
    /// since the last write (Kafka's recovery-point checkpoint): after an unclean shutdown only
    /// the segment's bytes past it are scanned with CRC checks. Returns whether it wrote.
    ///
    /// # Errors
    /// `Io`; the next open then scans more, nothing is lost.
    pub fn checkpoint_recovery_point(&mut self) -> Result<bool> {
        let Some(point) = self.recovery_point else {
            return Ok(false);
        };
        if self.recovery_point_written == Some(point) || point.base != self.active().base_offset {
            return Ok(false);
        }
        // The index first: a point is never newer than the index written for it.
        let (idx, tidx) = self
            .active()
            .index_prefix(point.position, point.next_offset);
        write_hint(&self.dir, RECOVERY_INDEX_FILE, &idx)?;
        write_hint(&self.dir, RECOVERY_TIME_INDEX_FILE, &tidx)?;
        let active = self.active();
        if active.aborted_complete {
            let below: Vec<AbortedTxn> = active
                .aborted
                .iter()
                .filter(|t| t.last_offset < point.next_offset)
                .copied()
                .collect();
            write_hint(
                &self.dir,
                RECOVERY_TXN_INDEX_FILE,
                &txn_index::encode(&below),
            )?;
        } else {
            remove_hint(&self.dir, RECOVERY_TXN_INDEX_FILE)?;
        }
        write_recovery_point(&self.dir, point)?;
        self.recovery_point_written = Some(point);
        Ok(true)
    }

    /// Bytes the last [`Log::open`] scanned with CRC checks (0 after a clean shutdown).
    pub fn recovery_scanned_bytes(&self) -> u64 {
        self.recovery_scanned_bytes
    }

    /// Bytes of the recovery point's prefix the last [`Log::open`] walked batch by batch
    /// (from the saved index's last entry, or from the start without a usable index).
    pub fn recovery_walked_bytes(&self) -> u64 {
        self.recovery_walked_bytes
    }

    /// Fsyncs everything unflushed and advances the flushed offset (under the caller's lock;
    /// use [`Log::sync_handle`] to fsync outside it).
    ///
    /// # Errors
    /// `Io` if an fsync fails.
    pub fn sync(&mut self) -> Result<()> {
        let handle = self.sync_handle()?;
        handle.sync()?;
        self.mark_flushed(&handle);
        Ok(())
    }

    fn out_of_range(&self, offset: i64) -> StorageError {
        StorageError::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset(),
        }
    }

    /// Index of the segment that may contain `offset` (the last with `base_offset <= offset`).
    fn segment_index(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }

    /// Reads whole batches starting with the one containing `start_offset`, up to `max_bytes`
    /// (but always at least one batch if there is one — Kafka's soft limit), only batches whose
    /// last offset is below `max_offset` (exclusive bound, e.g. the high watermark or LSO).
    /// Reads within one segment. [`Log::read_slice`] locates the same batches without reading
    /// them.
    ///
    /// # Errors
    /// `OffsetOutOfRange` if `start_offset` is outside `[log_start_offset, log_end_offset]`;
    /// `CorruptLog` / `Io` on disk problems.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: Option<i64>,
    ) -> Result<ReadResult> {
        let slice = self.read_slice(start_offset, max_bytes, max_offset, false)?;
        let records = match &slice.region {
            None => Bytes::new(),
            Some(region) => {
                let seg = &self.segments[region.segment];
                Bytes::from(seg.read_at(region.position, region.len)?)
            }
        };
        Ok(ReadResult {
            records,
            next_offset: slice.next_offset,
            log_start_offset: slice.log_start_offset,
            log_end_offset: slice.log_end_offset,
        })
    }

    /// Locates what [`Log::read`] would return, reading only batch headers: the file and byte
    /// range of the batches, for a caller that sends them to a socket straight from the file.
    /// With `with_batches`, the slice also lists every batch's header and position.
    ///
    /// # Errors
    /// As [`Log::read`].
    pub fn read_slice(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: Option<i64>,
        with_batches: bool,
    ) -> Result<LogSlice> {
        let log_end_offset = self.log_end_offset();
        if start_offset < self.log_start_offset || start_offset > log_end_offset {
            return Err(self.out_of_range(start_offset));
        }
        let mut slice = LogSlice {
            region: None,
            batches: Vec::new(),
            next_offset: start_offset,
            log_start_offset: self.log_start_offset,
            log_end_offset,
        };
        let limit = max_offset.unwrap_or(log_end_offset).min(log_end_offset);
        if start_offset >= limit {
            return Ok(slice);
        }
        let first_segment = self.segment_index(start_offset);
        for (i, seg) in self.segments.iter().enumerate().skip(first_segment) {
            let Some((pos, first)) = seg.find_batch(start_offset)? else {
                continue;
            };
            if first.last_offset() >= limit {
                return Ok(slice);
            }
            let batches = with_batches.then_some(&mut slice.batches);
            let (end, next_offset) = seg.extent(pos, first, max_bytes, limit, batches)?;
            slice.region = Some(FileRegion {
                file: seg.file()?,
                segment: i,
                position: pos,
                len: (end - pos) as usize,
            });
            slice.next_offset = next_offset;
            return Ok(slice);
        }
        Ok(slice)
    }

    /// Iterates over every batch from the one containing `from_offset` (clamped to the log
    /// start offset) to the current end. Used to replay internal topics.
    pub fn iter_batches(&self, from_offset: i64) -> BatchIter<'_> {
        BatchIter {
            log: self,
            next_offset: from_offset.max(self.log_start_offset),
            pending: Bytes::new(),
            done: false,
        }
    }

    /// The first record with timestamp `>= ts` at or after the log start offset, as
    /// `(offset, timestamp)`; `None` if there is none (ListOffsets by timestamp).
    ///
    /// # Errors
    /// `CorruptLog` / `Io` on disk problems.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>> {
        for seg in &self.segments {
            if seg.max_timestamp < ts || seg.next_offset <= self.log_start_offset {
                continue;
            }
            let from = seg.time_lookup(ts).max(self.log_start_offset);
            let Some((mut pos, _)) = seg.find_batch(from)? else {
                continue;
            };
            let mut win = seg.window()?;
            while pos < seg.size {
                let header = win.header_at(pos)?;
                if header.max_timestamp() >= ts {
                    let bytes = seg.read_at(pos, header.size_bytes())?;
                    return Ok(Some(self.first_record_at_or_after(&header, &bytes, ts)));
                }
                pos += header.size_bytes() as u64;
            }
        }
        Ok(None)
    }

    /// Record-level answer within a batch whose max timestamp is `>= ts`; falls back to the
    /// batch's own fields if its records cannot be decoded.
    fn first_record_at_or_after(&self, header: &BatchHeader, bytes: &[u8], ts: i64) -> (i64, i64) {
        let fallback = (
            header.base_offset().max(self.log_start_offset),
            header.max_timestamp(),
        );
        match decode_records(bytes, self.config.decompressed_bytes_max) {
            Ok(records) => records
                .iter()
                .find(|r| r.timestamp >= ts && r.offset >= self.log_start_offset)
                .map_or(fallback, |r| (r.offset, r.timestamp)),
            Err(e) => {
                tracing::warn!(dir = ?self.dir, offset = header.base_offset(), error = %e,
                    "cannot decode batch for timestamp lookup");
                fallback
            }
        }
    }

    /// The `(offset, timestamp)` of the first record with the greatest timestamp in the log
    /// (ListOffsets MAX_TIMESTAMP); `None` if no record has a timestamp.
    ///
    /// # Errors
    /// `CorruptLog` / `Io` on disk problems.
    pub fn max_timestamp_offset(&self) -> Result<Option<(i64, i64)>> {
        let mut best: Option<&Segment> = None;
        for seg in &self.segments {
            if seg.next_offset > self.log_start_offset
                && seg.max_timestamp >= 0
                && best.is_none_or(|b| seg.max_timestamp > b.max_timestamp)
            {
                best = Some(seg);
            }
        }
        let Some(seg) = best else { return Ok(None) };
        let Some((pos, header)) = seg.find_batch(seg.offset_of_max_timestamp)? else {
            return Ok(None);
        };
        let bytes = seg.read_at(pos, header.size_bytes())?;
        Ok(Some(self.first_record_at_or_after(
            &header,
            &bytes,
            header.max_timestamp(),
        )))
    }

    /// Advances the log start offset to `offset` (DeleteRecords), checkpoints it, and deletes
    /// inactive segments wholly below it. Returns the new log start offset.
    ///
    /// # Errors
    /// `OffsetOutOfRange` if `offset > log_end_offset`; `Io`.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        if offset > self.log_end_offset() || offset < 0 {
            return Err(self.out_of_range(offset));
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            write_log_start_offset(&self.dir, offset)?;
            self.delete_oldest_segments(|seg, start| seg.next_offset <= start)?;
        }
        Ok(self.log_start_offset)
    }

    /// Deletes whole inactive segments breaching `retention.ms` (newest timestamp older than
    /// `now_ms - retention.ms`) or `retention.bytes`, or wholly below the log start offset, and
    /// advances the log start offset. Never deletes the active segment. Returns the number of
    /// segments deleted.
    ///
    /// # Errors
    /// `Io`.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<usize> {
        let mut deleted = self.delete_oldest_segments(|seg, start| seg.next_offset <= start)?;
        if self.config.retention_ms >= 0 {
            let cutoff = now_ms.saturating_sub(self.config.retention_ms);
            deleted += self.delete_oldest_segments(|seg, _| {
                let newest = if seg.max_timestamp >= 0 {
                    seg.max_timestamp
                } else {
                    // No timestamps: use the file's modification time, as Kafka does.
                    file_mtime_ms(seg.path()).unwrap_or(i64::MAX)
                };
                newest < cutoff
            })?;
        }
        if self.config.retention_bytes >= 0 {
            let mut excess = self.size_bytes() as i64 - self.config.retention_bytes;
            deleted += self.delete_oldest_segments(|seg, _| {
                if excess - seg.size as i64 >= 0 {
                    excess -= seg.size as i64;
                    true
                } else {
                    false
                }
            })?;
        }
        Ok(deleted)
    }

    /// The log start offset [`Log::enforce_retention`] at `now_ms` would leave, deleting
    /// nothing: for a caller that must record the new start elsewhere first (a cluster's
    /// owner), then moves it with [`Log::delete_records_before`], which deletes the same
    /// segments. A segment without timestamps whose modification time cannot be read is kept,
    /// as [`Log::enforce_retention`] keeps it.
    pub fn retention_start(&self, now_ms: i64) -> i64 {
        // The same predicates, over the segments in the same order, as enforce_retention.
        let inactive = &self.segments[..self.segments.len() - 1];
        let mut cut = inactive
            .iter()
            .take_while(|seg| seg.next_offset <= self.log_start_offset)
            .count();
        if self.config.retention_ms >= 0 {
            let cutoff = now_ms.saturating_sub(self.config.retention_ms);
            cut += inactive[cut..]
                .iter()
                .take_while(|seg| {
                    let newest = if seg.max_timestamp >= 0 {
                        seg.max_timestamp
                    } else {
                        file_mtime_ms(seg.path()).unwrap_or(i64::MAX)
                    };
                    newest < cutoff
                })
                .count();
        }
        if self.config.retention_bytes >= 0 {
            let size: u64 = self.segments[cut..].iter().map(|seg| seg.size).sum();
            let mut excess = size as i64 - self.config.retention_bytes;
            cut += inactive[cut..]
                .iter()
                .take_while(|seg| {
                    if excess - seg.size as i64 >= 0 {
                        excess -= seg.size as i64;
                        true
                    } else {
                        false
                    }
                })
                .count();
        }
        self.segments[cut].base_offset.max(self.log_start_offset)
    }

    /// Deletes inactive segments from the oldest while `pred(segment, log_start)` holds,
    /// then raises the log start offset to the first remaining segment if needed.
    fn delete_oldest_segments(
        &mut self,
        mut pred: impl FnMut(&Segment, i64) -> bool,
    ) -> Result<usize> {
        let mut deleted = 0;
        while self.segments.len() > 1 && pred(&self.segments[0], self.log_start_offset) {
            let seg = self.segments.remove(0);
            tracing::info!(segment = ?seg.path(), "deleting segment");
            if let Err(e) = seg.delete_files(&self.dir) {
                self.segments.insert(0, seg);
                return Err(e);
            }
            deleted += 1;
        }
        let first_base = self.segments[0].base_offset;
        if first_base > self.log_start_offset {
            self.log_start_offset = first_base;
            write_log_start_offset(&self.dir, first_base)?;
        }
        Ok(deleted)
    }

    /// Removes every batch with `last_offset >= offset` (the whole batch containing `offset`,
    /// so the new end may be below `offset` unless it is a batch boundary). If `offset` is below
    /// the log start offset the log is emptied and restarted at `offset`. Returns the new log end
    /// offset.
    ///
    /// # Errors
    /// `OffsetOutOfRange` if `offset` is negative; `CorruptLog` / `Io`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<i64> {
        if offset < 0 {
            return Err(self.out_of_range(offset));
        }
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        self.generation += 1;
        let dir = self.dir.clone();
        // Bytes below the recovery point are about to change.
        remove_recovery_point(&dir)?;
        self.recovery_point = None;
        self.recovery_point_written = None;
        // Drop whole segments from the end, one at a time so that on error the log stays
        // consistent (and never without an active segment).
        while self.segments.len() > 1 && self.active().base_offset >= offset {
            let seg = self.segments.pop().expect("len > 1");
            if let Err(e) = seg.delete_files(&dir) {
                self.segments.push(seg);
                return Err(e);
            }
        }
        if offset < self.log_start_offset {
            self.start_empty_at(offset)?;
        } else {
            // The remaining last segment starts at or below `offset`.
            let active = self.active_mut();
            active.truncate_to(&dir, offset)?;
            // It may have been an inactive, sealed segment: it is appended to from now on.
            active.unseal(&dir)?;
            let end = self.log_end_offset();
            if end < self.log_start_offset {
                self.log_start_offset = end;
                write_log_start_offset(&dir, end)?;
            }
        }
        self.flushed_offset = self.flushed_offset.min(self.log_end_offset());
        Ok(self.log_end_offset())
    }

    /// Empties the log and starts it again at `offset`, which may be above its end (Kafka's
    /// `truncateFullyAndStartAt`): a partition whose earlier records are gone elsewhere (a
    /// cluster's log start, past everything this node holds) continues at that offset. The new
    /// start is durable when this returns (its checkpoint written and the directory fsynced):
    /// a crash after it reopens the log empty at `offset`.
    ///
    /// # Errors
    /// `OffsetOutOfRange` if `offset` is negative; `Io` (the log is then empty at some offset
    /// at most `offset`, or unchanged).
    pub fn reset_to(&mut self, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(self.out_of_range(offset));
        }
        self.generation += 1;
        remove_recovery_point(&self.dir)?;
        self.recovery_point = None;
        self.recovery_point_written = None;
        self.start_empty_at(offset)?;
        // Nothing is below the start: all of the (empty) log is durable.
        self.flushed_offset = offset;
        Ok(())
    }

    /// Drops every segment and starts the log empty at `offset`, from its last segment (the
    /// log is never without one, whatever fails); the caller bumped the generation and removed
    /// the recovery point.
    fn start_empty_at(&mut self, offset: i64) -> Result<()> {
        let dir = self.dir.clone();
        while self.segments.len() > 1 {
            let seg = self.segments.pop().expect("len > 1");
            if let Err(e) = seg.delete_files(&dir) {
                self.segments.push(seg);
                return Err(e);
            }
        }
        if self.active().base_offset == offset {
            let active = self.active_mut();
            active.truncate_to(&dir, offset)?;
            active.unseal(&dir)?;
        } else {
            let interval = u64::from(self.config.index_interval_bytes);
            let fresh = Segment::create(&dir, offset, interval)?;
            let old = std::mem::replace(&mut self.segments[0], fresh);
            self.dir_dirty_seq += 1;
            old.delete_files(&dir)?;
        }
        self.log_start_offset = offset;
        // Fsyncs the directory too: the new segment and the old ones' removal are durable.
        write_log_start_offset(&dir, offset)
    }

    /// Syncs, writes the index files of every segment and the clean-shutdown marker so the next
    /// open can skip recovery.
    ///
    /// # Errors
    /// `Io`; the log is then recovered on the next open.
    pub fn close(mut self) -> Result<()> {
        self.sync()?;
        let dir = self.dir.clone();
        for seg in &mut self.segments {
            if !seg.sealed {
                seg.seal(&dir)?;
            }
        }
        write_clean_shutdown_marker(&dir)
    }

    /// [`Log::close`] for a log owned behind a lock (the broker's partition mutex): syncs, seals
    /// every segment and writes the clean-shutdown marker; every later append fails. Calling it
    /// twice is harmless.
    ///
    /// # Errors
    /// `Io`; the log is then recovered on the next open.
    pub fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.sync()?;
        let dir = self.dir.clone();
        for seg in &mut self.segments {
            if !seg.sealed {
                seg.seal(&dir)?;
            }
        }
        self.closed = true;
        write_clean_shutdown_marker(&dir)
    }

    /// Deletes the log's directory and everything in it.
    ///
    /// # Errors
    /// `Io`.
    pub fn delete(self) -> Result<()> {
        let dir = self.dir.clone();
        drop(self);
        fs::remove_dir_all(&dir).map_err(|e| StorageError::io("remove directory", &dir, e))
    }
}

fn file_mtime_ms(path: &Path) -> Option<i64> {
    let modified = fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// Iterator over stored batches; see [`Log::iter_batches`].
#[derive(Debug)]
pub struct BatchIter<'a> {
    log: &'a Log,
    next_offset: i64,
    pending: Bytes,
    done: bool,
}

impl Iterator for BatchIter<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.done {
            return None;
        }
        if self.pending.is_empty() {
            if self.next_offset >= self.log.log_end_offset() {
                self.done = true;
                return None;
            }
            match self.log.read(self.next_offset, ITER_READ_BYTES, None) {
                Ok(r) if r.records.is_empty() => {
                    self.done = true;
                    return None;
                }
                Ok(r) => {
                    self.pending = r.records;
                    self.next_offset = r.next_offset;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        // `read` returned whole, parsed batches, so this split cannot fail; guard anyway.
        match BatchHeader::parse(&self.pending) {
            Ok(header) if header.size_bytes() <= self.pending.len() => {
                let bytes = self.pending.split_to(header.size_bytes());
                Some(Ok(Batch { header, bytes }))
            }
            Ok(_) | Err(_) => {
                self.done = true;
                Some(Err(StorageError::CorruptLog {
                    path: self.log.dir.clone(),
                    position: 0,
                    reason: "unparsable batch in read result".into(),
                }))
            }
        }
    }
}
