//! The error of bytes that are not a valid record batch (or that a codec cannot handle).
//!
//! Owns: [`BatchError`]. `shoal-storage` maps each variant to the storage error of the same
//! name, which carries the Kafka error code the broker answers with.

/// Why a record batch could not be read, checked or written. Exhaustive on purpose: a new
/// variant must get its Kafka error code in `shoal-storage`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
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
    /// The compression codec id in the attributes is unknown.
    #[error("unknown compression codec {codec}")]
    UnknownCompression {
        /// Codec id (attributes bits 0-2).
        codec: u8,
    },
    /// Header fields that must agree do not (record count, offset delta), or a batch too large
    /// to encode.
    #[error("invalid batch header: {reason}")]
    InvalidBatchHeader {
        /// Why.
        reason: &'static str,
    },
    /// The codec failed: the payload could not be decompressed (or compressed).
    #[error("{codec} decompression failed: {reason}")]
    Decompression {
        /// Codec name.
        codec: &'static str,
        /// Underlying error text.
        reason: String,
    },
    /// Decompressed payload exceeds the caller's budget (decompression bomb guard).
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
}

/// Shorthand of this module.
pub type Result<T, E = BatchError> = std::result::Result<T, E>;
