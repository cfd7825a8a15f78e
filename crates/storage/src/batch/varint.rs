//! Zig-zag varints as used inside v2 records, with a bounds-checked cursor.
//!
//! Owns: [`Cursor`], which never reads past its slice and reports malformed input as `None`.

/// Longest encoding of a 32-bit varint.
const VARINT_BYTES_MAX: usize = 5;
/// Longest encoding of a 64-bit varlong.
const VARLONG_BYTES_MAX: usize = 10;

/// A read cursor over untrusted bytes.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    fn raw_varint(&mut self, bytes_max: usize) -> Option<u64> {
        let mut value: u64 = 0;
        for i in 0..bytes_max {
            let b = *self.bytes.get(self.pos)?;
            self.pos += 1;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    /// A zig-zag varint (i32).
    pub(crate) fn varint(&mut self) -> Option<i32> {
        let raw = self.raw_varint(VARINT_BYTES_MAX)?;
        let raw = u32::try_from(raw).ok()?;
        Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }
    /// A zig-zag varlong (i64).
    pub(crate) fn varlong(&mut self) -> Option<i64> {
        let raw = self.raw_varint(VARLONG_BYTES_MAX)?;
        Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }
    pub(crate) fn i8(&mut self) -> Option<i8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b as i8)
    }
    /// `len` raw bytes; returns the range within the cursor's slice.
    pub(crate) fn take(&mut self, len: usize) -> Option<std::ops::Range<usize>> {
        let end = self.pos.checked_add(len)?;
        if end > self.bytes.len() {
            return None;
        }
        let range = self.pos..end;
        self.pos = end;
        Some(range)
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, value: i32) {
    put_raw(out, ((value << 1) ^ (value >> 31)) as u32 as u64);
}

pub(crate) fn put_varlong(out: &mut Vec<u8>, value: i64) {
    put_raw(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_raw(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trip(v: i32) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut c = Cursor::new(&out);
            prop_assert_eq!(c.varint(), Some(v));
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn varlong_round_trip(v: i64) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            let mut c = Cursor::new(&out);
            prop_assert_eq!(c.varlong(), Some(v));
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn varint_never_panics(bytes: Vec<u8>) {
            let mut c = Cursor::new(&bytes);
            let _ = c.varint();
            let _ = c.varlong();
            let _ = c.take(usize::MAX);
        }
    }

    #[test]
    fn overlong_varint_rejected() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Cursor::new(&bytes).varint(), None);
        // 5 bytes whose value overflows u32.
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(Cursor::new(&bytes).varint(), None);
    }
}
