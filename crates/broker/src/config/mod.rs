//! Broker, topic and group configuration with Kafka's key names.
//!
//! Every key Kafka 4.4 accepts is accepted, with Kafka's type, range and default: the tables
//! are data, one row per key, in [`broker`] (the BROKER resource and `server.properties`),
//! [`topic`] (topic overrides) and [`crate::group_configs`] (the GROUP resource). Each row says
//! what Shoal does with the key; keys with no effect on one node are listed in
//! `docs/decisions/0007-every-kafka-config-key.md`. Unknown keys are INVALID_CONFIG.
//!
//! Sources, lowest precedence first: built-in defaults, a properties file (`--config`),
//! `SHOAL_*` environment variables (`SHOAL_NUM_PARTITIONS=3` sets `num.partitions`), command-line
//! flags. A bad value is an error at start-up (for the broker) or INVALID_CONFIG (for a topic).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

mod broker;
/// The prefix of per-listener keys; the listener's name follows in lower case, then a dot.
pub const LISTENER_PREFIX: &str = "listener.name.";

pub mod listeners;
pub mod sasl;
mod topic;

pub use broker::BROKER_CONFIGS;
pub use topic::TOPIC_CONFIGS;

/// Kafka's `ConfigDef.Type`, as DescribeConfigs reports it (`config_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// A check beyond the type: returns the value to store or why it is refused.
pub type Check = fn(&str) -> Result<String, String>;

/// The type and range of one configuration key.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A Java int within `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    /// A Java short within `min..=max`.
    Short {
        min: i64,
        max: i64,
    },
    /// A Java long within `min..=max`.
    Long {
        min: i64,
        max: i64,
    },
    /// A Java double within `min..=max`.
    Double {
        min: f64,
        max: f64,
    },
    Bool,
    /// One of the listed words (compared case-insensitively, stored as listed).
    Choice(&'static [&'static str]),
    /// A comma-separated list of the listed words (Kafka's LIST type), stored as listed.
    List(&'static [&'static str]),
    /// A comma-separated list of anything.
    AnyList,
    /// Any string.
    Text,
    /// A Java class name (never loaded by Shoal).
    Class,
    /// A secret: accepted, never described (DescribeConfigs answers null, sensitive).
    Password,
    /// A value of `Type` checked by a function.
    Custom(Type, Check),
}

impl Kind {
    /// The type DescribeConfigs reports.
    pub fn config_type(&self) -> Type {
        match self {
            Kind::Int { .. } => Type::Int,
            Kind::Short { .. } => Type::Short,
            Kind::Long { .. } => Type::Long,
            Kind::Double { .. } => Type::Double,
            Kind::Bool => Type::Boolean,
            Kind::Choice(_) | Kind::Text => Type::String,
            Kind::List(_) | Kind::AnyList => Type::List,
            Kind::Class => Type::Class,
            Kind::Password => Type::Password,
            Kind::Custom(ty, _) => *ty,
        }
    }
}

/// Whether and how a broker key may change at run time, as Kafka's `DynamicBrokerConfig` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Only in `server.properties` (altering it is INVALID_REQUEST).
    ReadOnly,
    /// Per broker (ConfigResource BROKER with the node id).
    PerBroker,
    /// Cluster-wide default (ConfigResource BROKER with an empty name) or per broker.
    ClusterWide,
}

/// A key with its type, default (`None`: Kafka's null) and a one-line description of what Shoal
/// does with it.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: Option<&'static str>,
    pub update: Update,
    /// Kafka's internal keys: accepted but not listed by DescribeConfigs.
    pub internal: bool,
    pub doc: &'static str,
}

impl ConfigDef {
    /// A row of a table (see [`broker`] and [`topic`]).
    pub const fn new(
        name: &'static str,
        kind: Kind,
        default: Option<&'static str>,
        update: Update,
        doc: &'static str,
    ) -> Self {
        Self {
            name,
            kind,
            default,
            update,
            internal: false,
            doc,
        }
    }

    /// Marks a key Kafka keeps out of DescribeConfigs.
    pub const fn internal(mut self) -> Self {
        self.internal = true;
        self
    }

    pub fn sensitive(&self) -> bool {
        matches!(self.kind, Kind::Password)
    }
}

