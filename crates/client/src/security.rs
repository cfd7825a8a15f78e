//! Secured connections: Kafka's `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT,
//! SASL_SSL), TLS with rustls, and SASL PLAIN or SCRAM-SHA-256/512 with `sasl.mechanism`,
//! `sasl.username` and `sasl.password` (librdkafka's spelling) or the Java client's
//! `sasl.jaas.config` (a `PlainLoginModule` or `ScramLoginModule` entry with `username` and
//! `password` options; `sasl.username` / `sasl.password` win where both are set), run on every
//! new connection right after ApiVersions, as Kafka's clients do.
//!
//! TLS takes both librdkafka's and the Java client's keys:
//! - trust: librdkafka's `ssl.ca.location` (PEM), or Java's `ssl.truststore.type` (PEM or
//!   PKCS12), `ssl.truststore.location` and `ssl.truststore.password`; neither: the system's
//!   CA bundle;
//! - a client certificate (mutual TLS): librdkafka's `ssl.certificate.location` and
//!   `ssl.key.location` (PEM), or `ssl.keystore.location` with `ssl.keystore.password` —
//!   PKCS#12 as librdkafka reads it and as Java's `ssl.keystore.type=PKCS12` names it (with
//!   `ssl.keystore.type=PEM`, a PEM file holding key and chain); an encrypted PEM key (PKCS#8)
//!   opens with `ssl.key.password`. JKS stores are a configuration error: they cannot be read;
//! - `ssl.endpoint.identification.algorithm`: `https` (the default) checks the broker's host
//!   name against its certificate; empty (or librdkafka's `none`) checks the chain only.
//!
//! Store decoding is `shoal_core::tls_store`'s. Store and key files are read when a
//! connection is opened, so a bad one is an [`Error::Config`] naming the key at fault.
//!
//! Re-authentication (KIP-368): when the broker's last SaslAuthenticate answer gives the
//! session a lifetime (`SessionLifetimeMs` > 0, set by its `connections.max.reauth.ms`), the
//! connection runs the same exchange again on the same socket before the session ends, at a
//! point drawn between 85 % and 95 % of the lifetime as Kafka's clients pick it
//! ([`reauthentication_delay`]); [`crate::broker`] decides when and keeps other requests off
//! the socket meanwhile.
//!
//! The SCRAM exchange itself is `shoal_core::sasl::scram`'s sans-IO client. Passwords are
//! never printed: [`Security`]'s `Debug` hides them.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use shoal_core::sasl::jaas;
use shoal_core::sasl::scram::{ScramClient, ScramMechanism};
use shoal_core::tls_store;
use shoal_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::error::Error;

/// Where CA certificates are looked for when `ssl.ca.location` is not set (Debian's and
/// Red Hat's system bundles), as librdkafka falls back to the system's.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// Kafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(Self::Plaintext),
            "SSL" => Some(Self::Ssl),
            "SASL_PLAINTEXT" => Some(Self::SaslPlaintext),
            "SASL_SSL" => Some(Self::SaslSsl),
            _ => None,
        }
    }

    fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A SASL mechanism the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    Scram(ScramMechanism),
}

impl SaslMechanism {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "PLAIN" => Some(Self::Plain),
            other => ScramMechanism::from_name(other).map(Self::Scram),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::Scram(m) => m.name(),
        }
    }
}

/// The security settings of a client.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Security {
    protocol: SecurityProtocol,
    mechanism: Option<SaslMechanism>,
    username: Option<String>,
    password: Option<String>,
    /// `sasl.jaas.config`'s `username` and `password` options.
    jaas_username: Option<String>,
    jaas_password: Option<String>,
    tls: TlsSettings,
}

/// The JAAS login modules whose `username` and `password` options this client reads (the Java
/// client's for PLAIN and SCRAM; either serves either mechanism, as in Java).
const JAAS_MODULES: [&str; 2] = ["PlainLoginModule", "ScramLoginModule"];

