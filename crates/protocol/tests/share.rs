//! The hand-written share codecs (ShareFetch 78 v1-2, ShareAcknowledge 79 v1-2,
//! DescribeShareGroupOffsets 90 v0-1): byte-exact encodings built by hand from Kafka's schemas,
//! agreement with `kafka-protocol` at the versions it has, round trips at every version, refusal
//! of fields a version cannot carry, and errors (never panics) for truncated or garbage input.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{self as kp, ApiKey, BrokerId, GroupId, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use shoal_protocol::api::{codec_versions, ApiRange};
use shoal_protocol::share::describe_share_group_offsets::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use shoal_protocol::share::share_acknowledge::{
    self as ack, AcknowledgePartition, AcknowledgeTopic, ShareAcknowledgeTopicResponse,
};
use shoal_protocol::share::share_fetch::{
    self as fetch, AcknowledgementBatch, AcquiredRecords, FetchPartition, FetchTopic,
    ForgottenTopic, LeaderIdAndEpoch, NodeEndpoint, ShareFetchableTopicResponse,
};
use shoal_protocol::share::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, ShareAcknowledgeRequest,
    ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use shoal_protocol::{
    decode_request, encode_response, Request, RequestError, RequestFrame, Response,
};
use uuid::Uuid;

#[global_allocator]
static ALLOCATOR: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const TOPIC: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

fn topic_id() -> Uuid {
    Uuid::from_bytes(TOPIC)
}

/// Concatenates byte pieces of a hand-built vector.
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

/// `value` encodes to exactly `bytes` at `version`, and `bytes` decode to `value`; every strict
/// prefix of `bytes` is an error.
fn assert_wire<T>(value: &T, version: i16, bytes: &[u8])
where
    T: Encodable + Decodable + PartialEq + std::fmt::Debug,
{
    assert_eq!(encode(value, version), bytes, "encoding at v{version}");
    assert_eq!(
        &decode::<T>(bytes, version).unwrap(),
        value,
        "decoding at v{version}"
    );
    for cut in 0..bytes.len() {
        let mut buf = Bytes::copy_from_slice(&bytes[..cut]);
        assert!(
            T::decode(&mut buf, version).is_err(),
            "prefix of {cut} bytes decoded"
        );
    }
}

fn request_frame<T: Encodable + HeaderVersion>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(s("share-test")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, T::header_version(version)).unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.freeze()
}

// ---- hand-built vectors (field by field from the schemas) ----

