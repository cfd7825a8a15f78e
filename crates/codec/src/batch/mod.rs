//! Kafka RecordBatch (magic v2): parsing, in-place rewriting, decoding and encoding, CRC-32C and
//! compression (feature `batch`).
//!
//! Owns: the byte layout of a v2 batch header ([`BatchHeader`]), offset/epoch/timestamp
//! rewriting that keeps the bytes otherwise as received, the record layout ([`walk_records`],
//! [`decode_records`], [`BatchWriter`], [`encode_batch`]), control records
//! ([`encode_end_txn_marker`], [`control_record_type`]), compaction's rewrite
//! ([`rebuild_batch`]) and every codec Kafka uses ([`Compression`], [`decompress`] under a
//! byte budget, [`compress`]). The broker's storage, the producer and the share consumer all
//! use this one implementation; what a produced record set must satisfy (limits, Kafka's
//! per-record rules) is `shoal-storage`'s policy, built on [`walk_records`].
//!
//! Invariants: nothing here panics on bytes from the network or disk; every length read from input
//! is checked against the bytes present before use, and decompression is bounded by a caller-given
//! budget. Rewrites outside the CRC span (`baseOffset`, `partitionLeaderEpoch`) keep the CRC valid;
//! rewrites inside it (`set_log_append_time`) recompute the CRC.
//!
//! Must not: depend on `kafka-protocol`, do I/O, or allocate from an untrusted length without a cap.

mod compression;
mod control;
mod error;
mod records;
mod rewrite;

pub use compression::{compress, decompress, Compression};
pub use control::{
    control_record_type, encode_end_txn_marker, end_txn_marker, ControlRecordType, EndTxnMarker,
};
pub use error::{BatchError, Result};
pub use records::{
    decode_records, encode_batch, payload, walk_records, BatchOptions, BatchWriter, Deltas,
    KeyValue, RawRecord, RecordHeader, RecordView,
};
pub use rewrite::{empty_placeholder, rebuild_batch};

/// CRC-32C (Castagnoli), the checksum of a v2 batch (over [`CRC_START`]..end).
pub fn crc32c(bytes: &[u8]) -> u32 {
    ::crc32c::crc32c(bytes)
}

/// Bytes before `batchLength`'s payload: `baseOffset` (8) + `batchLength` (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of a v2 batch header, through `recordCount`.
pub const BATCH_HEADER_BYTES: usize = 61;
/// The only supported magic value.
pub const MAGIC_V2: i8 = 2;
/// `timestamp` value meaning "no timestamp".
pub const NO_TIMESTAMP: i64 = -1;

const _: () = assert!(BATCH_HEADER_BYTES > LOG_OVERHEAD);

// Field positions within the batch.
/// `baseOffset` (i64).
pub const BASE_OFFSET_POS: usize = 0;
/// `batchLength` (i32).
pub const BATCH_LENGTH_POS: usize = 8;
/// `partitionLeaderEpoch` (i32).
pub const PARTITION_LEADER_EPOCH_POS: usize = 12;
/// `magic` (i8).
pub const MAGIC_POS: usize = 16;
/// `crc` (u32).
pub const CRC_POS: usize = 17;
/// CRC-32C covers attributes through the end of the batch.
pub const CRC_START: usize = 21;
/// `attributes` (i16).
pub const ATTRIBUTES_POS: usize = 21;
/// `lastOffsetDelta` (i32).
pub const LAST_OFFSET_DELTA_POS: usize = 23;
/// `baseTimestamp` (i64).
pub const BASE_TIMESTAMP_POS: usize = 27;
/// `maxTimestamp` (i64).
pub const MAX_TIMESTAMP_POS: usize = 35;
/// `producerId` (i64).
pub const PRODUCER_ID_POS: usize = 43;
/// `producerEpoch` (i16).
pub const PRODUCER_EPOCH_POS: usize = 51;
/// `baseSequence` (i32).
pub const BASE_SEQUENCE_POS: usize = 53;
/// `recordCount` (i32).
pub const RECORD_COUNT_POS: usize = 57;
const _: () = assert!(RECORD_COUNT_POS + 4 == BATCH_HEADER_BYTES);

/// `attributes` bits 0-2: the compression codec.
pub const COMPRESSION_MASK: i16 = 0x07;
/// `attributes` bit 3: LogAppendTime.
pub const TIMESTAMP_TYPE_BIT: i16 = 0x08;
/// `attributes` bit 4: transactional.
pub const TRANSACTIONAL_BIT: i16 = 0x10;
/// `attributes` bit 5: a control batch.
pub const CONTROL_BIT: i16 = 0x20;
/// `attributes` bit 6: `baseTimestamp` is a delete horizon.
pub const DELETE_HORIZON_BIT: i16 = 0x40;

