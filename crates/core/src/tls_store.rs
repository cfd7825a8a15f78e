//! TLS key and trust stores as Kafka's `ssl.keystore.*` / `ssl.truststore.*` keys describe
//! them, decoded from bytes: PKCS#12 files (PBES2/AES, as `openssl pkcs12 -export` and Java's
//! keytool make them today, and the legacy PBE-SHA1-3DES and RC2 ones) and encrypted PKCS#8
//! private keys (`ENCRYPTED PRIVATE KEY` PEM sections, PBES2 with AES or 3DES), for the
//! broker's listeners and the client alike.
//!
//! Everything is returned as DER (certificates, and the private key as PKCS#8) so that callers
//! hand it to their TLS library. Owns no I/O: callers read the files. Must not panic on any
//! input: bad bytes and wrong passwords are a [`StoreError`].

use pkcs8::der::Decode as _;

/// A key store's content: the certificate chain (the entity's first) and its private key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyStore {
    /// DER certificates, the entity's first, then its issuers as the store holds them.
    pub chain: Vec<Vec<u8>>,
    /// The private key, PKCS#8 DER (unencrypted).
    pub key: Vec<u8>,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("chain", &self.chain.len())
            .field("key", &"[hidden]")
            .finish()
    }
}

/// Why a store cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The password does not open the store or key (or the bytes are damaged: a PKCS#12 MAC
    /// or a decryption's padding cannot tell the two apart).
    #[error("wrong password, or a damaged store")]
    WrongPassword,
    /// The bytes are not a store of this type.
    #[error("not a {expected} store: {reason}")]
    Malformed {
        expected: &'static str,
        reason: String,
    },
    /// An encryption scheme the decoder does not know.
    #[error("unsupported encryption: {0}")]
    Unsupported(String),
    /// The store holds no private key, or no certificate for it.
    #[error("{0}")]
    Missing(&'static str),
    /// An encrypted key was found but no password was given.
    #[error("the private key is encrypted and no password was given")]
    PasswordNeeded,
}

fn p12_error(e: p12_keystore::error::Error) -> StoreError {
    use p12_keystore::error::Error as E;
    match e {
        E::MacError(_) | E::UnpadError => StoreError::WrongPassword,
        E::UnsupportedEncryptionScheme | E::UnsupportedMacAlgorithm => {
            StoreError::Unsupported(e.to_string())
        }
        // A wrong password on a PBES2 bag decrypts to bytes that are not a key.
        E::InvalidPrivateKey | E::Pkcs5Error(_) => StoreError::WrongPassword,
        other => StoreError::Malformed {
            expected: "PKCS#12",
            reason: other.to_string(),
        },
    }
}

/// The private key and its certificate chain in a PKCS#12 key store opened with
/// `password`. When the store holds several keys, the first one that has a certificate.
///
/// # Errors
/// [`StoreError::WrongPassword`], [`StoreError::Malformed`], [`StoreError::Unsupported`];
/// [`StoreError::Missing`] when no key has a certificate.
pub fn pkcs12_key_store(bytes: &[u8], password: &str) -> Result<KeyStore, StoreError> {
    let archive = p12_keystore::Pkcs12Archive::from_pkcs12(bytes, password).map_err(p12_error)?;
    if archive.keys.is_empty() {
        return Err(StoreError::Missing("the key store holds no private key"));
    }
    for bag in &archive.keys {
        let Some(id) = &bag.local_key_id else {
            continue;
        };
        let Some(leaf) = archive
            .certs
            .iter()
            .find(|c| c.local_key_id.as_deref() == Some(id.0.as_slice()))
        else {
            continue;
        };
        let mut chain = vec![&leaf.cert];
        // Issuers up to a self-signed one; a bound on the walk so that a cycle ends it.
        while chain.len() <= archive.certs.len() {
            let last = chain[chain.len() - 1];
            if last.subject() == last.issuer() {
                break;
            }
            match archive
                .certs
                .iter()
                .find(|c| c.cert.subject() == last.issuer() && !chain.iter().any(|k| **k == c.cert))
            {
                Some(issuer) => chain.push(&issuer.cert),
                None => break,
            }
        }
        return Ok(KeyStore {
            chain: chain.iter().map(|c| c.as_der().to_vec()).collect(),
            key: bag.key.as_der().to_vec(),
        });
    }
    // A lone key and a lone certificate without local key ids still belong together.
    match (archive.keys.as_slice(), archive.certs.as_slice()) {
        ([key], [cert]) => Ok(KeyStore {
            chain: vec![cert.cert.as_der().to_vec()],
            key: key.key.as_der().to_vec(),
        }),
        _ => Err(StoreError::Missing(
            "the key store holds no certificate for its private key",
        )),
    }
}