/// The TLS keys, as librdkafka and the Java client spell them (both are read; a setting of
/// either names the same thing).
#[derive(Clone, PartialEq, Eq, Default)]
struct TlsSettings {
    /// librdkafka's `ssl.ca.location`: PEM CA certificates.
    ca_location: Option<String>,
    /// Java's `ssl.truststore.*`: PEM or PKCS12 CA certificates.
    truststore_type: Option<String>,
    truststore_location: Option<String>,
    truststore_password: Option<String>,
    /// librdkafka's PEM client certificate chain and key.
    certificate_location: Option<String>,
    key_location: Option<String>,
    /// The private key's password: an encrypted PEM key's (both clients).
    key_password: Option<String>,
    /// `ssl.keystore.*`: librdkafka's PKCS#12 file, Java's store of the given type.
    keystore_type: Option<String>,
    keystore_location: Option<String>,
    keystore_password: Option<String>,
    /// `ssl.endpoint.identification.algorithm`: `https` (the default) checks the broker's
    /// host name against its certificate; empty or `none` does not.
    check_host_name: Option<bool>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |p: &Option<String>| p.as_ref().map(|_| "[hidden]");
        let tls = &self.tls;
        f.debug_struct("Security")
            .field("protocol", &self.protocol)
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("jaas_username", &self.jaas_username)
            .field("jaas_password", &hidden(&self.jaas_password))
            .field("ca_location", &tls.ca_location)
            .field("truststore_type", &tls.truststore_type)
            .field("truststore_location", &tls.truststore_location)
            .field("truststore_password", &hidden(&tls.truststore_password))
            .field("certificate_location", &tls.certificate_location)
            .field("key_location", &tls.key_location)
            .field("key_password", &hidden(&tls.key_password))
            .field("keystore_type", &tls.keystore_type)
            .field("keystore_location", &tls.keystore_location)
            .field("keystore_password", &hidden(&tls.keystore_password))
            .field("check_host_name", &tls.check_host_name)
            .finish()
    }
}

fn config_error(key: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        key: key.into(),
        reason: reason.into(),
    }
}

impl Security {
    /// Takes one of this module's keys; `Ok(false)` for a key that is not one of them.
    ///
    /// # Errors
    /// [`Error::Config`] for a protocol or mechanism this client does not speak.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<bool, Error> {
        match key {
            "security.protocol" => {
                self.protocol = SecurityProtocol::parse(value).ok_or_else(|| {
                    config_error(key, "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
                })?;
            }
            "sasl.mechanism" | "sasl.mechanisms" => {
                self.mechanism =
                    Some(SaslMechanism::parse(value).ok_or_else(|| {
                        config_error(key, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
                    })?);
            }
            "sasl.username" => self.username = Some(value.to_owned()),
            "sasl.password" => self.password = Some(value.to_owned()),
            "sasl.jaas.config" => {
                let entry = jaas::parse(value).map_err(|reason| config_error(key, reason))?;
                let class = entry.module.rsplit('.').next().unwrap_or_default();
                if !JAAS_MODULES.contains(&class) {
                    return Err(config_error(
                        key,
                        format!(
                            "login module {}: this client reads {} (username, password)",
                            entry.module,
                            JAAS_MODULES.join(" or ")
                        ),
                    ));
                }
                self.jaas_username = entry.options.get("username").cloned();
                self.jaas_password = entry.options.get("password").cloned();
            }
            "ssl.ca.location" => self.tls.ca_location = Some(value.to_owned()),
            "ssl.truststore.type" => self.tls.truststore_type = Some(store_type(key, value)?),
            "ssl.truststore.location" => self.tls.truststore_location = Some(value.to_owned()),
            "ssl.truststore.password" => self.tls.truststore_password = Some(value.to_owned()),
            "ssl.certificate.location" => {
                self.tls.certificate_location = Some(value.to_owned());
            }
            "ssl.key.location" => self.tls.key_location = Some(value.to_owned()),
            "ssl.key.password" => self.tls.key_password = Some(value.to_owned()),
            "ssl.keystore.type" => self.tls.keystore_type = Some(store_type(key, value)?),
            "ssl.keystore.location" => self.tls.keystore_location = Some(value.to_owned()),
            "ssl.keystore.password" => self.tls.keystore_password = Some(value.to_owned()),
            "ssl.endpoint.identification.algorithm" => {
                self.tls.check_host_name = Some(match value.trim().to_ascii_lowercase().as_str() {
                    "https" => true,
                    "" | "none" => false,
                    _ => return Err(config_error(key, "https, or empty (or none) for no check")),
                });
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Opens `addr` (`host:port`) over TCP, then TLS for SSL and SASL_SSL.
    ///
    /// # Errors
    /// [`Error::Io`] when the connection or the TLS handshake fails; [`Error::Config`] when
    /// the CA certificates cannot be read.
    pub(crate) async fn open(
        &self,
        addr: &str,
        stream: TcpStream,
    ) -> Result<(ReadHalf, WriteHalf), Error> {
        if !self.protocol.uses_tls() {
            let (read, write) = stream.into_split();
            return Ok((Box::new(read), Box::new(write)));
        }
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| config_error("bootstrap.servers", format!("{host}: {e}")))?;
        let tls = self
            .connector()?
            .connect(name, stream)
            .await
            .map_err(|source| Error::Io {
                addr: addr.into(),
                source,
            })?;
        let (read, write) = tokio::io::split(tls);
        Ok((Box::new(read), Box::new(write)))
    }

    /// The TLS connector of these settings: the trust store, the client certificate when one
    /// is configured, the host name check.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key whose store or file cannot be used.
    fn connector(&self) -> Result<TlsConnector, Error> {
        let roots = self.tls.roots()?;
        // ring rather than aws-lc-rs: no cmake needed to build (see the broker's tls module).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error("security.protocol", e.to_string()))?;
        let builder = if self.tls.check_host_name.unwrap_or(true) {
            builder.with_root_certificates(roots)
        } else {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| config_error("ssl.ca.location", e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoHostNameCheck(inner)))
        };
        let config = match self.tls.client_certificate()? {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
                config_error(
                    self.tls.key_store_key(),
                    format!("the client certificate and key: {e}"),
                )
            })?,
            None => builder.with_no_client_auth(),
        };
        Ok(TlsConnector::from(Arc::new(config)))
    }