/// How a batch's timestamps were assigned (`attributes` bit 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's timestamps.
    #[default]
    CreateTime,
    /// The broker's append time (stored in `maxTimestamp`).
    LogAppendTime,
}

/// A parsed v2 batch header. Constructed only by [`BatchHeader::parse`], so the magic is 2, the
/// length is at least a header, and the compression codec is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    base_offset: i64,
    batch_length: i32,
    partition_leader_epoch: i32,
    magic: i8,
    crc: u32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
}

fn be_i64(b: &[u8], pos: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[pos..pos + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], pos: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[pos..pos + 4]);
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], pos: usize) -> i16 {
    i16::from_be_bytes([b[pos], b[pos + 1]])
}

impl BatchHeader {
    /// Parses the header at the start of `bytes` (which may extend past this batch).
    ///
    /// Checks structure only: enough bytes for the header, magic 2, `batchLength` at least a
    /// header, a known codec. It does not check that the whole batch is present, nor the CRC.
    ///
    /// # Errors
    /// `Truncated`, `InvalidBatchLength`, `UnsupportedMagic`, `UnknownCompression`.
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader> {
        if bytes.len() < MAGIC_POS + 1 {
            return Err(BatchError::Truncated {
                what: "batch header",
                needed: BATCH_HEADER_BYTES,
                available: bytes.len(),
            });
        }
        let magic = bytes[MAGIC_POS] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic { magic });
        }
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated {
                what: "batch header",
                needed: BATCH_HEADER_BYTES,
                available: bytes.len(),
            });
        }
        let batch_length = be_i32(bytes, BATCH_LENGTH_POS);
        if batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD) as i32 {
            return Err(BatchError::InvalidBatchLength { batch_length });
        }
        let attributes = be_i16(bytes, ATTRIBUTES_POS);
        let codec = (attributes & COMPRESSION_MASK) as u8;
        if Compression::from_id(codec).is_none() {
            return Err(BatchError::UnknownCompression { codec });
        }
        Ok(BatchHeader {
            base_offset: be_i64(bytes, BASE_OFFSET_POS),
            batch_length,
            partition_leader_epoch: be_i32(bytes, PARTITION_LEADER_EPOCH_POS),
            magic,
            crc: be_i32(bytes, CRC_POS) as u32,
            attributes,
            last_offset_delta: be_i32(bytes, LAST_OFFSET_DELTA_POS),
            base_timestamp: be_i64(bytes, BASE_TIMESTAMP_POS),
            max_timestamp: be_i64(bytes, MAX_TIMESTAMP_POS),
            producer_id: be_i64(bytes, PRODUCER_ID_POS),
            producer_epoch: be_i16(bytes, PRODUCER_EPOCH_POS),
            base_sequence: be_i32(bytes, BASE_SEQUENCE_POS),
            record_count: be_i32(bytes, RECORD_COUNT_POS),
        })
    }

    /// Total bytes of this batch including the 12-byte log overhead.
    pub fn size_bytes(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }
    /// `baseOffset`.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// `baseOffset + lastOffsetDelta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }
    /// The offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    /// `batchLength` (bytes after the field).
    pub fn batch_length(&self) -> i32 {
        self.batch_length
    }
    /// `partitionLeaderEpoch`.
    pub fn partition_leader_epoch(&self) -> i32 {
        self.partition_leader_epoch
    }
    /// `magic` (always 2).
    pub fn magic(&self) -> i8 {
        self.magic
    }
    /// Stored `crc`.
    pub fn crc(&self) -> u32 {
        self.crc
    }
    /// Raw `attributes`.
    pub fn attributes(&self) -> i16 {
        self.attributes
    }
    /// `lastOffsetDelta`.
    pub fn last_offset_delta(&self) -> i32 {
        self.last_offset_delta
    }
    /// `baseTimestamp`.
    pub fn base_timestamp(&self) -> i64 {
        self.base_timestamp
    }
    /// `maxTimestamp`.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    /// `producerId` (-1 if none).
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    /// `producerEpoch`.
    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }
    /// `baseSequence`.
    pub fn base_sequence(&self) -> i32 {
        self.base_sequence
    }
    /// `recordCount`.
    pub fn record_count(&self) -> i32 {
        self.record_count
    }
    /// The compression codec (attributes bits 0-2).
    pub fn compression(&self) -> Compression {
        // parse() rejected unknown ids.
        Compression::from_id((self.attributes & COMPRESSION_MASK) as u8)
            .unwrap_or(Compression::None)
    }
    /// The timestamp type (attributes bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// Part of a transaction (attributes bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    /// A control batch (COMMIT/ABORT markers; attributes bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    /// `baseTimestamp` holds a delete horizon (attributes bit 6).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_BIT != 0
    }
}

