//! SASL OAUTHBEARER (RFC 7628) as Kafka's broker serves it: the client's one message, the
//! JSON Web Token it carries, and the server's answer.
//!
//! ```text
//! client   n,[a=<authzid>],\x01auth=Bearer <JWT>\x01[key=value\x01]*\x01
//! server   ""                              (valid: authenticated as User:<sub claim>)
//!          {"status":"invalid_token"}      (invalid: an error challenge)
//! client   \x01                            (acknowledges it; authentication fails)
//! ```
//!
//! Tokens are checked by a [`Validator`], one of Kafka's two:
//! - [`Validator::Signed`] (Kafka's `OAuthBearerValidatorCallbackHandler`): a JWS in compact
//!   form signed with a key of a JSON Web Key Set ([`Jwks`]) — RS256/384/512, PS256/384/512,
//!   ES256/384 (`none` never) — with `exp` and `iat` required; `exp`, `nbf` and `iat`
//!   checked against the clock with the configured skew; `aud` and `iss` against the expected
//!   values; the principal from the `sub` claim (or the configured one);
//! - [`Validator::Unsecured`] (Kafka's `OAuthBearerUnsecuredValidatorCallbackHandler`): an
//!   unsigned token (`alg: none`), for tests only; the broker builds one only when a listener
//!   names that class explicitly.
//!
//! Sans-IO: the key set comes in parsed from bytes, the time as `now_ms`; signatures are
//! checked with `ring` (already in the tree through rustls). Every input is bounded
//! ([`MESSAGE_BYTES_MAX`], [`JWKS_BYTES_MAX`], [`JWKS_KEYS_MAX`]); bad input is an error,
//! never a panic. Must not: log or return a token (a bearer token is a credential).

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

/// The SASL name.
pub const MECHANISM: &str = "OAUTHBEARER";
/// Longest client message accepted. Real tokens are a few kilobytes; the broker's
/// `sasl.server.max.receive.size` bounds the frame before this.
pub const MESSAGE_BYTES_MAX: usize = 64 * 1024;
/// Most extensions in one client message.
pub const EXTENSIONS_MAX: usize = 64;
/// Largest JSON Web Key Set read.
pub const JWKS_BYTES_MAX: usize = 1024 * 1024;
/// Most keys kept from a JSON Web Key Set.
pub const JWKS_KEYS_MAX: usize = 256;
/// RFC 7628's separator, and the client's whole answer to an error challenge.
pub const CONTROL_A: u8 = 0x01;
/// The error challenge of an invalid token, as Kafka's `OAuthBearerSaslServer` writes it.
pub const INVALID_TOKEN_CHALLENGE: &str = r#"{"status":"invalid_token"}"#;

/// Base64url as JWTs use it: no padding, but padding tolerated (as jose4j does).
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a client message or a token was refused. The variants are for the broker's log; the
/// client only ever sees [`INVALID_TOKEN_CHALLENGE`] or SASL_AUTHENTICATION_FAILED.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    #[error("invalid OAUTHBEARER client first message: {0}")]
    Malformed(&'static str),
    #[error("malformed JWT: {0}")]
    MalformedToken(String),
    #[error("JWT algorithm {0:?} is not accepted")]
    Algorithm(String),
    #[error("no key of the JSON Web Key Set matches the JWT (kid {0:?})")]
    UnknownKey(Option<String>),
    #[error("the JWT signature does not verify")]
    BadSignature,
    #[error("the JWT expired at {exp} s (now {now_ms} ms, skew {skew_s} s)")]
    Expired { exp: i64, now_ms: i64, skew_s: i64 },
    #[error("the JWT is not valid before {nbf} s (now {now_ms} ms, skew {skew_s} s)")]
    NotYetValid { nbf: i64, now_ms: i64, skew_s: i64 },
    #[error("the JWT was issued in the future, at {iat} s (now {now_ms} ms, skew {skew_s} s)")]
    IssuedInFuture { iat: i64, now_ms: i64, skew_s: i64 },
    #[error("the JWT's expiration time is not after its issued-at time")]
    Inconsistent,
    #[error("the JWT's claim {0} is missing")]
    MissingClaim(String),
    #[error("the JWT's claim {0} is malformed")]
    BadClaim(String),
    #[error("the JWT's audience is not the expected one")]
    Audience,
    #[error("the JWT's issuer is not the expected one")]
    Issuer,
    #[error("the JWT lacks the required scope {0}")]
    Scope(String),
    #[error(
        "Authentication failed: Client requested an authorization id ({authzid}) that is \
         different from the token's principal name ({principal})"
    )]
    AuthzidMismatch { authzid: String, principal: String },
    #[error("message received in the wrong state")]
    OutOfOrder,
}