    /// Whether connections authenticate with SASL.
    pub(crate) fn uses_sasl(&self) -> bool {
        self.protocol.uses_sasl()
    }

    /// Authenticates a connection with SASL (a new one, or one whose session is due for
    /// re-authentication) when the protocol asks for it. Returns the session lifetime the
    /// broker gave (`None`: the session does not expire, or no SASL).
    ///
    /// # Errors
    /// [`Error::Config`] for missing credentials; [`Error::Kafka`] with
    /// UNSUPPORTED_SASL_MECHANISM or SASL_AUTHENTICATION_FAILED from the broker; what
    /// `conn` returns otherwise.
    pub(crate) async fn authenticate(
        &self,
        conn: &mut impl SaslTransport,
    ) -> Result<Option<Duration>, Error> {
        if !self.protocol.uses_sasl() {
            return Ok(None);
        }
        let mechanism = self
            .mechanism
            .ok_or_else(|| config_error("sasl.mechanism", "required by SASL_* protocols"))?;
        let username = (self.username.as_deref())
            .or(self.jaas_username.as_deref())
            .ok_or_else(|| {
                config_error(
                    "sasl.username",
                    "required by SASL_* protocols (or sasl.jaas.config's username)",
                )
            })?;
        let password = (self.password.as_deref())
            .or(self.jaas_password.as_deref())
            .ok_or_else(|| {
                config_error(
                    "sasl.password",
                    "required by SASL_* protocols (or sasl.jaas.config's password)",
                )
            })?;
        let handshake = conn
            .handshake(
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(mechanism.name())),
            )
            .await?;
        if let Some(e) = Error::from_code(ApiKey::SaslHandshake, handshake.error_code, None) {
            return Err(e);
        }
        let last = match mechanism {
            SaslMechanism::Plain => {
                let token = format!("\0{username}\0{password}").into_bytes();
                round(conn, token).await?
            }
            SaslMechanism::Scram(m) => {
                let mut client = ScramClient::new(m, username, password, &nonce());
                let (server_first, _) = round(conn, client.client_first()).await?;
                let client_final = client.server_first(&server_first).map_err(scram_error)?;
                let (server_final, lifetime) = round(conn, client_final).await?;
                client.server_final(&server_final).map_err(scram_error)?;
                (server_final, lifetime)
            }
        };
        Ok(last.1)
    }
}

