//! SSL and SASL_SSL listeners with certificates made at test time (rcgen): requests and fetched
//! record bytes over TLS, client certificates when `ssl.client.auth` asks for them (Shoal's own
//! client with librdkafka's and Java's keys), SASL inside TLS, PKCS#12 stores and encrypted
//! PEM keys, a key store reloaded by IncrementalAlterConfigs for new connections only, and the
//! clean failures — a plaintext client on the TLS port, a client without the certificate a
//! listener requires, key stores that cannot be used or updated — with the broker unharmed.

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
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    /// A new certificate signed by the CA, with its key: (chain PEM, key PEM, DER).
    fn leaf(&self, names: Vec<String>, cn: &str) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }
}

/// A PKCS#12 store of `chain`'s first certificate and `key` (PEM) under `password`.
fn pkcs12(chain: &str, key: &str, password: &str) -> Vec<u8> {
    let cert = CertificateDer::pem_slice_iter(chain.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let mut store = p12_keystore::KeyStore::new();
    store.add_entry(
        "entry",
        p12_keystore::KeyStoreEntry::PrivateKeyChain(p12_keystore::PrivateKeyChain::new(
            b"id".to_vec(),
            p12_keystore::PrivateKey::from_der(key.secret_der()).unwrap(),
            [p12_keystore::Certificate::from_der(&cert).unwrap()],
        )),
    );
    store.writer(password).write().unwrap()
}

/// `key` (PEM, PKCS#8) encrypted with `password`, as `ENCRYPTED PRIVATE KEY` PEM.
fn encrypted_pem(key: &str, password: &str) -> String {
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let params = pkcs8::pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
        2048,
        b"sixteen-byte-slt",
        [9; 16],
    )
    .unwrap();
    let encrypted = pkcs8::PrivateKeyInfoRef::try_from(key.secret_der())
        .unwrap()
        .encrypt_with_params(params, password)
        .unwrap();
    pkcs8::der::pem::encode_string(
        "ENCRYPTED PRIVATE KEY",
        pkcs8::der::pem::LineEnding::LF,
        encrypted.as_bytes(),
    )
    .unwrap()
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
        issuer,
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
            "holds no private key",
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
                ("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1/X"),
            ],
            "ssl.principal.mapping.rules: invalid rule",
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
    assert_eq!(
        shoal_broker::x500::subject_alt_names(cert.der()),
        Some(Vec::new())
    );
    let mut params = CertificateParams::new(vec![
        "broker.example".to_string(),
        "10.0.0.7".to_string(),
        "::1".to_string(),
    ])
    .unwrap();
    params.distinguished_name.push(DnType::CommonName, "broker");
    let cert = params.self_signed(&key).unwrap();
    assert_eq!(
        shoal_broker::x500::subject_alt_names(cert.der()).unwrap(),
        ["DNS:broker.example", "IP:10.0.0.7", "IP:::1"]
    );
    assert_eq!(
        shoal_broker::x500::subject_alt_names(b"\x30\x03\x02\x01"),
        None
    );
}

