//! Log compaction (`cleanup.policy=compact`), as Kafka's `LogCleaner` does it.
//!
//! Owns: choosing what is cleanable ([`Log::dirty_stats`]), the key → offset map over the dirty
//! section bounded in entries, the rewrite of inactive segments keeping the latest record of
//! every key, the crash-safe swap of cleaned segments into the log, the recovery of an
//! interrupted swap at open, the per-partition `cleaner-offset-checkpoint`, and an I/O
//! [`Throttler`] that decides pauses from the time it is given.
//!
//! A clean runs in three steps so the broker never holds its partition lock across long I/O:
//! [`Log::prepare_clean`] (under the lock: a snapshot of the immutable segments to clean),
//! [`CleanTask::run`] (no lock: reads them, writes `{base}.log.cleaned` files, fsyncs them), and
//! [`Log::install_clean`] (under the lock: checks the inputs are unchanged, then swaps).
//!
//! What is cleanable: inactive segments from the log start, all sealed (fsynced, indexed) with
//! a complete aborted-transaction index, up to the first uncleanable offset = the lowest of the
//! active segment's base, the last stable offset (open transactions), and the first segment
//! newer than `min.compaction.lag.ms`, rounded down to a segment boundary. The dirty section
//! starts at the cleaner checkpoint (the end of the previous clean).
//!
//! What is kept, per batch (Kafka's `Cleaner.cleanInto` and `CleanedTransactionMetadata`):
//! - a record with a key whose offset is at or after the latest offset of that key in the
//!   dirty section (keys absent from the map are kept); records without a key are dropped;
//!   every record past the end of the map (when it filled up) is kept;
//! - a tombstone (null value) until the batch's delete horizon (set to now +
//!   `delete.retention.ms` the first time a clean keeps it, stored in the batch header as in
//!   KIP-534) has passed;
//! - no record of an aborted transaction;
//! - a COMMIT/ABORT marker while data of its transaction remains in the log, then until its own
//!   delete horizon;
//! - for every producer id, its last batch in the cleaned range, empty if all its records went,
//!   so that the producer's epoch and sequence survive a rebuild of producer state from the log.
//!
//! Offsets never change: a batch keeps its base offset and `lastOffsetDelta`; a fetch of a
//! removed offset gets the next batch. Cleaned segments keep the base offset of the first
//! segment of their group (consecutive segments whose total size fits `segment.bytes`).
//!
//! Crash safety (Kafka's `.cleaned` → `.swap` → rename): a cleaned group is written and fsynced
//! as `{base}.log.cleaned`; renamed to `{base}.log.swap` (directory fsynced) — the commit point;
//! then the group's old segments are deleted and the swap file renamed to `{base}.log`. On
//! open, `.cleaned` files are deleted, and each `.swap` file completes its swap: segments whose
//! base lies inside its offset range are deleted and it becomes the segment. Every step leaves
//! a log where each kept record is readable once.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{
    control_record_type, decode_records, empty_placeholder, rebuild_batch, BatchHeader,
    ControlRecordType, BATCH_HEADER_BYTES,
};
use crate::error::{Result, StorageError};

use super::checkpoint::{read_offset_file, sync_dir, write_atomic};
use super::files::SegmentFile;
use super::segment::{log_path, remove_index_files, Segment, Window};
use super::{AbortedTxn, Log, SEGMENT_BYTES_MAX};

/// Per-partition checkpoint of the end of the last clean (Kafka keeps one file per log
/// directory with a line per partition; a Shoal partition directory holds its own).
pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// Suffix of a cleaned segment being written (deleted at open).
pub(crate) const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment whose swap is committed (completed at open).
pub(crate) const SWAP_SUFFIX: &str = ".swap";
/// Bytes of memory counted per offset-map entry: a 128-bit key hash, an offset, and the hash
/// table's own overhead. Kafka's map uses 24 bytes (MD5 + offset) in a flat buffer.
pub const OFFSET_MAP_ENTRY_BYTES: u64 = 40;

