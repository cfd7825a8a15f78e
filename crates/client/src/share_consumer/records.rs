//! Decoding the record batches of one partition of a ShareFetch answer, bounded: the bytes
//! are untrusted, so a batch that claims more records than [`BATCH_RECORDS_MAX`] or inflates
//! past the partition's byte limit is an error, never an allocation.
//!
//! Only the data records inside the acquired ranges are returned: the broker sends whole
//! batches, and control batches carry no data (their offsets are GAPs in the book).
//!
//! Headers are read from the records' bytes again, in order: `kafka-protocol` keeps them in a
//! map, which drops all but the last value of a repeated key, and Kafka allows any number of
//! headers with one key (the Java client's `Headers.headers(key)`).

use std::cell::RefCell;
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
/// order: `[length][attributes][timestamp delta][offset delta][key][value][headers]`, each
/// length a zigzag varint, -1 for null.
fn all_headers(raw: &[u8], count: usize) -> Result<Vec<Vec<Header>>, String> {
    let mut rest = raw;
    let mut out = Vec::with_capacity(count.min(raw.len()));
    for _ in 0..count {
        let length = usize::try_from(varint(&mut rest)?).map_err(|_| "a negative record length")?;
        let mut r = take(&mut rest, length)?;
        take(&mut r, 1)?; // attributes
        varint(&mut r)?; // timestamp delta
        varint(&mut r)?; // offset delta
        bytes_field(&mut r)?; // key
        bytes_field(&mut r)?; // value
        let n = usize::try_from(varint(&mut r)?).map_err(|_| "a negative header count")?;
        let mut headers = Vec::with_capacity(n.min(r.len()));
        for _ in 0..n {
            let key = bytes_field(&mut r)?.ok_or("a null header key")?;
            let key = std::str::from_utf8(key).map_err(|_| "a header key that is not UTF-8")?;
            let value = bytes_field(&mut r)?.map(Bytes::copy_from_slice);
            headers.push((key.to_owned(), value));
        }
        out.push(headers);
    }
    Ok(out)
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if rest.len() < n {
        return Err("a record cut short".into());
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

/// A length-prefixed field; `None` for length -1.
fn bytes_field<'a>(rest: &mut &'a [u8]) -> Result<Option<&'a [u8]>, String> {
    match varint(rest)? {
        -1 => Ok(None),
        n => {
            let n = usize::try_from(n).map_err(|_| format!("a field length of {n}"))?;
            take(rest, n).map(Some)
        }
    }
}

/// A zigzag varint of at most 10 bytes (Kafka's varint and varlong).
fn varint(rest: &mut &[u8]) -> Result<i64, String> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = *take(rest, 1)?.first().ok_or("a record cut short")?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
        }
    }
    Err("a varint longer than 10 bytes".into())
}

/// [`inflate`] without a bound, for other modules' tests.
#[cfg(test)]
pub(crate) fn inflate_for_tests(input: &mut Bytes, codec: Compression) -> anyhow::Result<Bytes> {
    inflate(input, codec, usize::MAX - 1)
}

/// Kafka's codecs, reading at most `max` bytes out (one more means the batch is too big).
pub(crate) fn inflate(input: &mut Bytes, codec: Compression, max: usize) -> anyhow::Result<Bytes> {
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
        huge[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode(huge.freeze(), &all, 1 << 20).is_err());
        for n in 0..whole.len() {
            let _ = decode(Bytes::from(vec![0xffu8; n]), &all, 1 << 20);
        }
    }

    /// CRC-32C (Castagnoli), bitwise: what a v2 batch header carries over its tail.
    fn crc32c(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn zigzag(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    fn field(out: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            None => zigzag(out, -1),
            Some(b) => {
                zigzag(out, b.len() as i64);
                out.extend_from_slice(b);
            }
        }
    }

    /// A header as a test writes it.
    type RawHeader<'a> = (&'a str, Option<&'a [u8]>);

    /// One uncompressed v2 batch at offset 0 of records with these headers, written byte by
    /// byte (kafka-protocol's encoder cannot repeat a header key).
    fn batch_with_headers(records: &[Vec<RawHeader>]) -> Bytes {
        let mut body = Vec::new();
        for (i, headers) in records.iter().enumerate() {
            let mut r = vec![0u8]; // attributes
            zigzag(&mut r, 0); // timestamp delta
            zigzag(&mut r, i as i64); // offset delta
            field(&mut r, Some(b"k"));
            field(&mut r, Some(format!("v{i}").as_bytes()));
            zigzag(&mut r, headers.len() as i64);
            for (k, v) in headers {
                field(&mut r, Some(k.as_bytes()));
                field(&mut r, *v);
            }
            zigzag(&mut body, r.len() as i64);
            body.extend_from_slice(&r);
        }
        let mut tail = Vec::new(); // from the attributes on: what the CRC covers
        tail.extend_from_slice(&0i16.to_be_bytes()); // attributes
        tail.extend_from_slice(&(records.len() as i32 - 1).to_be_bytes()); // last offset delta
        tail.extend_from_slice(&7i64.to_be_bytes()); // base timestamp
        tail.extend_from_slice(&7i64.to_be_bytes()); // max timestamp
        tail.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
        tail.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
        tail.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        tail.extend_from_slice(&(records.len() as i32).to_be_bytes());
        tail.extend_from_slice(&body);
        let mut out = Vec::new();
        out.extend_from_slice(&0i64.to_be_bytes()); // base offset
        out.extend_from_slice(&((4 + 1 + 4 + tail.len()) as i32).to_be_bytes()); // length
        out.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
        out.push(2); // magic
        out.extend_from_slice(&crc32c(&tail).to_be_bytes());
        out.extend_from_slice(&tail);
        Bytes::from(out)
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
        let mut raw = Vec::new();
        zigzag(&mut raw, 5);
        raw.extend_from_slice(&[0, 0, 0]);
        assert!(all_headers(&raw, 1).is_err());
        assert!(all_headers(&[0xff; 11], 1).is_err());
        assert_eq!(all_headers(&[], 0).unwrap(), Vec::<Vec<Header>>::new());
    }
}
