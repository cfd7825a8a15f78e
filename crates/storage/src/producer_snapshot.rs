//! Producer-state snapshot files: `{offset:020}.snapshot` in a partition directory, holding the
//! state of every producer as of the log offset in the name (as Kafka's `<offset>.snapshot`),
//! so that opening a partition rebuilds producer state from the snapshot plus the batches after
//! it instead of the whole log.
//!
//! Format (big-endian), version 2:
//! `"SHPS" | version u16 | crc32c u32 (of everything after it) | offset i64 | count u32 |
//! count × (producer id i64 | epoch i16 | last timestamp i64 | txn first offset i64 (-1: none) |
//! coordinator epoch i32 (-1: none) | batches u8 | batches × (first seq i32 | last seq i32 |
//! first offset i64 | last offset i64 | max timestamp i64))`. Version 1 (no coordinator epoch)
//! is still read, with coordinator epoch -1.
//!
//! Invariants: a file is written whole under a temporary name and renamed, so a snapshot is
//! either complete or absent, except after a crash without fsync, which the CRC catches: a
//! snapshot that does not decode is reported as corrupt and the caller falls back to an older one
//! or to the log. Every count read is bounded by a named limit.
//!
//! Must not: interpret producer state (the core does) or panic on file bytes.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};

/// File-name extension of snapshots.
pub const SNAPSHOT_EXTENSION: &str = "snapshot";
/// Current format version.
pub const SNAPSHOT_VERSION: u16 = 2;
/// Most producers one snapshot may hold.
pub const SNAPSHOT_ENTRIES_MAX: usize = 1_000_000;
/// Most batches per producer one snapshot may hold.
pub const SNAPSHOT_BATCHES_MAX: usize = 16;
const MAGIC: &[u8; 4] = b"SHPS";
const HEADER_BYTES: usize = 4 + 2 + 4 + 8 + 4;
const ENTRY_BYTES: usize = 8 + 2 + 8 + 8 + 4 + 1;
const ENTRY_BYTES_V1: usize = 8 + 2 + 8 + 8 + 1;
const BATCH_BYTES: usize = 4 + 4 + 8 + 8 + 8;
/// Largest snapshot file read.
pub const SNAPSHOT_BYTES_MAX: usize =
    HEADER_BYTES + SNAPSHOT_ENTRIES_MAX * (ENTRY_BYTES + SNAPSHOT_BATCHES_MAX * BATCH_BYTES);
const TMP_SUFFIX: &str = ".tmp";

const _: () = assert!(SNAPSHOT_BATCHES_MAX <= u8::MAX as usize);
const _: () = assert!(SNAPSHOT_ENTRIES_MAX <= u32::MAX as usize);

/// One retained batch of a producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotBatch {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// One producer's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_timestamp: i64,
    /// -1 if no transaction is ongoing.
    pub current_txn_first_offset: i64,
    /// Coordinator epoch of the producer's last transaction marker; -1 if none.
    pub coordinator_epoch: i32,
    /// At most [`SNAPSHOT_BATCHES_MAX`], oldest first.
    pub batches: Vec<SnapshotBatch>,
}

/// The producer state of a partition as of `offset` (the log end offset it covers).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ProducerSnapshot {
    pub offset: i64,
    pub entries: Vec<SnapshotEntry>,
}

/// Path of the snapshot at `offset` in `dir`.
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.{SNAPSHOT_EXTENSION}"))
}

/// Encodes `snapshot`; entries beyond [`SNAPSHOT_ENTRIES_MAX`] and batches beyond
/// [`SNAPSHOT_BATCHES_MAX`] (the newest are kept) are left out.
pub fn encode(snapshot: &ProducerSnapshot) -> Vec<u8> {
    let entries = &snapshot.entries[..snapshot.entries.len().min(SNAPSHOT_ENTRIES_MAX)];
    let mut out = Vec::with_capacity(HEADER_BYTES + entries.len() * (ENTRY_BYTES + BATCH_BYTES));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // CRC, filled in below
    out.extend_from_slice(&snapshot.offset.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        let batches = &e.batches[e.batches.len().saturating_sub(SNAPSHOT_BATCHES_MAX)..];
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.epoch.to_be_bytes());
        out.extend_from_slice(&e.last_timestamp.to_be_bytes());
        out.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        out.push(batches.len() as u8);
        for b in batches {
            out.extend_from_slice(&b.first_sequence.to_be_bytes());
            out.extend_from_slice(&b.last_sequence.to_be_bytes());
            out.extend_from_slice(&b.first_offset.to_be_bytes());
            out.extend_from_slice(&b.last_offset.to_be_bytes());
            out.extend_from_slice(&b.max_timestamp.to_be_bytes());
        }
    }
    let crc = shoal_codec::batch::crc32c(&out[10..]);
    out[6..10].copy_from_slice(&crc.to_be_bytes());
    debug_assert_eq!(
        decode(&out).as_ref().map(|s| s.entries.len()),
        Ok(entries.len())
    );
    out
}