/// `ssl.keystore.type` / `ssl.truststore.type`: PEM or PKCS12 (JKS cannot be read).
fn store_type(key: &str, value: &str) -> Result<String, Error> {
    match value.trim().to_ascii_uppercase().as_str() {
        v @ ("PEM" | "PKCS12") => Ok(v.to_owned()),
        "JKS" => Err(config_error(
            key,
            "JKS is not supported; convert the store to PKCS12 (keytool -importkeystore \
             -deststoretype PKCS12) or use PEM",
        )),
        _ => Err(config_error(key, "PEM or PKCS12")),
    }
}

fn read(key: &str, path: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| config_error(key, format!("{path}: {e}")))
}

fn pem_certificates(key: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config_error(key, e.to_string()))?;
    if certs.is_empty() {
        return Err(config_error(key, "holds no certificate"));
    }
    Ok(certs)
}

/// A private key from PEM: plain, or PKCS#8-encrypted with `ssl.key.password`.
fn pem_private_key(
    key: &str,
    pem: &[u8],
    password: Option<&str>,
) -> Result<PrivateKeyDer<'static>, Error> {
    if tls_store::pem_has_encrypted_key(pem) {
        let der = tls_store::decrypt_pem_key(pem, password)
            .map_err(|e| config_error("ssl.key.password", format!("{key}: {e}")))?;
        return Ok(PrivateKeyDer::Pkcs8(der.into()));
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|_| config_error(key, "holds no private key"))
}

impl TlsSettings {
    /// The CA certificates: Java's trust store, else librdkafka's `ssl.ca.location`, else the
    /// system's bundle.
    fn roots(&self) -> Result<RootCertStore, Error> {
        let (key, certs) = if let Some(path) = &self.truststore_location {
            let key = "ssl.truststore.location";
            let bytes = read(key, path)?;
            // Java's default type is JKS, which cannot be read; an unset type means PEM
            // unless the file is not PEM text.
            let pkcs12 = match self.truststore_type.as_deref() {
                Some(t) => t == "PKCS12",
                None => !bytes.starts_with(b"-----"),
            };
            let certs = if pkcs12 {
                let password = self.truststore_password.as_deref().unwrap_or("");
                tls_store::pkcs12_trust_store(&bytes, password)
                    .map_err(|e| config_error(key, format!("PKCS12 {path}: {e}")))?
                    .into_iter()
                    .map(CertificateDer::from)
                    .collect()
            } else {
                pem_certificates(key, &bytes)?
            };
            (key, certs)
        } else {
            let key = "ssl.ca.location";
            let pem = match &self.ca_location {
                Some(path) => read(key, path)?,
                None => SYSTEM_CA_BUNDLES
                    .iter()
                    .find_map(|path| std::fs::read(path).ok())
                    .ok_or_else(|| config_error(key, "not set, and no system CA bundle"))?,
            };
            (key, pem_certificates(key, &pem)?)
        };
        let mut roots = RootCertStore::empty();
        for cert in certs {
            // A bundle may hold certificates webpki cannot use; the rest still count.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(config_error(key, "holds no usable CA certificate"));
        }
        Ok(roots)
    }

    /// The key that names the client certificate in errors.
    fn key_store_key(&self) -> &'static str {
        if self.keystore_location.is_some() {
            "ssl.keystore.location"
        } else {
            "ssl.certificate.location"
        }
    }

    /// The client certificate chain and key, when one is configured: `ssl.keystore.location`
    /// (PKCS12 unless `ssl.keystore.type=PEM`, librdkafka's meaning and Java's PKCS12), or
    /// librdkafka's `ssl.certificate.location` with `ssl.key.location`.
    #[allow(clippy::type_complexity)]
    fn client_certificate(
        &self,
    ) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, Error> {
        let key_password = self.key_password.as_deref();
        if let Some(path) = &self.keystore_location {
            let key = "ssl.keystore.location";
            let bytes = read(key, path)?;
            if self.keystore_type.as_deref() == Some("PEM") {
                let certs = pem_certificates(key, &bytes)?;
                return Ok(Some((certs, pem_private_key(key, &bytes, key_password)?)));
            }
            let password = self.keystore_password.as_deref().unwrap_or("");
            let store = tls_store::pkcs12_key_store(&bytes, password).map_err(|e| {
                config_error(
                    key,
                    format!("PKCS12 {path} with ssl.keystore.password: {e}"),
                )
            })?;
            let certs = store.chain.into_iter().map(CertificateDer::from).collect();
            return Ok(Some((certs, PrivateKeyDer::Pkcs8(store.key.into()))));
        }
        match (&self.certificate_location, &self.key_location) {
            (None, None) => Ok(None),
            (Some(cert), Some(key_path)) => {
                let certs = pem_certificates(
                    "ssl.certificate.location",
                    &read("ssl.certificate.location", cert)?,
                )?;
                let pem = read("ssl.key.location", key_path)?;
                let key = pem_private_key("ssl.key.location", &pem, key_password)?;
                Ok(Some((certs, key)))
            }
            (Some(_), None) => Err(config_error(
                "ssl.key.location",
                "required with ssl.certificate.location",
            )),
            (None, Some(_)) => Err(config_error(
                "ssl.certificate.location",
                "required with ssl.key.location",
            )),
        }
    }
}

