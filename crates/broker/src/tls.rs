//! TLS for SSL and SASL_SSL listeners, from Kafka's `ssl.*` keys (each overridable per listener
//! with `listener.name.<l>.`), with rustls:
//! - the key store (`ssl.keystore.type`): PEM — a file at `ssl.keystore.location` holding the
//!   private key and the certificate chain, or both inline in `ssl.keystore.certificate.chain`
//!   and `ssl.keystore.key`; the key plain or PKCS#8-encrypted with `ssl.key.password` — or
//!   PKCS12 at `ssl.keystore.location`, opened with `ssl.keystore.password` (its key under the
//!   same password, as `openssl pkcs12 -export` and keytool make it);
//! - the trust store (for client certificates, `ssl.truststore.type`): PEM
//!   (`ssl.truststore.location` or inline `ssl.truststore.certificates`) or PKCS12
//!   (`ssl.truststore.location` with `ssl.truststore.password`);
//! - `ssl.client.auth`: `none`, `requested` (a certificate is checked if given) or `required`;
//! - `ssl.enabled.protocols`: TLSv1.2 and TLSv1.3;
//! - `ssl.principal.mapping.rules`: a client certificate's subject becomes the connection's
//!   principal through Kafka's rules ([`crate::principal_mapper`]); `DEFAULT` keeps it whole.
//!
//! JKS stores cannot be read: `ssl.keystore.type=JKS` / `ssl.truststore.type=JKS` (Kafka's
//! default) is a start-up error naming the key, as is any store or key Shoal cannot use (a
//! wrong password included), rather than a silent difference. Store decoding is
//! `shoal_core::tls_store`'s.
//!
//! Reloading ([`ListenerTls`]): a dynamic per-broker update of the store keys
//! ([`RELOADABLE_KEYS`], Kafka's reconfigurable ones) is first checked ([`check_update`]:
//! the stores load, the certificate keeps its subject unless `ssl.allow.dn.changes` and its
//! subject alternative names unless `ssl.allow.san.changes`), then new connections use the new
//! stores while open ones carry on.

use std::sync::Arc;

use anyhow::{bail, Context as _};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use shoal_core::tls_store;

use crate::config::BrokerConfig;
use crate::principal_mapper::PrincipalMapper;

/// A TLS handshake that takes longer than this closes the connection (a limit on everything:
/// a peer that opens a TLS port and sends nothing must not hold a task for good).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Kafka's principal of a connection that has not authenticated.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The principal of a TLS connection: `User:` and the client certificate's subject (Kafka's
/// DEFAULT `ssl.principal.mapping.rules`), or [`ANONYMOUS`] without a certificate.
pub fn principal(certificates: Option<&[CertificateDer<'_>]>) -> String {
    certificates
        .and_then(|chain| chain.first())
        .and_then(|cert| crate::x500::subject(cert))
        .map_or_else(|| ANONYMOUS.to_string(), |dn| format!("User:{dn}"))
}

/// The store keys Kafka lets a dynamic update change (`SslConfigs.RECONFIGURABLE_CONFIGS`),
/// on their own or prefixed with `listener.name.<l>.`.
pub const RELOADABLE_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.certificates",
];

/// What a listener's TLS was built from: the reloadable keys' values and the modification
/// times of the store files, so that an update naming the same file after it was replaced
/// reloads it, as Kafka does.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    values: Vec<String>,
    modified: Vec<Option<std::time::SystemTime>>,
}

fn fingerprint(config: &BrokerConfig, listener: &str) -> Fingerprint {
    let get = |key: &str| config.listener_get(listener, key).trim().to_string();
    let modified = ["ssl.keystore.location", "ssl.truststore.location"]
        .iter()
        .map(|key| {
            let path = get(key);
            (!path.is_empty())
                .then(|| std::fs::metadata(&path).and_then(|m| m.modified()).ok())
                .flatten()
        })
        .collect();
    Fingerprint {
        values: RELOADABLE_KEYS.iter().map(|key| get(key)).collect(),
        modified,
    }
}

/// A listener's TLS as built from one configuration: the handshake and the principal rules.
pub struct Built {
    acceptor: TlsAcceptor,
    mapper: PrincipalMapper,
    /// The key store's entity certificate, for the subject check of an update.
    entity: CertificateDer<'static>,
    fingerprint: Fingerprint,
}

