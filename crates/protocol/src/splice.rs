//! Responses whose record bytes travel apart from the rest: encoded around "holes" that the
//! caller fills from elsewhere (the broker, from segment files with `sendfile`).
//!
//! A handler puts a [`placeholder`] of the records' length where the records go. Encoding with
//! [`encode_response_spliced`] writes every other byte into the buffer and, for each
//! placeholder met, records a [`Hole`] (where in the buffer its bytes belong and how many)
//! instead of copying it. The frame's size prefix counts the holes. Writing the buffer with each
//! hole's bytes inserted at its place gives exactly the frame [`crate::encode_response`] would.
//!
//! Placeholders are recognised by address, not content: they are slices of one private static
//! region that no other field can point into, and they are met in the order the encoder visits
//! the fields (topics, then partitions, as in the response).

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

use crate::response::{encode_frame, Response};

/// Longest placeholder: a longer record set must be copied into the response (a fetch this
/// large per partition is far past Kafka's defaults).
pub const PLACEHOLDER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Placeholders point into this; it is never read (encoders only take its address and length),
/// so its pages are never touched.
static HOLES: [u8; PLACEHOLDER_BYTES_MAX] = [0; PLACEHOLDER_BYTES_MAX];

/// Stand-in records of `len` bytes for a field whose bytes the caller will supply; `None` when
/// `len` exceeds [`PLACEHOLDER_BYTES_MAX`].
pub fn placeholder(len: usize) -> Option<Bytes> {
    (len <= PLACEHOLDER_BYTES_MAX).then(|| Bytes::from_static(&HOLES[..len]))
}

fn is_placeholder(bytes: &[u8]) -> bool {
    let base = HOLES.as_ptr() as usize;
    let at = bytes.as_ptr() as usize;
    !bytes.is_empty() && at >= base && at < base + PLACEHOLDER_BYTES_MAX
}

/// `len` bytes of a placeholder that belong at offset `at` of the encoded buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hole {
    pub at: usize,
    pub len: usize,
}

/// Appends one response frame like [`crate::encode_response`], except that each non-empty
/// [`placeholder`] becomes a [`Hole`] pushed to `holes` (in order) instead of bytes.
///
/// # Errors
/// As [`crate::encode_response`]; `buf` and `holes` are then left as they were.
pub fn encode_response_spliced(
    buf: &mut BytesMut,
    correlation_id: i32,
    version: i16,
    response: &Response,
    holes: &mut Vec<Hole>,
) -> anyhow::Result<()> {
    let holes_before = holes.len();
    let mut out = Spliced {
        buf,
        holes,
        skipped: 0,
    };
    let result = encode_frame(&mut out, correlation_id, version, response, |out| {
        out.skipped
    });
    if result.is_err() {
        out.holes.truncate(holes_before);
    }
    result
}

/// A buffer that turns placeholders into holes.
struct Spliced<'a> {
    buf: &'a mut BytesMut,
    holes: &'a mut Vec<Hole>,
    /// Bytes of the holes so far (what the frame holds beyond the buffer).
    skipped: usize,
}

// SAFETY: every method delegates to `BytesMut`'s own implementation, except `put_slice`,
// which either delegates or writes nothing.
unsafe impl BufMut for Spliced<'_> {
    fn remaining_mut(&self) -> usize {
        self.buf.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's guarantee for `cnt` is passed on unchanged.
        unsafe { self.buf.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.buf.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if is_placeholder(src) {
            self.holes.push(Hole {
                at: self.buf.len(),
                len: src.len(),
            });
            self.skipped += src.len();
        } else {
            self.buf.put_slice(src);
        }
    }
}

/// Offsets are those of the buffer: holes do not count (the messages never seek across one).
impl ByteBufMut for Spliced<'_> {
    fn offset(&self) -> usize {
        self.buf.len()
    }

    fn seek(&mut self, offset: usize) {
        self.buf.seek(offset);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        self.buf.range(r)
    }
}
