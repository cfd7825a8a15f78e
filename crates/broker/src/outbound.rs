//! Response frames on their way out: encoded bytes, with record bytes that go from their segment
//! files to the socket without passing through user space.
//!
//! A Fetch answer is mostly record bytes already sitting in the page cache. Reading them into a
//! buffer only to write them out again costs two copies per byte and, for large fetches, the
//! memory to hold them; Kafka hands them to `sendfile(2)` instead, and so does this module. The
//! handler leaves a placeholder where each partition's records go
//! ([`shoal_protocol::splice`]), encoding records a hole there, and [`write`] sends the frame
//! in order: encoded bytes up to a hole, the hole's file region with `sendfile`, and so on.
//! Under TLS the bytes must be encrypted on their way out, so there the frame is copied whole
//! into the TLS stream instead ([`crate::transport`]).
//!
//! A region's bytes were written before the region was taken and segments are append-only, so
//! what `sendfile` sends is what the handler located, even if the segment is deleted meanwhile
//! (the region holds the file open). A file found shorter than its region (it cannot be, short
//! of an outside hand truncating it) fails the write, which closes the connection: the frame's
//! size is already on the wire and nothing else would keep the stream in step.

use std::io;
use std::os::fd::AsRawFd;

use bytes::BytesMut;
use shoal_protocol::splice::{encode_response_spliced, Hole};
use shoal_protocol::Response;
use shoal_storage::FileRegion;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::transport::Stream;

/// One encoded response frame: `buf`, with `regions[i].1` sent at buffer offset `regions[i].0`.
#[derive(Debug, Default)]
pub struct Frame {
    pub buf: BytesMut,
    pub splices: Vec<(usize, FileRegion)>,
}

impl Frame {
    pub fn new(buf: BytesMut) -> Frame {
        Frame {
            buf,
            splices: Vec::new(),
        }
    }

    /// Bytes the frame puts on the wire.
    pub fn len(&self) -> usize {
        self.buf.len() + self.splices.iter().map(|(_, r)| r.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one buffer (tests, and writers that cannot splice).
    ///
    /// # Errors
    /// Reading a region failed, or the splices are not in order within the buffer.
    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len());
        let mut from = 0;
        for (at, region) in &self.splices {
            out.extend_from_slice(self.piece(from, *at)?);
            out.extend_from_slice(&region.read()?);
            from = *at;
        }
        out.extend_from_slice(self.piece(from, self.buf.len())?);
        Ok(out)
    }

    /// `buf[from..to]`, or an error if the splices put that outside the buffer (a frame not
    /// built by [`encode`]).
    fn piece(&self, from: usize, to: usize) -> io::Result<&[u8]> {
        self.buf.get(from..to).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame splice offsets out of order or past the buffer",
            )
        })
    }
}

/// Appends one response frame to `frame`, whose placeholders (in encoding order) stand for
/// `regions` (in the same order, none empty).
///
/// # Errors
/// The response cannot be encoded at this version, or its placeholders do not match `regions`
/// (a handler bug); `frame` is then left as it was.
pub fn encode(
    frame: &mut Frame,
    correlation_id: i32,
    version: i16,
    response: &Response,
    regions: Vec<FileRegion>,
) -> anyhow::Result<()> {
    let start = frame.buf.len();
    let mut holes: Vec<Hole> = Vec::with_capacity(regions.len());
    encode_response_spliced(
        &mut frame.buf,
        correlation_id,
        version,
        response,
        &mut holes,
    )?;
    let matches =
        holes.len() == regions.len() && holes.iter().zip(&regions).all(|(h, r)| h.len == r.len());
    if !matches {
        frame.buf.truncate(start);
        anyhow::bail!(
            "{} placeholders encoded for {} record regions",
            holes.len(),
            regions.len()
        );
    }
    frame
        .splices
        .extend(holes.iter().map(|h| h.at).zip(regions));
    Ok(())
}

/// Writes `frame` to `stream`: on plain TCP with `sendfile` for record bytes
/// ([`write_tcp`]); under TLS the frame is copied into the encrypted stream.
///
/// # Errors
/// The socket failed, a region's file ended early, or the splices do not fit the buffer
/// (the connection must then close).
pub async fn write(stream: &mut Stream, frame: &Frame) -> io::Result<()> {
    match stream {
        Stream::Plain(tcp) => write_tcp(tcp, frame).await,
        Stream::Tls(tls) => {
            let bytes = if frame.splices.is_empty() {
                None
            } else {
                Some(frame.to_vec()?)
            };
            tls.write_all(bytes.as_deref().unwrap_or(&frame.buf))
                .await?;
            tls.flush().await
        }
    }
}

/// Writes `frame` to a plain TCP socket, record bytes straight from their files.
///
/// # Errors
/// As [`write`].
pub async fn write_tcp(stream: &TcpStream, frame: &Frame) -> io::Result<()> {
    let mut from = 0;
    for (at, region) in &frame.splices {
        // More follows: let the kernel fill whole segments rather than push a short one.
        send_all(stream, frame.piece(from, *at)?, true).await?;
        send_file(stream, region).await?;
        from = *at;
    }
    send_all(stream, frame.piece(from, frame.buf.len())?, false).await
}

async fn send_all(stream: &TcpStream, mut bytes: &[u8], more: bool) -> io::Result<()> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    while !bytes.is_empty() {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: `bytes` is a live slice of the given length; the fd is the stream's own.
            let n = unsafe {
                libc::send(
                    stream.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    flags,
                )
            };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match sent {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn send_file(stream: &TcpStream, region: &FileRegion) -> io::Result<()> {
    let file = region.file().as_raw_fd();
    let mut offset = libc::off_t::try_from(region.position())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region beyond off_t"))?;
    let mut left = region.len();
    while left > 0 {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: both fds are open for the call (the region holds its file); `offset` is
            // a live local the kernel advances.
            let n = unsafe { libc::sendfile(stream.as_raw_fd(), file, &mut offset, left) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match sent {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment file shorter than the region being sent",
                ))
            }
            Ok(n) => left -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
