//! Group-level configuration: Kafka's `GroupConfig` keys for share groups on the GROUP config
//! resource (type 32), set with IncrementalAlterConfigs and read with DescribeConfigs.
//!
//! A group's overrides may be set before the group exists; they are persisted in the metadata
//! log and survive restarts. Every key falls back to a broker key (`share.record.lock.duration.ms`
//! → `group.share.record.lock.duration.ms`) and must lie within the broker's bounds for it
//! (`group.share.min/max.record.lock.duration.ms`), as Kafka's `GroupConfig.validate` requires;
//! unknown keys and out-of-range values are INVALID_CONFIG. Keys of group types Shoal does not
//! implement (KIP-848 `consumer.*`, Streams `streams.*`) are accepted and validated the same
//! way, with no effect (decision 0007). The dead-letter queue keys (KIP-1191) take effect at
//! `share.version` 2 and above (`crate::dead_letter`).

use crate::config::{
    hidden, int, long, BrokerConfig, ConfigDef, ConfigMap, Kind, Type, Update, I32_MAX,
};

pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_DELIVERY_COUNT_LIMIT: &str = "share.delivery.count.limit";
pub const SHARE_PARTITION_MAX_RECORD_LOCKS: &str = "share.partition.max.record.locks";
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";
pub const SHARE_RENEW_ACKNOWLEDGE_ENABLE: &str = "share.renew.acknowledge.enable";
pub const DLQ_TOPIC_NAME: &str = "errors.deadletterqueue.topic.name";
pub const DLQ_COPY_RECORD_ENABLE: &str = "errors.deadletterqueue.copy.record.enable";

const fn g(
    name: &'static str,
    kind: Kind,
    default: Option<&'static str>,
    synonym: Option<&'static str>,
    doc: &'static str,
) -> (ConfigDef, Option<&'static str>) {
    (
        ConfigDef::new(name, kind, default, Update::ClusterWide, doc),
        synonym,
    )
}

/// Validates `share.auto.offset.reset` and returns its normal form.
fn auto_offset_reset(value: &str) -> Result<String, String> {
    AutoOffsetReset::parse(value)
        .map(|_| value.to_ascii_lowercase_prefix())
        .ok_or_else(|| "must be latest, earliest or by_duration:<ISO-8601 duration>".to_string())
}