impl OAuthError {
    fn token(reason: impl Into<String>) -> Self {
        Self::MalformedToken(reason.into())
    }
}

/// The client's first message, parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The bearer token (never printed by `Debug`).
    pub token: String,
    /// The GS2 authorization id; empty when absent.
    pub authzid: String,
    /// SASL extensions (`key=value`), in the client's order.
    pub extensions: Vec<(String, String)>,
}

impl std::fmt::Debug for ClientFirst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientFirst")
            .field("authzid", &self.authzid)
            .field("extensions", &self.extensions)
            .finish_non_exhaustive()
    }
}

impl ClientFirst {
    /// Parses `n,[a=<saslname>],\x01<key=value\x01>*\x01` with a mandatory
    /// `auth=Bearer <token>`, by the rules of Kafka's `OAuthBearerClientInitialResponse`:
    /// keys are letters, values printable ASCII plus space and tab/CR/LF, the token
    /// base64url-ish characters with trailing '='.
    ///
    /// # Errors
    /// [`OAuthError::Malformed`] for anything else.
    pub fn parse(message: &[u8]) -> Result<Self, OAuthError> {
        use OAuthError::Malformed;
        if message.len() > MESSAGE_BYTES_MAX {
            return Err(Malformed("message too long"));
        }
        let text = std::str::from_utf8(message).map_err(|_| Malformed("not UTF-8"))?;
        let rest = text.strip_prefix("n,").ok_or(Malformed("no GS2 header"))?;
        let comma = rest.find(',').ok_or(Malformed("no GS2 header"))?;
        let (authzid, rest) = (&rest[..comma], &rest[comma + 1..]);
        let authzid = match authzid {
            "" => String::new(),
            a => decode_saslname(a.strip_prefix("a=").ok_or(Malformed("bad authzid"))?)?,
        };
        let body = rest
            .strip_prefix('\x01')
            .and_then(|b| b.strip_suffix('\x01'))
            .ok_or(Malformed("missing separators"))?;
        let mut auth = None;
        let mut extensions = Vec::new();
        // Each pair ends with a separator: the body minus the final one is `pair\x01...`.
        if !body.is_empty() {
            let pairs = body
                .strip_suffix('\x01')
                .ok_or(Malformed("missing separators"))?;
            for pair in pairs.split('\x01') {
                let (key, value) = pair.split_once('=').ok_or(Malformed("pair without '='"))?;
                if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
                    return Err(Malformed("bad key"));
                }
                if value.is_empty()
                    || !value
                        .bytes()
                        .all(|b| (0x21..=0x7e).contains(&b) || b" \t\r\n".contains(&b))
                {
                    return Err(Malformed("bad value"));
                }
                if key == "auth" {
                    if auth.replace(value).is_some() {
                        return Err(Malformed("'auth' given twice"));
                    }
                } else {
                    if extensions.len() >= EXTENSIONS_MAX {
                        return Err(Malformed("too many extensions"));
                    }
                    // Later values win, as in Kafka's map.
                    extensions.retain(|(k, _): &(String, String)| k != key);
                    extensions.push((key.to_string(), value.to_string()));
                }
            }
        }
        let auth = auth.ok_or(Malformed("'auth' not specified"))?;
        let (scheme, token) = auth
            .split_once(' ')
            .ok_or(Malformed("invalid 'auth' format"))?;
        let token = token.trim_start_matches(' ');
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(Malformed("invalid 'auth' format"));
        }
        let body_end = token.trim_end_matches('=');
        if body_end.is_empty()
            || !body_end
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_~+/.".contains(&b))
        {
            return Err(Malformed("invalid 'auth' format"));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(Malformed("invalid scheme"));
        }
        Ok(Self {
            token: token.to_string(),
            authzid,
            extensions,
        })
    }

    /// The message Kafka's client sends (`OAuthBearerClientInitialResponse.toBytes`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let authzid = if self.authzid.is_empty() {
            String::new()
        } else {
            format!("a={}", self.authzid.replace('=', "=3D").replace(',', "=2C"))
        };
        let mut out = format!("n,{authzid},\x01auth=Bearer {}", self.token);
        for (k, v) in &self.extensions {
            out.push_str(&format!("\x01{k}={v}"));
        }
        out.push_str("\x01\x01");
        out.into_bytes()
    }
}

