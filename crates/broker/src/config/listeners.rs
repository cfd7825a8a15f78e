//! Listeners as Kafka configures them: `listeners`, `advertised.listeners`,
//! `listener.security.protocol.map`, and per-listener settings under the
//! `listener.name.<name>.` prefix.
//!
//! `listeners=PLAINTEXT://127.0.0.1:9092,SECURE://:9093` names each listener and its bind
//! address (an empty host binds every interface); the protocol map gives each name its
//! security protocol (`SECURE:SASL_SSL`); `advertised.listeners` gives, per name, the address
//! clients are told to use. A per-listener setting (`listener.name.secure.ssl.keystore.location`)
//! wins over the broker-wide key (`ssl.keystore.location`) for that listener only.
//!
//! Parsing is pure: it reads a [`BrokerConfig`] and returns [`ListenerConfig`]s or a
//! [`ConfigError`] naming the key and why, which the broker reports at start-up. Binding
//! sockets is the server's job.

use super::LISTENER_PREFIX;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::sasl::SaslSettings;
use super::{BrokerConfig, ConfigError};

/// Listeners at most: each is a socket and an accept loop; Kafka has no limit, but a
/// configuration with more is a mistake.
pub const LISTENERS_MAX: usize = 16;

/// Kafka's `SecurityProtocol` (its `id`s: 0, 1, 2, 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's spelling, case-insensitively (`SecurityProtocol.forName`).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(Self::Plaintext),
            "SSL" => Some(Self::Ssl),
            "SASL_PLAINTEXT" => Some(Self::SaslPlaintext),
            "SASL_SSL" => Some(Self::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections start with a TLS handshake.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether a connection must authenticate with SASL before anything else is served.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A host and port as written in a listener URL; an empty host means every interface (for
/// binding) or "this machine's name" (for advertising).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

/// One listener: its name (upper case, as Kafka normalises it), protocol, bind address and,
/// when `advertised.listeners` names it, the address clients are told to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: HostPort,
    pub advertised: Option<HostPort>,
    /// For SASL_PLAINTEXT and SASL_SSL listeners: how connections authenticate.
    pub sasl: Option<SaslSettings>,
}

impl ListenerConfig {
    /// `listener.name.<name>.`, the prefix of this listener's own settings.
    pub fn config_prefix(&self) -> String {
        format!("{LISTENER_PREFIX}{}.", self.name.to_ascii_lowercase())
    }
}

/// A listener as the running broker knows it, once bound: what a connection and its
/// handlers need (the name for per-listener settings, the protocol, where clients are sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// Where clients of this listener are told to find this node; `None` leaves the address
    /// to the ownership seam (the one-listener embedding used by tests and `server::run`).
    pub advertised: Option<HostPort>,
    /// For SASL listeners: how connections authenticate before anything else is served.
    pub sasl: Option<Arc<SaslSettings>>,
}

fn invalid(name: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Splits `NAME://host:port` (`[v6]` hosts in brackets) into its name and address.
fn parse_url(key: &str, value: &str, item: &str) -> Result<(String, HostPort), ConfigError> {
    let bad = |why: &str| invalid(key, value, format!("'{item}': {why}"));
    let (name, address) = item
        .split_once("://")
        .ok_or_else(|| bad("expected NAME://host:port"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("a listener name is letters, digits and '_'"));
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("expected NAME://host:port"))?;
    let host = match host.strip_prefix('[') {
        Some(v6) => v6
            .strip_suffix(']')
            .ok_or_else(|| bad("unclosed '[' in host"))?,
        None => host,
    };
    if host.contains(['/', '@', ' ']) {
        return Err(bad("not a host name or address"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port must be a number from 0 to 65535"))?;
    let name = name.to_ascii_uppercase();
    Ok((
        name,
        HostPort {
            host: host.to_string(),
            port,
        },
    ))
}

/// Parses `listener.security.protocol.map`: `NAME:PROTOCOL` pairs.
///
/// # Errors
/// A pair without a colon, an unknown protocol or a name given twice.
pub fn parse_protocol_map(value: &str) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    const KEY: &str = "listener.security.protocol.map";
    let mut map = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, protocol) = pair
            .split_once(':')
            .ok_or_else(|| invalid(KEY, value, format!("'{pair}': expected NAME:PROTOCOL")))?;
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
            invalid(
                KEY,
                value,
                format!(
                    "'{protocol}' is not a security protocol \
                     (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
                ),
            )
        })?;
        let name = name.trim().to_ascii_uppercase();
        if map.insert(name.clone(), protocol).is_some() {
            return Err(invalid(
                KEY,
                value,
                format!("listener {name} is mapped twice"),
            ));
        }
    }
    Ok(map)
}