/// Shoal's client presents a certificate with librdkafka's keys (PEM certificate and an
/// encrypted key) and Java's (PKCS12 key and trust stores, no host name check) to a listener
/// that requires one; without a certificate it is refused.
#[tokio::test]
async fn shoal_client_presents_a_client_certificate_when_required() {
    use shoal_client::admin::topics::Internal;
    use shoal_client::admin::Admin;
    use shoal_client::config::ClientConfig;

    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let (broker, addrs) = start(
            dir.path(),
            &pki,
            &[("listener.name.ssl.ssl.client.auth", "required")],
        )
        .await;
        let mut plain = broker.connect().await;
        create_topic(&mut plain, "mutual", 1).await;
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path.to_str().unwrap().to_string()
        };
        let ca = file("ca.pem", pki.ca.as_bytes());
        let cert = file("client.crt", pki.client_chain.as_bytes());
        let key = file(
            "client.key",
            encrypted_pem(&pki.client_key, "key-pw").as_bytes(),
        );
        let store = file(
            "client.p12",
            &pkcs12(&pki.client_chain, &pki.client_key, "store-pw"),
        );
        let mut trust = p12_keystore::KeyStore::new();
        let ca_der = CertificateDer::pem_slice_iter(pki.ca.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        trust.add_entry(
            "ca",
            p12_keystore::KeyStoreEntry::Certificate(
                p12_keystore::Certificate::from_der(&ca_der).unwrap(),
            ),
        );
        let trust = file("trust.p12", &trust.writer("trust-pw").write().unwrap());
        let list = |settings: Vec<(&str, &str)>| {
            let mut props = vec![
                ("bootstrap.servers".to_string(), addrs[1].to_string()),
                ("security.protocol".into(), "SSL".into()),
                ("retries".into(), "0".into()),
                ("socket.connection.setup.timeout.ms".into(), "5000".into()),
            ];
            props.extend(settings.into_iter().map(|(k, v)| (k.into(), v.into())));
            async move {
                let admin = Admin::connect(ClientConfig::from_properties(props)?).await?;
                admin.list_topics(Internal::Exclude).await
            }
        };
        let librdkafka = vec![
            ("ssl.ca.location", ca.as_str()),
            ("ssl.certificate.location", cert.as_str()),
            ("ssl.key.location", key.as_str()),
            ("ssl.key.password", "key-pw"),
        ];
        let java = vec![
            ("ssl.truststore.type", "PKCS12"),
            ("ssl.truststore.location", trust.as_str()),
            ("ssl.truststore.password", "trust-pw"),
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", store.as_str()),
            ("ssl.keystore.password", "store-pw"),
            ("ssl.endpoint.identification.algorithm", ""),
        ];
        for settings in [librdkafka, java] {
            let topics = list(settings.clone()).await.unwrap();
            assert_eq!(topics[0].name, "mutual", "{settings:?}");
        }
        let refused = list(vec![("ssl.ca.location", ca.as_str())]).await;
        assert!(refused.is_err(), "no certificate was accepted");
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

/// Binds one SSL listener with `settings`; the start-up error, if any.
async fn bind(settings: Vec<(&str, &str)>) -> Result<(), String> {
    let mut config = shoal_broker::BrokerConfig::default();
    config.set("listeners", "SSL://127.0.0.1:0").unwrap();
    for (k, v) in &settings {
        config.set(k, v).unwrap();
    }
    let listeners = shoal_broker::config::listeners::parse_listeners(&config).unwrap();
    shoal_broker::server::bind_listeners(&config, &listeners)
        .await
        .map(|_| ())
        .map_err(|e| format!("{e:#}"))
}

/// PKCS#12 key and trust stores and encrypted PEM keys load with their passwords; a wrong
/// password and a JKS store are start-up errors naming the key, never a panic.
#[tokio::test]
async fn pkcs12_stores_and_encrypted_keys_open_with_their_passwords_only() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    };
    let store = file(
        "server.p12",
        &pkcs12(&pki.server_chain, &pki.server_key, "pw"),
    );
    let encrypted = file(
        "server-enc.pem",
        format!(
            "{}{}",
            encrypted_pem(&pki.server_key, "key-pw"),
            pki.server_chain
        )
        .as_bytes(),
    );
    let p12 = |password: &'static str| {
        vec![
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", store.as_str()),
            ("ssl.keystore.password", password),
        ]
    };
    let pem = |password: &'static str| {
        vec![
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", encrypted.as_str()),
            ("ssl.key.password", password),
        ]
    };
    bind(p12("pw")).await.unwrap();
    bind(pem("key-pw")).await.unwrap();
    let error = bind(p12("nope")).await.unwrap_err();
    assert!(
        error.contains("ssl.keystore.password") && error.contains("wrong password"),
        "{error}"
    );
    let error = bind(pem("nope")).await.unwrap_err();
    assert!(
        error.contains("ssl.key.password") && error.contains("wrong password"),
        "{error}"
    );
    let error = bind(vec![
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", encrypted.as_str()),
    ])
    .await
    .unwrap_err();
    assert!(error.contains("no password was given"), "{error}");
    let mut required = p12("pw");
    required.extend([
        ("ssl.client.auth", "required"),
        ("ssl.truststore.type", "JKS"),
        ("ssl.truststore.location", store.as_str()),
    ]);
    let error = bind(required).await.unwrap_err();
    assert!(
        error.contains("ssl.truststore.type JKS is not supported"),
        "{error}"
    );
}

