//! Requests encoded the way a client encodes them decode back to the same values, and arbitrary
//! bytes decode to an error, never a panic.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use proptest::prelude::*;
use shoal_protocol::{decode_request, Request, RequestError};

#[global_allocator]
static ALLOCATOR: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

fn frame<T: Encodable + HeaderVersion>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("test")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, T::header_version(version)).unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.freeze()
}

#[test]
fn metadata_round_trips_at_every_version() {
    for version in 0..=13 {
        let topics = if version == 0 { Some(vec![]) } else { None };
        let body = MetadataRequest::default().with_topics(topics);
        let decoded = decode_request(frame(ApiKey::Metadata, version, &body)).unwrap();
        assert_eq!(decoded.correlation_id(), 42);
        assert_eq!(decoded.version(), version);
        match decoded.body {
            Request::Metadata(m) => assert_eq!(m, body),
            other => panic!("decoded {other:?}"),
        }
    }
}

#[test]
fn produce_keeps_record_bytes_untouched() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let records = Bytes::from_static(b"opaque-record-batch-bytes");
    let body = ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.clone()))])]);
    let decoded = decode_request(frame(ApiKey::Produce, 9, &body)).unwrap();
    match decoded.body {
        Request::Produce(p) => {
            assert_eq!(p.topic_data[0].partition_data[0].records, Some(records))
        }
        other => panic!("decoded {other:?}"),
    }
}

#[test]
fn unknown_keys_and_versions_are_typed_errors() {
    let body = ApiVersionsRequest::default();
    let mut bytes = BytesMut::from(&frame(ApiKey::ApiVersions, 3, &body)[..]);
    bytes[2..4].copy_from_slice(&99i16.to_be_bytes());
    match decode_request(bytes.clone().freeze()) {
        Err(RequestError::UnsupportedVersion {
            api_key: 18,
            api_version: 99,
            correlation_id: 42,
        }) => {}
        other => panic!("{other:?}"),
    }
    bytes[0..2].copy_from_slice(&9999i16.to_be_bytes());
    assert!(matches!(
        decode_request(bytes.freeze()),
        Err(RequestError::UnknownApiKey { api_key: 9999, .. })
    ));
    assert!(matches!(
        decode_request(Bytes::from_static(b"abc")),
        Err(RequestError::Truncated { len: 3 })
    ));
}

proptest! {
    #[test]
    fn truncated_frames_never_panic(cut in 0usize..200, version in 0i16..=13) {
        let body = MetadataRequest::default().with_topics(None);
        let full = frame(ApiKey::Metadata, version, &body);
        let cut = cut.min(full.len());
        let _ = decode_request(full.slice(..cut));
    }

    #[test]
    fn small_random_bodies_never_panic(key in 0i16..100, version in 0i16..20, body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&key.to_be_bytes());
        buf.extend_from_slice(&version.to_be_bytes());
        buf.extend_from_slice(&7i32.to_be_bytes());
        // A short client id keeps random bytes from drawing huge array lengths in the header.
        buf.extend_from_slice(&0i16.to_be_bytes());
        buf.extend_from_slice(&body);
        let _ = decode_request(buf.freeze());
    }
}
