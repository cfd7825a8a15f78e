//! One segment: a `.log` file of whole batches plus its sparse in-memory indexes.
//!
//! Owns: the segment file, the offset index (relative offset → position, an entry at most every
//! `index.interval.bytes`), the time index (max timestamp so far → relative offset of the batch
//! that reached it), the aborted-transaction index (see [`super::txn_index`]), and their
//! `.index` / `.timeindex` / `.txnindex` files. The aborted-transaction index is filled by the
//! caller (it needs producer state); it is *complete* when it holds every ABORT marker of the
//! segment: always for a segment created here or loaded with a valid `.txnindex`, never for one
//! recovered by a scan until the caller says it replayed it.
//!
//! Invariants: `size` is the file length and ends on a batch boundary; batches have increasing
//! offsets, all within `[base_offset, base_offset + u32::MAX]`; index entries are strictly
//! increasing in both fields and point at batch starts. Index files exist on disk only for a
//! sealed segment, whose data was fsynced before they were written; a sealed segment is never
//! appended to again (truncation unseals it first). Index files are hints: they are validated on
//! load and rebuilt by a scan when wrong.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{check_batch, BatchHeader, BATCH_HEADER_BYTES, NO_TIMESTAMP};
use crate::error::{Result, StorageError};

use super::checkpoint::TMP_SUFFIX;
use super::files::SegmentFile;
use super::txn_index::{self, txn_index_path, AbortedTxn};

/// Bytes read per `pread` when scanning whole batches (recovery, cleaning, iteration).
const SCAN_CHUNK_BYTES: usize = 256 * 1024;
/// Bytes read per `pread` when walking only headers over small batches.
const HEADER_CHUNK_BYTES: usize = 4096;
/// From this batch size on, a header walk reads just the next header: reading ahead would
/// copy more record bytes than it saves in calls.
const HEADER_ONLY_BATCH_BYTES: usize = 1024;
const OFFSET_ENTRY_BYTES: usize = 8;
const TIME_ENTRY_BYTES: usize = 12;

/// A prefix of a segment file known to be fsynced: it ends at `position`, a batch boundary,
/// where the next offset is `next_offset`; `index` is its offset and time index as written
/// with it (the `.index` / `.timeindex` encodings), if they could be read; `aborted` its
/// complete aborted-transaction index (markers below `next_offset`), if one was saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DurablePrefix {
    pub(crate) position: u64,
    pub(crate) next_offset: i64,
    pub(crate) index: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) aborted: Option<Vec<AbortedTxn>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IndexEntry {
    rel: u32,
    pos: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TimeEntry {
    ts: i64,
    rel: u32,
}

pub(crate) fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}
fn index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.index"))
}
fn time_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.timeindex"))
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io("remove", path, e)),
    }
}

/// Removes the index files of segment `base` (they are stale or orphaned).
pub(crate) fn remove_index_files(dir: &Path, base: i64) -> Result<()> {
    remove_if_exists(&index_path(dir, base))?;
    remove_if_exists(&time_index_path(dir, base))?;
    remove_if_exists(&txn_index_path(dir, base))
}

fn corrupt(path: &Path, position: u64, reason: impl Into<String>) -> StorageError {
    StorageError::CorruptLog {
        path: path.to_path_buf(),
        position,
        reason: reason.into(),
    }
}

/// A window over a file region read in chunks, so scanning small batches costs few syscalls.
pub(crate) struct Window<'a> {
    file: Arc<File>,
    path: &'a Path,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
    /// Bytes read ahead per `pread`; `None` for a header walk, which sizes reads by the
    /// batches it meets (see [`Window::headers`]).
    chunk: Option<usize>,
    /// Size of the last batch whose header was parsed (header walks only).
    last_batch: usize,
}

impl<'a> Window<'a> {
    /// A window for scans that read whole batches.
    pub(crate) fn new(file: Arc<File>, path: &'a Path, end: u64) -> Self {
        Window {
            file,
            path,
            end,
            buf: Vec::new(),
            buf_start: 0,
            chunk: Some(SCAN_CHUNK_BYTES),
            last_batch: 0,
        }
    }

