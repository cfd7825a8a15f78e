//! ApiVersions tells the truth: every version of every advertised api key is served.
//!
//! The test walks the table the broker itself advertises, so a key or version added to it later
//! is covered without touching this file: for each one it sends a request with default fields
//! encoded at that version and requires an answer at that version that decodes completely,
//! with the connection still open. A version the codec cannot decode (kafka-protocol 0.18 lists
//! OffsetFetch / OffsetCommit v10 but decodes them only to v9) fails here.

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::TestBroker;
use shoal_client::Connection;
use shoal_protocol::messages::{ApiKey, ApiVersionsRequest};
use shoal_protocol::request::{encode_request, Request};
use shoal_protocol::response::{decode_response, Response};

/// A bound on one exchange, so that a request the broker never answers fails the test instead
/// of hanging it (not a performance threshold).
const EXCHANGE_BOUND: Duration = Duration::from_secs(30);

/// The request sent for `api_key` at `version`: every field at its default, except where a
/// default would ask for no answer at all.
fn minimal_request(api_key: ApiKey) -> Request {
    let mut request = Request::default_for(api_key)
        .unwrap_or_else(|| panic!("{api_key:?} is advertised but has no codec"));
    if let Request::Produce(produce) = &mut request {
        // acks=0 gets no response by design.
        produce.acks = -1;
        produce.timeout_ms = 1000;
    }
    request
}

async fn exchange(
    conn: &mut Connection,
    correlation_id: i32,
    version: i16,
    request: &Request,
) -> Result<Response, String> {
    let api_key = request.api_key();
    let mut buf = BytesMut::new();
    encode_request(&mut buf, correlation_id, version, request)
        .map_err(|e| format!("encode: {e}"))?;
    let frame = tokio::time::timeout(EXCHANGE_BOUND, async {
        conn.send_frame(&buf).await?;
        conn.read_frame().await
    })
    .await
    .map_err(|_| "no answer".to_string())?
    .map_err(|e| format!("connection: {e}"))?;
    let (correlation, response) =
        decode_response(api_key, version, frame).map_err(|e| format!("response: {e}"))?;
    if correlation != correlation_id {
        return Err(format!(
            "correlation id {correlation}, sent {correlation_id}"
        ));
    }
    if response.api_key() != api_key {
        return Err(format!("answered as {:?}", response.api_key()));
    }
    Ok(response)
}

#[tokio::test]
async fn every_advertised_version_of_every_api_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let advertised = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(advertised.error_code, 0);
    assert!(advertised.api_keys.len() > 30);

    let mut failures = Vec::new();
    let mut exchanges = 0;
    let mut correlation_id = 100;
    for key in &advertised.api_keys {
        let api_key = ApiKey::try_from(key.api_key)
            .unwrap_or_else(|_| panic!("unknown api key {} advertised", key.api_key));
        let request = minimal_request(api_key);
        for version in key.min_version..=key.max_version {
            correlation_id += 1;
            if api_key == ApiKey::Produce
                && version < shoal_protocol::api::codec_versions(api_key).unwrap().min
            {
                // Advertised from v0 as Kafka does (KAFKA-18659) but refused: the broker closes
                // the connection, as Kafka does for a version it does not serve.
                let mut buf = BytesMut::new();
                let header = kafka_protocol::messages::RequestHeader::default()
                    .with_request_api_key(0)
                    .with_request_api_version(version)
                    .with_correlation_id(correlation_id);
                kafka_protocol::protocol::Encodable::encode(&header, &mut buf, 1).unwrap();
                conn.send_frame(&buf).await.unwrap();
                assert!(
                    tokio::time::timeout(EXCHANGE_BOUND, conn.is_closed_by_peer())
                        .await
                        .unwrap(),
                    "Produce v{version} must be refused"
                );
                conn = broker.connect().await;
                continue;
            }
            exchanges += 1;
            if let Err(e) = exchange(&mut conn, correlation_id, version, &request).await {
                failures.push(format!("{api_key:?} v{version}: {e}"));
                conn = broker.connect().await;
            }
        }
    }
    assert!(failures.is_empty(), "not served:\n{}", failures.join("\n"));
    assert!(exchanges > 150, "only {exchanges} versions tried");
    broker.stop().await;
}

/// The same walk with the share RPCs switched off by `share.version=0`: they are no longer
/// advertised, and a request for one still gets an answer (UNSUPPORTED_VERSION inside it) rather
/// than a closed connection, as in Kafka.
#[tokio::test]
async fn share_apis_switched_off_are_not_advertised_but_still_answered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let update =
        kafka_protocol::messages::UpdateFeaturesRequest::default().with_feature_updates(vec![
            kafka_protocol::messages::update_features_request::FeatureUpdateKey::default()
                .with_feature(kafka_protocol::protocol::StrBytes::from_static_str(
                    "share.version",
                ))
                .with_max_version_level(0)
                .with_upgrade_type(2),
        ]);
    let answer = conn.request(1, &update).await.unwrap();
    assert_eq!(answer.error_code, 0, "{answer:?}");
    let advertised = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    for key in shoal_broker::api_table::SHARE_APIS {
        assert!(
            !advertised.api_keys.iter().any(|k| k.api_key == *key as i16),
            "{key:?} advertised with share.version=0"
        );
        let range = shoal_protocol::api::codec_versions(*key).unwrap();
        let response = exchange(&mut conn, 7, range.max, &minimal_request(*key))
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(response.api_key(), *key);
    }
    broker.stop().await;
}
