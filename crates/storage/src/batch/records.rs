//! Records inside a v2 batch: walking (for validation), decoding and encoding.
//!
//! Owns: the record layout (`length varint, attributes i8, timestampDelta varlong, offsetDelta
//! varint, key, value, headers`). Invariant: a walk succeeds only if exactly `recordCount`
//! records fill the payload exactly and record `i` has `offsetDelta == i`.

use std::ops::Range;

use bytes::Bytes;

use super::compression::decompress;
use super::varint::{put_varint, put_varlong, Cursor};
use super::{check_batch, BatchHeader, TimestampType, BATCH_HEADER_BYTES, LOG_OVERHEAD, MAGIC_V2};
use crate::error::{Result, StorageError};

/// One record header (Kafka requires a non-null key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Header key (UTF-8 by Kafka's contract; not checked).
    pub key: Bytes,
    /// Header value, `None` if null.
    pub value: Option<Bytes>,
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView {
    /// Absolute offset (`baseOffset + offsetDelta`).
    pub offset: i64,
    /// Record timestamp (the batch's `maxTimestamp` for LogAppendTime batches).
    pub timestamp: i64,
    /// Key, `None` if null.
    pub key: Option<Bytes>,
    /// Value, `None` if null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<RecordHeader>,
}

/// A record located within a payload, as ranges into it.
pub(crate) struct RawRecord {
    pub(crate) timestamp_delta: i64,
    pub(crate) offset_delta: i32,
    pub(crate) key: Option<Range<usize>>,
    pub(crate) value: Option<Range<usize>>,
    pub(crate) headers: Vec<(Range<usize>, Option<Range<usize>>)>,
}

fn bad(index: usize, reason: &'static str) -> StorageError {
    StorageError::InvalidRecord { index, reason }
}

/// A nullable byte field: length varint (-1 = null) then bytes. Ranges are relative to `base`.
fn nullable(c: &mut Cursor<'_>, index: usize, base: usize) -> Result<Option<Range<usize>>> {
    let len = c.varint().ok_or(bad(index, "malformed length varint"))?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| bad(index, "negative length"))?;
    let r = c.take(len).ok_or(bad(index, "field extends past record"))?;
    Ok(Some(r.start + base..r.end + base))
}

/// How record `offsetDelta`s are checked by [`walk_records`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deltas {
    /// Record `i` has `offsetDelta == i` (a produced batch).
    Dense,
    /// Strictly increasing and at most `lastOffsetDelta` (a stored batch, which compaction
    /// may have thinned, as Kafka's cleaner does).
    Increasing { last_offset_delta: i32 },
}

/// Walks `record_count` records in `payload`, calling `on_record` for each. Header ranges are
/// collected only when `with_headers` (validation does not need them).
pub(crate) fn walk_records(
    payload: &[u8],
    record_count: i32,
    with_headers: bool,
    deltas: Deltas,
    mut on_record: impl FnMut(RawRecord),
) -> Result<()> {
    let mut previous_delta: i64 = -1;
    let mut c = Cursor::new(payload);
    let count = usize::try_from(record_count).map_err(|_| bad(0, "negative record count"))?;
    // Each iteration consumes at least one byte, so the loop is bounded by payload.len().
    for index in 0..count {
        if c.remaining() == 0 {
            return Err(bad(index, "fewer records than recordCount"));
        }
        let length = c.varint().ok_or(bad(index, "malformed record length"))?;
        let length = usize::try_from(length).map_err(|_| bad(index, "negative record length"))?;
        let body = c
            .take(length)
            .ok_or(bad(index, "record extends past batch"))?;
        let base = body.start;
        let mut r = Cursor::new(&payload[body]);
        let _attributes = r.i8().ok_or(bad(index, "missing attributes"))?;
        let timestamp_delta = r.varlong().ok_or(bad(index, "malformed timestampDelta"))?;
        let offset_delta = r.varint().ok_or(bad(index, "malformed offsetDelta"))?;
        match deltas {
            Deltas::Dense => {
                if usize::try_from(offset_delta).ok() != Some(index) {
                    return Err(bad(index, "offsetDelta is not the record's index"));
                }
            }
            Deltas::Increasing { last_offset_delta } => {
                if i64::from(offset_delta) <= previous_delta || offset_delta > last_offset_delta {
                    return Err(bad(index, "offsetDelta out of order"));
                }
                previous_delta = i64::from(offset_delta);
            }
        }
        let key = nullable(&mut r, index, base)?;
        let value = nullable(&mut r, index, base)?;
        let header_count = r.varint().ok_or(bad(index, "malformed header count"))?;
        if header_count < 0 {
            return Err(bad(index, "negative header count"));
        }
        let mut headers = Vec::new();
        for _ in 0..header_count {
            let k = nullable(&mut r, index, base)?.ok_or(bad(index, "null header key"))?;
            let v = nullable(&mut r, index, base)?;
            if with_headers {
                headers.push((k, v));
            }
        }
        if r.remaining() != 0 {
            return Err(bad(index, "record length does not match its fields"));
        }
        on_record(RawRecord {
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        });
    }
    if c.remaining() != 0 {
        return Err(bad(count, "bytes after the last record"));
    }
    Ok(())
}

/// The payload of a batch (after its header) decompressed within `budget`.
pub(crate) fn payload(header: &BatchHeader, batch: &[u8], budget: usize) -> Result<Vec<u8>> {
    let compressed = batch.get(BATCH_HEADER_BYTES..).unwrap_or(&[]);
    decompress(header.compression(), compressed, budget)
}

