//! `outbound`: response frames with record bytes spliced in from segment files and written
//! with `sendfile` are byte for byte the plain encoding; a mismatch between placeholders and
//! regions is refused; a file shorter than its region stops the write.

use std::fs::OpenOptions;
use std::io;

use bytes::{Bytes, BytesMut};
use shoal_broker::outbound::{encode, write_tcp as write, Frame};
use shoal_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use shoal_protocol::messages::FetchResponse;
use shoal_protocol::splice::placeholder;
use shoal_protocol::{encode_response, Response, StrBytes};
use shoal_storage::batch::{encode_batch, BatchOptions};
use shoal_storage::{Log, LogConfig};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

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

#[tokio::test]
async fn a_frame_whose_splices_do_not_fit_its_buffer_is_an_error() {
    let (_dir, log) = log_with(3);
    let (mut frame, _) = frame_of(&log, 12);
    frame.splices[0].0 = frame.buf.len() + 1;
    assert_eq!(
        frame.to_vec().unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    let (_, written) = over_loopback(frame).await;
    assert_eq!(written.unwrap_err().kind(), io::ErrorKind::InvalidInput);
}