/// A dynamic per-broker update of `listener.name.ssl.ssl.keystore.location` is checked, then
/// serves new connections while one opened before goes on; a store that does not load, or a
/// certificate for another subject, is INVALID_REQUEST and the stores in use stay.
#[tokio::test]
async fn a_key_store_update_serves_new_connections_and_bad_ones_are_refused() {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;

    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path.to_str().unwrap().to_string()
        };
        let names = || vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let first = file(
            "first.pem",
            format!("{}{}", pki.server_key, pki.server_chain).as_bytes(),
        );
        let (chain, key, second_der) = pki.leaf(names(), "broker");
        let second = file("second.pem", format!("{key}{chain}").as_bytes());
        let (chain, key, _) = pki.leaf(names(), "someone else");
        let other = file("other.pem", format!("{key}{chain}").as_bytes());
        let moved = vec!["127.0.0.1".to_string(), "elsewhere.example".to_string()];
        let (chain, key, _) = pki.leaf(moved, "broker");
        let renamed = file("renamed.pem", format!("{key}{chain}").as_bytes());
        let garbage = file("garbage.pem", b"no key here");
        let (broker, addrs) = TestBroker::start_listeners(
            dir.path(),
            &[
                ("listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"),
                ("listener.name.ssl.ssl.keystore.type", "PEM"),
                ("listener.name.ssl.ssl.keystore.location", first.as_str()),
            ],
        )
        .await;
        let mut plain = broker.connect().await;
        let served = |tls: &tokio_rustls::client::TlsStream<TcpStream>| {
            tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
        };
        let first_der = CertificateDer::pem_slice_iter(pki.server_chain.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .to_vec();
        let mut old = tls_connect(addrs[1], &pki, false).await.unwrap();
        assert_eq!(served(&old), first_der);
        let mut alter = async |location: &str| {
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(StrBytes::from_static_str("1"))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(StrBytes::from_static_str(
                            "listener.name.ssl.ssl.keystore.location",
                        ))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(location.to_string())))]),
            ]);
            let response = plain.request(1, &request).await.unwrap();
            (
                response.responses[0].error_code,
                response.responses[0]
                    .error_message
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            )
        };
        for (location, expected) in [
            (garbage.as_str(), "holds no certificate"),
            (other.as_str(), "DistinguishedName does not match"),
            (renamed.as_str(), "SubjectAltName does not match"),
        ] {
            let (code, message) = alter(location).await;
            assert_eq!(code, 42, "{location}: {message}");
            assert!(message.contains(expected), "{message}");
            let tls = tls_connect(addrs[1], &pki, false).await.unwrap();
            assert_eq!(served(&tls), first_der);
        }
        assert_eq!(alter(&second).await.0, 0);
        let new = tls_connect(addrs[1], &pki, false).await.unwrap();
        assert_eq!(served(&new), second_der);
        let metadata = call(&mut old, 12, &MetadataRequest::default().with_topics(None))
            .await
            .unwrap();
        assert_eq!(metadata.brokers.len(), 1);
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

/// `ssl.principal.mapping.rules` name the principal of a client certificate; a subject no
/// rule applies to has none.
#[test]
fn mapping_rules_name_the_principal_of_a_client_certificate() {
    let pki = pki();
    let mut config = shoal_broker::BrokerConfig::default();
    config.set("listeners", "SSL://127.0.0.1:0").unwrap();
    config.set("ssl.keystore.type", "PEM").unwrap();
    config
        .set("ssl.keystore.certificate.chain", &pki.server_chain)
        .unwrap();
    config.set("ssl.keystore.key", &pki.server_key).unwrap();
    let der = |chain: &str| {
        CertificateDer::pem_slice_iter(chain.as_bytes())
            .next()
            .unwrap()
            .unwrap()
    };
    let client = [der(&pki.client_chain)];
    config
        .set("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1-user/U")
        .unwrap();
    let built = shoal_broker::tls::build(&config, "SSL").unwrap();
    assert_eq!(
        built.principal(Some(&client)).as_deref(),
        Some("User:CLIENT-USER")
    );
    assert_eq!(built.principal(None).as_deref(), Some("User:ANONYMOUS"));
    let (chain, _, _) = pki.leaf(vec![], "x");
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "no common name");
    let lone = params.self_signed(&KeyPair::generate().unwrap()).unwrap();
    assert_eq!(built.principal(Some(&[lone.der().clone()])), None);
    assert_eq!(
        built.principal(Some(&[der(&chain)])).as_deref(),
        Some("User:X-USER")
    );
}
