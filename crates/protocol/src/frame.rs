//! Length-prefixed frames: a big-endian `i32` size followed by that many bytes.
//!
//! The decoder never buffers more than `frame_bytes_max` (Kafka's `socket.request.max.bytes`) for
//! one frame: a larger or negative size is an error, and the connection that sent it is closed,
//! as Kafka's `InvalidReceiveException` does.

use bytes::{Buf, Bytes, BytesMut};

/// Kafka's default `socket.request.max.bytes` (100 MiB).
pub const FRAME_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

/// Size of the length prefix.
pub const FRAME_PREFIX_BYTES: usize = 4;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: i64, max: usize },
    #[error("frame size {size} is negative")]
    Negative { size: i32 },
}

/// Splits a byte stream into frames.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    frame_bytes_max: usize,
}

impl FrameDecoder {
    pub fn new(frame_bytes_max: usize) -> Self {
        assert!(frame_bytes_max > 0);
        Self { frame_bytes_max }
    }

    /// Whether [`decode`](Self::decode) would return something other than `Ok(None)` for `buf`:
    /// a complete frame, or a size prefix it refuses.
    pub fn has_frame(&self, buf: &[u8]) -> bool {
        let Some(prefix) = buf.first_chunk::<FRAME_PREFIX_BYTES>() else {
            return false;
        };
        let size = i32::from_be_bytes(*prefix);
        size < 0
            || size as usize > self.frame_bytes_max
            || buf.len() >= FRAME_PREFIX_BYTES + size as usize
    }

    /// Takes one whole frame (without its prefix) off the front of `buf`, or returns `Ok(None)`
    /// when more bytes are needed. On `Ok(None)` `buf` is reserved for the rest of the frame.
    ///
    /// # Errors
    /// [`FrameError`] when the announced size is negative or above the limit; the caller must
    /// close the connection, since the stream can no longer be framed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if buf.len() < FRAME_PREFIX_BYTES {
            return Ok(None);
        }
        let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if size < 0 {
            return Err(FrameError::Negative { size });
        }
        let size = size as usize;
        if size > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                size: size as i64,
                max: self.frame_bytes_max,
            });
        }
        if buf.len() < FRAME_PREFIX_BYTES + size {
            buf.reserve(FRAME_PREFIX_BYTES + size - buf.len());
            return Ok(None);
        }
        buf.advance(FRAME_PREFIX_BYTES);
        Ok(Some(buf.split_to(size).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn has_frame_says_whether_decode_has_something() {
        let decoder = FrameDecoder::new(16);
        let mut buf = BytesMut::new();
        assert!(!decoder.has_frame(&buf));
        buf.put_i32(3);
        buf.put_slice(b"ab");
        assert!(!decoder.has_frame(&buf));
        buf.put_u8(b'c');
        assert!(decoder.has_frame(&buf));
        assert!(decoder.has_frame(&(-1i32).to_be_bytes()));
        assert!(decoder.has_frame(&17i32.to_be_bytes()));
    }

    #[test]
    fn splits_frames_and_waits_for_more() {
        let decoder = FrameDecoder::new(16);
        let mut buf = BytesMut::new();
        buf.put_i32(3);
        buf.put_slice(b"ab");
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        buf.put_slice(b"c");
        buf.put_i32(0);
        assert_eq!(decoder.decode(&mut buf).unwrap().unwrap(), &b"abc"[..]);
        assert_eq!(decoder.decode(&mut buf).unwrap().unwrap(), &b""[..]);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
    }

    #[test]
    fn refuses_oversized_and_negative_frames() {
        let decoder = FrameDecoder::new(16);
        let mut buf = BytesMut::new();
        buf.put_i32(17);
        assert_eq!(
            decoder.decode(&mut buf),
            Err(FrameError::TooLarge { size: 17, max: 16 })
        );
        let mut buf = BytesMut::new();
        buf.put_i32(-5);
        assert_eq!(
            decoder.decode(&mut buf),
            Err(FrameError::Negative { size: -5 })
        );
    }
}