/// A bounds-checked big-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let end = self.pos.checked_add(N).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!("truncated at byte {}", self.pos));
        };
        let mut out = [0; N];
        out.copy_from_slice(&self.bytes[self.pos..end]);
        self.pos = end;
        Ok(out)
    }
    fn i16(&mut self) -> std::result::Result<i16, String> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> std::result::Result<i32, String> {
        self.take().map(i32::from_be_bytes)
    }
    fn i64(&mut self) -> std::result::Result<i64, String> {
        self.take().map(i64::from_be_bytes)
    }
}

/// Decodes a snapshot file's bytes.
///
/// # Errors
/// A description of the first problem: bad magic, unknown version, CRC mismatch, a count over
/// its limit, truncation or trailing bytes.
pub fn decode(bytes: &[u8]) -> std::result::Result<ProducerSnapshot, String> {
    if bytes.len() < HEADER_BYTES {
        return Err(format!("{} bytes is shorter than a header", bytes.len()));
    }
    if bytes.len() > SNAPSHOT_BYTES_MAX {
        return Err(format!("{} bytes is over the limit", bytes.len()));
    }
    if &bytes[..4] != MAGIC {
        return Err("bad magic".into());
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != SNAPSHOT_VERSION && version != 1 {
        return Err(format!("unknown version {version}"));
    }
    let stored = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
    let computed = shoal_codec::batch::crc32c(&bytes[10..]);
    if stored != computed {
        return Err(format!(
            "CRC mismatch: stored {stored:#x}, computed {computed:#x}"
        ));
    }
    let mut r = Reader { bytes, pos: 10 };
    let offset = r.i64()?;
    let count = u32::from_be_bytes(r.take()?) as usize;
    if count > SNAPSHOT_ENTRIES_MAX {
        return Err(format!("{count} entries is over the limit"));
    }
    // Each entry needs at least ENTRY_BYTES: bound the allocation by the input too.
    let mut entries = Vec::with_capacity(count.min(bytes.len() / ENTRY_BYTES_V1));
    for _ in 0..count {
        let producer_id = r.i64()?;
        let epoch = r.i16()?;
        let last_timestamp = r.i64()?;
        let current_txn_first_offset = r.i64()?;
        let coordinator_epoch = if version >= 2 { r.i32()? } else { -1 };
        let [n] = r.take::<1>()?;
        if usize::from(n) > SNAPSHOT_BATCHES_MAX {
            return Err(format!(
                "{n} batches for producer {producer_id} is over the limit"
            ));
        }
        let mut batches = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            batches.push(SnapshotBatch {
                first_sequence: r.i32()?,
                last_sequence: r.i32()?,
                first_offset: r.i64()?,
                last_offset: r.i64()?,
                max_timestamp: r.i64()?,
            });
        }
        entries.push(SnapshotEntry {
            producer_id,
            epoch,
            last_timestamp,
            current_txn_first_offset,
            coordinator_epoch,
            batches,
        });
    }
    if r.pos != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - r.pos));
    }
    Ok(ProducerSnapshot { offset, entries })
}

/// Writes `snapshot` to `dir` under a temporary name and renames it into place. With `durable`
/// the file and the directory are fsynced (clean shutdown); without, a crash may leave a torn
/// file that [`load_latest`] skips.
///
/// # Errors
/// `Io`.
pub fn write(dir: &Path, snapshot: &ProducerSnapshot, durable: bool) -> Result<PathBuf> {
    let path = snapshot_path(dir, snapshot.offset);
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
    let bytes = encode(snapshot);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| StorageError::io("create", &tmp, e))?;
    f.write_all(&bytes)
        .and_then(|()| if durable { f.sync_all() } else { Ok(()) })
        .map_err(|e| StorageError::io("write", &tmp, e))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(|e| StorageError::io("rename", &path, e))?;
    if durable {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StorageError::io("fsync directory", dir, e))?;
    }
    Ok(path)
}