// Shorthands the tables use.
pub(crate) const I16_MIN: i64 = i16::MIN as i64;
pub(crate) const I16_MAX: i64 = i16::MAX as i64;
pub(crate) const I32_MIN: i64 = i32::MIN as i64;
pub(crate) const I32_MAX: i64 = i32::MAX as i64;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;
/// A table row of a key Kafka keeps out of DescribeConfigs.
pub(crate) const fn hidden(
    row: (ConfigDef, Option<&'static str>),
) -> (ConfigDef, Option<&'static str>) {
    (row.0.internal(), row.1)
}
pub(crate) const fn int(min: i64, max: i64) -> Kind {
    Kind::Int { min, max }
}
pub(crate) const fn short(min: i64, max: i64) -> Kind {
    Kind::Short { min, max }
}
pub(crate) const fn long(min: i64, max: i64) -> Kind {
    Kind::Long { min, max }
}
pub(crate) const fn double(min: f64, max: f64) -> Kind {
    Kind::Double { min, max }
}

/// Why a configuration value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("unknown configuration '{name}'")]
    Unknown { name: String },
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
}

fn parse_integer(
    value: &str,
    min: i64,
    max: i64,
    type_min: i64,
    type_max: i64,
) -> Result<String, String> {
    let n: i64 = value
        .parse()
        .ok()
        .filter(|n| (type_min..=type_max).contains(n))
        .ok_or_else(|| "Not a number of the expected type".to_string())?;
    if n < min {
        return Err(format!("Value must be at least {min}"));
    }
    if n > max {
        return Err(format!("Value must be no more than {max}"));
    }
    Ok(n.to_string())
}

fn list_items(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|i| !i.is_empty())
}

impl ConfigDef {
    /// Checks `value` and returns its normalised form.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when the value does not parse or is out of range.
    pub fn validate(&self, value: &str) -> Result<String, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            name: self.name.to_string(),
            value: value.to_string(),
            reason,
        };
        let value = value.trim();
        match self.kind {
            Kind::Int { min, max } => {
                parse_integer(value, min, max, I32_MIN, I32_MAX).map_err(invalid)
            }
            Kind::Short { min, max } => {
                parse_integer(value, min, max, I16_MIN, I16_MAX).map_err(invalid)
            }
            Kind::Long { min, max } => {
                parse_integer(value, min, max, i64::MIN, i64::MAX).map_err(invalid)
            }
            Kind::Double { min, max } => {
                let n: f64 = value
                    .parse()
                    .ok()
                    .filter(|n: &f64| n.is_finite() || value.contains("Infinity"))
                    .ok_or_else(|| invalid("Not a number of type DOUBLE".to_string()))?;
                if n < min {
                    return Err(invalid(format!("Value must be at least {min}")));
                }
                if n > max {
                    return Err(invalid(format!("Value must be no more than {max}")));
                }
                Ok(value.to_string())
            }
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                "true" => Ok("true".into()),
                "false" => Ok("false".into()),
                _ => Err(invalid(
                    "Expected value to be either true or false".to_string(),
                )),
            },
            Kind::Choice(options) => options
                .iter()
                .find(|o| o.eq_ignore_ascii_case(value))
                .map(|o| o.to_string())
                .ok_or_else(|| invalid(format!("String must be one of: {}", options.join(", ")))),
            Kind::List(options) => {
                let mut items: Vec<&str> = Vec::new();
                for item in list_items(value) {
                    let canonical = options
                        .iter()
                        .find(|o| o.eq_ignore_ascii_case(item))
                        .ok_or_else(|| {
                            invalid(format!(
                                "Invalid value {item}, must be one of: {}",
                                options.join(", ")
                            ))
                        })?;
                    if !items.contains(canonical) {
                        items.push(canonical);
                    }
                }
                Ok(items.join(","))
            }
            Kind::AnyList => Ok(list_items(value).collect::<Vec<_>>().join(",")),
            Kind::Text | Kind::Class | Kind::Password => Ok(value.to_string()),
            Kind::Custom(_, check) => check(value).map_err(invalid),
        }
    }
}

/// Kafka's `StandardAuthorizer`, the one authorizer Shoal has.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// `authorizer.class.name`: empty (no authorization) or [`STANDARD_AUTHORIZER`].
pub(crate) fn authorizer_class(value: &str) -> Result<String, String> {
    match value.trim() {
        "" => Ok(String::new()),
        STANDARD_AUTHORIZER => Ok(STANDARD_AUTHORIZER.to_string()),
        other => Err(format!(
            "Shoal has one authorizer, {STANDARD_AUTHORIZER}; {other} cannot be loaded"
        )),
    }
}