/// Kafka 4.4's group keys (`GroupConfig`), each with the broker key that supplies its default
/// (and, for most, its bounds, see [`BOUNDS`]), sorted by name.
#[rustfmt::skip]
pub const GROUP_CONFIGS: &[(ConfigDef, Option<&str>)] = &[
    g("consumer.assignment.interval.ms", int(0, I32_MAX), Some("1000"), Some("group.consumer.assignment.interval.ms"), "Minimum time between assignments of a consumer-protocol group; no effect (no KIP-848 groups)."),
    hidden(g("consumer.assignor.offload.enable", Kind::Bool, Some("true"), Some("group.consumer.assignor.offload.enable"), "Run a consumer-protocol group's assignor off the coordinator thread; no effect.")),
    g("consumer.heartbeat.interval.ms", int(1, I32_MAX), Some("5000"), Some("group.consumer.heartbeat.interval.ms"), "Heartbeat interval of a consumer-protocol group; no effect (no KIP-848 groups)."),
    g("consumer.session.timeout.ms", int(1, I32_MAX), Some("45000"), Some("group.consumer.session.timeout.ms"), "Session timeout of a consumer-protocol group; no effect (no KIP-848 groups)."),
    g("errors.deadletterqueue.copy.record.enable", Kind::Bool, Some("false"), None, "Whether the share group's dead-letter records carry the original record's key, value and headers (else only the __dlq.errors.* headers)."),
    g("errors.deadletterqueue.topic.name", Kind::Text, Some(""), None, "The share group's dead-letter queue topic (empty: none); rejected and over-the-limit records are written to it (share.version 2 and above)."),
    g("share.assignment.interval.ms", int(0, I32_MAX), Some("1000"), Some("group.share.assignment.interval.ms"), "Minimum time between share-group assignments; no effect (Shoal assigns at once)."),
    hidden(g("share.assignor.offload.enable", Kind::Bool, Some("true"), Some("group.share.assignor.offload.enable"), "Run the share-group assignor off the coordinator thread; no effect.")),
    g("share.auto.offset.reset", Kind::Custom(Type::String, auto_offset_reset), Some("latest"), None, "Where a share partition without state starts: latest, earliest or by_duration:<ISO-8601 duration>."),
    g("share.delivery.count.limit", int(2, I32_MAX), Some("5"), Some("group.share.delivery.count.limit"), "Deliveries of a record before it is archived."),
    g("share.heartbeat.interval.ms", int(1, I32_MAX), Some("5000"), Some("group.share.heartbeat.interval.ms"), "How often members of the share group heartbeat."),
    g("share.isolation.level", Kind::Choice(&["read_uncommitted", "read_committed"]), Some("read_uncommitted"), None, "read_committed delivers only committed transactional records and archives aborted ones."),
    g("share.partition.max.record.locks", int(100, I32_MAX), Some("2000"), Some("group.share.partition.max.record.locks"), "Records of one share partition in flight at most."),
    g("share.record.lock.duration.ms", int(1000, I32_MAX), Some("30000"), Some("group.share.record.lock.duration.ms"), "How long a member holds acquired records before they are released."),
    g("share.renew.acknowledge.enable", Kind::Bool, Some("true"), None, "Whether members may renew their acquisition locks (RENEW acknowledgements)."),
    g("share.session.timeout.ms", int(1, I32_MAX), Some("45000"), Some("group.share.session.timeout.ms"), "A member that does not heartbeat for this long is removed from the share group."),
    hidden(g("streams.acceptable.recovery.lag", long(0, i64::MAX), Some("10000"), Some("group.streams.acceptable.recovery.lag"), "Streams group setting; no effect (no Streams groups).")),
    g("streams.assignment.interval.ms", int(0, I32_MAX), Some("1000"), Some("group.streams.assignment.interval.ms"), "Streams group setting; no effect (no Streams groups)."),
    g("streams.assignor.name", Kind::Text, None, Some("group.streams.assignors"), "Streams group setting; no effect (no Streams groups)."),
    hidden(g("streams.assignor.offload.enable", Kind::Bool, Some("true"), Some("group.streams.assignor.offload.enable"), "Streams group setting; no effect (no Streams groups).")),
    g("streams.heartbeat.interval.ms", int(1, I32_MAX), Some("5000"), Some("group.streams.heartbeat.interval.ms"), "Streams group setting; no effect (no Streams groups)."),
    g("streams.initial.rebalance.delay.ms", int(0, I32_MAX), Some("3000"), Some("group.streams.initial.rebalance.delay.ms"), "Streams group setting; no effect (no Streams groups)."),
    g("streams.num.standby.replicas", int(0, I32_MAX), Some("0"), Some("group.streams.num.standby.replicas"), "Streams group setting; no effect (no Streams groups)."),
    hidden(g("streams.num.warmup.replicas", int(0, I32_MAX), Some("2"), Some("group.streams.num.warmup.replicas"), "Streams group setting; no effect (no Streams groups).")),
    g("streams.rack.aware.assignment.tags", Kind::AnyList, Some(""), Some("group.streams.rack.aware.assignment.tags"), "Streams group setting; no effect (no Streams groups)."),
    g("streams.session.timeout.ms", int(1, I32_MAX), Some("45000"), Some("group.streams.session.timeout.ms"), "Streams group setting; no effect (no Streams groups)."),
    hidden(g("streams.task.offset.interval.ms", int(1, I32_MAX), Some("60000"), Some("group.streams.task.offset.interval.ms"), "Streams group setting; no effect (no Streams groups).")),
];

