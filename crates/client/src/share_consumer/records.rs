//! Decoding the record batches of one partition of a ShareFetch answer, bounded: the bytes
//! are untrusted, so a batch that claims more records than [`BATCH_RECORDS_MAX`] or inflates
//! past the partition's byte limit is an error, never an allocation.
//!
//! Only the data records inside the acquired ranges are returned: the broker sends whole
//! batches, and control batches carry no data (their offsets are GAPs in the book).

use std::io::Read;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};

use crate::share_consumer::acknowledgements::Acquired;

/// Size of a record batch v2 header: a shorter tail is a partial batch, cut by `max.bytes`.
const BATCH_HEADER_BYTES: usize = 61;
/// Where a batch header keeps its record count.
const RECORD_COUNT_AT: usize = 57;
/// Most records one batch may claim before it is decoded.
pub const BATCH_RECORDS_MAX: i32 = 1 << 20;

/// The data records of `bytes` whose offsets an `acquired` range holds; `inflated_bytes_max`
/// bounds what any one batch decompresses to.
///
/// # Errors
/// A description of the first batch that does not decode or breaks a limit.
/// The big-endian i32 at `at` (the caller checked `bytes` holds a batch header).
fn be_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

pub fn decode(
    mut bytes: Bytes,
    acquired: &[Acquired],
    inflated_bytes_max: usize,
) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    while bytes.len() >= BATCH_HEADER_BYTES {
        let count = be_i32(&bytes, RECORD_COUNT_AT);
        if !(0..=BATCH_RECORDS_MAX).contains(&count) {
            return Err(format!("a batch claims {count} records"));
        }
        let length = be_i32(&bytes, 8);
        if usize::try_from(length).map_or(true, |l| bytes.len() < 12 + l) {
            // A partial batch at the end, cut by `max.bytes`: the next fetch returns it.
            break;
        }
        let decompress = |input: &mut Bytes, codec: Compression| -> anyhow::Result<Bytes> {
            inflate(input, codec, inflated_bytes_max)
        };
        let set = RecordBatchDecoder::decode_with_custom_compression(&mut bytes, Some(decompress))
            .map_err(|e| format!("record batch: {e}"))?;
        let held = |o: i64| {
            acquired
                .iter()
                .any(|a| a.first_offset <= o && o <= a.last_offset)
        };
        out.extend(
            set.records
                .into_iter()
                .filter(|r| !r.control && held(r.offset)),
        );
    }
    Ok(out)
}

/// Kafka's codecs, reading at most `max` bytes out (one more means the batch is too big).
fn inflate(input: &mut Bytes, codec: Compression, max: usize) -> anyhow::Result<Bytes> {
    let limit = max as u64 + 1;
    let mut out = Vec::new();
    match codec {
        Compression::None => return Ok(input.clone()),
        Compression::Gzip => {
            flate2::read::MultiGzDecoder::new(&input[..])
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Lz4 => {
            lz4_flex::frame::FrameDecoder::new(&input[..])
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Zstd => {
            zstd::stream::read::Decoder::new(&input[..])?
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Snappy => snappy(input, max, &mut out)?,
    }
    anyhow::ensure!(out.len() <= max, "a batch inflates past {max} bytes");
    Ok(Bytes::from(out))
}

/// Snappy in the xerial framing Kafka's clients write (`[len u32][block]...` after a 16-byte
/// header), or one raw block.
fn snappy(input: &[u8], max: usize, out: &mut Vec<u8>) -> anyhow::Result<()> {
    const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
    let block = |b: &[u8], out: &mut Vec<u8>| -> anyhow::Result<()> {
        let len = snap::raw::decompress_len(b)?;
        anyhow::ensure!(out.len() + len <= max, "a batch inflates past {max} bytes");
        out.extend(snap::raw::Decoder::new().decompress_vec(b)?);
        Ok(())
    };
    if !input.starts_with(XERIAL_MAGIC) {
        return block(input, out);
    }
    let mut rest = input.get(16..).unwrap_or_default();
    while !rest.is_empty() {
        anyhow::ensure!(rest.len() >= 4, "truncated xerial block length");
        let len = u32::from_be_bytes(rest[..4].try_into()?) as usize;
        let b = rest
            .get(4..4 + len)
            .ok_or_else(|| anyhow::anyhow!("truncated xerial block"))?;
        block(b, out)?;
        rest = &rest[4 + len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    fn batch(base: i64, n: i64) -> Bytes {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: base + i,
                sequence: -1,
                timestamp: 7,
                key: None,
                value: Some(Bytes::from(format!("v{i}"))),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    #[test]
    fn only_acquired_offsets_come_back() {
        let acquired = [Acquired {
            first_offset: 2,
            last_offset: 3,
            delivery_count: 1,
        }];
        let records = decode(batch(0, 5), &acquired, 1 << 20).unwrap();
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [2, 3]);
    }

    #[test]
    fn garbage_and_partial_batches_do_not_panic() {
        let whole = batch(0, 3);
        // Longer than a header, shorter than the batch it starts.
        let cut = whole.slice(..BATCH_HEADER_BYTES + 5);
        let all = [Acquired {
            first_offset: 0,
            last_offset: 10,
            delivery_count: 1,
        }];
        // A partial trailing batch (cut by max.bytes) is left for the next fetch.
        let mut both = BytesMut::from(&whole[..]);
        both.extend_from_slice(&cut);
        assert_eq!(decode(both.freeze(), &all, 1 << 20).unwrap().len(), 3);
        let mut huge = BytesMut::from(&whole[..]);
        huge[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode(huge.freeze(), &all, 1 << 20).is_err());
        for n in 0..whole.len() {
            let _ = decode(Bytes::from(vec![0xffu8; n]), &all, 1 << 20);
        }
    }
}
