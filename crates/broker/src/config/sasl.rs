//! A SASL listener's settings, read from Kafka's keys: `sasl.enabled.mechanisms`, PLAIN's
//! users from `listener.name.<l>.plain.sasl.jaas.config` (`user_NAME="password"` options of
//! `PlainLoginModule`, as Kafka's `PlainServerCallbackHandler` reads them),
//! `connection.failed.authentication.delay.ms`, `sasl.server.max.receive.size` and
//! `connections.max.reauth.ms`, each overridable per listener; the session lifetime also per
//! mechanism (`listener.name.<l>.<mechanism>.connections.max.reauth.ms`), as Kafka's SASL
//! channel builder reads it.
//!
//! OAUTHBEARER's token validator: signed JWTs checked against the JSON Web Key Set that
//! `sasl.oauthbearer.jwks.endpoint.url` names (a `file:` URL, read once at start-up) with
//! `sasl.oauthbearer.expected.audience`, `.expected.issuer`, `.sub.claim.name`,
//! `.scope.claim.name` and `.clock.skew.seconds`, each per listener too; or unsigned tokens,
//! only when `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class` (or
//! `oauthbearer.sasl.server.callback.handler.class`) names Kafka's unsecured validator, its
//! options from `listener.name.<l>.oauthbearer.sasl.jaas.config`. Neither is a start-up
//! error: Kafka's default would accept unsigned tokens (decision 0028).
//!
//! SCRAM credentials are not configuration: they live in the metadata log
//! (AlterUserScramCredentials). Passwords read here are never printed (`Debug` omits them).

use std::collections::BTreeMap;
use std::time::Duration;

use shoal_core::sasl::jaas;
use shoal_core::sasl::oauthbearer::{self, Expectations, Jwks, UnsecuredOptions, Validator};

use super::{BrokerConfig, ConfigError};
use super::{LISTENER_PREFIX, MECHANISM_HANDLER_KEY, MECHANISM_REAUTH_KEY};

/// Kafka's validator of signed tokens (and its deprecated name of Kafka 3.x).
pub const SIGNED_VALIDATOR_CLASSES: [&str; 2] = [
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
];
/// Kafka's validator of unsigned tokens, its default, which Shoal uses only when named.
pub const UNSECURED_VALIDATOR_CLASS: &str =
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";

/// A mechanism a listener may enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Scram(shoal_core::sasl::scram::ScramMechanism),
    OAuthBearer,
}

impl Mechanism {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Self::Plain),
            oauthbearer::MECHANISM => Some(Self::OAuthBearer),
            other => shoal_core::sasl::scram::ScramMechanism::from_name(other).map(Self::Scram),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::Scram(m) => m.name(),
            Self::OAuthBearer => oauthbearer::MECHANISM,
        }
    }
}

/// What a SASL listener's connections authenticate with.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// In the order `sasl.enabled.mechanisms` lists them (SaslHandshake answers that list).
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users and their passwords.
    plain_users: BTreeMap<String, String>,
    /// How long a failed authentication waits before its answer and the close.
    pub failed_delay: Duration,
    /// Largest frame accepted before authentication completes.
    pub receive_bytes_max: usize,
    /// Each mechanism's session lifetime (KIP-368), for the mechanisms that have one.
    session_lifetimes: Vec<(Mechanism, Duration)>,
    /// How OAUTHBEARER tokens are checked, when that mechanism is enabled.
    pub oauth: Option<Validator>,
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("failed_delay", &self.failed_delay)
            .field("receive_bytes_max", &self.receive_bytes_max)
            .field("session_lifetimes", &self.session_lifetimes)
            .field("oauth", &self.oauth.as_ref().map(validator_kind))
            .finish()
    }
}

