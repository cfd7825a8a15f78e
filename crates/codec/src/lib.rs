//! shoal-codec: Kafka's encoding in one place, for the broker, storage, the client and core.
//!
//! Owns:
//! - [`varint`]: unsigned varints and zig-zag varints/varlongs, one encoder and one decoder;
//! - [`wire`]: a bounds-checked [`wire::Reader`] and a [`wire::Writer`] of Kafka's primitive
//!   types (fixed-width integers, `i16`/`i32`-length and compact strings and bytes, checked
//!   array counts, tagged-field sections), on which the coordinator records are built;
//! - [`DecodeError`]: the one error of bytes that do not decode;
//! - [`ErrorCode`]: Kafka's `i16` error codes with their names and retriability;
//! - `batch` (feature `batch`): the record-batch v2 format (header, records, control records,
//!   CRC-32C, every compression codec under a byte budget), with its error `BatchError`. A
//!   feature so that `shoal-core`, which needs only the primitives, does not build the codecs.
//!
//! Invariants: nothing here panics on input bytes, and no length read from input is trusted
//! beyond the bytes present. Must not: do I/O, read clocks, or depend on `kafka-protocol` (the
//! broker's and client's message types are built on top, not underneath).

#[cfg(feature = "batch")]
pub mod batch;
pub mod error;
pub mod error_code;
pub mod varint;
pub mod wire;

pub use error::DecodeError;
pub use error_code::ErrorCode;