/// `(group key, broker key of the smallest, broker key of the largest value a group may set)`,
/// as Kafka's `GroupConfig.validate` checks them.
const BOUNDS: &[(&str, Option<&str>, Option<&str>)] = &[
    (
        "consumer.session.timeout.ms",
        Some("group.consumer.min.session.timeout.ms"),
        Some("group.consumer.max.session.timeout.ms"),
    ),
    (
        "consumer.heartbeat.interval.ms",
        Some("group.consumer.min.heartbeat.interval.ms"),
        Some("group.consumer.max.heartbeat.interval.ms"),
    ),
    (
        "consumer.assignment.interval.ms",
        Some("group.consumer.min.assignment.interval.ms"),
        Some("group.consumer.max.assignment.interval.ms"),
    ),
    (
        SHARE_SESSION_TIMEOUT_MS,
        Some("group.share.min.session.timeout.ms"),
        Some("group.share.max.session.timeout.ms"),
    ),
    (
        SHARE_HEARTBEAT_INTERVAL_MS,
        Some("group.share.min.heartbeat.interval.ms"),
        Some("group.share.max.heartbeat.interval.ms"),
    ),
    (
        SHARE_RECORD_LOCK_DURATION_MS,
        Some("group.share.min.record.lock.duration.ms"),
        Some("group.share.max.record.lock.duration.ms"),
    ),
    (
        SHARE_DELIVERY_COUNT_LIMIT,
        Some("group.share.min.delivery.count.limit"),
        Some("group.share.max.delivery.count.limit"),
    ),
    (
        SHARE_PARTITION_MAX_RECORD_LOCKS,
        Some("group.share.min.partition.max.record.locks"),
        Some("group.share.max.partition.max.record.locks"),
    ),
    (
        "share.assignment.interval.ms",
        Some("group.share.min.assignment.interval.ms"),
        Some("group.share.max.assignment.interval.ms"),
    ),
    (
        "streams.session.timeout.ms",
        Some("group.streams.min.session.timeout.ms"),
        Some("group.streams.max.session.timeout.ms"),
    ),
    (
        "streams.heartbeat.interval.ms",
        Some("group.streams.min.heartbeat.interval.ms"),
        Some("group.streams.max.heartbeat.interval.ms"),
    ),
    (
        "streams.assignment.interval.ms",
        Some("group.streams.min.assignment.interval.ms"),
        Some("group.streams.max.assignment.interval.ms"),
    ),
    (
        "streams.num.standby.replicas",
        None,
        Some("group.streams.max.standby.replicas"),
    ),
    (
        "streams.num.warmup.replicas",
        None,
        Some("group.streams.max.warmup.replicas"),
    ),
    (
        "streams.task.offset.interval.ms",
        Some("group.streams.min.task.offset.interval.ms"),
        None,
    ),
];

/// `(session timeout, heartbeat interval)`: the first must exceed the second.
const SESSION_OVER_HEARTBEAT: &[(&str, &str)] = &[
    (
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    ),
    (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS),
    (
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
    ),
];

pub fn group_config_def(name: &str) -> Option<&'static (ConfigDef, Option<&'static str>)> {
    GROUP_CONFIGS.iter().find(|(def, _)| def.name == name)
}

/// Checks one value on its own and returns its normalised form.
///
/// # Errors
/// A message for INVALID_CONFIG: unknown key, unparsable or out-of-type-range value.
pub fn validate_value(key: &str, value: &str) -> Result<String, String> {
    let (def, _) =
        group_config_def(key).ok_or_else(|| format!("Unknown group config name: {key}"))?;
    def.validate(value).map_err(|e| e.to_string())
}

trait LowercasePrefix {
    fn to_ascii_lowercase_prefix(&self) -> String;
}

impl LowercasePrefix for str {
    /// `LATEST` → `latest`; `BY_DURATION:PT1H` → `by_duration:PT1H` (the duration keeps its case).
    fn to_ascii_lowercase_prefix(&self) -> String {
        match self.split_once(':') {
            Some((strategy, duration)) => {
                format!("{}:{duration}", strategy.to_ascii_lowercase())
            }
            None => self.to_ascii_lowercase(),
        }
    }
}

/// The value of `key` for a group with `overrides`: its override, else the broker's value.
pub fn effective(broker: &BrokerConfig, overrides: &ConfigMap, key: &str) -> String {
    if let Some(v) = overrides.get(key) {
        return v.to_string();
    }
    match group_config_def(key) {
        Some((def, Some(broker_key))) => broker
            .get_opt(broker_key)
            .or(def.default)
            .unwrap_or_default()
            .to_string(),
        Some((def, None)) => def.default.unwrap_or_default().to_string(),
        None => String::new(),
    }
}

fn effective_long(broker: &BrokerConfig, overrides: &ConfigMap, key: &str) -> i64 {
    effective(broker, overrides, key).parse().unwrap_or(0)
}

/// Checks a group's whole set of overrides against the broker's bounds and each other, as
/// Kafka's `GroupConfig.validate` does when they change.
///
/// # Errors
/// A message for INVALID_CONFIG.
pub fn validate(broker: &BrokerConfig, overrides: &ConfigMap) -> Result<(), String> {
    for (key, value) in overrides.iter() {
        validate_value(key, value)?;
    }
    if overrides
        .get(DLQ_TOPIC_NAME)
        .is_some_and(|name| name.starts_with("__"))
    {
        return Err(format!(
            "{DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'"
        ));
    }
    for (key, min_key, max_key) in BOUNDS {
        let value = effective_long(broker, overrides, key);
        if let Some(min_key) = min_key {
            if value < broker.long(min_key) {
                return Err(format!("{key} must be greater than or equal to {min_key}"));
            }
        }
        if let Some(max_key) = max_key {
            if value > broker.long(max_key) {
                return Err(format!("{key} must be less than or equal to {max_key}"));
            }
        }
    }
    for (session, heartbeat) in SESSION_OVER_HEARTBEAT {
        if effective_long(broker, overrides, session)
            <= effective_long(broker, overrides, heartbeat)
        {
            return Err(format!("{session} must be greater than {heartbeat}"));
        }
    }
    Ok(())
}

