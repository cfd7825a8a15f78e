//! KIP-368 re-authentication on a SASL_PLAINTEXT listener with `connections.max.reauth.ms`:
//! SaslAuthenticate v1+ tells the session lifetime; an expired session's next request closes
//! the connection; a SaslHandshake + SaslAuthenticate on the same connection renews it, after
//! every request before it is answered; another principal or mechanism is refused; and our
//! client re-authenticates on its own while it produces and consumes.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::sasl::{read_response, request_frame};
use common::TestBroker;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, MetadataRequest, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::config::ClientConfig;
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{ShareConsumer, ShareConsumerConfig};
use shoal_client::{Admin, Connection};
use shoal_core::sasl::scram::{ScramClient, ScramMechanism};

const TIMEOUT: Duration = Duration::from_secs(60);
/// `connections.max.reauth.ms` of the SASL listener.
const LIFETIME_MS: u64 = 1500;
/// Its override for SCRAM-SHA-256 (`listener.name.<l>.<mechanism>.connections.max.reauth.ms`).
const SCRAM_LIFETIME_MS: u64 = 2500;
const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;

/// A broker with a PLAINTEXT listener (for administration) and a SASL_PLAINTEXT one whose
/// sessions last `LIFETIME_MS`.
async fn start(dir: &std::path::Path) -> (TestBroker, SocketAddr, SocketAddr) {
    let lifetime = LIFETIME_MS.to_string();
    let scram_lifetime = SCRAM_LIFETIME_MS.to_string();
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
            ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256"),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
            ("connection.failed.authentication.delay.ms", "100"),
            (
                "listener.name.sasl_plaintext.connections.max.reauth.ms",
                &lifetime,
            ),
            (
                "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms",
                &scram_lifetime,
            ),
        ],
    )
    .await;
    (broker, addrs[0], addrs[1])
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn with_timeout<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TIMEOUT, f)
        .await
        .expect("test timed out")
}

async fn handshake(conn: &mut Connection, mechanism: &str) -> i16 {
    conn.request(
        1,
        &SaslHandshakeRequest::default().with_mechanism(s(mechanism)),
    )
    .await
    .unwrap()
    .error_code
}

async fn authenticate(
    conn: &mut Connection,
    version: i16,
    token: &[u8],
) -> SaslAuthenticateResponse {
    conn.request(
        version,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.to_vec().into()),
    )
    .await
    .unwrap()
}

/// A PLAIN handshake and token at SaslAuthenticate `version`: the answer.
async fn plain(
    conn: &mut Connection,
    version: i16,
    user: &str,
    password: &str,
) -> SaslAuthenticateResponse {
    assert_eq!(handshake(conn, "PLAIN").await, 0);
    authenticate(conn, version, format!("\0{user}\0{password}").as_bytes()).await
}

async fn metadata_works(conn: &mut Connection) {
    let response = conn
        .request(12, &MetadataRequest::default().with_topics(None))
        .await
        .unwrap();
    assert_eq!(response.brokers.len(), 1);
}

/// A full SCRAM-SHA-256 exchange on `conn`: the last answer.
async fn scram(conn: &mut Connection, user: &str, password: &str) -> SaslAuthenticateResponse {
    assert_eq!(handshake(conn, "SCRAM-SHA-256").await, 0);
    let mut client = ScramClient::new(ScramMechanism::Sha256, user, password, "a-client-nonce");
    let first = authenticate(conn, 2, &client.client_first()).await;
    assert_eq!(first.error_code, 0);
    let client_final = client.server_first(&first.auth_bytes).unwrap();
    authenticate(conn, 2, &client_final).await
}