impl Built {
    /// The acceptor new connections handshake with.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// The principal of a connection with this client certificate chain: `User:` and the
    /// name `ssl.principal.mapping.rules` gives its subject, [`ANONYMOUS`] without a
    /// certificate; `None` when no rule applies to the subject (the connection is refused, as
    /// Kafka's principal builder fails it).
    pub fn principal(&self, certificates: Option<&[CertificateDer<'_>]>) -> Option<String> {
        let Some(cert) = certificates.and_then(|chain| chain.first()) else {
            return Some(ANONYMOUS.to_string());
        };
        let subject = crate::x500::subject(cert)?;
        self.mapper
            .name(&subject)
            .map(|name| format!("User:{name}"))
    }
}

/// The TLS of one SSL or SASL_SSL listener. New connections take the [`Built`] of the
/// configuration in force: when a dynamic update ([`crate::handlers::configs`]) changes the
/// listener's stores (or names a store file replaced since), the stores are read again and
/// the acceptor swapped; connections already open keep theirs. A store that no longer loads
/// (the update was checked, but a file can change afterwards) is logged and the old one kept.
pub struct ListenerTls {
    listener: String,
    state: std::sync::Mutex<State>,
}

struct State {
    /// The configuration last looked at: a new one (any dynamic broker update) is checked.
    seen: Option<Arc<BrokerConfig>>,
    built: Arc<Built>,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls")
            .field("listener", &self.listener)
            .finish()
    }
}

impl ListenerTls {
    /// `listener`'s TLS from `config`.
    ///
    /// # Errors
    /// As [`build`].
    pub fn new(config: &BrokerConfig, listener: &str) -> anyhow::Result<Self> {
        Ok(Self {
            listener: listener.to_string(),
            state: std::sync::Mutex::new(State {
                seen: None,
                built: Arc::new(build(config, listener)?),
            }),
        })
    }

    /// The TLS for a new connection under `config` (the broker's configuration in force),
    /// rebuilt first if `config` changed the listener's stores.
    pub fn current(&self, config: &Arc<BrokerConfig>) -> Arc<Built> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state
            .seen
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, config))
        {
            return state.built.clone();
        }
        state.seen = Some(config.clone());
        if fingerprint(config, &self.listener) != state.built.fingerprint {
            match build(config, &self.listener) {
                Ok(built) => {
                    tracing::info!(listener = %self.listener, "TLS stores reloaded for new connections");
                    state.built = Arc::new(built);
                }
                Err(e) => {
                    tracing::warn!(listener = %self.listener, error = %format!("{e:#}"),
                        "TLS stores not reloaded; new connections keep the previous ones");
                }
            }
        }
        state.built.clone()
    }
}

/// Checks a dynamic update of `listener`'s stores before it is stored, as Kafka validates
/// one: when `candidate` changes the reloadable keys, its stores must load, and its entity
/// certificate must keep the subject of `current`'s unless `ssl.allow.dn.changes` is true,
/// and its subject alternative names unless `ssl.allow.san.changes` is true.
///
/// # Errors
/// The reason the new stores cannot be used (the caller answers INVALID_REQUEST).
pub fn check_update(
    current: &BrokerConfig,
    candidate: &BrokerConfig,
    listener: &str,
) -> anyhow::Result<()> {
    if fingerprint(current, listener) == fingerprint(candidate, listener) {
        return Ok(());
    }
    let new = build(candidate, listener)?;
    let allowed = |key: &str| {
        candidate
            .listener_get(listener, key)
            .trim()
            .eq_ignore_ascii_case("true")
    };
    let Ok(old) = build(current, listener) else {
        return Ok(());
    };
    if !allowed("ssl.allow.dn.changes") {
        let (old_dn, new_dn) = (
            crate::x500::subject(&old.entity),
            crate::x500::subject(&new.entity),
        );
        if old_dn != new_dn {
            bail!(
                "listener {listener}: Keystore DistinguishedName does not match: \
                 existing={}, new={} (ssl.allow.dn.changes is false)",
                old_dn.unwrap_or_default(),
                new_dn.unwrap_or_default()
            );
        }
    }
    if !allowed("ssl.allow.san.changes") {
        let (old_sans, new_sans) = (
            crate::x500::subject_alt_names(&old.entity),
            crate::x500::subject_alt_names(&new.entity),
        );
        if old_sans != new_sans {
            let shown = |sans: Option<Vec<String>>| sans.unwrap_or_default().join(", ");
            bail!(
                "listener {listener}: Keystore SubjectAltName does not match: \
                 existing=[{}], new=[{}] (ssl.allow.san.changes is false)",
                shown(old_sans),
                shown(new_sans)
            );
        }
    }
    Ok(())
}

