//! Validation of compressed batches built here with each codec, and decompression bombs.

use std::io::Write;

use shoal_storage::batch::{
    compute_crc, decode_records, encode_batch, validate_record_set, BatchOptions, Compression,
    ValidationLimits, BATCH_HEADER_BYTES,
};
use shoal_storage::{codes, StorageError};

const CRC_POS: usize = 17;
const ATTRIBUTES_POS: usize = 21;

/// An uncompressed batch of `n` records and its record payload.
fn plain(n: usize) -> (Vec<u8>, Vec<u8>) {
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes())
        .collect();
    let recs: Vec<shoal_storage::batch::KeyValue<'_>> = values
        .iter()
        .map(|v| (Some(&b"key"[..]), Some(v.as_slice())))
        .collect();
    let b = encode_batch(
        &recs,
        BatchOptions {
            timestamp_ms: 42,
            ..BatchOptions::default()
        },
    );
    let payload = b[BATCH_HEADER_BYTES..].to_vec();
    (b, payload)
}

/// Replaces the payload of `template` with `compressed` and sets the codec and CRC.
fn with_payload(template: &[u8], codec: Compression, compressed: &[u8]) -> Vec<u8> {
    let mut b = template[..BATCH_HEADER_BYTES].to_vec();
    b.extend_from_slice(compressed);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let attrs =
        i16::from_be_bytes([b[ATTRIBUTES_POS], b[ATTRIBUTES_POS + 1]]) & !7 | i16::from(codec.id());
    b[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attrs.to_be_bytes());
    let crc = compute_crc(&b).unwrap();
    b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn lz4(data: &[u8]) -> Vec<u8> {
    let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn xerial(data: &[u8], block: usize) -> Vec<u8> {
    let mut out = vec![
        0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
    ];
    for chunk in data.chunks(block) {
        let c = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
        out.extend_from_slice(&(c.len() as i32).to_be_bytes());
        out.extend_from_slice(&c);
    }
    out
}

fn check_codec(codec: Compression, compress: impl Fn(&[u8]) -> Vec<u8>) {
    let (template, payload) = plain(100);
    let b = with_payload(&template, codec, &compress(&payload));
    let limits = ValidationLimits::default();
    let hs = validate_record_set(&b, &limits).unwrap_or_else(|e| panic!("{codec:?}: {e}"));
    assert_eq!(hs[0].compression(), codec);
    let recs = decode_records(&b, 1 << 20).unwrap();
    let plain_recs = decode_records(&template, 1 << 20).unwrap();
    assert_eq!(recs, plain_recs);

    // Corrupt compressed data (with a valid CRC) is INVALID_RECORD, not a panic.
    let mut garbage = compress(&payload);
    let n = garbage.len();
    for b in &mut garbage[n / 2..] {
        *b = b.wrapping_mul(31).wrapping_add(7);
    }
    let bad = with_payload(&template, codec, &garbage);
    if let Err(e) = validate_record_set(&bad, &limits) {
        assert_eq!(
            e.kafka_error_code(),
            codes::INVALID_RECORD,
            "{codec:?}: {e}"
        );
    }
    // Truncated compressed data.
    let cut = compress(&payload);
    let bad = with_payload(&template, codec, &cut[..cut.len() / 2]);
    let e = validate_record_set(&bad, &limits).unwrap_err();
    assert_eq!(
        e.kafka_error_code(),
        codes::INVALID_RECORD,
        "{codec:?}: {e}"
    );
}

#[test]
fn gzip_batches() {
    check_codec(Compression::Gzip, gzip);
}

#[test]
fn snappy_raw_batches() {
    check_codec(Compression::Snappy, |d| {
        snap::raw::Encoder::new().compress_vec(d).unwrap()
    });
}

#[test]
fn snappy_xerial_batches() {
    check_codec(Compression::Snappy, |d| xerial(d, 1000));
}

#[test]
fn lz4_frame_batches() {
    check_codec(Compression::Lz4, lz4);
}

#[test]
fn zstd_batches() {
    check_codec(Compression::Zstd, |d| zstd::encode_all(d, 3).unwrap());
}

fn small_budget() -> ValidationLimits {
    ValidationLimits {
        max_message_bytes: 8 << 20,
        decompressed_bytes_max: 4 << 20,
    }
}

fn assert_bomb(b: &[u8]) {
    let e = validate_record_set(b, &small_budget()).unwrap_err();
    assert!(
        matches!(e, StorageError::DecompressedTooLarge { .. }),
        "{e}"
    );
    assert_eq!(e.kafka_error_code(), codes::INVALID_RECORD);
    let e = decode_records(b, 4 << 20).unwrap_err();
    assert!(
        matches!(e, StorageError::DecompressedTooLarge { .. }),
        "{e}"
    );
}

/// A zstd frame of RLE blocks expanding to `total` zero bytes (4 bytes per 128 KiB).
fn zstd_rle_bomb(total: u64) -> Vec<u8> {
    const BLOCK: u64 = 128 * 1024;
    let mut out = 0xFD2F_B528u32.to_le_bytes().to_vec();
    out.push(0x00); // frame header descriptor: no content size, not single segment
    out.push(7 << 3); // window descriptor: 2^17
    let blocks = total / BLOCK;
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = ((BLOCK as u32) << 3) | (1 << 1) | last;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(0);
    }
    out
}

#[test]
fn zstd_bomb_1gib_is_rejected() {
    let (template, _) = plain(1);
    let bomb = zstd_rle_bomb(1 << 30);
    assert!(bomb.len() < 64 * 1024);
    // Sanity: the frame really does decode (a bounded prefix).
    let mut prefix = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            zstd::stream::read::Decoder::new(&bomb[..]).unwrap(),
            1 << 20,
        ),
        &mut prefix,
    )
    .unwrap();
    assert_eq!(prefix.len(), 1 << 20);
    assert_bomb(&with_payload(&template, Compression::Zstd, &bomb));
}

