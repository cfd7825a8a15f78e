//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: the server's
//! state machine, the client's (for Shoal's client and for tests), and the stored credential.
//!
//! The exchange is two round trips:
//! ```text
//! client-first   n,,n=user,r=<client nonce>
//! server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
//! client-final   c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
//! server-final   v=<base64 server signature>
//! ```
//! The server stores `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`, never the password nor the salted
//! password: it proves the client knows the password by recovering `ClientKey` from the proof
//! and hashing it, and proves itself with its signature.
//!
//! Sans-IO: nonces come in as arguments (the broker draws them from the OS), the credential is
//! looked up through a closure, and every message is bytes in, bytes out. Bad input is a
//! [`ScramError`], never a panic.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Kafka's minimum iteration count for both mechanisms (`ScramMechanism.minIterations`).
pub const ITERATIONS_MIN: i32 = 4096;
/// Kafka's maximum iteration count accepted by AlterUserScramCredentials.
pub const ITERATIONS_MAX: i32 = 16384;
/// Longest SCRAM message accepted: far above any real one (a few hundred bytes), so that a
/// peer cannot make the server hash megabytes.
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// The two SCRAM mechanisms, with Kafka's wire codes (AlterUserScramCredentials'
/// `Mechanism`: 1 and 2; 0 is UNKNOWN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL name (`SCRAM-SHA-256`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's `ScramMechanism.type()`.
    pub fn code(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.code() == code)
    }

    /// The digest length in bytes.
    pub fn digest_bytes(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac =
                <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Self::Sha256 => run::<Hmac<Sha256>>(key, parts),
            Self::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this HMAC, one block (RFC 5802 §2.2).
    ///
    /// # Panics
    /// When `iterations` is below 1 (a caller's bug; stored credentials have at least
    /// [`ITERATIONS_MIN`]).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: i32) -> Vec<u8> {
        assert!(iterations >= 1, "SCRAM needs at least one iteration");
        let mut u = self.hmac(password, &[salt, &1u32.to_be_bytes()]);
        let mut result = u.clone();
        for _ in 1..iterations {
            u = self.hmac(password, &[&u]);
            for (r, x) in result.iter_mut().zip(&u) {
                *r ^= x;
            }
        }
        result
    }
}

/// What the server stores for one user and mechanism (Kafka's `ScramCredential`).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl std::fmt::Debug for ScramCredential {
    /// Keys are secrets: never printed, even to a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential for `SaltedPassword` (what AlterUserScramCredentials carries).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: i32,
    ) -> Self {
        let client_key = mechanism.hmac(salted_password, &[b"Client Key"]);
        Self {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, &[b"Server Key"]),
            iterations,
        }
    }

    /// The credential for a password (tests, and configuration given in clear).
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: i32,
    ) -> Self {
        let salted = mechanism.salted_password(password, salt, iterations);
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }
}

/// Why a SCRAM exchange failed. Every variant is SASL_AUTHENTICATION_FAILED on the wire;
/// the variants are for the broker's log and never carry a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("the authorization id differs from the user name")]
    AuthzidMismatch,
    #[error("no credential for this user and mechanism")]
    UnknownUser,
    #[error("the nonce does not continue the client's")]
    NonceMismatch,
    #[error("the channel binding does not repeat the client's first message")]
    ChannelBindingMismatch,
    #[error("invalid client proof")]
    InvalidProof,
    #[error("invalid server signature")]
    InvalidServerSignature,
    #[error("the server reported an error: {0}")]
    ServerError(String),
    #[error("message received in the wrong state")]
    OutOfOrder,
}

