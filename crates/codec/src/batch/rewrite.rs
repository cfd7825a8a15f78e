//! Rewriting a stored batch with a subset of its records (log compaction).
//!
//! Kept as Kafka's cleaner keeps it (`MemoryRecords.filterTo`): the batch keeps its base offset,
//! its `lastOffsetDelta` (so the producer's last sequence, and the offsets after it, do not
//! move), its producer id, epoch, base sequence, partition leader epoch and `maxTimestamp`; the
//! retained records keep their offsets and timestamps, and are recompressed with the batch's
//! codec. A delete horizon, when given, goes into `baseTimestamp` with attributes bit 6 (KIP-534),
//! record timestamps then being deltas from it. A batch with no record left is written as an
//! empty batch (no payload, no codec), which Kafka keeps for a producer's last batch.

use super::compression::compress;
use super::error::{BatchError, Result};
use super::records::{put_record, seal, HeaderFields, RecordView};
use super::{
    BatchHeader, TimestampType, BATCH_HEADER_BYTES, COMPRESSION_MASK, CRC_POS, CRC_START,
    DELETE_HORIZON_BIT,
};

fn too_large() -> BatchError {
    BatchError::InvalidBatchHeader {
        reason: "rewritten batch larger than 2 GiB",
    }
}

/// Rebuilds the batch described by `original` with only `records` (decoded from it, in offset
/// order) and, if `delete_horizon` is set, that delete horizon.
///
/// # Errors
/// `InvalidRecord` if a record's offset is outside the batch; `Decompression` if the codec fails.
pub fn rebuild_batch(
    original: &BatchHeader,
    records: &[RecordView],
    delete_horizon: Option<i64>,
) -> Result<Vec<u8>> {
    let base_timestamp = delete_horizon.unwrap_or(original.base_timestamp());
    let mut payload = Vec::new();
    let mut body = Vec::new();
    let mut previous = -1i64;
    for (index, r) in records.iter().enumerate() {
        let delta = r.offset - original.base_offset();
        if delta <= previous || delta > i64::from(original.last_offset_delta()) {
            return Err(BatchError::InvalidRecord {
                index,
                reason: "retained record outside its batch",
            });
        }
        previous = delta;
        let timestamp_delta = match original.timestamp_type() {
            TimestampType::CreateTime => r.timestamp.wrapping_sub(base_timestamp),
            TimestampType::LogAppendTime => 0,
        };
        put_record(
            &mut payload,
            &mut body,
            index,
            timestamp_delta,
            delta as i32, // <= lastOffsetDelta, an i32
            (r.key.as_deref(), r.value.as_deref()),
            r.headers.iter().map(|h| (&h.key[..], h.value.as_deref())),
        )
        .map_err(|_| too_large())?;
    }
    let mut attributes = original.attributes();
    let payload = if records.is_empty() {
        attributes &= !COMPRESSION_MASK;
        Vec::new()
    } else {
        compress(original.compression(), &payload)?
    };
    if delete_horizon.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    }
    let record_count = i32::try_from(records.len()).map_err(|_| too_large())?;
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
    out.resize(BATCH_HEADER_BYTES, 0);
    out.extend_from_slice(&payload);
    seal(
        &mut out,
        &HeaderFields {
            base_offset: original.base_offset(),
            partition_leader_epoch: original.partition_leader_epoch(),
            attributes,
            last_offset_delta: original.last_offset_delta(),
            base_timestamp,
            max_timestamp: original.max_timestamp(),
            producer_id: original.producer_id(),
            producer_epoch: original.producer_epoch(),
            base_sequence: original.base_sequence(),
            record_count,
        },
    )
    .map_err(|_| too_large())?;
    Ok(out)
}

/// An empty, non-transactional batch without producer covering the offsets of `original`:
/// what compaction leaves as the first segment's content when it removed everything there,
/// so that the log start offset does not move (a consumer at it reads on from the next batch).
pub fn empty_placeholder(original: &BatchHeader) -> Result<Vec<u8>> {
    let mut out = rebuild_batch(original, &[], None)?;
    let attributes = original.attributes()
        & !(COMPRESSION_MASK | super::TRANSACTIONAL_BIT | super::CONTROL_BIT | DELETE_HORIZON_BIT);
    out[super::ATTRIBUTES_POS..super::ATTRIBUTES_POS + 2]
        .copy_from_slice(&attributes.to_be_bytes());
    out[super::PRODUCER_ID_POS..super::PRODUCER_ID_POS + 8].copy_from_slice(&(-1i64).to_be_bytes());
    out[super::PRODUCER_EPOCH_POS..super::PRODUCER_EPOCH_POS + 2]
        .copy_from_slice(&(-1i16).to_be_bytes());
    out[super::BASE_SEQUENCE_POS..super::BASE_SEQUENCE_POS + 4]
        .copy_from_slice(&(-1i32).to_be_bytes());
    let crc = super::crc32c(&out[CRC_START..]);
    out[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}