/// Checks the broker's certificate chain against the trust store but not its host name
/// (`ssl.endpoint.identification.algorithm` empty), as librdkafka and Java then do.
#[derive(Debug)]
struct NoHostNameCheck(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for NoHostNameCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError;
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// How long after an authentication whose session lasts `lifetime` the client
/// re-authenticates: between 85 % and 95 % of it, placed by `random`, as Kafka's clients do
/// (room for latency and clock drift, jitter against many connections renewing at once).
pub(crate) fn reauthentication_delay(lifetime: Duration, random: u32) -> Duration {
    let fraction = 0.85 + 0.10 * (f64::from(random) / f64::from(u32::MAX));
    lifetime.mul_f64(fraction)
}

/// A random `u32` from the OS, for [`reauthentication_delay`].
pub(crate) fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).expect("the OS gives random bytes");
    u32::from_le_bytes(bytes)
}

/// The read half of a connection, plain or TLS.
pub(crate) type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// The write half of a connection, plain or TLS.
pub(crate) type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// What a SASL exchange needs of a connection: its two requests sent at the negotiated
/// version, each answered (or the connection's error). The connection layer
/// ([`crate::broker`]) implements it on the socket it is authenticating, so this module
/// stays below it.
pub(crate) trait SaslTransport {
    async fn handshake(
        &mut self,
        request: &SaslHandshakeRequest,
    ) -> Result<SaslHandshakeResponse, Error>;

    async fn authenticate(
        &mut self,
        request: &SaslAuthenticateRequest,
    ) -> Result<SaslAuthenticateResponse, Error>;
}