impl SaslSettings {
    /// The settings of `listener` (upper-case name).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`]: no mechanism enabled, a mechanism Shoal does not serve
    /// (GSSAPI, Kafka's default), PLAIN without a JAAS configuration listing users, a JAAS
    /// configuration that does not parse, or OAUTHBEARER without a validator
    /// ([`oauth_validator`]'s errors).
    pub fn for_listener(config: &BrokerConfig, listener: &str) -> Result<Self, ConfigError> {
        let key = own_key(config, listener, "sasl.enabled.mechanisms");
        let value = config.listener_get(listener, "sasl.enabled.mechanisms");
        let invalid = |key: &str, value: &str, reason: String| ConfigError::Invalid {
            name: key.to_string(),
            value: value.to_string(),
            reason,
        };
        let mut mechanisms = Vec::new();
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let mechanism = Mechanism::parse(name).ok_or_else(|| {
                invalid(
                    &key,
                    value,
                    format!(
                        "listener {listener}: SASL mechanism {name} is not served \
                         (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"
                    ),
                )
            })?;
            if !mechanisms.contains(&mechanism) {
                mechanisms.push(mechanism);
            }
        }
        if mechanisms.is_empty() {
            return Err(invalid(
                &key,
                value,
                format!("listener {listener} uses SASL but enables no mechanism"),
            ));
        }
        let mut plain_users = BTreeMap::new();
        if mechanisms.contains(&Mechanism::Plain) {
            let jaas_key = format!(
                "{LISTENER_PREFIX}{}.plain.sasl.jaas.config",
                listener.to_ascii_lowercase()
            );
            let jaas = config.listener_get(listener, "plain.sasl.jaas.config");
            let options = jaas::parse(jaas)
                .map_err(|reason| invalid(&jaas_key, "(hidden)", reason))?
                .options;
            plain_users = options
                .into_iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), v)))
                .collect();
            if plain_users.is_empty() {
                return Err(invalid(
                    &jaas_key,
                    "(hidden)",
                    "PLAIN is enabled but the JAAS configuration lists no user_NAME=\"password\""
                        .into(),
                ));
            }
        }
        let oauth = if mechanisms.contains(&Mechanism::OAuthBearer) {
            Some(oauth_validator(config, listener)?)
        } else {
            None
        };
        let delay_ms = config.listener_get(listener, "connection.failed.authentication.delay.ms");
        let receive = config.listener_get(listener, "sasl.server.max.receive.size");
        let session_lifetimes = mechanisms
            .iter()
            .filter_map(|m| Some((*m, session_lifetime(config, listener, *m)?)))
            .collect();
        Ok(Self {
            mechanisms,
            plain_users,
            failed_delay: Duration::from_millis(delay_ms.parse().unwrap_or(100)),
            receive_bytes_max: receive.parse::<usize>().unwrap_or(524_288).max(64),
            session_lifetimes,
            oauth,
        })
    }

    /// How long a session authenticated with `mechanism` lasts before the client must
    /// re-authenticate (KIP-368); `None` when sessions do not expire.
    pub fn session_lifetime(&self, mechanism: Mechanism) -> Option<Duration> {
        self.session_lifetimes
            .iter()
            .find(|(m, _)| *m == mechanism)
            .map(|(_, lifetime)| *lifetime)
    }

    /// PLAIN's password for `user`.
    pub fn plain_password(&self, user: &str) -> Option<&str> {
        self.plain_users.get(user).map(String::as_str)
    }

    /// The enabled mechanisms' names, for SaslHandshake.
    pub fn mechanism_names(&self) -> Vec<&'static str> {
        self.mechanisms.iter().map(|m| m.name()).collect()
    }
}

fn validator_kind(validator: &Validator) -> String {
    match validator {
        Validator::Signed { jwks, .. } => format!("signed JWTs, {} keys", jwks.len()),
        Validator::Unsecured(_) => "unsecured JWTs".into(),
    }
}

