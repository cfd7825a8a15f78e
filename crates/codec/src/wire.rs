//! Kafka's message encoding, for the coordinator records Shoal stores in Kafka's own layout
//! (share-group records in `__consumer_offsets`, share-state records in `__share_group_state`):
//! big-endian integers, `i16`-length key strings, and the flexible versions' unsigned varints,
//! compact strings and arrays, and tagged-field sections. Also the `_i32` forms of Shoal's own
//! record encoding (classic-group and transaction records): strings, bytes and arrays with an
//! `i32` length, -1 for null.
//!
//! The reader never panics and never trusts a length beyond what the input can hold; its
//! errors are [`DecodeError`]s. The record modules (in `shoal-core`) add their structures on
//! top (`impl` blocks of local extension traits).

use crate::error::DecodeError;
use crate::varint;

/// A bounds-checked reader over one key or value.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Fails if bytes are left after the last field.
    pub fn trailing(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { count }),
        }
    }

    /// Bytes read so far (where the next field starts).
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let truncated = DecodeError::Truncated {
            at: self.pos,
            needed: n,
            remaining: self.remaining(),
        };
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let out = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.array()?))
    }
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    pub fn uuid(&mut self) -> Result<[u8; 16], DecodeError> {
        self.array()
    }

    /// Kafka's `readUnsignedVarint`: at most 5 bytes, a value within 32 bits.
    pub fn unsigned_varint(&mut self) -> Result<u32, DecodeError> {
        let at = self.pos;
        let raw =
            varint::read_unsigned(varint::VARINT_BYTES_MAX, || self.array::<1>().map(|[b]| b))?;
        raw.and_then(|v| u32::try_from(v).ok())
            .ok_or(DecodeError::InvalidVarint { at })
    }

    /// A zig-zag varint (an `i32`, as in v2 records).
    pub fn varint(&mut self) -> Result<i32, DecodeError> {
        let at = self.pos;
        let raw =
            varint::read_unsigned(varint::VARINT_BYTES_MAX, || self.array::<1>().map(|[b]| b))?;
        raw.and_then(|v| u32::try_from(v).ok())
            .map(varint::unzigzag32)
            .ok_or(DecodeError::InvalidVarint { at })
    }

    /// A zig-zag varlong (an `i64`, as in v2 records).
    pub fn varlong(&mut self) -> Result<i64, DecodeError> {
        let at = self.pos;
        let raw =
            varint::read_unsigned(varint::VARLONG_BYTES_MAX, || self.array::<1>().map(|[b]| b))?;
        raw.map(varint::unzigzag64)
            .ok_or(DecodeError::InvalidVarint { at })
    }

    fn utf8(bytes: &[u8], at: usize) -> Result<String, DecodeError> {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| DecodeError::InvalidUtf8 { at })
    }

    /// A non-flexible, non-nullable string (`i16` length), as in record keys.
    pub fn key_string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        let len = self.i16()?;
        if len == -1 {
            return Err(DecodeError::UnexpectedNull { at });
        }
        let n = usize::try_from(len).map_err(|_| DecodeError::InvalidLength {
            at,
            length: i64::from(len),
        })?;
        let bytes = self.take(n)?;
        Self::utf8(bytes, at)
    }

    /// A compact length: `None` for null (0), else the stored value minus one.
    pub fn compact_len(&mut self) -> Result<Option<usize>, DecodeError> {
        let stored = self.unsigned_varint()?;
        // u32 fits usize on every platform Shoal builds for; saturate rather than panic.
        Ok(stored
            .checked_sub(1)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
    }

    pub fn compact_nullable_string(&mut self) -> Result<Option<String>, DecodeError> {
        let at = self.pos;
        match self.compact_len()? {
            None => Ok(None),
            Some(n) => {
                let bytes = self.take(n)?;
                Self::utf8(bytes, at).map(Some)
            }
        }
    }

    pub fn compact_string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        self.compact_nullable_string()?
            .ok_or(DecodeError::UnexpectedNull { at })
    }

    /// A non-null compact array count whose elements take at least `min_element_bytes` each
    /// (so a count the input cannot hold is refused before anything is allocated).
    pub fn compact_count(&mut self, min_element_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self
            .compact_len()?
            .ok_or(DecodeError::UnexpectedNull { at })?;
        if n.saturating_mul(min_element_bytes) > self.remaining() {
            return Err(DecodeError::InvalidLength {
                at,
                length: i64::try_from(n).unwrap_or(i64::MAX),
            });
        }
        Ok(n)
    }

    /// An `i32` length: `None` for -1 (null); other negative values are invalid.
    pub fn len_i32(&mut self) -> Result<Option<usize>, DecodeError> {
        let at = self.pos;
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        usize::try_from(len)
            .map(Some)
            .map_err(|_| DecodeError::InvalidLength {
                at,
                length: i64::from(len),
            })
    }

    /// A non-null `i32`-counted array whose elements take at least `min_element_bytes` each
    /// (so a count the input cannot hold is refused before anything is allocated).
    pub fn count_i32(&mut self, min_element_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.len_i32()?.ok_or(DecodeError::UnexpectedNull { at })?;
        if n.saturating_mul(min_element_bytes) > self.remaining() {
            return Err(DecodeError::InvalidLength {
                at,
                length: i64::try_from(n).unwrap_or(i64::MAX),
            });
        }
        Ok(n)
    }

    pub fn nullable_bytes_i32(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        match self.len_i32()? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }

    pub fn bytes_i32(&mut self) -> Result<&'a [u8], DecodeError> {
        let at = self.pos;
        self.nullable_bytes_i32()?
            .ok_or(DecodeError::UnexpectedNull { at })
    }

    pub fn nullable_string_i32(&mut self) -> Result<Option<String>, DecodeError> {
        let at = self.pos;
        match self.nullable_bytes_i32()? {
            None => Ok(None),
            Some(b) => Self::utf8(b, at).map(Some),
        }
    }

    pub fn string_i32(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        self.nullable_string_i32()?
            .ok_or(DecodeError::UnexpectedNull { at })
    }

    /// Reads a tagged-field section, handing each field's tag and bytes to `known` (which may
    /// ignore unknown tags, as Kafka does).
    pub fn tagged_fields<E: From<DecodeError>>(
        &mut self,
        mut known: impl FnMut(u32, &'a [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let at = self.pos;
        let count = self.unsigned_varint()?;
        // A field takes at least 2 bytes (tag and size).
        if usize::try_from(count)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            > self.remaining()
        {
            return Err(DecodeError::InvalidLength {
                at,
                length: i64::from(count),
            }
            .into());
        }
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()?;
            let data = self.take(usize::try_from(size).unwrap_or(usize::MAX))?;
            known(tag, data)?;
        }
        Ok(())
    }
}

