//! Validation of a produced record set before it is appended.
//!
//! Owns: [`ValidationLimits`] and [`validate_record_set`]. A record set that passes has only
//! complete magic-v2 batches with matching CRCs, each within `max_message_bytes`, each with
//! `recordCount > 0`, `lastOffsetDelta == recordCount - 1`, and records that decode (within the
//! decompression budget) to exactly `recordCount` records with `offsetDelta == index`.

use super::records::{payload, walk_records, Deltas};
use super::{check_batch, split_batches, BatchHeader};
use crate::error::{Result, StorageError};

/// Kafka's default `max.message.bytes`.
pub const MAX_MESSAGE_BYTES_DEFAULT: usize = 1_048_588;
/// Default budget for one batch's decompressed payload.
pub const DECOMPRESSED_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

/// Limits applied by [`validate_record_set`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidationLimits {
    /// `max.message.bytes`: largest batch (including its 12-byte log overhead).
    pub max_message_bytes: usize,
    /// Largest decompressed payload of one batch.
    pub decompressed_bytes_max: usize,
}

impl Default for ValidationLimits {
    fn default() -> Self {
        ValidationLimits {
            max_message_bytes: MAX_MESSAGE_BYTES_DEFAULT,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
        }
    }
}

/// Validates a produce request's record set (one or more concatenated v2 batches) and returns
/// their headers in order.
///
/// # Errors
/// The first problem found: `Truncated`, `UnsupportedMagic`, `InvalidBatchLength`,
/// `CrcMismatch`, `MessageTooLarge`, `UnknownCompression`, `InvalidBatchHeader`,
/// `Decompression`, `DecompressedTooLarge` or `InvalidRecord`. An empty set is `Truncated`.
pub fn validate_record_set(bytes: &[u8], limits: &ValidationLimits) -> Result<Vec<BatchHeader>> {
    if bytes.is_empty() {
        return Err(StorageError::Truncated {
            what: "record set",
            needed: super::BATCH_HEADER_BYTES,
            available: 0,
        });
    }
    let mut headers = Vec::new();
    for item in split_batches(bytes) {
        let (header, range) = item?;
        if header.size_bytes() > limits.max_message_bytes {
            return Err(StorageError::MessageTooLarge {
                size: header.size_bytes(),
                max: limits.max_message_bytes,
            });
        }
        let (_, batch) = check_batch(&bytes[range])?;
        validate_batch(&header, batch, limits)?;
        headers.push(header);
    }
    Ok(headers)
}

fn validate_batch(header: &BatchHeader, batch: &[u8], limits: &ValidationLimits) -> Result<()> {
    if header.record_count() <= 0 {
        return Err(StorageError::InvalidBatchHeader {
            reason: "recordCount must be positive",
        });
    }
    if i64::from(header.last_offset_delta()) != i64::from(header.record_count()) - 1 {
        return Err(StorageError::InvalidBatchHeader {
            reason: "lastOffsetDelta != recordCount - 1",
        });
    }
    let data = payload(header, batch, limits.decompressed_bytes_max)?;
    walk_records(&data, header.record_count(), false, Deltas::Dense, |_| {})
}
