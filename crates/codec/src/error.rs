//! The one error for bytes in Kafka's encoding that do not decode.
//!
//! Owns: [`DecodeError`], returned by [`crate::wire::Reader`] and by every record decoder built
//! on it (the coordinator records of `shoal-core`). Positions (`at`) are byte offsets into the
//! key or value being read.

/// Why bytes could not be decoded. Never the result of a panic: decoders check every length
/// against the input first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends before the field at `at`.
    #[error("record truncated: needed {needed} bytes at offset {at}, {remaining} remaining")]
    Truncated {
        at: usize,
        needed: usize,
        remaining: usize,
    },
    /// A length or count that is negative (other than null) or more than the input can hold.
    #[error("invalid length {length} at offset {at}")]
    InvalidLength { at: usize, length: i64 },
    /// An unsigned varint longer than 5 bytes or beyond 32 bits.
    #[error("invalid unsigned varint at offset {at}")]
    InvalidVarint { at: usize },
    /// A string that is not UTF-8.
    #[error("invalid UTF-8 in a string at offset {at}")]
    InvalidUtf8 { at: usize },
    /// Null in a non-nullable field.
    #[error("null in a non-nullable field at offset {at}")]
    UnexpectedNull { at: usize },
    /// Bytes left after the last field.
    #[error("{count} trailing bytes")]
    TrailingBytes { count: usize },
    /// A record key of a type the decoder does not own (Kafka's loaders skip those).
    #[error("unknown record type {0}")]
    UnknownRecordType(i16),
    /// A key version the decoder does not know.
    #[error("unsupported key version {0}")]
    UnsupportedKeyVersion(i16),
    /// A value version the decoder does not know for that record type.
    #[error("unsupported value version {version} for record type {record_type}")]
    UnsupportedVersion { record_type: i16, version: i16 },
    /// A record of a type that is never a tombstone, without a value.
    #[error("a record of type {record_type} without value (not a tombstone type)")]
    MissingValue { record_type: i16 },
    /// A known tagged field whose size is not its type's.
    #[error("tagged field {tag} has size {size}, expected {expected}")]
    InvalidTaggedFieldSize {
        tag: u32,
        size: usize,
        expected: usize,
    },
    /// An enumerated field (a state, a version, a result) with a value it never takes.
    #[error("invalid {what} {value}")]
    InvalidValue { what: &'static str, value: i64 },
    /// Values stored in a canonical order (sorted, distinct) that are not.
    #[error("{what} not sorted and distinct at offset {at}")]
    NonCanonical { at: usize, what: &'static str },
}
