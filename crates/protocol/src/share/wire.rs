//! Flexible-version ("compact") wire primitives for the hand-written share codecs.
//!
//! Decoding follows Kafka's generated Java readers: unsigned varints of at most five bytes,
//! compact lengths stored as `length + 1` (0 = null), strings of at most 0x7fff bytes, and
//! unknown tagged fields kept as raw bytes. Nothing here panics on input, and an array's count is
//! checked against the bytes left before anything is allocated for it.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use bytes::{BufMut, Bytes};
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;
use shoal_codec::varint;
use uuid::Uuid;

/// The longest string Kafka reads or writes (its generated code refuses longer ones).
const STRING_BYTES_MAX: usize = 0x7fff;

/// One struct of a message: how it is read and written at a version.
pub(crate) trait Wire: Sized {
    /// The fewest bytes one value takes on the wire at any version: bounds how many elements an
    /// array count can claim before the remaining input is exhausted.
    const MIN_SIZE: usize;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self>;

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()>;
}

/// Where encoded bytes go: a buffer, or a counter for `compute_size`.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

/// Writes into a `BufMut`.
pub(crate) struct BufSink<'a, B>(pub &'a mut B);

impl<B: BufMut> Sink for BufSink<'_, B> {
    fn put(&mut self, bytes: &[u8]) {
        self.0.put_slice(bytes);
    }
}

/// Counts the bytes that would be written.
#[derive(Default)]
pub(crate) struct Counter(pub usize);

