//! Spliced encoding: a Fetch or ShareFetch response encoded around placeholders, with each
//! hole filled by its records, is byte for byte the frame the plain encoder writes, at every
//! version; records that are not placeholders are copied as before.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, TopicName};
use proptest::collection::vec;
use proptest::prelude::*;
use shoal_protocol::share::share_fetch::{
    self as sf, AcquiredRecords, ShareFetchableTopicResponse,
};
use shoal_protocol::share::ShareFetchResponse;
use shoal_protocol::splice::{encode_response_spliced, placeholder, Hole};
use shoal_protocol::{encode_response, Response, StrBytes};
use uuid::Uuid;

#[global_allocator]
static ALLOCATOR: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// One partition's records: null, or bytes (sent as a placeholder or copied).
#[derive(Debug, Clone)]
enum Recs {
    Null,
    Inline(Vec<u8>),
    Spliced(Vec<u8>),
}

fn recs() -> impl Strategy<Value = Recs> {
    prop_oneof![
        1 => Just(Recs::Null),
        1 => vec(any::<u8>(), 0..300).prop_map(Recs::Inline),
        3 => vec(any::<u8>(), 0..3000).prop_map(Recs::Spliced),
    ]
}

fn real(r: &Recs) -> Option<Bytes> {
    match r {
        Recs::Null => None,
        Recs::Inline(b) | Recs::Spliced(b) => Some(Bytes::copy_from_slice(b)),
    }
}

fn standin(r: &Recs) -> Option<Bytes> {
    match r {
        Recs::Spliced(b) => Some(placeholder(b.len()).unwrap()),
        other => real(other),
    }
}

/// The frame with every hole filled, in order, by the spliced records' bytes.
fn assemble(head: &[u8], holes: &[Hole], fills: &[&[u8]]) -> Vec<u8> {
    assert_eq!(
        holes.len(),
        fills.len(),
        "one hole per spliced non-empty record set"
    );
    let mut out = Vec::new();
    let mut at = 0;
    for (hole, fill) in holes.iter().zip(fills) {
        assert_eq!(hole.len, fill.len());
        out.extend_from_slice(&head[at..hole.at]);
        out.extend_from_slice(fill);
        at = hole.at;
    }
    out.extend_from_slice(&head[at..]);
    out
}

fn fills(parts: &[Vec<Recs>]) -> Vec<&[u8]> {
    parts
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Recs::Spliced(b) if !b.is_empty() => Some(b.as_slice()),
            _ => None,
        })
        .collect()
}

fn fetch_response(parts: &[Vec<Recs>], with: fn(&Recs) -> Option<Bytes>, v: i16) -> Response {
    let topics = parts
        .iter()
        .enumerate()
        .map(|(t, ps)| {
            let partitions = ps
                .iter()
                .enumerate()
                .map(|(p, r)| {
                    PartitionData::default()
                        .with_partition_index(p as i32)
                        .with_high_watermark(1000 + p as i64)
                        .with_last_stable_offset(900)
                        .with_log_start_offset(3)
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                            .with_producer_id(ProducerId(7))
                            .with_first_offset(t as i64)]))
                        .with_records(with(r))
                })
                .collect();
            let topic = FetchableTopicResponse::default().with_partitions(partitions);
            if v >= 13 {
                topic.with_topic_id(Uuid::from_u128(t as u128 + 1))
            } else {
                topic.with_topic(TopicName(StrBytes::from(format!("topic-{t}"))))
            }
        })
        .collect();
    FetchResponse::default()
        .with_session_id(if v >= 7 { 5 } else { 0 })
        .with_responses(topics)
        .into()
}

fn share_fetch_response(parts: &[Vec<Recs>], with: fn(&Recs) -> Option<Bytes>) -> Response {
    ShareFetchResponse {
        acquisition_lock_timeout_ms: 30_000,
        responses: parts
            .iter()
            .enumerate()
            .map(|(t, ps)| ShareFetchableTopicResponse {
                topic_id: Uuid::from_u128(t as u128 + 1),
                partitions: ps
                    .iter()
                    .enumerate()
                    .map(|(p, r)| sf::PartitionData {
                        partition_index: p as i32,
                        records: with(r).unwrap_or_default(),
                        acquired_records: vec![AcquiredRecords {
                            first_offset: 1,
                            last_offset: 9,
                            delivery_count: 1,
                            ..Default::default()
                        }],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
    .into()
}

fn check(plain: &Response, spliced: &Response, version: i16, fills: &[&[u8]]) {
    let mut want = BytesMut::new();
    encode_response(&mut want, 42, version, plain).unwrap();
    let mut head = BytesMut::from(&b"previous frame"[..]);
    let mut holes = Vec::new();
    encode_response_spliced(&mut head, 42, version, spliced, &mut holes).unwrap();
    assert_eq!(
        &head[..14],
        b"previous frame",
        "appends after what is there"
    );
    let holes: Vec<Hole> = holes
        .iter()
        .map(|h| Hole {
            at: h.at - 14,
            len: h.len,
        })
        .collect();
    let got = assemble(&head[14..], &holes, fills);
    assert_eq!(got, want.to_vec());
}

proptest! {
    #[test]
    fn fetch_frames_match_the_plain_encoding(
        parts in vec(vec(recs(), 0..4), 0..4),
        version in 4i16..=17,
    ) {
        let plain = fetch_response(&parts, real, version);
        let spliced = fetch_response(&parts, standin, version);
        check(&plain, &spliced, version, &fills(&parts));
    }

    #[test]
    fn share_fetch_frames_match_the_plain_encoding(
        parts in vec(vec(recs(), 0..4), 0..4),
        version in 1i16..=2,
    ) {
        // ShareFetch records are not nullable: null stands for empty there.
        let plain = share_fetch_response(&parts, real);
        let spliced = share_fetch_response(&parts, standin);
        check(&plain, &spliced, version, &fills(&parts));
    }
}

#[test]
fn a_failed_encoding_leaves_buffer_and_holes_as_they_were() {
    // A preferred read replica cannot be sent below v11: the second partition fails to encode
    // after the first has left a hole.
    let response: Response = FetchResponse::default()
        .with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                PartitionData::default()
                    .with_preferred_read_replica(BrokerId(-1))
                    .with_records(placeholder(10)),
                PartitionData::default().with_preferred_read_replica(BrokerId(5)),
            ])])
        .into();
    let mut buf = BytesMut::from(&b"kept"[..]);
    let mut holes = vec![Hole { at: 1, len: 2 }];
    assert!(encode_response_spliced(&mut buf, 1, 4, &response, &mut holes).is_err());
    assert_eq!(&buf[..], b"kept");
    assert_eq!(holes, vec![Hole { at: 1, len: 2 }]);
}

#[test]
fn placeholders_have_a_bound() {
    let max = shoal_protocol::splice::PLACEHOLDER_BYTES_MAX;
    assert_eq!(placeholder(max).map(|b| b.len()), Some(max));
    assert!(placeholder(max + 1).is_none());
}