/// Where a share partition without persisted state starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    Latest,
    Earliest,
    /// The first offset whose timestamp is at or after now minus this many milliseconds.
    ByDuration(i64),
}

impl AutoOffsetReset {
    /// Parses `latest`, `earliest` or `by_duration:<ISO-8601 duration>` (case-insensitive).
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("latest") {
            return Some(Self::Latest);
        }
        if value.eq_ignore_ascii_case("earliest") {
            return Some(Self::Earliest);
        }
        let (strategy, duration) = value.split_once(':')?;
        if !strategy.eq_ignore_ascii_case("by_duration") {
            return None;
        }
        parse_iso8601_duration_ms(duration).map(Self::ByDuration)
    }
}

/// Java's `Duration.parse` subset Kafka accepts for `by_duration`: `PnDTnHnMn.nS`, not
/// negative, at least one component; returns milliseconds.
pub fn parse_iso8601_duration_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let rest = s.strip_prefix(['P', 'p'])?;
    let (days, time) = match rest.find(['T', 't']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut total: i64 = 0;
    let mut components = 0;
    if !days.is_empty() {
        let n = days.strip_suffix(['D', 'd'])?;
        total = total.checked_add(parse_whole(n)?.checked_mul(86_400_000)?)?;
        components += 1;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, ms) in [('H', 3_600_000i64), ('M', 60_000)] {
            if let Some(i) = time.find([unit, unit.to_ascii_lowercase()]) {
                total = total.checked_add(parse_whole(&time[..i])?.checked_mul(ms)?)?;
                time = &time[i + 1..];
                components += 1;
            }
        }
        if !time.is_empty() {
            let n = time.strip_suffix(['S', 's'])?;
            let (whole, frac) = n.split_once('.').unwrap_or((n, ""));
            total = total.checked_add(parse_whole(whole)?.checked_mul(1000)?)?;
            if !frac.is_empty() {
                if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let padded = format!("{frac:0<3}");
                total = total.checked_add(padded[..3].parse::<i64>().ok()?)?;
            }
            components += 1;
        }
    }
    (components > 0).then_some(total)
}

fn parse_whole(n: &str) -> Option<i64> {
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// A share group's effective settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupSettings {
    pub session_timeout_ms: i64,
    pub heartbeat_interval_ms: i64,
    pub record_lock_duration_ms: i64,
    pub delivery_count_limit: i64,
    pub partition_max_record_locks: i64,
    pub auto_offset_reset: AutoOffsetReset,
    pub read_committed: bool,
    pub renew_acknowledge_enable: bool,
    /// `errors.deadletterqueue.topic.name` is set (not empty).
    pub has_dead_letter_topic: bool,
}