/// `compression.gzip.level`: 1 to 9, or -1 for the codec's default.
pub(crate) fn gzip_level(value: &str) -> Result<String, String> {
    match value.parse::<i32>() {
        Ok(n) if n == -1 || (1..=9).contains(&n) => Ok(n.to_string()),
        Ok(_) => Err("Value must be between 1 and 9 or equal to -1".to_string()),
        Err(_) => Err("Not a number of type INT".to_string()),
    }
}

/// `*.replication.throttled.replicas`: `*` or `partition:broker` pairs.
pub(crate) fn throttled_replicas(value: &str) -> Result<String, String> {
    let items: Vec<&str> = list_items(value).collect();
    let pair = |item: &str| {
        item.split_once(':').is_some_and(|(p, b)| {
            p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
        })
    };
    if items == ["*"] || items.iter().all(|i| pair(i)) {
        Ok(items.join(","))
    } else {
        Err("must be the literal '*' or a list of replicas as partitionId:brokerId,...".to_string())
    }
}

/// `max.connections.per.ip.overrides`: comma-separated `host:count` (an IPv6 address in
/// brackets or bare: the count follows the last colon).
///
/// # Errors
/// A message naming the first item that is not `host:count` with a count ≥ 0.
pub fn parse_overrides(value: &str) -> Result<Vec<(String, usize)>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let bad = || format!("'{item}' is not host:count");
            let (host, count) = item.rsplit_once(':').ok_or_else(bad)?;
            let host = host.trim().trim_start_matches('[').trim_end_matches(']');
            let count: u32 = count.trim().parse().map_err(|_| bad())?;
            if host.is_empty() || i32::try_from(count).is_err() {
                return Err(bad());
            }
            Ok((host.to_string(), count as usize))
        })
        .collect()
}

/// The config check of `max.connections.per.ip.overrides` (normalised `host:count,...`).
pub fn overrides_check(value: &str) -> Result<String, String> {
    let items = parse_overrides(value)?;
    Ok(items
        .iter()
        .map(|(host, count)| format!("{host}:{count}"))
        .collect::<Vec<_>>()
        .join(","))
}

/// Strings Kafka refuses when empty.
pub(crate) fn non_empty(value: &str) -> Result<String, String> {
    if value.is_empty() {
        Err("String may not be empty".to_string())
    } else {
        Ok(value.to_string())
    }
}

/// Looks up a topic key.
pub fn topic_config_def(name: &str) -> Option<&'static (ConfigDef, Option<&'static str>)> {
    TOPIC_CONFIGS.iter().find(|(def, _)| def.name == name)
}

pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|def| def.name == name)
}

/// Broker keys whose value is computed from others when unset, like Kafka's
/// `log.retention.ms` ← `log.retention.minutes` ← `log.retention.hours`: `(key, [(fallback,
/// multiplier)])`.
const DERIVED: &[(&str, &[(&str, i64)])] = &[
    (
        "log.retention.ms",
        &[
            ("log.retention.minutes", 60_000),
            ("log.retention.hours", 3_600_000),
        ],
    ),
    ("log.roll.ms", &[("log.roll.hours", 3_600_000)]),
    (
        "log.roll.jitter.ms",
        &[("log.roll.jitter.hours", 3_600_000)],
    ),
];

/// Validated key/value pairs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConfigMap(BTreeMap<String, String>);

impl fmt::Debug for ConfigMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl ConfigMap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.0.remove(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `<mechanism>.sasl.jaas.config` (`scram-sha-256.sasl.jaas.config`): a key Kafka reads with
/// a mechanism prefix inside a listener's prefix.
fn is_mechanism_jaas_key(key: &str) -> bool {
    mechanism_prefix(key, ".sasl.jaas.config").is_some()
}

/// `<mechanism>.sasl.server.callback.handler.class`: the class Kafka's SASL channel builder
/// validates a mechanism's credentials with (read for OAUTHBEARER: which token validator).
pub(crate) const MECHANISM_HANDLER_KEY: &str = "sasl.server.callback.handler.class";

/// `<mechanism>.connections.max.reauth.ms`: the other key Kafka's SASL channel builder reads
/// with a mechanism prefix inside a listener's prefix (its session lifetime per mechanism).
pub(crate) const MECHANISM_REAUTH_KEY: &str = "connections.max.reauth.ms";

/// The mechanism of `<mechanism><suffix>`, when the prefix looks like a mechanism name.
fn mechanism_prefix<'a>(key: &'a str, suffix: &str) -> Option<&'a str> {
    key.strip_suffix(suffix).filter(|mechanism| {
        !mechanism.is_empty()
            && mechanism
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// Parses a Java-style properties file: `key=value` or `key: value`, `#` and `!` comments.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| {
            let split = line.find(['=', ':'])?;
            let (key, value) = line.split_at(split);
            Some((key.trim().to_string(), value[1..].trim().to_string()))
        })
        .collect()
}

