//! Decoding the record batches of one partition of a ShareFetch answer, bounded: the bytes
//! are untrusted, so a batch that claims more records than [`BATCH_RECORDS_MAX`] or inflates
//! past the partition's byte limit is an error, never an allocation.
//!
//! Only the data records inside the acquired ranges are returned: the broker sends whole
//! batches, and control batches carry no data (their offsets are GAPs in the book).
//!
//! Headers are read from the records' bytes again, in order: `kafka-protocol` keeps them in a
//! map, which drops all but the last value of a repeated key, and Kafka allows any number of
//! headers with one key (the Java client's `Headers.headers(key)`). Decompression and that
//! second reading are `shoal-codec`'s (the broker's storage uses the same code).

use std::cell::RefCell;

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};
use shoal_codec::batch::{self as codec, Deltas, BATCH_HEADER_BYTES, RECORD_COUNT_POS};
use shoal_protocol::uuid::Uuid;

use crate::share_consumer::acknowledgements::Acquired;

/// A share partition: topic id and partition index.
pub type TopicIdPartition = (Uuid, i32);

/// A record a poll delivered.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ShareRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    pub timestamp: i64,
    /// 1 at the first delivery, 2 after a release or a lock expiry, ...
    pub delivery_count: i16,
    /// How long the broker holds the record for this consumer from the fetch's answer
    /// (`AcquisitionLockTimeoutMs`); after it, the record goes to another consumer.
    pub acquisition_lock_timeout: Duration,
    pub topic_id: Uuid,
}

/// Most records one batch may claim before it is decoded.
pub const BATCH_RECORDS_MAX: i32 = 1 << 20;

/// One header: its key and value (`None`: a null value), as the record carries them.
pub type Header = (String, Option<Bytes>);

/// A decoded data record: `record` as `kafka-protocol` decodes it, whose `headers` map loses
/// repeated keys, and `headers`, every header in the record's order.
#[derive(Debug)]
pub struct Decoded {
    pub record: Record,
    pub headers: Vec<Header>,
}

/// The big-endian i32 at `at` (the caller checked `bytes` holds a batch header).
fn be_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The data records of `bytes` whose offsets an `acquired` range holds; `inflated_bytes_max`
/// bounds what any one batch decompresses to.
///
/// # Errors
/// A description of the first batch that does not decode or breaks a limit.
pub fn decode(
    mut bytes: Bytes,
    acquired: &[Acquired],
    inflated_bytes_max: usize,
) -> Result<Vec<Decoded>, String> {
    let mut out = Vec::new();
    // A tail shorter than a batch header is a partial batch, cut by `max.bytes`.
    while bytes.len() >= BATCH_HEADER_BYTES {
        let count = be_i32(&bytes, RECORD_COUNT_POS);
        if !(0..=BATCH_RECORDS_MAX).contains(&count) {
            return Err(format!("a batch claims {count} records"));
        }
        let length = be_i32(&bytes, 8);
        if usize::try_from(length).map_or(true, |l| bytes.len() < 12 + l) {
            // A partial batch at the end, cut by `max.bytes`: the next fetch returns it.
            break;
        }
        // The records' bytes as inflated, kept to read the headers from.
        let inflated: RefCell<Option<Bytes>> = RefCell::new(None);
        let decompress = |input: &mut Bytes, codec: Compression| -> anyhow::Result<Bytes> {
            let out = inflate(input, codec, inflated_bytes_max)?;
            *inflated.borrow_mut() = Some(out.clone());
            Ok(out)
        };
        let set = RecordBatchDecoder::decode_with_custom_compression(&mut bytes, Some(decompress))
            .map_err(|e| format!("record batch: {e}"))?;
        let headers = match inflated.take() {
            Some(raw) => all_headers(&raw, set.records.len())?,
            // A legacy (v0/v1) message set: nothing inflated by us, and no headers.
            None => vec![Vec::new(); set.records.len()],
        };
        let held = |o: i64| {
            acquired
                .iter()
                .any(|a| a.first_offset <= o && o <= a.last_offset)
        };
        out.extend(
            set.records
                .into_iter()
                .zip(headers)
                .filter(|(r, _)| !r.control && held(r.offset))
                .map(|(record, headers)| Decoded { record, headers }),
        );
    }
    Ok(out)
}