/// `listener`'s TLS from `config`.
///
/// # Errors
/// A key store or trust store that is missing, unreadable, of a type Shoal cannot read (JKS),
/// opened with a wrong password, or that holds no key or no certificate; a trust store missing
/// while client certificates are asked for; principal mapping rules that do not parse; no TLS
/// version enabled. Each message names the listener and the key.
pub fn build(config: &BrokerConfig, listener: &str) -> anyhow::Result<Built> {
    let get = |key: &str| config.listener_get(listener, key).trim();
    let store_keys = [
        "ssl.keystore.location",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
    ];
    if store_keys.iter().all(|key| get(key).is_empty()) {
        bail!(
            "listener {listener} uses TLS but has no key store: set ssl.keystore.location, or \
             ssl.keystore.certificate.chain and ssl.keystore.key (with ssl.keystore.type=PEM)"
        );
    }
    let mapper = PrincipalMapper::new(get("ssl.principal.mapping.rules"))
        .map_err(|e| anyhow::anyhow!("listener {listener}: {e}"))?;
    let fingerprint = fingerprint(config, listener);
    let (certs, key) = key_store(listener, &get)?;
    let entity = certs
        .first()
        .cloned()
        .with_context(|| format!("listener {listener}: the key store holds no certificate"))?;
    let versions = versions(listener, get("ssl.enabled.protocols"))?;
    // ring, not rustls's preferred aws-lc-rs: it builds without cmake. rustls 0.23.48 marks
    // it deprecated because it has no post-quantum key exchange; moving to aws-lc-rs (and
    // X25519MLKEM768) is a build-tooling decision left to the integrator.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .context("TLS protocol versions")?;
    let client_auth = get("ssl.client.auth");
    let builder = match client_auth {
        "none" => builder.with_no_client_auth(),
        "required" | "requested" => {
            let roots = Arc::new(trust_store(listener, &get)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if client_auth == "requested" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .with_context(|| format!("listener {listener}: client certificate checks"))?,
            )
        }
        other => {
            bail!("listener {listener}: ssl.client.auth {other} is not none, requested or required")
        }
    };
    let server = builder
        .with_single_cert(certs, key)
        .with_context(|| format!("listener {listener}: the key store's key and certificate"))?;
    Ok(Built {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        mapper,
        entity,
        fingerprint,
    })
}

/// A store type Kafka knows, as `ssl.keystore.type` / `ssl.truststore.type` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreType {
    Pem,
    Pkcs12,
}

fn store_type(listener: &str, key: &str, value: &str) -> anyhow::Result<StoreType> {
    if value.eq_ignore_ascii_case("PEM") {
        Ok(StoreType::Pem)
    } else if value.eq_ignore_ascii_case("PKCS12") {
        Ok(StoreType::Pkcs12)
    } else if value.eq_ignore_ascii_case("JKS") {
        bail!(
            "listener {listener}: {key} JKS is not supported (Shoal reads no Java key stores); \
             convert the store with `keytool -importkeystore -deststoretype PKCS12` and set \
             {key}=PKCS12, or use PEM"
        )
    } else {
        bail!("listener {listener}: {key} {value} is not PEM or PKCS12")
    }
}

/// A password key's value; `None` when unset.
fn password<'a>(get: &impl Fn(&str) -> &'a str, key: &str) -> Option<&'a str> {
    Some(get(key)).filter(|v| !v.is_empty())
}

