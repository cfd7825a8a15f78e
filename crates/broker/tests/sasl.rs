//! SASL on a SASL_PLAINTEXT listener, over TCP, as Kafka's clients meet it: SaslHandshake and
//! SaslAuthenticate with PLAIN and SCRAM-SHA-256/512, SCRAM credentials managed by
//! AlterUserScramCredentials / DescribeUserScramCredentials and kept across a restart, and every
//! way to get it wrong — a wrong password, an unknown mechanism, a request before
//! authentication, garbage and truncated frames — each a clean error on that one connection,
//! the broker serving the next. A failed authentication is answered and closed only after
//! `connection.failed.authentication.delay.ms`, without holding up other connections.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::sasl::{read_response, request_frame};
use common::TestBroker;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, ApiVersionsRequest, DescribeUserScramCredentialsRequest,
    MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_core::sasl::scram::{ScramClient, ScramMechanism};

const TIMEOUT: Duration = Duration::from_secs(30);
const FAILED_DELAY_MS: u64 = 300;
const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_alice="alice-secret";"#;

/// A broker with a PLAINTEXT listener (for administration) and a SASL_PLAINTEXT one.
async fn start(dir: &std::path::Path) -> (TestBroker, SocketAddr, SocketAddr) {
    let delay = FAILED_DELAY_MS.to_string();
    let (broker, addrs) = TestBroker::start_listeners(
        dir,
        &[
            (
                "listeners",
                "ADMIN://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            ),
            (
                "listener.security.protocol.map",
                "ADMIN:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            ),
            (
                "sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            ),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
            ("connection.failed.authentication.delay.ms", &delay),
            ("sasl.server.max.receive.size", "4096"),
        ],
    )
    .await;
    (broker, addrs[0], addrs[1])
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Creates `user`'s credential for `mechanism` as a client does: the salted password only.
async fn set_password(admin: SocketAddr, user: &str, mechanism: ScramMechanism, password: &str) {
    let mut conn = Connection::connect(admin).await.unwrap();
    let salt = b"a-salt-of-16-bytes";
    let salted = mechanism.salted_password(password.as_bytes(), salt, 4096);
    let response = conn
        .request(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                ScramCredentialUpsertion::default()
                    .with_name(s(user))
                    .with_mechanism(mechanism.code())
                    .with_iterations(4096)
                    .with_salt(salt.to_vec().into())
                    .with_salted_password(salted.into()),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(response.results.len(), 1);
    assert_eq!(
        response.results[0].error_code, 0,
        "{:?}",
        response.results[0]
    );
}

async fn handshake(conn: &mut Connection, version: i16, mechanism: &str) -> (i16, Vec<String>) {
    let response = conn
        .request(
            version,
            &SaslHandshakeRequest::default().with_mechanism(s(mechanism)),
        )
        .await
        .unwrap();
    let offered = response.mechanisms.iter().map(|m| m.to_string()).collect();
    (response.error_code, offered)
}

async fn authenticate(conn: &mut Connection, token: Vec<u8>) -> (i16, Vec<u8>) {
    let response = conn
        .request(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(token.into()),
        )
        .await
        .unwrap();
    (response.error_code, response.auth_bytes.to_vec())
}

/// A full SCRAM exchange; the error code of the last SaslAuthenticate.
async fn scram(
    addr: SocketAddr,
    mechanism: ScramMechanism,
    user: &str,
    password: &str,
) -> (Connection, i16) {
    let mut conn = Connection::connect(addr).await.unwrap();
    assert_eq!(handshake(&mut conn, 1, mechanism.name()).await.0, 0);
    let mut client = ScramClient::new(mechanism, user, password, "a-client-nonce");
    let (code, server_first) = authenticate(&mut conn, client.client_first()).await;
    if code != 0 {
        return (conn, code);
    }
    let client_final = client.server_first(&server_first).unwrap();
    let (code, server_final) = authenticate(&mut conn, client_final).await;
    if code == 0 {
        client.server_final(&server_final).unwrap();
    }
    (conn, code)
}

async fn metadata_works(conn: &mut Connection) {
    let response = conn
        .request(12, &MetadataRequest::default().with_topics(None))
        .await
        .unwrap();
    assert_eq!(response.brokers.len(), 1);
}

async fn with_timeout<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TIMEOUT, f)
        .await
        .expect("test timed out")
}

#[tokio::test]
async fn scram_users_authenticate_and_are_served() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, sasl) = start(dir.path()).await;
        for mechanism in ScramMechanism::ALL {
            set_password(admin, "carol", mechanism, "carol-pw").await;
            let (mut conn, code) = scram(sasl, mechanism, "carol", "carol-pw").await;
            assert_eq!(code, 0, "{mechanism:?}");
            metadata_works(&mut conn).await;
            // After authentication the SASL APIs are out of place.
            assert_eq!(handshake(&mut conn, 1, "PLAIN").await.0, 34);
        }
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn plain_users_come_from_the_listeners_jaas_configuration() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _, sasl) = start(dir.path()).await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        // ApiVersions is served before the handshake, as Kafka clients send it first.
        let versions = conn
            .request(3, &ApiVersionsRequest::default())
            .await
            .unwrap();
        assert_eq!(versions.error_code, 0);
        let (code, offered) = handshake(&mut conn, 1, "PLAIN").await;
        assert_eq!(code, 0);
        assert_eq!(offered, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
        let (code, _) = authenticate(&mut conn, b"\0alice\0alice-secret".to_vec()).await;
        assert_eq!(code, 0);
        metadata_works(&mut conn).await;

        // Handshake v0: the token goes as a bare frame and comes back as one.
        let mut legacy = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut legacy, 0, "PLAIN").await.0, 0);
        legacy.send_frame(b"\0alice\0alice-secret").await.unwrap();
        assert!(legacy.read_frame().await.unwrap().is_empty());
        metadata_works(&mut legacy).await;
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_wrong_password_fails_after_the_delay_and_closes_the_connection() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, sasl) = start(dir.path()).await;
        set_password(admin, "carol", ScramMechanism::Sha512, "carol-pw").await;
        let started = Instant::now();
        let (mut conn, code) = scram(sasl, ScramMechanism::Sha512, "carol", "wrong").await;
        assert_eq!(code, 58, "SASL_AUTHENTICATION_FAILED");
        assert!(started.elapsed() >= Duration::from_millis(FAILED_DELAY_MS));
        assert!(conn.is_closed_by_peer().await);
        // An unknown user fails the same way, at the first message.
        let (mut conn, code) = scram(sasl, ScramMechanism::Sha512, "nobody", "x").await;
        assert_eq!(code, 58);
        assert!(conn.is_closed_by_peer().await);
        let mut plain = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut plain, 1, "PLAIN").await.0, 0);
        let response = plain
            .request(
                1,
                &SaslAuthenticateRequest::default()
                    .with_auth_bytes(b"\0alice\0nope".to_vec().into()),
            )
            .await
            .unwrap();
        assert_eq!(response.error_code, 58);
        assert_eq!(
            response.error_message.as_deref(),
            Some(
                "Authentication failed during authentication due to invalid credentials with \
                 SASL mechanism PLAIN"
            )
        );
        assert!(plain.is_closed_by_peer().await);
        // The right password still works.
        let (mut conn, code) = scram(sasl, ScramMechanism::Sha512, "carol", "carol-pw").await;
        assert_eq!(code, 0);
        metadata_works(&mut conn).await;
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _, sasl) = start(dir.path()).await;
        for mechanism in ["GSSAPI", "OAUTHBEARER", "scram-sha-512", ""] {
            let mut conn = Connection::connect(sasl).await.unwrap();
            let (code, offered) = handshake(&mut conn, 1, mechanism).await;
            assert_eq!(code, 33, "UNSUPPORTED_SASL_MECHANISM for {mechanism:?}");
            assert_eq!(offered, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
            assert!(conn.is_closed_by_peer().await);
        }
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn nothing_is_served_before_authentication() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, sasl) = start(dir.path()).await;
        // A request other than ApiVersions or SaslHandshake first: closed, unanswered.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert!(conn
            .request(12, &MetadataRequest::default().with_topics(None))
            .await
            .is_err());
        // After the handshake, anything but SaslAuthenticate.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn, 1, "PLAIN").await.0, 0);
        assert!(conn
            .request(12, &MetadataRequest::default().with_topics(None))
            .await
            .is_err());
        // Half-way through SCRAM, likewise.
        set_password(admin, "carol", ScramMechanism::Sha256, "pw").await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn, 1, "SCRAM-SHA-256").await.0, 0);
        let mut client = ScramClient::new(ScramMechanism::Sha256, "carol", "pw", "n0nce");
        assert_eq!(authenticate(&mut conn, client.client_first()).await.0, 0);
        assert!(conn
            .request(12, &MetadataRequest::default().with_topics(None))
            .await
            .is_err());
        // SaslAuthenticate without a handshake.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert!(conn
            .request(2, &SaslAuthenticateRequest::default())
            .await
            .is_err());
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn garbage_and_truncated_frames_close_only_their_connection() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _, sasl) = start(dir.path()).await;
        let cases: Vec<Vec<u8>> = vec![
            // A frame too short for a request header.
            [&3i32.to_be_bytes()[..], &[1, 2, 3]].concat(),
            // A SaslHandshake whose body is cut short.
            [&10i32.to_be_bytes()[..], &[0, 17, 0, 1, 0, 0, 0, 1, 0, 5]].concat(),
            // An unknown api key.
            [&8i32.to_be_bytes()[..], &[0x7f, 0x7f, 0, 0, 0, 0, 0, 1]].concat(),
            // A frame over sasl.server.max.receive.size.
            1_000_000i32.to_be_bytes().to_vec(),
            // A negative size.
            (-1i32).to_be_bytes().to_vec(),
            // TLS ClientHello bytes on a plaintext SASL port.
            vec![
                0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03,
            ],
        ];
        for bytes in cases {
            let mut conn = Connection::connect(sasl).await.unwrap();
            conn.send_raw(&bytes).await.unwrap();
            assert!(conn.is_closed_by_peer().await, "{bytes:?}");
        }
        // Garbage SCRAM tokens fail authentication cleanly.
        for token in [&b""[..], b"n,,", b"\xff\xfe", b"p=tls,,n=a,r=b"] {
            let mut conn = Connection::connect(sasl).await.unwrap();
            assert_eq!(handshake(&mut conn, 1, "SCRAM-SHA-512").await.0, 0);
            assert_eq!(authenticate(&mut conn, token.to_vec()).await.0, 58);
        }
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(handshake(&mut conn, 1, "PLAIN").await.0, 0);
        assert_eq!(
            authenticate(&mut conn, b"\0alice\0alice-secret".to_vec())
                .await
                .0,
            0
        );
        metadata_works(&mut conn).await;
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn sasl_requests_on_a_plaintext_listener_are_illegal_sasl_state() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, _) = start(dir.path()).await;
        let mut conn = Connection::connect(admin).await.unwrap();
        assert_eq!(handshake(&mut conn, 1, "PLAIN").await.0, 34);
        assert_eq!(
            authenticate(&mut conn, b"\0alice\0alice-secret".to_vec())
                .await
                .0,
            34
        );
        metadata_works(&mut conn).await;
        broker.stop().await;
    })
    .await;
}