impl ShareGroupSettings {
    pub fn resolve(broker: &BrokerConfig, overrides: &ConfigMap) -> Self {
        let long = |key| effective_long(broker, overrides, key);
        Self {
            session_timeout_ms: long(SHARE_SESSION_TIMEOUT_MS),
            heartbeat_interval_ms: long(SHARE_HEARTBEAT_INTERVAL_MS),
            record_lock_duration_ms: long(SHARE_RECORD_LOCK_DURATION_MS),
            delivery_count_limit: long(SHARE_DELIVERY_COUNT_LIMIT),
            partition_max_record_locks: long(SHARE_PARTITION_MAX_RECORD_LOCKS),
            auto_offset_reset: AutoOffsetReset::parse(&effective(
                broker,
                overrides,
                SHARE_AUTO_OFFSET_RESET,
            ))
            .unwrap_or(AutoOffsetReset::Latest),
            read_committed: effective(broker, overrides, SHARE_ISOLATION_LEVEL) == "read_committed",
            renew_acknowledge_enable: effective(broker, overrides, SHARE_RENEW_ACKNOWLEDGE_ENABLE)
                == "true",
            has_dead_letter_topic: !effective(broker, overrides, DLQ_TOPIC_NAME).is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> ConfigMap {
        let mut m = ConfigMap::new();
        for (k, v) in pairs {
            m.insert(*k, *v);
        }
        m
    }

    #[test]
    fn durations_parse_like_java() {
        assert_eq!(parse_iso8601_duration_ms("PT1H"), Some(3_600_000));
        assert_eq!(parse_iso8601_duration_ms("P1D"), Some(86_400_000));
        assert_eq!(parse_iso8601_duration_ms("P1DT2H3M4.5S"), Some(93_784_500));
        assert_eq!(parse_iso8601_duration_ms("pt30m"), Some(1_800_000));
        assert_eq!(parse_iso8601_duration_ms("PT0.25S"), Some(250));
        for bad in [
            "", "P", "PT", "1H", "PT-1H", "P1H", "PTxS", "PT1.S5", "P1DT",
        ] {
            assert_eq!(parse_iso8601_duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn auto_offset_reset_values() {
        assert_eq!(
            AutoOffsetReset::parse("LATEST"),
            Some(AutoOffsetReset::Latest)
        );
        assert_eq!(
            AutoOffsetReset::parse("earliest"),
            Some(AutoOffsetReset::Earliest)
        );
        assert_eq!(
            AutoOffsetReset::parse("by_duration:PT10M"),
            Some(AutoOffsetReset::ByDuration(600_000))
        );
        assert_eq!(AutoOffsetReset::parse("by_duration:"), None);
        assert_eq!(AutoOffsetReset::parse("none"), None);
        assert_eq!(
            validate_value(SHARE_AUTO_OFFSET_RESET, "BY_DURATION:PT1H").as_deref(),
            Ok("by_duration:PT1H")
        );
    }

    #[test]
    fn overrides_are_checked_against_broker_bounds_and_each_other() {
        let broker = BrokerConfig::default();
        assert!(validate(&broker, &ConfigMap::new()).is_ok());
        assert!(validate(&broker, &map(&[(SHARE_RECORD_LOCK_DURATION_MS, "15000")])).is_ok());
        let low = validate(&broker, &map(&[(SHARE_RECORD_LOCK_DURATION_MS, "14999")]));
        assert!(low
            .unwrap_err()
            .contains("group.share.min.record.lock.duration.ms"));
        assert!(validate(&broker, &map(&[(SHARE_DELIVERY_COUNT_LIMIT, "11")])).is_err());
        assert!(validate(&broker, &map(&[(SHARE_PARTITION_MAX_RECORD_LOCKS, "4001")])).is_err());
        assert!(validate(&broker, &map(&[(SHARE_PARTITION_MAX_RECORD_LOCKS, "4000")])).is_ok());
        assert!(validate(&broker, &map(&[("no.such.group.config", "1")])).is_err());
        // consumer.* and streams.* keys: Kafka's types and the broker's bounds.
        assert!(validate(&broker, &map(&[("consumer.session.timeout.ms", "50000")])).is_ok());
        let low = validate(&broker, &map(&[("consumer.session.timeout.ms", "5000")]));
        assert!(low
            .unwrap_err()
            .contains("group.consumer.min.session.timeout.ms"));
        assert!(validate(&broker, &map(&[("streams.num.standby.replicas", "2")])).is_ok());
        assert!(validate(&broker, &map(&[("streams.num.standby.replicas", "3")])).is_err());
        assert!(validate(&broker, &map(&[("streams.session.timeout.ms", "x")])).is_err());
        assert!(validate(
            &broker,
            &map(&[("consumer.assignor.offload.enable", "false")])
        )
        .is_ok());
        assert!(validate(
            &broker,
            &map(&[("errors.deadletterqueue.topic.name", "dlq")])
        )
        .is_ok());
        let internal = validate(&broker, &map(&[(DLQ_TOPIC_NAME, "__dlq")]));
        assert_eq!(
            internal.unwrap_err(),
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"
        );
        // Within bounds each, but the heartbeat is not below the session timeout.
        let mut broker = BrokerConfig::default();
        broker
            .set("group.share.min.session.timeout.ms", "1000")
            .unwrap();
        let both = map(&[
            (SHARE_SESSION_TIMEOUT_MS, "5000"),
            (SHARE_HEARTBEAT_INTERVAL_MS, "5000"),
        ]);
        assert!(validate(&broker, &both)
            .unwrap_err()
            .contains("greater than"));
    }

    #[test]
    fn settings_resolve_overrides_then_broker_values() {
        let mut broker = BrokerConfig::default();
        broker.set("group.share.delivery.count.limit", "3").unwrap();
        let s = ShareGroupSettings::resolve(
            &broker,
            &map(&[
                (SHARE_ISOLATION_LEVEL, "read_committed"),
                (SHARE_AUTO_OFFSET_RESET, "earliest"),
            ]),
        );
        assert_eq!(s.delivery_count_limit, 3);
        assert_eq!(s.record_lock_duration_ms, 30_000);
        assert!(s.read_committed);
        assert_eq!(s.auto_offset_reset, AutoOffsetReset::Earliest);
        assert!(s.renew_acknowledge_enable);
    }
}