    /// A window for walks that read only batch headers (locating the batches a fetch sends):
    /// it reads a small chunk while batches are small and only the header once they are not,
    /// so the record bytes it skips are mostly never copied.
    pub(crate) fn headers(file: Arc<File>, path: &'a Path, end: u64) -> Self {
        Window {
            chunk: None,
            ..Window::new(file, path, end)
        }
    }

    /// Bytes `[pos, pos + len)`, or `None` if they extend past `end`.
    pub(crate) fn get(&mut self, pos: u64, len: usize) -> Result<Option<&[u8]>> {
        let Some(stop) = pos.checked_add(len as u64).filter(|s| *s <= self.end) else {
            return Ok(None);
        };
        let buf_end = self.buf_start + self.buf.len() as u64;
        if pos < self.buf_start || stop > buf_end {
            let chunk = match self.chunk {
                Some(chunk) => chunk,
                None if self.last_batch >= HEADER_ONLY_BATCH_BYTES => len,
                None => HEADER_CHUNK_BYTES,
            };
            // `stop <= end`, so `want` is bounded by the file size.
            let want = (len.max(chunk) as u64).min(self.end - pos) as usize;
            self.buf.resize(want, 0);
            self.file
                .read_exact_at(&mut self.buf, pos)
                .map_err(|e| StorageError::io("read", self.path, e))?;
            self.buf_start = pos;
        }
        let from = (pos - self.buf_start) as usize;
        Ok(Some(&self.buf[from..from + len]))
    }

    /// The header of the batch at `pos`, checked to lie wholly before `end`.
    pub(crate) fn header_at(&mut self, pos: u64) -> Result<BatchHeader> {
        let path = self.path;
        let end = self.end;
        let bytes = self
            .get(pos, BATCH_HEADER_BYTES)?
            .ok_or_else(|| corrupt(path, pos, "truncated batch header"))?;
        let header = BatchHeader::parse(bytes).map_err(|e| corrupt(path, pos, e.to_string()))?;
        if pos + header.size_bytes() as u64 > end {
            return Err(corrupt(path, pos, "batch extends past segment end"));
        }
        self.last_batch = header.size_bytes();
        Ok(header)
    }
}

pub(crate) struct Segment {
    pub(crate) base_offset: i64,
    path: PathBuf,
    file: SegmentFile,
    /// Bytes in the file (a batch boundary).
    pub(crate) size: u64,
    /// Offset after the last batch (`base_offset` if empty).
    pub(crate) next_offset: i64,
    offset_index: Vec<IndexEntry>,
    time_index: Vec<TimeEntry>,
    bytes_since_index: u64,
    index_interval: u64,
    /// Greatest batch `maxTimestamp` (`NO_TIMESTAMP` if none).
    pub(crate) max_timestamp: i64,
    /// Base offset of the first batch reaching `max_timestamp`.
    pub(crate) offset_of_max_timestamp: i64,
    /// What `segment.ms` is measured from: the first batch's timestamp, else first append time.
    pub(crate) roll_base_ms: Option<i64>,
    /// Index files on disk match this segment (see module invariants).
    pub(crate) sealed: bool,
    /// Aborted transactions whose ABORT marker is in this segment, by marker offset.
    pub(crate) aborted: Vec<AbortedTxn>,
    /// Whether `aborted` holds every ABORT marker of the segment (see the module docs).
    pub(crate) aborted_complete: bool,
    /// When not complete: every aborted transaction whose marker is below this offset is
    /// known (saved with the recovery point), so a replay may start here.
    pub(crate) aborted_known_below: Option<i64>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("base_offset", &self.base_offset)
            .field("size", &self.size)
            .field("next_offset", &self.next_offset)
            .field("sealed", &self.sealed)
            .finish()
    }
}

/// How opening an existing segment went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Loaded from index files plus a header scan of the tail.
    FromIndex,
    /// Scanned with CRC checks (all of it, or the part after a recovery point:
    /// `scanned_bytes`), the durable prefix before it walked by headers (`walked_bytes`,
    /// from the saved index's last entry or from the start); nothing was wrong.
    Recovered {
        scanned_bytes: u64,
        walked_bytes: u64,
    },
    /// Scanned and cut at the first bad batch.
    Truncated { removed_bytes: u64 },
}