/// A topic's compaction settings, with Kafka's names.
#[derive(Clone, Copy, Debug)]
pub struct CompactionConfig {
    /// `min.cleanable.dirty.ratio`: clean when dirty bytes / cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// `delete.retention.ms`: how long a tombstone or an empty transaction's marker stays after
    /// the clean that first kept it.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: segments with a record newer than this are not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty segment older than this is cleaned whatever the ratio.
    pub max_compaction_lag_ms: i64,
    /// Keys the offset map may hold in one clean (from `log.cleaner.dedupe.buffer.size`, see
    /// [`offset_map_entries`]).
    pub offset_map_entries: usize,
    /// Records whose key this returns true for are never removed (an internal topic whose
    /// records only make sense with the markers after them; see decision 0008).
    pub always_keep: Option<fn(&[u8]) -> bool>,
    /// Keep every COMMIT/ABORT marker (instead of dropping them once their data is gone).
    pub keep_markers: bool,
    /// Keep every tombstone (instead of dropping them after `delete.retention.ms`).
    pub keep_tombstones: bool,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_cleanable_dirty_ratio: 0.5,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            offset_map_entries: offset_map_entries(128 * 1024 * 1024, 0.9, 1),
            always_keep: None,
            keep_markers: false,
            keep_tombstones: false,
        }
    }
}

/// Offset-map entries that `log.cleaner.dedupe.buffer.size` bytes allow at
/// `log.cleaner.io.buffer.load.factor`, shared by `log.cleaner.threads` cleaners (at least one).
pub fn offset_map_entries(dedupe_buffer_bytes: i64, load_factor: f64, threads: usize) -> usize {
    let per_thread = dedupe_buffer_bytes.max(0) as u64 / threads.max(1) as u64;
    let factor = if load_factor.is_finite() {
        load_factor.clamp(0.0, 1.0)
    } else {
        0.9
    };
    let entries = (per_thread / OFFSET_MAP_ENTRY_BYTES) as f64 * factor;
    (entries as usize).max(1)
}

/// How dirty a log is (Kafka's `LogToClean`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DirtyStats {
    /// The cleaner checkpoint: where the dirty section begins.
    pub first_dirty_offset: i64,
    /// End of the cleanable range (a segment boundary; never past the active segment's base).
    pub first_uncleanable_offset: i64,
    /// Bytes of cleanable segments wholly below the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of cleanable segments from the first dirty offset.
    pub dirty_bytes: u64,
    /// `dirty_bytes / (clean_bytes + dirty_bytes)`, 0 when both are 0.
    pub dirty_ratio: f64,
    /// A dirty segment's first batch is older than `max.compaction.lag.ms`.
    pub max_lag_exceeded: bool,
    /// A delete horizon kept by the last clean has passed: a clean would drop tombstones or
    /// markers even with no dirty data (Kafka cleans such logs when none is dirty enough).
    pub delete_horizon_passed: bool,
}

impl DirtyStats {
    /// Whether a clean is due: dirty bytes at `min.cleanable.dirty.ratio`, or a dirty segment
    /// past `max.compaction.lag.ms`.
    pub fn needs_cleaning(&self, config: &CompactionConfig) -> bool {
        (self.dirty_bytes > 0
            && (self.dirty_ratio >= config.min_cleanable_dirty_ratio || self.max_lag_exceeded))
            || self.delete_horizon_passed
    }
}

/// What a clean did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments read and replaced.
    pub segments_cleaned: usize,
    /// Segments written (a group of inputs gives at most one).
    pub segments_written: usize,
    /// Bytes of the replaced segments.
    pub bytes_before: u64,
    /// Bytes of the segments written.
    pub bytes_after: u64,
    /// Records read in the replaced segments (control records included).
    pub records_read: u64,
    /// Records not kept.
    pub records_removed: u64,
    /// Distinct keys mapped in the dirty section.
    pub keys_mapped: usize,
    /// New cleaner checkpoint (end of the mapped dirty section).
    pub cleaned_to: i64,
    /// Whether the clean was installed (false when the log changed under it).
    pub installed: bool,
    /// Earliest delete horizon among the batches kept (tombstones, markers of finished
    /// transactions): a clean from then on removes something even with no new data.
    pub next_delete_horizon_ms: Option<i64>,
}

/// An I/O rate limit deciding pauses from time passed in (Kafka's `Throttler`, checked every
/// 100 ms of observation).
#[derive(Clone, Debug)]
pub struct Throttler {
    bytes_per_second: f64,
    period_start_ms: Option<i64>,
    observed: f64,
}

const THROTTLE_CHECK_MS: i64 = 100;

impl Throttler {
    /// A limit of `bytes_per_second` (`log.cleaner.io.max.bytes.per.second`); non-positive or
    /// non-finite means unlimited.
    pub fn new(bytes_per_second: f64) -> Self {
        Throttler {
            bytes_per_second,
            period_start_ms: None,
            observed: 0.0,
        }
    }

