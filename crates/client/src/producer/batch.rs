//! A produce batch on the wire: Kafka's record batch, magic v2, as the Java client writes it.
//! Sans-IO.
//!
//! ```text
//! baseOffset i64 (0) | batchLength i32 | partitionLeaderEpoch i32 (-1) | magic i8 (2) |
//! crc u32 (CRC-32C of everything after it) | attributes i16 (codec, transactional) |
//! lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 | producerId i64 |
//! producerEpoch i16 | baseSequence i32 | recordCount i32 | records (compressed as a whole)
//! record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//!         key | value | headerCount varint | (headerKey, headerValue)*   (bytes: varint
//!         length, -1 for null)
//! ```
//!
//! Written here rather than with `kafka-protocol`'s encoder because that one keeps a
//! record's headers in a map: a key given twice (Kafka allows it, the Java client keeps
//! both) would lose all but its last value.

use std::io::Write;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::records::Compression;

/// One record of a batch, as the application gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// In the application's order, repeated keys kept.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time, ms.
    pub timestamp: i64,
}

/// The batch header fields the producer decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
}

/// Bytes before the records.
const HEADER_BYTES: usize = 61;
/// The CRC covers the batch from the attributes on.
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const TRANSACTIONAL_BIT: i16 = 0x10;
/// Bound of one record or header field (Kafka's records are sized by i32).
const FIELD_BYTES_MAX: usize = i32::MAX as usize;