/// The broker's effective configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Every key with a value: set, derived or a non-null default.
    values: ConfigMap,
    /// Keys given a value by [`BrokerConfig::set`].
    explicit: BTreeSet<String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let mut values = ConfigMap::new();
        for def in BROKER_CONFIGS {
            if let Some(default) = def.default {
                values.insert(def.name, default);
            }
        }
        let mut config = Self {
            values,
            explicit: BTreeSet::new(),
        };
        config.derive();
        config
    }
}

impl BrokerConfig {
    /// Sets one key after validating it.
    ///
    /// # Errors
    /// [`ConfigError`] for unknown keys and invalid values.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let key = key.trim();
        if let Some((listener, suffix)) = listeners::split_listener_key(key) {
            return self.set_per_listener(&listener, suffix, value);
        }
        // A mechanism's callback handler, outside any listener's prefix: Kafka reads it for
        // every listener that has no own.
        if mechanism_prefix(key, &format!(".{MECHANISM_HANDLER_KEY}")).is_some() {
            self.values
                .insert(key.to_string(), value.trim().to_string());
            self.explicit.insert(key.to_string());
            return Ok(());
        }
        let def = broker_config_def(key).ok_or_else(|| ConfigError::Unknown {
            name: key.to_string(),
        })?;
        let value = def.validate(value)?;
        self.values.insert(key, value);
        self.explicit.insert(key.to_string());
        self.derive();
        Ok(())
    }

    /// Sets `listener.name.<listener>.<suffix>`: the suffix is a broker key (validated as
    /// that key) or a SASL mechanism's own `<mechanism>.sasl.jaas.config`,
    /// `<mechanism>.sasl.server.callback.handler.class` or
    /// `<mechanism>.connections.max.reauth.ms`, as Kafka allows.
    /// Stored under the lower-case listener name, as Kafka spells the prefix.
    fn set_per_listener(
        &mut self,
        listener: &str,
        suffix: &str,
        value: &str,
    ) -> Result<(), ConfigError> {
        let key = format!(
            "{}{}.{suffix}",
            LISTENER_PREFIX,
            listener.to_ascii_lowercase()
        );
        // A value is named by the key as written, whichever key's rules it is checked by.
        let renamed = |e: ConfigError| match e {
            ConfigError::Invalid { value, reason, .. } => ConfigError::Invalid {
                name: key.clone(),
                value,
                reason,
            },
            other => other,
        };
        let reauth_suffix = format!(".{MECHANISM_REAUTH_KEY}");
        let value = match broker_config_def(suffix) {
            Some(def) => def.validate(value).map_err(renamed)?,
            None if is_mechanism_jaas_key(suffix) => value.trim().to_string(),
            None if mechanism_prefix(suffix, &format!(".{MECHANISM_HANDLER_KEY}")).is_some() => {
                value.trim().to_string()
            }
            // A mechanism's session lifetime, checked as the broker-wide key it overrides.
            None if mechanism_prefix(suffix, &reauth_suffix).is_some() => {
                broker_config_def(MECHANISM_REAUTH_KEY)
                    .ok_or_else(|| ConfigError::Unknown { name: key.clone() })?
                    .validate(value)
                    .map_err(renamed)?
            }
            None => return Err(ConfigError::Unknown { name: key.clone() }),
        };
        self.values.insert(key.clone(), value);
        self.explicit.insert(key);
        Ok(())
    }

    /// The value of `key` for `listener`: its `listener.name.<listener>.` setting, else the
    /// broker-wide one ("" when neither is set and the key has no default).
    pub fn listener_get(&self, listener: &str, key: &str) -> &str {
        let own = format!("{}{}.{key}", LISTENER_PREFIX, listener.to_ascii_lowercase());
        match self.values.get(&own) {
            Some(value) => value,
            None if broker_config_def(key).is_some() => self.get(key),
            None => "",
        }
    }

    /// Fills the keys of [`DERIVED`] that were not set from their fallbacks.
    fn derive(&mut self) {
        for (key, fallbacks) in DERIVED {
            if self.explicit.contains(*key) {
                continue;
            }
            let chosen = fallbacks
                .iter()
                .find(|(k, _)| self.explicit.contains(*k))
                .or_else(|| fallbacks.iter().find(|(k, _)| self.values.get(k).is_some()));
            if let Some((fallback, unit)) = chosen {
                if let Some(n) = self
                    .values
                    .get(fallback)
                    .and_then(|v| v.parse::<i64>().ok())
                {
                    self.values
                        .insert(*key, n.saturating_mul(*unit).to_string());
                }
            }
        }
    }

    /// Applies `(key, value)` pairs; keys Kafka does not know are returned (for a warning)
    /// instead of failing start-up, as Kafka only logs unknown `server.properties` keys.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a known key with a bad value.
    pub fn apply<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Vec<String>, ConfigError> {
        let mut ignored = Vec::new();
        for (key, value) in pairs {
            match self.set(key, value) {
                Ok(()) => {}
                Err(ConfigError::Unknown { name }) => ignored.push(name),
                Err(e) => return Err(e),
            }
        }
        Ok(ignored)
    }

    /// The value of a key; "" for a key whose default is Kafka's null and that is not set.
    pub fn get(&self, key: &str) -> &str {
        debug_assert!(
            broker_config_def(key).is_some(),
            "BrokerConfig::get called with a key missing from BROKER_CONFIGS: {key}"
        );
        self.values.get(key).unwrap_or("")
    }

    /// The value of a key, `None` when it is null (not set and no default).
    pub fn get_opt(&self, key: &str) -> Option<&str> {
        self.values.get(key)
    }

    /// Whether `set` gave the key a value (DescribeConfigs: STATIC_BROKER_CONFIG).
    pub fn is_explicit(&self, key: &str) -> bool {
        self.explicit.contains(key)
    }

    pub fn long(&self, key: &str) -> i64 {
        self.get(key).parse().unwrap_or_else(|_| {
            broker_config_def(key)
                .and_then(|d| d.default)
                .and_then(|d| d.parse().ok())
                .unwrap_or(0)
        })
    }

    pub fn bool(&self, key: &str) -> bool {
        self.get(key) == "true"
    }

    /// A DOUBLE key (`log.cleaner.min.cleanable.ratio`), its default if unset or null.
    pub fn double(&self, key: &str) -> f64 {
        self.get(key).parse().unwrap_or_else(|_| {
            broker_config_def(key)
                .and_then(|d| d.default)
                .and_then(|d| d.parse().ok())
                .unwrap_or(0.0)
        })
    }

    pub fn values(&self) -> &ConfigMap {
        &self.values
    }

    /// The broker-level value a topic key falls back to.
    pub fn topic_default(&self, topic_key: &str) -> Option<String> {
        let (def, synonym) = topic_config_def(topic_key)?;
        match synonym {
            Some(broker_key) => self.get_opt(broker_key).or(def.default).map(str::to_string),
            None => def.default.map(str::to_string),
        }
    }
}

