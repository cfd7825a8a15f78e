//! SSL and SASL_SSL listeners with certificates made at test time (rcgen): requests and fetched
//! record bytes over TLS, client certificates when `ssl.client.auth` asks for them, SASL inside
//! TLS, and the clean failures — a plaintext client on the TLS port, a client without the
//! certificate a listener requires, key stores that cannot be used — with the broker unharmed.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use common::{create_topic, produce_once, TestBroker};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    FetchRequest, MetadataRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use shoal_client::Connection;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A CA, a server certificate for 127.0.0.1 signed by it, and a client certificate.
struct Pki {
    ca: String,
    server_chain: String,
    server_key: String,
    client_chain: String,
    client_key: String,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "shoal test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, cn: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_chain, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()], "broker");
    let (client_chain, client_key) = leaf(vec![], "client");
    Pki {
        ca,
        server_chain,
        server_key,
        client_chain,
        client_key,
    }
}

#[allow(deprecated)]
fn connector(pki: &Pki, with_client_cert: bool) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = if with_client_cert {
        let certs = CertificateDer::pem_slice_iter(pki.client_chain.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(pki.client_key.as_bytes()).unwrap();
        builder.with_client_auth_cert(certs, key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    addr: SocketAddr,
    pki: &Pki,
    with_client_cert: bool,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    connector(pki, with_client_cert).connect(name, tcp).await
}

/// One request and its response over any stream.
async fn call<S, R>(stream: &mut S, version: i16, request: &R) -> std::io::Result<R::Response>
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: Request + Encodable + HeaderVersion,
    R::Response: Decodable + HeaderVersion,
{
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .encode(&mut body, R::header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    stream.write_all(&(body.len() as u32).to_be_bytes()).await?;
    stream.write_all(&body).await?;
    stream.flush().await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let mut frame = vec![0u8; u32::from_be_bytes(size) as usize];
    stream.read_exact(&mut frame).await?;
    let mut frame = bytes::Bytes::from(frame);
    let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 7);
    Ok(R::Response::decode(&mut frame, version).unwrap())
}

async fn start(
    dir: &std::path::Path,
    pki: &Pki,
    extra: &[(&str, &str)],
) -> (TestBroker, Vec<SocketAddr>) {
    let mut settings = vec![
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        ),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", pki.server_chain.as_str()),
        ("ssl.keystore.key", pki.server_key.as_str()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.certificates", pki.ca.as_str()),
        ("sasl.enabled.mechanisms", "PLAIN"),
        (
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#,
        ),
    ];
    settings.extend_from_slice(extra);
    TestBroker::start_listeners(dir, &settings).await
}

#[tokio::test]
async fn requests_and_fetched_records_travel_over_tls() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let (broker, addrs) = start(dir.path(), &pki, &[]).await;
        let mut plain = broker.connect().await;
        create_topic(&mut plain, "t", 1).await;
        let batch = shoal_storage::encode_batch(
            &[
                (None, Some(&b"over tls"[..])),
                (None, Some(&[7u8; 100_000][..])),
            ],
            shoal_storage::BatchOptions::default(),
        );
        let (code, _) = produce_once(
            &mut plain,
            9,
            None,
            "t",
            0,
            bytes::Bytes::from(batch.clone()),
        )
        .await;
        assert_eq!(code, 0);

        let mut tls = tls_connect(addrs[1], &pki, false).await.unwrap();
        let metadata = call(&mut tls, 12, &MetadataRequest::default().with_topics(None))
            .await
            .unwrap();
        assert_eq!(metadata.brokers[0].port, i32::from(addrs[1].port()));
        let fetch = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let fetched = call(&mut tls, 12, &fetch).await.unwrap();
        let partition = &fetched.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0);
        // The record bytes (sent with sendfile on plain TCP) came through TLS intact.
        let records = partition.records.clone().unwrap();
        assert_eq!(records.len(), batch.len());
        assert_eq!(
            &records[12..],
            &batch[12..],
            "the batch as stored, offsets aside"
        );
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn a_plaintext_client_on_a_tls_port_fails_cleanly() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let (broker, addrs) = start(dir.path(), &pki, &[]).await;
        let mut conn = Connection::connect(addrs[1]).await.unwrap();
        assert!(conn
            .request(12, &MetadataRequest::default().with_topics(None))
            .await
            .is_err());
        // A TLS client on the plaintext port fails too.
        assert!(tls_connect(addrs[0], &pki, false).await.is_err());
        // Garbage, then a TLS client that is served.
        let mut junk = TcpStream::connect(addrs[1]).await.unwrap();
        junk.write_all(&[0x16, 0x03, 0x01, 0x00, 0x04, 0xff, 0x00, 0x00, 0x00])
            .await
            .unwrap();
        // The broker answers with an alert at most, then closes.
        let mut answer = Vec::new();
        let _ = junk.read_to_end(&mut answer).await;
        assert!(answer.len() < 64, "{answer:?}");
        let mut tls = tls_connect(addrs[1], &pki, false).await.unwrap();
        let metadata = call(&mut tls, 12, &MetadataRequest::default().with_topics(None)).await;
        assert_eq!(metadata.unwrap().brokers.len(), 1);
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn required_client_certificates_are_checked() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let (broker, addrs) = start(
            dir.path(),
            &pki,
            &[("listener.name.ssl.ssl.client.auth", "required")],
        )
        .await;
        // Without a certificate the handshake (or the first read, under TLS 1.3) fails.
        let refused = match tls_connect(addrs[1], &pki, false).await {
            Err(_) => true,
            Ok(mut tls) => call(&mut tls, 12, &MetadataRequest::default().with_topics(None))
                .await
                .is_err(),
        };
        assert!(refused);
        let mut tls = tls_connect(addrs[1], &pki, true).await.unwrap();
        let metadata = call(&mut tls, 12, &MetadataRequest::default().with_topics(None)).await;
        assert_eq!(metadata.unwrap().brokers.len(), 1);
        // The other TLS listener still needs none.
        let mut tls = tls_connect(addrs[2], &pki, false).await.unwrap();
        let handshake = call(
            &mut tls,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        )
        .await;
        assert_eq!(handshake.unwrap().error_code, 0);
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn sasl_ssl_authenticates_inside_tls() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let (broker, addrs) = start(dir.path(), &pki, &[]).await;
        for (password, code) in [("alice-secret", 0), ("wrong", 58)] {
            let mut tls = tls_connect(addrs[2], &pki, false).await.unwrap();
            // Nothing before authentication, as on SASL_PLAINTEXT.
            let handshake = call(
                &mut tls,
                1,
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            )
            .await
            .unwrap();
            assert_eq!(handshake.error_code, 0);
            let token = format!("\0alice\0{password}").into_bytes();
            let auth = call(
                &mut tls,
                2,
                &SaslAuthenticateRequest::default().with_auth_bytes(token.into()),
            )
            .await
            .unwrap();
            assert_eq!(auth.error_code, code);
            let metadata = call(&mut tls, 12, &MetadataRequest::default().with_topics(None)).await;
            assert_eq!(metadata.is_ok(), code == 0);
        }
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn unusable_key_stores_are_start_up_errors() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("server.pem");
    std::fs::write(&key_file, format!("{}{}", pki.server_key, pki.server_chain)).unwrap();
    let key_file = key_file.to_str().unwrap().to_string();
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![], "has no key store"),
        (
            vec![("ssl.keystore.location", &key_file)],
            "ssl.keystore.type JKS is not supported",
        ),
        (
            vec![
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.location", "/no/such/file.pem"),
            ],
            "cannot read ssl.keystore.location",
        ),
        (
            vec![
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.key", &pki.server_key),
            ],
            "go together",
        ),
        (
            vec![
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.certificate.chain", &pki.server_chain),
                ("ssl.keystore.key", &pki.server_chain),
            ],
            "holds no unencrypted private key",
        ),
        (
            vec![
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.location", &key_file),
                ("ssl.client.auth", "required"),
            ],
            "has no trust store",
        ),
        (
            vec![
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.location", &key_file),
                ("ssl.enabled.protocols", "TLSv1.1"),
            ],
            "neither TLSv1.2 nor TLSv1.3",
        ),
        (
            vec![
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.location", &key_file),
                ("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1/"),
            ],
            "ssl.principal.mapping.rules other than DEFAULT",
        ),
    ];
    for (settings, expected) in cases {
        let mut config = shoal_broker::BrokerConfig::default();
        config.set("listeners", "SSL://127.0.0.1:0").unwrap();
        for (k, v) in &settings {
            config.set(k, v).unwrap();
        }
        let listeners = shoal_broker::config::listeners::parse_listeners(&config).unwrap();
        let error = shoal_broker::server::bind_listeners(&config, &listeners)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(expected),
            "{settings:?}: '{expected}' not in '{error}'"
        );
        assert!(error.contains("listener SSL"), "{error}");
    }
    // The same file, as PEM, is a working key store.
    let mut config = shoal_broker::BrokerConfig::default();
    config.set("listeners", "SSL://127.0.0.1:0").unwrap();
    config.set("ssl.keystore.type", "PEM").unwrap();
    config.set("ssl.keystore.location", &key_file).unwrap();
    let listeners = shoal_broker::config::listeners::parse_listeners(&config).unwrap();
    let bound = shoal_broker::server::bind_listeners(&config, &listeners)
        .await
        .unwrap();
    assert!(bound[0].tls.is_some());
}