/// Decodes every record of one whole batch (`batch_bytes` must start with the batch; bytes after
/// it are ignored). Decompression is limited to `decompressed_bytes_max`.
///
/// # Errors
/// Header/CRC errors, `DecompressedTooLarge`, `Decompression`, `InvalidRecord`.
pub fn decode_records(
    batch_bytes: &[u8],
    decompressed_bytes_max: usize,
) -> Result<Vec<RecordView>> {
    let (header, batch) = check_batch(batch_bytes)?;
    let data = Bytes::from(payload(&header, batch, decompressed_bytes_max)?);
    let mut out = Vec::new();
    let slice = |r: Range<usize>| data.slice(r);
    let deltas = Deltas::Increasing {
        last_offset_delta: header.last_offset_delta(),
    };
    walk_records(&data, header.record_count(), true, deltas, |raw| {
        let timestamp = match header.timestamp_type() {
            TimestampType::LogAppendTime => header.max_timestamp(),
            TimestampType::CreateTime => header.base_timestamp().wrapping_add(raw.timestamp_delta),
        };
        out.push(RecordView {
            offset: header
                .base_offset()
                .wrapping_add(i64::from(raw.offset_delta)),
            timestamp,
            key: raw.key.map(slice),
            value: raw.value.map(slice),
            headers: raw
                .headers
                .into_iter()
                .map(|(k, v)| RecordHeader {
                    key: slice(k),
                    value: v.map(slice),
                })
                .collect(),
        });
    })?;
    Ok(out)
}

/// One record to encode: `(key, value)`, `None` meaning null.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Options for [`encode_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// `baseOffset` (the log overwrites it on append). Default 0.
    pub base_offset: i64,
    /// `partitionLeaderEpoch`. Default -1.
    pub partition_leader_epoch: i32,
    /// `producerId`. Default -1 (none).
    pub producer_id: i64,
    /// `producerEpoch`. Default -1.
    pub producer_epoch: i16,
    /// `baseSequence`. Default -1.
    pub base_sequence: i32,
    /// Set the transactional bit.
    pub transactional: bool,
    /// Set the control bit (COMMIT/ABORT markers: the caller supplies the control key/value).
    pub control: bool,
    /// Timestamp of every record (`baseTimestamp` = `maxTimestamp`). Default 0.
    pub timestamp_ms: i64,
    /// Timestamp type bit.
    pub timestamp_type: TimestampType,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            timestamp_ms: 0,
            timestamp_type: TimestampType::CreateTime,
        }
    }
}

fn put_nullable(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(
                out,
                i32::try_from(b.len()).expect("key/value longer than i32::MAX: see # Panics"),
            );
            out.extend_from_slice(b);
        }
    }
}

/// Encodes an uncompressed v2 batch of `(key, value)` records with a correct CRC.
///
/// # Panics
/// If `records` is empty, has more than `i32::MAX` entries, or a batch would exceed `i32::MAX`
/// bytes: these are programming errors of the caller (the broker), not input.
pub fn encode_batch(records: &[KeyValue<'_>], opts: BatchOptions) -> Vec<u8> {
    assert!(
        !records.is_empty(),
        "encode_batch needs at least one record"
    );
    let record_count = i32::try_from(records.len()).expect("record count fits i32");
    let mut out = vec![0u8; BATCH_HEADER_BYTES];
    let mut body = Vec::new();
    for (i, (key, value)) in records.iter().enumerate() {
        body.clear();
        body.push(0); // record attributes (unused)
        put_varlong(&mut body, 0); // timestampDelta
        put_varint(&mut body, i as i32); // offsetDelta, i < record_count <= i32::MAX
        put_nullable(&mut body, *key);
        put_nullable(&mut body, *value);
        put_varint(&mut body, 0); // headers
        put_varint(
            &mut out,
            i32::try_from(body.len()).expect("record fits i32"),
        );
        out.extend_from_slice(&body);
    }
    let batch_length = i32::try_from(out.len() - LOG_OVERHEAD).expect("batch fits i32");
    let mut attributes: i16 = 0;
    if opts.timestamp_type == TimestampType::LogAppendTime {
        attributes |= super::TIMESTAMP_TYPE_BIT;
    }
    if opts.transactional {
        attributes |= super::TRANSACTIONAL_BIT;
    }
    if opts.control {
        attributes |= super::CONTROL_BIT;
    }
    let mut h = Vec::with_capacity(BATCH_HEADER_BYTES);
    h.extend_from_slice(&opts.base_offset.to_be_bytes());
    h.extend_from_slice(&batch_length.to_be_bytes());
    h.extend_from_slice(&opts.partition_leader_epoch.to_be_bytes());
    h.push(MAGIC_V2 as u8);
    h.extend_from_slice(&[0; 4]); // crc, filled below
    h.extend_from_slice(&attributes.to_be_bytes());
    h.extend_from_slice(&(record_count - 1).to_be_bytes());
    h.extend_from_slice(&opts.timestamp_ms.to_be_bytes());
    h.extend_from_slice(&opts.timestamp_ms.to_be_bytes());
    h.extend_from_slice(&opts.producer_id.to_be_bytes());
    h.extend_from_slice(&opts.producer_epoch.to_be_bytes());
    h.extend_from_slice(&opts.base_sequence.to_be_bytes());
    h.extend_from_slice(&record_count.to_be_bytes());
    assert_eq!(h.len(), BATCH_HEADER_BYTES);
    out[..BATCH_HEADER_BYTES].copy_from_slice(&h);
    let crc = crc32c::crc32c(&out[super::CRC_START..]);
    out[super::CRC_POS..super::CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    debug_assert!(check_batch(&out).is_ok());
    out
}