/// Offsets of the snapshot files in `dir`, ascending.
///
/// # Errors
/// `Io` if the directory cannot be read.
pub fn list(dir: &Path) -> Result<Vec<i64>> {
    let mut offsets = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| StorageError::io("read directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((stem, ext)) = name.split_once('.') else {
            continue;
        };
        if ext == SNAPSHOT_EXTENSION && stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit())
        {
            if let Ok(offset) = stem.parse::<i64>() {
                offsets.push(offset);
            }
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

/// The newest snapshot at or below `max_offset` that decodes, skipping (with a warning) any
/// that do not.
///
/// # Errors
/// `Io` if the directory or a file cannot be read.
pub fn load_latest(dir: &Path, max_offset: i64) -> Result<Option<ProducerSnapshot>> {
    for offset in list(dir)?.into_iter().rev().filter(|o| *o <= max_offset) {
        let path = snapshot_path(dir, offset);
        let bytes = match fs::metadata(&path) {
            Ok(m) if m.len() > SNAPSHOT_BYTES_MAX as u64 => {
                tracing::warn!(?path, "ignoring oversized producer snapshot");
                continue;
            }
            Ok(_) => fs::read(&path).map_err(|e| StorageError::io("read", &path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StorageError::io("stat", &path, e)),
        };
        match decode(&bytes) {
            Ok(s) if s.offset == offset => return Ok(Some(s)),
            Ok(s) => {
                tracing::warn!(
                    ?path,
                    inner = s.offset,
                    "ignoring producer snapshot whose offset differs from its name"
                );
            }
            Err(reason) => tracing::warn!(?path, %reason, "ignoring corrupt producer snapshot"),
        }
    }
    Ok(None)
}

/// Deletes the snapshots for which `pred(offset)` holds.
///
/// # Errors
/// `Io`.
pub fn delete_where(dir: &Path, mut pred: impl FnMut(i64) -> bool) -> Result<usize> {
    let mut deleted = 0;
    for offset in list(dir)? {
        if pred(offset) {
            let path = snapshot_path(dir, offset);
            match fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("remove", &path, e)),
            }
        }
    }
    Ok(deleted)
}

/// Keeps the `keep` newest snapshots and deletes the rest.
///
/// # Errors
/// `Io`.
pub fn retain_newest(dir: &Path, keep: usize) -> Result<usize> {
    let offsets = list(dir)?;
    let Some(first_kept) = offsets.len().checked_sub(keep) else {
        return Ok(0);
    };
    let doomed: Vec<i64> = offsets[..first_kept].to_vec();
    delete_where(dir, |o| doomed.contains(&o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(offset: i64) -> ProducerSnapshot {
        ProducerSnapshot {
            offset,
            entries: vec![
                SnapshotEntry {
                    producer_id: 7,
                    epoch: 2,
                    last_timestamp: 1234,
                    current_txn_first_offset: -1,
                    coordinator_epoch: 17,
                    batches: vec![SnapshotBatch {
                        first_sequence: 0,
                        last_sequence: 4,
                        first_offset: 10,
                        last_offset: 14,
                        max_timestamp: 1234,
                    }],
                },
                SnapshotEntry {
                    producer_id: 8,
                    epoch: 0,
                    last_timestamp: -1,
                    current_txn_first_offset: 3,
                    coordinator_epoch: -1,
                    batches: vec![],
                },
            ],
        }
    }

    #[test]
    fn round_trip_and_corruption_is_detected() {
        let s = sample(15);
        let bytes = encode(&s);
        assert_eq!(decode(&bytes), Ok(s));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flip at {i} undetected");
        }
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err());
        }
    }

    #[test]
    fn version_1_files_still_load() {
        // A version-1 file: the same layout without the coordinator epoch.
        let mut v1 = Vec::new();
        v1.extend_from_slice(MAGIC);
        v1.extend_from_slice(&1u16.to_be_bytes());
        v1.extend_from_slice(&[0; 4]);
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&9i64.to_be_bytes());
        v1.extend_from_slice(&3i16.to_be_bytes());
        v1.extend_from_slice(&100i64.to_be_bytes());
        v1.extend_from_slice(&2i64.to_be_bytes());
        v1.push(0);
        let crc = shoal_codec::batch::crc32c(&v1[10..]);
        v1[6..10].copy_from_slice(&crc.to_be_bytes());
        let decoded = decode(&v1).unwrap();
        assert_eq!(decoded.offset, 5);
        assert_eq!(
            decoded.entries,
            vec![SnapshotEntry {
                producer_id: 9,
                epoch: 3,
                last_timestamp: 100,
                current_txn_first_offset: 2,
                coordinator_epoch: -1,
                batches: vec![],
            }]
        );
    }

    #[test]
    fn latest_valid_snapshot_at_or_below_an_offset_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &sample(10), true).unwrap();
        write(dir.path(), &sample(20), false).unwrap();
        write(dir.path(), &sample(30), false).unwrap();
        fs::write(snapshot_path(dir.path(), 20), b"garbage").unwrap();
        assert_eq!(list(dir.path()).unwrap(), vec![10, 20, 30]);
        assert_eq!(load_latest(dir.path(), 25).unwrap().unwrap().offset, 10);
        assert_eq!(load_latest(dir.path(), 30).unwrap().unwrap().offset, 30);
        assert!(load_latest(dir.path(), 9).unwrap().is_none());
        assert_eq!(delete_where(dir.path(), |o| o > 25).unwrap(), 1);
        assert_eq!(retain_newest(dir.path(), 1).unwrap(), 1);
        assert_eq!(list(dir.path()).unwrap(), vec![20]);
    }
}