/// The headers of each of the `count` v2 records in `raw` (a batch's records, inflated), in
/// order, every header key UTF-8.
fn all_headers(raw: &Bytes, count: usize) -> Result<Vec<Vec<Header>>, String> {
    let count = i32::try_from(count).map_err(|_| format!("{count} records"))?;
    let mut out = Vec::new();
    let mut bad_key = false;
    codec::walk_records(raw, count, true, Deltas::Any, |record| {
        let headers = record
            .headers
            .into_iter()
            .filter_map(|(k, v)| {
                let Ok(key) = std::str::from_utf8(&raw[k]) else {
                    bad_key = true;
                    return None;
                };
                Some((key.to_owned(), v.map(|v| raw.slice(v))))
            })
            .collect();
        out.push(headers);
    })
    .map_err(|e| e.to_string())?;
    if bad_key {
        return Err("a header key that is not UTF-8".into());
    }
    Ok(out)
}

/// [`inflate`] without a bound, for other modules' tests.
#[cfg(test)]
pub(crate) fn inflate_for_tests(input: &mut Bytes, codec: Compression) -> anyhow::Result<Bytes> {
    inflate(input, codec, usize::MAX - 1)
}

/// Kafka's codecs (`shoal_codec::batch::decompress`), reading at most `max` bytes out. An
/// uncompressed batch is its input as it is, whatever its size (a fetch answers with at least
/// one whole batch).
pub(crate) fn inflate(input: &mut Bytes, codec: Compression, max: usize) -> anyhow::Result<Bytes> {
    if codec == Compression::None {
        return Ok(input.clone());
    }
    let codec = crate::producer::batch::to_codec(codec);
    Ok(Bytes::from(codec::decompress(codec, input, max)?))
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
        let offsets: Vec<i64> = records.iter().map(|r| r.record.offset).collect();
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
        huge[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode(huge.freeze(), &all, 1 << 20).is_err());
        for n in 0..whole.len() {
            let _ = decode(Bytes::from(vec![0xffu8; n]), &all, 1 << 20);
        }
    }

    /// A header as a test writes it.
    type RawHeader<'a> = (&'a str, Option<&'a [u8]>);

    /// One uncompressed v2 batch at offset 0 of records with these headers (kafka-protocol's
    /// encoder cannot repeat a header key; the codec's writer can).
    fn batch_with_headers(records: &[Vec<RawHeader>]) -> Bytes {
        let mut w = codec::BatchWriter::default();
        for (i, headers) in records.iter().enumerate() {
            let value = format!("v{i}");
            let headers = headers.iter().map(|(k, v)| (k.as_bytes(), *v));
            w.push(7, Some(b"k"), Some(value.as_bytes()), headers)
                .unwrap();
        }
        let options = codec::BatchOptions {
            partition_leader_epoch: 0,
            ..codec::BatchOptions::default()
        };
        Bytes::from(w.finish(&options, codec::Compression::None).unwrap())
    }

    #[test]
    fn repeated_and_null_headers_keep_their_order() {
        let first: Vec<RawHeader> = vec![
            ("dup", Some(b"1")),
            ("x", None),
            ("dup", Some(b"2")),
            ("empty", Some(b"")),
        ];
        let bytes = batch_with_headers(&[first, vec![], vec![("dup", Some(b"3"))]]);
        let all = [Acquired {
            first_offset: 0,
            last_offset: 2,
            delivery_count: 1,
        }];
        let got = decode(bytes, &all, 1 << 20).unwrap();
        let headers: Vec<Vec<Header>> = got.iter().map(|d| d.headers.clone()).collect();
        let h = |k: &str, v: Option<&'static [u8]>| (k.to_owned(), v.map(Bytes::from_static));
        assert_eq!(
            headers,
            [
                vec![
                    h("dup", Some(b"1")),
                    h("x", None),
                    h("dup", Some(b"2")),
                    h("empty", Some(b"")),
                ],
                vec![],
                vec![h("dup", Some(b"3"))],
            ]
        );
        let values: Vec<_> = got
            .iter()
            .map(|d| d.record.value.clone().unwrap())
            .collect();
        assert_eq!(values, ["v0", "v1", "v2"]);
        // kafka-protocol's own map keeps one value per key: why the headers are read again.
        assert_eq!(got[0].record.headers.len(), 3);
    }

    #[test]
    fn headers_cut_short_are_an_error() {
        // A record of 5 bytes (varint 10) with 3 present.
        let raw = Bytes::from_static(&[10, 0, 0, 0]);
        assert!(all_headers(&raw, 1).is_err());
        assert!(all_headers(&Bytes::from_static(&[0xff; 11]), 1).is_err());
        assert_eq!(
            all_headers(&Bytes::new(), 0).unwrap(),
            Vec::<Vec<Header>>::new()
        );
    }
}