    /// Records `bytes` of I/O done by `now_ms`; returns how many milliseconds to pause so the
    /// rate stays at the limit.
    pub fn record(&mut self, bytes: u64, now_ms: i64) -> u64 {
        if !(self.bytes_per_second.is_finite() && self.bytes_per_second > 0.0) {
            return 0;
        }
        let start = *self.period_start_ms.get_or_insert(now_ms);
        self.observed += bytes as f64;
        let elapsed = now_ms.saturating_sub(start);
        if elapsed < THROTTLE_CHECK_MS {
            return 0;
        }
        let rate = self.observed * 1000.0 / elapsed as f64;
        let pause = if rate > self.bytes_per_second {
            let wanted_ms = self.observed * 1000.0 / self.bytes_per_second;
            (wanted_ms - elapsed as f64).max(0.0) as u64
        } else {
            0
        };
        self.period_start_ms = Some(now_ms.saturating_add(pause as i64));
        self.observed = 0.0;
        pause
    }
}

/// The I/O callback of [`CleanTask::run`]: told of every read or write (bytes), it may pause
/// (throttling) or fail (cancellation).
pub type IoHook<'a> = dyn FnMut(u64) -> Result<()> + 'a;

/// One segment to clean, captured under the partition lock.
#[derive(Debug)]
struct Input {
    base: i64,
    next_offset: i64,
    size: u64,
    file: SegmentFile,
    path: PathBuf,
    aborted: Vec<AbortedTxn>,
}

/// A snapshot of the segments to clean; see [`Log::prepare_clean`].
#[derive(Debug)]
pub struct CleanTask {
    dir: PathBuf,
    inputs: Vec<Input>,
    /// Aborted transactions beginning below `clean_end`, by producer, sorted by first offset.
    aborted: HashMap<i64, Vec<AbortedTxn>>,
    first_dirty: i64,
    clean_end: i64,
    now_ms: i64,
    config: CompactionConfig,
    segment_bytes: u64,
    index_interval: u64,
    decompressed_bytes_max: usize,
}

/// One group of input segments and the segment that replaces it.
#[derive(Debug)]
struct Group {
    /// `(base, file, size)` of each input, to check nothing changed before the swap.
    inputs: Vec<(i64, SegmentFile, u64)>,
    /// The cleaned segment (its file named `{base}.log.cleaned`), `None` if nothing was kept.
    output: Option<Segment>,
}

/// Cleaned segments ready to swap in; see [`Log::install_clean`]. Dropping it unused deletes
/// the files written.
#[derive(Debug)]
pub struct CleanedLog {
    dir: PathBuf,
    groups: Vec<Group>,
    stats: CleanStats,
}

impl Drop for CleanedLog {
    fn drop(&mut self) {
        for g in &self.groups {
            if let Some(seg) = &g.output {
                if let Err(e) = fs::remove_file(seg.path()) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(path = ?seg.path(), error = %e, "cannot remove cleaned file");
                    }
                }
            }
        }
    }
}

