//! The storage layer's single error type and its mapping to Kafka error codes.
//!
//! Owns: [`StorageError`]. Invariant: every variant maps to exactly one Kafka error code in
//! [`StorageError::kafka_error_code`], chosen so that a Kafka client reacts as it would to a real
//! broker (retriable `CORRUPT_MESSAGE` only where a resend could help, non-retriable
//! `INVALID_RECORD` for content that is deterministically bad).

use std::path::PathBuf;

/// Kafka error codes this crate produces (mirrors Kafka's `Errors` table).
pub mod codes {
    /// OFFSET_OUT_OF_RANGE
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    /// CORRUPT_MESSAGE (retriable in the Java client)
    pub const CORRUPT_MESSAGE: i16 = 2;
    /// MESSAGE_TOO_LARGE
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    /// RECORD_LIST_TOO_LARGE
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    /// INVALID_CONFIG
    pub const INVALID_CONFIG: i16 = 40;
    /// UNSUPPORTED_FOR_MESSAGE_FORMAT
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
    /// KAFKA_STORAGE_ERROR
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    /// INVALID_RECORD
    pub const INVALID_RECORD: i16 = 87;
}

/// Everything that can go wrong in `shoal-storage`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The bytes end before the structure they declare.
    #[error("truncated {what}: need {needed} bytes, have {available}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// `batchLength` is smaller than a batch header.
    #[error("invalid batchLength {batch_length}")]
    InvalidBatchLength {
        /// The declared `batchLength`.
        batch_length: i32,
    },
    /// Magic byte other than 2 (v0/v1 message sets are not supported).
    #[error("unsupported record batch magic {magic}")]
    UnsupportedMagic {
        /// The magic byte found.
        magic: i8,
    },
    /// CRC-32C of the batch does not match its `crc` field.
    #[error("batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC computed over attributes..end.
        computed: u32,
    },
    /// A single batch is larger than `max.message.bytes`.
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge {
        /// Batch size in bytes (including the 12-byte log overhead).
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The record set is larger than a whole segment.
    #[error("record set of {size} bytes exceeds segment.bytes {segment_bytes}")]
    RecordSetTooLarge {
        /// Record set size in bytes.
        size: usize,
        /// The segment size limit.
        segment_bytes: u64,
    },
    /// The compression codec id in the attributes is unknown.
    #[error("unknown compression codec {codec}")]
    UnknownCompression {
        /// Codec id (attributes bits 0-2).
        codec: u8,
    },
    /// Header fields that must agree do not (record count, offset delta).
    #[error("invalid batch header: {reason}")]
    InvalidBatchHeader {
        /// Why.
        reason: &'static str,
    },
    /// The compressed payload could not be decompressed.
    #[error("{codec} decompression failed: {reason}")]
    Decompression {
        /// Codec name.
        codec: &'static str,
        /// Underlying error text.
        reason: String,
    },
    /// Decompressed payload exceeds the configured budget (decompression bomb guard).
    #[error("decompressed batch exceeds decompressed_bytes_max {max}")]
    DecompressedTooLarge {
        /// The budget.
        max: usize,
    },
    /// A record inside a batch is malformed or inconsistent with the header.
    #[error("invalid record {index}: {reason}")]
    InvalidRecord {
        /// Index of the record within its batch.
        index: usize,
        /// Why.
        reason: &'static str,
    },
    /// Fetch or delete offset outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// Requested offset.
        offset: i64,
        /// Current log start offset.
        log_start_offset: i64,
        /// Current log end offset.
        log_end_offset: i64,
    },
    /// A `LogConfig` value is out of range.
    #[error("invalid log config {field}: {reason}")]
    InvalidConfig {
        /// Config key (Kafka name).
        field: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// Bytes on disk are not what this crate wrote (outside recovery, which truncates instead).
    #[error("corrupt log {path:?} at position {position}: {reason}")]
    CorruptLog {
        /// Segment file.
        path: PathBuf,
        /// Byte position in the file.
        position: u64,
        /// Why.
        reason: String,
    },
    /// An I/O operation failed.
    #[error("{op} {path:?}: {source}")]
    Io {
        /// The operation attempted.
        op: &'static str,
        /// File or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    /// The Kafka error code a broker should return for this error.
    pub fn kafka_error_code(&self) -> i16 {
        use codes::*;
        match self {
            StorageError::Truncated { .. }
            | StorageError::InvalidBatchLength { .. }
            | StorageError::CrcMismatch { .. } => CORRUPT_MESSAGE,
            // Magic 0/1 is a real (old) format we refuse; anything else is garbage.
            StorageError::UnsupportedMagic { magic: 0 | 1 } => UNSUPPORTED_FOR_MESSAGE_FORMAT,
            StorageError::UnsupportedMagic { .. } => CORRUPT_MESSAGE,
            StorageError::MessageTooLarge { .. } => MESSAGE_TOO_LARGE,
            StorageError::RecordSetTooLarge { .. } => RECORD_LIST_TOO_LARGE,
            StorageError::UnknownCompression { .. }
            | StorageError::InvalidBatchHeader { .. }
            | StorageError::Decompression { .. }
            | StorageError::DecompressedTooLarge { .. }
            | StorageError::InvalidRecord { .. } => INVALID_RECORD,
            StorageError::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
            StorageError::InvalidConfig { .. } => INVALID_CONFIG,
            StorageError::CorruptLog { .. } | StorageError::Io { .. } => KAFKA_STORAGE_ERROR,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

impl From<shoal_codec::batch::BatchError> for StorageError {
    /// The storage error of the same name (the batch format lives in `shoal-codec`).
    fn from(e: shoal_codec::batch::BatchError) -> Self {
        use shoal_codec::batch::BatchError as B;
        match e {
            B::Truncated {
                what,
                needed,
                available,
            } => StorageError::Truncated {
                what,
                needed,
                available,
            },
            B::InvalidBatchLength { batch_length } => {
                StorageError::InvalidBatchLength { batch_length }
            }
            B::UnsupportedMagic { magic } => StorageError::UnsupportedMagic { magic },
            B::CrcMismatch { stored, computed } => StorageError::CrcMismatch { stored, computed },
            B::UnknownCompression { codec } => StorageError::UnknownCompression { codec },
            B::InvalidBatchHeader { reason } => StorageError::InvalidBatchHeader { reason },
            B::Decompression { codec, reason } => StorageError::Decompression { codec, reason },
            B::DecompressedTooLarge { max } => StorageError::DecompressedTooLarge { max },
            B::InvalidRecord { index, reason } => StorageError::InvalidRecord { index, reason },
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