/// One SaslAuthenticate round: our token out, the broker's back, with the session lifetime
/// the broker gave (on the last round; `None` when 0).
async fn round(
    conn: &mut impl SaslTransport,
    token: Vec<u8>,
) -> Result<(Vec<u8>, Option<Duration>), Error> {
    let response = conn
        .authenticate(&SaslAuthenticateRequest::default().with_auth_bytes(token.into()))
        .await?;
    if let Some(e) = Error::from_code(
        ApiKey::SaslAuthenticate,
        response.error_code,
        response.error_message.as_deref(),
    ) {
        return Err(e);
    }
    let lifetime = u64::try_from(response.session_lifetime_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    Ok((response.auth_bytes.to_vec(), lifetime))
}

fn scram_error(e: shoal_core::sasl::scram::ScramError) -> Error {
    Error::Config {
        key: "sasl.mechanism".into(),
        reason: format!("SCRAM exchange with the broker failed: {e}"),
    }
}

/// A client nonce: 18 random bytes, base64.
fn nonce() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 18];
    getrandom::fill(&mut bytes).expect("the OS gives random bytes");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_authentication_comes_between_85_and_95_percent_of_the_session() {
        let lifetime = Duration::from_millis(10_000);
        assert_eq!(
            reauthentication_delay(lifetime, 0),
            Duration::from_millis(8_500)
        );
        assert_eq!(
            reauthentication_delay(lifetime, u32::MAX),
            Duration::from_millis(9_500)
        );
        let middle = reauthentication_delay(lifetime, u32::MAX / 2);
        assert!(middle > Duration::from_millis(8_999) && middle < Duration::from_millis(9_001));
        for _ in 0..100 {
            let delay = reauthentication_delay(lifetime, random_u32());
            assert!(delay >= Duration::from_millis(8_500) && delay <= Duration::from_millis(9_500));
        }
    }

    #[test]
    fn kafkas_security_keys_are_read_and_the_password_is_never_shown() {
        let mut security = Security::default();
        for (key, value) in [
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", "alice"),
            ("sasl.password", "s3cret"),
            ("ssl.ca.location", "/ca.pem"),
        ] {
            assert!(security.set(key, value).unwrap(), "{key}");
        }
        assert_eq!(security.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            security.mechanism,
            Some(SaslMechanism::Scram(ScramMechanism::Sha256))
        );
        assert!(!format!("{security:?}").contains("s3cret"));
        assert!(!security.set("acks", "all").unwrap());
        for (key, value) in [
            ("security.protocol", "TLS"),
            ("sasl.mechanism", "GSSAPI"),
            ("ssl.keystore.type", "JKS"),
            ("ssl.truststore.type", "BCFKS"),
            ("ssl.endpoint.identification.algorithm", "ldaps"),
        ] {
            assert!(
                matches!(security.set(key, value), Err(Error::Config { .. })),
                "{key}"
            );
        }
    }

    #[test]
    fn the_java_clients_jaas_entry_gives_the_credentials() {
        let mut security = Security::default();
        let jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required
            username="alice" password="pa\"ss";"#;
        assert!(security.set("sasl.jaas.config", jaas).unwrap());
        assert_eq!(security.jaas_username.as_deref(), Some("alice"));
        assert_eq!(security.jaas_password.as_deref(), Some("pa\"ss"));
        assert!(!format!("{security:?}").contains("pa\"ss"));
        for bad in [
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
            "org.apache.kafka.common.security.plain.PlainLoginModule required password=\"x",
        ] {
            let e = security.set("sasl.jaas.config", bad).unwrap_err();
            assert!(matches!(e, Error::Config { ref key, .. } if key == "sasl.jaas.config"));
        }
    }

    /// A CA, and a client certificate signed by it (its key PKCS#8 DER).
    struct Pki {
        ca_pem: String,
        leaf_pem: String,
        leaf_der: Vec<u8>,
        ca_der: Vec<u8>,
        key_der: Vec<u8>,
        key_pem: String,
    }

    fn pki() -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
        let leaf = params.signed_by(&key, &issuer).unwrap();
        Pki {
            ca_pem: ca.pem(),
            leaf_pem: leaf.pem(),
            leaf_der: leaf.der().to_vec(),
            ca_der: ca.der().to_vec(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        }
    }

    fn with(pairs: &[(&str, &str)]) -> Result<Security, Error> {
        let mut security = Security::default();
        security.set("security.protocol", "SSL")?;
        for (key, value) in pairs {
            assert!(security.set(key, value)?, "{key}");
        }
        Ok(security)
    }

    fn key_of(result: Result<TlsConnector, Error>) -> String {
        match result {
            Err(Error::Config { key, .. }) => key,
            Err(other) => panic!("not a config error: {other}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn librdkafka_and_java_keys_give_a_client_certificate_or_name_the_key_at_fault() {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let path = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p.to_str().unwrap().to_owned()
        };
        let ca_path = path("ca.pem", pki.ca_pem.as_bytes());
        let cert_path = path("client.crt", pki.leaf_pem.as_bytes());
        let key_path = path("client.key", pki.key_pem.as_bytes());
        let (ca, cert, key) = (ca_path.as_str(), cert_path.as_str(), key_path.as_str());
        let params = pkcs8::pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
            2048,
            b"salt-of-16-bytes",
            [3; 16],
        )
        .unwrap();
        let encrypted = pkcs8::PrivateKeyInfoRef::try_from(pki.key_der.as_slice())
            .unwrap()
            .encrypt_with_params(params, "kp")
            .unwrap();
        let encrypted_pem = pkcs8::der::pem::encode_string(
            "ENCRYPTED PRIVATE KEY",
            pkcs8::der::pem::LineEnding::LF,
            encrypted.as_bytes(),
        )
        .unwrap();
        let encrypted_key_path = path("client-enc.key", encrypted_pem.as_bytes());
        let encrypted_key = encrypted_key_path.as_str();
        let mut store = p12_keystore::KeyStore::new();
        store.add_entry(
            "client",
            p12_keystore::KeyStoreEntry::PrivateKeyChain(p12_keystore::PrivateKeyChain::new(
                b"k".to_vec(),
                p12_keystore::PrivateKey::from_der(&pki.key_der).unwrap(),
                [
                    p12_keystore::Certificate::from_der(&pki.leaf_der).unwrap(),
                    p12_keystore::Certificate::from_der(&pki.ca_der).unwrap(),
                ],
            )),
        );
        let p12_path = path("client.p12", &store.writer("sp").write().unwrap());
        let p12 = p12_path.as_str();
        let mut trust = p12_keystore::KeyStore::new();
        trust.add_entry(
            "ca",
            p12_keystore::KeyStoreEntry::Certificate(
                p12_keystore::Certificate::from_der(&pki.ca_der).unwrap(),
            ),
        );
        let trust_p12_path = path("trust.p12", &trust.writer("tp").write().unwrap());
        let trust_p12 = trust_p12_path.as_str();

        let has_certificate = |s: &Security| s.tls.client_certificate().unwrap().is_some();
        // librdkafka: PEM certificate and key, plain or encrypted; a PKCS#12 key store.
        let s = with(&[
            ("ssl.ca.location", ca),
            ("ssl.certificate.location", cert),
            ("ssl.key.location", key),
        ])
        .unwrap();
        assert!(s.connector().is_ok() && has_certificate(&s));
        let s = with(&[
            ("ssl.ca.location", ca),
            ("ssl.certificate.location", cert),
            ("ssl.key.location", encrypted_key),
            ("ssl.key.password", "kp"),
        ])
        .unwrap();
        assert!(s.connector().is_ok() && has_certificate(&s));
        assert!(!format!("{s:?}").contains("\"kp\""));
        let s = with(&[
            ("ssl.ca.location", ca),
            ("ssl.keystore.location", p12),
            ("ssl.keystore.password", "sp"),
        ])
        .unwrap();
        assert!(s.connector().is_ok() && has_certificate(&s));
        // Java: typed key and trust stores, PKCS12 and PEM.
        let s = with(&[
            ("ssl.truststore.type", "PKCS12"),
            ("ssl.truststore.location", trust_p12),
            ("ssl.truststore.password", "tp"),
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", p12),
            ("ssl.keystore.password", "sp"),
            ("ssl.endpoint.identification.algorithm", ""),
        ])
        .unwrap();
        assert!(s.connector().is_ok() && has_certificate(&s));
        let s = with(&[
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", ca),
        ])
        .unwrap();
        assert!(s.connector().is_ok() && !has_certificate(&s));

        // Each mistake names its key.
        let ca_pair = ("ssl.ca.location", ca);
        for (pairs, at_fault) in [
            (
                vec![ca_pair, ("ssl.certificate.location", cert)],
                "ssl.key.location",
            ),
            (
                vec![ca_pair, ("ssl.key.location", key)],
                "ssl.certificate.location",
            ),
            (
                vec![
                    ca_pair,
                    ("ssl.certificate.location", cert),
                    ("ssl.key.location", encrypted_key),
                ],
                "ssl.key.password",
            ),
            (
                vec![
                    ca_pair,
                    ("ssl.certificate.location", cert),
                    ("ssl.key.location", encrypted_key),
                    ("ssl.key.password", "wrong"),
                ],
                "ssl.key.password",
            ),
            (
                vec![
                    ca_pair,
                    ("ssl.keystore.location", p12),
                    ("ssl.keystore.password", "wrong"),
                ],
                "ssl.keystore.location",
            ),
            (
                vec![ca_pair, ("ssl.keystore.location", ca)],
                "ssl.keystore.location",
            ),
            (
                vec![
                    ("ssl.truststore.location", trust_p12),
                    ("ssl.truststore.password", "wrong"),
                ],
                "ssl.truststore.location",
            ),
            (
                vec![("ssl.ca.location", "/no/such/ca.pem")],
                "ssl.ca.location",
            ),
            (vec![("ssl.ca.location", key)], "ssl.ca.location"),
        ] {
            let s = with(&pairs).unwrap();
            assert_eq!(key_of(s.connector()), at_fault, "{pairs:?}");
        }
    }
}