/// Decodes a GS2 `saslname` (`=2C` is ',', `=3D` is '='; no other '=').
fn decode_saslname(raw: &str) -> Result<String, OAuthError> {
    let bad = OAuthError::Malformed("bad authzid");
    if raw.is_empty() || raw.bytes().any(|b| b == 0 || b >= 0x80) {
        return Err(bad);
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("=2C") {
            out.push(',');
        } else if tail.starts_with("=3D") {
            out.push('=');
        } else {
            return Err(bad);
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A verification key of a JSON Web Key Set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyMaterial {
    /// Modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed point (0x04 ‖ x ‖ y) on P-256 or P-384.
    Ec { curve: Curve, point: Vec<u8> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Jwk {
    kid: Option<String>,
    /// The key's own `alg`, when it names one.
    alg: Option<String>,
    material: KeyMaterial,
}

/// A JSON Web Key Set (RFC 7517): the signature keys a signed token may be checked with.
/// Keys of other types (`oct`, `OKP`) or uses (`enc`) are left out, as a verifier would
/// never pick them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwks {
    keys: Vec<Jwk>,
}

impl Jwks {
    /// Parses a key set (`{"keys": [...]}`).
    ///
    /// # Errors
    /// A description when the text is too large or not a key set, when an RSA or EC key
    /// lacks a member or has a malformed one (or an RSA modulus under 2048 bits, which
    /// neither Kafka's jose4j nor `ring` accepts), or when no usable signature key is left.
    pub fn parse(text: &[u8]) -> Result<Self, String> {
        if text.len() > JWKS_BYTES_MAX {
            return Err(format!("larger than {JWKS_BYTES_MAX} bytes"));
        }
        let value: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
        let list = value
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("not a JSON Web Key Set (no \"keys\" array)")?;
        let mut keys = Vec::new();
        for (i, key) in list.iter().enumerate() {
            let key = key
                .as_object()
                .ok_or_else(|| format!("key {i} is not an object"))?;
            if let Some(jwk) = parse_jwk(key).map_err(|e| format!("key {i}: {e}"))? {
                if keys.len() >= JWKS_KEYS_MAX {
                    return Err(format!("more than {JWKS_KEYS_MAX} keys"));
                }
                keys.push(jwk);
            }
        }
        if keys.is_empty() {
            return Err("no RSA or EC signature key".into());
        }
        Ok(Self { keys })
    }

    /// How many keys were kept.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn member<'a>(key: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, String> {
    match key.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("\"{name}\" is not a string")),
    }
}

fn b64_member(key: &Map<String, Value>, name: &str) -> Result<Vec<u8>, String> {
    let text = member(key, name)?.ok_or_else(|| format!("no \"{name}\""))?;
    B64URL
        .decode(text)
        .map_err(|_| format!("\"{name}\" is not base64url"))
}

/// One key, or `None` when it is not a signature key of a type served here.
fn parse_jwk(key: &Map<String, Value>) -> Result<Option<Jwk>, String> {
    let kty = member(key, "kty")?.ok_or("no \"kty\"")?;
    if member(key, "use")?.is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    let material = match kty {
        "RSA" => {
            let n = strip_zeros(b64_member(key, "n")?);
            let e = strip_zeros(b64_member(key, "e")?);
            if n.len() < 256 {
                return Err(format!("RSA modulus of {} bits, under 2048", n.len() * 8));
            }
            if e.is_empty() {
                return Err("RSA exponent is zero".into());
            }
            KeyMaterial::Rsa { n, e }
        }
        "EC" => {
            let (curve, len) = match member(key, "crv")?.ok_or("no \"crv\"")? {
                "P-256" => (Curve::P256, 32),
                "P-384" => (Curve::P384, 48),
                _ => return Ok(None),
            };
            let (x, y) = (b64_member(key, "x")?, b64_member(key, "y")?);
            if x.len() != len || y.len() != len {
                return Err("EC coordinates of the wrong length".into());
            }
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            KeyMaterial::Ec { curve, point }
        }
        _ => return Ok(None),
    };
    Ok(Some(Jwk {
        kid: member(key, "kid")?.map(str::to_string),
        alg: member(key, "alg")?.map(str::to_string),
        material,
    }))
}

fn strip_zeros(mut bytes: Vec<u8>) -> Vec<u8> {
    let zeros = bytes.iter().take_while(|b| **b == 0).count();
    bytes.drain(..zeros);
    bytes
}

/// A JWS algorithm served, with `ring`'s verifier.
#[derive(Clone, Copy)]
enum Alg {
    Rsa(&'static signature::RsaParameters),
    Ec(&'static signature::EcdsaVerificationAlgorithm, Curve),
}

/// RS256/384/512, PS256/384/512, ES256/384; `None` for anything else (`none`, HMAC, EdDSA).
fn algorithm(alg: &str) -> Option<Alg> {
    Some(match alg {
        "RS256" => Alg::Rsa(&signature::RSA_PKCS1_2048_8192_SHA256),
        "RS384" => Alg::Rsa(&signature::RSA_PKCS1_2048_8192_SHA384),
        "RS512" => Alg::Rsa(&signature::RSA_PKCS1_2048_8192_SHA512),
        "PS256" => Alg::Rsa(&signature::RSA_PSS_2048_8192_SHA256),
        "PS384" => Alg::Rsa(&signature::RSA_PSS_2048_8192_SHA384),
        "PS512" => Alg::Rsa(&signature::RSA_PSS_2048_8192_SHA512),
        "ES256" => Alg::Ec(&signature::ECDSA_P256_SHA256_FIXED, Curve::P256),
        "ES384" => Alg::Ec(&signature::ECDSA_P384_SHA384_FIXED, Curve::P384),
        _ => return None,
    })
}

impl Jwk {
    /// Whether this key can check a signature of `name` (`alg`).
    fn fits(&self, name: &str, alg: Alg) -> bool {
        let kind_fits = match (&self.material, alg) {
            (KeyMaterial::Rsa { .. }, Alg::Rsa(_)) => true,
            (KeyMaterial::Ec { curve, .. }, Alg::Ec(_, wanted)) => *curve == wanted,
            _ => false,
        };
        kind_fits && self.alg.as_deref().is_none_or(|a| a == name)
    }

    fn verifies(&self, alg: Alg, message: &[u8], sig: &[u8]) -> bool {
        match (&self.material, alg) {
            (KeyMaterial::Rsa { n, e }, Alg::Rsa(params)) => RsaPublicKeyComponents { n, e }
                .verify(params, message, sig)
                .is_ok(),
            (KeyMaterial::Ec { point, .. }, Alg::Ec(verifier, _)) => {
                UnparsedPublicKey::new(verifier, point)
                    .verify(message, sig)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// What a signed token is checked against besides its signature: Kafka's
/// `sasl.oauthbearer.*` keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectations {
    /// `sasl.oauthbearer.expected.audience`: when not empty, `aud` must name one of these;
    /// when empty, a token with an `aud` is refused (jose4j's default, which Kafka keeps).
    pub audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`: when set, `iss` must equal it.
    pub issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim naming the principal.
    pub sub_claim: String,
    /// `sasl.oauthbearer.scope.claim.name`.
    pub scope_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds`.
    pub clock_skew_s: i64,
}

impl Default for Expectations {
    fn default() -> Self {
        Self {
            audience: Vec::new(),
            issuer: None,
            sub_claim: "sub".into(),
            scope_claim: "scope".into(),
            clock_skew_s: 30,
        }
    }
}

/// The options of Kafka's unsecured validator (its JAAS options
/// `unsecuredValidatorPrincipalClaimName`, `...ScopeClaimName`, `...RequiredScope`,
/// `...AllowableClockSkewMs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredOptions {
    pub principal_claim: String,
    pub scope_claim: String,
    pub required_scope: Vec<String>,
    pub clock_skew_ms: i64,
}

impl Default for UnsecuredOptions {
    fn default() -> Self {
        Self {
            principal_claim: "sub".into(),
            scope_claim: "scope".into(),
            required_scope: Vec::new(),
            clock_skew_ms: 0,
        }
    }
}

/// How a listener checks tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validator {
    Signed { jwks: Jwks, expect: Expectations },
    Unsecured(UnsecuredOptions),
}

/// A token that passed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    /// The principal's name (`User:<principal>`).
    pub principal: String,
    /// When the token expires, ms since the epoch (Kafka's `lifetimeMs`).
    pub expires_at_ms: i64,
    pub scopes: Vec<String>,
}

impl ValidToken {
    /// Kafka's session lifetime (KIP-368) for a token authenticated at `now_ms`: the
    /// token's remaining life, capped by `connections.max.reauth.ms` when that is set; never
    /// negative (`SaslServerAuthenticator.calcCompletionTimesAndReturnSessionLifetimeMs`).
    pub fn session_lifetime_ms(&self, now_ms: i64, max_reauth_ms: Option<i64>) -> i64 {
        let remaining = self.expires_at_ms.saturating_sub(now_ms);
        let capped = match max_reauth_ms.filter(|m| *m > 0) {
            Some(max) => remaining.min(max),
            None => remaining,
        };
        capped.max(0)
    }
}

/// A compact JWS split into its parts, header and claims decoded.
struct Jws<'a> {
    header: Map<String, Value>,
    claims: Map<String, Value>,
    signing_input: &'a str,
    signature: Vec<u8>,
}

fn split_jws(token: &str) -> Result<Jws<'_>, OAuthError> {
    let token = token.trim();
    if token.is_empty() {
        return Err(OAuthError::token("empty"));
    }
    if token.len() > MESSAGE_BYTES_MAX {
        return Err(OAuthError::token("too long"));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(OAuthError::token(
            "expected three sections (header, payload, and signature)",
        ));
    };
    let object = |part: &str, what: &str| -> Result<Map<String, Value>, OAuthError> {
        let bytes = B64URL
            .decode(part)
            .map_err(|_| OAuthError::token(format!("the {what} is not base64url")))?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(OAuthError::token(format!(
                "the {what} is not a JSON object"
            ))),
        }
    };
    let signature = B64URL
        .decode(signature)
        .map_err(|_| OAuthError::token("the signature is not base64url"))?;
    Ok(Jws {
        header: object(header, "header")?,
        claims: object(payload, "payload")?,
        signing_input: &token[..header.len() + 1 + payload.len()],
        signature,
    })
}

/// A NumericDate claim in whole seconds (jose4j truncates fractions), `None` when absent.
fn date_claim(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, OAuthError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let seconds = match (n.as_i64(), n.as_f64()) {
                (Some(s), _) => s,
                (None, Some(f)) if f.is_finite() && f.abs() < 1e15 => f.trunc() as i64,
                _ => return Err(OAuthError::BadClaim(name.into())),
            };
            if seconds < 0 {
                return Err(OAuthError::BadClaim(name.into()));
            }
            Ok(Some(seconds))
        }
        Some(_) => Err(OAuthError::BadClaim(name.into())),
    }
}