/// Validates a set of topic overrides.
///
/// # Errors
/// The first unknown key or invalid value.
pub fn validate_topic_configs<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<ConfigMap, ConfigError> {
    let mut map = ConfigMap::new();
    for (key, value) in pairs {
        let (def, _) = topic_config_def(key).ok_or_else(|| ConfigError::Unknown {
            name: key.to_string(),
        })?;
        map.insert(key, def.validate(value)?);
    }
    Ok(map)
}

/// Checks a topic's whole configuration (its overrides over the broker's defaults) as Kafka's
/// `LogConfig` does when topic configs change: `min.compaction.lag.ms` may not exceed
/// `max.compaction.lag.ms`, and `remote.storage.enable` needs the broker's tiered storage
/// (`remote.log.storage.system.enable`, which Shoal accepts but does not implement).
///
/// # Errors
/// [`ConfigError::Invalid`] naming the offending key.
pub fn check_topic_values(broker: &BrokerConfig, overrides: &ConfigMap) -> Result<(), ConfigError> {
    let value = |key: &str| {
        overrides
            .get(key)
            .map(str::to_string)
            .or_else(|| broker.topic_default(key))
            .unwrap_or_default()
    };
    let long = |key: &str| value(key).parse::<i64>().unwrap_or(0);
    let (min_lag, max_lag) = (long("min.compaction.lag.ms"), long("max.compaction.lag.ms"));
    if min_lag > max_lag {
        return Err(ConfigError::Invalid {
            name: "min.compaction.lag.ms".to_string(),
            value: min_lag.to_string(),
            reason: format!(
                "conflicts with max.compaction.lag.ms ({max_lag}): it may not be larger"
            ),
        });
    }
    if value("remote.storage.enable") == "true" && !broker.bool("remote.log.storage.system.enable")
    {
        return Err(ConfigError::Invalid {
            name: "remote.storage.enable".to_string(),
            value: "true".to_string(),
            reason: "tiered storage is disabled in the broker".to_string(),
        });
    }
    Ok(())
}

