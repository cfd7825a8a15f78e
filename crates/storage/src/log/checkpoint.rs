//! Small crash-safe files in a partition directory: the log start offset checkpoint and the
//! clean-shutdown marker.
//!
//! Invariant: a checkpoint file is either its old or its new content after a crash (write to a
//! temporary file, fsync, rename, fsync the directory).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{Result, StorageError};

/// Checkpoint of the log start offset.
pub(crate) const LOG_START_OFFSET_FILE: &str = "log-start-offset";
/// Present only between a clean `close` and the next `open`.
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = "clean_shutdown";
/// Suffix of files being written; leftovers are deleted on open.
pub(crate) const TMP_SUFFIX: &str = ".tmp";
/// A checkpoint is one decimal i64; anything longer is not ours.
const CHECKPOINT_BYTES_MAX: u64 = 64;

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io("fsync directory", dir, e))
}

/// Writes `contents` to `dir/name` atomically and durably.
pub(crate) fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| StorageError::io("create", &tmp, e))?;
    f.write_all(contents)
        .and_then(|_| f.sync_all())
        .map_err(|e| StorageError::io("write", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| StorageError::io("rename", &path, e))?;
    sync_dir(dir)
}

/// Reads the log start offset checkpoint; `None` if absent or unreadable (logged).
pub(crate) fn read_log_start_offset(dir: &Path) -> Result<Option<i64>> {
    read_offset_file(dir, LOG_START_OFFSET_FILE)
}

/// Reads an offset checkpoint file `dir/name`; `None` if absent or unreadable (logged).
pub(crate) fn read_offset_file(dir: &Path, name: &str) -> Result<Option<i64>> {
    let path = dir.join(name);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io("stat", &path, e)),
    };
    if meta.len() > CHECKPOINT_BYTES_MAX {
        tracing::warn!(?path, "ignoring oversized offset checkpoint");
        return Ok(None);
    }
    let text = fs::read(&path).map_err(|e| StorageError::io("read", &path, e))?;
    match std::str::from_utf8(&text)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .filter(|o| *o >= 0)
    {
        Some(o) => Ok(Some(o)),
        None => {
            tracing::warn!(?path, "ignoring unparsable offset checkpoint");
            Ok(None)
        }
    }
}

pub(crate) fn write_log_start_offset(dir: &Path, offset: i64) -> Result<()> {
    write_atomic(dir, LOG_START_OFFSET_FILE, format!("{offset}\n").as_bytes())
}

/// Creates the clean-shutdown marker without fsync. The data it vouches for is fsynced first and
/// the index files it lets the next open trust are validated anyway, so a marker lost in a power
/// cut only costs that open a recovery scan; the broker fsyncs the file system once when every
/// log is closed.
pub(crate) fn write_clean_shutdown_marker(dir: &Path) -> Result<()> {
    let path = dir.join(CLEAN_SHUTDOWN_FILE);
    fs::write(&path, b"").map_err(|e| StorageError::io("write", &path, e))
}

/// Writes the log start offset of a new, empty log without fsync: if it is lost, the next open
/// finds no checkpoint, starts at the first segment (the same offset) and writes it then.
pub(crate) fn write_initial_log_start_offset(dir: &Path, offset: i64) -> Result<()> {
    let path = dir.join(LOG_START_OFFSET_FILE);
    fs::write(&path, format!("{offset}\n")).map_err(|e| StorageError::io("write", &path, e))
}

/// The active segment's recovery point: its base offset and the durable prefix of its file.
pub(crate) const RECOVERY_POINT_FILE: &str = "recovery-point";

/// A recovery point as stored: segment `base`, file `position`, `next_offset` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecoveryPoint {
    pub(crate) base: i64,
    pub(crate) position: u64,
    pub(crate) next_offset: i64,
}

/// Reads the recovery point; `None` if absent or not three numbers (it is only a hint: the
/// open that uses it checks it against the file).
pub(crate) fn read_recovery_point(dir: &Path) -> Option<RecoveryPoint> {
    let path = dir.join(RECOVERY_POINT_FILE);
    let meta = fs::metadata(&path).ok()?;
    if meta.len() > CHECKPOINT_BYTES_MAX {
        return None;
    }
    let text = fs::read_to_string(&path).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let point = RecoveryPoint {
        base: fields.next()?.parse().ok().filter(|b: &i64| *b >= 0)?,
        position: fields.next()?.parse().ok()?,
        next_offset: fields.next()?.parse().ok()?,
    };
    (fields.next().is_none() && point.next_offset >= point.base).then_some(point)
}

/// Replaces the recovery point file (temporary + rename, no fsync: the data it describes was
/// fsynced before, and a lost or stale file only means a longer scan).
pub(crate) fn write_recovery_point(dir: &Path, point: RecoveryPoint) -> Result<()> {
    let text = format!("{} {} {}\n", point.base, point.position, point.next_offset);
    write_hint(dir, RECOVERY_POINT_FILE, text.as_bytes())
}

/// The active segment's offset and time index up to the recovery point, written before it.
pub(crate) const RECOVERY_INDEX_FILE: &str = "recovery-point.index";
pub(crate) const RECOVERY_TIME_INDEX_FILE: &str = "recovery-point.timeindex";
/// The active segment's aborted transactions below the recovery point, when complete.
pub(crate) const RECOVERY_TXN_INDEX_FILE: &str = "recovery-point.txnindex";

/// Replaces `dir/name` (temporary + rename, no fsync: a hint validated when read).
pub(crate) fn write_hint(dir: &Path, name: &str, contents: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    fs::write(&tmp, contents).map_err(|e| StorageError::io("write", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| StorageError::io("rename", &path, e))
}

/// Removes the recovery point and its index files (the data below it is about to change);
/// the point goes first, so a crash in between leaves index files no point refers to.
pub(crate) fn remove_recovery_point(dir: &Path) -> Result<()> {
    for name in [
        RECOVERY_POINT_FILE,
        RECOVERY_INDEX_FILE,
        RECOVERY_TIME_INDEX_FILE,
        RECOVERY_TXN_INDEX_FILE,
    ] {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io("remove", &path, e)),
        }
    }
    Ok(())
}

/// Removes `dir/name` if present.
pub(crate) fn remove_hint(dir: &Path, name: &str) -> Result<()> {
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io("remove", &path, e)),
    }
}
