//! Kafka's message encoding, for the coordinator records Shoal stores in Kafka's own layout
//! (share-group records in `__consumer_offsets`, share-state records in `__share_group_state`):
//! big-endian integers, `i16`-length key strings, and the flexible versions' unsigned varints,
//! compact strings and arrays, and tagged-field sections. Also the `_i32` forms of Shoal's own
//! record encoding (classic-group and transaction records): strings, bytes and arrays with an
//! `i32` length, -1 for null.
//!
//! The reader never panics and never trusts a length beyond what the input can hold; its
//! errors are [`WireError`]s that each record module maps into its own decode error. The
//! record modules add their structures on top (`impl` blocks of local extension traits).

/// Why bytes could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    Truncated {
        at: usize,
        needed: usize,
        remaining: usize,
    },
    InvalidLength {
        at: usize,
        length: i64,
    },
    /// More than 5 bytes, or a value beyond 32 bits.
    InvalidVarint {
        at: usize,
    },
    InvalidUtf8 {
        at: usize,
    },
    UnexpectedNull {
        at: usize,
    },
}

/// Bytes left after a record's last field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trailing {
    pub(crate) count: usize,
}

/// `impl From<WireError>` and `From<Trailing>` for a record module's decode error with the
/// variants `Truncated { at, needed, remaining }`, `InvalidLength { at, length }`,
/// `InvalidUtf8 { at }`, `UnexpectedNull { at }` and `TrailingBytes { count }`; `|at| expr`
/// says what an invalid varint (at `at`) becomes.
macro_rules! decode_error_from_wire {
    ($error:ident, |$at:ident| $varint:expr) => {
        impl From<$crate::kafka_wire::WireError> for $error {
            fn from(e: $crate::kafka_wire::WireError) -> Self {
                use $crate::kafka_wire::WireError;
                match e {
                    WireError::Truncated {
                        at,
                        needed,
                        remaining,
                    } => $error::Truncated {
                        at,
                        needed,
                        remaining,
                    },
                    WireError::InvalidLength { at, length } => $error::InvalidLength { at, length },
                    WireError::InvalidVarint { at: $at } => $varint,
                    WireError::InvalidUtf8 { at } => $error::InvalidUtf8 { at },
                    WireError::UnexpectedNull { at } => $error::UnexpectedNull { at },
                }
            }
        }

        impl From<$crate::kafka_wire::Trailing> for $error {
            fn from(t: $crate::kafka_wire::Trailing) -> Self {
                $error::TrailingBytes { count: t.count }
            }
        }
    };
}
pub(crate) use decode_error_from_wire;

