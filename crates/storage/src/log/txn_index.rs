//! The aborted-transaction index of one segment (Kafka's `.txnindex`): one [`AbortedTxn`] per
//! ABORT marker in the segment that ended a non-empty transaction, in marker-offset order.
//!
//! File `{base_offset:020}.txnindex`, big-endian: `"SHTX" | version u16 | crc32c u32 (of
//! everything after it) | count u32 | count × (version i16 = 0 | producer id i64 | first offset
//! i64 | last offset i64 | last stable offset i64)` (the entry is Kafka's `AbortedTxn`).
//!
//! Invariants: written with the other index files when the segment is sealed (its data then
//! fsynced), so, like them, it is a hint validated on load: a file that fails the CRC, the
//! length or the offset checks is ignored and the segment's index is marked incomplete, to be
//! rebuilt by the producer-state replay (only that knows where each transaction began). Entries
//! are bounded by the segment size (each needs a marker batch of at least a batch header).
//!
//! Must not: panic on file bytes.

use std::fs;
use std::path::{Path, PathBuf};

use crate::batch::BATCH_HEADER_BYTES;
use crate::error::{Result, StorageError};

const MAGIC: &[u8; 4] = b"SHTX";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 4 + 2 + 4 + 4;
/// Bytes of one entry (Kafka's `AbortedTxn` record size).
pub(crate) const ENTRY_BYTES: usize = 2 + 8 + 8 + 8 + 8;
const ENTRY_VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// Offset of the transaction's first batch on the partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The last stable offset right after the marker: the first offset of the earliest other
    /// transaction still ongoing, else `last_offset + 1`. Lets a search stop early: no later
    /// aborted transaction begins below it.
    pub last_stable_offset: i64,
}

pub(crate) fn txn_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.txnindex"))
}

/// Encodes `entries` as a file.
pub(crate) fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + entries.len() * ENTRY_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    let count = u32::try_from(entries.len()).expect("entries bounded by the segment size");
    out.extend_from_slice(&count.to_be_bytes());
    for e in entries {
        out.extend_from_slice(&ENTRY_VERSION.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    let crc = shoal_codec::batch::crc32c(&out[10..]);
    out[6..10].copy_from_slice(&crc.to_be_bytes());
    out
}

fn i64_at(bytes: &[u8], pos: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[pos..pos + 8]);
    i64::from_be_bytes(b)
}

/// Decodes a file of the segment `[base, next_offset)`.
///
/// # Errors
/// Why the file is not a valid index of that segment.
pub(crate) fn decode(
    bytes: &[u8],
    base: i64,
    next_offset: i64,
) -> std::result::Result<Vec<AbortedTxn>, String> {
    if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC {
        return Err("not a transaction index file".into());
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(format!("unknown transaction index version {version}"));
    }
    let crc = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
    if crc != shoal_codec::batch::crc32c(&bytes[10..]) {
        return Err("transaction index CRC mismatch".into());
    }
    let count = u32::from_be_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]) as usize;
    let body = &bytes[HEADER_BYTES..];
    if count.checked_mul(ENTRY_BYTES) != Some(body.len()) {
        return Err("transaction index length does not match its count".into());
    }
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(count);
    for c in body.chunks_exact(ENTRY_BYTES) {
        if i16::from_be_bytes([c[0], c[1]]) != ENTRY_VERSION {
            return Err("unknown aborted transaction entry version".into());
        }
        let e = AbortedTxn {
            producer_id: i64_at(c, 2),
            first_offset: i64_at(c, 10),
            last_offset: i64_at(c, 18),
            last_stable_offset: i64_at(c, 26),
        };
        if !(base..next_offset).contains(&e.last_offset)
            || e.first_offset > e.last_offset
            || e.first_offset < 0
            || e.last_stable_offset > e.last_offset.saturating_add(1)
            || out.last().is_some_and(|p| p.last_offset >= e.last_offset)
        {
            return Err(format!("invalid aborted transaction entry {e:?}"));
        }
        out.push(e);
    }
    Ok(out)
}

/// Reads and validates the index file of a segment of `size` bytes; `Ok(None)` if it is
/// missing or invalid (logged), so the index must be rebuilt.
///
/// # Errors
/// `Io` other than "not found".
pub(crate) fn load(
    dir: &Path,
    base: i64,
    next_offset: i64,
    size: u64,
) -> Result<Option<Vec<AbortedTxn>>> {
    let path = txn_index_path(dir, base);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io("stat", &path, e)),
    };
    let max = HEADER_BYTES as u64 + (size / BATCH_HEADER_BYTES as u64 + 1) * ENTRY_BYTES as u64;
    if meta.len() > max {
        tracing::info!(
            ?path,
            "transaction index larger than its segment allows; rebuilding"
        );
        return Ok(None);
    }
    let bytes = fs::read(&path).map_err(|e| StorageError::io("read", &path, e))?;
    match decode(&bytes, base, next_offset) {
        Ok(entries) => Ok(Some(entries)),
        Err(reason) => {
            tracing::info!(?path, reason, "invalid transaction index; rebuilding");
            Ok(None)
        }
    }
}

/// Appends to `out` the entries overlapping `[start, end)` (`last_offset >= start` and
/// `first_offset < end`); returns true when no later entry (here or in a later segment) can
/// overlap, as Kafka's `TransactionIndex.collectAbortedTxns` does.
pub(crate) fn collect(
    entries: &[AbortedTxn],
    start: i64,
    end: i64,
    out: &mut Vec<AbortedTxn>,
) -> bool {
    let from = entries.partition_point(|e| e.last_offset < start);
    for e in &entries[from..] {
        if e.first_offset < end {
            out.push(*e);
        }
        if e.last_stable_offset >= end {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn files_round_trip_and_bad_files_are_rejected() {
        let entries = vec![txn(1, 100, 105, 106), txn(2, 103, 110, 111)];
        let bytes = encode(&entries);
        assert_eq!(decode(&bytes, 100, 200), Ok(entries.clone()));
        assert_eq!(decode(&encode(&[]), 100, 200), Ok(vec![]));
        // Outside the segment.
        assert!(decode(&bytes, 106, 200).is_err());
        assert!(decode(&bytes, 100, 110).is_err());
        // Torn or flipped.
        assert!(decode(&bytes[..bytes.len() - 1], 100, 200).is_err());
        assert!(decode(&[], 100, 200).is_err());
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(decode(&flipped, 100, 200).is_err());
        // Out of order.
        let unordered = encode(&[txn(2, 103, 110, 111), txn(1, 100, 105, 106)]);
        assert!(decode(&unordered, 100, 200).is_err());
    }

    #[test]
    fn collect_returns_overlapping_entries_and_stops_at_the_lso() {
        let entries = vec![
            txn(1, 0, 5, 3), // txn of 2 still ongoing from 3
            txn(2, 3, 8, 9), // none ongoing after it
            txn(3, 10, 12, 13),
        ];
        let mut out = Vec::new();
        assert!(collect(&entries, 6, 9, &mut out));
        assert_eq!(out, vec![entries[1]]);
        out.clear();
        assert!(!collect(&entries, 0, 20, &mut out));
        assert_eq!(out, entries);
        out.clear();
        // Fetch [0, 3): only the first overlaps, and its LSO (3) ends the search.
        assert!(collect(&entries, 0, 3, &mut out));
        assert_eq!(out, vec![entries[0]]);
        out.clear();
        assert!(!collect(&entries, 13, 20, &mut out));
        assert!(out.is_empty());
    }
}
