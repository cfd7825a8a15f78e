//! A small binary encoding for Shoal's own metadata records.
//!
//! Big-endian integers, strings and byte strings with an `i32` length (-1 = null). The reader
//! never panics and never allocates more than the bytes it has.

use uuid::Uuid;

#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn i8(&mut self, v: i8) -> &mut Self {
        self.buf.push(v as u8);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn uuid(&mut self, v: Uuid) -> &mut Self {
        self.buf.extend_from_slice(v.as_bytes());
        self
    }
    pub fn bytes(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            None => self.i32(-1),
            Some(b) => {
                self.i32(i32::try_from(b.len()).expect("metadata field under 2 GiB"));
                self.buf.extend_from_slice(b);
                self
            }
        }
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(Some(v.as_bytes()))
    }
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Decoding failed: the bytes are not a record this version wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed metadata record at byte {at}: {what}")]
pub struct DecodeError {
    pub at: usize,
    pub what: &'static str,
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError { at: self.pos, what })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(self.take(1, "i8")?[0] as i8)
    }
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        let b = self.take(2, "i16")?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.take(4, "i32")?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8, "i64")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }
    pub fn uuid(&mut self) -> Result<Uuid, DecodeError> {
        let b = self.take(16, "uuid")?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(Uuid::from_bytes(a))
    }
    pub fn bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(len as usize, "bytes")?))
    }
    pub fn string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        let b = self.bytes()?.ok_or(DecodeError {
            at,
            what: "null string",
        })?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError { at, what: "utf-8" })
    }
    /// A count of following items, checked against the bytes left (each item takes at least
    /// `min_item_bytes`).
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| DecodeError {
            at,
            what: "negative count",
        })?;
        if n.saturating_mul(min_item_bytes.max(1)) > self.buf.len() - self.pos {
            return Err(DecodeError {
                at,
                what: "count beyond the record",
            });
        }
        Ok(n)
    }
    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let id = Uuid::from_u128(7);
        let bytes = Writer::new()
            .i8(-1)
            .i16(2)
            .i32(3)
            .i64(-4)
            .uuid(id)
            .str("x")
            .bytes(None)
            .finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.i8().unwrap(), -1);
        assert_eq!(r.i16().unwrap(), 2);
        assert_eq!(r.i32().unwrap(), 3);
        assert_eq!(r.i64().unwrap(), -4);
        assert_eq!(r.uuid().unwrap(), id);
        assert_eq!(r.string().unwrap(), "x");
        assert_eq!(r.bytes().unwrap(), None);
        assert!(r.is_empty());
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let all = (|| -> Result<(), DecodeError> {
                r.i8()?;
                r.i16()?;
                r.i32()?;
                r.i64()?;
                r.uuid()?;
                r.string()?;
                r.bytes()?;
                Ok(())
            })();
            assert!(all.is_err());
        }
    }
}