/// A string claim, trimmed and not blank (Kafka's `ClaimValidationUtils.validateString`).
fn string_claim(claims: &Map<String, Value>, name: &str) -> Result<String, OAuthError> {
    match claims.get(name) {
        None | Some(Value::Null) => Err(OAuthError::MissingClaim(name.into())),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(_) => Err(OAuthError::BadClaim(name.into())),
    }
}

/// The scope claim: one string (kept whole, as Kafka's validator does) or a list of strings.
fn scopes(claims: &Map<String, Value>, name: &str, split: bool) -> Result<Vec<String>, OAuthError> {
    let bad = || OAuthError::BadClaim(name.into());
    let raw: Vec<&str> = match claims.get(name) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if split => s.split(' ').filter(|s| !s.is_empty()).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    raw.into_iter()
        .map(|s| {
            let s = s.trim();
            if s.is_empty() {
                Err(bad())
            } else {
                Ok(s.to_string())
            }
        })
        .collect()
}

impl Validator {
    /// Checks `token` at `now_ms` (ms since the epoch).
    ///
    /// # Errors
    /// [`OAuthError`] naming the first check that failed.
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidToken, OAuthError> {
        let jws = split_jws(token)?;
        let alg = match jws.header.get("alg") {
            Some(Value::String(alg)) => alg.as_str(),
            _ => return Err(OAuthError::token("the header has no \"alg\"")),
        };
        match self {
            Validator::Signed { jwks, expect } => {
                if jws.header.contains_key("crit") {
                    return Err(OAuthError::token("critical header parameters"));
                }
                let verifier =
                    algorithm(alg).ok_or_else(|| OAuthError::Algorithm(alg.to_string()))?;
                let kid = match jws.header.get("kid") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(kid)) => Some(kid.as_str()),
                    Some(_) => return Err(OAuthError::token("\"kid\" is not a string")),
                };
                let mut candidates = jwks
                    .keys
                    .iter()
                    .filter(|k| kid.is_none_or(|kid| k.kid.as_deref() == Some(kid)))
                    .filter(|k| k.fits(alg, verifier))
                    .peekable();
                if candidates.peek().is_none() {
                    return Err(OAuthError::UnknownKey(kid.map(str::to_string)));
                }
                let message = jws.signing_input.as_bytes();
                if !candidates.any(|k| k.verifies(verifier, message, &jws.signature)) {
                    return Err(OAuthError::BadSignature);
                }
                check_signed_claims(&jws.claims, expect, now_ms)
            }
            Validator::Unsecured(options) => {
                if alg != "none" || !jws.signature.is_empty() {
                    return Err(OAuthError::Algorithm(alg.to_string()));
                }
                check_unsecured_claims(&jws.claims, options, now_ms)
            }
        }
    }
}