/// The certificate chain and private key of the key store: PEM (a file or inline, the key
/// plain or PKCS#8-encrypted with `ssl.key.password`) or PKCS#12 (`ssl.keystore.password`).
fn key_store<'a>(
    listener: &str,
    get: &impl Fn(&str) -> &'a str,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let (chain, key) = (
        get("ssl.keystore.certificate.chain"),
        get("ssl.keystore.key"),
    );
    let location = get("ssl.keystore.location");
    let inline = !chain.is_empty() || !key.is_empty();
    let kind = if inline {
        // Inline stores are PEM whatever the type says (Kafka requires PEM for them).
        StoreType::Pem
    } else {
        store_type(listener, "ssl.keystore.type", get("ssl.keystore.type"))?
    };
    let (certs_pem, key_pem, source) = if inline {
        if chain.is_empty() || key.is_empty() {
            bail!(
                "listener {listener}: ssl.keystore.certificate.chain and ssl.keystore.key \
                 go together"
            );
        }
        (
            chain.as_bytes().to_vec(),
            key.as_bytes().to_vec(),
            "ssl.keystore.key",
        )
    } else if !location.is_empty() {
        let bytes = std::fs::read(location).with_context(|| {
            format!("listener {listener}: cannot read ssl.keystore.location {location}")
        })?;
        if kind == StoreType::Pkcs12 {
            let store_password = password(get, "ssl.keystore.password").unwrap_or("");
            let store = tls_store::pkcs12_key_store(&bytes, store_password).with_context(|| {
                format!(
                    "listener {listener}: PKCS12 ssl.keystore.location {location} with \
                     ssl.keystore.password (the key must be under the store's password)"
                )
            })?;
            let certs = store.chain.into_iter().map(CertificateDer::from).collect();
            let key = PrivateKeyDer::Pkcs8(store.key.into());
            return Ok((certs, key));
        }
        (bytes.clone(), bytes, "ssl.keystore.location")
    } else {
        unreachable!("build checked that a key store is configured");
    };
    let certs = CertificateDer::pem_slice_iter(&certs_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("listener {listener}: the key store's certificates"))?;
    if certs.is_empty() {
        bail!("listener {listener}: the key store holds no certificate");
    }
    let key = if tls_store::pem_has_encrypted_key(&key_pem) {
        let der = tls_store::decrypt_pem_key(&key_pem, password(get, "ssl.key.password"))
            .with_context(|| {
                format!("listener {listener}: the encrypted private key of {source} with ssl.key.password")
            })?;
        PrivateKeyDer::Pkcs8(der.into())
    } else {
        PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|_| anyhow::anyhow!("listener {listener}: {source} holds no private key"))?
    };
    Ok((certs, key))
}

/// The trust store's certificates, for checking client certificates: PEM (a file or
/// inline) or PKCS#12 (`ssl.truststore.password`).
fn trust_store<'a>(
    listener: &str,
    get: &impl Fn(&str) -> &'a str,
) -> anyhow::Result<RootCertStore> {
    let inline = get("ssl.truststore.certificates");
    let location = get("ssl.truststore.location");
    let certs: Vec<CertificateDer<'static>> = if !inline.is_empty() {
        pem_certificates(listener, inline.as_bytes())?
    } else if !location.is_empty() {
        let kind = store_type(listener, "ssl.truststore.type", get("ssl.truststore.type"))?;
        let bytes = std::fs::read(location).with_context(|| {
            format!("listener {listener}: cannot read ssl.truststore.location {location}")
        })?;
        match kind {
            StoreType::Pem => pem_certificates(listener, &bytes)?,
            StoreType::Pkcs12 => {
                let store_password = password(get, "ssl.truststore.password").unwrap_or("");
                tls_store::pkcs12_trust_store(&bytes, store_password)
                    .with_context(|| {
                        format!(
                            "listener {listener}: PKCS12 ssl.truststore.location {location} \
                             with ssl.truststore.password"
                        )
                    })?
                    .into_iter()
                    .map(CertificateDer::from)
                    .collect()
            }
        }
    } else {
        bail!(
            "listener {listener} asks for client certificates (ssl.client.auth) but has no \
             trust store: set ssl.truststore.location or ssl.truststore.certificates"
        );
    };
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .with_context(|| format!("listener {listener}: a trust store certificate"))?;
    }
    if roots.is_empty() {
        bail!("listener {listener}: the trust store holds no certificate");
    }
    Ok(roots)
}

fn pem_certificates(listener: &str, pem: &[u8]) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("listener {listener}: the trust store"))
}

/// The TLS versions `ssl.enabled.protocols` lists that rustls offers.
fn versions(
    listener: &str,
    enabled: &str,
) -> anyhow::Result<Vec<&'static rustls::SupportedProtocolVersion>> {
    let mut versions = Vec::new();
    for name in enabled.split(',').map(str::trim) {
        match name {
            "TLSv1.3" => versions.push(&rustls::version::TLS13),
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            _ => {}
        }
    }
    if versions.is_empty() {
        bail!("listener {listener}: ssl.enabled.protocols {enabled} enables neither TLSv1.2 nor TLSv1.3");
    }
    Ok(versions)
}
