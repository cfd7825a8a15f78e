//! Broker and topic configuration with Kafka's key names.
//!
//! Sources, lowest precedence first: built-in defaults, a properties file (`--config`),
//! `SHOAL_*` environment variables (`SHOAL_NUM_PARTITIONS=3` sets `num.partitions`), command-line
//! flags. Every key has a type and a valid range; a bad value is an error at start-up (for the
//! broker) or INVALID_CONFIG (for a topic).

use std::collections::BTreeMap;
use std::fmt;

/// The type and range of one configuration key.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A signed integer within `min..=max`.
    Long {
        min: i64,
        max: i64,
    },
    Bool,
    /// One of the listed words (compared case-insensitively, stored as listed).
    Choice(&'static [&'static str]),
    /// A comma-separated list of the listed words (Kafka's LIST type), stored as listed.
    List(&'static [&'static str]),
    /// Any string.
    Text,
}

/// A key with its default.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub doc: &'static str,
}

/// Why a configuration value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("unknown configuration '{name}'")]
    Unknown { name: String },
    #[error("invalid value '{value}' for configuration '{name}': {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
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
            Kind::Long { min, max } => {
                let n: i64 = value
                    .parse()
                    .map_err(|_| invalid("not an integer".to_string()))?;
                if n < min || n > max {
                    return Err(invalid(format!("must be within [{min}, {max}]")));
                }
                Ok(n.to_string())
            }
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                "true" => Ok("true".into()),
                "false" => Ok("false".into()),
                _ => Err(invalid("must be true or false".to_string())),
            },
            Kind::Choice(options) => options
                .iter()
                .find(|o| o.eq_ignore_ascii_case(value))
                .map(|o| o.to_string())
                .ok_or_else(|| invalid(format!("must be one of {options:?}"))),
            Kind::List(options) => {
                let mut items: Vec<&str> = Vec::new();
                for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    let canonical = options
                        .iter()
                        .find(|o| o.eq_ignore_ascii_case(item))
                        .ok_or_else(|| invalid(format!("'{item}' is not one of {options:?}")))?;
                    if !items.contains(canonical) {
                        items.push(canonical);
                    }
                }
                Ok(items.join(","))
            }
            Kind::Text => Ok(value.to_string()),
        }
    }
}