/// Encodes `records` (at least one) as one batch, compressed with `codec`.
///
/// # Errors
/// A description when there is no record, a field is longer than `i32::MAX` bytes, or the
/// codec fails.
pub(crate) fn encode(
    records: &[BatchRecord],
    header: BatchHeader,
    codec: Compression,
) -> Result<Bytes, String> {
    let first = records.first().ok_or("a batch needs a record")?;
    let count = i32::try_from(records.len()).map_err(|_| "too many records")?;
    let base_timestamp = first.timestamp;
    let max_timestamp = records
        .iter()
        .map(|r| r.timestamp)
        .max()
        .unwrap_or(base_timestamp);
    let mut plain = BytesMut::with_capacity(records.iter().map(estimate).sum());
    let mut record = BytesMut::new();
    for (i, r) in records.iter().enumerate() {
        record.clear();
        record.put_u8(0); // attributes: unused
        put_varlong(&mut record, r.timestamp.wrapping_sub(base_timestamp));
        put_varlong(&mut record, i as i64);
        put_bytes(&mut record, r.key.as_deref())?;
        put_bytes(&mut record, r.value.as_deref())?;
        put_varlong(&mut record, r.headers.len() as i64);
        for (k, v) in &r.headers {
            put_bytes(&mut record, Some(k.as_bytes()))?;
            put_bytes(&mut record, v.as_deref())?;
        }
        put_varlong(&mut plain, record.len() as i64);
        plain.extend_from_slice(&record);
    }
    let mut out = BytesMut::with_capacity(HEADER_BYTES + plain.len());
    out.put_i64(0); // base offset: the broker assigns it
    out.put_i32(0); // batch length, below
    out.put_i32(-1); // partition leader epoch
    out.put_i8(2);
    out.put_u32(0); // crc, below
    let mut attributes = codec_bits(codec);
    if header.transactional {
        attributes |= TRANSACTIONAL_BIT;
    }
    out.put_i16(attributes);
    out.put_i32(count - 1);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(count);
    compress(&plain, &mut out, codec).map_err(|e| format!("{codec:?}: {e}"))?;
    let length = i32::try_from(out.len() - 12).map_err(|_| "a batch over 2 GiB")?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

/// About a record's encoded size, for the buffer's first allocation.
fn estimate(r: &BatchRecord) -> usize {
    let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
    16 + len(&r.key)
        + len(&r.value)
        + r.headers
            .iter()
            .map(|(k, v)| 10 + k.len() + len(v))
            .sum::<usize>()
}

fn codec_bits(codec: Compression) -> i16 {
    match codec {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
    }
}

/// A zigzag varint (Kafka's varint and varlong share the encoding).
fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn put_bytes(out: &mut BytesMut, b: Option<&[u8]>) -> Result<(), String> {
    match b {
        None => put_varlong(out, -1),
        Some(b) if b.len() > FIELD_BYTES_MAX => {
            return Err(format!("a field of {} bytes", b.len()));
        }
        Some(b) => {
            put_varlong(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

/// Kafka's codecs for a batch's records: gzip, snappy in the xerial framing the Java client
/// writes, the LZ4 frame format, zstd.
fn compress(records: &[u8], out: &mut BytesMut, codec: Compression) -> anyhow::Result<()> {
    const XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    const XERIAL_BLOCK_BYTES: usize = 32 * 1024;
    match codec {
        Compression::None => out.extend_from_slice(records),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(records)?;
            out.extend_from_slice(&e.finish()?);
        }
        Compression::Snappy => {
            out.extend_from_slice(XERIAL_HEADER);
            let mut e = snap::raw::Encoder::new();
            for chunk in records.chunks(XERIAL_BLOCK_BYTES) {
                let block = e.compress_vec(chunk)?;
                out.extend_from_slice(&u32::try_from(block.len())?.to_be_bytes());
                out.extend_from_slice(&block);
            }
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(records)?;
            out.extend_from_slice(&e.finish()?);
        }
        Compression::Zstd => out.extend_from_slice(&zstd::stream::encode_all(records, 3)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::records::RecordBatchDecoder;

    use super::*;
    use crate::share_consumer::acknowledgements::Acquired;
    use crate::share_consumer::records;

    fn sample() -> Vec<BatchRecord> {
        vec![
            BatchRecord {
                key: Some(Bytes::from_static(b"k0")),
                value: Some(Bytes::from(vec![7u8; 3000])),
                headers: vec![
                    ("d".into(), Some(Bytes::from_static(b"1"))),
                    ("x".into(), None),
                    ("d".into(), Some(Bytes::from_static(b"2"))),
                    ("e".into(), Some(Bytes::new())),
                ],
                timestamp: 1_700_000_000_123,
            },
            BatchRecord {
                key: None,
                value: None,
                headers: Vec::new(),
                // Earlier than the first: a negative delta.
                timestamp: 1_700_000_000_000,
            },
            BatchRecord {
                key: Some(Bytes::new()),
                value: Some(Bytes::from_static(b"v2")),
                headers: vec![("h".into(), Some(Bytes::from_static(b"only")))],
                timestamp: 1_700_000_000_500,
            },
        ]
    }

    #[test]
    fn every_codec_round_trips_through_an_independent_decoder_with_repeated_headers() {
        let header = BatchHeader {
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: 17,
            transactional: true,
        };
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let bytes = encode(&sample(), header, codec).unwrap();
            // kafka-protocol checks the CRC and reads the batch fields.
            let set = RecordBatchDecoder::decode_with_custom_compression(
                &mut bytes.clone(),
                Some(|input: &mut Bytes, c: Compression| records::inflate_for_tests(input, c)),
            )
            .unwrap();
            assert_eq!(set.records.len(), 3, "{codec:?}");
            for (i, r) in set.records.iter().enumerate() {
                assert_eq!(r.offset, i as i64);
                assert_eq!(r.producer_id, 42);
                assert_eq!(r.producer_epoch, 3);
                assert_eq!(r.sequence, 17 + i as i32);
                assert!(r.transactional);
                assert_eq!(r.timestamp, sample()[i].timestamp);
                assert_eq!(r.key, sample()[i].key);
                assert_eq!(r.value, sample()[i].value);
            }
            // The share consumer's decoder reads headers in order, repeated keys kept.
            let acquired = [Acquired {
                first_offset: 0,
                last_offset: 2,
                delivery_count: 1,
            }];
            let decoded = records::decode(bytes, &acquired, 1 << 20).unwrap();
            let headers: Vec<_> = decoded.into_iter().map(|d| d.headers).collect();
            let want: Vec<_> = sample().into_iter().map(|r| r.headers).collect();
            assert_eq!(headers, want, "{codec:?}");
        }
    }

    #[test]
    fn a_plain_batch_has_no_producer_and_an_empty_one_is_refused() {
        const PLAIN: BatchHeader = BatchHeader {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
        };
        let bytes = encode(&sample()[1..2], PLAIN, Compression::None).unwrap();
        let set = RecordBatchDecoder::decode(&mut bytes.clone()).unwrap();
        assert_eq!(set.records[0].producer_id, -1);
        assert_eq!(set.records[0].sequence, -1);
        assert!(!set.records[0].transactional);
        assert!(encode(&[], PLAIN, Compression::None).is_err());
    }
}