/// jose4j's checks as Kafka configures them (`ValidatorAccessTokenValidator`), plus `iat`
/// not in the future beyond the skew (Shoal's addition, decision 0028).
fn check_signed_claims(
    claims: &Map<String, Value>,
    expect: &Expectations,
    now_ms: i64,
) -> Result<ValidToken, OAuthError> {
    let skew_s = expect.clock_skew_s.max(0);
    let now_s = now_ms.div_euclid(1000);
    let exp = date_claim(claims, "exp")?.ok_or(OAuthError::MissingClaim("exp".into()))?;
    let iat = date_claim(claims, "iat")?.ok_or(OAuthError::MissingClaim("iat".into()))?;
    if now_s.saturating_sub(skew_s) >= exp {
        return Err(OAuthError::Expired {
            exp,
            now_ms,
            skew_s,
        });
    }
    if let Some(nbf) = date_claim(claims, "nbf")? {
        if now_s.saturating_add(skew_s) < nbf {
            return Err(OAuthError::NotYetValid {
                nbf,
                now_ms,
                skew_s,
            });
        }
    }
    if iat > now_s.saturating_add(skew_s) {
        return Err(OAuthError::IssuedInFuture {
            iat,
            now_ms,
            skew_s,
        });
    }
    match claims.get("aud") {
        None | Some(Value::Null) if expect.audience.is_empty() => {}
        None | Some(Value::Null) => return Err(OAuthError::MissingClaim("aud".into())),
        Some(aud) => {
            let named: Vec<&str> = match aud {
                Value::String(s) => vec![s.as_str()],
                Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().ok_or(OAuthError::BadClaim("aud".into())))
                    .collect::<Result<_, _>>()?,
                _ => return Err(OAuthError::BadClaim("aud".into())),
            };
            if !named.iter().any(|a| expect.audience.iter().any(|e| e == a)) {
                return Err(OAuthError::Audience);
            }
        }
    }
    if let Some(issuer) = &expect.issuer {
        match claims.get("iss") {
            Some(Value::String(iss)) if iss == issuer => {}
            Some(Value::String(_)) => return Err(OAuthError::Issuer),
            None | Some(Value::Null) => return Err(OAuthError::MissingClaim("iss".into())),
            Some(_) => return Err(OAuthError::BadClaim("iss".into())),
        }
    }
    let principal = string_claim(claims, &expect.sub_claim)?;
    let scopes = scopes(claims, &expect.scope_claim, false)?;
    Ok(ValidToken {
        principal,
        expires_at_ms: exp.saturating_mul(1000),
        scopes,
    })
}