/// A growing buffer in Kafka's encoding.
#[derive(Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Nothing written yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.0
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub fn i8(&mut self, v: i8) {
        self.bytes(&v.to_be_bytes());
    }
    pub fn i16(&mut self, v: i16) {
        self.bytes(&v.to_be_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.bytes(&v.to_be_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.bytes(&v.to_be_bytes());
    }
    pub fn uuid(&mut self, v: &[u8; 16]) {
        self.bytes(v);
    }

    pub fn unsigned_varint(&mut self, v: u64) {
        self.bytes(&varint::unsigned(v));
    }

    /// A zig-zag varint.
    pub fn varint(&mut self, v: i32) {
        self.bytes(&varint::varint(v));
    }

    /// A zig-zag varlong.
    pub fn varlong(&mut self, v: i64) {
        self.bytes(&varint::varlong(v));
    }

    /// A non-flexible string (`i16` length); `Err(length)` if it does not fit.
    pub fn key_string(&mut self, s: &str) -> Result<(), usize> {
        let len = i16::try_from(s.len()).map_err(|_| s.len())?;
        self.i16(len);
        self.bytes(s.as_bytes());
        Ok(())
    }

    /// Compact length: n + 1 (0 is null).
    pub fn compact_len(&mut self, n: usize) {
        self.unsigned_varint(u64::try_from(n).unwrap_or(u64::MAX).saturating_add(1));
    }

    pub fn compact_string(&mut self, s: &str) {
        self.compact_len(s.len());
        self.bytes(s.as_bytes());
    }

    pub fn compact_nullable_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.compact_string(s),
            None => self.unsigned_varint(0),
        }
    }

    pub fn empty_tagged_fields(&mut self) {
        self.unsigned_varint(0);
    }

    /// An `i32` length.
    ///
    /// # Panics
    /// At 2 GiB or more, which request size limits rule out.
    pub fn len_i32(&mut self, len: usize) {
        let len = i32::try_from(len).expect("field shorter than 2 GiB (request size limits)");
        self.i32(len);
    }

    /// Bytes with an `i32` length.
    pub fn bytes_i32(&mut self, b: &[u8]) {
        self.len_i32(b.len());
        self.bytes(b);
    }

    pub fn string_i32(&mut self, s: &str) {
        self.bytes_i32(s.as_bytes());
    }

    pub fn nullable_string_i32(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string_i32(s),
            None => self.i32(-1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_overlong_ones_are_refused() {
        for v in [0u32, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            let mut w = Writer::default();
            w.unsigned_varint(u64::from(v));
            let bytes = w.into_inner();
            let mut r = Reader::new(&bytes);
            assert_eq!(r.unsigned_varint(), Ok(v));
            assert_eq!(r.remaining(), 0);
        }
        // 2^32 needs 5 bytes with more than 4 bits in the last: refused.
        let mut w = Writer::default();
        w.unsigned_varint(1 << 32);
        assert_eq!(
            Reader::new(&w.into_inner()).unsigned_varint(),
            Err(DecodeError::InvalidVarint { at: 0 })
        );
        assert_eq!(
            Reader::new(&[0x80; 6]).unsigned_varint(),
            Err(DecodeError::InvalidVarint { at: 0 })
        );
    }

    #[test]
    fn strings_and_counts_are_checked_against_the_input() {
        let mut w = Writer::default();
        w.key_string("g").unwrap();
        w.compact_string("héllo");
        w.compact_nullable_string(None);
        w.compact_len(1000);
        let bytes = w.into_inner();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.key_string().as_deref(), Ok("g"));
        assert_eq!(r.compact_string().as_deref(), Ok("héllo"));
        assert_eq!(r.compact_nullable_string(), Ok(None));
        assert!(matches!(
            r.compact_count(1),
            Err(DecodeError::InvalidLength { length: 1000, .. })
        ));
        assert_eq!(
            Reader::new(&[0xff, 0xff]).key_string(),
            Err(DecodeError::UnexpectedNull { at: 0 })
        );
        assert_eq!(
            Reader::new(&[0x00, 0x05, b'a']).key_string(),
            Err(DecodeError::Truncated {
                at: 2,
                needed: 5,
                remaining: 1
            })
        );
    }
}