fn key_hash(key: &[u8]) -> u128 {
    let mut a = DefaultHasher::new();
    key.hash(&mut a);
    let mut b = DefaultHasher::new();
    0x5eed_u16.hash(&mut b);
    key.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

fn suffixed(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    let mut p = log_path(dir, base).into_os_string();
    p.push(suffix);
    PathBuf::from(p)
}

fn corrupt(path: &Path, position: u64, reason: impl Into<String>) -> StorageError {
    StorageError::CorruptLog {
        path: path.to_path_buf(),
        position,
        reason: reason.into(),
    }
}

/// Every batch of an input, as `(header, bytes)`, read through the I/O hook.
fn for_each_batch(
    input: &Input,
    io: &mut IoHook<'_>,
    mut f: impl FnMut(BatchHeader, &[u8], &mut IoHook<'_>) -> Result<()>,
) -> Result<()> {
    let mut pos = 0u64;
    let mut win = Window::new(input.file.get()?, &input.path, input.size);
    while pos < input.size {
        let header = win.header_at(pos)?;
        let size = header.size_bytes();
        let bytes = win
            .get(pos, size)?
            .ok_or_else(|| corrupt(&input.path, pos, "batch extends past segment end"))?;
        io(size as u64)?;
        f(header, bytes, io)?;
        pos += size as u64;
    }
    Ok(())
}

/// Headers only (for the producers' last batches).
fn for_each_header(
    input: &Input,
    io: &mut IoHook<'_>,
    mut f: impl FnMut(&BatchHeader),
) -> Result<()> {
    let mut pos = 0u64;
    let mut win = Window::new(input.file.get()?, &input.path, input.size);
    while pos < input.size {
        let header = win.header_at(pos)?;
        io(BATCH_HEADER_BYTES as u64)?;
        f(&header);
        pos += header.size_bytes() as u64;
    }
    Ok(())
}

impl CleanTask {
    fn is_aborted(&self, header: &BatchHeader) -> bool {
        header.is_transactional()
            && self.aborted.get(&header.producer_id()).is_some_and(|txns| {
                txns.iter().any(|t| {
                    t.first_offset <= header.base_offset() && header.last_offset() < t.last_offset
                })
            })
    }

    /// Builds the offset map of the dirty section. Returns it and where it ends (records from
    /// there on are not mapped, hence kept).
    fn build_map(&self, io: &mut IoHook<'_>) -> Result<(HashMap<u128, i64>, i64)> {
        let mut map: HashMap<u128, i64> = HashMap::new();
        let mut end = self.clean_end;
        let cap = self.config.offset_map_entries.max(1);
        'segments: for input in self
            .inputs
            .iter()
            .filter(|i| i.next_offset > self.first_dirty)
        {
            let mut full_at = None;
            for_each_batch(input, io, |header, bytes, _io| {
                if full_at.is_some()
                    || header.is_control()
                    || header.last_offset() < self.first_dirty
                    || self.is_aborted(&header)
                {
                    return Ok(());
                }
                for r in decode_records(bytes, self.decompressed_bytes_max)? {
                    let Some(key) = &r.key else { continue };
                    if r.offset < self.first_dirty {
                        continue;
                    }
                    let h = key_hash(key);
                    if map.len() >= cap && !map.contains_key(&h) {
                        full_at = Some(r.offset);
                        return Ok(());
                    }
                    map.insert(h, r.offset);
                }
                Ok(())
            })?;
            if let Some(at) = full_at {
                end = at;
                break 'segments;
            }
        }
        Ok((map, end))
    }

    /// Reads the snapshot's segments and writes the cleaned ones (fsynced), calling `io` with
    /// the bytes of every read and write. Takes no lock; the log may change meanwhile
    /// ([`Log::install_clean`] then refuses the result).
    ///
    /// # Errors
    /// `CorruptLog` / `Io` / decode errors, or whatever `io` returns; files written so far are
    /// deleted.
    pub fn run(self, io: &mut IoHook<'_>) -> Result<CleanedLog> {
        let (map, map_end) = self.build_map(io)?;
        let mut cleaned = CleanedLog {
            dir: self.dir.clone(),
            groups: Vec::new(),
            stats: CleanStats {
                keys_mapped: map.len(),
                cleaned_to: map_end,
                ..CleanStats::default()
            },
        };
        let to_clean: Vec<&Input> = self.inputs.iter().filter(|i| i.base < map_end).collect();
        // Each producer's last batch in the range is kept, even if empty.
        let mut last_of_producer: HashMap<i64, i64> = HashMap::new();
        for input in &to_clean {
            for_each_header(input, io, |h| {
                if h.producer_id() >= 0 {
                    last_of_producer.insert(h.producer_id(), h.last_offset());
                }
            })?;
        }
        // Producers with transactional data seen since their last marker, in this pass.
        let mut txn_data_seen: HashSet<i64> = HashSet::new();
        let mut i = 0;
        while i < to_clean.len() {
            let first = to_clean[i];
            let mut j = i + 1;
            let mut size = first.size;
            while j < to_clean.len()
                && size + to_clean[j].size <= self.segment_bytes
                && to_clean[j].next_offset - first.base <= i64::from(u32::MAX)
            {
                size += to_clean[j].size;
                j += 1;
            }
            let group = &to_clean[i..j];
            let path = suffixed(&self.dir, first.base, CLEANED_SUFFIX);
            let mut out = Segment::create_at(path, first.base, self.index_interval)?;
            // Registered at once so an error below deletes the file.
            cleaned.groups.push(Group {
                inputs: group
                    .iter()
                    .map(|g| (g.base, g.file.clone(), g.size))
                    .collect(),
                output: None,
            });
            let mut kept_markers = HashSet::new();
            let mut last_header = None;
            for input in group {
                cleaned.stats.segments_cleaned += 1;
                cleaned.stats.bytes_before += input.size;
                for_each_batch(input, io, |header, bytes, io| {
                    last_header = Some(header);
                    let is_last =
                        last_of_producer.get(&header.producer_id()) == Some(&header.last_offset());
                    let kept = self.clean_batch(
                        &header,
                        bytes,
                        (&map, map_end),
                        is_last,
                        &mut txn_data_seen,
                        &mut cleaned.stats,
                    )?;
                    if let Some(kept) = kept {
                        let bytes = kept.as_deref().unwrap_or(bytes);
                        let h = BatchHeader::parse(bytes)?;
                        if out.size + bytes.len() as u64 > SEGMENT_BYTES_MAX {
                            return Err(StorageError::InvalidBatchHeader {
                                reason: "cleaned segment would exceed 2 GiB",
                            });
                        }
                        if h.is_control() {
                            kept_markers.insert(h.base_offset());
                        }
                        if h.has_delete_horizon() {
                            let at = h.base_timestamp();
                            let next = &mut cleaned.stats.next_delete_horizon_ms;
                            *next = Some(next.map_or(at, |n| n.min(at)));
                        }
                        io(bytes.len() as u64)?;
                        out.append(bytes, &[h])?;
                    }
                    Ok(())
                })?;
                out.aborted.extend(
                    input
                        .aborted
                        .iter()
                        .filter(|t| kept_markers.contains(&t.last_offset)),
                );
            }
            out.aborted.sort_by_key(|t| t.last_offset);
            if out.is_empty() && i == 0 {
                // The log's first segment stays, holding an empty batch, so the log start
                // offset does not move: a consumer at it reads on from the next batch, as it
                // does in Kafka, instead of getting OFFSET_OUT_OF_RANGE.
                if let Some(h) = &last_header {
                    let bytes = empty_placeholder(h)?;
                    let header = BatchHeader::parse(&bytes)?;
                    io(bytes.len() as u64)?;
                    out.append(&bytes, &[header])?;
                }
            }
            let last = cleaned.groups.last_mut().expect("pushed above");
            if out.is_empty() {
                fs::remove_file(out.path())
                    .map_err(|e| StorageError::io("remove", out.path(), e))?;
            } else {
                out.file()?
                    .sync_data()
                    .map_err(|e| StorageError::io("fsync", out.path(), e))?;
                cleaned.stats.segments_written += 1;
                cleaned.stats.bytes_after += out.size;
                last.output = Some(out);
            }
            i = j;
        }
        Ok(cleaned)
    }

    /// Decides one batch: `None` to drop it, `Some(None)` to keep its bytes, `Some(Some(b))` to
    /// write `b` instead.
    fn clean_batch(
        &self,
        header: &BatchHeader,
        bytes: &[u8],
        (map, map_end): (&HashMap<u128, i64>, i64),
        is_last_of_producer: bool,
        txn_data_seen: &mut HashSet<i64>,
        stats: &mut CleanStats,
    ) -> Result<Option<Option<Vec<u8>>>> {
        let horizon_passed = header.has_delete_horizon() && header.base_timestamp() <= self.now_ms;
        let new_horizon = self.now_ms.saturating_add(self.config.delete_retention_ms);
        if header.is_control() {
            stats.records_read += u64::try_from(header.record_count()).unwrap_or(0);
            let pid = header.producer_id();
            let ends_txn = matches!(
                control_record_type(bytes)?,
                ControlRecordType::Commit | ControlRecordType::Abort
            );
            // Retained while data of its transaction remains (seen in this pass).
            let discardable = ends_txn && !txn_data_seen.remove(&pid);
            if !discardable || is_last_of_producer || self.config.keep_markers {
                return Ok(Some(None));
            }
            if horizon_passed {
                stats.records_removed += u64::try_from(header.record_count()).unwrap_or(0);
                return Ok(None);
            }
            if header.has_delete_horizon() {
                return Ok(Some(None));
            }
            let records = decode_records(bytes, self.decompressed_bytes_max)?;
            return Ok(Some(Some(rebuild_batch(
                header,
                &records,
                Some(new_horizon),
            )?)));
        }
        if header.is_transactional() {
            txn_data_seen.insert(header.producer_id());
        }
        let aborted = self.is_aborted(header);
        let records = decode_records(bytes, self.decompressed_bytes_max)?;
        stats.records_read += records.len() as u64;
        let total = records.len();
        let kept: Vec<_> = if aborted {
            Vec::new()
        } else {
            records
                .into_iter()
                .filter(|r| {
                    // Past what the map covers (it filled up): kept as is, as in Kafka.
                    if r.offset >= map_end {
                        return true;
                    }
                    let Some(key) = &r.key else { return false };
                    if self.config.always_keep.is_some_and(|keep| keep(key)) {
                        return true;
                    }
                    let latest = map.get(&key_hash(key)).is_none_or(|&o| r.offset >= o);
                    latest && (r.value.is_some() || !horizon_passed || self.config.keep_tombstones)
                })
                .collect()
        };
        stats.records_removed += (total - kept.len()) as u64;
        if kept.is_empty() {
            if is_last_of_producer && header.producer_id() >= 0 {
                return Ok(Some(Some(rebuild_batch(header, &[], None)?)));
            }
            return Ok(None);
        }
        let has_tombstone = !self.config.keep_tombstones && kept.iter().any(|r| r.value.is_none());
        if kept.len() == total && (header.has_delete_horizon() || !has_tombstone) {
            return Ok(Some(None));
        }
        let horizon = if header.has_delete_horizon() {
            Some(header.base_timestamp())
        } else if has_tombstone {
            Some(new_horizon)
        } else {
            None
        };
        Ok(Some(Some(rebuild_batch(header, &kept, horizon)?)))
    }
}

impl Log {
    /// The cleaner checkpoint: where the dirty section begins (the log start offset if the
    /// checkpoint is missing or outside the log).
    pub fn cleaner_checkpoint(&self) -> i64 {
        let c = self.cleaner_offset;
        if c < self.log_start_offset || c > self.log_end_offset() {
            self.log_start_offset
        } else {
            c
        }
    }

    /// Number of leading segments that may be cleaned, given the last stable offset.
    fn cleanable_count(&self, now_ms: i64, config: &CompactionConfig, last_stable: i64) -> usize {
        if self.segments.iter().any(|s| !s.aborted_complete) {
            // Aborted data cannot be told from committed data until the index is rebuilt.
            return 0;
        }
        let first_dirty = self.cleaner_checkpoint();
        let lag_cutoff = now_ms.saturating_sub(config.min_compaction_lag_ms);
        let n = self.segments.len();
        self.segments[..n - 1]
            .iter()
            .take_while(|s| {
                s.sealed
                    && s.next_offset <= last_stable
                    && (config.min_compaction_lag_ms <= 0
                        || s.next_offset <= first_dirty
                        || s.max_timestamp <= lag_cutoff)
            })
            .count()
    }

    /// How dirty the log is. `last_stable_offset` is the partition's LSO (the log end offset
    /// when no transaction is open): nothing at or after it is cleaned.
    pub fn dirty_stats(
        &self,
        now_ms: i64,
        config: &CompactionConfig,
        last_stable_offset: i64,
    ) -> DirtyStats {
        let k = self.cleanable_count(now_ms, config, last_stable_offset);
        let first_dirty = self.cleaner_checkpoint();
        let mut clean_bytes = 0;
        let mut dirty_bytes = 0;
        let mut first_dirty_ts = None;
        for s in &self.segments[..k] {
            if s.next_offset <= first_dirty {
                clean_bytes += s.size;
            } else {
                dirty_bytes += s.size;
                if first_dirty_ts.is_none() {
                    first_dirty_ts = Some(s.roll_base_ms.unwrap_or(s.max_timestamp));
                }
            }
        }
        let total = clean_bytes + dirty_bytes;
        DirtyStats {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: self.segments[k].base_offset,
            clean_bytes,
            dirty_bytes,
            dirty_ratio: if total == 0 {
                0.0
            } else {
                dirty_bytes as f64 / total as f64
            },
            delete_horizon_passed: k > 0 && self.delete_horizon_ms.is_some_and(|h| h <= now_ms),
            max_lag_exceeded: config.max_compaction_lag_ms < i64::MAX
                && first_dirty_ts.is_some_and(|ts| {
                    ts >= 0 && ts < now_ms.saturating_sub(config.max_compaction_lag_ms)
                }),
        }
    }

    /// Snapshots what to clean if a clean is due ([`DirtyStats::needs_cleaning`]), else `None`.
    /// Cheap: no I/O. Run the task with [`CleanTask::run`] without the partition lock.
    pub fn prepare_clean(
        &self,
        now_ms: i64,
        config: &CompactionConfig,
        last_stable_offset: i64,
    ) -> Option<CleanTask> {
        let stats = self.dirty_stats(now_ms, config, last_stable_offset);
        if !stats.needs_cleaning(config) {
            return None;
        }
        self.clean_task(now_ms, config, last_stable_offset)
    }

    /// [`Log::prepare_clean`] without the "is it due" check (forced cleans, tests).
    pub fn clean_task(
        &self,
        now_ms: i64,
        config: &CompactionConfig,
        last_stable_offset: i64,
    ) -> Option<CleanTask> {
        let k = self.cleanable_count(now_ms, config, last_stable_offset);
        if k == 0 {
            return None;
        }
        let clean_end = self.segments[k].base_offset;
        let inputs: Vec<Input> = self.segments[..k]
            .iter()
            .map(|s| Input {
                base: s.base_offset,
                next_offset: s.next_offset,
                size: s.size,
                file: s.file_handle().clone(),
                path: s.path().to_path_buf(),
                aborted: s.aborted.clone(),
            })
            .collect();
        let mut aborted: HashMap<i64, Vec<AbortedTxn>> = HashMap::new();
        for s in &self.segments {
            for t in s.aborted.iter().filter(|t| t.first_offset < clean_end) {
                aborted.entry(t.producer_id).or_default().push(*t);
            }
        }
        Some(CleanTask {
            dir: self.dir.clone(),
            inputs,
            aborted,
            first_dirty: self.cleaner_checkpoint().max(self.segments[0].base_offset),
            clean_end,
            now_ms,
            config: *config,
            segment_bytes: self.config.segment_bytes,
            index_interval: u64::from(self.config.index_interval_bytes),
            decompressed_bytes_max: self.config.decompressed_bytes_max,
        })
    }

    /// Swaps cleaned segments in (under the partition lock): if every input segment is still
    /// in the log unchanged, each group's cleaned file replaces its inputs crash-safely (see the
    /// module docs), then the cleaner checkpoint advances. Otherwise nothing changes and the
    /// stats say `installed: false`.
    ///
    /// # Errors
    /// `Io`; the files on disk then recover to a consistent log at the next open, and the log
    /// should be reopened.
    pub fn install_clean(&mut self, cleaned: CleanedLog) -> Result<CleanStats> {
        self.install_clean_steps(cleaned, usize::MAX)
            .map(|(stats, _)| stats)
    }

    /// [`Log::install_clean`] that stops (as a crash would) after `steps` file operations;
    /// returns whether it completed. For crash tests: drop the log and reopen it afterwards.
    ///
    /// # Errors
    /// As [`Log::install_clean`].
    #[doc(hidden)]
    pub fn install_clean_steps(
        &mut self,
        mut cleaned: CleanedLog,
        steps: usize,
    ) -> Result<(CleanStats, bool)> {
        let mut stats = cleaned.stats;
        let unchanged = cleaned
            .groups
            .iter()
            .flat_map(|g| &g.inputs)
            .all(|(base, file, size)| {
                let n = self.segments.len();
                self.segments[..n - 1].iter().any(|s| {
                    s.base_offset == *base
                        && s.size == *size
                        && s.sealed
                        && s.file_handle().same(file)
                })
            });
        if !unchanged || cleaned.dir != self.dir || self.closed {
            return Ok((stats, false));
        }
        let dir = self.dir.clone();
        let mut budget = steps;
        let step = |budget: &mut usize| {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            true
        };
        for group in std::mem::take(&mut cleaned.groups) {
            let base = group.inputs[0].0;
            let swap = suffixed(&dir, base, SWAP_SUFFIX);
            let mut output = group.output;
            if let Some(out) = &output {
                if !step(&mut budget) {
                    return Ok((stats, false));
                }
                fs::rename(out.path(), &swap).map_err(|e| StorageError::io("rename", &swap, e))?;
                sync_dir(&dir)?;
            }
            for (b, _, _) in &group.inputs {
                if !step(&mut budget) {
                    return Ok((stats, false));
                }
                if *b != base || output.is_none() {
                    let p = log_path(&dir, *b);
                    fs::remove_file(&p).map_err(|e| StorageError::io("remove", &p, e))?;
                }
                remove_index_files(&dir, *b)?;
            }
            if output.is_some() {
                if !step(&mut budget) {
                    return Ok((stats, false));
                }
                fs::rename(&swap, log_path(&dir, base))
                    .map_err(|e| StorageError::io("rename", &swap, e))?;
            }
            sync_dir(&dir)?;
            // In memory: replace the inputs by the output.
            let bases: HashSet<i64> = group.inputs.iter().map(|(b, _, _)| *b).collect();
            let at = self
                .segments
                .iter()
                .position(|s| s.base_offset == base)
                .unwrap_or(0);
            self.segments.retain(|s| !bases.contains(&s.base_offset));
            if let Some(mut out) = output.take() {
                out.set_path(log_path(&dir, base));
                if let Err(e) = out.seal(&dir) {
                    tracing::warn!(segment = ?out.path(), error = %e, "cannot write index files");
                }
                self.segments.insert(at, out);
            }
        }
        let first_base = self.segments[0].base_offset;
        if first_base > self.log_start_offset {
            self.log_start_offset = first_base;
            super::checkpoint::write_log_start_offset(&dir, first_base)?;
        }
        self.cleaner_offset = stats.cleaned_to;
        self.delete_horizon_ms = stats.next_delete_horizon_ms;
        write_atomic(
            &dir,
            CLEANER_CHECKPOINT_FILE,
            format!("{}\n", stats.cleaned_to).as_bytes(),
        )?;
        stats.installed = true;
        Ok((stats, true))
    }

    /// Cleans in one call under the caller's lock (tests, small logs): prepare, run, install.
    /// Returns `None` if nothing was due.
    ///
    /// # Errors
    /// As [`CleanTask::run`] and [`Log::install_clean`].
    pub fn clean(
        &mut self,
        now_ms: i64,
        config: &CompactionConfig,
        last_stable_offset: i64,
        io: &mut IoHook<'_>,
    ) -> Result<Option<CleanStats>> {
        let Some(task) = self.prepare_clean(now_ms, config, last_stable_offset) else {
            return Ok(None);
        };
        let cleaned = task.run(io)?;
        self.install_clean(cleaned).map(Some)
    }
}

/// Reads the cleaner checkpoint of `dir` (`None` if absent or unreadable).
pub(crate) fn read_cleaner_checkpoint(dir: &Path) -> Result<Option<i64>> {
    read_offset_file(dir, CLEANER_CHECKPOINT_FILE)
}

/// The offset after the last whole batch of a segment file (header scan), its base if empty.
fn scan_next_offset(path: &Path, base: i64) -> Result<i64> {
    let file = Arc::new(File::open(path).map_err(|e| StorageError::io("open", path, e))?);
    let len = file
        .metadata()
        .map_err(|e| StorageError::io("stat", path, e))?
        .len();
    let mut win = Window::new(file, path, len);
    let mut pos = 0;
    let mut next = base;
    while pos < len {
        let Ok(h) = win.header_at(pos) else { break };
        next = next.max(h.next_offset());
        pos += h.size_bytes() as u64;
    }
    Ok(next)
}

/// Finishes or rolls back interrupted cleans in `dir` before the log is opened: deletes
/// `.cleaned` files and completes every `.swap` (see the module docs).
pub(crate) fn recover_swaps(dir: &Path) -> Result<()> {
    let mut swaps = Vec::new();
    let mut logs = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| StorageError::io("read directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((base, ext)) = super::parse_segment_name(name) else {
            continue;
        };
        match ext {
            "log.cleaned" => {
                let p = entry.path();
                tracing::info!(path = ?p, "deleting an unfinished cleaned segment");
                fs::remove_file(&p).map_err(|e| StorageError::io("remove", &p, e))?;
            }
            "log.swap" => swaps.push(base),
            "log" => logs.push(base),
            _ => {}
        }
    }
    if swaps.is_empty() {
        return Ok(());
    }
    swaps.sort_unstable();
    for base in swaps {
        let swap = suffixed(dir, base, SWAP_SUFFIX);
        let next = scan_next_offset(&swap, base)?;
        tracing::info!(path = ?swap, "completing an interrupted segment swap");
        for &b in logs.iter().filter(|b| **b > base && **b < next) {
            let p = log_path(dir, b);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("remove", &p, e)),
            }
            remove_index_files(dir, b)?;
        }
        remove_index_files(dir, base)?;
        fs::rename(&swap, log_path(dir, base)).map_err(|e| StorageError::io("rename", &swap, e))?;
    }
    sync_dir(dir)
}