/// OAUTHBEARER's validator on `listener`: the class its
/// `oauthbearer.sasl.server.callback.handler.class` names — Kafka's unsecured validator,
/// Kafka's signed one, or none (signed) — and, for signed tokens, the key set and
/// expectations of the `sasl.oauthbearer.*` keys.
///
/// # Errors
/// [`ConfigError::Invalid`]: another class; signed tokens without
/// `sasl.oauthbearer.jwks.endpoint.url`; a URL other than `file:` (https is not served yet);
/// a file that cannot be read or is not a usable key set; a malformed JAAS entry or option
/// of the unsecured validator.
pub fn oauth_validator(config: &BrokerConfig, listener: &str) -> Result<Validator, ConfigError> {
    let lower = listener.to_ascii_lowercase();
    let handler_suffix = format!("oauthbearer.{MECHANISM_HANDLER_KEY}");
    let handler_key = match config.get_opt(&format!("{LISTENER_PREFIX}{lower}.{handler_suffix}")) {
        Some(_) => format!("{LISTENER_PREFIX}{lower}.{handler_suffix}"),
        None => handler_suffix.clone(),
    };
    let handler = config.get_opt(&handler_key).unwrap_or("").trim();
    let url_key = own_key(config, listener, "sasl.oauthbearer.jwks.endpoint.url");
    let invalid = |key: &str, value: &str, reason: String| ConfigError::Invalid {
        name: key.to_string(),
        value: value.to_string(),
        reason: format!("listener {listener}: {reason}"),
    };
    if handler == UNSECURED_VALIDATOR_CLASS {
        return unsecured_options(config, listener).map(Validator::Unsecured);
    }
    if !handler.is_empty() && !SIGNED_VALIDATOR_CLASSES.contains(&handler) {
        return Err(invalid(
            &handler_key,
            handler,
            format!(
                "OAUTHBEARER validates tokens with {} (signed JWTs) or, named explicitly, \
                 {UNSECURED_VALIDATOR_CLASS}; no other class is served",
                SIGNED_VALIDATOR_CLASSES[0]
            ),
        ));
    }
    let url = config
        .listener_get(listener, "sasl.oauthbearer.jwks.endpoint.url")
        .trim();
    if url.is_empty() {
        return Err(invalid(
            &url_key,
            url,
            format!(
                "OAUTHBEARER is enabled but sasl.oauthbearer.jwks.endpoint.url (per listener: \
                 listener.name.{lower}.sasl.oauthbearer.jwks.endpoint.url) names no JSON Web \
                 Key Set; unsigned tokens are accepted only when \
                 listener.name.{lower}.{handler_suffix} is {UNSECURED_VALIDATOR_CLASS}"
            ),
        ));
    }
    let jwks = read_jwks(url).map_err(|reason| invalid(&url_key, url, reason))?;
    let audience = config
        .listener_get(listener, "sasl.oauthbearer.expected.audience")
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    let issuer = Some(
        config
            .listener_get(listener, "sasl.oauthbearer.expected.issuer")
            .trim(),
    )
    .filter(|i| !i.is_empty())
    .map(str::to_string);
    let claim = |key: &str, default: &str| {
        Some(config.listener_get(listener, key).trim())
            .filter(|c| !c.is_empty())
            .unwrap_or(default)
            .to_string()
    };
    let skew = config.listener_get(listener, "sasl.oauthbearer.clock.skew.seconds");
    Ok(Validator::Signed {
        jwks,
        expect: Expectations {
            audience,
            issuer,
            sub_claim: claim("sasl.oauthbearer.sub.claim.name", "sub"),
            scope_claim: claim("sasl.oauthbearer.scope.claim.name", "scope"),
            clock_skew_s: skew.trim().parse::<i64>().unwrap_or(30).max(0),
        },
    })
}

/// The JSON Web Key Set a `file:` URL names.
fn read_jwks(url: &str) -> Result<Jwks, String> {
    let Some(rest) = url.strip_prefix("file:") else {
        if url.starts_with("https:") || url.starts_with("http:") {
            return Err(format!(
                "fetching the JSON Web Key Set from {url} is not supported yet: give a file: \
                 URL of a local copy"
            ));
        }
        return Err("not a file: URL".into());
    };
    // file:///path, file://localhost/path and file:/path.
    let path = match rest.strip_prefix("//") {
        Some(authority_path) => {
            let slash = authority_path
                .find('/')
                .ok_or("a file: URL without a path")?;
            match &authority_path[..slash] {
                "" | "localhost" => &authority_path[slash..],
                host => return Err(format!("a file: URL on another host ({host})")),
            }
        }
        None => rest,
    };
    let path = percent_decode(path)?;
    let limit = oauthbearer::JWKS_BYTES_MAX as u64 + 1;
    let mut text = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(&path).map_err(|e| format!("cannot read {path}: {e}"))?,
            limit,
        ),
        &mut text,
    )
    .map_err(|e| format!("cannot read {path}: {e}"))?;
    Jwks::parse(&text).map_err(|e| format!("{path} is not a usable JSON Web Key Set: {e}"))
}