/// A bounds-checked reader over one key or value.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Fails if bytes are left after the last field.
    pub(crate) fn trailing(&self) -> Result<(), Trailing> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(Trailing { count }),
        }
    }

    /// Bytes read so far (where the next field starts).
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let truncated = WireError::Truncated {
            at: self.pos,
            needed: n,
            remaining: self.remaining(),
        };
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let out = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn i8(&mut self) -> Result<i8, WireError> {
        Ok(i8::from_be_bytes(self.array()?))
    }
    pub(crate) fn i16(&mut self) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    pub(crate) fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    pub(crate) fn uuid(&mut self) -> Result<[u8; 16], WireError> {
        self.array()
    }

    /// Kafka's `readUnsignedVarint`: at most 5 bytes, a value within 32 bits.
    pub(crate) fn unsigned_varint(&mut self) -> Result<u32, WireError> {
        let at = self.pos;
        let mut value: u32 = 0;
        for i in 0..5u32 {
            let [b] = self.array::<1>()?;
            let bits = u32::from(b & 0x7f);
            if i == 4 && bits > 0x0f {
                return Err(WireError::InvalidVarint { at });
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError::InvalidVarint { at })
    }

    fn utf8(bytes: &[u8], at: usize) -> Result<String, WireError> {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| WireError::InvalidUtf8 { at })
    }

    /// A non-flexible, non-nullable string (`i16` length), as in record keys.
    pub(crate) fn key_string(&mut self) -> Result<String, WireError> {
        let at = self.pos;
        let len = self.i16()?;
        if len == -1 {
            return Err(WireError::UnexpectedNull { at });
        }
        let n = usize::try_from(len).map_err(|_| WireError::InvalidLength {
            at,
            length: i64::from(len),
        })?;
        let bytes = self.take(n)?;
        Self::utf8(bytes, at)
    }

    /// A compact length: `None` for null (0), else the stored value minus one.
    pub(crate) fn compact_len(&mut self) -> Result<Option<usize>, WireError> {
        let stored = self.unsigned_varint()?;
        // u32 fits usize on every platform Shoal builds for; saturate rather than panic.
        Ok(stored
            .checked_sub(1)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
    }

    pub(crate) fn compact_nullable_string(&mut self) -> Result<Option<String>, WireError> {
        let at = self.pos;
        match self.compact_len()? {
            None => Ok(None),
            Some(n) => {
                let bytes = self.take(n)?;
                Self::utf8(bytes, at).map(Some)
            }
        }
    }

    pub(crate) fn compact_string(&mut self) -> Result<String, WireError> {
        let at = self.pos;
        self.compact_nullable_string()?
            .ok_or(WireError::UnexpectedNull { at })
    }

    /// A non-null compact array count whose elements take at least `min_element_bytes` each
    /// (so a count the input cannot hold is refused before anything is allocated).
    pub(crate) fn compact_count(&mut self, min_element_bytes: usize) -> Result<usize, WireError> {
        let at = self.pos;
        let n = self
            .compact_len()?
            .ok_or(WireError::UnexpectedNull { at })?;
        if n.saturating_mul(min_element_bytes) > self.remaining() {
            return Err(WireError::InvalidLength {
                at,
                length: i64::try_from(n).unwrap_or(i64::MAX),
            });
        }
        Ok(n)
    }

    /// An `i32` length: `None` for -1 (null); other negative values are invalid.
    pub(crate) fn len_i32(&mut self) -> Result<Option<usize>, WireError> {
        let at = self.pos;
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        usize::try_from(len)
            .map(Some)
            .map_err(|_| WireError::InvalidLength {
                at,
                length: i64::from(len),
            })
    }

    /// A non-null `i32`-counted array whose elements take at least `min_element_bytes` each
    /// (so a count the input cannot hold is refused before anything is allocated).
    pub(crate) fn count_i32(&mut self, min_element_bytes: usize) -> Result<usize, WireError> {
        let at = self.pos;
        let n = self.len_i32()?.ok_or(WireError::UnexpectedNull { at })?;
        if n.saturating_mul(min_element_bytes) > self.remaining() {
            return Err(WireError::InvalidLength {
                at,
                length: i64::try_from(n).unwrap_or(i64::MAX),
            });
        }
        Ok(n)
    }

    pub(crate) fn nullable_bytes_i32(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        match self.len_i32()? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }

    pub(crate) fn bytes_i32(&mut self) -> Result<&'a [u8], WireError> {
        let at = self.pos;
        self.nullable_bytes_i32()?
            .ok_or(WireError::UnexpectedNull { at })
    }

    pub(crate) fn nullable_string_i32(&mut self) -> Result<Option<String>, WireError> {
        let at = self.pos;
        match self.nullable_bytes_i32()? {
            None => Ok(None),
            Some(b) => Self::utf8(b, at).map(Some),
        }
    }

    pub(crate) fn string_i32(&mut self) -> Result<String, WireError> {
        let at = self.pos;
        self.nullable_string_i32()?
            .ok_or(WireError::UnexpectedNull { at })
    }

    /// Reads a tagged-field section, handing each field's tag and bytes to `known` (which may
    /// ignore unknown tags, as Kafka does).
    pub(crate) fn tagged_fields<E: From<WireError>>(
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
            return Err(WireError::InvalidLength {
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
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.0
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub(crate) fn i8(&mut self, v: i8) {
        self.bytes(&v.to_be_bytes());
    }
    pub(crate) fn i16(&mut self, v: i16) {
        self.bytes(&v.to_be_bytes());
    }
    pub(crate) fn i32(&mut self, v: i32) {
        self.bytes(&v.to_be_bytes());
    }
    pub(crate) fn i64(&mut self, v: i64) {
        self.bytes(&v.to_be_bytes());
    }
    pub(crate) fn uuid(&mut self, v: &[u8; 16]) {
        self.bytes(v);
    }

    pub(crate) fn unsigned_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            // The low 7 bits with the continuation bit: the cast keeps exactly those bits.
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    /// A non-flexible string (`i16` length); `Err(length)` if it does not fit.
    pub(crate) fn key_string(&mut self, s: &str) -> Result<(), usize> {
        let len = i16::try_from(s.len()).map_err(|_| s.len())?;
        self.i16(len);
        self.bytes(s.as_bytes());
        Ok(())
    }

    /// Compact length: n + 1 (0 is null).
    pub(crate) fn compact_len(&mut self, n: usize) {
        self.unsigned_varint(u64::try_from(n).unwrap_or(u64::MAX).saturating_add(1));
    }

    pub(crate) fn compact_string(&mut self, s: &str) {
        self.compact_len(s.len());
        self.bytes(s.as_bytes());
    }

    pub(crate) fn compact_nullable_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.compact_string(s),
            None => self.unsigned_varint(0),
        }
    }

    pub(crate) fn empty_tagged_fields(&mut self) {
        self.unsigned_varint(0);
    }

    /// An `i32` length.
    ///
    /// # Panics
    /// At 2 GiB or more, which request size limits rule out.
    pub(crate) fn len_i32(&mut self, len: usize) {
        let len = i32::try_from(len).expect("field shorter than 2 GiB (request size limits)");
        self.i32(len);
    }

    /// Bytes with an `i32` length.
    pub(crate) fn bytes_i32(&mut self, b: &[u8]) {
        self.len_i32(b.len());
        self.bytes(b);
    }

    pub(crate) fn string_i32(&mut self, s: &str) {
        self.bytes_i32(s.as_bytes());
    }

    pub(crate) fn nullable_string_i32(&mut self, s: Option<&str>) {
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
            Err(WireError::InvalidVarint { at: 0 })
        );
        assert_eq!(
            Reader::new(&[0x80; 6]).unsigned_varint(),
            Err(WireError::InvalidVarint { at: 0 })
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
            Err(WireError::InvalidLength { length: 1000, .. })
        ));
        assert_eq!(
            Reader::new(&[0xff, 0xff]).key_string(),
            Err(WireError::UnexpectedNull { at: 0 })
        );
        assert_eq!(
            Reader::new(&[0x00, 0x05, b'a']).key_string(),
            Err(WireError::Truncated {
                at: 2,
                needed: 5,
                remaining: 1
            })
        );
    }
}
