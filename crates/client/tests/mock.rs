//! The cluster layer against a scripted loopback broker: an api the broker lacks is refused
//! before anything is sent, and hostile responses (oversized frames, garbage, a wrong
//! correlation id, an array claiming billions of elements) are typed errors, never a panic or
//! an abort, after which the client reconnects. Requests are pipelined: several are in flight
//! on one connection, and answers are matched by correlation id.

mod common;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, BytesMut};
use common::bounded;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, FindCoordinatorRequest, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::{ClientConfig, Cluster, CoordinatorType, Error, ErrorClass};
use shoal_protocol::response::encode_response;
use shoal_protocol::{peek_header, ApiKey, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// The hostile-array case needs it: kafka-protocol sizes arrays from the wire (decision 0002).
#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// How the mock answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Normal,
    /// A size prefix of 2 GiB - 1.
    HugeFrame,
    /// A negative size prefix.
    NegativeFrame,
    /// The right correlation id followed by bytes that do not decode.
    Garbage,
    WrongCorrelationId,
    /// ApiVersions v3 whose api_keys array claims 2^32 - 2 elements.
    HostileArray,
}

#[derive(Clone, Default)]
struct Script {
    /// Api keys of every request received, in order.
    seen: Arc<Mutex<Vec<i16>>>,
    /// Answers for Metadata requests, then Normal.
    metadata: Arc<Mutex<VecDeque<Answer>>>,
    /// Answers for ApiVersions requests, then Normal.
    api_versions: Arc<Mutex<VecDeque<Answer>>>,
    /// When above 1 (after the bootstrap): Metadata requests are held until this many have
    /// arrived on the connection (or, once lowered, until the next one), then answered
    /// newest first.
    hold_metadata: Arc<Mutex<usize>>,
}

async fn start_mock(script: Script) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, addr, script.clone()));
        }
    });
    addr
}

