//! TxnShareAcknowledge (api key 95, v0; KIP-1289 spec §3.1): byte-exact encodings built by hand
//! field by field from the schema, the request through `decode_request` and the response through
//! `encode_response` / `decode_response`, errors (never panics) for truncated, oversized or
//! garbage input, and encode→decode identity of generated values.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{GroupId, ProducerId, RequestHeader, TransactionalId};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use shoal_protocol::api::{codec_versions, ApiRange};
use shoal_protocol::request::encode_request;
use shoal_protocol::response::decode_response;
use shoal_protocol::share::txn_share_acknowledge::{
    AcknowledgementBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgePartitionResponse,
    TxnShareAcknowledgeTopic, TxnShareAcknowledgeTopicResponse,
};
use shoal_protocol::share::{TxnShareAcknowledgeRequest, TxnShareAcknowledgeResponse};
use shoal_protocol::{
    decode_request, encode_response, ApiKey, Request, RequestError, Response,
    TXN_SHARE_ACKNOWLEDGE_KEY,
};
use uuid::Uuid;

#[global_allocator]
static ALLOCATOR: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const TOPIC: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const TOPIC2: [u8; 16] = [0xa0; 16];

fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn encode<T: Encodable>(value: &T, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    value.encode(&mut buf, version).unwrap();
    assert_eq!(
        value.compute_size(version).unwrap(),
        buf.len(),
        "compute_size"
    );
    buf.to_vec()
}

fn decode<T: Decodable>(bytes: &[u8], version: i16) -> anyhow::Result<T> {
    let mut buf = Bytes::copy_from_slice(bytes);
    let value = T::decode(&mut buf, version)?;
    anyhow::ensure!(!buf.has_remaining(), "{} bytes left over", buf.remaining());
    Ok(value)
}

/// `value` encodes to exactly `bytes`, `bytes` decode to `value`, and every strict prefix of
/// `bytes` is an error.
fn assert_wire<T>(value: &T, bytes: &[u8])
where
    T: Encodable + Decodable + PartialEq + std::fmt::Debug,
{
    assert_eq!(encode(value, 0), bytes, "encoding");
    assert_eq!(&decode::<T>(bytes, 0).unwrap(), value, "decoding");
    for cut in 0..bytes.len() {
        let mut buf = Bytes::copy_from_slice(&bytes[..cut]);
        assert!(
            T::decode(&mut buf, 0).is_err(),
            "prefix of {cut} bytes decoded"
        );
    }
}

fn request_frame(version: i16, body: &[u8]) -> Bytes {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(95)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(s("txn-test")))
        .encode(&mut buf, 2)
        .unwrap();
    buf.extend_from_slice(body);
    buf.freeze()
}

// ---- hand-built vectors (field by field from spec §3.1) ----

