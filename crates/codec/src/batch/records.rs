//! Records inside a v2 batch: walking (for validation), decoding and encoding.
//!
//! Owns: the record layout (`length varint, attributes i8, timestampDelta varlong, offsetDelta
//! varint, key, value, headers`), its walker, decoder and the one encoder ([`BatchWriter`]).
//! Invariant: a walk succeeds only if exactly `recordCount` records fill the payload exactly
//! and their `offsetDelta`s follow the caller's [`Deltas`] rule.

use std::ops::Range;

use bytes::Bytes;

use super::compression::{compress, decompress, Compression};
use super::error::{BatchError, Result};
use super::{
    check_batch, BatchHeader, TimestampType, BATCH_HEADER_BYTES, CONTROL_BIT, CRC_POS, CRC_START,
    LOG_OVERHEAD, MAGIC_V2, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT,
};
use crate::varint;
use crate::wire::Reader;

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// `timestampDelta`.
    pub timestamp_delta: i64,
    /// `offsetDelta`.
    pub offset_delta: i32,
    /// The key's bytes, `None` if null.
    pub key: Option<Range<usize>>,
    /// The value's bytes, `None` if null.
    pub value: Option<Range<usize>>,
    /// Each header's key and value (empty unless asked for).
    pub headers: Vec<(Range<usize>, Option<Range<usize>>)>,
}

fn bad(index: usize, reason: &'static str) -> BatchError {
    BatchError::InvalidRecord { index, reason }
}

/// A nullable byte field: length varint (-1 = null) then bytes. Ranges are relative to `base`.
fn nullable(c: &mut Reader<'_>, index: usize, base: usize) -> Result<Option<Range<usize>>> {
    let len = c
        .varint()
        .map_err(|_| bad(index, "malformed length varint"))?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| bad(index, "negative length"))?;
    let start = c.position() + base;
    c.take(len)
        .map_err(|_| bad(index, "field extends past record"))?;
    Ok(Some(start..start + len))
}

/// How record `offsetDelta`s are checked by [`walk_records`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deltas {
    /// Record `i` has `offsetDelta == i` (a produced batch).
    Dense,
    /// Strictly increasing and at most `lastOffsetDelta` (a stored batch, which compaction
    /// may have thinned, as Kafka's cleaner does).
    Increasing { last_offset_delta: i32 },
    /// Not checked (a reader that takes the offsets from elsewhere).
    Any,
}

/// Walks `record_count` records in `payload`, calling `on_record` for each. Header ranges are
/// collected only when `with_headers` (validation does not need them).
pub fn walk_records(
    payload: &[u8],
    record_count: i32,
    with_headers: bool,
    deltas: Deltas,
    mut on_record: impl FnMut(RawRecord),
) -> Result<()> {
    let mut previous_delta: i64 = -1;
    let mut c = Reader::new(payload);
    let count = usize::try_from(record_count).map_err(|_| bad(0, "negative record count"))?;
    // Each iteration consumes at least one byte, so the loop is bounded by payload.len().
    for index in 0..count {
        if c.remaining() == 0 {
            return Err(bad(index, "fewer records than recordCount"));
        }
        let length = c
            .varint()
            .map_err(|_| bad(index, "malformed record length"))?;
        let length = usize::try_from(length).map_err(|_| bad(index, "negative record length"))?;
        let base = c.position();
        let body = c
            .take(length)
            .map_err(|_| bad(index, "record extends past batch"))?;
        let mut r = Reader::new(body);
        let _attributes = r.i8().map_err(|_| bad(index, "missing attributes"))?;
        let timestamp_delta = r
            .varlong()
            .map_err(|_| bad(index, "malformed timestampDelta"))?;
        let offset_delta = r
            .varint()
            .map_err(|_| bad(index, "malformed offsetDelta"))?;
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
            Deltas::Any => {}
        }
        let key = nullable(&mut r, index, base)?;
        let value = nullable(&mut r, index, base)?;
        let header_count = r
            .varint()
            .map_err(|_| bad(index, "malformed header count"))?;
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
pub fn payload(header: &BatchHeader, batch: &[u8], budget: usize) -> Result<Vec<u8>> {
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
    /// Timestamp [`encode_batch`] gives every record (`baseTimestamp` = `maxTimestamp`).
    /// Default 0. [`BatchWriter`] takes each record's own instead.
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

fn put_varint(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&varint::varint(v));
}

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&varint::varlong(v));
}