/// Computes the CRC-32C a batch should carry (`batch` must be one whole batch).
///
/// # Errors
/// `Truncated` if `batch` is shorter than a header.
pub fn compute_crc(batch: &[u8]) -> Result<u32> {
    if batch.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::Truncated {
            what: "batch header",
            needed: BATCH_HEADER_BYTES,
            available: batch.len(),
        });
    }
    Ok(crc32c(&batch[CRC_START..]))
}

/// Parses the header of the first batch in `bytes`, checks the whole batch is present and its CRC
/// matches, and returns the header with the batch's bytes.
///
/// # Errors
/// Header errors from [`BatchHeader::parse`], `Truncated`, `CrcMismatch`.
pub fn check_batch(bytes: &[u8]) -> Result<(BatchHeader, &[u8])> {
    let header = BatchHeader::parse(bytes)?;
    let size = header.size_bytes();
    let batch = bytes.get(..size).ok_or(BatchError::Truncated {
        what: "record batch",
        needed: size,
        available: bytes.len(),
    })?;
    let computed = crc32c(&batch[CRC_START..]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok((header, batch))
}

/// Iterates over the batches of a record set, yielding each header with its byte range.
/// Checks structure and completeness, not CRC. Stops after the first error.
pub fn split_batches(bytes: &[u8]) -> SplitBatches<'_> {
    SplitBatches {
        bytes,
        pos: 0,
        failed: false,
    }
}

/// Iterator returned by [`split_batches`].
#[derive(Debug)]
pub struct SplitBatches<'a> {
    bytes: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for SplitBatches<'a> {
    type Item = Result<(BatchHeader, std::ops::Range<usize>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        let header = match BatchHeader::parse(rest) {
            Ok(h) => h,
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        let size = header.size_bytes();
        if size > rest.len() {
            self.failed = true;
            return Some(Err(BatchError::Truncated {
                what: "record batch",
                needed: size,
                available: rest.len(),
            }));
        }
        let range = self.pos..self.pos + size;
        self.pos += size;
        Some(Ok((header, range)))
    }
}

/// Rewrites `baseOffset` of the batch at the start of `batch`. The field is outside the CRC span,
/// so the CRC stays valid.
///
/// # Errors
/// `Truncated` if `batch` is shorter than 8 bytes.
pub fn assign_offsets(batch: &mut [u8], base_offset: i64) -> Result<()> {
    let field =
        batch
            .get_mut(BASE_OFFSET_POS..BASE_OFFSET_POS + 8)
            .ok_or(BatchError::Truncated {
                what: "baseOffset",
                needed: 8,
                available: 0,
            })?;
    field.copy_from_slice(&base_offset.to_be_bytes());
    Ok(())
}

/// Rewrites `partitionLeaderEpoch` (outside the CRC span).
///
/// # Errors
/// `Truncated` if `batch` is shorter than the field.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<()> {
    let len = batch.len();
    let field = batch
        .get_mut(PARTITION_LEADER_EPOCH_POS..PARTITION_LEADER_EPOCH_POS + 4)
        .ok_or(BatchError::Truncated {
            what: "partitionLeaderEpoch",
            needed: PARTITION_LEADER_EPOCH_POS + 4,
            available: len,
        })?;
    field.copy_from_slice(&epoch.to_be_bytes());
    Ok(())
}

/// Marks the batch as LogAppendTime with `maxTimestamp = now_ms`, as Kafka does for topics with
/// `message.timestamp.type=LogAppendTime`, and recomputes the CRC. `batch` must be exactly one
/// whole batch.
///
/// # Errors
/// `Truncated` if `batch` is shorter than a header.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> Result<()> {
    if batch.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::Truncated {
            what: "batch header",
            needed: BATCH_HEADER_BYTES,
            available: batch.len(),
        });
    }
    let attributes = be_i16(batch, ATTRIBUTES_POS) | TIMESTAMP_TYPE_BIT;
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c(&batch[CRC_START..]);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests;
