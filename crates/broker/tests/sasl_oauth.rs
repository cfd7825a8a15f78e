//! SASL/OAUTHBEARER on a SASL_PLAINTEXT listener, raw protocol: a signed token authenticates
//! as `User:<sub>` with a session as long as the token's remaining life capped by
//! `connections.max.reauth.ms`; an invalid one gets the error challenge, then
//! SASL_AUTHENTICATION_FAILED after the client's `\x01`, then the close; re-authentication with
//! a new token for the same subject renews the session, another subject is refused.
//!
//! The EC key is generated here with `ring`, its key set written to a temp file.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::TestBroker;
use kafka_protocol::messages::{
    MetadataRequest, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use shoal_client::Connection;
use shoal_core::sasl::oauthbearer::base64url;

const TIMEOUT: Duration = Duration::from_secs(60);
const AUDIENCE: &str = "kafka-broker";
const ISSUER: &str = "https://issuer.test";
/// `listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms`.
const MAX_REAUTH_MS: i64 = 5000;

struct Signer(EcdsaKeyPair);

impl Signer {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        Self(
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                .unwrap(),
        )
    }

    fn jwks(&self) -> String {
        let point = self.0.public_key().as_ref();
        format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"k1","use":"sig","x":"{}","y":"{}"}}]}}"#,
            base64url(&point[1..33]),
            base64url(&point[33..])
        )
    }

    /// A token for `sub` that expires `life_s` seconds from now.
    fn token(&self, sub: &str, life_s: i64) -> String {
        let now = now_s();
        let claims = format!(
            r#"{{"sub":"{sub}","aud":"{AUDIENCE}","iss":"{ISSUER}","iat":{now},"exp":{}}}"#,
            now + life_s
        );
        let input = format!(
            "{}.{}",
            base64url(br#"{"alg":"ES256","kid":"k1"}"#),
            base64url(claims.as_bytes())
        );
        let sig = self.0.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", base64url(sig.as_ref()))
    }
}

fn now_s() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

fn client_first(token: &str) -> Vec<u8> {
    format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
}

async fn start(dir: &std::path::Path, signer: &Signer) -> (TestBroker, SocketAddr) {
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, signer.jwks()).unwrap();
    let url = format!("file://{}", jwks.display());
    let reauth = MAX_REAUTH_MS.to_string();
    let (broker, addrs) = TestBroker::start_listeners(
        &dir.join("data"),
        &[
            (
                "listeners",
                "ADMIN://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            ),
            (
                "listener.security.protocol.map",
                "ADMIN:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            ),
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "listener.name.sasl_plaintext.sasl.oauthbearer.jwks.endpoint.url",
                &url,
            ),
            ("sasl.oauthbearer.expected.audience", AUDIENCE),
            ("sasl.oauthbearer.expected.issuer", ISSUER),
            ("connection.failed.authentication.delay.ms", "100"),
            (
                "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms",
                &reauth,
            ),
        ],
    )
    .await;
    (broker, addrs[1])
}

async fn with_timeout<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TIMEOUT, f)
        .await
        .expect("test timed out")
}

async fn handshake(conn: &mut Connection) -> i16 {
    conn.request(
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("OAUTHBEARER")),
    )
    .await
    .unwrap()
    .error_code
}

async fn authenticate(conn: &mut Connection, token: &[u8]) -> SaslAuthenticateResponse {
    conn.request(
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.to_vec().into()),
    )
    .await
    .unwrap()
}

async fn metadata_works(conn: &mut Connection) {
    let response = conn
        .request(12, &MetadataRequest::default().with_topics(None))
        .await
        .unwrap();
    assert_eq!(response.brokers.len(), 1);
}

#[tokio::test]
async fn a_signed_token_authenticates_for_its_remaining_life_capped() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::new();
        let (broker, sasl) = start(dir.path(), &signer).await;
        // A long-lived token: the session is capped by connections.max.reauth.ms.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn).await, 0);
        let answer = authenticate(&mut conn, &client_first(&signer.token("alice", 600))).await;
        assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
        assert!(answer.auth_bytes.is_empty());
        assert_eq!(answer.session_lifetime_ms, MAX_REAUTH_MS);
        metadata_works(&mut conn).await;
        // A token with 2 s left: the session ends with it (exp is whole seconds).
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn).await, 0);
        let answer = authenticate(&mut conn, &client_first(&signer.token("alice", 2))).await;
        assert_eq!(answer.error_code, 0);
        assert!(
            (1..=2000).contains(&answer.session_lifetime_ms),
            "{}",
            answer.session_lifetime_ms
        );
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn an_invalid_token_gets_the_challenge_then_fails_and_closes() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::new();
        let (broker, sasl) = start(dir.path(), &signer).await;
        let stranger = Signer::new();
        for token in [
            signer.token("alice", -120),
            stranger.token("alice", 600),
            format!(
                "{}.{}.",
                base64url(br#"{"alg":"none"}"#),
                base64url(br#"{"sub":"alice"}"#)
            ),
        ] {
            let mut conn = Connection::connect(sasl).await.unwrap();
            assert_eq!(handshake(&mut conn).await, 0);
            let challenge = authenticate(&mut conn, &client_first(&token)).await;
            assert_eq!(challenge.error_code, 0, "a challenge, not an error");
            assert_eq!(&challenge.auth_bytes[..], br#"{"status":"invalid_token"}"#);
            let failed = authenticate(&mut conn, b"\x01").await;
            assert_eq!(failed.error_code, 58, "SASL_AUTHENTICATION_FAILED");
            assert_eq!(
                failed.error_message.as_deref(),
                Some(r#"{"status":"invalid_token"}"#)
            );
            assert!(conn.is_closed_by_peer().await);
        }
        // A message that is no OAUTHBEARER message at all: the usual failure, at once.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn).await, 0);
        let failed = authenticate(&mut conn, b"\0alice\0secret").await;
        assert_eq!(failed.error_code, 58);
        assert!(conn.is_closed_by_peer().await);
        // The broker serves on.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn).await, 0);
        let answer = authenticate(&mut conn, &client_first(&signer.token("alice", 600))).await;
        assert_eq!(answer.error_code, 0);
        metadata_works(&mut conn).await;
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn reauthentication_takes_a_new_token_for_the_same_subject_only() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::new();
        let (broker, sasl) = start(dir.path(), &signer).await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn).await, 0);
        let answer = authenticate(&mut conn, &client_first(&signer.token("alice", 600))).await;
        assert_eq!(answer.error_code, 0);
        // A new token for alice renews the session.
        assert_eq!(handshake(&mut conn).await, 0);
        let answer = authenticate(&mut conn, &client_first(&signer.token("alice", 900))).await;
        assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
        assert_eq!(answer.session_lifetime_ms, MAX_REAUTH_MS);
        metadata_works(&mut conn).await;
        // Kafka allows one re-authentication a second at most.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(handshake(&mut conn).await, 0);
        let answer = authenticate(&mut conn, &client_first(&signer.token("mallory", 600))).await;
        assert_eq!(answer.error_code, 58);
        assert_eq!(
            answer.error_message.as_deref(),
            Some("Cannot change principals during re-authentication from User.alice: User.mallory")
        );
        assert!(conn.is_closed_by_peer().await);
        broker.stop().await;
    })
    .await;
}