/// Maps `SHOAL_NUM_PARTITIONS` to `num.partitions`; `None` for variables that are not config keys.
pub fn env_key(var: &str) -> Option<String> {
    let rest = var.strip_prefix("SHOAL_")?;
    let key = rest.to_ascii_lowercase().replace('_', ".");
    broker_config_def(&key).map(|d| d.name.to_string())
}

/// Day length in milliseconds, for retention arithmetic.
pub const fn day_ms() -> i64 {
    DAY_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_files_parse_like_java() {
        let pairs = parse_properties("# c\n num.partitions = 3\n!x\nlog.dirs: /tmp/a\n\nbad\n");
        assert_eq!(
            pairs,
            vec![
                ("num.partitions".to_string(), "3".to_string()),
                ("log.dirs".to_string(), "/tmp/a".to_string())
            ]
        );
    }

    #[test]
    fn broker_values_are_validated() {
        let mut config = BrokerConfig::default();
        assert_eq!(config.long("num.partitions"), 1);
        config.set("num.partitions", "3").unwrap();
        assert_eq!(config.long("num.partitions"), 3);
        assert!(matches!(
            config.set("num.partitions", "0"),
            Err(ConfigError::Invalid { .. })
        ));
        assert!(matches!(
            config.set("num.partitions", "x"),
            Err(ConfigError::Invalid { .. })
        ));
        let ignored = config
            .apply([
                ("log.dirs", "/x"),
                ("no.such.key", "1"),
                ("auto.create.topics.enable", "FALSE"),
            ])
            .unwrap();
        assert_eq!(ignored, vec!["no.such.key".to_string()]);
        assert!(!config.bool("auto.create.topics.enable"));
    }

    #[test]
    fn per_listener_keys_win_for_their_listener_only() {
        let mut config = BrokerConfig::default();
        config.set("ssl.client.auth", "requested").unwrap();
        config
            .set("listener.name.EXTERNAL.ssl.client.auth", "REQUIRED")
            .unwrap();
        config
            .set(
                "listener.name.external.scram-sha-512.sasl.jaas.config",
                "x required;",
            )
            .unwrap();
        assert_eq!(
            config.listener_get("EXTERNAL", "ssl.client.auth"),
            "required"
        );
        assert_eq!(
            config.listener_get("INTERNAL", "ssl.client.auth"),
            "requested"
        );
        assert_eq!(
            config.listener_get("external", "scram-sha-512.sasl.jaas.config"),
            "x required;"
        );
        assert_eq!(
            config.listener_get("INTERNAL", "scram-sha-512.sasl.jaas.config"),
            ""
        );
        let bad = config.set("listener.name.external.ssl.client.auth", "maybe");
        assert!(
            matches!(&bad, Err(ConfigError::Invalid { name, .. })
                if name == "listener.name.external.ssl.client.auth"),
            "{bad:?}"
        );
        assert!(matches!(
            config.set("listener.name.external.no.such.key", "1"),
            Err(ConfigError::Unknown { .. })
        ));
    }

    #[test]
    fn topic_configs_fall_back_to_broker_synonyms() {
        let mut config = BrokerConfig::default();
        config.set("log.retention.ms", "1000").unwrap();
        assert_eq!(
            config.topic_default("retention.ms").as_deref(),
            Some("1000")
        );
        assert_eq!(
            config.topic_default("cleanup.policy").as_deref(),
            Some("delete")
        );
        assert!(validate_topic_configs([("retention.ms", "-2")]).is_err());
        assert!(validate_topic_configs([("no.such", "1")]).is_err());
        assert_eq!(
            env_key("SHOAL_NUM_PARTITIONS").as_deref(),
            Some("num.partitions")
        );
        assert_eq!(env_key("SHOAL_DATA_DIR"), None);
    }

    fn check(def: &ConfigDef, value: &str) -> Result<String, ConfigError> {
        def.validate(value)
    }

    fn topic(name: &str) -> &'static ConfigDef {
        &topic_config_def(name).unwrap().0
    }

    #[test]
    fn every_type_is_validated_with_kafkas_ranges() {
        // INT: Kafka's range, and the value must fit a Java int.
        let def = broker_config_def("num.partitions").unwrap();
        assert_eq!(check(def, " 7 ").as_deref(), Ok("7"));
        assert!(check(def, "0").is_err());
        assert!(check(def, "2147483648").is_err());
        assert!(check(def, "1.5").is_err());
        // SHORT
        let def = broker_config_def("offsets.topic.replication.factor").unwrap();
        assert_eq!(def.kind.config_type(), Type::Short);
        assert!(check(def, "32767").is_ok());
        assert!(check(def, "32768").is_err());
        assert!(check(def, "0").is_err());
        // LONG
        let def = topic("retention.ms");
        assert!(check(def, "-1").is_ok());
        assert!(check(def, "-2").is_err());
        assert!(check(def, "9223372036854775807").is_ok());
        assert!(check(def, "9223372036854775808").is_err());
        assert!(check(topic("max.compaction.lag.ms"), "0").is_err());
        assert!(check(topic("segment.bytes"), "1048575").is_err());
        assert!(check(topic("segment.bytes"), "1048576").is_ok());
        // DOUBLE
        let def = topic("min.cleanable.dirty.ratio");
        assert_eq!(def.kind.config_type(), Type::Double);
        assert_eq!(check(def, "0.01").as_deref(), Ok("0.01"));
        assert!(check(def, "1").is_ok());
        assert!(check(def, "1.5").is_err());
        assert!(check(def, "-0.1").is_err());
        assert!(check(def, "NaN").is_err());
        assert!(check(def, "half").is_err());
        // BOOLEAN
        let def = topic("preallocate");
        assert_eq!(check(def, "TRUE").as_deref(), Ok("true"));
        assert!(check(def, "yes").is_err());
        // STRING with valid values
        let def = topic("message.timestamp.type");
        assert_eq!(check(def, "logappendtime").as_deref(), Ok("LogAppendTime"));
        assert!(check(def, "Now").is_err());
        // LIST with valid values, and any list
        let def = topic("cleanup.policy");
        assert_eq!(
            check(def, "compact, delete").as_deref(),
            Ok("compact,delete")
        );
        assert!(check(def, "compact,shred").is_err());
        let def = broker_config_def("sasl.enabled.mechanisms").unwrap();
        assert_eq!(
            check(def, "PLAIN, SCRAM-SHA-256").as_deref(),
            Ok("PLAIN,SCRAM-SHA-256")
        );
        // Custom checks
        let def = topic("compression.gzip.level");
        assert!(check(def, "-1").is_ok());
        assert!(check(def, "9").is_ok());
        assert!(check(def, "0").is_err());
        assert!(check(def, "10").is_err());
        let def = topic("follower.replication.throttled.replicas");
        assert!(check(def, "*").is_ok());
        assert!(check(def, "0:1,1:1").is_ok());
        assert!(check(def, "").is_ok());
        assert!(check(def, "x").is_err());
        // CLASS and PASSWORD: any value, the secret is flagged sensitive.
        assert!(broker_config_def("ssl.keystore.password")
            .unwrap()
            .sensitive());
        assert!(!topic("retention.ms").sensitive());
    }

    #[test]
    fn tables_are_sorted_and_every_default_is_valid() {
        fn sorted(names: &[&str]) {
            for pair in names.windows(2) {
                assert!(pair[0] < pair[1], "{} before {}", pair[0], pair[1]);
            }
        }
        sorted(&BROKER_CONFIGS.iter().map(|d| d.name).collect::<Vec<_>>());
        sorted(
            &TOPIC_CONFIGS
                .iter()
                .map(|(d, _)| d.name)
                .collect::<Vec<_>>(),
        );
        let all = BROKER_CONFIGS
            .iter()
            .chain(TOPIC_CONFIGS.iter().map(|(d, _)| d))
            .chain(crate::group_configs::GROUP_CONFIGS.iter().map(|(d, _)| d));
        for def in all {
            if let Some(default) = def.default {
                assert!(def.validate(default).is_ok(), "default of {}", def.name);
            }
            assert!(!def.doc.is_empty(), "doc of {}", def.name);
        }
        let synonyms = TOPIC_CONFIGS
            .iter()
            .chain(crate::group_configs::GROUP_CONFIGS)
            .filter_map(|(_, s)| *s);
        for synonym in synonyms {
            assert!(broker_config_def(synonym).is_some(), "{synonym}");
        }
        // The broker synonyms supply topic defaults equal to Kafka's (flush.messages aside).
        let broker = BrokerConfig::default();
        for (def, _) in TOPIC_CONFIGS
            .iter()
            .filter(|(d, _)| d.name != "flush.messages")
        {
            assert_eq!(
                broker.topic_default(def.name).as_deref(),
                def.default,
                "{}",
                def.name
            );
        }
    }

    #[test]
    fn retention_and_roll_derive_from_hours_and_minutes() {
        let mut config = BrokerConfig::default();
        assert_eq!(config.long("log.retention.ms"), 604_800_000);
        assert_eq!(config.long("log.roll.ms"), 604_800_000);
        config.set("log.retention.hours", "1").unwrap();
        assert_eq!(
            config.topic_default("retention.ms").as_deref(),
            Some("3600000")
        );
        config.set("log.retention.minutes", "2").unwrap();
        assert_eq!(config.long("log.retention.ms"), 120_000);
        config.set("log.retention.ms", "5").unwrap();
        config.set("log.retention.hours", "3").unwrap();
        assert_eq!(config.long("log.retention.ms"), 5);
        assert!(config.is_explicit("log.retention.ms"));
        assert!(!config.is_explicit("log.roll.ms"));
        config.set("log.roll.jitter.hours", "2").unwrap();
        assert_eq!(
            config.topic_default("segment.jitter.ms").as_deref(),
            Some("7200000")
        );
        assert_eq!(config.double("log.cleaner.min.cleanable.ratio"), 0.5);
        assert_eq!(
            config.double("log.cleaner.io.max.bytes.per.second"),
            f64::MAX
        );
        config
            .set("log.cleaner.min.cleanable.ratio", "0.25")
            .unwrap();
        assert_eq!(config.double("log.cleaner.min.cleanable.ratio"), 0.25);
        // Keys with Kafka's null default read as "" and have no value.
        assert_eq!(config.get_opt("broker.rack"), None);
        assert_eq!(config.get("broker.rack"), "");
    }

    #[test]
    fn internal_segment_bytes_overrides_segment_bytes() {
        let broker = BrokerConfig::default();
        let overrides = validate_topic_configs([("internal.segment.bytes", "1000")]).unwrap();
        assert_eq!(
            crate::topic_registry::log_config(&broker, &overrides).segment_bytes,
            1000
        );
        let overrides = validate_topic_configs([("segment.bytes", "2097152")]).unwrap();
        assert_eq!(
            crate::topic_registry::log_config(&broker, &overrides).segment_bytes,
            2_097_152
        );
    }

    #[test]
    fn topic_values_are_checked_together() {
        let broker = BrokerConfig::default();
        let check = |pairs: &[(&str, &str)]| {
            check_topic_values(
                &broker,
                &validate_topic_configs(pairs.iter().copied()).unwrap(),
            )
        };
        assert!(check(&[]).is_ok());
        assert!(check(&[
            ("min.compaction.lag.ms", "1000"),
            ("max.compaction.lag.ms", "1000")
        ])
        .is_ok());
        assert!(check(&[
            ("min.compaction.lag.ms", "2000"),
            ("max.compaction.lag.ms", "1000")
        ])
        .is_err());
        assert!(check(&[("remote.storage.enable", "false")]).is_ok());
        assert!(check(&[("remote.storage.enable", "true")]).is_err());
        // The broker's default takes part too.
        let mut broker = BrokerConfig::default();
        broker
            .set("log.cleaner.max.compaction.lag.ms", "500")
            .unwrap();
        let overrides = validate_topic_configs([("min.compaction.lag.ms", "600")]).unwrap();
        assert!(check_topic_values(&broker, &overrides).is_err());
    }
}