/// Kafka's `OAuthBearerUnsecuredValidatorCallbackHandler` checks.
fn check_unsecured_claims(
    claims: &Map<String, Value>,
    options: &UnsecuredOptions,
    now_ms: i64,
) -> Result<ValidToken, OAuthError> {
    let skew_ms = options.clock_skew_ms.max(0);
    let principal = match claims.get(&options.principal_claim) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        None | Some(Value::Null) => {
            return Err(OAuthError::MissingClaim(options.principal_claim.clone()))
        }
        Some(_) => return Err(OAuthError::BadClaim(options.principal_claim.clone())),
    };
    let iat = date_claim(claims, "iat")?;
    if let Some(iat) = iat {
        if iat.saturating_mul(1000) > now_ms.saturating_add(skew_ms) {
            let skew_s = skew_ms / 1000;
            return Err(OAuthError::IssuedInFuture {
                iat,
                now_ms,
                skew_s,
            });
        }
    }
    let exp = date_claim(claims, "exp")?.ok_or(OAuthError::MissingClaim("exp".into()))?;
    if now_ms.saturating_sub(skew_ms) >= exp.saturating_mul(1000) {
        let skew_s = skew_ms / 1000;
        return Err(OAuthError::Expired {
            exp,
            now_ms,
            skew_s,
        });
    }
    if iat.is_some_and(|iat| exp <= iat) {
        return Err(OAuthError::Inconsistent);
    }
    let scopes = scopes(claims, &options.scope_claim, true)?;
    if let Some(missing) = options.required_scope.iter().find(|s| !scopes.contains(s)) {
        return Err(OAuthError::Scope(missing.clone()));
    }
    Ok(ValidToken {
        principal,
        expires_at_ms: exp.saturating_mul(1000),
        scopes,
    })
}