impl Segment {
    fn empty(base_offset: i64, path: PathBuf, file: File, index_interval: u64) -> Segment {
        Segment {
            base_offset,
            file: SegmentFile::new(path.clone(), file),
            path,
            size: 0,
            next_offset: base_offset,
            offset_index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            index_interval,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            roll_base_ms: None,
            sealed: false,
            aborted: Vec::new(),
            aborted_complete: true,
            aborted_known_below: None,
        }
    }

    /// Creates a new, empty segment file (replacing any leftover with the same name).
    pub(crate) fn create(dir: &Path, base_offset: i64, index_interval: u64) -> Result<Segment> {
        remove_index_files(dir, base_offset)?;
        let path = log_path(dir, base_offset);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| StorageError::io("create", &path, e))?;
        Ok(Segment::empty(base_offset, path, file, index_interval))
    }

    /// Creates an empty segment file at `path` (a cleaned segment being written; see
    /// [`super::cleaner`]), replacing any file there.
    pub(crate) fn create_at(
        path: PathBuf,
        base_offset: i64,
        index_interval: u64,
    ) -> Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| StorageError::io("create", &path, e))?;
        Ok(Segment::empty(base_offset, path, file, index_interval))
    }

    /// Records that the segment's file was renamed to `path`.
    pub(crate) fn set_path(&mut self, path: PathBuf) {
        self.file.set_path(&path);
        self.path = path;
    }

    /// Opens an existing segment: from its index files if `trust_index` and they are valid,
    /// otherwise by a scan that truncates at the first bad batch. The scan checks CRCs
    /// everywhere except in `durable`, a prefix known fsynced (a recovery point): that part is
    /// walked by batch headers only, and if the walk does not end exactly at the recovery
    /// point the whole segment is scanned after all.
    pub(crate) fn open(
        dir: &Path,
        base_offset: i64,
        index_interval: u64,
        trust_index: bool,
        durable: Option<DurablePrefix>,
    ) -> Result<(Segment, Opened)> {
        let path = log_path(dir, base_offset);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io("open", &path, e))?;
        let len = file
            .metadata()
            .map_err(|e| StorageError::io("stat", &path, e))?
            .len();
        let mut seg = Segment::empty(base_offset, path, file, index_interval);
        seg.size = len;
        if trust_index {
            match seg.load_index_files(dir) {
                Ok(()) => {
                    seg.sealed = true;
                    match txn_index::load(dir, base_offset, seg.next_offset, seg.size)? {
                        Some(aborted) => seg.aborted = aborted,
                        None => seg.aborted_complete = false,
                    }
                    return Ok((seg, Opened::FromIndex));
                }
                Err(e) => {
                    tracing::info!(segment = ?seg.path, error = %e, "rebuilding segment index");
                    seg.reset();
                    seg.size = len;
                }
            }
        }
        remove_index_files(dir, base_offset)?;
        seg.aborted_complete = false;
        let mut walked_bytes = 0;
        let walked = match &durable {
            Some(prefix) => match seg.load_durable_prefix_index(prefix) {
                Some(pos) => {
                    let indexed = seg.offset_index.last().map_or(0, |e| u64::from(e.pos));
                    walked_bytes = pos - indexed;
                    Some(pos)
                }
                None => {
                    walked_bytes = prefix.position;
                    seg.walk_durable_prefix(prefix)?
                }
            },
            None => None,
        };
        let scan_start = walked.unwrap_or(0);
        if let (Some(_), Some(prefix)) = (walked, &durable) {
            if let Some(aborted) = &prefix.aborted {
                seg.aborted.clone_from(aborted);
                seg.aborted_known_below = Some(prefix.next_offset);
            }
        }
        let valid = match walked {
            Some(pos) => seg.scan_from(pos, len, true)?,
            None => {
                seg.size = len;
                seg.rebuild(true)?
            }
        };
        if valid < len {
            tracing::warn!(
                segment = ?seg.path,
                valid_bytes = valid,
                removed_bytes = len - valid,
                "truncating torn or corrupt segment tail"
            );
            seg.file()?
                .set_len(valid)
                .map_err(|e| StorageError::io("truncate", &seg.path, e))?;
            seg.size = valid;
            return Ok((
                seg,
                Opened::Truncated {
                    removed_bytes: len - valid,
                },
            ));
        }
        Ok((
            seg,
            Opened::Recovered {
                scanned_bytes: len - scan_start,
                walked_bytes: if walked.is_some() { walked_bytes } else { 0 },
            },
        ))
    }

    fn reset(&mut self) {
        self.size = 0;
        self.next_offset = self.base_offset;
        self.offset_index.clear();
        self.time_index.clear();
        self.bytes_since_index = 0;
        self.max_timestamp = NO_TIMESTAMP;
        self.offset_of_max_timestamp = self.base_offset;
        self.roll_base_ms = None;
        self.sealed = false;
    }

    /// The segment file, opened again if the pool closed it.
    ///
    /// # Errors
    /// `Io` if it cannot be opened.
    pub(crate) fn file(&self) -> Result<Arc<File>> {
        self.file.get()
    }
    /// The file's slot in the pool: its identity, and a way to open it later.
    pub(crate) fn file_handle(&self) -> &SegmentFile {
        &self.file
    }
    /// Closes the file until it is next used.
    pub(crate) fn release_file(&self) {
        self.file.release();
    }
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Whether a batch ending at `last_offset` can be stored with a u32 relative offset.
    pub(crate) fn fits_offset(&self, last_offset: i64) -> bool {
        last_offset
            .checked_sub(self.base_offset)
            .is_some_and(|d| (0..=i64::from(u32::MAX)).contains(&d))
    }

    /// Rebuilds all in-memory state by scanning `[0, size)`. Returns the end of the last good
    /// batch; with `check_crc`, stops at the first batch that is torn, corrupt or out of order.
    fn rebuild(&mut self, check_crc: bool) -> Result<u64> {
        let file_len = self.size;
        self.reset();
        self.scan_from(0, file_len, check_crc)
    }

    /// Rebuilds the in-memory state of `[0, prefix.position)` from the prefix's saved index and
    /// the headers after its last entry. `None` (state reset) when there is no saved index or
    /// it does not describe this file up to exactly the prefix's position and offset.
    fn load_durable_prefix_index(&mut self, prefix: &DurablePrefix) -> Option<u64> {
        let (idx, tidx) = prefix.index.as_ref()?;
        let file_len = self.size;
        if prefix.position > file_len {
            return None;
        }
        let path = self.path.clone();
        match self.load_index_entries(idx, tidx, prefix.position, (&path, &path)) {
            Ok(()) if self.next_offset == prefix.next_offset && self.size == prefix.position => {
                Some(prefix.position)
            }
            _ => {
                self.reset();
                self.size = file_len;
                None
            }
        }
    }

    /// The offset and time index entries of `[0, position)` (batches below `next_offset`), in
    /// the `.index` / `.timeindex` encodings: what [`DurablePrefix::index`] is written from.
    pub(crate) fn index_prefix(&self, position: u64, next_offset: i64) -> (Vec<u8>, Vec<u8>) {
        let rel_end = next_offset - self.base_offset;
        let mut idx = Vec::new();
        for e in self
            .offset_index
            .iter()
            .filter(|e| u64::from(e.pos) < position)
        {
            idx.extend_from_slice(&e.rel.to_be_bytes());
            idx.extend_from_slice(&e.pos.to_be_bytes());
        }
        let mut tidx = Vec::new();
        for e in self
            .time_index
            .iter()
            .filter(|e| i64::from(e.rel) < rel_end)
        {
            tidx.extend_from_slice(&e.ts.to_be_bytes());
            tidx.extend_from_slice(&e.rel.to_be_bytes());
        }
        (idx, tidx)
    }

    /// Rebuilds the in-memory state of `[0, prefix.position)` from batch headers alone.
    /// Returns the position reached, or `None` (state reset) when the walk does not end exactly
    /// at the prefix's position and offset: the recovery point does not describe this file.
    fn walk_durable_prefix(&mut self, prefix: &DurablePrefix) -> Result<Option<u64>> {
        let file_len = self.size;
        self.reset();
        if prefix.position > file_len {
            self.size = file_len;
            return Ok(None);
        }
        let path = self.path.clone();
        let mut win = Window::headers(self.file()?, &path, prefix.position);
        let mut pos = 0u64;
        let mut landed = true;
        while pos < prefix.position {
            let Ok(header) = win.header_at(pos) else {
                landed = false;
                break;
            };
            if header.base_offset() < self.next_offset
                || header.last_offset_delta() < 0
                || !self.fits_offset(header.last_offset())
            {
                landed = false;
                break;
            }
            self.on_batch(&header, pos);
            pos += header.size_bytes() as u64;
        }
        if !landed || pos != prefix.position || self.next_offset != prefix.next_offset {
            self.reset();
            self.size = file_len;
            return Ok(None);
        }
        Ok(Some(pos))
    }

    /// Continues a scan at `pos` (a batch boundary, state rebuilt below it) up to `file_len`;
    /// returns the end of the last good batch.
    fn scan_from(&mut self, mut pos: u64, file_len: u64, check_crc: bool) -> Result<u64> {
        let path = self.path.clone();
        let mut win = Window::new(self.file()?, &path, file_len);
        while pos < file_len {
            let Some(bytes) = win.get(pos, BATCH_HEADER_BYTES)? else {
                break;
            };
            let Ok(header) = BatchHeader::parse(bytes) else {
                break;
            };
            let size = header.size_bytes();
            if check_crc {
                let Some(bytes) = win.get(pos, size)? else {
                    break;
                };
                if check_batch(bytes).is_err() {
                    break;
                }
            } else if pos + size as u64 > file_len {
                break;
            }
            if header.base_offset() < self.next_offset
                || header.last_offset_delta() < 0
                || !self.fits_offset(header.last_offset())
            {
                break;
            }
            self.on_batch(&header, pos);
            pos += size as u64;
        }
        Ok(pos)
    }

    /// Updates indexes and counters for a batch just written at `pos`.
    fn on_batch(&mut self, header: &BatchHeader, pos: u64) {
        // Callers checked fits_offset; positions fit u32 because segment.bytes <= i32::MAX.
        let rel = (header.base_offset() - self.base_offset) as u32;
        let mut indexed = false;
        if self.bytes_since_index >= self.index_interval && pos > 0 {
            self.offset_index.push(IndexEntry {
                rel,
                pos: pos as u32,
            });
            self.bytes_since_index = 0;
            indexed = true;
        }
        let size = header.size_bytes() as u64;
        self.bytes_since_index += size;
        if header.max_timestamp() > self.max_timestamp {
            self.max_timestamp = header.max_timestamp();
            self.offset_of_max_timestamp = header.base_offset();
        }
        if indexed {
            self.maybe_time_entry();
        }
        if self.size == 0 && pos == 0 && header.max_timestamp() >= 0 {
            self.roll_base_ms = Some(header.max_timestamp());
        }
        self.next_offset = header.next_offset();
        self.size = pos + size;
    }

    fn maybe_time_entry(&mut self) {
        let last = self.time_index.last().map_or(NO_TIMESTAMP, |e| e.ts);
        if self.max_timestamp > last {
            self.time_index.push(TimeEntry {
                ts: self.max_timestamp,
                rel: (self.offset_of_max_timestamp - self.base_offset) as u32,
            });
        }
    }

    /// Writes `bytes` (whole batches with offsets assigned, described by `headers`) at the end.
    /// On failure the file is cut back to its previous size (best effort) and state is unchanged.
    pub(crate) fn append(&mut self, bytes: &[u8], headers: &[BatchHeader]) -> Result<()> {
        debug_assert!(!self.sealed, "append to a sealed segment");
        let start = self.size;
        let file = self.file()?;
        if let Err(e) = file.write_all_at(bytes, start) {
            if let Err(e2) = file.set_len(start) {
                tracing::error!(segment = ?self.path, error = %e2, "cannot cut back failed append");
            }
            return Err(StorageError::io("write", &self.path, e));
        }
        let mut pos = start;
        for h in headers {
            self.on_batch(h, pos);
            pos += h.size_bytes() as u64;
        }
        debug_assert_eq!(pos, start + bytes.len() as u64);
        Ok(())
    }

    /// File position to start scanning from for `offset` (a batch start at or before it).
    fn index_position(&self, offset: i64) -> u64 {
        let rel = offset
            .saturating_sub(self.base_offset)
            .clamp(0, i64::from(u32::MAX)) as u32;
        let i = self.offset_index.partition_point(|e| e.rel <= rel);
        if i == 0 {
            0
        } else {
            u64::from(self.offset_index[i - 1].pos)
        }
    }

    pub(crate) fn window(&self) -> Result<Window<'_>> {
        Ok(Window::new(self.file()?, &self.path, self.size))
    }

    /// Position and header of the first batch with `last_offset >= offset`, if any.
    pub(crate) fn find_batch(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        if offset >= self.next_offset {
            return Ok(None);
        }
        let mut win = Window::headers(self.file()?, &self.path, self.size);
        let mut pos = self.index_position(offset);
        while pos < self.size {
            let header = win.header_at(pos)?;
            if header.last_offset() >= offset {
                return Ok(Some((pos, header)));
            }
            pos += header.size_bytes() as u64;
        }
        Ok(None)
    }

    /// Offset to start a timestamp search from: the batch that first reached the greatest
    /// indexed timestamp `<= ts` (every earlier batch has a smaller max timestamp).
    pub(crate) fn time_lookup(&self, ts: i64) -> i64 {
        let i = self.time_index.partition_point(|e| e.ts <= ts);
        if i == 0 {
            self.base_offset
        } else {
            self.base_offset + i64::from(self.time_index[i - 1].rel)
        }
    }

    /// Where a run of whole batches that starts with `first` (at `pos`) ends: the batches that
    /// follow it are taken while they fit in `max_bytes` from `pos` (the first always counts,
    /// whatever its size) and their last offset is below `limit`. Returns the end position and
    /// the offset to read from next: the base offset of the first batch not taken, or the
    /// segment's next offset when the run reaches its end.
    ///
    /// With `batches`, every batch taken is pushed there with its position and the walk reads
    /// each header. Without, it jumps ahead along the offset index (whose entries point at
    /// batch starts) and reads only the headers after the last entry that fits, so a large
    /// read costs a few small `pread`s whatever the batch size.
    pub(crate) fn extent(
        &self,
        pos: u64,
        first: BatchHeader,
        max_bytes: usize,
        limit: i64,
        mut batches: Option<&mut Vec<(BatchHeader, u64)>>,
    ) -> Result<(u64, i64)> {
        let budget_end = pos.saturating_add(max_bytes as u64).min(self.size);
        let mut end = pos + first.size_bytes() as u64;
        if let Some(batches) = batches.as_deref_mut() {
            batches.push((first, pos));
        }
        if batches.is_none() {
            // The last entry at or before the budget whose batch starts at or below `limit`:
            // every batch before it ends by the budget and lies below `limit`.
            let i = self
                .offset_index
                .partition_point(|e| u64::from(e.pos) <= budget_end);
            if let Some(e) = i.checked_sub(1).map(|i| self.offset_index[i]) {
                if u64::from(e.pos) > end && self.base_offset + i64::from(e.rel) <= limit {
                    end = u64::from(e.pos);
                }
            }
        }
        let mut win = Window::headers(self.file()?, &self.path, self.size);
        while end < self.size {
            let header = win.header_at(end)?;
            let stop = end + header.size_bytes() as u64;
            if stop > budget_end || header.last_offset() >= limit {
                return Ok((end, header.base_offset()));
            }
            if let Some(batches) = batches.as_deref_mut() {
                batches.push((header, end));
            }
            end = stop;
        }
        Ok((end, self.next_offset))
    }

    /// Reads `len` bytes at `pos` (must lie within the segment).
    pub(crate) fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        if pos.saturating_add(len as u64) > self.size {
            return Err(corrupt(&self.path, pos, "read past segment end"));
        }
        let mut buf = vec![0u8; len];
        self.file()?
            .read_exact_at(&mut buf, pos)
            .map_err(|e| StorageError::io("read", &self.path, e))?;
        Ok(buf)
    }

    /// Drops every batch with `last_offset >= offset` (and the aborted transactions they ended)
    /// and unseals the segment.
    pub(crate) fn truncate_to(&mut self, dir: &Path, offset: i64) -> Result<()> {
        let Some((pos, first_removed)) = self.find_batch(offset)? else {
            return Ok(());
        };
        let cut = first_removed.base_offset();
        self.aborted.retain(|t| t.last_offset < cut);
        remove_index_files(dir, self.base_offset)?;
        self.sealed = false;
        self.file()?
            .set_len(pos)
            .map_err(|e| StorageError::io("truncate", &self.path, e))?;
        self.size = pos;
        let valid = self.rebuild(false)?;
        if valid != pos {
            return Err(corrupt(
                &self.path,
                valid,
                "unreadable batch before truncation point",
            ));
        }
        Ok(())
    }

    /// Writes the index files (the caller guarantees the data is fsynced) and marks the segment
    /// sealed. Adds a final time entry so the file's last entry is the segment's max timestamp.
    pub(crate) fn seal(&mut self, dir: &Path) -> Result<()> {
        self.maybe_time_entry();
        let mut idx = Vec::with_capacity(self.offset_index.len() * OFFSET_ENTRY_BYTES);
        for e in &self.offset_index {
            idx.extend_from_slice(&e.rel.to_be_bytes());
            idx.extend_from_slice(&e.pos.to_be_bytes());
        }
        let mut tidx = Vec::with_capacity(self.time_index.len() * TIME_ENTRY_BYTES);
        for e in &self.time_index {
            tidx.extend_from_slice(&e.ts.to_be_bytes());
            tidx.extend_from_slice(&e.rel.to_be_bytes());
        }
        write_replace(&index_path(dir, self.base_offset), &idx)?;
        write_replace(&time_index_path(dir, self.base_offset), &tidx)?;
        self.write_txn_index(dir)?;
        self.sealed = true;
        Ok(())
    }

    /// Writes the `.txnindex` file if the aborted index is complete, else makes sure none is
    /// left (an absent file means "rebuild").
    pub(crate) fn write_txn_index(&self, dir: &Path) -> Result<()> {
        let path = txn_index_path(dir, self.base_offset);
        if self.aborted_complete {
            write_replace(&path, &txn_index::encode(&self.aborted))
        } else {
            remove_if_exists(&path)
        }
    }

    /// Records an aborted transaction whose marker is in this segment; a second entry for the
    /// same marker is ignored (replays may meet markers already indexed). Rewrites the file of
    /// a sealed segment.
    pub(crate) fn add_aborted(&mut self, dir: &Path, txn: AbortedTxn) -> Result<()> {
        let at = self
            .aborted
            .partition_point(|t| t.last_offset < txn.last_offset);
        if self
            .aborted
            .get(at)
            .is_some_and(|t| t.last_offset == txn.last_offset)
        {
            return Ok(());
        }
        self.aborted.insert(at, txn);
        if self.sealed {
            self.write_txn_index(dir)?;
        }
        Ok(())
    }

    /// Marks the segment as being appended to again: its index files become stale.
    pub(crate) fn unseal(&mut self, dir: &Path) -> Result<()> {
        if self.sealed {
            remove_index_files(dir, self.base_offset)?;
            self.sealed = false;
        }
        Ok(())
    }

    /// Loads and validates the index files, then scans batch headers from the last indexed
    /// position to the end of the file.
    fn load_index_files(&mut self, dir: &Path) -> Result<()> {
        let ipath = index_path(dir, self.base_offset);
        let tpath = time_index_path(dir, self.base_offset);
        let idx = read_bounded(&ipath, self.size)?;
        let tidx = read_bounded(&tpath, self.size)?;
        let file_len = self.size;
        self.load_index_entries(&idx, &tidx, file_len, (&ipath, &tpath))
    }

    /// Installs index entries (the `.index` / `.timeindex` encodings) describing `[0, end)`,
    /// validated, then walks batch headers from the last indexed position to `end`, which
    /// must be reached exactly. `paths` name the sources in errors.
    fn load_index_entries(
        &mut self,
        idx: &[u8],
        tidx: &[u8],
        end: u64,
        paths: (&Path, &Path),
    ) -> Result<()> {
        let (ipath, tpath) = paths;
        if !idx.len().is_multiple_of(OFFSET_ENTRY_BYTES)
            || !tidx.len().is_multiple_of(TIME_ENTRY_BYTES)
        {
            return Err(corrupt(
                ipath,
                0,
                "index file length not a multiple of entry size",
            ));
        }
        let file_len = end;
        self.reset();
        for c in idx.chunks_exact(OFFSET_ENTRY_BYTES) {
            let e = IndexEntry {
                rel: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                pos: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
            };
            if let Some(prev) = self.offset_index.last() {
                if e.rel <= prev.rel || e.pos <= prev.pos {
                    return Err(corrupt(ipath, 0, "index entries not increasing"));
                }
            }
            if u64::from(e.pos) >= file_len || e.pos == 0 {
                return Err(corrupt(ipath, 0, "index entry outside segment"));
            }
            self.offset_index.push(e);
        }
        for c in tidx.chunks_exact(TIME_ENTRY_BYTES) {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&c[..8]);
            let e = TimeEntry {
                ts: i64::from_be_bytes(ts),
                rel: u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
            };
            if let Some(prev) = self.time_index.last() {
                if e.ts <= prev.ts {
                    return Err(corrupt(tpath, 0, "time index entries not increasing"));
                }
            }
            self.time_index.push(e);
        }
        if let Some(last) = self.time_index.last() {
            self.max_timestamp = last.ts;
            self.offset_of_max_timestamp = self.base_offset + i64::from(last.rel);
        }
        let path = self.path.clone();
        let mut win = Window::new(self.file()?, &path, file_len);
        if file_len > 0 {
            let first = win.header_at(0)?;
            if first.base_offset() < self.base_offset {
                return Err(corrupt(&path, 0, "first batch below segment base offset"));
            }
            if first.max_timestamp() >= 0 {
                self.roll_base_ms = Some(first.max_timestamp());
            }
        }
        let (mut pos, mut rel_floor) = match self.offset_index.last() {
            Some(e) => {
                let h = win.header_at(u64::from(e.pos))?;
                if h.base_offset().saturating_sub(self.base_offset) != i64::from(e.rel) {
                    return Err(corrupt(
                        &path,
                        u64::from(e.pos),
                        "index entry does not match batch",
                    ));
                }
                (u64::from(e.pos), i64::from(e.rel))
            }
            None => (0, 0),
        };
        self.next_offset = self.base_offset;
        while pos < file_len {
            let h = win.header_at(pos)?;
            if h.base_offset().saturating_sub(self.base_offset) < rel_floor
                || h.last_offset_delta() < 0
                || !self.fits_offset(h.last_offset())
            {
                return Err(corrupt(&path, pos, "batch offsets out of order"));
            }
            rel_floor = h.next_offset().saturating_sub(self.base_offset);
            if h.max_timestamp() > self.max_timestamp {
                self.max_timestamp = h.max_timestamp();
                self.offset_of_max_timestamp = h.base_offset();
            }
            self.bytes_since_index += h.size_bytes() as u64;
            self.next_offset = h.next_offset();
            pos += h.size_bytes() as u64;
        }
        self.size = pos;
        let rel_end = self.next_offset - self.base_offset;
        if self.time_index.iter().any(|e| i64::from(e.rel) >= rel_end) {
            return Err(corrupt(tpath, 0, "time index entry past segment end"));
        }
        Ok(())
    }

    /// Deletes the segment's files.
    pub(crate) fn delete_files(&self, dir: &Path) -> Result<()> {
        remove_if_exists(&self.path)?;
        remove_index_files(dir, self.base_offset)
    }
}

pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    let meta = fs::metadata(path).map_err(|e| StorageError::io("stat", path, e))?;
    if meta.len()
        > max
            .saturating_add(TIME_ENTRY_BYTES as u64)
            .saturating_mul(2)
    {
        return Err(corrupt(
            path,
            0,
            "index file larger than its segment allows",
        ));
    }
    fs::read(path).map_err(|e| StorageError::io("read", path, e))
}

/// Writes a file via a temporary and rename, without fsync: index files are validated hints.
fn write_replace(path: &Path, contents: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, contents).map_err(|e| StorageError::io("write", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| StorageError::io("rename", path, e))
}