/// Decodes a SCRAM `saslname` (`=2C` is ',', `=3D` is '='; no other '=').
fn decode_saslname(raw: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find([',', '=']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("=2C") {
            out.push(',');
        } else if tail.starts_with("=3D") {
            out.push('=');
        } else {
            return Err(ScramError::Malformed("bad escape in user name"));
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Encodes a user name as a SCRAM `saslname`.
pub fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A nonce: printable ASCII except ','.
fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// `key=value` with a one-letter key.
fn attribute(part: &str, key: char) -> Option<&str> {
    let mut chars = part.chars();
    (chars.next() == Some(key) && chars.next() == Some('=')).then(|| &part[2..])
}

/// A parsed client-first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// `n,,` or `y,,` or with an authzid: repeated, base64, in the client's final message.
    pub gs2_header: String,
    pub username: String,
    pub nonce: String,
    /// `client-first-message-bare`, part of the signed AuthMessage.
    pub bare: String,
}

impl ClientFirst {
    /// # Errors
    /// [`ScramError`] for anything RFC 5802 §7 does not allow, or channel binding, or an
    /// authorization id other than the user name (Kafka's rule).
    pub fn parse(message: &[u8]) -> Result<Self, ScramError> {
        if message.len() > MESSAGE_BYTES_MAX {
            return Err(ScramError::Malformed("message too long"));
        }
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let mut parts = text.splitn(3, ',');
        let flag = parts.next().unwrap_or("");
        let authzid = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
        let bare = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("bad channel-binding flag")),
        }
        let authzid = match authzid {
            "" => None,
            a => Some(decode_saslname(
                attribute(a, 'a').ok_or(ScramError::Malformed("bad authzid"))?,
            )?),
        };
        let mut fields = bare.split(',');
        let user = fields.next().unwrap_or("");
        if user.starts_with("m=") {
            return Err(ScramError::Malformed(
                "mandatory extensions are not supported",
            ));
        }
        let username =
            decode_saslname(attribute(user, 'n').ok_or(ScramError::Malformed("no user name"))?)?;
        let nonce = fields
            .next()
            .and_then(|f| attribute(f, 'r'))
            .filter(|n| valid_nonce(n))
            .ok_or(ScramError::Malformed("no valid nonce"))?;
        // Extensions (Kafka's `tokenauth=true`) may follow; delegation tokens are not served.
        if username.is_empty() {
            return Err(ScramError::Malformed("empty user name"));
        }
        if authzid.is_some_and(|a| a != username) {
            return Err(ScramError::AuthzidMismatch);
        }
        Ok(Self {
            gs2_header: text[..text.len() - bare.len()].to_string(),
            username,
            nonce: nonce.to_string(),
            bare: bare.to_string(),
        })
    }
}

/// Where a server exchange stands.
#[derive(Debug)]
enum ServerState {
    /// Waiting for the client-first message.
    Start,
    /// Sent server-first; waiting for client-final.
    Challenged(Box<Challenge>),
    /// Authenticated; nothing more is expected.
    Done,
    /// Failed; nothing more is accepted.
    Failed,
}

/// What the server remembers between its challenge and the client's proof.
#[derive(Debug)]
struct Challenge {
    first: ClientFirst,
    server_first: String,
    nonce: String,
    credential: ScramCredential,
}