/// A list of listener URLs: each name once, at most [`LISTENERS_MAX`].
fn parse_list(key: &str, value: &str) -> Result<Vec<(String, HostPort)>, ConfigError> {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect();
    if items.len() > LISTENERS_MAX {
        return Err(invalid(
            key,
            value,
            format!("at most {LISTENERS_MAX} listeners"),
        ));
    }
    let mut parsed: Vec<(String, HostPort)> = Vec::with_capacity(items.len());
    for item in items {
        let (name, address) = parse_url(key, value, item)?;
        if parsed.iter().any(|(n, _)| *n == name) {
            return Err(invalid(
                key,
                value,
                format!("each listener must have a different name; {name} is given twice"),
            ));
        }
        parsed.push((name, address));
    }
    Ok(parsed)
}

/// The listeners `config` describes, in the order `listeners` gives them.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the key at fault: a malformed URL, a name given twice, two
/// listeners on one port, a name missing from `listener.security.protocol.map`, an advertised
/// listener that is not a listener, or an advertised `0.0.0.0`.
pub fn parse_listeners(config: &BrokerConfig) -> Result<Vec<ListenerConfig>, ConfigError> {
    let listeners_value = config.get("listeners");
    let bound = parse_list("listeners", listeners_value)?;
    if bound.is_empty() {
        return Err(invalid("listeners", listeners_value, "no listener given"));
    }
    for (i, (name, address)) in bound.iter().enumerate() {
        let clash = bound[..i]
            .iter()
            .find(|(_, other)| address.port != 0 && other.port == address.port);
        if let Some((other, _)) = clash {
            return Err(invalid(
                "listeners",
                listeners_value,
                format!(
                    "each listener must have a different port; {other} and {name} both use {}",
                    address.port
                ),
            ));
        }
    }
    let map_value = config.get("listener.security.protocol.map");
    let map = parse_protocol_map(map_value)?;
    let advertised_value = config.get("advertised.listeners");
    let advertised = parse_list("advertised.listeners", advertised_value)?;
    for (name, address) in &advertised {
        if !bound.iter().any(|(n, _)| n == name) {
            return Err(invalid(
                "advertised.listeners",
                advertised_value,
                format!("{name} is not one of the listeners ({listeners_value})"),
            ));
        }
        if address.host == "0.0.0.0" || address.host == "::" {
            return Err(invalid(
                "advertised.listeners",
                advertised_value,
                format!(
                    "{name} cannot advertise the non-routable address {}",
                    address.host
                ),
            ));
        }
    }
    bound
        .into_iter()
        .map(|(name, bind)| {
            let protocol = *map.get(&name).ok_or_else(|| {
                invalid(
                    "listener.security.protocol.map",
                    map_value,
                    format!("no security protocol is defined for listener {name}"),
                )
            })?;
            let advertised = advertised
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, a)| a.clone());
            let sasl = if protocol.uses_sasl() {
                Some(SaslSettings::for_listener(config, &name)?)
            } else {
                None
            };
            Ok(ListenerConfig {
                name,
                protocol,
                bind,
                advertised,
                sasl,
            })
        })
        .collect()
}

