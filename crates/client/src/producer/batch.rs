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
//! Encoded with `shoal_codec::batch::BatchWriter` (the one batch encoder, shared with the
//! broker's storage) rather than with `kafka-protocol`'s encoder, because that one keeps a
//! record's headers in a map: a key given twice (Kafka allows it, the Java client keeps
//! both) would lose all but its last value.

use bytes::Bytes;
use kafka_protocol::records::Compression;
use shoal_codec::batch::{self as codec, BatchOptions, BatchWriter};

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
    if records.is_empty() {
        return Err("a batch needs a record".into());
    }
    let mut w = BatchWriter::with_capacity(records.iter().map(estimate).sum());
    for r in records {
        let headers = r.headers.iter().map(|(k, v)| (k.as_bytes(), v.as_deref()));
        w.push(r.timestamp, r.key.as_deref(), r.value.as_deref(), headers)
            .map_err(|e| e.to_string())?;
    }
    let options = BatchOptions {
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
        transactional: header.transactional,
        // Base offset 0 (the broker assigns it), partition leader epoch -1, CreateTime.
        ..BatchOptions::default()
    };
    let bytes = w
        .finish(&options, to_codec(codec))
        .map_err(|e| format!("{codec:?}: {e}"))?;
    Ok(Bytes::from(bytes))
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

/// `kafka-protocol`'s codec (the producer's configuration) as `shoal-codec`'s.
pub(crate) fn to_codec(codec: Compression) -> codec::Compression {
    match codec {
        Compression::None => codec::Compression::None,
        Compression::Gzip => codec::Compression::Gzip,
        Compression::Snappy => codec::Compression::Snappy,
        Compression::Lz4 => codec::Compression::Lz4,
        Compression::Zstd => codec::Compression::Zstd,
    }
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

    /// A larger batch: several xerial snappy blocks, headers repeated and null.
    fn pinned_sample() -> Vec<BatchRecord> {
        (0..2000u32)
            .map(|i| BatchRecord {
                key: (i % 3 != 0).then(|| Bytes::from(format!("key-{i}"))),
                value: (i % 7 != 0)
                    .then(|| Bytes::from(format!("value {i} ").repeat((i % 13) as usize + 1))),
                headers: (0..(i % 4))
                    .map(|h| {
                        let value = (h % 3 != 1).then(|| Bytes::from(vec![h as u8; h as usize]));
                        (format!("h{}", h % 2), value)
                    })
                    .collect(),
                timestamp: 1_700_000_000_000 + i64::from(i % 17) * 1000 - 5000,
            })
            .collect()
    }

    /// (size, CRC-32C of the whole batch) as the producer's own encoder wrote them before it
    /// moved to `shoal-codec`: the produced bytes must not change.
    #[test]
    fn produced_bytes_are_those_of_the_encoder_replaced() {
        let header = BatchHeader {
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: 17,
            transactional: true,
        };
        for (codec, want) in [
            (Compression::None, (169_186, 0xec05_9bbb)),
            (Compression::Gzip, (27_551, 0xb520_f773)),
            (Compression::Snappy, (41_841, 0x93b0_56f6)),
            (Compression::Lz4, (39_439, 0x7d72_13be)),
            (Compression::Zstd, (30_416, 0x85b4_d976)),
        ] {
            let bytes = encode(&pinned_sample(), header, codec).unwrap();
            let got = (bytes.len(), codec::crc32c(&bytes));
            assert_eq!(got, want, "{codec:?}");
        }
    }
}
