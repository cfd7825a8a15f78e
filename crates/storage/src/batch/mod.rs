//! Kafka RecordBatch (magic v2) for the log: the format itself is `shoal_codec::batch`,
//! re-exported here with this crate's error, plus the rules a produced record set must satisfy
//! ([`validate_record_set`]), which are the log's policy.
//!
//! Owns: [`validate_record_set`] and its limits and per-record rules; the wrappers below, which
//! only turn `shoal_codec::batch::BatchError` into [`StorageError`] (same variant names), so
//! that every caller keeps one error type with its Kafka error code.
//!
//! Invariants: as the codec's: nothing here panics on bytes from the network or disk, and
//! decompression is bounded by a caller-given budget.

mod validate;

use std::ops::Range;

use shoal_codec::batch as codec;

pub use codec::{
    encode_batch, encode_end_txn_marker, BatchHeader, BatchOptions, Compression, ControlRecordType,
    EndTxnMarker, KeyValue, RecordHeader, RecordView, TimestampType, BATCH_HEADER_BYTES,
    LOG_OVERHEAD, MAGIC_V2, NO_TIMESTAMP,
};
pub use validate::{
    validate_record_set, validate_record_set_with, RecordError, RecordFault, RecordRules,
    TimestampWindow, ValidationLimits, DECOMPRESSED_BYTES_MAX_DEFAULT, MAX_MESSAGE_BYTES_DEFAULT,
};

use crate::error::{Result, StorageError};

/// Decodes every record of one whole batch within `decompressed_bytes_max`
/// (`shoal_codec::batch::decode_records`).
///
/// # Errors
/// Header/CRC errors, `DecompressedTooLarge`, `Decompression`, `InvalidRecord`.
pub fn decode_records(
    batch_bytes: &[u8],
    decompressed_bytes_max: usize,
) -> Result<Vec<RecordView>> {
    Ok(codec::decode_records(batch_bytes, decompressed_bytes_max)?)
}

/// The type of the first control record of a control batch
/// (`shoal_codec::batch::control_record_type`).
///
/// # Errors
/// The batch does not decode, is not a control batch, or its first record has no valid key.
pub fn control_record_type(batch: &[u8]) -> Result<ControlRecordType> {
    Ok(codec::control_record_type(batch)?)
}

/// The marker in a control batch, `None` for another control type
/// (`shoal_codec::batch::end_txn_marker`).
///
/// # Errors
/// As [`control_record_type`], or a COMMIT/ABORT record without a 6-byte value.
pub fn end_txn_marker(batch: &[u8]) -> Result<Option<EndTxnMarker>> {
    Ok(codec::end_txn_marker(batch)?)
}

/// Computes the CRC-32C a batch should carry (`batch` must be one whole batch).
///
/// # Errors
/// `Truncated` if `batch` is shorter than a header.
pub fn compute_crc(batch: &[u8]) -> Result<u32> {
    Ok(codec::compute_crc(batch)?)
}

/// Parses the header of the first batch in `bytes`, checks the whole batch is present and its CRC
/// matches, and returns the header with the batch's bytes.
///
/// # Errors
/// Header errors of `BatchHeader::parse`, `Truncated`, `CrcMismatch`.
pub fn check_batch(bytes: &[u8]) -> Result<(BatchHeader, &[u8])> {
    Ok(codec::check_batch(bytes)?)
}

/// Iterates over the batches of a record set, yielding each header with its byte range.
/// Checks structure and completeness, not CRC. Stops after the first error.
pub fn split_batches(bytes: &[u8]) -> SplitBatches<'_> {
    SplitBatches(codec::split_batches(bytes))
}

/// Iterator returned by [`split_batches`].
#[derive(Debug)]
pub struct SplitBatches<'a>(codec::SplitBatches<'a>);

impl Iterator for SplitBatches<'_> {
    type Item = Result<(BatchHeader, Range<usize>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|item| item.map_err(StorageError::from))
    }
}

/// Rewrites `baseOffset` of the batch at the start of `batch` (outside the CRC span).
///
/// # Errors
/// `Truncated` if `batch` is shorter than 8 bytes.
pub fn assign_offsets(batch: &mut [u8], base_offset: i64) -> Result<()> {
    Ok(codec::assign_offsets(batch, base_offset)?)
}

