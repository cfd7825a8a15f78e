//! TLS for SSL and SASL_SSL listeners, from Kafka's `ssl.*` keys (each overridable per listener
//! with `listener.name.<l>.`), with rustls:
//! - the key store is PEM (`ssl.keystore.type=PEM`): a file at `ssl.keystore.location` holding
//!   the private key and the certificate chain, or both inline in
//!   `ssl.keystore.certificate.chain` and `ssl.keystore.key`;
//! - the trust store (for client certificates) is PEM too: `ssl.truststore.location` or inline
//!   `ssl.truststore.certificates`;
//! - `ssl.client.auth`: `none`, `requested` (a certificate is checked if given) or `required`;
//! - `ssl.enabled.protocols`: TLSv1.2 and TLSv1.3.
//!
//! A client certificate's subject is the connection's principal, as Kafka's DEFAULT
//! `ssl.principal.mapping.rules` makes it ([`principal`]). Not yet: PKCS#12 and JKS stores,
//! encrypted keys (`ssl.key.password`), other mapping rules and reloading certificates without
//! a restart; each store or key Shoal cannot use is a clear start-up error rather than a silent
//! difference.

use std::sync::Arc;

use anyhow::{bail, Context as _};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::config::BrokerConfig;

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

/// The acceptor for `listener`'s connections.
///
/// # Errors
/// A key store or trust store that is missing, not PEM, unreadable, or holds no key or no
/// certificate; a trust store missing while client certificates are asked for; no TLS version
/// enabled. Each message names the listener and the key.
pub fn acceptor(config: &BrokerConfig, listener: &str) -> anyhow::Result<TlsAcceptor> {
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
    let store_type = get("ssl.keystore.type");
    if !store_type.eq_ignore_ascii_case("PEM") {
        bail!(
            "listener {listener}: ssl.keystore.type {store_type} is not supported yet; \
             use ssl.keystore.type=PEM"
        );
    }
    let rules = get("ssl.principal.mapping.rules");
    if rules != "DEFAULT" {
        bail!(
            "listener {listener}: ssl.principal.mapping.rules other than DEFAULT are not \
             supported yet"
        );
    }
    let (certs, key) = key_store(listener, &get)?;
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
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// The certificate chain and private key of the key store.
fn key_store<'a>(
    listener: &str,
    get: &impl Fn(&str) -> &'a str,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let (chain, key) = (
        get("ssl.keystore.certificate.chain"),
        get("ssl.keystore.key"),
    );
    let location = get("ssl.keystore.location");
    let (certs_pem, key_pem, source) = if !chain.is_empty() || !key.is_empty() {
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
        let pem = std::fs::read(location).with_context(|| {
            format!("listener {listener}: cannot read ssl.keystore.location {location}")
        })?;
        (pem.clone(), pem, "ssl.keystore.location")
    } else {
        unreachable!("acceptor checked that a key store is configured");
    };
    let certs = CertificateDer::pem_slice_iter(&certs_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("listener {listener}: the key store's certificates"))?;
    if certs.is_empty() {
        bail!("listener {listener}: the key store holds no certificate");
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
        anyhow::anyhow!(
            "listener {listener}: {source} holds no unencrypted private key (encrypted keys \
             with ssl.key.password are not supported yet)"
        )
    })?;
    Ok((certs, key))
}

/// The trust store's certificates, for checking client certificates.
fn trust_store<'a>(
    listener: &str,
    get: &impl Fn(&str) -> &'a str,
) -> anyhow::Result<RootCertStore> {
    let inline = get("ssl.truststore.certificates");
    let location = get("ssl.truststore.location");
    let pem = if !inline.is_empty() {
        inline.as_bytes().to_vec()
    } else if !location.is_empty() {
        let store_type = get("ssl.truststore.type");
        if !store_type.eq_ignore_ascii_case("PEM") {
            bail!(
                "listener {listener}: ssl.truststore.type {store_type} is not supported yet; \
                 use ssl.truststore.type=PEM"
            );
        }
        std::fs::read(location).with_context(|| {
            format!("listener {listener}: cannot read ssl.truststore.location {location}")
        })?
    } else {
        bail!(
            "listener {listener} asks for client certificates (ssl.client.auth) but has no \
             trust store: set ssl.truststore.location or ssl.truststore.certificates"
        );
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.with_context(|| format!("listener {listener}: the trust store"))?;
        roots
            .add(cert)
            .with_context(|| format!("listener {listener}: a trust store certificate"))?;
    }
    if roots.is_empty() {
        bail!("listener {listener}: the trust store holds no certificate");
    }
    Ok(roots)
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