#[test]
fn gzip_bomb_1gib_is_rejected() {
    // 64 concatenated gzip members of 16 MiB of zeros each = 1 GiB.
    let member = gzip(&vec![0u8; 16 << 20]);
    let bomb: Vec<u8> = std::iter::repeat_n(&member[..], 64)
        .flatten()
        .copied()
        .collect();
    let (template, _) = plain(1);
    assert_bomb(&with_payload(&template, Compression::Gzip, &bomb));
}

#[test]
fn snappy_bomb_is_rejected_before_allocating() {
    // A raw snappy block declaring 1 GiB of output.
    let mut raw = Vec::new();
    let mut v: u64 = 1 << 30;
    while v >= 0x80 {
        raw.push((v as u8) | 0x80);
        v >>= 7;
    }
    raw.push(v as u8);
    raw.extend_from_slice(&[0; 16]);
    let (template, _) = plain(1);
    assert_bomb(&with_payload(&template, Compression::Snappy, &raw));
    // xerial: many blocks that each fit, together over budget.
    let chunk = vec![0u8; 1 << 20];
    let block = snap::raw::Encoder::new().compress_vec(&chunk).unwrap();
    let mut x = xerial(&[], 1);
    for _ in 0..8 {
        x.extend_from_slice(&(block.len() as i32).to_be_bytes());
        x.extend_from_slice(&block);
    }
    assert_bomb(&with_payload(&template, Compression::Snappy, &x));
}

#[test]
fn lz4_bomb_is_rejected() {
    let frame = lz4(&vec![0u8; 8 << 20]);
    let (template, _) = plain(1);
    assert_bomb(&with_payload(&template, Compression::Lz4, &frame));
}

#[test]
fn records_with_headers_decode() {
    // Hand-built record: attributes, ts delta, offset delta, key, value, 2 headers.
    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
    let mut body = vec![0u8];
    varint(&mut body, 5); // timestampDelta
    varint(&mut body, 0); // offsetDelta
    varint(&mut body, -1); // null key
    varint(&mut body, 2);
    body.extend_from_slice(b"hi");
    varint(&mut body, 2); // headers
    varint(&mut body, 1);
    body.extend_from_slice(b"a");
    varint(&mut body, -1);
    varint(&mut body, 1);
    body.extend_from_slice(b"b");
    varint(&mut body, 3);
    body.extend_from_slice(b"xyz");
    let mut payload = Vec::new();
    varint(&mut payload, body.len() as i64);
    payload.extend_from_slice(&body);
    let (template, _) = plain(1);
    for (codec, data) in [
        (Compression::None, payload.clone()),
        (
            Compression::Zstd,
            zstd::encode_all(&payload[..], 1).unwrap(),
        ),
    ] {
        let b = with_payload(&template, codec, &data);
        validate_record_set(&b, &ValidationLimits::default()).unwrap();
        let recs = decode_records(&b, 1024).unwrap();
        assert_eq!(recs.len(), 1);
        let r = &recs[0];
        assert_eq!(r.timestamp, 47);
        assert_eq!(r.key, None);
        assert_eq!(r.value.as_deref(), Some(&b"hi"[..]));
        assert_eq!(r.headers.len(), 2);
        assert_eq!(&r.headers[0].key[..], b"a");
        assert_eq!(r.headers[0].value, None);
        assert_eq!(r.headers[1].value.as_deref(), Some(&b"xyz"[..]));
    }
}