/// What the server answers a client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Authenticated: send an empty last message.
    Done(ValidToken),
    /// The token is invalid: send this challenge; the client answers `\x01` and the
    /// authentication then fails with the challenge as its message.
    Challenge(String, OAuthError),
}

/// One OAUTHBEARER exchange on the server (Kafka's `OAuthBearerSaslServer`).
#[derive(Debug, Default)]
pub struct OAuthBearerServer {
    /// The error challenge sent, while the client's `\x01` is awaited.
    error_sent: Option<String>,
    done: bool,
}

/// Why the exchange ended without a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The client acknowledged an error challenge: fail with the challenge as the message.
    Acknowledged(String),
    /// A malformed message or another refusal, with its reason.
    Refused(OAuthError),
}

impl OAuthBearerServer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one client message.
    ///
    /// # Errors
    /// [`Failure`]: the exchange is over, failed.
    pub fn evaluate(
        &mut self,
        message: &[u8],
        validator: &Validator,
        now_ms: i64,
    ) -> Result<Outcome, Failure> {
        if self.done {
            return Err(Failure::Refused(OAuthError::OutOfOrder));
        }
        if message == [CONTROL_A] {
            if let Some(challenge) = self.error_sent.take() {
                self.done = true;
                return Err(Failure::Acknowledged(challenge));
            }
        }
        // Anything else starts over, as Kafka's server does.
        self.error_sent = None;
        let first = ClientFirst::parse(message).map_err(|e| {
            self.done = true;
            Failure::Refused(e)
        })?;
        match validator.validate(&first.token, now_ms) {
            Ok(token) => {
                self.done = true;
                if !first.authzid.is_empty() && first.authzid != token.principal {
                    return Err(Failure::Refused(OAuthError::AuthzidMismatch {
                        authzid: first.authzid,
                        principal: token.principal,
                    }));
                }
                Ok(Outcome::Done(token))
            }
            Err(e) => {
                self.error_sent = Some(INVALID_TOKEN_CHALLENGE.to_string());
                Ok(Outcome::Challenge(INVALID_TOKEN_CHALLENGE.to_string(), e))
            }
        }
    }
}

/// Base64url without padding, for tests and tools that make tokens.
pub fn base64url(bytes: &[u8]) -> String {
    B64URL.encode(bytes)
}

#[cfg(test)]
mod tests;