/// The value of a broker-wide counter in the broker's Prometheus text.
fn metric(broker: &TestBroker, name: &str) -> i64 {
    let text = broker.broker.render_metrics();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

async fn set_scram_password(admin: SocketAddr, user: &str, password: &str) {
    let mut conn = Connection::connect(admin).await.unwrap();
    let salt = b"a-salt-of-16-bytes";
    let mechanism = ScramMechanism::Sha256;
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
    assert_eq!(response.results[0].error_code, 0);
}

#[tokio::test]
async fn sasl_authenticate_v1_and_later_tell_the_session_lifetime() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, sasl) = start(dir.path()).await;
        for (version, expected) in [(0, 0), (1, LIFETIME_MS), (2, LIFETIME_MS)] {
            let mut conn = Connection::connect(sasl).await.unwrap();
            let response = plain(&mut conn, version, "alice", "alice-secret").await;
            assert_eq!(response.error_code, 0);
            // As Kafka: an empty message on success, not a null one.
            assert_eq!(response.error_message.as_deref(), Some(""));
            assert_eq!(
                response.session_lifetime_ms,
                i64::try_from(expected).unwrap(),
                "SaslAuthenticate v{version}"
            );
            metadata_works(&mut conn).await;
        }
        // The mechanism's own lifetime, given on the last SCRAM round only.
        set_scram_password(admin, "carol", "carol-pw").await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        let last = scram(&mut conn, "carol", "carol-pw").await;
        assert_eq!(last.error_code, 0);
        assert_eq!(
            last.session_lifetime_ms,
            i64::try_from(SCRAM_LIFETIME_MS).unwrap()
        );
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn an_expired_session_closes_the_connection_at_its_next_request() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _, sasl) = start(dir.path()).await;
        for version in [0, 2] {
            let mut conn = Connection::connect(sasl).await.unwrap();
            assert_eq!(
                plain(&mut conn, version, "alice", "alice-secret")
                    .await
                    .error_code,
                0
            );
            metadata_works(&mut conn).await;
            tokio::time::sleep(Duration::from_millis(LIFETIME_MS + 500)).await;
            // Still open while nothing is asked; the next request closes it, unanswered.
            let after = conn
                .request(12, &MetadataRequest::default().with_topics(None))
                .await;
            assert!(after.is_err(), "served after expiry: {after:?}");
            assert!(conn.is_closed_by_peer().await);
        }
        assert_eq!(metric(&broker, "shoal_expired_connections_killed_total"), 2);
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn re_authenticating_on_the_same_connection_renews_the_session() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, sasl) = start(dir.path()).await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        let started = Instant::now();
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        // Three renewals 1.1 s apart: the connection outlives two lifetimes.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let renewed = plain(&mut conn, 2, "alice", "alice-secret").await;
            assert_eq!(renewed.error_code, 0);
            assert_eq!(
                renewed.session_lifetime_ms,
                i64::try_from(LIFETIME_MS).unwrap()
            );
            metadata_works(&mut conn).await;
        }
        assert!(started.elapsed() > Duration::from_millis(2 * LIFETIME_MS));
        // A renewal after the session ended is still a renewal: Kafka looks for a
        // re-authentication before it looks at the expiry.
        tokio::time::sleep(Duration::from_millis(LIFETIME_MS + 200)).await;
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        metadata_works(&mut conn).await;
        // A SaslHandshake pipelined behind a Metadata: the Metadata is answered first.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let mut frames = request_frame(12, 100, &MetadataRequest::default().with_topics(None));
        frames.extend(request_frame(
            1,
            101,
            &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
        ));
        conn.send_raw(&frames).await.unwrap();
        let (first, _) = read_response::<MetadataRequest>(&mut conn, 12).await;
        assert_eq!(first, 100, "the Metadata ahead of the SaslHandshake");
        let (second, handshake) = read_response::<SaslHandshakeRequest>(&mut conn, 1).await;
        assert_eq!((second, handshake.error_code), (101, 0));
        assert_eq!(
            authenticate(&mut conn, 2, b"\0alice\0alice-secret")
                .await
                .error_code,
            0
        );
        metadata_works(&mut conn).await;

        // SCRAM's two rounds renew a SCRAM session too.
        set_scram_password(admin, "carol", "carol-pw").await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(scram(&mut conn, "carol", "carol-pw").await.error_code, 0);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(scram(&mut conn, "carol", "carol-pw").await.error_code, 0);
        metadata_works(&mut conn).await;
        assert_eq!(
            metric(&broker, "shoal_successful_reauthentication_total"),
            6
        );
        assert_eq!(metric(&broker, "shoal_expired_connections_killed_total"), 0);
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_second_re_authentication_within_a_second_is_an_ordinary_request() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _, sasl) = start(dir.path()).await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        // Kafka starts one re-authentication a second at most: ILLEGAL_SASL_STATE.
        assert_eq!(handshake(&mut conn, "PLAIN").await, 34);
        metadata_works(&mut conn).await;
        broker.stop().await;
    })
    .await;
}