async fn describe(
    conn: &mut Connection,
    users: Option<&[&str]>,
) -> Vec<(String, i16, Vec<(i8, i32)>)> {
    let request = DescribeUserScramCredentialsRequest::default().with_users(users.map(|users| {
        users
            .iter()
            .map(|u| UserName::default().with_name(s(u)))
            .collect()
    }));
    let response = conn.request(0, &request).await.unwrap();
    assert_eq!(response.error_code, 0);
    response
        .results
        .iter()
        .map(|r| {
            let infos = r
                .credential_infos
                .iter()
                .map(|c| (c.mechanism, c.iterations))
                .collect();
            (r.user.to_string(), r.error_code, infos)
        })
        .collect()
}

#[tokio::test]
async fn scram_credentials_are_managed_as_kafka_does_and_survive_a_restart() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, _) = start(dir.path()).await;
        set_password(admin, "carol", ScramMechanism::Sha256, "pw").await;
        set_password(admin, "carol", ScramMechanism::Sha512, "pw").await;
        set_password(admin, "dave", ScramMechanism::Sha512, "pw").await;
        let mut conn = Connection::connect(admin).await.unwrap();
        let upsert = |user: &str, mechanism: i8, iterations: i32| {
            ScramCredentialUpsertion::default()
                .with_name(s(user))
                .with_mechanism(mechanism)
                .with_iterations(iterations)
                .with_salt(b"salt".to_vec().into())
                .with_salted_password(vec![7; 32].into())
        };
        let delete = |user: &str, mechanism: i8| {
            ScramCredentialDeletion::default()
                .with_name(s(user))
                .with_mechanism(mechanism)
        };
        let request = AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![
                delete("erin", 1),
                delete("dave", 2),
                delete("carol", 1),
            ])
            .with_upsertions(vec![
                upsert("few", 1, 4095),
                upsert("many", 2, 16385),
                upsert("odd", 3, 4096),
                upsert("", 1, 4096),
                upsert("carol", 1, 4096),
            ]);
        let response = conn.request(0, &request).await.unwrap();
        let mut results: Vec<_> = response
            .results
            .iter()
            .map(|r| {
                (
                    r.user.to_string(),
                    r.error_code,
                    r.error_message
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                )
            })
            .collect();
        results.sort();
        let expect =
            |user: &str, code: i16, message: &str| (user.to_string(), code, message.to_string());
        assert_eq!(
            results,
            vec![
                expect("", 93, "Username must not be empty"),
                expect(
                    "carol",
                    92,
                    "A user credential cannot be altered twice in the same request"
                ),
                expect("dave", 0, ""),
                expect(
                    "erin",
                    91,
                    "Attempt to delete a user credential that does not exist"
                ),
                expect("few", 93, "Too few iterations"),
                expect("many", 93, "Too many iterations"),
                expect("odd", 33, "Unknown SCRAM mechanism"),
            ]
        );
        assert_eq!(
            describe(&mut conn, None).await,
            vec![("carol".to_string(), 0, vec![(1, 4096), (2, 4096)])]
        );
        let named = describe(&mut conn, Some(&["dave", "carol", "carol"])).await;
        assert_eq!(named.len(), 2);
        assert_eq!((named[0].0.as_str(), named[0].1), ("dave", 91));
        assert_eq!((named[1].0.as_str(), named[1].1), ("carol", 92));

        broker.stop().await;
        let (broker, admin, sasl) = start(dir.path()).await;
        let mut conn = Connection::connect(admin).await.unwrap();
        assert_eq!(
            describe(&mut conn, Some(&["carol"])).await,
            vec![("carol".to_string(), 0, vec![(1, 4096), (2, 4096)])]
        );
        let (_, code) = scram(sasl, ScramMechanism::Sha512, "carol", "pw").await;
        assert_eq!(code, 0);
        let (_, code) = scram(sasl, ScramMechanism::Sha512, "dave", "pw").await;
        assert_eq!(code, 58, "dave's credential was deleted");
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn shoal_client_authenticates_over_sasl_plaintext_with_either_clients_keys() {
    use shoal_client::admin::topics::Internal;
    use shoal_client::admin::Admin;
    use shoal_client::config::ClientConfig;
    use shoal_protocol::ErrorCode;

    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin_addr, sasl) = start(dir.path()).await;
        set_password(admin_addr, "carol", ScramMechanism::Sha256, "carol-pw").await;
        let jaas = |module: &str, user: &str, password: &str| {
            format!(
                "org.apache.kafka.common.security.{module} required username=\"{user}\" \
                 password=\"{password}\";"
            )
        };
        // librdkafka's keys, then the Java client's sasl.jaas.config.
        let credentials = [
            (
                "SCRAM-SHA-256",
                vec![
                    ("sasl.username", "carol".to_owned()),
                    ("sasl.password", "carol-pw".to_owned()),
                ],
            ),
            (
                "PLAIN",
                vec![
                    ("sasl.username", "alice".to_owned()),
                    ("sasl.password", "alice-secret".to_owned()),
                ],
            ),
            (
                "SCRAM-SHA-256",
                vec![(
                    "sasl.jaas.config",
                    jaas("scram.ScramLoginModule", "carol", "carol-pw"),
                )],
            ),
            (
                "PLAIN",
                vec![(
                    "sasl.jaas.config",
                    jaas("plain.PlainLoginModule", "alice", "alice-secret"),
                )],
            ),
        ];
        for (mechanism, keys) in &credentials {
            let bootstrap = sasl.to_string();
            let mut properties = vec![
                ("bootstrap.servers", bootstrap.as_str()),
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", mechanism),
            ];
            properties.extend(keys.iter().map(|(k, v)| (*k, v.as_str())));
            let config = ClientConfig::from_properties(properties).unwrap();
            let admin = Admin::connect(config).await.unwrap();
            assert!(admin
                .list_topics(Internal::Exclude)
                .await
                .unwrap()
                .is_empty());
        }
        // A wrong password in the JAAS entry is refused.
        let bootstrap = sasl.to_string();
        let wrong = jaas("scram.ScramLoginModule", "carol", "not-carols");
        let config = ClientConfig::from_properties([
            ("bootstrap.servers", bootstrap.as_str()),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.jaas.config", wrong.as_str()),
            ("default.api.timeout.ms", "5000"),
        ])
        .unwrap();
        let refused = match Admin::connect(config).await {
            Err(e) => e,
            Ok(admin) => admin.list_topics(Internal::Exclude).await.unwrap_err(),
        };
        assert_eq!(
            refused.code(),
            ErrorCode::SASL_AUTHENTICATION_FAILED,
            "{refused}"
        );
        broker.stop().await;
    })
    .await;
}

