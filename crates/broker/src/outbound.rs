//! Response frames on their way out: encoded bytes, with record bytes that go from their segment
//! files to the socket without passing through user space.
//!
//! A Fetch answer is mostly record bytes already sitting in the page cache. Reading them into a
//! buffer only to write them out again costs two copies per byte and, for large fetches, the
//! memory to hold them; Kafka hands them to `sendfile(2)` instead, and so does this module. The
//! handler leaves a placeholder where each partition's records go
//! ([`shoal_protocol::splice`]), encoding records a hole there, and [`write`] sends the frame
//! in order: encoded bytes up to a hole, the hole's file region with `sendfile`, and so on.
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
use tokio::io::Interest;
use tokio::net::TcpStream;

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
    /// Reading a region failed.
    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len());
        let mut from = 0;
        for (at, region) in &self.splices {
            out.extend_from_slice(&self.buf[from..*at]);
            out.extend_from_slice(&region.read()?);
            from = *at;
        }
        out.extend_from_slice(&self.buf[from..]);
        Ok(out)
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

/// Writes `frame` to `stream`.
///
/// # Errors
/// The socket failed, or a region's file ended early (the connection must then close).
pub async fn write(stream: &TcpStream, frame: &Frame) -> io::Result<()> {
    let mut from = 0;
    for (at, region) in &frame.splices {
        // More follows: let the kernel fill whole segments rather than push a short one.
        send_all(stream, &frame.buf[from..*at], true).await?;
        send_file(stream, region).await?;
        from = *at;
    }
    send_all(stream, &frame.buf[from..], false).await
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

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use bytes::Bytes;
    use shoal_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use shoal_protocol::messages::FetchResponse;
    use shoal_protocol::splice::placeholder;
    use shoal_protocol::{encode_response, StrBytes};
    use shoal_storage::batch::{encode_batch, BatchOptions};
    use shoal_storage::{Log, LogConfig};
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    /// A log with `batches` batches of one record (of 0 to 5 KB) each, and its directory.
    fn log_with(batches: usize) -> (tempfile::TempDir, Log) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        for b in 0..batches {
            let value = format!("batch {b} {}", "x".repeat(b % 50 * 100));
            let recs = [(Some(&b"k"[..]), Some(value.as_bytes()))];
            let mut bytes = encode_batch(&recs, BatchOptions::default());
            log.append(&mut bytes, 0).unwrap();
        }
        (dir, log)
    }

    /// A fetch response for two partitions whose records are `records` (placeholders or bytes).
    fn response(records: [Bytes; 2]) -> Response {
        let partitions = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_records(Some(r))
            })
            .collect();
        FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default()
                .with_topic(shoal_protocol::messages::TopicName(
                    StrBytes::from_static_str("t"),
                ))
                .with_partitions(partitions)])
            .into()
    }

    /// Two regions of one log (all of it, and its middle batches) and the frame they make.
    fn frame_of(log: &Log, version: i16) -> (Frame, Vec<u8>) {
        let all = log
            .read_slice(0, usize::MAX, None, false)
            .unwrap()
            .region
            .unwrap();
        let middle = log.read_slice(2, 200, None, false).unwrap().region.unwrap();
        let mut frame = Frame::default();
        let stand_ins = [
            placeholder(all.len()).unwrap(),
            placeholder(middle.len()).unwrap(),
        ];
        encode(
            &mut frame,
            7,
            version,
            &response(stand_ins),
            vec![all.clone(), middle.clone()],
        )
        .unwrap();
        let mut plain = BytesMut::new();
        let real = [all.read().unwrap(), middle.read().unwrap()];
        encode_response(&mut plain, 7, version, &response(real)).unwrap();
        (frame, plain.to_vec())
    }

    /// Sends `frame` over loopback; what the peer received, and the writer's result.
    async fn over_loopback(frame: Frame) -> (Vec<u8>, io::Result<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            write(&stream, &frame).await
        });
        let mut reader = TcpStream::connect(addr).await.unwrap();
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.unwrap();
        (got, writer.await.unwrap())
    }

    #[test]
    fn a_spliced_frame_is_the_frame_encoded_with_its_records() {
        let (_dir, log) = log_with(6);
        for version in [4, 11, 12, 16] {
            let (frame, plain) = frame_of(&log, version);
            assert_eq!(frame.splices.len(), 2);
            assert_eq!(frame.len(), plain.len());
            assert_eq!(frame.to_vec().unwrap(), plain, "version {version}");
        }
    }

    #[test]
    fn placeholders_that_do_not_match_the_regions_are_refused() {
        let (_dir, log) = log_with(3);
        let all = log
            .read_slice(0, usize::MAX, None, false)
            .unwrap()
            .region
            .unwrap();
        let stand_ins = [placeholder(all.len()).unwrap(), Bytes::new()];
        let mut frame = Frame::default();
        let missing = encode(&mut frame, 1, 12, &response(stand_ins.clone()), vec![]);
        assert!(missing.is_err());
        let short = all.sub(0, all.len() - 1);
        let wrong_length = encode(&mut frame, 1, 12, &response(stand_ins), vec![short]);
        assert!(wrong_length.is_err());
        assert!(frame.buf.is_empty() && frame.splices.is_empty());
    }

    #[tokio::test]
    async fn write_puts_the_whole_frame_on_the_socket() {
        // Megabytes: more than the socket buffers hold, so the writer waits for the reader.
        let (_dir, log) = log_with(1500);
        let (frame, plain) = frame_of(&log, 12);
        let (got, written) = over_loopback(frame).await;
        written.unwrap();
        assert_eq!(got, plain);
    }

    #[tokio::test]
    async fn a_file_shorter_than_its_region_fails_the_write() {
        let (dir, log) = log_with(4);
        let (frame, plain) = frame_of(&log, 12);
        let segment = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "log"))
            .unwrap();
        let file = OpenOptions::new().write(true).open(segment).unwrap();
        file.set_len(10).unwrap();
        let (got, written) = over_loopback(frame).await;
        assert_eq!(
            written.unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof,
            "the writer must stop rather than send a short frame"
        );
        assert!(got.len() < plain.len());
    }
}