/// Rewrites `partitionLeaderEpoch` (outside the CRC span).
///
/// # Errors
/// `Truncated` if `batch` is shorter than the field.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<()> {
    Ok(codec::set_partition_leader_epoch(batch, epoch)?)
}

/// Marks the batch as LogAppendTime with `maxTimestamp = now_ms` and recomputes the CRC.
///
/// # Errors
/// `Truncated` if `batch` is shorter than a header.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> Result<()> {
    Ok(codec::set_log_append_time(batch, now_ms)?)
}

/// Compaction's rewrite of a batch with a subset of its records
/// (`shoal_codec::batch::rebuild_batch`).
pub(crate) fn rebuild_batch(
    original: &BatchHeader,
    records: &[RecordView],
    delete_horizon: Option<i64>,
) -> Result<Vec<u8>> {
    Ok(codec::rebuild_batch(original, records, delete_horizon)?)
}

/// Compaction's empty placeholder batch (`shoal_codec::batch::empty_placeholder`).
pub(crate) fn empty_placeholder(original: &BatchHeader) -> Result<Vec<u8>> {
    Ok(codec::empty_placeholder(original)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;
    use proptest::prelude::*;
    use shoal_codec::batch::{
        ATTRIBUTES_POS, BATCH_LENGTH_POS, CRC_POS, CRC_START, LAST_OFFSET_DELTA_POS, MAGIC_POS,
        RECORD_COUNT_POS,
    };

    fn limits() -> ValidationLimits {
        ValidationLimits::default()
    }

    fn sample(n: usize) -> Vec<u8> {
        let recs: Vec<KeyValue<'_>> = (0..n)
            .map(|_| (Some(&b"k"[..]), Some(&b"value"[..])))
            .collect();
        encode_batch(
            &recs,
            BatchOptions {
                producer_id: 7,
                producer_epoch: 1,
                base_sequence: 3,
                timestamp_ms: 1000,
                ..BatchOptions::default()
            },
        )
    }

    #[test]
    fn header_accessors() {
        let b = sample(3);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.size_bytes(), b.len());
        assert_eq!(h.record_count(), 3);
        assert_eq!(h.last_offset(), 2);
        assert_eq!(h.next_offset(), 3);
        assert_eq!(h.producer_id(), 7);
        assert_eq!(h.producer_epoch(), 1);
        assert_eq!(h.base_sequence(), 3);
        assert_eq!(h.max_timestamp(), 1000);
        assert_eq!(h.compression(), Compression::None);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        assert!(!h.is_transactional() && !h.is_control() && !h.has_delete_horizon());
        assert_eq!(validate_record_set(&b, &limits()).unwrap(), vec![h]);
    }

    #[test]
    fn rejects_bad_crc() {
        let mut b = sample(2);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        let e = validate_record_set(&b, &limits()).unwrap_err();
        assert!(matches!(e, StorageError::CrcMismatch { .. }), "{e}");
        assert_eq!(e.kafka_error_code(), codes::CORRUPT_MESSAGE);
    }

    #[test]
    fn rejects_bad_magic() {
        let mut b = sample(1);
        b[MAGIC_POS] = 1;
        let e = validate_record_set(&b, &limits()).unwrap_err();
        assert_eq!(e.kafka_error_code(), codes::UNSUPPORTED_FOR_MESSAGE_FORMAT);
        b[MAGIC_POS] = 77;
        let e = validate_record_set(&b, &limits()).unwrap_err();
        assert_eq!(e.kafka_error_code(), codes::CORRUPT_MESSAGE);
    }

    #[test]
    fn rejects_bad_lengths() {
        let b = sample(2);
        // Truncated.
        let e = validate_record_set(&b[..b.len() - 1], &limits()).unwrap_err();
        assert!(matches!(e, StorageError::Truncated { .. }), "{e}");
        // batchLength below a header.
        let mut short = b.clone();
        short[BATCH_LENGTH_POS..BATCH_LENGTH_POS + 4].copy_from_slice(&10i32.to_be_bytes());
        let e = validate_record_set(&short, &limits()).unwrap_err();
        assert!(matches!(e, StorageError::InvalidBatchLength { .. }), "{e}");
        // Negative batchLength.
        short[BATCH_LENGTH_POS..BATCH_LENGTH_POS + 4].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(validate_record_set(&short, &limits()).is_err());
        // Empty.
        assert!(validate_record_set(&[], &limits()).is_err());
        // Too large.
        let small = ValidationLimits {
            max_message_bytes: b.len() - 1,
            ..limits()
        };
        let e = validate_record_set(&b, &small).unwrap_err();
        assert_eq!(e.kafka_error_code(), codes::MESSAGE_TOO_LARGE);
    }

    fn fix_crc(b: &mut [u8]) {
        let crc = shoal_codec::batch::crc32c(&b[CRC_START..]);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    }

    #[test]
    fn rejects_inconsistent_counts() {
        let mut b = sample(3);
        b[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&4i32.to_be_bytes());
        fix_crc(&mut b);
        let e = validate_record_set(&b, &limits()).unwrap_err();
        assert_eq!(e.kafka_error_code(), codes::INVALID_RECORD);
        // Count and delta agree but records are fewer.
        b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4].copy_from_slice(&3i32.to_be_bytes());
        fix_crc(&mut b);
        let e = validate_record_set(&b, &limits()).unwrap_err();
        assert!(matches!(e, StorageError::InvalidRecord { .. }), "{e}");
        // Zero records.
        let mut z = sample(1);
        z[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&0i32.to_be_bytes());
        fix_crc(&mut z);
        assert!(validate_record_set(&z, &limits()).is_err());
    }

    #[test]
    fn rejects_unknown_codec() {
        let mut b = sample(1);
        b[ATTRIBUTES_POS + 1] |= 0x05;
        fix_crc(&mut b);
        let e = validate_record_set(&b, &limits()).unwrap_err();
        assert!(
            matches!(e, StorageError::UnknownCompression { codec: 5 }),
            "{e}"
        );
    }

    #[test]
    fn multiple_batches() {
        let mut set = sample(2);
        set.extend_from_slice(&sample(5));
        let hs = validate_record_set(&set, &limits()).unwrap();
        assert_eq!(hs.len(), 2);
        assert_eq!(hs[1].record_count(), 5);
        let ranges: Vec<_> = split_batches(&set).map(|r| r.unwrap().1).collect();
        assert_eq!(ranges[1].end, set.len());
    }

    type Rec = (Option<Vec<u8>>, Option<Vec<u8>>);

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            recs in proptest::collection::vec(
                (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200))),
                1..20),
            base in 0i64..1_000_000,
            ts in 0i64..2_000_000_000_000,
            pid in -1i64..1000,
            txn: bool,
        ) {
            let recs: Vec<Rec> = recs;
            let refs: Vec<KeyValue<'_>> =
                recs.iter().map(|(k, v)| (k.as_deref(), v.as_deref())).collect();
            let b = encode_batch(&refs, BatchOptions {
                base_offset: base, timestamp_ms: ts, producer_id: pid, transactional: txn,
                ..BatchOptions::default()
            });
            let hs = validate_record_set(&b, &limits()).unwrap();
            prop_assert_eq!(hs[0].record_count() as usize, recs.len());
            prop_assert_eq!(hs[0].is_transactional(), txn);
            let out = decode_records(&b, 1 << 20).unwrap();
            prop_assert_eq!(out.len(), recs.len());
            for (i, (r, (k, v))) in out.iter().zip(&recs).enumerate() {
                prop_assert_eq!(r.offset, base + i as i64);
                prop_assert_eq!(r.timestamp, ts);
                prop_assert_eq!(r.key.as_deref(), k.as_deref());
                prop_assert_eq!(r.value.as_deref(), v.as_deref());
                prop_assert!(r.headers.is_empty());
            }
        }

        #[test]
        fn validate_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = validate_record_set(&bytes, &limits());
            let _ = decode_records(&bytes, 1 << 16);
        }

        #[test]
        fn mutated_batch_never_panics(pos in 0usize..200, val: u8, n in 1usize..5) {
            let mut b = sample(n);
            let p = pos % b.len();
            b[p] = val;
            // Re-CRC so mutations reach the record walker.
            if b.len() >= BATCH_HEADER_BYTES { fix_crc(&mut b); }
            let _ = validate_record_set(&b, &limits());
            let _ = decode_records(&b, 1 << 16);
        }
    }
}