#[tokio::test]
async fn re_authenticating_as_another_principal_or_mechanism_is_refused() {
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin, sasl) = start(dir.path()).await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        // admin's password is right, but the session is alice's.
        let refused = plain(&mut conn, 2, "admin", "admin-secret").await;
        assert_eq!(refused.error_code, 58, "SASL_AUTHENTICATION_FAILED");
        assert_eq!(
            refused.error_message.as_deref(),
            Some("Cannot change principals during re-authentication from User.alice: User.admin")
        );
        assert!(conn.is_closed_by_peer().await);

        // Another mechanism, even for the same user: its first token closes the connection.
        set_scram_password(admin, "alice", "alice-secret").await;
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        assert_eq!(handshake(&mut conn, "SCRAM-SHA-256").await, 0);
        let mut client = ScramClient::new(ScramMechanism::Sha256, "alice", "alice-secret", "n");
        let token =
            SaslAuthenticateRequest::default().with_auth_bytes(client.client_first().into());
        assert!(conn.request(2, &token).await.is_err());

        // A wrong password while re-authenticating: answered as a failed re-authentication.
        let mut conn = Connection::connect(sasl).await.unwrap();
        assert_eq!(
            plain(&mut conn, 2, "alice", "alice-secret")
                .await
                .error_code,
            0
        );
        let wrong = plain(&mut conn, 2, "alice", "wrong").await;
        assert_eq!(wrong.error_code, 58);
        assert_eq!(
            wrong.error_message.as_deref(),
            Some(
                "Authentication failed during re-authentication due to invalid credentials \
                 with SASL mechanism PLAIN"
            )
        );
        assert!(conn.is_closed_by_peer().await);
        broker.stop().await;
    })
    .await;
}

fn client_properties(sasl: SocketAddr) -> Vec<(&'static str, String)> {
    vec![
        ("bootstrap.servers", sasl.to_string()),
        ("security.protocol", "SASL_PLAINTEXT".into()),
        ("sasl.mechanism", "PLAIN".into()),
        ("sasl.username", "alice".into()),
        ("sasl.password", "alice-secret".into()),
        ("request.timeout.ms", "10000".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_re_authenticates_while_it_produces_and_consumes() {
    const WORK: Duration = Duration::from_secs(5);
    with_timeout(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, admin_addr, sasl) = start(dir.path()).await;
        let mut raw = broker.connect().await;
        common::create_topic(&mut raw, "renewed", 1).await;
        let admin_config =
            ClientConfig::from_properties([("bootstrap.servers", admin_addr.to_string().as_str())])
                .unwrap();
        let admin = Admin::connect(admin_config).await.unwrap();
        let set = admin
            .incremental_alter_configs(
                &[(
                    ConfigResource::group("g"),
                    vec![AlterConfigOp::Set {
                        name: "share.auto.offset.reset".into(),
                        value: "earliest".into(),
                    }],
                )],
                Mode::Apply,
            )
            .await
            .unwrap();
        assert!(set[0].1.is_ok());

        let props = client_properties(sasl);
        let props = || props.iter().map(|(k, v)| (*k, v.as_str()));
        let producer_config =
            ProducerConfig::builder(ClientConfig::from_properties(props()).unwrap())
                .build()
                .unwrap();
        let producer = Producer::new(producer_config).await.unwrap();
        let consumer_config = ShareConsumerConfig::from_properties(
            props().chain([("group.id", "g"), ("fetch.max.wait.ms", "200")]),
        )
        .unwrap();
        let mut consumer = ShareConsumer::new(consumer_config).await.unwrap();
        consumer.subscribe(["renewed"]);

        // One acknowledged record every 50 ms for WORK (over three session lifetimes) while
        // the consumer polls: every call succeeds.
        let produced = tokio::spawn(async move {
            let started = Instant::now();
            let mut sent = 0;
            while started.elapsed() < WORK {
                producer
                    .send(ProducerRecord::new("renewed", format!("r{sent}")))
                    .await
                    .expect("send")
                    .await
                    .expect("delivery");
                sent += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            producer.close().await;
            sent
        });
        let mut received = 0;
        let mut producing = Some(produced);
        let mut sent = None;
        let deadline = Instant::now() + WORK + Duration::from_secs(20);
        while sent != Some(received) && Instant::now() < deadline {
            received += consumer
                .poll(Duration::from_millis(300))
                .await
                .expect("poll")
                .len();
            if let Some(task) = producing.take_if(|task| task.is_finished()) {
                sent = Some(task.await.unwrap());
            }
        }
        consumer.close().await;
        assert_eq!(Some(received), sent, "every record produced was consumed");
        // The broker saw the sessions renewed and never had to end one.
        assert_eq!(metric(&broker, "shoal_expired_connections_killed_total"), 0);
        assert!(metric(&broker, "shoal_successful_reauthentication_total") >= 3);
        broker.stop().await;
    })
    .await;
}
