//! A SASL listener's settings, read from Kafka's keys: `sasl.enabled.mechanisms`, PLAIN's
//! users from `listener.name.<l>.plain.sasl.jaas.config` (`user_NAME="password"` options of
//! `PlainLoginModule`, as Kafka's `PlainServerCallbackHandler` reads them),
//! `connection.failed.authentication.delay.ms`, `sasl.server.max.receive.size` and
//! `connections.max.reauth.ms`, each overridable per listener; the session lifetime also per
//! mechanism (`listener.name.<l>.<mechanism>.connections.max.reauth.ms`), as Kafka's SASL
//! channel builder reads it.
//!
//! SCRAM credentials are not configuration: they live in the metadata log
//! (AlterUserScramCredentials). Passwords read here are never printed (`Debug` omits them).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{BrokerConfig, ConfigError};
use super::{LISTENER_PREFIX, MECHANISM_REAUTH_KEY};

/// A mechanism a listener may enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Scram(shoal_core::sasl::scram::ScramMechanism),
}

impl Mechanism {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Self::Plain),
            other => shoal_core::sasl::scram::ScramMechanism::from_name(other).map(Self::Scram),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::Scram(m) => m.name(),
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
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("failed_delay", &self.failed_delay)
            .field("receive_bytes_max", &self.receive_bytes_max)
            .field("session_lifetimes", &self.session_lifetimes)
            .finish()
    }
}

impl SaslSettings {
    /// The settings of `listener` (upper-case name).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`]: no mechanism enabled, a mechanism Shoal does not serve
    /// (GSSAPI, Kafka's default, or OAUTHBEARER), PLAIN without a JAAS configuration listing
    /// users, or a JAAS configuration that does not parse.
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
                         (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
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
            let options =
                parse_jaas(jaas).map_err(|reason| invalid(&jaas_key, "(hidden)", reason))?;
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

/// Parses one JAAS login-module entry, `Module flag key="value" key2=value2;`, into its
/// options. Values are quoted (with `\"` and `\\` escapes) or bare words.
///
/// # Errors
/// An empty entry, a missing control flag, an option without `=`, an unterminated quote, or
/// a missing `;`.
pub fn parse_jaas(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut rest = text.trim();
    let word = |rest: &mut &str| -> Option<String> {
        let trimmed = rest.trim_start();
        let end = trimmed
            .find(|c: char| c.is_whitespace() || c == ';' || c == '=')
            .unwrap_or(trimmed.len());
        let found = &trimmed[..end];
        *rest = &trimmed[end..];
        (!found.is_empty()).then(|| found.to_string())
    };
    word(&mut rest).ok_or("no JAAS login module is configured")?;
    let flag = word(&mut rest).ok_or("the JAAS entry has no control flag")?;
    if !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str()) {
        return Err(format!("'{flag}' is not a JAAS control flag"));
    }
    let mut options = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(';') {
            if !after.trim().is_empty() {
                return Err("one JAAS login module per listener and mechanism".into());
            }
            return Ok(options);
        }
        let key = word(&mut rest).ok_or("the JAAS entry does not end with ';'")?;
        rest = rest
            .trim_start()
            .strip_prefix('=')
            .ok_or_else(|| format!("JAAS option {key} has no '='"))?
            .trim_start();
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("JAAS option {key}: unterminated quote")),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("JAAS option {key}: unterminated quote")),
                }
            };
            rest = &quoted[end + 1..];
            value
        } else {
            word(&mut rest).ok_or_else(|| format!("JAAS option {key} has no value"))?
        };
        options.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="a \"quoted\" secret" user_bob=bare;"#;

    #[test]
    fn jaas_options_parse_like_kafkas() {
        let options = parse_jaas(JAAS).unwrap();
        assert_eq!(options["user_alice"], "a \"quoted\" secret");
        assert_eq!(options["user_bob"], "bare");
        assert_eq!(options["username"], "admin");
        assert_eq!(parse_jaas("M required;").unwrap().len(), 0);
        for bad in [
            "",
            "M",
            "M maybe;",
            "M required a=\"x;",
            "M required a;",
            "M required a=1",
        ] {
            assert!(parse_jaas(bad).is_err(), "{bad}");
        }
    }

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
