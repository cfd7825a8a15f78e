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
use super::records::RecordView;
use super::varint::{put_varint, put_varlong};
use super::{
    BatchHeader, TimestampType, BATCH_HEADER_BYTES, COMPRESSION_MASK, CRC_POS, CRC_START,
    DELETE_HORIZON_BIT, LOG_OVERHEAD, MAGIC_V2,
};
use crate::error::{Result, StorageError};

fn put_nullable(out: &mut Vec<u8>, field: Option<&[u8]>) -> Result<()> {
    match field {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, i32::try_from(b.len()).map_err(|_| too_large())?);
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

fn too_large() -> StorageError {
    StorageError::InvalidBatchHeader {
        reason: "rewritten batch larger than 2 GiB",
    }
}

/// Rebuilds the batch described by `original` with only `records` (decoded from it, in offset
/// order) and, if `delete_horizon` is set, that delete horizon.
///
/// # Errors
/// `InvalidRecord` if a record's offset is outside the batch; `Decompression` if the codec fails.
pub(crate) fn rebuild_batch(
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
            return Err(StorageError::InvalidRecord {
                index,
                reason: "retained record outside its batch",
            });
        }
        previous = delta;
        let timestamp_delta = match original.timestamp_type() {
            TimestampType::CreateTime => r.timestamp.wrapping_sub(base_timestamp),
            TimestampType::LogAppendTime => 0,
        };
        body.clear();
        body.push(0); // record attributes (unused in v2)
        put_varlong(&mut body, timestamp_delta);
        put_varint(&mut body, delta as i32); // <= lastOffsetDelta, an i32
        put_nullable(&mut body, r.key.as_deref())?;
        put_nullable(&mut body, r.value.as_deref())?;
        put_varint(
            &mut body,
            i32::try_from(r.headers.len()).map_err(|_| too_large())?,
        );
        for h in &r.headers {
            put_nullable(&mut body, Some(&h.key))?;
            put_nullable(&mut body, h.value.as_deref())?;
        }
        put_varint(
            &mut payload,
            i32::try_from(body.len()).map_err(|_| too_large())?,
        );
        payload.extend_from_slice(&body);
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
    let batch_length = i32::try_from(BATCH_HEADER_BYTES - LOG_OVERHEAD + payload.len())
        .map_err(|_| too_large())?;
    let record_count = i32::try_from(records.len()).map_err(|_| too_large())?;
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
    out.extend_from_slice(&original.base_offset().to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&original.partition_leader_epoch().to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&[0; 4]); // crc, filled below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&original.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&original.max_timestamp().to_be_bytes());
    out.extend_from_slice(&original.producer_id().to_be_bytes());
    out.extend_from_slice(&original.producer_epoch().to_be_bytes());
    out.extend_from_slice(&original.base_sequence().to_be_bytes());
    out.extend_from_slice(&record_count.to_be_bytes());
    debug_assert_eq!(out.len(), BATCH_HEADER_BYTES);
    out.extend_from_slice(&payload);
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// An empty, non-transactional batch without producer covering the offsets of `original`:
/// what compaction leaves as the first segment's content when it removed everything there,
/// so that the log start offset does not move (a consumer at it reads on from the next batch).
pub(crate) fn empty_placeholder(original: &BatchHeader) -> Result<Vec<u8>> {
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
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}