impl Sink for Counter {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

// ---- decoding ----

fn take<const N: usize, B: ByteBuf>(buf: &mut B, what: &str) -> Result<[u8; N]> {
    if buf.remaining() < N {
        bail!("{what}: needs {N} bytes, {} left", buf.remaining());
    }
    let mut out = [0u8; N];
    buf.copy_to_slice(&mut out);
    Ok(out)
}

pub(crate) fn i8<B: ByteBuf>(buf: &mut B, what: &str) -> Result<i8> {
    Ok(i8::from_be_bytes(take(buf, what)?))
}

pub(crate) fn i16<B: ByteBuf>(buf: &mut B, what: &str) -> Result<i16> {
    Ok(i16::from_be_bytes(take(buf, what)?))
}

pub(crate) fn i32<B: ByteBuf>(buf: &mut B, what: &str) -> Result<i32> {
    Ok(i32::from_be_bytes(take(buf, what)?))
}

pub(crate) fn i64<B: ByteBuf>(buf: &mut B, what: &str) -> Result<i64> {
    Ok(i64::from_be_bytes(take(buf, what)?))
}

/// Any non-zero byte is true, as in Kafka.
pub(crate) fn bool<B: ByteBuf>(buf: &mut B, what: &str) -> Result<bool> {
    Ok(take::<1, _>(buf, what)?[0] != 0)
}

pub(crate) fn uuid<B: ByteBuf>(buf: &mut B, what: &str) -> Result<Uuid> {
    Ok(Uuid::from_bytes(take(buf, what)?))
}

/// An unsigned varint of at most five bytes; bits beyond 32 in the fifth byte are dropped, as
/// Kafka's `ByteUtils.readUnsignedVarint` does.
pub(crate) fn uvarint<B: ByteBuf>(buf: &mut B, what: &str) -> Result<u32> {
    let raw = varint::read_unsigned(varint::VARINT_BYTES_MAX, || {
        take::<1, _>(buf, what).map(|[b]| b)
    })?;
    match raw {
        // The cast drops the bits beyond 32, as Java's `int` shifts do.
        Some(v) => Ok(v as u32),
        None => bail!("{what}: varint longer than five bytes"),
    }
}

/// A compact length: `None` for null.
fn compact_len<B: ByteBuf>(buf: &mut B, what: &str) -> Result<Option<usize>> {
    match uvarint(buf, what)? {
        0 => Ok(None),
        n => Ok(Some((n - 1) as usize)),
    }
}

fn bytes_of<B: ByteBuf>(buf: &mut B, len: usize, what: &str) -> Result<Bytes> {
    if buf.remaining() < len {
        bail!("{what}: length {len} but {} bytes left", buf.remaining());
    }
    buf.try_get_bytes(len).map_err(|e| anyhow!("{what}: {e}"))
}

pub(crate) fn nullable_string<B: ByteBuf>(buf: &mut B, what: &str) -> Result<Option<StrBytes>> {
    let Some(len) = compact_len(buf, what)? else {
        return Ok(None);
    };
    if len > STRING_BYTES_MAX {
        bail!("{what}: invalid string length {len}");
    }
    let bytes = bytes_of(buf, len, what)?;
    StrBytes::from_utf8(bytes)
        .map(Some)
        .map_err(|e| anyhow!("{what}: {e}"))
}

pub(crate) fn string<B: ByteBuf>(buf: &mut B, what: &str) -> Result<StrBytes> {
    nullable_string(buf, what)?.ok_or_else(|| anyhow!("{what}: non-nullable string was null"))
}

/// Non-nullable compact bytes (record batches), shared with the input rather than copied.
pub(crate) fn bytes<B: ByteBuf>(buf: &mut B, what: &str) -> Result<Bytes> {
    match compact_len(buf, what)? {
        Some(len) => bytes_of(buf, len, what),
        None => bail!("{what}: non-nullable bytes were null"),
    }
}

fn nullable_array<B: ByteBuf, T>(
    buf: &mut B,
    what: &str,
    min_size: usize,
    mut item: impl FnMut(&mut B) -> Result<T>,
) -> Result<Option<Vec<T>>> {
    let Some(count) = compact_len(buf, what)? else {
        return Ok(None);
    };
    // Every element takes at least `min_size` bytes, so a count the rest of the input cannot hold
    // is malformed; refusing it first bounds the allocation below by the input's size.
    let fits = buf.remaining() / min_size.max(1);
    if count > fits {
        bail!(
            "{what}: {count} elements cannot fit in the {} bytes left",
            buf.remaining()
        );
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(item(buf)?);
    }
    Ok(Some(out))
}

fn array<B: ByteBuf, T>(
    buf: &mut B,
    what: &str,
    min_size: usize,
    item: impl FnMut(&mut B) -> Result<T>,
) -> Result<Vec<T>> {
    nullable_array(buf, what, min_size, item)?
        .ok_or_else(|| anyhow!("{what}: non-nullable array was null"))
}

pub(crate) fn structs<B: ByteBuf, T: Wire>(
    buf: &mut B,
    version: i16,
    what: &str,
) -> Result<Vec<T>> {
    array(buf, what, T::MIN_SIZE, |buf| T::read(buf, version))
}

pub(crate) fn nullable_structs<B: ByteBuf, T: Wire>(
    buf: &mut B,
    version: i16,
    what: &str,
) -> Result<Option<Vec<T>>> {
    nullable_array(buf, what, T::MIN_SIZE, |buf| T::read(buf, version))
}

pub(crate) fn i8s<B: ByteBuf>(buf: &mut B, what: &str) -> Result<Vec<i8>> {
    array(buf, what, 1, |buf| i8(buf, what))
}

pub(crate) fn i32s<B: ByteBuf>(buf: &mut B, what: &str) -> Result<Vec<i32>> {
    array(buf, what, 4, |buf| i32(buf, what))
}

/// The tagged-field section. None of these messages defines a tagged field, so every one is
/// unknown and kept as it came.
pub(crate) fn tagged_fields<B: ByteBuf>(buf: &mut B, what: &str) -> Result<BTreeMap<i32, Bytes>> {
    let count = uvarint(buf, what)?;
    let mut fields = BTreeMap::new();
    // No allocation up front: each field consumes at least two bytes or fails.
    for _ in 0..count {
        let tag = uvarint(buf, what)?;
        let tag = i32::try_from(tag).map_err(|_| anyhow!("{what}: tag {tag} out of range"))?;
        let size = uvarint(buf, what)? as usize;
        fields.insert(tag, bytes_of(buf, size, what)?);
    }
    Ok(fields)
}

// ---- encoding ----

pub(crate) fn put_i8<S: Sink>(out: &mut S, v: i8) {
    out.put(&v.to_be_bytes());
}

pub(crate) fn put_i16<S: Sink>(out: &mut S, v: i16) {
    out.put(&v.to_be_bytes());
}

pub(crate) fn put_i32<S: Sink>(out: &mut S, v: i32) {
    out.put(&v.to_be_bytes());
}

pub(crate) fn put_i64<S: Sink>(out: &mut S, v: i64) {
    out.put(&v.to_be_bytes());
}

pub(crate) fn put_bool<S: Sink>(out: &mut S, v: bool) {
    out.put(&[u8::from(v)]);
}

pub(crate) fn put_uuid<S: Sink>(out: &mut S, v: &Uuid) {
    out.put(v.as_bytes());
}

pub(crate) fn put_uvarint<S: Sink>(out: &mut S, v: u32) {
    out.put(&varint::unsigned(u64::from(v)));
}

fn put_len<S: Sink>(out: &mut S, len: Option<usize>, what: &str) -> Result<()> {
    let encoded = match len {
        None => 0,
        Some(len) => u32::try_from(len)
            .ok()
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| anyhow!("{what}: length {len} is too long to be serialized"))?,
    };
    put_uvarint(out, encoded);
    Ok(())
}

pub(crate) fn put_nullable_string<S: Sink>(out: &mut S, v: Option<&str>, what: &str) -> Result<()> {
    match v {
        None => put_len(out, None, what),
        Some(s) => put_string(out, s, what),
    }
}