/// Shoal's own client with Kafka's security keys: SSL, SASL_SSL with PLAIN and SCRAM-SHA-512,
/// and a wrong password refused with the broker's error.
#[tokio::test]
async fn shoal_client_speaks_ssl_and_sasl_ssl() {
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
    use kafka_protocol::messages::AlterUserScramCredentialsRequest;
    use shoal_client::admin::topics::Internal;
    use shoal_client::admin::Admin;
    use shoal_client::config::ClientConfig;
    use shoal_core::sasl::scram::ScramMechanism;

    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let (broker, addrs) = start(
            dir.path(),
            &pki,
            &[("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512")],
        )
        .await;
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, &pki.ca).unwrap();
        let mut plain = broker.connect().await;
        create_topic(&mut plain, "secured", 1).await;
        let m = ScramMechanism::Sha512;
        let salted = m.salted_password(b"carol-pw", b"salt-salt", 4096);
        let altered = plain
            .request(
                0,
                &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                    ScramCredentialUpsertion::default()
                        .with_name(StrBytes::from_static_str("carol"))
                        .with_mechanism(m.code())
                        .with_iterations(4096)
                        .with_salt(b"salt-salt".to_vec().into())
                        .with_salted_password(salted.into()),
                ]),
            )
            .await
            .unwrap();
        assert_eq!(altered.results[0].error_code, 0);

        let ca = ca.to_str().unwrap();
        let client = |addr: SocketAddr, protocol: &str, sasl: Option<(&str, &str, &str)>| {
            let mut props = vec![
                ("bootstrap.servers".to_string(), addr.to_string()),
                ("security.protocol".into(), protocol.into()),
                ("ssl.ca.location".into(), ca.into()),
                ("retries".into(), "0".into()),
                ("socket.connection.setup.timeout.ms".into(), "5000".into()),
            ];
            if let Some((mechanism, user, password)) = sasl {
                props.push(("sasl.mechanism".into(), mechanism.into()));
                props.push(("sasl.username".into(), user.into()));
                props.push(("sasl.password".into(), password.into()));
            }
            ClientConfig::from_properties(props).unwrap()
        };
        let cases = [
            (addrs[1], "SSL", None),
            (
                addrs[2],
                "SASL_SSL",
                Some(("PLAIN", "alice", "alice-secret")),
            ),
            (
                addrs[2],
                "SASL_SSL",
                Some(("SCRAM-SHA-512", "carol", "carol-pw")),
            ),
        ];
        for (addr, protocol, sasl) in cases {
            let config = client(addr, protocol, sasl);
            assert!(!format!("{config:?}").contains("carol-pw"));
            let admin = Admin::connect(config).await.unwrap();
            let topics = admin.list_topics(Internal::Exclude).await.unwrap();
            let names: Vec<_> = topics.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["secured"], "{protocol} {sasl:?}");
        }
        let wrong = client(
            addrs[2],
            "SASL_SSL",
            Some(("SCRAM-SHA-512", "carol", "nope")),
        );
        let refused = match Admin::connect(wrong).await {
            Err(e) => e.to_string(),
            Ok(admin) => admin
                .list_topics(Internal::Exclude)
                .await
                .unwrap_err()
                .to_string(),
        };
        assert!(refused.contains("SASL_AUTHENTICATION_FAILED"), "{refused}");
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

/// A client certificate's principal is its subject as Kafka's DEFAULT mapping rule names it.
#[test]
fn client_certificate_principals_are_kafkas_rfc_2253_names() {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CountryName, "US");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Example, Inc.");
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "eng");
    params.distinguished_name.push(DnType::CommonName, "client");
    let cert = params.self_signed(&key).unwrap();
    let der = cert.der().to_vec();
    assert_eq!(
        shoal_broker::x500::subject(&der).as_deref(),
        Some("CN=client,OU=eng,O=Example\\, Inc.,C=US")
    );
    let chain = [CertificateDer::from(der)];
    assert_eq!(
        shoal_broker::tls::principal(Some(&chain)),
        "User:CN=client,OU=eng,O=Example\\, Inc.,C=US"
    );
    assert_eq!(shoal_broker::tls::principal(None), "User:ANONYMOUS");
}