const I32_MAX: i64 = i32::MAX as i64;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Broker keys Shoal understands.
pub const BROKER_CONFIGS: &[ConfigDef] = &[
    ConfigDef { name: "node.id", kind: Kind::Long { min: 0, max: I32_MAX }, default: "1", doc: "This broker's node id." },
    ConfigDef { name: "advertised.listeners", kind: Kind::Text, default: "", doc: "host:port clients are told to connect to; empty means the listen address." },
    ConfigDef { name: "num.partitions", kind: Kind::Long { min: 1, max: 100_000 }, default: "1", doc: "Partitions of auto-created topics and of CreateTopics with -1." },
    ConfigDef { name: "default.replication.factor", kind: Kind::Long { min: 1, max: 1 }, default: "1", doc: "A single node holds one replica." },
    ConfigDef { name: "auto.create.topics.enable", kind: Kind::Bool, default: "true", doc: "Create unknown topics on Metadata and Produce." },
    ConfigDef { name: "delete.topic.enable", kind: Kind::Bool, default: "true", doc: "Allow DeleteTopics." },
    ConfigDef { name: "socket.request.max.bytes", kind: Kind::Long { min: 1024, max: I32_MAX }, default: "104857600", doc: "Largest request frame." },
    ConfigDef { name: "max.connections", kind: Kind::Long { min: 1, max: 1_000_000 }, default: "10000", doc: "Open client connections at most." },
    ConfigDef { name: "connections.max.idle.ms", kind: Kind::Long { min: 1000, max: i64::MAX }, default: "600000", doc: "Idle connections are closed after this." },
    ConfigDef { name: "message.max.bytes", kind: Kind::Long { min: 0, max: I32_MAX }, default: "1048588", doc: "Largest record batch (topic default of max.message.bytes)." },
    ConfigDef { name: "fetch.max.bytes", kind: Kind::Long { min: 1024, max: I32_MAX }, default: "57671680", doc: "Largest fetch response, whatever the client asks (one batch may still exceed it)." },
    ConfigDef { name: "log.segment.bytes", kind: Kind::Long { min: 14, max: I32_MAX }, default: "1073741824", doc: "Segment size before a roll." },
    ConfigDef { name: "log.roll.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "604800000", doc: "Segment age before a roll." },
    ConfigDef { name: "log.retention.ms", kind: Kind::Long { min: -1, max: i64::MAX }, default: "604800000", doc: "Delete segments older than this; -1 keeps them." },
    ConfigDef { name: "log.retention.bytes", kind: Kind::Long { min: -1, max: i64::MAX }, default: "-1", doc: "Delete old segments above this size per partition; -1 keeps them." },
    ConfigDef { name: "log.retention.check.interval.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "300000", doc: "How often retention runs." },
    ConfigDef { name: "log.index.interval.bytes", kind: Kind::Long { min: 0, max: I32_MAX }, default: "4096", doc: "Bytes between offset-index entries." },
    ConfigDef { name: "log.message.timestamp.type", kind: Kind::Choice(&["CreateTime", "LogAppendTime"]), default: "CreateTime", doc: "Topic default of message.timestamp.type." },
    ConfigDef { name: "log.flush.interval.messages", kind: Kind::Long { min: 1, max: i64::MAX }, default: "1", doc: "fsync after this many messages. 1 (Shoal's default) fsyncs every acknowledged write, with group commit; Kafka's default 9223372036854775807 leaves flushing to the OS." },
    ConfigDef { name: "log.flush.interval.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "9223372036854775807", doc: "fsync at least this often when writes are not flushed one by one." },
    ConfigDef { name: "producer.id.expiration.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "86400000", doc: "Idle idempotent producers are forgotten after this." },
    ConfigDef { name: "transaction.state.log.num.partitions", kind: Kind::Long { min: 1, max: 1000 }, default: "50", doc: "Partitions of __transaction_state (fixed once created)." },
    ConfigDef { name: "transaction.max.timeout.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "900000", doc: "Largest transaction timeout a producer may ask for." },
    ConfigDef { name: "transaction.partition.verification.enable", kind: Kind::Bool, default: "true", doc: "Check with the transaction coordinator before a transactional batch opens a transaction on a partition (KIP-890)." },
    ConfigDef { name: "transactional.id.expiration.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "604800000", doc: "Idle transactional ids are forgotten after this." },
    ConfigDef { name: "offsets.topic.num.partitions", kind: Kind::Long { min: 1, max: 1000 }, default: "50", doc: "Partitions of __consumer_offsets (fixed once created)." },
    ConfigDef { name: "offsets.retention.minutes", kind: Kind::Long { min: 1, max: I32_MAX }, default: "10080", doc: "Committed offsets of empty groups expire after this." },
    ConfigDef { name: "group.initial.rebalance.delay.ms", kind: Kind::Long { min: 0, max: I32_MAX }, default: "3000", doc: "Wait for more members before the first rebalance of an empty group." },
    ConfigDef { name: "group.min.session.timeout.ms", kind: Kind::Long { min: 0, max: I32_MAX }, default: "6000", doc: "Smallest session timeout a member may ask for." },
    ConfigDef { name: "group.max.session.timeout.ms", kind: Kind::Long { min: 0, max: I32_MAX }, default: "1800000", doc: "Largest session timeout a member may ask for." },
    ConfigDef { name: "group.max.size", kind: Kind::Long { min: 1, max: I32_MAX }, default: "1000", doc: "Members per classic group at most." },
    ConfigDef { name: "group.share.delivery.count.limit", kind: Kind::Long { min: 2, max: 10 }, default: "5", doc: "Deliveries of a record to share consumers before it is archived." },
    ConfigDef { name: "group.share.min.delivery.count.limit", kind: Kind::Long { min: 2, max: 10 }, default: "2", doc: "Smallest share.delivery.count.limit a group may set." },
    ConfigDef { name: "group.share.max.delivery.count.limit", kind: Kind::Long { min: 2, max: 10 }, default: "10", doc: "Largest share.delivery.count.limit a group may set." },
    ConfigDef { name: "group.share.record.lock.duration.ms", kind: Kind::Long { min: 1000, max: 3_600_000 }, default: "30000", doc: "How long a share consumer holds acquired records before they are released." },
    ConfigDef { name: "group.share.min.record.lock.duration.ms", kind: Kind::Long { min: 1000, max: 30_000 }, default: "15000", doc: "Smallest share.record.lock.duration.ms a group may set." },
    ConfigDef { name: "group.share.max.record.lock.duration.ms", kind: Kind::Long { min: 30_000, max: 3_600_000 }, default: "60000", doc: "Largest share.record.lock.duration.ms a group may set." },
    ConfigDef { name: "group.share.partition.max.record.locks", kind: Kind::Long { min: 100, max: 10_000 }, default: "2000", doc: "Records of one share partition in flight (acquired or waiting for redelivery) at most." },
    ConfigDef { name: "group.share.min.partition.max.record.locks", kind: Kind::Long { min: 100, max: 10_000 }, default: "100", doc: "Smallest share.partition.max.record.locks a group may set." },
    ConfigDef { name: "group.share.max.partition.max.record.locks", kind: Kind::Long { min: 100, max: 10_000 }, default: "4000", doc: "Largest share.partition.max.record.locks a group may set." },
    ConfigDef { name: "group.share.session.timeout.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "45000", doc: "A share group member that does not heartbeat for this long is removed." },
    ConfigDef { name: "group.share.min.session.timeout.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "45000", doc: "Smallest share.session.timeout.ms a group may set." },
    ConfigDef { name: "group.share.max.session.timeout.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "60000", doc: "Largest share.session.timeout.ms a group may set." },
    ConfigDef { name: "group.share.heartbeat.interval.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "5000", doc: "How often share group members heartbeat." },
    ConfigDef { name: "group.share.min.heartbeat.interval.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "5000", doc: "Smallest share.heartbeat.interval.ms a group may set." },
    ConfigDef { name: "group.share.max.heartbeat.interval.ms", kind: Kind::Long { min: 1, max: I32_MAX }, default: "15000", doc: "Largest share.heartbeat.interval.ms a group may set." },
    ConfigDef { name: "group.share.max.size", kind: Kind::Long { min: 1, max: 1000 }, default: "200", doc: "Members per share group at most." },
    ConfigDef { name: "group.share.max.share.sessions", kind: Kind::Long { min: 1, max: 1_000_000 }, default: "2000", doc: "Share sessions (share consumers' fetch sessions) this broker holds at most." },
    ConfigDef { name: "share.coordinator.state.topic.num.partitions", kind: Kind::Long { min: 1, max: 1000 }, default: "50", doc: "Partitions of __share_group_state (fixed once created)." },
    ConfigDef { name: "share.coordinator.state.topic.prune.interval.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "300000", doc: "How often records of __share_group_state that replay no longer needs (before the oldest latest snapshot of a partition's share partitions) are deleted." },
    ConfigDef { name: "share.coordinator.snapshot.update.records.per.snapshot", kind: Kind::Long { min: 0, max: 500 }, default: "500", doc: "Share-state update records per share partition between two snapshot records." },    // --- log compaction keys (compact branch) ---
    // Doubles are Kind::Text here (validated where read, falling back to the default) until
    // the config module has a double type.
    ConfigDef { name: "log.cleaner.enable", kind: Kind::Bool, default: "true", doc: "Run the log cleaner (compaction of cleanup.policy=compact topics, internal ones included)." },
    ConfigDef { name: "log.cleaner.threads", kind: Kind::Long { min: 0, max: I32_MAX }, default: "1", doc: "0 disables the cleaner; any other value runs one background cleaner task (the dedupe buffer is split by this count, as in Kafka)." },
    ConfigDef { name: "log.cleaner.backoff.ms", kind: Kind::Long { min: 0, max: i64::MAX }, default: "15000", doc: "Pause of the cleaner when no log needs cleaning." },
    ConfigDef { name: "log.cleaner.dedupe.buffer.size", kind: Kind::Long { min: 0, max: i64::MAX }, default: "134217728", doc: "Memory for the key-to-offset map of one clean, across cleaner threads." },
    ConfigDef { name: "log.cleaner.io.buffer.load.factor", kind: Kind::Text, default: "0.9", doc: "Fill factor of the dedupe map (a double)." },
    ConfigDef { name: "log.cleaner.io.max.bytes.per.second", kind: Kind::Text, default: "1.7976931348623157E308", doc: "Read plus write rate of the cleaner (a double)." },
    ConfigDef { name: "log.cleaner.min.cleanable.ratio", kind: Kind::Text, default: "0.5", doc: "Default of min.cleanable.dirty.ratio (a double in [0, 1])." },
    ConfigDef { name: "log.cleaner.max.compaction.lag.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "9223372036854775807", doc: "Default of max.compaction.lag.ms." },
    // --- end of log compaction keys ---
];

/// Topic-level keys, each with the broker key that supplies its default.
pub const TOPIC_CONFIGS: &[(ConfigDef, Option<&str>)] = &[
    (ConfigDef { name: "cleanup.policy", kind: Kind::List(&["delete", "compact"]), default: "delete", doc: "delete, compact or both: compact keeps the latest record of every key (the log cleaner), delete applies retention.ms and retention.bytes." }, None),
    (ConfigDef { name: "compression.type", kind: Kind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]), default: "producer", doc: "Only producer (keep the producer's codec) is applied." }, None),
    (ConfigDef { name: "max.message.bytes", kind: Kind::Long { min: 0, max: I32_MAX }, default: "1048588", doc: "Largest record batch." }, Some("message.max.bytes")),
    (ConfigDef { name: "message.timestamp.type", kind: Kind::Choice(&["CreateTime", "LogAppendTime"]), default: "CreateTime", doc: "CreateTime or LogAppendTime." }, Some("log.message.timestamp.type")),
    (ConfigDef { name: "min.insync.replicas", kind: Kind::Long { min: 1, max: 1 }, default: "1", doc: "A single node has one replica." }, None),
    (ConfigDef { name: "retention.ms", kind: Kind::Long { min: -1, max: i64::MAX }, default: "604800000", doc: "Delete segments older than this." }, Some("log.retention.ms")),
    (ConfigDef { name: "retention.bytes", kind: Kind::Long { min: -1, max: i64::MAX }, default: "-1", doc: "Delete old segments above this size." }, Some("log.retention.bytes")),
    (ConfigDef { name: "segment.bytes", kind: Kind::Long { min: 14, max: I32_MAX }, default: "1073741824", doc: "Segment size before a roll." }, Some("log.segment.bytes")),
    (ConfigDef { name: "segment.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "604800000", doc: "Segment age before a roll." }, Some("log.roll.ms")),
    (ConfigDef { name: "segment.index.bytes", kind: Kind::Long { min: 4, max: I32_MAX }, default: "10485760", doc: "Accepted for compatibility." }, None),
    (ConfigDef { name: "index.interval.bytes", kind: Kind::Long { min: 0, max: I32_MAX }, default: "4096", doc: "Bytes between index entries." }, Some("log.index.interval.bytes")),
    (ConfigDef { name: "flush.messages", kind: Kind::Long { min: 1, max: i64::MAX }, default: "1", doc: "fsync after this many messages." }, Some("log.flush.interval.messages")),
    (ConfigDef { name: "flush.ms", kind: Kind::Long { min: 0, max: i64::MAX }, default: "9223372036854775807", doc: "fsync at least this often." }, Some("log.flush.interval.ms")),
    (ConfigDef { name: "delete.retention.ms", kind: Kind::Long { min: 0, max: i64::MAX }, default: "86400000", doc: "How long compaction keeps a tombstone (and the marker of a finished transaction) after first keeping it." }, None),
    (ConfigDef { name: "min.compaction.lag.ms", kind: Kind::Long { min: 0, max: i64::MAX }, default: "0", doc: "A record stays uncompacted at least this long." }, None),
    (ConfigDef { name: "message.timestamp.before.max.ms", kind: Kind::Long { min: 0, max: i64::MAX }, default: "9223372036854775807", doc: "Accepted for compatibility." }, None),
    (ConfigDef { name: "message.timestamp.after.max.ms", kind: Kind::Long { min: 0, max: i64::MAX }, default: "3600000", doc: "Accepted for compatibility." }, None),
    (ConfigDef { name: "unclean.leader.election.enable", kind: Kind::Bool, default: "false", doc: "Accepted for compatibility." }, None),    // --- log compaction keys (compact branch) ---
    (ConfigDef { name: "min.cleanable.dirty.ratio", kind: Kind::Text, default: "0.5", doc: "Clean when dirty bytes reach this share of the cleanable log (a double in [0, 1])." }, Some("log.cleaner.min.cleanable.ratio")),
    (ConfigDef { name: "max.compaction.lag.ms", kind: Kind::Long { min: 1, max: i64::MAX }, default: "9223372036854775807", doc: "A record stays uncompacted at most this long." }, Some("log.cleaner.max.compaction.lag.ms")),
    // --- end of log compaction keys ---
];

/// Looks up a topic key.
pub fn topic_config_def(name: &str) -> Option<&'static (ConfigDef, Option<&'static str>)> {
    TOPIC_CONFIGS.iter().find(|(def, _)| def.name == name)
}

pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|def| def.name == name)
}

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

/// The broker's effective static configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    values: ConfigMap,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let mut values = ConfigMap::new();
        for def in BROKER_CONFIGS {
            values.insert(def.name, def.default);
        }
        Self { values }
    }
}

impl BrokerConfig {
    /// Sets one key after validating it.
    ///
    /// # Errors
    /// [`ConfigError`] for unknown keys and invalid values.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let key = key.trim();
        let def = broker_config_def(key).ok_or_else(|| ConfigError::Unknown {
            name: key.to_string(),
        })?;
        let value = def.validate(value)?;
        self.values.insert(key, value);
        Ok(())
    }

    /// Applies `(key, value)` pairs; Kafka keys Shoal does not use are reported in the returned
    /// list instead of failing start-up, so that an existing `server.properties` works.
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

    pub fn get(&self, key: &str) -> &str {
        self.values.get(key).unwrap_or_else(|| {
            broker_config_def(key)
                .map(|d| d.default)
                .expect("BrokerConfig::get called with a key missing from BROKER_CONFIGS")
        })
    }

    pub fn long(&self, key: &str) -> i64 {
        self.get(key)
            .parse()
            .expect("validated integer configuration")
    }

    pub fn bool(&self, key: &str) -> bool {
        self.get(key) == "true"
    }

    pub fn values(&self) -> &ConfigMap {
        &self.values
    }

    /// The broker-level value a topic key falls back to.
    pub fn topic_default(&self, topic_key: &str) -> Option<String> {
        let (def, synonym) = topic_config_def(topic_key)?;
        Some(match synonym {
            Some(broker_key) => self.get(broker_key).to_string(),
            None => def.default.to_string(),
        })
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
            .apply([("log.dirs", "/x"), ("auto.create.topics.enable", "FALSE")])
            .unwrap();
        assert_eq!(ignored, vec!["log.dirs".to_string()]);
        assert!(!config.bool("auto.create.topics.enable"));
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
}