async fn serve(mut stream: TcpStream, addr: SocketAddr, script: Script) {
    let mut held: Vec<BytesMut> = Vec::new();
    loop {
        let mut size = [0u8; 4];
        if stream.read_exact(&mut size).await.is_err() {
            return;
        }
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        if stream.read_exact(&mut frame).await.is_err() {
            return;
        }
        let header = peek_header(&frame).unwrap();
        script.seen.lock().unwrap().push(header.api_key);
        let (answer, response): (Answer, Response) = match header.api_key {
            18 => (
                next(&script.api_versions),
                ApiVersionsResponse::default()
                    .with_api_keys(vec![
                        range(ApiKey::ApiVersions, 0, 3),
                        range(ApiKey::Metadata, 0, 12),
                    ])
                    .into(),
            ),
            3 => (
                next(&script.metadata),
                MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(addr.port() as i32)])
                    .with_cluster_id(Some(StrBytes::from_static_str("mock")))
                    .with_controller_id(BrokerId(1))
                    .into(),
            ),
            _ => return, // not advertised: a real broker closes the connection
        };
        let mut out = BytesMut::new();
        match answer {
            Answer::Normal => encode_response(
                &mut out,
                header.correlation_id,
                header.api_version,
                &response,
            )
            .unwrap(),
            Answer::HugeFrame => out.put_i32(i32::MAX),
            Answer::NegativeFrame => out.put_i32(-4),
            Answer::Garbage => {
                out.put_i32(4 + 6);
                out.put_i32(header.correlation_id);
                out.put_slice(&[0xff; 6]);
            }
            Answer::WrongCorrelationId => encode_response(
                &mut out,
                header.correlation_id + 1000,
                header.api_version,
                &response,
            )
            .unwrap(),
            Answer::HostileArray => {
                // Response header v0, error_code 0, compact array length varint 2^32 - 1.
                let body = [0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
                out.put_i32(4 + body.len() as i32);
                out.put_i32(header.correlation_id);
                out.put_slice(&body);
            }
        }
        let hold = *script.hold_metadata.lock().unwrap();
        if header.api_key == 3 && (hold > 1 || !held.is_empty()) {
            held.push(out);
            if held.len() < hold {
                continue;
            }
            for out in held.drain(..).rev() {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
            }
            continue;
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn next(answers: &Mutex<VecDeque<Answer>>) -> Answer {
    answers
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Answer::Normal)
}

fn range(api: ApiKey, min: i16, max: i16) -> ApiVersion {
    ApiVersion::default()
        .with_api_key(api as i16)
        .with_min_version(min)
        .with_max_version(max)
}

fn config(addr: SocketAddr, extra: &[(&str, &str)]) -> ClientConfig {
    let bootstrap = addr.to_string();
    let mut props = vec![
        ("bootstrap.servers", bootstrap.as_str()),
        ("request.timeout.ms", "2000"),
        ("default.api.timeout.ms", "5000"),
        ("retry.backoff.ms", "10"),
        ("retry.backoff.max.ms", "50"),
        ("reconnect.backoff.ms", "10"),
        ("reconnect.backoff.max.ms", "50"),
    ];
    props.extend_from_slice(extra);
    ClientConfig::from_properties(props).unwrap()
}

#[tokio::test]
async fn an_api_the_broker_lacks_is_refused_before_anything_is_sent() {
    bounded(30, async {
        let script = Script::default();
        let addr = start_mock(script.clone()).await;
        let cluster = Cluster::connect(config(addr, &[])).await.unwrap();
        let err = cluster
            .send(1, &FindCoordinatorRequest::default())
            .await
            .unwrap_err();
        match &err {
            Error::UnsupportedVersion {
                node_id: 1,
                api: ApiKey::FindCoordinator,
                broker_range: None,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(err.class(), ErrorClass::Fatal);
        // Fatal: no retry loop, no lookup sent either.
        let err = cluster
            .coordinator(CoordinatorType::Group, "g")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
        assert_eq!(cluster.stats().retries, 0);
        let seen = script.seen.lock().unwrap().clone();
        assert!(
            !seen.contains(&(ApiKey::FindCoordinator as i16)),
            "{seen:?}"
        );
        // ApiVersions and Metadata on the bootstrap connection, ApiVersions on broker 1's.
        assert_eq!(seen, vec![18, 3, 18]);
        cluster.close().await;
    })
    .await;
}

#[tokio::test]
async fn hostile_responses_are_typed_errors_and_the_client_reconnects() {
    bounded(30, async {
        let script = Script::default();
        script.metadata.lock().unwrap().extend([
            Answer::Normal, // bootstrap
            Answer::HugeFrame,
            Answer::NegativeFrame,
            Answer::Garbage,
            Answer::WrongCorrelationId,
        ]);
        let addr = start_mock(script.clone()).await;
        let cluster = Cluster::connect(config(addr, &[])).await.unwrap();
        let request = MetadataRequest::default().with_topics(Some(vec![]));

        let err = cluster.send(1, &request).await.unwrap_err();
        assert!(
            matches!(err, Error::ResponseTooLarge { size, max, .. } if size == i32::MAX as usize && max == 100 * 1024 * 1024),
            "{err:?}"
        );
        let err = cluster.send(1, &request).await.unwrap_err();
        match &err {
            Error::MalformedResponse {
                reason,
                api: ApiKey::Metadata,
                ..
            } => assert!(reason.contains("negative"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let err = cluster.send(1, &request).await.unwrap_err();
        assert!(matches!(err, Error::MalformedResponse { api: ApiKey::Metadata, .. }), "{err:?}");
        let err = cluster.send(1, &request).await.unwrap_err();
        match &err {
            Error::MalformedResponse { reason, .. } => assert!(reason.contains("correlation"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert!(err.is_retriable());
        // Each failure dropped the connection; the next request connects again and succeeds.
        let opened = cluster.stats().connections_opened;
        cluster.send(1, &request).await.unwrap();
        assert_eq!(cluster.stats().connections_opened, opened + 1);
        cluster.close().await;
    })
    .await;
}

#[tokio::test]
async fn an_array_claiming_billions_of_elements_is_a_decoding_error() {
    bounded(30, async {
        let script = Script::default();
        script
            .api_versions
            .lock()
            .unwrap()
            .extend([Answer::HostileArray, Answer::HostileArray]);
        let addr = start_mock(script.clone()).await;
        // Both bootstrap attempts get the hostile answer; the third connects.
        let cluster = Cluster::connect(config(addr, &[])).await.unwrap();
        let seen = script.seen.lock().unwrap().clone();
        assert_eq!(seen, vec![18, 18, 18, 3], "{seen:?}");
        cluster.close().await;

        // With no retries left, the error says why.
        script
            .api_versions
            .lock()
            .unwrap()
            .push_back(Answer::HostileArray);
        let err = Cluster::connect(config(addr, &[("retries", "0")]))
            .await
            .unwrap_err();
        match err {
            Error::NoBrokerAvailable { last } => {
                assert!(
                    matches!(
                        *last,
                        Error::MalformedResponse {
                            api: ApiKey::ApiVersions,
                            ..
                        }
                    ),
                    "{last:?}"
                )
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn requests_on_one_connection_are_in_flight_together_and_matched_by_correlation_id() {
    bounded(30, async {
        let script = Script::default();
        let addr = start_mock(script.clone()).await;
        let cluster = Cluster::connect(config(addr, &[])).await.unwrap();
        let request = MetadataRequest::default().with_topics(Some(vec![]));
        cluster.send(1, &request).await.unwrap(); // broker 1's connection is open
        let opened = cluster.stats().connections_opened;

        // The mock answers nothing until three requests are in: one at a time, this would
        // time out. It answers newest first; each caller still gets its own answer.
        *script.hold_metadata.lock().unwrap() = 3;
        let (a, b, c) = tokio::join!(
            cluster.send(1, &request),
            cluster.send(1, &request),
            cluster.send(1, &request)
        );
        for r in [a, b, c] {
            assert_eq!(r.unwrap().brokers.len(), 1);
        }
        assert_eq!(cluster.stats().connections_opened, opened);

        // A caller that gives up once its request is written leaves the connection whole:
        // its answer, when it comes, is read and dropped.
        *script.hold_metadata.lock().unwrap() = 2;
        let abandoned = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            cluster.send(1, &request),
        )
        .await;
        assert!(abandoned.is_err(), "held by the mock");
        *script.hold_metadata.lock().unwrap() = 0;
        cluster.send(1, &request).await.unwrap();
        cluster.send(1, &request).await.unwrap();
        assert_eq!(cluster.stats().connections_opened, opened);
        cluster.close().await;
    })
    .await;
}
