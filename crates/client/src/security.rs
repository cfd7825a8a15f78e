//! Secured connections: Kafka's `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT,
//! SASL_SSL), TLS with rustls trusting the CA certificates of `ssl.ca.location` (librdkafka's
//! key), and SASL PLAIN or SCRAM-SHA-256/512 with `sasl.mechanism`, `sasl.username` and
//! `sasl.password` (librdkafka's spelling), run on every new connection right after ApiVersions,
//! as Kafka's clients do.
//!
//! Re-authentication (KIP-368): when the broker's last SaslAuthenticate answer gives the
//! session a lifetime (`SessionLifetimeMs` > 0, set by its `connections.max.reauth.ms`), the
//! connection runs the same exchange again on the same socket before the session ends, at a
//! point drawn between 85 % and 95 % of the lifetime as Kafka's clients pick it
//! ([`reauthentication_delay`]); [`crate::broker`] decides when and keeps other requests off
//! the socket meanwhile.
//!
//! The SCRAM exchange itself is `shoal_core::sasl::scram`'s sans-IO client. The password is
//! never printed: [`Security`]'s `Debug` hides it.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use shoal_core::sasl::scram::{ScramClient, ScramMechanism};
use shoal_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::broker::SaslExchange;
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
    ca_location: Option<String>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("protocol", &self.protocol)
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[hidden]"))
            .field("ca_location", &self.ca_location)
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
            "ssl.ca.location" => self.ca_location = Some(value.to_owned()),
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

    fn connector(&self) -> Result<TlsConnector, Error> {
        let pem = match &self.ca_location {
            Some(path) => std::fs::read(path)
                .map_err(|e| config_error("ssl.ca.location", format!("{path}: {e}")))?,
            None => SYSTEM_CA_BUNDLES
                .iter()
                .find_map(|path| std::fs::read(path).ok())
                .ok_or_else(|| {
                    config_error("ssl.ca.location", "not set, and no system CA bundle")
                })?,
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| config_error("ssl.ca.location", e.to_string()))?;
            // A bundle may hold certificates webpki cannot use; the rest still count.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(config_error(
                "ssl.ca.location",
                "holds no usable CA certificate",
            ));
        }
        // ring rather than aws-lc-rs: no cmake needed to build (see the broker's tls module).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error("security.protocol", e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
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
    /// [`SaslExchange::send`] returns otherwise.
    pub(crate) async fn authenticate(
        &self,
        conn: &mut SaslExchange<'_>,
    ) -> Result<Option<Duration>, Error> {
        if !self.protocol.uses_sasl() {
            return Ok(None);
        }
        let mechanism = self
            .mechanism
            .ok_or_else(|| config_error("sasl.mechanism", "required by SASL_* protocols"))?;
        let username = self
            .username
            .as_deref()
            .ok_or_else(|| config_error("sasl.username", "required by SASL_* protocols"))?;
        let password = self
            .password
            .as_deref()
            .ok_or_else(|| config_error("sasl.password", "required by SASL_* protocols"))?;
        let handshake = conn
            .send(
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

/// One SaslAuthenticate round: our token out, the broker's back, with the session lifetime
/// the broker gave (on the last round; `None` when 0).
async fn round(
    conn: &mut SaslExchange<'_>,
    token: Vec<u8>,
) -> Result<(Vec<u8>, Option<Duration>), Error> {
    let response = conn
        .send(&SaslAuthenticateRequest::default().with_auth_bytes(token.into()))
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
        for (key, value) in [("security.protocol", "TLS"), ("sasl.mechanism", "GSSAPI")] {
            assert!(
                matches!(security.set(key, value), Err(Error::Config { .. })),
                "{key}"
            );
        }
    }
}