/// `%XX` escapes of a URL path.
fn percent_decode(path: &str) -> Result<String, String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = path
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a bad %-escape in the file: URL")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the file: URL's path is not UTF-8".into())
}

/// The unsecured validator's options, from its JAAS entry (`OAuthBearerLoginModule required
/// unsecuredValidatorPrincipalClaimName="..." ...;`); none given: Kafka's defaults.
fn unsecured_options(
    config: &BrokerConfig,
    listener: &str,
) -> Result<UnsecuredOptions, ConfigError> {
    let jaas_key = format!(
        "{LISTENER_PREFIX}{}.oauthbearer.sasl.jaas.config",
        listener.to_ascii_lowercase()
    );
    let jaas = config.listener_get(listener, "oauthbearer.sasl.jaas.config");
    let mut options = UnsecuredOptions::default();
    if jaas.trim().is_empty() {
        return Ok(options);
    }
    let invalid = |reason: String| ConfigError::Invalid {
        name: jaas_key.clone(),
        value: "(hidden)".into(),
        reason,
    };
    let given = jaas::parse(jaas).map_err(invalid)?.options;
    let text = |name: &str| given.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    if let Some(claim) = text("unsecuredValidatorPrincipalClaimName") {
        options.principal_claim = claim.to_string();
    }
    if let Some(claim) = text("unsecuredValidatorScopeClaimName") {
        options.scope_claim = claim.to_string();
    }
    if let Some(scope) = text("unsecuredValidatorRequiredScope") {
        options.required_scope = scope
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    if let Some(skew) = text("unsecuredValidatorAllowableClockSkewMs") {
        options.clock_skew_ms = skew
            .parse::<i32>()
            .ok()
            .filter(|ms| *ms >= 0)
            .ok_or_else(|| {
                invalid(format!(
                    "unsecuredValidatorAllowableClockSkewMs {skew:?} is not a non-negative int"
                ))
            })?
            .into();
    }
    Ok(options)
}

/// `connections.max.reauth.ms` for `mechanism` on `listener`: the listener's
/// `<mechanism>.`-prefixed key, else the listener's own key, else the broker-wide one. Zero or
/// negative: sessions never expire (Kafka's default, 0).
fn session_lifetime(
    config: &BrokerConfig,
    listener: &str,
    mechanism: Mechanism,
) -> Option<Duration> {
    let own = format!(
        "{}.{MECHANISM_REAUTH_KEY}",
        mechanism.name().to_ascii_lowercase()
    );
    let value = match config.listener_get(listener, &own) {
        "" => config.listener_get(listener, MECHANISM_REAUTH_KEY),
        value => value,
    };
    let ms = value.parse::<i64>().ok().filter(|ms| *ms > 0)?;
    Some(Duration::from_millis(ms.unsigned_abs()))
}

/// The key a listener's value comes from: its own when set, else the broker-wide one.
fn own_key(config: &BrokerConfig, listener: &str, key: &str) -> String {
    let own = format!("{LISTENER_PREFIX}{}.{key}", listener.to_ascii_lowercase());
    if config.get_opt(&own).is_some() {
        own
    } else {
        key.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="a \"quoted\" secret" user_bob=bare;"#;

    fn config(pairs: &[(&str, &str)]) -> BrokerConfig {
        let mut config = BrokerConfig::default();
        for (k, v) in pairs {
            config.set(k, v).unwrap();
        }
        config
    }

    #[test]
    fn a_listener_reads_its_own_mechanisms_and_plain_users() {
        let config = config(&[
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256"),
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-512",
            ),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
            ("connection.failed.authentication.delay.ms", "250"),
        ]);
        let settings = SaslSettings::for_listener(&config, "SASL_PLAINTEXT").unwrap();
        assert_eq!(settings.mechanism_names(), vec!["PLAIN", "SCRAM-SHA-512"]);
        assert_eq!(
            settings.plain_password("alice"),
            Some("a \"quoted\" secret")
        );
        assert_eq!(settings.plain_password("admin"), Some("admin-secret"));
        assert_eq!(settings.plain_password("carol"), None);
        assert_eq!(settings.failed_delay, Duration::from_millis(250));
        let shown = format!("{settings:?}");
        assert!(!shown.contains("secret"), "{shown}");
        let other = SaslSettings::for_listener(&config, "OTHER").unwrap();
        assert_eq!(other.mechanism_names(), vec!["SCRAM-SHA-256"]);
    }

    #[test]
    fn session_lifetimes_come_per_mechanism_then_per_listener_then_broker_wide() {
        let scram = Mechanism::Scram(shoal_core::sasl::scram::ScramMechanism::Sha512);
        let off = config(&[("sasl.enabled.mechanisms", "SCRAM-SHA-512")]);
        let settings = SaslSettings::for_listener(&off, "SASL_PLAINTEXT").unwrap();
        assert_eq!(
            settings.session_lifetime(scram),
            None,
            "Kafka's default 0: off"
        );
        let config = config(&[
            ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
            ("listener.name.a.plain.sasl.jaas.config", JAAS),
            ("listener.name.b.plain.sasl.jaas.config", JAAS),
            ("listener.name.c.plain.sasl.jaas.config", JAAS),
            ("connections.max.reauth.ms", "60000"),
            ("listener.name.a.connections.max.reauth.ms", "5000"),
            (
                "listener.name.a.scram-sha-512.connections.max.reauth.ms",
                "1500",
            ),
            ("listener.name.c.connections.max.reauth.ms", "-1"),
        ]);
        let a = SaslSettings::for_listener(&config, "A").unwrap();
        assert_eq!(a.session_lifetime(scram), Some(Duration::from_millis(1500)));
        assert_eq!(
            a.session_lifetime(Mechanism::Plain),
            Some(Duration::from_millis(5000))
        );
        let b = SaslSettings::for_listener(&config, "B").unwrap();
        assert_eq!(b.session_lifetime(scram), Some(Duration::from_secs(60)));
        let c = SaslSettings::for_listener(&config, "C").unwrap();
        assert_eq!(c.session_lifetime(scram), None, "negative: off");
        let mut bad = BrokerConfig::default();
        let error = bad
            .set(
                "listener.name.a.scram-sha-512.connections.max.reauth.ms",
                "soon",
            )
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("listener.name.a.scram-sha-512.connections.max.reauth.ms"),
            "{error}"
        );
    }

    /// A key set of one P-256 key and an `oct` key left out. The coordinates are arbitrary
    /// 32-byte strings: reading a key set checks their shape, verifying checks the point.
    const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k",
        "x":"ax2ZSDgFoBtVrPvWxzJrfQ9yPAKQhESYVBGB5pA8R_M",
        "y":"lKQfAUHCkD8Cq8xUFtEeG2XrKdUbDJLtuUbUMJhXbVQ"},
        {"kty":"oct","k":"AA"}]}"#;

    #[test]
    fn oauthbearer_validates_signed_tokens_or_unsigned_ones_only_when_named() {
        let dir = std::env::temp_dir().join(format!("shoal-jwks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jwks.json");
        std::fs::write(&path, JWKS).unwrap();
        let url = format!("file://{}", path.display());
        let handler = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class";
        let signed = config(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "listener.name.sasl_plaintext.sasl.oauthbearer.jwks.endpoint.url",
                &url,
            ),
            ("sasl.oauthbearer.expected.audience", "a, b"),
            ("sasl.oauthbearer.clock.skew.seconds", "5"),
            (
                "listener.name.sasl_plaintext.sasl.oauthbearer.sub.claim.name",
                "client_id",
            ),
        ]);
        let settings = SaslSettings::for_listener(&signed, "SASL_PLAINTEXT").unwrap();
        let Some(Validator::Signed { jwks, expect }) = &settings.oauth else {
            panic!("signed tokens: {settings:?}");
        };
        assert_eq!(jwks.len(), 1);
        assert_eq!(expect.audience, ["a", "b"]);
        assert_eq!(expect.issuer, None);
        assert_eq!(expect.clock_skew_s, 5);
        assert_eq!(expect.sub_claim, "client_id");
        assert_eq!(expect.scope_claim, "scope");
        // Kafka's signed validator named: the same.
        let mut named = signed.clone();
        named.set(handler, SIGNED_VALIDATOR_CLASSES[0]).unwrap();
        let settings = SaslSettings::for_listener(&named, "SASL_PLAINTEXT").unwrap();
        assert!(matches!(settings.oauth, Some(Validator::Signed { .. })));
        // Kafka's unsecured validator only when named, per listener or for all.
        let unsecured = config(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (handler, UNSECURED_VALIDATOR_CLASS),
            (
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
                 unsecuredValidatorPrincipalClaimName=\"who\" \
                 unsecuredValidatorAllowableClockSkewMs=\"2000\";",
            ),
        ]);
        let settings = SaslSettings::for_listener(&unsecured, "SASL_PLAINTEXT").unwrap();
        let Some(Validator::Unsecured(options)) = &settings.oauth else {
            panic!("unsecured tokens: {settings:?}");
        };
        assert_eq!(options.principal_claim, "who");
        assert_eq!(options.clock_skew_ms, 2000);
        let everywhere = config(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "oauthbearer.sasl.server.callback.handler.class",
                UNSECURED_VALIDATOR_CLASS,
            ),
        ]);
        let settings = SaslSettings::for_listener(&everywhere, "OTHER").unwrap();
        assert!(matches!(settings.oauth, Some(Validator::Unsecured(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn oauthbearer_without_a_key_set_or_with_an_unserved_one_fails_start_up() {
        let error = |pairs: &[(&str, &str)]| {
            let mut all = vec![("sasl.enabled.mechanisms", "OAUTHBEARER")];
            all.extend_from_slice(pairs);
            SaslSettings::for_listener(&config(&all), "SASL_PLAINTEXT")
                .unwrap_err()
                .to_string()
        };
        let none = error(&[]);
        assert!(
            none.contains("sasl.oauthbearer.jwks.endpoint.url"),
            "{none}"
        );
        assert!(
            none.contains("oauthbearer.sasl.server.callback.handler.class"),
            "{none}"
        );
        let https = error(&[(
            "sasl.oauthbearer.jwks.endpoint.url",
            "https://idp.example/jwks",
        )]);
        assert!(https.contains("not supported yet"), "{https}");
        let missing = error(&[(
            "sasl.oauthbearer.jwks.endpoint.url",
            "file:///nonexistent/shoal/jwks.json",
        )]);
        assert!(
            missing.contains("cannot read /nonexistent/shoal/jwks.json"),
            "{missing}"
        );
        let class = error(&[(
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class",
            "com.example.MyValidator",
        )]);
        assert!(class.contains("no other class is served"), "{class}");
    }

    #[test]
    fn unserved_or_incomplete_sasl_settings_are_start_up_errors() {
        // Kafka's default mechanism is GSSAPI, which Shoal does not serve.
        let default = SaslSettings::for_listener(&BrokerConfig::default(), "SASL_PLAINTEXT");
        assert!(default
            .unwrap_err()
            .to_string()
            .contains("GSSAPI is not served"));
        let no_users = config(&[("sasl.enabled.mechanisms", "PLAIN")]);
        let error = SaslSettings::for_listener(&no_users, "SASL_PLAINTEXT").unwrap_err();
        assert!(
            error.to_string().contains("no JAAS login module"),
            "{error}"
        );
        let empty = config(&[("sasl.enabled.mechanisms", "")]);
        let error = SaslSettings::for_listener(&empty, "SASL_PLAINTEXT").unwrap_err();
        assert!(
            error.to_string().contains("enables no mechanism"),
            "{error}"
        );
    }
}