/// Splits a per-listener key `listener.name.<name>.<key>` into the listener's name (upper
/// case) and the key; `None` for any other key.
pub fn split_listener_key(key: &str) -> Option<(String, &str)> {
    let rest = key.strip_prefix(LISTENER_PREFIX)?;
    let (name, key) = rest.split_once('.')?;
    if name.is_empty() || key.is_empty() {
        return None;
    }
    Some((name.to_ascii_uppercase(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BrokerConfig {
        let mut config = BrokerConfig::default();
        for (k, v) in pairs {
            config.set(k, v).unwrap();
        }
        config
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        parse_listeners(&config(pairs)).unwrap_err().to_string()
    }

    #[test]
    fn kafkas_default_is_one_plaintext_listener_on_every_interface() {
        let listeners = parse_listeners(&BrokerConfig::default()).unwrap();
        assert_eq!(
            listeners,
            vec![ListenerConfig {
                name: "PLAINTEXT".into(),
                protocol: SecurityProtocol::Plaintext,
                bind: HostPort {
                    host: String::new(),
                    port: 9092
                },
                advertised: None,
                sasl: None,
            }]
        );
    }

    #[test]
    fn several_listeners_with_their_protocols_and_advertised_addresses() {
        let listeners = parse_listeners(&config(&[
            (
                "listeners",
                "INTERNAL://127.0.0.1:9092, external://[::1]:9094,SASL_SSL://:0",
            ),
            (
                "listener.security.protocol.map",
                "INTERNAL:PLAINTEXT,EXTERNAL:sasl_plaintext,SASL_SSL:SASL_SSL",
            ),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
            ("advertised.listeners", "EXTERNAL://broker.example:19094"),
        ]))
        .unwrap();
        let summary: Vec<_> = listeners
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    l.protocol,
                    l.bind.host.as_str(),
                    l.bind.port,
                    l.advertised.as_ref().map(|a| (a.host.as_str(), a.port)),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "INTERNAL",
                    SecurityProtocol::Plaintext,
                    "127.0.0.1",
                    9092,
                    None
                ),
                (
                    "EXTERNAL",
                    SecurityProtocol::SaslPlaintext,
                    "::1",
                    9094,
                    Some(("broker.example", 19094))
                ),
                ("SASL_SSL", SecurityProtocol::SaslSsl, "", 0, None),
            ]
        );
        assert_eq!(listeners[1].config_prefix(), "listener.name.external.");
    }

    #[test]
    fn bad_configurations_name_the_key_and_the_reason() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("listeners", "127.0.0.1:9092")],
                "expected NAME://host:port",
            ),
            (
                &[("listeners", "PLAINTEXT://127.0.0.1")],
                "expected NAME://host:port",
            ),
            (
                &[("listeners", "PLAINTEXT://h:99999")],
                "port must be a number",
            ),
            (&[("listeners", "")], "no listener given"),
            (
                &[("listeners", "PLAINTEXT://:1,plaintext://:2")],
                "different name; PLAINTEXT is given twice",
            ),
            (
                &[("listeners", "PLAINTEXT://a:9092,SSL://b:9092")],
                "different port; PLAINTEXT and SSL both use 9092",
            ),
            (
                &[("listeners", "OTHER://:9092")],
                "no security protocol is defined for listener OTHER",
            ),
            (
                &[("listener.security.protocol.map", "PLAINTEXT:TLS")],
                "'TLS' is not a security protocol",
            ),
            (
                &[("listener.security.protocol.map", "PLAINTEXT")],
                "expected NAME:PROTOCOL",
            ),
            (
                &[("advertised.listeners", "SSL://h:1")],
                "SSL is not one of the listeners",
            ),
            (
                &[("advertised.listeners", "PLAINTEXT://0.0.0.0:9092")],
                "non-routable address 0.0.0.0",
            ),
        ];
        for (pairs, expected) in cases {
            let message = error(pairs);
            assert!(
                message.contains(expected),
                "{pairs:?}: expected '{expected}' in '{message}'"
            );
        }
        let many: Vec<String> = (0..=LISTENERS_MAX)
            .map(|i| format!("L{i}://:{}", 1000 + i))
            .collect();
        assert!(error(&[("listeners", &many.join(","))]).contains("at most"));
    }

    #[test]
    fn per_listener_keys_split_into_listener_and_key() {
        assert_eq!(
            split_listener_key("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"),
            Some(("SASL_SSL".to_string(), "scram-sha-512.sasl.jaas.config"))
        );
        assert_eq!(split_listener_key("listener.name.x"), None);
        assert_eq!(split_listener_key("listener.security.protocol.map"), None);
    }
}