pub(crate) fn put_string<S: Sink>(out: &mut S, v: &str, what: &str) -> Result<()> {
    if v.len() > STRING_BYTES_MAX {
        bail!("{what}: {} bytes is too long to be serialized", v.len());
    }
    put_len(out, Some(v.len()), what)?;
    out.put(v.as_bytes());
    Ok(())
}

pub(crate) fn put_bytes<S: Sink>(out: &mut S, v: &[u8], what: &str) -> Result<()> {
    put_len(out, Some(v.len()), what)?;
    out.put(v);
    Ok(())
}

pub(crate) fn put_structs<S: Sink, T: Wire>(
    out: &mut S,
    items: &[T],
    version: i16,
    what: &str,
) -> Result<()> {
    put_len(out, Some(items.len()), what)?;
    items.iter().try_for_each(|item| item.write(out, version))
}

pub(crate) fn put_nullable_structs<S: Sink, T: Wire>(
    out: &mut S,
    items: Option<&[T]>,
    version: i16,
    what: &str,
) -> Result<()> {
    match items {
        None => put_len(out, None, what),
        Some(items) => put_structs(out, items, version, what),
    }
}

pub(crate) fn put_i8s<S: Sink>(out: &mut S, items: &[i8], what: &str) -> Result<()> {
    put_len(out, Some(items.len()), what)?;
    items.iter().for_each(|&v| put_i8(out, v));
    Ok(())
}

pub(crate) fn put_i32s<S: Sink>(out: &mut S, items: &[i32], what: &str) -> Result<()> {
    put_len(out, Some(items.len()), what)?;
    items.iter().for_each(|&v| put_i32(out, v));
    Ok(())
}

pub(crate) fn put_tagged_fields<S: Sink>(
    out: &mut S,
    fields: &BTreeMap<i32, Bytes>,
    what: &str,
) -> Result<()> {
    let count = u32::try_from(fields.len())
        .map_err(|_| anyhow!("{what}: {} tagged fields", fields.len()))?;
    put_uvarint(out, count);
    // A BTreeMap iterates in ascending order, which the wire requires.
    for (&tag, value) in fields {
        let tag = u32::try_from(tag).map_err(|_| anyhow!("{what}: negative tag {tag}"))?;
        let size = u32::try_from(value.len())
            .map_err(|_| anyhow!("{what}: tagged field of {} bytes", value.len()))?;
        put_uvarint(out, tag);
        put_uvarint(out, size);
        out.put(value);
    }
    Ok(())
}

/// A field this version cannot carry must hold its default, as Kafka's generated writers demand
/// of fields that are not `ignorable`.
pub(crate) fn absent<T: PartialEq>(value: &T, default: &T, what: &str, version: i16) -> Result<()> {
    if value != default {
        bail!("attempted to write a non-default {what} at version {version}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(f: impl FnOnce(&mut BufSink<'_, Vec<u8>>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut BufSink(&mut v));
        v
    }

    #[test]
    fn uvarints_round_trip_at_the_size_boundaries() {
        for v in [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            0x1f_ffff,
            0x20_0000,
            u32::MAX,
        ] {
            let bytes = encode(|s| put_uvarint(s, v));
            let mut buf = Bytes::from(bytes.clone());
            assert_eq!(uvarint(&mut buf, "v").unwrap(), v, "{bytes:02x?}");
            assert!(buf.is_empty());
        }
        assert_eq!(encode(|s| put_uvarint(s, 300)), vec![0xac, 0x02]);
    }

    #[test]
    fn overlong_varints_and_lengths_are_errors() {
        let mut buf = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert!(uvarint(&mut buf, "v").is_err());
        // A string claiming 0x8000 bytes.
        let mut buf = Bytes::from_static(&[0x81, 0x80, 0x02]);
        assert!(nullable_string(&mut buf, "s").is_err());
        // An array of 2^31 i32s in a few bytes: refused without allocating.
        let mut buf = Bytes::from_static(&[0x81, 0x80, 0x80, 0x80, 0x08, 0, 0, 0, 0]);
        assert!(i32s(&mut buf, "a").is_err());
    }

    #[test]
    fn null_where_not_nullable_is_an_error() {
        assert!(string(&mut Bytes::from_static(&[0]), "s").is_err());
        assert!(bytes(&mut Bytes::from_static(&[0]), "b").is_err());
        assert!(i32s(&mut Bytes::from_static(&[0]), "a").is_err());
        assert_eq!(
            nullable_string(&mut Bytes::from_static(&[0]), "s").unwrap(),
            None
        );
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        assert!(string(&mut Bytes::from_static(&[0x02, 0xff]), "s").is_err());
    }

    #[test]
    fn negative_tags_cannot_be_written() {
        let fields = BTreeMap::from([(-1, Bytes::new())]);
        let mut v = Vec::new();
        assert!(put_tagged_fields(&mut BufSink(&mut v), &fields, "t").is_err());
    }
}