/// A nullable byte field: length varint (-1 for null), then the bytes.
pub(crate) fn put_nullable(out: &mut Vec<u8>, field: Option<&[u8]>, index: usize) -> Result<()> {
    match field {
        None => put_varint(out, -1),
        Some(b) => {
            let len = i32::try_from(b.len()).map_err(|_| bad(index, "a field of 2 GiB or more"))?;
            put_varint(out, len);
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

/// Appends one record (`length`, attributes 0, the deltas, key, value, headers) to `out`;
/// `body` is scratch space.
pub(crate) fn put_record<'h>(
    out: &mut Vec<u8>,
    body: &mut Vec<u8>,
    index: usize,
    timestamp_delta: i64,
    offset_delta: i32,
    (key, value): KeyValue<'_>,
    headers: impl ExactSizeIterator<Item = (&'h [u8], Option<&'h [u8]>)>,
) -> Result<()> {
    body.clear();
    body.push(0); // record attributes (unused in v2)
    put_varlong(body, timestamp_delta);
    put_varint(body, offset_delta);
    put_nullable(body, key, index)?;
    put_nullable(body, value, index)?;
    let count = i32::try_from(headers.len()).map_err(|_| bad(index, "too many headers"))?;
    put_varint(body, count);
    for (k, v) in headers {
        put_nullable(body, Some(k), index)?;
        put_nullable(body, v, index)?;
    }
    let len = i32::try_from(body.len()).map_err(|_| bad(index, "a record of 2 GiB or more"))?;
    put_varint(out, len);
    out.extend_from_slice(body);
    Ok(())
}

/// The header fields of a batch being written.
pub(crate) struct HeaderFields {
    pub(crate) base_offset: i64,
    pub(crate) partition_leader_epoch: i32,
    pub(crate) attributes: i16,
    pub(crate) last_offset_delta: i32,
    pub(crate) base_timestamp: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
    pub(crate) record_count: i32,
}

/// Fills the header of `out` (its first [`BATCH_HEADER_BYTES`], the records following) with
/// `fields`, `batchLength` and the CRC.
///
/// # Errors
/// `InvalidBatchHeader` if the batch is 2 GiB or more.
pub(crate) fn seal(out: &mut [u8], fields: &HeaderFields) -> Result<()> {
    let batch_length =
        i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| BatchError::InvalidBatchHeader {
            reason: "a batch of 2 GiB or more",
        })?;
    let mut h = Vec::with_capacity(BATCH_HEADER_BYTES);
    h.extend_from_slice(&fields.base_offset.to_be_bytes());
    h.extend_from_slice(&batch_length.to_be_bytes());
    h.extend_from_slice(&fields.partition_leader_epoch.to_be_bytes());
    h.push(MAGIC_V2 as u8);
    h.extend_from_slice(&[0; 4]); // crc, filled below
    h.extend_from_slice(&fields.attributes.to_be_bytes());
    h.extend_from_slice(&fields.last_offset_delta.to_be_bytes());
    h.extend_from_slice(&fields.base_timestamp.to_be_bytes());
    h.extend_from_slice(&fields.max_timestamp.to_be_bytes());
    h.extend_from_slice(&fields.producer_id.to_be_bytes());
    h.extend_from_slice(&fields.producer_epoch.to_be_bytes());
    h.extend_from_slice(&fields.base_sequence.to_be_bytes());
    h.extend_from_slice(&fields.record_count.to_be_bytes());
    debug_assert_eq!(h.len(), BATCH_HEADER_BYTES);
    out[..BATCH_HEADER_BYTES].copy_from_slice(&h);
    let crc = super::crc32c(&out[CRC_START..]);
    out[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Writes records into one v2 batch, as Kafka's clients do: offset deltas 0, 1, 2 ...,
/// `baseTimestamp` the first record's timestamp, `maxTimestamp` the largest, each record's
/// timestamp a delta from the first, headers in the order given (a key may repeat).
#[derive(Debug, Default)]
pub struct BatchWriter {
    records: Vec<u8>,
    body: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchWriter {
    /// A writer whose record buffer starts with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> Self {
        BatchWriter {
            records: Vec::with_capacity(bytes),
            ..BatchWriter::default()
        }
    }

    /// Records written so far.
    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// Appends a record; `None` is a null key, value or header value.
    ///
    /// # Errors
    /// `InvalidRecord` if a field is 2 GiB or more, or the batch already holds `i32::MAX`
    /// records.
    pub fn push<'h>(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl ExactSizeIterator<Item = (&'h [u8], Option<&'h [u8]>)>,
    ) -> Result<()> {
        let index = self.count;
        if index == i32::MAX {
            return Err(bad(index as usize, "more than i32::MAX records"));
        }
        if index == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        } else {
            self.max_timestamp = self.max_timestamp.max(timestamp);
        }
        put_record(
            &mut self.records,
            &mut self.body,
            index as usize,
            timestamp.wrapping_sub(self.base_timestamp),
            index,
            (key, value),
            headers,
        )?;
        self.count += 1;
        Ok(())
    }

    /// The batch: `opts` gives every header field but the timestamps (`opts.timestamp_ms` is
    /// not used), its records compressed with `compression`.
    ///
    /// # Errors
    /// `InvalidBatchHeader` without a record or at 2 GiB or more; `Decompression` (naming the
    /// codec) if the codec fails.
    pub fn finish(self, opts: &BatchOptions, compression: Compression) -> Result<Vec<u8>> {
        if self.count == 0 {
            return Err(BatchError::InvalidBatchHeader {
                reason: "a batch needs a record",
            });
        }
        let mut out;
        if compression == Compression::None {
            out = Vec::with_capacity(BATCH_HEADER_BYTES + self.records.len());
            out.resize(BATCH_HEADER_BYTES, 0);
            out.extend_from_slice(&self.records);
        } else {
            let packed = compress(compression, &self.records)?;
            out = Vec::with_capacity(BATCH_HEADER_BYTES + packed.len());
            out.resize(BATCH_HEADER_BYTES, 0);
            out.extend_from_slice(&packed);
        }
        let mut attributes = i16::from(compression.id());
        if opts.timestamp_type == TimestampType::LogAppendTime {
            attributes |= TIMESTAMP_TYPE_BIT;
        }
        if opts.transactional {
            attributes |= TRANSACTIONAL_BIT;
        }
        if opts.control {
            attributes |= CONTROL_BIT;
        }
        seal(
            &mut out,
            &HeaderFields {
                base_offset: opts.base_offset,
                partition_leader_epoch: opts.partition_leader_epoch,
                attributes,
                last_offset_delta: self.count - 1,
                base_timestamp: self.base_timestamp,
                max_timestamp: self.max_timestamp,
                producer_id: opts.producer_id,
                producer_epoch: opts.producer_epoch,
                base_sequence: opts.base_sequence,
                record_count: self.count,
            },
        )?;
        debug_assert!(check_batch(&out).is_ok());
        Ok(out)
    }
}

/// Encodes an uncompressed v2 batch of `(key, value)` records, each with `opts.timestamp_ms`,
/// with a correct CRC.
///
/// # Panics
/// If `records` is empty, has more than `i32::MAX` entries, or a batch would exceed `i32::MAX`
/// bytes: these are programming errors of the caller (the broker), not input.
pub fn encode_batch(records: &[KeyValue<'_>], opts: BatchOptions) -> Vec<u8> {
    assert!(
        !records.is_empty(),
        "encode_batch needs at least one record"
    );
    let mut w = BatchWriter::default();
    for (key, value) in records {
        w.push(opts.timestamp_ms, *key, *value, std::iter::empty())
            .expect("key/value shorter than i32::MAX: see # Panics");
    }
    w.finish(&opts, Compression::None)
        .expect("batch shorter than i32::MAX: see # Panics")
}