/// The server side of one SCRAM exchange.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: ServerState,
    username: Option<String>,
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> Self {
        Self {
            mechanism,
            state: ServerState::Start,
            username: None,
        }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The authenticated user, once [`ScramServer::client_final`] succeeded.
    pub fn authenticated_user(&self) -> Option<&str> {
        matches!(self.state, ServerState::Done)
            .then_some(self.username.as_deref())
            .flatten()
    }

    /// Takes the client-first message and returns server-first. `server_nonce` is this
    /// exchange's random part (printable, no ','); `lookup` finds the user's credential.
    ///
    /// # Errors
    /// [`ScramError`]; the exchange is over then.
    pub fn client_first(
        &mut self,
        message: &[u8],
        server_nonce: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, ServerState::Start) {
            self.state = ServerState::Failed;
            return Err(ScramError::OutOfOrder);
        }
        self.state = ServerState::Failed;
        debug_assert!(valid_nonce(server_nonce), "server nonce must be printable");
        let first = ClientFirst::parse(message)?;
        let credential = lookup(&first.username).ok_or(ScramError::UnknownUser)?;
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let reply = server_first.clone().into_bytes();
        self.username = Some(first.username.clone());
        self.state = ServerState::Challenged(Box::new(Challenge {
            first,
            server_first,
            nonce,
            credential,
        }));
        Ok(reply)
    }

    /// Takes the client-final message, checks the proof and returns server-final.
    ///
    /// # Errors
    /// [`ScramError`]: a malformed message, another nonce, or a wrong proof (a wrong
    /// password); the exchange is over then.
    pub fn client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let state = std::mem::replace(&mut self.state, ServerState::Failed);
        let ServerState::Challenged(challenge) = state else {
            return Err(ScramError::OutOfOrder);
        };
        let Challenge {
            first,
            server_first,
            nonce,
            credential,
        } = *challenge;
        if message.len() > MESSAGE_BYTES_MAX {
            return Err(ScramError::Malformed("message too long"));
        }
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields
            .next()
            .and_then(|f| attribute(f, 'c'))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        let their_nonce = fields
            .next()
            .and_then(|f| attribute(f, 'r'))
            .ok_or(ScramError::Malformed("no nonce"))?;
        let binding = B64
            .decode(binding)
            .map_err(|_| ScramError::Malformed("channel binding is not base64"))?;
        if binding != first.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBindingMismatch);
        }
        if their_nonce != nonce {
            return Err(ScramError::NonceMismatch);
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let m = self.mechanism;
        if proof.len() != m.digest_bytes() {
            return Err(ScramError::InvalidProof);
        }
        let auth_message = format!("{},{server_first},{without_proof}", first.bare);
        let client_signature = m.hmac(&credential.stored_key, &[auth_message.as_bytes()]);
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let stored_key = m.hash(&client_key);
        if !bool::from(stored_key.ct_eq(&credential.stored_key)) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = m.hmac(&credential.server_key, &[auth_message.as_bytes()]);
        self.state = ServerState::Done;
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// Where a client exchange stands.
#[derive(Debug)]
enum ClientState {
    Start,
    SentFirst { bare: String },
    SentFinal { server_signature: Vec<u8> },
    Done,
    Failed,
}

/// The client side of one SCRAM exchange.
pub struct ScramClient {
    mechanism: ScramMechanism,
    username: String,
    password: Vec<u8>,
    nonce: String,
    state: ClientState,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// `nonce` is the client's random part (printable, no ',').
    pub fn new(mechanism: ScramMechanism, username: &str, password: &str, nonce: &str) -> Self {
        Self {
            mechanism,
            username: username.to_string(),
            password: password.as_bytes().to_vec(),
            nonce: nonce.to_string(),
            state: ClientState::Start,
        }
    }

    /// The client-first message.
    pub fn client_first(&mut self) -> Vec<u8> {
        let bare = format!("n={},r={}", encode_saslname(&self.username), self.nonce);
        let message = format!("n,,{bare}").into_bytes();
        self.state = ClientState::SentFirst { bare };
        message
    }

    /// Takes server-first and returns client-final.
    ///
    /// # Errors
    /// [`ScramError`] for a malformed message, a nonce that does not start with ours, or an
    /// iteration count below [`ITERATIONS_MIN`] (a downgrade).
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let ClientState::SentFirst { bare } =
            std::mem::replace(&mut self.state, ClientState::Failed)
        else {
            return Err(ScramError::OutOfOrder);
        };
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(error) = attribute(text, 'e') {
            return Err(ScramError::ServerError(error.to_string()));
        }
        let mut fields = text.split(',');
        let nonce = fields
            .next()
            .and_then(|f| attribute(f, 'r'))
            .filter(|n| valid_nonce(n));
        let salt = fields.next().and_then(|f| attribute(f, 's'));
        let iterations = fields.next().and_then(|f| attribute(f, 'i'));
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(ScramError::Malformed("expected r=,s=,i="));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::NonceMismatch);
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: i32 = iterations
            .parse()
            .map_err(|_| ScramError::Malformed("bad iteration count"))?;
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(ScramError::Malformed("iteration count out of range"));
        }
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &salt, iterations);
        let client_key = m.hmac(&salted, &[b"Client Key"]);
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode(b"n,,"));
        let auth_message = format!("{bare},{text},{without_proof}");
        let client_signature = m.hmac(&stored_key, &[auth_message.as_bytes()]);
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = m.hmac(&salted, &[b"Server Key"]);
        self.state = ClientState::SentFinal {
            server_signature: m.hmac(&server_key, &[auth_message.as_bytes()]),
        };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Takes server-final and checks the server's signature.
    ///
    /// # Errors
    /// [`ScramError::ServerError`] when the server reports one, or a wrong signature.
    pub fn server_final(&mut self, message: &[u8]) -> Result<(), ScramError> {
        let ClientState::SentFinal { server_signature } =
            std::mem::replace(&mut self.state, ClientState::Failed)
        else {
            return Err(ScramError::OutOfOrder);
        };
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(error) = attribute(text, 'e') {
            return Err(ScramError::ServerError(error.to_string()));
        }
        let verifier = attribute(text.split(',').next().unwrap_or(""), 'v')
            .ok_or(ScramError::Malformed("no verifier"))?;
        let verifier = B64
            .decode(verifier)
            .map_err(|_| ScramError::Malformed("verifier is not base64"))?;
        if !bool::from(verifier.ct_eq(&server_signature)) {
            return Err(ScramError::InvalidServerSignature);
        }
        self.state = ClientState::Done;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 7677 §3's SCRAM-SHA-256 example, byte for byte (user "user", password "pencil").
    #[test]
    fn rfc_7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha256, b"pencil", &salt, 4096);
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let server_first = server
            .client_first(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                |u| (u == "user").then(|| credential.clone()),
            )
            .unwrap();
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let server_final = server
            .client_final(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            )
            .unwrap();
        assert_eq!(
            server_final,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(server.authenticated_user(), Some("user"));
    }

    fn exchange(
        mechanism: ScramMechanism,
        stored_password: &str,
        given_password: &str,
        user: &str,
    ) -> Result<(), ScramError> {
        let credential =
            ScramCredential::from_password(mechanism, stored_password.as_bytes(), b"salt", 4096);
        let mut client = ScramClient::new(mechanism, user, given_password, "clientnonce");
        let mut server = ScramServer::new(mechanism);
        let first = server.client_first(&client.client_first(), "servernonce", |u| {
            (u == user).then(|| credential.clone())
        })?;
        let last = server.client_final(&client.server_first(&first)?)?;
        client.server_final(&last)?;
        assert_eq!(server.authenticated_user(), Some(user));
        Ok(())
    }

    #[test]
    fn both_mechanisms_authenticate_the_right_password_only() {
        for m in ScramMechanism::ALL {
            exchange(m, "secret", "secret", "alice").unwrap();
            exchange(m, "odd,=name", "odd,=name", "we=ird,user").unwrap();
            assert_eq!(
                exchange(m, "secret", "Secret", "alice"),
                Err(ScramError::InvalidProof)
            );
        }
    }

    #[test]
    fn an_unknown_user_gets_no_challenge() {
        let mut server = ScramServer::new(ScramMechanism::Sha512);
        let result = server.client_first(b"n,,n=bob,r=abc", "xyz", |_| None);
        assert_eq!(result, Err(ScramError::UnknownUser));
        // Nothing more is accepted once failed.
        assert_eq!(
            server.client_final(b"c=biws,r=abcxyz,p=AAAA"),
            Err(ScramError::OutOfOrder)
        );
    }

    #[test]
    fn malformed_and_out_of_order_messages_are_errors() {
        let credential = ScramCredential::from_password(ScramMechanism::Sha256, b"pw", b"s", 4096);
        let firsts: &[(&[u8], ScramError)] = &[
            (b"", ScramError::Malformed("no GS2 header")),
            (b"n,,", ScramError::Malformed("no user name")),
            (
                b"x,,n=a,r=b",
                ScramError::Malformed("bad channel-binding flag"),
            ),
            (b"p=tls-unique,,n=a,r=b", ScramError::ChannelBinding),
            (b"n,a=other,n=a,r=b", ScramError::AuthzidMismatch),
            (
                b"n,,m=ext,n=a,r=b",
                ScramError::Malformed("mandatory extensions are not supported"),
            ),
            (
                b"n,,n=a=zz,r=b",
                ScramError::Malformed("bad escape in user name"),
            ),
            (b"n,,n=a", ScramError::Malformed("no valid nonce")),
            (b"n,,n=,r=b", ScramError::Malformed("empty user name")),
            (b"n,,n=a,r=b\xff", ScramError::Malformed("not UTF-8")),
        ];
        for (message, expected) in firsts {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            let got = server.client_first(message, "n", |_| Some(credential.clone()));
            assert_eq!(
                got.as_ref().err(),
                Some(expected),
                "{:?}",
                String::from_utf8_lossy(message)
            );
        }
        let finals: &[(&[u8], ScramError)] = &[
            (b"c=biws,r=cn", ScramError::Malformed("no proof")),
            (b"c=biws,r=other,p=AAAA", ScramError::NonceMismatch),
            (b"c=eSws,r=cnsn,p=AAAA", ScramError::ChannelBindingMismatch),
            (b"c=biws,r=cnsn,p=AAAA", ScramError::InvalidProof),
            (
                b"c=biws,r=cnsn,p=!!",
                ScramError::Malformed("proof is not base64"),
            ),
            (
                b"r=cnsn,p=AAAA",
                ScramError::Malformed("no channel binding"),
            ),
        ];
        for (message, expected) in finals {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            server
                .client_first(b"n,,n=a,r=cn", "sn", |_| Some(credential.clone()))
                .unwrap();
            assert_eq!(server.client_final(message).as_ref().err(), Some(expected));
            assert_eq!(server.authenticated_user(), None);
        }
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        assert_eq!(
            server.client_final(b"c=biws,r=x,p=AAAA"),
            Err(ScramError::OutOfOrder)
        );
    }

    #[test]
    fn mechanism_names_and_codes_are_kafkas() {
        assert_eq!(
            ScramMechanism::from_name("SCRAM-SHA-512"),
            Some(ScramMechanism::Sha512)
        );
        assert_eq!(ScramMechanism::from_code(1), Some(ScramMechanism::Sha256));
        assert_eq!(ScramMechanism::from_code(0), None);
        assert_eq!(
            format!(
                "{:?}",
                ScramCredential::from_password(ScramMechanism::Sha256, b"p", b"s", 4096)
            ),
            "ScramCredential { iterations: 4096, .. }"
        );
    }

    fn fixed_credential() -> ScramCredential {
        static CREDENTIAL: std::sync::OnceLock<ScramCredential> = std::sync::OnceLock::new();
        CREDENTIAL
            .get_or_init(|| {
                ScramCredential::from_password(ScramMechanism::Sha256, b"pw", b"s", 4096)
            })
            .clone()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever bytes arrive, the server answers with an error or a message, never a panic,
        /// and never authenticates without a valid proof.
        #[test]
        fn arbitrary_input_never_authenticates(first in proptest::collection::vec(any::<u8>(), 0..200),
                                               last in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            if server.client_first(&first, "sn", |_| Some(fixed_credential())).is_ok() {
                let _ = server.client_final(&last);
            }
            prop_assert_eq!(server.authenticated_user(), None);
        }

    }

    proptest! {
        // Each case derives keys with 4096 iterations, twice: slow in a debug build.
        #![proptest_config(ProptestConfig::with_cases(8))]

        /// Any user name and password round-trip through a full exchange.
        #[test]
        fn any_user_and_password_authenticate(user in "[^\u{0}]{1,20}", password in ".{0,20}") {
            exchange(ScramMechanism::Sha512, &password, &password, &user).unwrap();
        }
    }
}