fn request() -> (TxnShareAcknowledgeRequest, Vec<u8>) {
    let value = TxnShareAcknowledgeRequest {
        transactional_id: Some(TransactionalId(s("tx"))),
        group_id: Some(GroupId(s("g"))),
        producer_id: ProducerId(0x0102_0304_0506_0708),
        producer_epoch: 0x0a0b,
        member_id: Some(s("m1")),
        member_epoch: 7,
        topics: vec![TxnShareAcknowledgeTopic {
            topic_id: Uuid::from_bytes(TOPIC),
            partitions: vec![
                TxnShareAcknowledgePartition {
                    partition_index: 3,
                    acknowledgement_batches: vec![
                        AcknowledgementBatch {
                            first_offset: 5,
                            last_offset: 6,
                            acknowledge_types: vec![1],
                            ..Default::default()
                        },
                        AcknowledgementBatch {
                            first_offset: 8,
                            last_offset: 10,
                            acknowledge_types: vec![1, 0, 3],
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                TxnShareAcknowledgePartition {
                    partition_index: -1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        unknown_tagged_fields: BTreeMap::from([(5, Bytes::from_static(&[0xee]))]),
    };
    let bytes = cat(&[
        &[0x03, b't', b'x'],        // TransactionalId: compact string, length + 1
        &[0x02, b'g'],              // GroupId
        &[1, 2, 3, 4, 5, 6, 7, 8],  // ProducerId int64
        &[0x0a, 0x0b],              // ProducerEpoch int16
        &[0x03, b'm', b'1'],        // MemberId
        &[0, 0, 0, 7],              // MemberEpoch int32
        &[0x02],                    // Topics: compact array of 1
        &TOPIC,                     //   TopicId uuid
        &[0x03],                    //   Partitions: 2
        &[0, 0, 0, 3],              //     PartitionIndex
        &[0x03],                    //     AcknowledgementBatches: 2
        &[0, 0, 0, 0, 0, 0, 0, 5],  //       FirstOffset
        &[0, 0, 0, 0, 0, 0, 0, 6],  //       LastOffset
        &[0x02, 1],                 //       AcknowledgeTypes: [ACCEPT]
        &[0x00],                    //       (tagged fields)
        &[0, 0, 0, 0, 0, 0, 0, 8],  //       FirstOffset
        &[0, 0, 0, 0, 0, 0, 0, 10], //       LastOffset
        &[0x04, 1, 0, 3],           //       AcknowledgeTypes: [ACCEPT, GAP, REJECT]
        &[0x00],                    //       (tagged fields)
        &[0x00],                    //     (tagged fields)
        &[0xff, 0xff, 0xff, 0xff],  //     PartitionIndex -1
        &[0x01],                    //     AcknowledgementBatches: empty
        &[0x00],                    //     (tagged fields)
        &[0x00],                    //   (tagged fields)
        &[0x01, 0x05, 0x01, 0xee],  // tagged fields: 1, tag 5, size 1, 0xee
    ]);
    (value, bytes)
}

fn response() -> (TxnShareAcknowledgeResponse, Vec<u8>) {
    let value = TxnShareAcknowledgeResponse {
        throttle_time_ms: 9,
        error_code: 0,
        responses: vec![
            TxnShareAcknowledgeTopicResponse {
                topic_id: Uuid::from_bytes(TOPIC),
                partitions: vec![
                    TxnShareAcknowledgePartitionResponse {
                        partition_index: 0,
                        error_code: 121,
                        error_message: Some(s("no")),
                        ..Default::default()
                    },
                    TxnShareAcknowledgePartitionResponse {
                        partition_index: 1,
                        error_code: 0,
                        error_message: None,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            TxnShareAcknowledgeTopicResponse {
                topic_id: Uuid::from_bytes(TOPIC2),
                partitions: vec![],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let bytes = cat(&[
        &[0, 0, 0, 9], // ThrottleTimeMs
        &[0, 0],       // ErrorCode
        &[0x03],       // Responses: 2
        &TOPIC,        //   TopicId
        &[0x03],       //   Partitions: 2
        &[0, 0, 0, 0], //     PartitionIndex
        &[0, 121],     //     ErrorCode INVALID_RECORD_STATE
        &[0x03, b'n', b'o'],
        &[0x00],       //     (tagged fields)
        &[0, 0, 0, 1], //     PartitionIndex
        &[0, 0],       //     ErrorCode
        &[0x00],       //     ErrorMessage: null
        &[0x00],       //     (tagged fields)
        &[0x00],       //   (tagged fields)
        &TOPIC2,       //   TopicId
        &[0x01],       //   Partitions: empty
        &[0x00],       //   (tagged fields)
        &[0x00],       // (tagged fields)
    ]);
    (value, bytes)
}

#[test]
fn request_matches_hand_built_bytes() {
    let (value, bytes) = request();
    assert_wire(&value, &bytes);
}

#[test]
fn response_matches_hand_built_bytes() {
    let (value, bytes) = response();
    assert_wire(&value, &bytes);
}

#[test]
fn null_ids_decode_for_the_broker_to_refuse() {
    let value = TxnShareAcknowledgeRequest {
        transactional_id: None,
        group_id: None,
        member_id: None,
        ..Default::default()
    };
    let bytes = cat(&[
        &[0x00], // TransactionalId: null
        &[0x00], // GroupId: null
        &[0; 8], // ProducerId
        &[0; 2], // ProducerEpoch
        &[0x00], // MemberId: null
        &[0; 4], // MemberEpoch
        &[0x01], // Topics: empty
        &[0x00], // (tagged fields)
    ]);
    assert_wire(&value, &bytes);
}

#[test]
fn defaults_are_the_schemas() {
    let request = TxnShareAcknowledgeRequest::default();
    assert_eq!(request.transactional_id.as_deref().map(|t| &**t), Some(""));
    assert_eq!(request.group_id.as_deref().map(|g| &**g), Some(""));
    assert_eq!(request.member_id.as_deref(), Some(""));
    assert_eq!((request.producer_id.0, request.producer_epoch), (0, 0));
    assert_eq!(request.member_epoch, 0);
    let response = TxnShareAcknowledgeResponse::default();
    assert_eq!((response.throttle_time_ms, response.error_code), (0, 0));
    assert_eq!(
        TxnShareAcknowledgePartitionResponse::default().error_message,
        None
    );
}

#[test]
fn key_95_version_0_with_flexible_headers() {
    assert_eq!(TXN_SHARE_ACKNOWLEDGE_KEY, 95);
    assert_eq!(
        <TxnShareAcknowledgeRequest as kafka_protocol::protocol::Request>::KEY,
        95
    );
    assert_eq!(ApiKey::TxnShareAcknowledge as i16, 95);
    let range = codec_versions(ApiKey::TxnShareAcknowledge).unwrap();
    assert_eq!((range.min, range.max), (0, 0));
    let full = ApiRange::full(ApiKey::TxnShareAcknowledge).unwrap();
    assert_eq!((full.min, full.max), (0, 0));
    assert_eq!(
        TxnShareAcknowledgeResponse::VERSIONS,
        TxnShareAcknowledgeRequest::VERSIONS
    );
    assert_eq!(TxnShareAcknowledgeRequest::header_version(0), 2);
    assert_eq!(TxnShareAcknowledgeResponse::header_version(0), 1);
    assert_eq!(
        Request::default_for(ApiKey::TxnShareAcknowledge).map(|r| r.api_key()),
        Some(ApiKey::TxnShareAcknowledge)
    );
}

#[test]
fn other_versions_are_refused() {
    let (value, bytes) = request();
    for version in [-1i16, 1] {
        assert!(value.encode(&mut BytesMut::new(), version).is_err());
        assert!(decode::<TxnShareAcknowledgeRequest>(&bytes, version).is_err());
        let mut frame = BytesMut::from(&request_frame(0, &bytes)[..]);
        frame[2..4].copy_from_slice(&version.to_be_bytes());
        match decode_request(frame.freeze()) {
            Err(RequestError::UnsupportedVersion {
                api_key: 95,
                api_version,
                correlation_id: 42,
            }) => assert_eq!(api_version, version),
            other => panic!("v{version}: {other:?}"),
        }
    }
}

#[test]
fn decode_request_takes_a_frame_of_key_95() {
    let (value, bytes) = request();
    let frame = decode_request(request_frame(0, &bytes)).unwrap();
    assert_eq!(frame.api_key, ApiKey::TxnShareAcknowledge);
    assert_eq!(frame.version(), 0);
    assert_eq!(frame.correlation_id(), 42);
    assert_eq!(frame.header.client_id, Some(s("txn-test")));
    match frame.body {
        Request::TxnShareAcknowledge(body) => assert_eq!(body, value),
        other => panic!("decoded {other:?}"),
    }
    // A malformed body is a typed error naming the key, not a panic.
    match decode_request(request_frame(0, &bytes[..bytes.len() - 1])) {
        Err(RequestError::Malformed {
            api_key: ApiKey::TxnShareAcknowledge,
            api_version: 0,
            correlation_id: 42,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // encode_request writes the same frame (with its own client id).
    let mut buf = BytesMut::new();
    encode_request(&mut buf, 5, 0, &Request::TxnShareAcknowledge(value.clone())).unwrap();
    assert_eq!(&buf[..4], &[0, 95, 0, 0]);
    assert!(buf.ends_with(&bytes));
    match decode_request(buf.freeze()).unwrap().body {
        Request::TxnShareAcknowledge(body) => assert_eq!(body, value),
        other => panic!("decoded {other:?}"),
    }
}

#[test]
fn responses_are_framed_with_header_v1() {
    let (value, body) = response();
    let response: Response = value.clone().into();
    assert_eq!(response.api_key(), ApiKey::TxnShareAcknowledge);
    let mut buf = BytesMut::new();
    encode_response(&mut buf, 7, 0, &response).unwrap();
    let expected = cat(&[
        &(4 + 1 + body.len() as i32).to_be_bytes(), // size
        &[0, 0, 0, 7],                              // correlation id
        &[0x00],                                    // header tagged fields (v1)
        &body,
    ]);
    assert_eq!(&buf[..], &expected[..]);
    let (correlation_id, back) =
        decode_response(ApiKey::TxnShareAcknowledge, 0, buf.freeze().slice(4..)).unwrap();
    assert_eq!(correlation_id, 7);
    match back {
        Response::TxnShareAcknowledge(back) => assert_eq!(back, value),
        other => panic!("decoded {other:?}"),
    }
}

#[test]
fn huge_counts_in_small_frames_are_refused() {
    let head = cat(&[&[0x01, 0x01], &[0; 10], &[0x01], &[0; 4]]);
    // Topics claiming 2^28 entries in a few bytes.
    let body = cat(&[&head, &[0x81, 0x80, 0x80, 0x80, 0x01], &[0; 8]]);
    let err = decode::<TxnShareAcknowledgeRequest>(&body, 0).unwrap_err();
    assert!(err.to_string().contains("cannot fit"), "{err}");
    // AcknowledgeTypes claiming 2^21 entries.
    let body = cat(&[
        &head,
        &[0x02],
        &TOPIC,
        &[0x02, 0, 0, 0, 0, 0x02],
        &[0; 16],
        &[0x81, 0x80, 0x80, 0x01],
        &[1, 1, 1],
    ]);
    let err = decode::<TxnShareAcknowledgeRequest>(&body, 0).unwrap_err();
    assert!(err.to_string().contains("cannot fit"), "{err}");
    // Responses claiming 2^28 entries.
    let body = cat(&[&[0; 6], &[0x81, 0x80, 0x80, 0x80, 0x01], &[0; 8]]);
    let err = decode::<TxnShareAcknowledgeResponse>(&body, 0).unwrap_err();
    assert!(err.to_string().contains("cannot fit"), "{err}");
}

#[test]
fn garbage_strings_are_errors() {
    // Invalid UTF-8 in TransactionalId.
    let body = cat(&[
        &[0x02, 0xff],
        &[0x01],
        &[0; 10],
        &[0x01],
        &[0; 4],
        &[0x01, 0x00],
    ]);
    assert!(decode::<TxnShareAcknowledgeRequest>(&body, 0).is_err());
    // GroupId claiming 0x8000 bytes.
    let body = cat(&[&[0x01], &[0x81, 0x80, 0x02], &[0; 64]]);
    assert!(decode::<TxnShareAcknowledgeRequest>(&body, 0).is_err());
    // A varint longer than five bytes as the Topics count.
    let body = cat(&[
        &[0x01, 0x01],
        &[0; 10],
        &[0x01],
        &[0; 4],
        &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
    ]);
    assert!(decode::<TxnShareAcknowledgeRequest>(&body, 0).is_err());
}

// ---- generated values ----

fn str_bytes() -> impl Strategy<Value = StrBytes> {
    "[a-z0-9._-]{0,10}".prop_map(StrBytes::from_string)
}

fn tags() -> impl Strategy<Value = BTreeMap<i32, Bytes>> {
    btree_map(
        0i32..1000,
        vec(any::<u8>(), 0..4).prop_map(Bytes::from),
        0..2,
    )
}

prop_compose! {
    fn batch()(
        first_offset in any::<i64>(),
        last_offset in any::<i64>(),
        acknowledge_types in vec(any::<i8>(), 0..4),
        unknown_tagged_fields in tags(),
    ) -> AcknowledgementBatch {
        AcknowledgementBatch { first_offset, last_offset, acknowledge_types, unknown_tagged_fields }
    }
}

prop_compose! {
    fn partition()(
        partition_index in any::<i32>(),
        acknowledgement_batches in vec(batch(), 0..3),
        unknown_tagged_fields in tags(),
    ) -> TxnShareAcknowledgePartition {
        TxnShareAcknowledgePartition { partition_index, acknowledgement_batches, unknown_tagged_fields }
    }
}

prop_compose! {
    fn topic()(
        topic_id in any::<u128>().prop_map(Uuid::from_u128),
        partitions in vec(partition(), 0..3),
        unknown_tagged_fields in tags(),
    ) -> TxnShareAcknowledgeTopic {
        TxnShareAcknowledgeTopic { topic_id, partitions, unknown_tagged_fields }
    }
}

prop_compose! {
    fn txn_request()(
        transactional_id in proptest::option::of(str_bytes().prop_map(TransactionalId)),
        group_id in proptest::option::of(str_bytes().prop_map(GroupId)),
        producer_id in any::<i64>().prop_map(ProducerId),
        producer_epoch in any::<i16>(),
        member_id in proptest::option::of(str_bytes()),
        member_epoch in any::<i32>(),
        topics in vec(topic(), 0..3),
        unknown_tagged_fields in tags(),
    ) -> TxnShareAcknowledgeRequest {
        TxnShareAcknowledgeRequest {
            transactional_id, group_id, producer_id, producer_epoch, member_id, member_epoch,
            topics, unknown_tagged_fields,
        }
    }
}

prop_compose! {
    fn partition_response()(
        partition_index in any::<i32>(),
        error_code in any::<i16>(),
        error_message in proptest::option::of(str_bytes()),
        unknown_tagged_fields in tags(),
    ) -> TxnShareAcknowledgePartitionResponse {
        TxnShareAcknowledgePartitionResponse {
            partition_index, error_code, error_message, unknown_tagged_fields,
        }
    }
}

prop_compose! {
    fn txn_response()(
        throttle_time_ms in any::<i32>(),
        error_code in any::<i16>(),
        responses in vec(
            (any::<u128>(), vec(partition_response(), 0..3), tags()).prop_map(
                |(id, partitions, unknown_tagged_fields)| TxnShareAcknowledgeTopicResponse {
                    topic_id: Uuid::from_u128(id),
                    partitions,
                    unknown_tagged_fields,
                },
            ),
            0..3,
        ),
        unknown_tagged_fields in tags(),
    ) -> TxnShareAcknowledgeResponse {
        TxnShareAcknowledgeResponse { throttle_time_ms, error_code, responses, unknown_tagged_fields }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// encode → decode is the identity, re-encoding gives the same bytes, and the request
    /// decodes through `decode_request` as key 95.
    #[test]
    fn requests_round_trip(value in txn_request()) {
        let bytes = encode(&value, 0);
        let back = decode::<TxnShareAcknowledgeRequest>(&bytes, 0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &value);
        prop_assert_eq!(encode(&back, 0), bytes.clone());
        let frame = decode_request(request_frame(0, &bytes))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(frame.api_key, ApiKey::TxnShareAcknowledge);
        match frame.body {
            Request::TxnShareAcknowledge(body) => prop_assert_eq!(body, value),
            other => prop_assert!(false, "decoded {:?}", other),
        }
    }

    #[test]
    fn responses_round_trip(value in txn_response()) {
        let bytes = encode(&value, 0);
        let back = decode::<TxnShareAcknowledgeResponse>(&bytes, 0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &value);
        prop_assert_eq!(encode(&back, 0), bytes);
        let mut buf = BytesMut::new();
        encode_response(&mut buf, 3, 0, &value.clone().into())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (correlation_id, response) =
            decode_response(ApiKey::TxnShareAcknowledge, 0, buf.freeze().slice(4..))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(correlation_id, 3);
        match response {
            Response::TxnShareAcknowledge(back) => prop_assert_eq!(back, value),
            other => prop_assert!(false, "decoded {:?}", other),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes, and valid encodings with bytes flipped or cut, decode or fail; never panic.
    #[test]
    fn garbage_never_panics(
        bytes in vec(any::<u8>(), 0..256),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let _ = decode::<TxnShareAcknowledgeRequest>(&bytes, 0);
        let _ = decode::<TxnShareAcknowledgeResponse>(&bytes, 0);
        let _ = decode_request(request_frame(0, &bytes));
        for mut valid in [request().1, response().1] {
            for (at, value) in &flips {
                let i = at.index(valid.len());
                valid[i] ^= value;
            }
            let end = cut.index(valid.len() + 1);
            let _ = decode::<TxnShareAcknowledgeRequest>(&valid[..end], 0);
            let _ = decode::<TxnShareAcknowledgeResponse>(&valid[..end], 0);
            let _ = decode_request(request_frame(0, &valid[..end]));
        }
    }
}