/// Two SASL listeners, one with a long failed-authentication delay and one with none.
async fn start_delays(dir: &std::path::Path, slow_ms: u64) -> (TestBroker, SocketAddr, SocketAddr) {
    let slow = slow_ms.to_string();
    let (broker, addrs) = TestBroker::start_listeners(
        dir,
        &[
            ("listeners", "SLOW://127.0.0.1:0,FAST://127.0.0.1:0"),
            (
                "listener.security.protocol.map",
                "SLOW:SASL_PLAINTEXT,FAST:SASL_PLAINTEXT",
            ),
            ("sasl.enabled.mechanisms", "PLAIN"),
            ("listener.name.slow.plain.sasl.jaas.config", JAAS),
            ("listener.name.fast.plain.sasl.jaas.config", JAAS),
            (
                "listener.name.slow.connection.failed.authentication.delay.ms",
                &slow,
            ),
            (
                "listener.name.fast.connection.failed.authentication.delay.ms",
                "0",
            ),
        ],
    )
    .await;
    (broker, addrs[0], addrs[1])
}

#[tokio::test]
async fn a_failed_authentication_is_answered_and_closed_only_after_the_delay() {
    const SLOW_MS: u64 = 3000;
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, slow, fast) = start_delays(dir.path(), SLOW_MS).await;
        for (addr, delay_ms) in [(slow, SLOW_MS), (fast, 0)] {
            let mut conn = Connection::connect(addr).await.unwrap();
            assert_eq!(handshake(&mut conn, 1, "PLAIN").await.0, 0);
            // The wrong password and, right behind it, a Metadata the broker must not serve.
            let wrong = SaslAuthenticateRequest::default()
                .with_auth_bytes(b"\0alice\0not-her-password".to_vec().into());
            let mut frames = request_frame(2, 10, &wrong);
            frames.extend(request_frame(
                12,
                11,
                &MetadataRequest::default().with_topics(None),
            ));
            let started = Instant::now();
            conn.send_raw(&frames).await.unwrap();
            if delay_ms > 0 {
                // Meanwhile another client of the same listener is served at once.
                let mut other = Connection::connect(addr).await.unwrap();
                assert_eq!(handshake(&mut other, 1, "PLAIN").await.0, 0);
                let (code, _) = authenticate(&mut other, b"\0alice\0alice-secret".to_vec()).await;
                assert_eq!(code, 0);
                metadata_works(&mut other).await;
                assert!(
                    started.elapsed() < Duration::from_millis(delay_ms),
                    "the other connection waited for the failed one: {:?}",
                    started.elapsed()
                );
            }
            let (correlation_id, response) =
                read_response::<SaslAuthenticateRequest>(&mut conn, 2).await;
            let answered_after = started.elapsed();
            assert_eq!((correlation_id, response.error_code), (10, 58));
            assert!(
                answered_after >= Duration::from_millis(delay_ms),
                "answered after {answered_after:?}, before the {delay_ms} ms delay"
            );
            // Then the close: the Metadata behind the failed token is never answered.
            assert!(conn.is_closed_by_peer().await);
            if delay_ms == 0 {
                assert!(
                    answered_after < Duration::from_millis(SLOW_MS - 1000),
                    "no delay configured, yet answered after {answered_after:?}"
                );
            }
        }
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn other_authentication_failures_wait_for_the_delay_too() {
    const SLOW_MS: u64 = 1500;
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, slow, _) = start_delays(dir.path(), SLOW_MS).await;
        let delay = Duration::from_millis(SLOW_MS);
        // An unknown mechanism: answered (with the enabled ones) after the delay, then closed.
        let mut conn = Connection::connect(slow).await.unwrap();
        let started = Instant::now();
        let (code, offered) = handshake(&mut conn, 1, "GSSAPI").await;
        assert_eq!((code, offered), (33, vec!["PLAIN".to_string()]));
        assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
        assert!(conn.is_closed_by_peer().await);
        // A request other than SaslAuthenticate after the handshake, a request before it, and
        // a first frame larger than sasl.server.max.receive.size: closed, unanswered, after
        // the delay.
        let mut after_handshake = Connection::connect(slow).await.unwrap();
        assert_eq!(handshake(&mut after_handshake, 1, "PLAIN").await.0, 0);
        let metadata = request_frame(12, 5, &MetadataRequest::default().with_topics(None));
        let mut before_handshake = Connection::connect(slow).await.unwrap();
        let mut oversized = Connection::connect(slow).await.unwrap();
        let started = Instant::now();
        after_handshake.send_raw(&metadata).await.unwrap();
        before_handshake.send_raw(&metadata).await.unwrap();
        oversized
            .send_raw(&10_000_000i32.to_be_bytes())
            .await
            .unwrap();
        for conn in [&mut after_handshake, &mut before_handshake, &mut oversized] {
            assert!(conn.is_closed_by_peer().await);
            assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
        }
        broker.stop().await;
    })
    .await;
}