fn fetch_request_v2() -> (ShareFetchRequest, Vec<u8>) {
    let value = ShareFetchRequest {
        group_id: Some(GroupId(s("g"))),
        member_id: Some(s("m1")),
        share_session_epoch: 1,
        max_wait_ms: 500,
        min_bytes: 1,
        max_bytes: 1 << 20,
        max_records: 500,
        batch_size: 100,
        share_acquire_mode: 1,
        is_renew_ack: true,
        topics: vec![FetchTopic {
            topic_id: topic_id(),
            partitions: vec![FetchPartition {
                partition_index: 3,
                acknowledgement_batches: vec![AcknowledgementBatch {
                    first_offset: 10,
                    last_offset: 12,
                    acknowledge_types: vec![1, 4, 2],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        forgotten_topics_data: vec![ForgottenTopic {
            topic_id: topic_id(),
            partitions: vec![0, 1],
            ..Default::default()
        }],
        ..Default::default()
    };
    let bytes = cat(&[
        &[0x02, b'g'],                   // GroupId "g" (compact: length + 1)
        &[0x03, b'm', b'1'],             // MemberId "m1"
        &[0, 0, 0, 1],                   // ShareSessionEpoch
        &[0, 0, 0x01, 0xf4],             // MaxWaitMs 500
        &[0, 0, 0, 1],                   // MinBytes
        &[0, 0x10, 0, 0],                // MaxBytes 1 MiB
        &[0, 0, 0x01, 0xf4],             // MaxRecords 500
        &[0, 0, 0, 0x64],                // BatchSize 100
        &[0x01],                         // ShareAcquireMode (v2) record-limit
        &[0x01],                         // IsRenewAck (v2) true
        &[0x02],                         // Topics: 1
        &TOPIC,                          //   TopicId
        &[0x02],                         //   Partitions: 1
        &[0, 0, 0, 3],                   //     PartitionIndex
        &[0x02],                         //     AcknowledgementBatches: 1
        &[0, 0, 0, 0, 0, 0, 0, 10],      //   FirstOffset
        &[0, 0, 0, 0, 0, 0, 0, 12],      //   LastOffset
        &[0x04, 1, 4, 2],                //       AcknowledgeTypes [1, 4, 2]
        &[0x00],                         //       (tagged fields)
        &[0x00],                         //     (tagged fields)
        &[0x00],                         //   (tagged fields)
        &[0x02],                         // ForgottenTopicsData: 1
        &TOPIC,                          //   TopicId
        &[0x03, 0, 0, 0, 0, 0, 0, 0, 1], // Partitions [0, 1]
        &[0x00],                         //   (tagged fields)
        &[0x00],                         // (tagged fields)
    ]);
    (value, bytes)
}

fn fetch_response_v2() -> (ShareFetchResponse, Vec<u8>) {
    let value = ShareFetchResponse {
        acquisition_lock_timeout_ms: 30_000,
        responses: vec![ShareFetchableTopicResponse {
            topic_id: topic_id(),
            partitions: vec![
                fetch::PartitionData {
                    partition_index: 0,
                    current_leader: LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 5,
                        ..Default::default()
                    },
                    records: Bytes::from_static(b"abc"),
                    acquired_records: vec![AcquiredRecords {
                        first_offset: 0,
                        last_offset: 2,
                        delivery_count: 1,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                fetch::PartitionData {
                    partition_index: 1,
                    error_code: 6,
                    error_message: Some(s("moved")),
                    current_leader: LeaderIdAndEpoch {
                        leader_id: 2,
                        leader_epoch: 7,
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        node_endpoints: vec![NodeEndpoint {
            node_id: BrokerId(2),
            host: s("broker-2"),
            port: 9092,
            rack: None,
            ..Default::default()
        }],
        unknown_tagged_fields: BTreeMap::from([(0, Bytes::from_static(&[0xab, 0xcd]))]),
        ..Default::default()
    };
    let bytes = cat(&[
        &[0, 0, 0, 0],                         // ThrottleTimeMs
        &[0, 0],                               // ErrorCode
        &[0x00],                               // ErrorMessage null
        &[0, 0, 0x75, 0x30],                   // AcquisitionLockTimeoutMs 30000
        &[0x02],                               // Responses: 1
        &TOPIC,                                //   TopicId
        &[0x03],                               //   Partitions: 2
        &[0, 0, 0, 0],                         //     PartitionIndex 0
        &[0, 0],                               //     ErrorCode
        &[0x00],                               //     ErrorMessage null
        &[0, 0],                               //     AcknowledgeErrorCode
        &[0x00],                               //     AcknowledgeErrorMessage null
        &[0, 0, 0, 1, 0, 0, 0, 5, 0x00],       // CurrentLeader {1, 5}
        &[0x04, b'a', b'b', b'c'],             //   Records (3 bytes)
        &[0x02],                               //     AcquiredRecords: 1
        &[0, 0, 0, 0, 0, 0, 0, 0],             //     FirstOffset 0
        &[0, 0, 0, 0, 0, 0, 0, 2],             //     LastOffset 2
        &[0, 1],                               //       DeliveryCount 1
        &[0x00],                               //       (tagged fields)
        &[0x00],                               //     (tagged fields)
        &[0, 0, 0, 1],                         //     PartitionIndex 1
        &[0, 6],                               //     ErrorCode NOT_LEADER_OR_FOLLOWER
        &[0x06, b'm', b'o', b'v', b'e', b'd'], // ErrorMessage "moved"
        &[0, 0],                               //     AcknowledgeErrorCode
        &[0x00],                               //     AcknowledgeErrorMessage null
        &[0, 0, 0, 2, 0, 0, 0, 7, 0x00],       // CurrentLeader {2, 7}
        &[0x01],                               //     Records: empty, not null
        &[0x01],                               //     AcquiredRecords: 0
        &[0x00],                               //     (tagged fields)
        &[0x00],                               //   (tagged fields)
        &[0x02],                               // NodeEndpoints: 1
        &[0, 0, 0, 2],                         //   NodeId
        &[0x09],                               //   Host (8 bytes)
        b"broker-2",
        &[0, 0, 0x23, 0x84],             //   Port 9092
        &[0x00],                         //   Rack null
        &[0x00],                         //   (tagged fields)
        &[0x01, 0x00, 0x02, 0xab, 0xcd], // tagged fields: 1, tag 0, 2 bytes
    ]);
    (value, bytes)
}

fn ack_request_v2() -> (ShareAcknowledgeRequest, Vec<u8>) {
    let value = ShareAcknowledgeRequest {
        group_id: Some(GroupId(s("g"))),
        member_id: Some(s("m1")),
        share_session_epoch: 2,
        is_renew_ack: true,
        topics: vec![AcknowledgeTopic {
            topic_id: topic_id(),
            partitions: vec![AcknowledgePartition {
                partition_index: 0,
                acknowledgement_batches: vec![
                    AcknowledgementBatch {
                        first_offset: 0,
                        last_offset: 0,
                        acknowledge_types: vec![4],
                        ..Default::default()
                    },
                    AcknowledgementBatch {
                        first_offset: 5,
                        last_offset: 6,
                        acknowledge_types: vec![1],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let bytes = cat(&[
        &[0x02, b'g'],       // GroupId
        &[0x03, b'm', b'1'], // MemberId
        &[0, 0, 0, 2],       // ShareSessionEpoch
        &[0x01],             // IsRenewAck (v2)
        &[0x02],             // Topics: 1
        &TOPIC,
        &[0x02],       //   Partitions: 1
        &[0, 0, 0, 0], //     PartitionIndex
        &[0x03],       //     AcknowledgementBatches: 2
        &[0, 0, 0, 0, 0, 0, 0, 0],
        &[0, 0, 0, 0, 0, 0, 0, 0],
        &[0x02, 4],
        &[0x00],
        &[0, 0, 0, 0, 0, 0, 0, 5],
        &[0, 0, 0, 0, 0, 0, 0, 6],
        &[0x02, 1],
        &[0x00],
        &[0x00], //     (tagged fields)
        &[0x00], //   (tagged fields)
        &[0x00], // (tagged fields)
    ]);
    (value, bytes)
}

fn ack_response() -> ShareAcknowledgeResponse {
    ShareAcknowledgeResponse {
        acquisition_lock_timeout_ms: 30_000,
        responses: vec![ShareAcknowledgeTopicResponse {
            topic_id: topic_id(),
            partitions: vec![ack::PartitionData {
                partition_index: 0,
                current_leader: LeaderIdAndEpoch {
                    leader_id: -1,
                    leader_epoch: -1,
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The ShareAcknowledge response at v2, or at v1 (without AcquisitionLockTimeoutMs).
fn ack_response_bytes(version: i16) -> Vec<u8> {
    let lock: &[u8] = if version >= 2 {
        &[0, 0, 0x75, 0x30]
    } else {
        &[]
    };
    cat(&[
        &[0, 0, 0, 0], // ThrottleTimeMs
        &[0, 0],       // ErrorCode
        &[0x00],       // ErrorMessage null
        lock,          // AcquisitionLockTimeoutMs 30000 (v2)
        &[0x02],       // Responses: 1
        &TOPIC,
        &[0x02],                                                 //   Partitions: 1
        &[0, 0, 0, 0],                                           //     PartitionIndex
        &[0, 0],                                                 //     ErrorCode
        &[0x00],                                                 //     ErrorMessage null
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00], // CurrentLeader {-1, -1}
        &[0x00],                                                 //     (tagged fields)
        &[0x00],                                                 //   (tagged fields)
        &[0x01],                                                 // NodeEndpoints: 0
        &[0x00],                                                 // (tagged fields)
    ])
}

fn describe_request() -> (DescribeShareGroupOffsetsRequest, Vec<u8>) {
    let value = DescribeShareGroupOffsetsRequest {
        groups: vec![
            DescribeShareGroupOffsetsRequestGroup {
                group_id: GroupId(s("sg")),
                topics: Some(vec![DescribeShareGroupOffsetsRequestTopic {
                    topic_name: TopicName(s("t")),
                    partitions: vec![0, 1],
                    ..Default::default()
                }]),
                ..Default::default()
            },
            DescribeShareGroupOffsetsRequestGroup {
                group_id: GroupId(s("hg")),
                topics: None,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let bytes = cat(&[
        &[0x03],                         // Groups: 2
        &[0x03, b's', b'g'],             //   GroupId
        &[0x02],                         //   Topics: 1
        &[0x02, b't'],                   //     TopicName
        &[0x03, 0, 0, 0, 0, 0, 0, 0, 1], // Partitions [0, 1]
        &[0x00],                         //     (tagged fields)
        &[0x00],                         //   (tagged fields)
        &[0x03, b'h', b'g'],             //   GroupId
        &[0x00],                         //   Topics null: all topics
        &[0x00],                         //   (tagged fields)
        &[0x00],                         // (tagged fields)
    ]);
    (value, bytes)
}

fn describe_response(lag: i64) -> DescribeShareGroupOffsetsResponse {
    DescribeShareGroupOffsetsResponse {
        groups: vec![DescribeShareGroupOffsetsResponseGroup {
            group_id: GroupId(s("sg")),
            topics: vec![DescribeShareGroupOffsetsResponseTopic {
                topic_name: TopicName(s("t")),
                topic_id: topic_id(),
                partitions: vec![DescribeShareGroupOffsetsResponsePartition {
                    partition_index: 0,
                    start_offset: 42,
                    leader_epoch: 3,
                    lag,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The DescribeShareGroupOffsets response at v1 (lag 7), or at v0 (no lag).
fn describe_response_bytes(version: i16) -> Vec<u8> {
    let lag: &[u8] = if version >= 1 {
        &[0, 0, 0, 0, 0, 0, 0, 7]
    } else {
        &[]
    };
    cat(&[
        &[0, 0, 0, 0],              // ThrottleTimeMs
        &[0x02],                    // Groups: 1
        &[0x03, b's', b'g'],        //   GroupId
        &[0x02],                    //   Topics: 1
        &[0x02, b't'],              //     TopicName
        &TOPIC,                     //     TopicId
        &[0x02],                    //     Partitions: 1
        &[0, 0, 0, 0],              //       PartitionIndex
        &[0, 0, 0, 0, 0, 0, 0, 42], //   StartOffset
        &[0, 0, 0, 3],              //       LeaderEpoch
        lag,                        //       Lag (v1)
        &[0, 0],                    //       ErrorCode
        &[0x00],                    //       ErrorMessage null
        &[0x00],                    //       (tagged fields)
        &[0x00],                    //     (tagged fields)
        &[0, 0],                    //   ErrorCode
        &[0x00],                    //   ErrorMessage null
        &[0x00],                    //   (tagged fields)
        &[0x00],                    // (tagged fields)
    ])
}

#[test]
fn share_fetch_v2_matches_hand_built_bytes() {
    let (request, bytes) = fetch_request_v2();
    assert_wire(&request, 2, &bytes);
    let (response, bytes) = fetch_response_v2();
    assert_wire(&response, 2, &bytes);
    // The response is the same at v1.
    assert_wire(&response, 1, &bytes);
}

#[test]
fn share_fetch_v1_request_lacks_the_v2_fields() {
    let (mut request, bytes) = fetch_request_v2();
    request.share_acquire_mode = 0;
    request.is_renew_ack = false;
    // v1 is v2 without the two bytes after BatchSize.
    let at = 2 + 3 + 6 * 4;
    let v1 = cat(&[&bytes[..at], &bytes[at + 2..]]);
    assert_wire(&request, 1, &v1);
}

#[test]
fn share_acknowledge_matches_hand_built_bytes() {
    let (request, bytes) = ack_request_v2();
    assert_wire(&request, 2, &bytes);
    let mut v1 = request.clone();
    v1.is_renew_ack = false;
    let at = 2 + 3 + 4;
    assert_wire(&v1, 1, &cat(&[&bytes[..at], &bytes[at + 1..]]));

    assert_wire(&ack_response(), 2, &ack_response_bytes(2));
    let mut v1 = ack_response();
    v1.acquisition_lock_timeout_ms = 0;
    assert_wire(&v1, 1, &ack_response_bytes(1));
}

#[test]
fn describe_share_group_offsets_matches_hand_built_bytes() {
    let (request, bytes) = describe_request();
    assert_wire(&request, 1, &bytes);
    assert_wire(&request, 0, &bytes);
    assert_wire(&describe_response(7), 1, &describe_response_bytes(1));
    assert_wire(&describe_response(-1), 0, &describe_response_bytes(0));
}

#[test]
fn fields_a_version_cannot_carry_must_be_default() {
    let (request, _) = fetch_request_v2();
    let mut buf = BytesMut::new();
    let err = request.encode(&mut buf, 1).unwrap_err();
    assert!(err.to_string().contains("ShareAcquireMode"), "{err}");
    let mut only_renew = request.clone();
    only_renew.share_acquire_mode = 0;
    let err = only_renew.encode(&mut BytesMut::new(), 1).unwrap_err();
    assert!(err.to_string().contains("IsRenewAck"), "{err}");
    assert!(only_renew.compute_size(1).is_err());

    let (request, _) = ack_request_v2();
    let err = request.encode(&mut BytesMut::new(), 1).unwrap_err();
    assert!(err.to_string().contains("IsRenewAck"), "{err}");

    let err = describe_response(7)
        .encode(&mut BytesMut::new(), 0)
        .unwrap_err();
    assert!(err.to_string().contains("Lag"), "{err}");

    // ShareAcknowledge's AcquisitionLockTimeoutMs is ignorable: dropped at v1, not an error.
    assert_eq!(encode(&ack_response(), 1), ack_response_bytes(1));
}

#[test]
fn versions_outside_the_range_are_errors() {
    let (request, bytes) = fetch_request_v2();
    for version in [-1, 0, 3] {
        assert!(request.encode(&mut BytesMut::new(), version).is_err());
        assert!(decode::<ShareFetchRequest>(&bytes, version).is_err());
        assert!(ShareAcknowledgeResponse::default()
            .encode(&mut BytesMut::new(), version)
            .is_err());
    }
    assert!(DescribeShareGroupOffsetsResponse::default()
        .encode(&mut BytesMut::new(), 2)
        .is_err());
    assert!(decode::<DescribeShareGroupOffsetsRequest>(&[0x01, 0x00], -1).is_err());
}

#[test]
fn the_codec_reports_the_extended_ranges() {
    for (key, min, max) in [
        (ApiKey::ShareFetch, 1, 2),
        (ApiKey::ShareAcknowledge, 1, 2),
        (ApiKey::DescribeShareGroupOffsets, 0, 1),
    ] {
        let range = codec_versions(key).unwrap();
        assert_eq!((range.min, range.max), (min, max), "{key:?}");
        let full = ApiRange::full(key).unwrap();
        assert_eq!((full.min, full.max), (min, max), "{key:?}");
    }
    assert_eq!(ShareFetchResponse::VERSIONS, ShareFetchRequest::VERSIONS);
    assert_eq!(
        ShareAcknowledgeResponse::VERSIONS,
        ShareAcknowledgeRequest::VERSIONS
    );
    assert_eq!(
        DescribeShareGroupOffsetsResponse::VERSIONS,
        DescribeShareGroupOffsetsRequest::VERSIONS
    );
    // Everything else keeps kafka-protocol's range.
    for key in [ApiKey::Fetch, ApiKey::Produce, ApiKey::ShareGroupHeartbeat] {
        assert_eq!(codec_versions(key), Some(key.valid_versions()));
    }
}

#[test]
fn decode_request_takes_v2_share_frames() {
    let (fetch, _) = fetch_request_v2();
    let decoded = decode_request(request_frame(ApiKey::ShareFetch, 2, &fetch)).unwrap();
    assert_eq!(decoded.api_key, ApiKey::ShareFetch);
    assert_eq!(decoded.version(), 2);
    assert_eq!(decoded.correlation_id(), 42);
    assert_eq!(decoded.header.client_id, Some(s("share-test")));
    match decoded.body {
        Request::ShareFetch(r) => assert_eq!(r, fetch),
        other => panic!("decoded {other:?}"),
    }

    let (acknowledge, _) = ack_request_v2();
    let decoded = decode_request(request_frame(ApiKey::ShareAcknowledge, 2, &acknowledge)).unwrap();
    match decoded.body {
        Request::ShareAcknowledge(r) => assert_eq!(r, acknowledge),
        other => panic!("decoded {other:?}"),
    }

    let (describe, _) = describe_request();
    let decoded = decode_request(request_frame(
        ApiKey::DescribeShareGroupOffsets,
        1,
        &describe,
    ))
    .unwrap();
    match decoded.body {
        Request::DescribeShareGroupOffsets(r) => assert_eq!(r, describe),
        other => panic!("decoded {other:?}"),
    }
}

#[test]
fn decode_request_refuses_versions_beyond_the_codec() {
    let (fetch, _) = fetch_request_v2();
    let mut frame = BytesMut::from(&request_frame(ApiKey::ShareFetch, 2, &fetch)[..]);
    for version in [0i16, 3] {
        frame[2..4].copy_from_slice(&version.to_be_bytes());
        match decode_request(frame.clone().freeze()) {
            Err(RequestError::UnsupportedVersion {
                api_key: 78,
                api_version,
                correlation_id: 42,
            }) => assert_eq!(api_version, version),
            other => panic!("{other:?}"),
        }
    }
    // A v2 body read as v1 is misread (and its tail ignored, as Kafka does), not a panic.
    frame[2..4].copy_from_slice(&1i16.to_be_bytes());
    if let Ok(RequestFrame {
        body: Request::ShareFetch(r),
        ..
    }) = decode_request(frame.freeze())
    {
        assert_ne!(r, fetch);
    }
}

#[test]
fn responses_are_framed_with_header_v1() {
    let mut buf = BytesMut::new();
    let response: Response = ack_response().into();
    assert_eq!(response.api_key(), ApiKey::ShareAcknowledge);
    encode_response(&mut buf, 7, 2, &response).unwrap();
    let body = ack_response_bytes(2);
    let expected = cat(&[
        &(4 + 1 + body.len() as i32).to_be_bytes(), // size
        &[0, 0, 0, 7],                              // correlation id
        &[0x00],                                    // header tagged fields (v1)
        &body,
    ]);
    assert_eq!(&buf[..], &expected[..]);

    let mut buf = BytesMut::new();
    let (fetch, body) = fetch_response_v2();
    encode_response(&mut buf, 7, 2, &fetch.into()).unwrap();
    assert_eq!(&buf[4..9], &[0, 0, 0, 7, 0x00]);
    assert_eq!(&buf[9..], &body[..]);

    // A field the version cannot carry fails the encoding and leaves the buffer as it was.
    let mut buf = BytesMut::from(&b"prior"[..]);
    assert!(encode_response(&mut buf, 7, 0, &describe_response(7).into()).is_err());
    assert_eq!(&buf[..], b"prior");
}

// ---- agreement with kafka-protocol at the versions both have ----

#[test]
fn agrees_with_kafka_protocol_at_share_fetch_v1() {
    use kp::share_fetch_request as q;
    use kp::share_fetch_response as r;
    let (mut ours, _) = fetch_request_v2();
    ours.share_acquire_mode = 0;
    ours.is_renew_ack = false;
    let theirs = kp::ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s("g"))))
        .with_member_id(Some(s("m1")))
        .with_share_session_epoch(1)
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(500)
        .with_batch_size(100)
        .with_topics(vec![q::FetchTopic::default()
            .with_topic_id(topic_id())
            .with_partitions(vec![q::FetchPartition::default()
                .with_partition_index(3)
                .with_acknowledgement_batches(vec![
                    q::AcknowledgementBatch::default()
                        .with_first_offset(10)
                        .with_last_offset(12)
                        .with_acknowledge_types(vec![1, 4, 2]),
                ])])])
        .with_forgotten_topics_data(vec![q::ForgottenTopic::default()
            .with_topic_id(topic_id())
            .with_partitions(vec![0, 1])]);
    let bytes = encode(&theirs, 1);
    assert_eq!(encode(&ours, 1), bytes);
    assert_eq!(decode::<ShareFetchRequest>(&bytes, 1).unwrap(), ours);
    assert_eq!(
        encode(&ShareFetchRequest::default(), 1),
        encode(&kp::ShareFetchRequest::default(), 1)
    );

    let (ours, _) = fetch_response_v2();
    let theirs = kp::ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(30_000)
        .with_responses(vec![r::ShareFetchableTopicResponse::default()
            .with_topic_id(topic_id())
            .with_partitions(vec![
                r::PartitionData::default()
                    .with_partition_index(0)
                    .with_current_leader(
                        r::LeaderIdAndEpoch::default()
                            .with_leader_id(1)
                            .with_leader_epoch(5),
                    )
                    .with_records(Some(Bytes::from_static(b"abc")))
                    .with_acquired_records(vec![r::AcquiredRecords::default()
                        .with_first_offset(0)
                        .with_last_offset(2)
                        .with_delivery_count(1)]),
                r::PartitionData::default()
                    .with_partition_index(1)
                    .with_error_code(6)
                    .with_error_message(Some(s("moved")))
                    .with_current_leader(
                        r::LeaderIdAndEpoch::default()
                            .with_leader_id(2)
                            .with_leader_epoch(7),
                    ),
            ])])
        .with_node_endpoints(vec![r::NodeEndpoint::default()
            .with_node_id(BrokerId(2))
            .with_host(s("broker-2"))
            .with_port(9092)])
        .with_unknown_tagged_field(0, Bytes::from_static(&[0xab, 0xcd]));
    let bytes = encode(&theirs, 1);
    assert_eq!(encode(&ours, 1), bytes);
    assert_eq!(decode::<ShareFetchResponse>(&bytes, 1).unwrap(), ours);
    let back = kp::ShareFetchResponse::decode(&mut Bytes::from(encode(&ours, 2)), 1).unwrap();
    assert_eq!(back, theirs);
}

#[test]
fn agrees_with_kafka_protocol_at_share_acknowledge_v1() {
    use kp::share_acknowledge_request as q;
    use kp::share_acknowledge_response as r;
    let (mut ours, _) = ack_request_v2();
    ours.is_renew_ack = false;
    let batch = |first, last, t| {
        q::AcknowledgementBatch::default()
            .with_first_offset(first)
            .with_last_offset(last)
            .with_acknowledge_types(vec![t])
    };
    let theirs = kp::ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s("g"))))
        .with_member_id(Some(s("m1")))
        .with_share_session_epoch(2)
        .with_topics(vec![q::AcknowledgeTopic::default()
            .with_topic_id(topic_id())
            .with_partitions(vec![q::AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(vec![
                    batch(0, 0, 4),
                    batch(5, 6, 1),
                ])])]);
    let bytes = encode(&theirs, 1);
    assert_eq!(encode(&ours, 1), bytes);
    assert_eq!(decode::<ShareAcknowledgeRequest>(&bytes, 1).unwrap(), ours);

    let theirs = kp::ShareAcknowledgeResponse::default().with_responses(vec![
        r::ShareAcknowledgeTopicResponse::default()
            .with_topic_id(topic_id())
            .with_partitions(vec![r::PartitionData::default()
                .with_partition_index(0)
                .with_current_leader(
                    r::LeaderIdAndEpoch::default()
                        .with_leader_id(-1)
                        .with_leader_epoch(-1),
                )]),
    ]);
    assert_eq!(encode(&theirs, 1), ack_response_bytes(1));
    assert_eq!(encode(&ack_response(), 1), ack_response_bytes(1));
}

#[test]
fn agrees_with_kafka_protocol_at_describe_share_group_offsets_v0() {
    use kp::describe_share_group_offsets_request as q;
    use kp::describe_share_group_offsets_response as r;
    let (ours, bytes) = describe_request();
    let theirs = kp::DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        q::DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s("sg")))
            .with_topics(Some(vec![
                q::DescribeShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(TopicName(s("t")))
                    .with_partitions(vec![0, 1]),
            ])),
        q::DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s("hg")))
            .with_topics(None),
    ]);
    assert_eq!(encode(&theirs, 0), bytes);
    assert_eq!(encode(&ours, 0), bytes);

    let theirs = kp::DescribeShareGroupOffsetsResponse::default().with_groups(vec![
        r::DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(GroupId(s("sg")))
            .with_topics(vec![r::DescribeShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(s("t")))
                .with_topic_id(topic_id())
                .with_partitions(vec![
                    r::DescribeShareGroupOffsetsResponsePartition::default()
                        .with_start_offset(42)
                        .with_leader_epoch(3),
                ])]),
    ]);
    assert_eq!(encode(&theirs, 0), describe_response_bytes(0));
    assert_eq!(
        decode::<DescribeShareGroupOffsetsResponse>(&describe_response_bytes(0), 0).unwrap(),
        describe_response(-1)
    );
}

#[test]
fn defaults_are_the_schemas() {
    let fetch = ShareFetchRequest::default();
    assert_eq!(fetch.group_id, None);
    assert_eq!(fetch.member_id, Some(s("")));
    assert_eq!(fetch.max_bytes, i32::MAX);
    assert_eq!((fetch.share_acquire_mode, fetch.is_renew_ack), (0, false));
    assert!(!ShareAcknowledgeRequest::default().is_renew_ack);
    assert_eq!(
        DescribeShareGroupOffsetsResponsePartition::default().lag,
        -1
    );
    assert_eq!(
        DescribeShareGroupOffsetsRequestGroup::default().topics,
        Some(vec![])
    );
    assert_eq!(fetch::PartitionData::default().records, Bytes::new());
}

#[test]
fn null_records_are_refused() {
    // Records are not nullable from v1: a null (compact length 0) is malformed.
    let (_, bytes) = fetch_response_v2();
    let records_at = bytes
        .windows(4)
        .position(|w| w == [0x04, b'a', b'b', b'c'])
        .unwrap();
    let mut null = bytes[..records_at].to_vec();
    null.push(0x00);
    null.extend_from_slice(&bytes[records_at + 4..]);
    assert!(decode::<ShareFetchResponse>(&null, 2).is_err());
}

#[test]
fn huge_counts_in_small_frames_are_refused() {
    // GroupId and MemberId null, six ints, the two v2 fields, then Topics claiming 2^28 entries.
    let body = cat(&[
        &[0x00, 0x00],
        &[0; 24],
        &[0, 0],
        &[0x81, 0x80, 0x80, 0x80, 0x01],
    ]);
    let err = decode::<ShareFetchRequest>(&body, 2).unwrap_err();
    assert!(err.to_string().contains("cannot fit"), "{err}");
}

// ---- round trips of generated values at every version ----

fn str_bytes() -> impl Strategy<Value = StrBytes> {
    "[a-z0-9._-]{0,10}".prop_map(StrBytes::from_string)
}

fn opt_str() -> impl Strategy<Value = Option<StrBytes>> {
    proptest::option::of(str_bytes())
}

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<[u8; 16]>().prop_map(Uuid::from_bytes)
}

fn tags() -> impl Strategy<Value = BTreeMap<i32, Bytes>> {
    btree_map(
        0i32..=i32::MAX,
        vec(any::<u8>(), 0..4).prop_map(Bytes::from),
        0..2,
    )
}

fn ack_batch() -> impl Strategy<Value = AcknowledgementBatch> {
    (any::<i64>(), any::<i64>(), vec(any::<i8>(), 0..4), tags()).prop_map(
        |(first_offset, last_offset, acknowledge_types, unknown_tagged_fields)| {
            AcknowledgementBatch {
                first_offset,
                last_offset,
                acknowledge_types,
                unknown_tagged_fields,
            }
        },
    )
}

fn leader() -> impl Strategy<Value = LeaderIdAndEpoch> {
    (any::<i32>(), any::<i32>(), tags()).prop_map(|(leader_id, leader_epoch, tags)| {
        LeaderIdAndEpoch {
            leader_id,
            leader_epoch,
            unknown_tagged_fields: tags,
        }
    })
}

fn endpoint() -> impl Strategy<Value = NodeEndpoint> {
    (any::<i32>(), str_bytes(), any::<i32>(), opt_str(), tags()).prop_map(
        |(id, host, port, rack, tags)| NodeEndpoint {
            node_id: BrokerId(id),
            host,
            port,
            rack,
            unknown_tagged_fields: tags,
        },
    )
}

prop_compose! {
    fn fetch_request(version: i16)(
        group_id in proptest::option::of(str_bytes().prop_map(GroupId)),
        member_id in opt_str(),
        ints in any::<[i32; 6]>(),
        share_acquire_mode in any::<i8>(),
        is_renew_ack in any::<bool>(),
        topics in vec((uuid(), vec((any::<i32>(), vec(ack_batch(), 0..3), tags()), 0..3), tags()), 0..3),
        forgotten in vec((uuid(), vec(any::<i32>(), 0..3), tags()), 0..2),
        tags in tags(),
    ) -> ShareFetchRequest {
        let v2 = version >= 2;
        ShareFetchRequest {
            group_id,
            member_id,
            share_session_epoch: ints[0],
            max_wait_ms: ints[1],
            min_bytes: ints[2],
            max_bytes: ints[3],
            max_records: ints[4],
            batch_size: ints[5],
            share_acquire_mode: if v2 { share_acquire_mode } else { 0 },
            is_renew_ack: v2 && is_renew_ack,
            topics: topics.into_iter().map(|(topic_id, partitions, tags)| FetchTopic {
                topic_id,
                partitions: partitions.into_iter().map(|(partition_index, batches, tags)| FetchPartition {
                    partition_index,
                    acknowledgement_batches: batches,
                    unknown_tagged_fields: tags,
                }).collect(),
                unknown_tagged_fields: tags,
            }).collect(),
            forgotten_topics_data: forgotten.into_iter().map(|(topic_id, partitions, tags)| ForgottenTopic {
                topic_id,
                partitions,
                unknown_tagged_fields: tags,
            }).collect(),
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn fetch_partition()(
        partition_index in any::<i32>(),
        codes in any::<[i16; 2]>(),
        messages in (opt_str(), opt_str()),
        current_leader in leader(),
        records in vec(any::<u8>(), 0..16).prop_map(Bytes::from),
        acquired in vec((any::<i64>(), any::<i64>(), any::<i16>(), tags()), 0..3),
        tags in tags(),
    ) -> fetch::PartitionData {
        fetch::PartitionData {
            partition_index,
            error_code: codes[0],
            error_message: messages.0,
            acknowledge_error_code: codes[1],
            acknowledge_error_message: messages.1,
            current_leader,
            records,
            acquired_records: acquired.into_iter().map(|(first_offset, last_offset, delivery_count, tags)| AcquiredRecords {
                first_offset,
                last_offset,
                delivery_count,
                unknown_tagged_fields: tags,
            }).collect(),
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn fetch_response()(
        throttle_time_ms in any::<i32>(),
        error_code in any::<i16>(),
        error_message in opt_str(),
        acquisition_lock_timeout_ms in any::<i32>(),
        responses in vec((uuid(), vec(fetch_partition(), 0..3), tags()), 0..3),
        node_endpoints in vec(endpoint(), 0..3),
        tags in tags(),
    ) -> ShareFetchResponse {
        ShareFetchResponse {
            throttle_time_ms,
            error_code,
            error_message,
            acquisition_lock_timeout_ms,
            responses: responses.into_iter().map(|(topic_id, partitions, tags)| ShareFetchableTopicResponse {
                topic_id,
                partitions,
                unknown_tagged_fields: tags,
            }).collect(),
            node_endpoints,
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn ack_request(version: i16)(
        group_id in proptest::option::of(str_bytes().prop_map(GroupId)),
        member_id in opt_str(),
        share_session_epoch in any::<i32>(),
        is_renew_ack in any::<bool>(),
        topics in vec((uuid(), vec((any::<i32>(), vec(ack_batch(), 0..3), tags()), 0..3), tags()), 0..3),
        tags in tags(),
    ) -> ShareAcknowledgeRequest {
        ShareAcknowledgeRequest {
            group_id,
            member_id,
            share_session_epoch,
            is_renew_ack: version >= 2 && is_renew_ack,
            topics: topics.into_iter().map(|(topic_id, partitions, tags)| AcknowledgeTopic {
                topic_id,
                partitions: partitions.into_iter().map(|(partition_index, batches, tags)| AcknowledgePartition {
                    partition_index,
                    acknowledgement_batches: batches,
                    unknown_tagged_fields: tags,
                }).collect(),
                unknown_tagged_fields: tags,
            }).collect(),
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn ack_response_of(version: i16)(
        throttle_time_ms in any::<i32>(),
        error_code in any::<i16>(),
        error_message in opt_str(),
        acquisition_lock_timeout_ms in any::<i32>(),
        responses in vec((uuid(), vec((any::<i32>(), any::<i16>(), opt_str(), leader(), tags()), 0..3), tags()), 0..3),
        node_endpoints in vec(endpoint(), 0..3),
        tags in tags(),
    ) -> ShareAcknowledgeResponse {
        ShareAcknowledgeResponse {
            throttle_time_ms,
            error_code,
            error_message,
            acquisition_lock_timeout_ms: if version >= 2 { acquisition_lock_timeout_ms } else { 0 },
            responses: responses.into_iter().map(|(topic_id, partitions, tags)| ShareAcknowledgeTopicResponse {
                topic_id,
                partitions: partitions.into_iter().map(|(partition_index, error_code, error_message, current_leader, tags)| ack::PartitionData {
                    partition_index,
                    error_code,
                    error_message,
                    current_leader,
                    unknown_tagged_fields: tags,
                }).collect(),
                unknown_tagged_fields: tags,
            }).collect(),
            node_endpoints,
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn describe_request_gen()(
        groups in vec((str_bytes(), proptest::option::of(vec((str_bytes(), vec(any::<i32>(), 0..3), tags()), 0..3)), tags()), 0..3),
        tags in tags(),
    ) -> DescribeShareGroupOffsetsRequest {
        DescribeShareGroupOffsetsRequest {
            groups: groups.into_iter().map(|(group_id, topics, tags)| DescribeShareGroupOffsetsRequestGroup {
                group_id: GroupId(group_id),
                topics: topics.map(|topics| topics.into_iter().map(|(name, partitions, tags)| DescribeShareGroupOffsetsRequestTopic {
                    topic_name: TopicName(name),
                    partitions,
                    unknown_tagged_fields: tags,
                }).collect()),
                unknown_tagged_fields: tags,
            }).collect(),
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn describe_partition(version: i16)(
        partition_index in any::<i32>(),
        start_offset in any::<i64>(),
        leader_epoch in any::<i32>(),
        lag in any::<i64>(),
        error_code in any::<i16>(),
        error_message in opt_str(),
        tags in tags(),
    ) -> DescribeShareGroupOffsetsResponsePartition {
        DescribeShareGroupOffsetsResponsePartition {
            partition_index,
            start_offset,
            leader_epoch,
            lag: if version >= 1 { lag } else { -1 },
            error_code,
            error_message,
            unknown_tagged_fields: tags,
        }
    }
}

prop_compose! {
    fn describe_response_gen(version: i16)(
        throttle_time_ms in any::<i32>(),
        groups in vec((str_bytes(), vec((str_bytes(), uuid(), vec(describe_partition(version), 0..3), tags()), 0..3), any::<i16>(), opt_str(), tags()), 0..3),
        tags in tags(),
    ) -> DescribeShareGroupOffsetsResponse {
        DescribeShareGroupOffsetsResponse {
            throttle_time_ms,
            groups: groups.into_iter().map(|(group_id, topics, error_code, error_message, tags)| DescribeShareGroupOffsetsResponseGroup {
                group_id: GroupId(group_id),
                topics: topics.into_iter().map(|(name, topic_id, partitions, tags)| DescribeShareGroupOffsetsResponseTopic {
                    topic_name: TopicName(name),
                    topic_id,
                    partitions,
                    unknown_tagged_fields: tags,
                }).collect(),
                error_code,
                error_message,
                unknown_tagged_fields: tags,
            }).collect(),
            unknown_tagged_fields: tags,
        }
    }
}

/// Encode, decode, re-encode; and the request through `decode_request`.
fn round_trip<T>(value: &T, version: i16) -> Result<(), TestCaseError>
where
    T: Encodable + Decodable + PartialEq + std::fmt::Debug,
{
    let bytes = encode(value, version);
    let back = decode::<T>(&bytes, version).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, value);
    prop_assert_eq!(encode(&back, version), bytes);
    Ok(())
}

fn request_round_trip<T>(key: ApiKey, value: &T, version: i16) -> Result<(), TestCaseError>
where
    T: Encodable + Decodable + HeaderVersion + PartialEq + std::fmt::Debug,
{
    round_trip(value, version)?;
    let decoded = decode_request(request_frame(key, version, value))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(decoded.api_key, key);
    prop_assert_eq!(decoded.version(), version);
    Ok(())
}

fn response_round_trip<T>(value: T, version: i16) -> Result<(), TestCaseError>
where
    T: Encodable + Decodable + PartialEq + std::fmt::Debug + Clone + Into<Response>,
{
    round_trip(&value, version)?;
    let mut buf = BytesMut::new();
    encode_response(&mut buf, 9, version, &value.clone().into())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut frame = buf.freeze();
    prop_assert_eq!(frame.get_i32() as usize, frame.len());
    prop_assert_eq!(frame.get_i32(), 9);
    prop_assert_eq!(frame.get_u8(), 0); // header v1 tagged fields
    let back = T::decode(&mut frame, version).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(back, value);
    prop_assert!(frame.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn share_fetch_requests_round_trip(
        (version, value) in (1i16..=2).prop_flat_map(|v| (Just(v), fetch_request(v)))
    ) {
        request_round_trip(ApiKey::ShareFetch, &value, version)?;
    }

    #[test]
    fn share_fetch_responses_round_trip(version in 1i16..=2, value in fetch_response()) {
        response_round_trip(value, version)?;
    }

    #[test]
    fn share_acknowledge_requests_round_trip(
        (version, value) in (1i16..=2).prop_flat_map(|v| (Just(v), ack_request(v)))
    ) {
        request_round_trip(ApiKey::ShareAcknowledge, &value, version)?;
    }

    #[test]
    fn share_acknowledge_responses_round_trip(
        (version, value) in (1i16..=2).prop_flat_map(|v| (Just(v), ack_response_of(v)))
    ) {
        response_round_trip(value, version)?;
    }

    #[test]
    fn describe_requests_round_trip(version in 0i16..=1, value in describe_request_gen()) {
        request_round_trip(ApiKey::DescribeShareGroupOffsets, &value, version)?;
    }

    #[test]
    fn describe_responses_round_trip(
        (version, value) in (0i16..=1).prop_flat_map(|v| (Just(v), describe_response_gen(v)))
    ) {
        response_round_trip(value, version)?;
    }
}

// ---- garbage never panics ----

/// Decodes `bytes` as every share message at `version`; only errors or values may come back.
fn decode_all(bytes: &[u8], version: i16) {
    let _ = decode::<ShareFetchRequest>(bytes, version);
    let _ = decode::<ShareFetchResponse>(bytes, version);
    let _ = decode::<ShareAcknowledgeRequest>(bytes, version);
    let _ = decode::<ShareAcknowledgeResponse>(bytes, version);
    let _ = decode::<DescribeShareGroupOffsetsRequest>(bytes, version);
    let _ = decode::<DescribeShareGroupOffsetsResponse>(bytes, version);
}

fn valid_encodings() -> Vec<(i16, Vec<u8>)> {
    vec![
        (2, fetch_request_v2().1),
        (2, fetch_response_v2().1),
        (2, ack_request_v2().1),
        (2, ack_response_bytes(2)),
        (1, ack_response_bytes(1)),
        (1, describe_request().1),
        (1, describe_response_bytes(1)),
        (0, describe_response_bytes(0)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(version in -1i16..=3, bytes in vec(any::<u8>(), 0..256)) {
        decode_all(&bytes, version);
    }

    #[test]
    fn mutated_encodings_never_panic(
        which in 0usize..8,
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let (version, mut bytes) = valid_encodings().swap_remove(which);
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        decode_all(&bytes, version);
        let cut = cut.index(bytes.len() + 1);
        decode_all(&bytes[..cut], version);
    }

    #[test]
    fn arbitrary_share_frames_never_panic(
        key in prop::sample::select(vec![78i16, 79, 90]),
        version in -1i16..=3,
        body in vec(any::<u8>(), 0..256),
    ) {
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&key.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&7i32.to_be_bytes());
        frame.extend_from_slice(&0i16.to_be_bytes()); // client id ""
        frame.extend_from_slice(&[0x00]); // header tagged fields
        frame.extend_from_slice(&body);
        let _ = decode_request(frame.freeze());
    }
}