/// The CA certificates of a PKCS#12 trust store opened with `password`: every certificate
/// that is not some private key's own (Java marks trusted ones with an attribute that
/// `openssl pkcs12 -export -nokeys` leaves out unless asked; both count here).
///
/// # Errors
/// As [`pkcs12_key_store`]; [`StoreError::Missing`] when it holds no certificate.
pub fn pkcs12_trust_store(bytes: &[u8], password: &str) -> Result<Vec<Vec<u8>>, StoreError> {
    let archive = p12_keystore::Pkcs12Archive::from_pkcs12(bytes, password).map_err(p12_error)?;
    let certs: Vec<Vec<u8>> = archive
        .certs
        .iter()
        .filter(|c| c.trusted || c.local_key_id.is_none())
        .map(|c| c.cert.as_der().to_vec())
        .collect();
    if certs.is_empty() {
        return Err(StoreError::Missing("the trust store holds no certificate"));
    }
    Ok(certs)
}

const ENCRYPTED_BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

/// Whether a PEM text holds an encrypted PKCS#8 private key.
pub fn pem_has_encrypted_key(pem: &[u8]) -> bool {
    std::str::from_utf8(pem).is_ok_and(|text| text.contains(ENCRYPTED_BEGIN))
}

/// The first `ENCRYPTED PRIVATE KEY` section of `pem`, decrypted with `password`, as PKCS#8
/// DER.
///
/// # Errors
/// [`StoreError::Missing`] without such a section; [`StoreError::PasswordNeeded`] when
/// `password` is `None`; [`StoreError::WrongPassword`]; [`StoreError::Malformed`] for bad
/// base64 or DER; [`StoreError::Unsupported`] for a scheme other than PBES2 with AES or 3DES.
pub fn decrypt_pem_key(pem: &[u8], password: Option<&str>) -> Result<Vec<u8>, StoreError> {
    let malformed = |reason: String| StoreError::Malformed {
        expected: "PEM",
        reason,
    };
    let text = std::str::from_utf8(pem).map_err(|e| malformed(e.to_string()))?;
    let start = text
        .find(ENCRYPTED_BEGIN)
        .ok_or(StoreError::Missing("no ENCRYPTED PRIVATE KEY section"))?;
    let rest = &text[start..];
    let end = rest
        .find(ENCRYPTED_END)
        .ok_or_else(|| malformed("ENCRYPTED PRIVATE KEY section has no end".into()))?;
    let section = &rest[..end + ENCRYPTED_END.len()];
    let password = password.ok_or(StoreError::PasswordNeeded)?;
    let (_, der) =
        pkcs8::der::pem::decode_vec(section.as_bytes()).map_err(|e| malformed(e.to_string()))?;
    let info =
        pkcs8::EncryptedPrivateKeyInfoRef::from_der(&der).map_err(|e| StoreError::Malformed {
            expected: "encrypted PKCS#8",
            reason: e.to_string(),
        })?;
    match info.decrypt(password) {
        Ok(document) => {
            // A wrong password can decrypt to valid padding by chance: check it is a key.
            pkcs8::PrivateKeyInfoRef::from_der(document.as_bytes())
                .map_err(|_| StoreError::WrongPassword)?;
            Ok(document.as_bytes().to_vec())
        }
        Err(pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::UnsupportedAlgorithm {
            oid,
        })) => Err(StoreError::Unsupported(format!("algorithm {oid}"))),
        Err(pkcs8::Error::EncryptedPrivateKey(
            pkcs8::pkcs5::Error::AlgorithmParametersInvalid { oid },
        )) => Err(StoreError::Unsupported(format!("parameters of {oid}"))),
        Err(_) => Err(StoreError::WrongPassword),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p12_keystore::{
        Certificate, EncryptionAlgorithm, KeyStore as P12, KeyStoreEntry, PrivateKey,
        PrivateKeyChain,
    };

    /// A CA, and a leaf signed by it with its PKCS#8 key.
    fn leaf_and_ca() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "store-test-ca");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "store-test-leaf");
        let leaf = params.signed_by(&key, &issuer).unwrap();
        (leaf.der().to_vec(), key.serialize_der(), ca.der().to_vec())
    }

    fn p12(leaf: &[u8], key: &[u8], ca: &[u8], algorithm: EncryptionAlgorithm) -> Vec<u8> {
        let mut store = P12::new();
        let chain = PrivateKeyChain::new(
            b"id-1".to_vec(),
            PrivateKey::from_der(key).unwrap(),
            [
                Certificate::from_der(leaf).unwrap(),
                Certificate::from_der(ca).unwrap(),
            ],
        );
        store.add_entry("server", KeyStoreEntry::PrivateKeyChain(chain));
        store
            .writer("store-pass")
            .encryption_algorithm(algorithm)
            .write()
            .unwrap()
    }

    #[test]
    fn a_pkcs12_key_store_gives_its_key_and_chain_with_aes_and_legacy_3des() {
        let (leaf, key, ca) = leaf_and_ca();
        for algorithm in [
            EncryptionAlgorithm::PbeWithHmacSha256AndAes256,
            EncryptionAlgorithm::PbeWithShaAnd3KeyTripleDesCbc,
        ] {
            let bytes = p12(&leaf, &key, &ca, algorithm);
            let store = pkcs12_key_store(&bytes, "store-pass").unwrap();
            assert_eq!(store.chain, vec![leaf.clone(), ca.clone()]);
            assert_eq!(store.key, key);
            assert!(!format!("{store:?}").contains("key: ["));
            assert_eq!(
                pkcs12_key_store(&bytes, "wrong"),
                Err(StoreError::WrongPassword)
            );
        }
    }

    #[test]
    fn a_pkcs12_trust_store_gives_its_certificates_and_garbage_is_an_error() {
        let (_, _, ca) = leaf_and_ca();
        let mut store = P12::new();
        store.add_entry(
            "ca",
            KeyStoreEntry::Certificate(Certificate::from_der(&ca).unwrap()),
        );
        let bytes = store.writer("trust-pass").write().unwrap();
        assert_eq!(pkcs12_trust_store(&bytes, "trust-pass").unwrap(), vec![ca]);
        assert_eq!(
            pkcs12_trust_store(&bytes, "nope"),
            Err(StoreError::WrongPassword)
        );
        for garbage in [
            &b""[..],
            b"-----BEGIN CERTIFICATE-----",
            &[0x30, 0x82, 0xff],
        ] {
            assert!(matches!(
                pkcs12_key_store(garbage, "x"),
                Err(StoreError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn an_encrypted_pem_key_is_decrypted_with_its_password_only() {
        let (_, key, _) = leaf_and_ca();
        let params = pkcs8::pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
            2048,
            b"0123456789abcdef",
            [7; 16],
        )
        .unwrap();
        let encrypted = pkcs8::PrivateKeyInfoRef::try_from(key.as_slice())
            .unwrap()
            .encrypt_with_params(params, "key-pass")
            .unwrap();
        let pem = pkcs8::der::pem::encode_string(
            "ENCRYPTED PRIVATE KEY",
            pkcs8::der::pem::LineEnding::LF,
            encrypted.as_bytes(),
        )
        .unwrap();
        assert!(pem_has_encrypted_key(pem.as_bytes()));
        assert_eq!(
            decrypt_pem_key(pem.as_bytes(), Some("key-pass")).unwrap(),
            key
        );
        assert_eq!(
            decrypt_pem_key(pem.as_bytes(), Some("wrong")),
            Err(StoreError::WrongPassword)
        );
        assert_eq!(
            decrypt_pem_key(pem.as_bytes(), None),
            Err(StoreError::PasswordNeeded)
        );
        assert!(!pem_has_encrypted_key(b"-----BEGIN PRIVATE KEY-----"));
        let damaged = pem.replace(
            "ENCRYPTED PRIVATE KEY-----\n",
            "ENCRYPTED PRIVATE KEY-----\n!!",
        );
        assert!(matches!(
            decrypt_pem_key(damaged.as_bytes(), Some("key-pass")),
            Err(StoreError::Malformed { .. })
        ));
    }
}
