//! Kafka's variable-length integers: unsigned varints (the flexible versions' lengths, counts
//! and tags) and zig-zag varints and varlongs (the fields of a v2 record).
//!
//! Owns: the one encoder ([`unsigned`], [`varint`], [`varlong`], returning the bytes in an
//! [`Encoded`] for any buffer to copy) and the one decoder ([`read_unsigned`], reading from any
//! byte source one byte at a time, so that slices, `Bytes` and `kafka-protocol`'s buffers share
//! it). Invariant: decoding never reads more than `max_bytes` bytes and never panics.

/// Longest encoding of a 32-bit value (a varint or an unsigned varint).
pub const VARINT_BYTES_MAX: usize = 5;
/// Longest encoding of a 64-bit value (a varlong).
pub const VARLONG_BYTES_MAX: usize = 10;

/// The bytes of one encoded varint (at most [`VARLONG_BYTES_MAX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoded {
    bytes: [u8; VARLONG_BYTES_MAX],
    len: u8,
}

impl Encoded {
    /// The encoded bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::ops::Deref for Encoded {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Encoded {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// `v` as an unsigned varint: seven bits a byte, least significant first, the high bit set on
/// every byte but the last.
pub fn unsigned(mut v: u64) -> Encoded {
    let mut out = Encoded {
        bytes: [0; VARLONG_BYTES_MAX],
        len: 0,
    };
    let mut n = 0;
    while v >= 0x80 {
        // The low 7 bits with the continuation bit: the cast keeps exactly those bits.
        out.bytes[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    out.bytes[n] = v as u8;
    out.len = n as u8 + 1;
    out
}

/// Zig-zag mapping of an `i32` (0, -1, 1, -2 ... become 0, 1, 2, 3 ...).
pub fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// Zig-zag mapping of an `i64`.
pub fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag32`].
pub fn unzigzag32(raw: u32) -> i32 {
    ((raw >> 1) as i32) ^ -((raw & 1) as i32)
}

/// The inverse of [`zigzag64`].
pub fn unzigzag64(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

/// Kafka's varint (a zig-zag `i32`). For values of `i32`, the same bytes as [`varlong`].
pub fn varint(v: i32) -> Encoded {
    unsigned(u64::from(zigzag32(v)))
}

/// Kafka's varlong (a zig-zag `i64`).
pub fn varlong(v: i64) -> Encoded {
    unsigned(zigzag64(v))
}

/// Reads an unsigned varint of at most `max_bytes` bytes, taking each byte from `next` (whose
/// error, e.g. "input ends here", is passed on). `Ok(None)` if the varint runs longer than
/// `max_bytes`. Bits beyond 64 are dropped; callers check the range they accept.
///
/// # Errors
/// The first error of `next`.
pub fn read_unsigned<E>(
    max_bytes: usize,
    mut next: impl FnMut() -> Result<u8, E>,
) -> Result<Option<u64>, E> {
    let mut value: u64 = 0;
    for i in 0..max_bytes.min(VARLONG_BYTES_MAX) {
        let b = next()?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// Reads a varint (zig-zag `i32`, at most 5 bytes, within 32 bits) from the front of `bytes`;
/// returns it and the bytes it took, `None` if malformed or cut short.
pub fn decode_varint(bytes: &[u8]) -> Option<(i32, usize)> {
    let mut pos = 0;
    let raw = read_unsigned(VARINT_BYTES_MAX, || {
        let b = bytes.get(pos).copied().ok_or(())?;
        pos += 1;
        Ok::<u8, ()>(b)
    })
    .ok()??;
    let raw = u32::try_from(raw).ok()?;
    Some((unzigzag32(raw), pos))
}

/// Reads a varlong (zig-zag `i64`, at most 10 bytes) from the front of `bytes`; returns it and
/// the bytes it took, `None` if malformed or cut short.
pub fn decode_varlong(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut pos = 0;
    let raw = read_unsigned(VARLONG_BYTES_MAX, || {
        let b = bytes.get(pos).copied().ok_or(())?;
        pos += 1;
        Ok::<u8, ()>(b)
    })
    .ok()??;
    Some((unzigzag64(raw), pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trip(v: i32) {
            let e = varint(v);
            prop_assert_eq!(decode_varint(&e), Some((v, e.len())));
            // A varint is the varlong of the same value.
            prop_assert_eq!(e, varlong(i64::from(v)));
        }

        #[test]
        fn varlong_round_trip(v: i64) {
            let e = varlong(v);
            prop_assert_eq!(decode_varlong(&e), Some((v, e.len())));
        }

        #[test]
        fn decoding_never_panics(bytes: Vec<u8>) {
            let _ = decode_varint(&bytes);
            let _ = decode_varlong(&bytes);
        }
    }

    #[test]
    fn overlong_varint_rejected() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(decode_varint(&bytes), None);
        // 5 bytes whose value overflows u32.
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(decode_varint(&bytes), None);
        assert_eq!(decode_varlong(&[0x80; 11]), None);
        assert_eq!(decode_varint(&[0x80]), None, "cut short");
    }

    #[test]
    fn unsigned_sizes() {
        for (v, len) in [(0u64, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3)] {
            assert_eq!(unsigned(v).len(), len, "{v}");
        }
        assert_eq!(unsigned(u64::MAX).len(), VARLONG_BYTES_MAX);
        assert_eq!(unsigned(u64::from(u32::MAX)).len(), VARINT_BYTES_MAX);
    }
}
