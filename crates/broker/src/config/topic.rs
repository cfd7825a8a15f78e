//! Topic keys: every key of Kafka 4.4's `LogConfig`, with Kafka's type, range and default,
//! and the broker key that supplies the default (Kafka's `ServerTopicConfigSynonyms`). The
//! defaults are Kafka's except `flush.messages`, whose broker synonym defaults to 1 in Shoal.
//! A doc saying "no effect" marks a key accepted only for compatibility (decision 0007).

use super::{
    double, int, long, throttled_replicas, ConfigDef, Kind, Type, Update, I32_MAX, I32_MIN,
};
use super::{gzip_level, hidden};

const fn t(
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

/// Topic keys with their broker synonym, sorted by name.
#[rustfmt::skip]
pub const TOPIC_CONFIGS: &[(ConfigDef, Option<&str>)] = &[
    t("cleanup.policy", Kind::List(&["compact", "delete"]), Some("delete"), Some("log.cleanup.policy"), "delete (retention by time and size), compact (keep the last record of each key), or both."),
    t("compression.gzip.level", Kind::Custom(Type::Int, gzip_level), Some("-1"), Some("compression.gzip.level"), "gzip level when the broker recompresses; no effect (Shoal stores batches as received)."),
    t("compression.lz4.level", int(1, 17), Some("9"), Some("compression.lz4.level"), "lz4 level when the broker recompresses; no effect (Shoal stores batches as received)."),
    t("compression.type", Kind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]), Some("producer"), Some("compression.type"), "Codec batches are stored with; only producer (as received) is applied."),
    t("compression.zstd.level", int(-131_072, 22), Some("3"), Some("compression.zstd.level"), "zstd level when the broker recompresses; no effect (Shoal stores batches as received)."),
    t("delete.retention.ms", long(0, i64::MAX), Some("86400000"), Some("log.cleaner.delete.retention.ms"), "How long compaction keeps tombstones and transaction markers."),
    t("errors.deadletterqueue.group.enable", Kind::Bool, Some("false"), None, "Whether share groups may use this topic as a dead-letter queue (KIP-1191); a group naming a topic without it writes no dead letters."),
    t("file.delete.delay.ms", long(0, i64::MAX), Some("60000"), Some("log.segment.delete.delay.ms"), "Delay before a deleted segment's files are removed; no effect (Shoal removes them at once)."),
    t("flush.messages", long(1, i64::MAX), Some("9223372036854775807"), Some("log.flush.interval.messages"), "fsync after this many messages; 1 (Shoal's default) fsyncs every acknowledged write, with group commit."),
    t("flush.ms", long(0, i64::MAX), Some("9223372036854775807"), Some("log.flush.interval.ms"), "fsync at least this often when writes are not flushed one by one."),
    t("follower.replication.throttled.replicas", Kind::Custom(Type::List, throttled_replicas), Some(""), None, "Replicas throttled as followers; no effect (no replication)."),
    t("index.interval.bytes", int(0, I32_MAX), Some("4096"), Some("log.index.interval.bytes"), "Bytes between offset-index entries."),
    hidden(t("internal.segment.bytes", int(I32_MIN, I32_MAX), None, None, "Segment size overriding segment.bytes without its lower bound, for tests.")),
    t("leader.replication.throttled.replicas", Kind::Custom(Type::List, throttled_replicas), Some(""), None, "Replicas throttled as leaders; no effect (no replication)."),
    t("local.retention.bytes", long(-2, i64::MAX), Some("-2"), Some("log.local.retention.bytes"), "Bytes kept locally when tiered; no effect (no tiered storage)."),
    t("local.retention.ms", long(-2, i64::MAX), Some("-2"), Some("log.local.retention.ms"), "Time kept locally when tiered; no effect (no tiered storage)."),
    t("max.compaction.lag.ms", long(1, i64::MAX), Some("9223372036854775807"), Some("log.cleaner.max.compaction.lag.ms"), "Longest time a record stays uncompacted."),
    t("max.decompressed.message.bytes", int(1, 2_147_483_639), Some("2147483639"), Some("max.decompressed.message.bytes"), "Largest decompressed size of a batch; no effect (Shoal applies its own fixed budget)."),
    t("max.message.bytes", int(0, I32_MAX), Some("1048588"), Some("message.max.bytes"), "Largest record batch."),
    t("message.timestamp.after.max.ms", long(0, i64::MAX), Some("3600000"), Some("log.message.timestamp.after.max.ms"), "How far in the future a CreateTime timestamp may be (INVALID_TIMESTAMP past it)."),
    t("message.timestamp.before.max.ms", long(0, i64::MAX), Some("9223372036854775807"), Some("log.message.timestamp.before.max.ms"), "How far in the past a CreateTime timestamp may be (INVALID_TIMESTAMP past it)."),
    t("message.timestamp.type", Kind::Choice(&["CreateTime", "LogAppendTime"]), Some("CreateTime"), Some("log.message.timestamp.type"), "CreateTime or LogAppendTime."),
    t("min.cleanable.dirty.ratio", double(0.0, 1.0), Some("0.5"), Some("log.cleaner.min.cleanable.ratio"), "Uncompacted share of a log above which compaction runs."),
    t("min.compaction.lag.ms", long(0, i64::MAX), Some("0"), Some("log.cleaner.min.compaction.lag.ms"), "Shortest time a record stays uncompacted."),
    t("min.insync.replicas", int(1, I32_MAX), Some("1"), Some("min.insync.replicas"), "Replicas that must acknowledge acks=all; no effect (one replica)."),
    t("preallocate", Kind::Bool, Some("false"), Some("log.preallocate"), "Preallocate segment files; no effect."),
    t("remote.copy.lag.bytes", long(-1, i64::MAX), Some("-1"), Some("log.remote.copy.lag.bytes"), "No effect (no tiered storage)."),
    t("remote.copy.lag.ms", long(-1, i64::MAX), Some("0"), Some("log.remote.copy.lag.ms"), "No effect (no tiered storage)."),
    t("remote.log.copy.disable", Kind::Bool, Some("false"), None, "No effect (no tiered storage)."),
    t("remote.log.delete.on.disable", Kind::Bool, Some("false"), None, "No effect (no tiered storage)."),
    t("remote.storage.enable", Kind::Bool, Some("false"), None, "Tiered storage for this topic: true is refused unless remote.log.storage.system.enable is set, and has no effect then (no tiered storage)."),
    t("retention.bytes", long(i64::MIN, i64::MAX), Some("-1"), Some("log.retention.bytes"), "Delete old segments above this size per partition; -1 keeps them."),
    t("retention.ms", long(-1, i64::MAX), Some("604800000"), Some("log.retention.ms"), "Delete segments older than this; -1 keeps them."),
    t("segment.bytes", int(1_048_576, I32_MAX), Some("1073741824"), Some("log.segment.bytes"), "Segment size before a roll."),
    t("segment.index.bytes", int(4, I32_MAX), Some("10485760"), Some("log.index.size.max.bytes"), "Offset-index size per segment; no effect (Shoal's indexes grow as needed)."),
    t("segment.jitter.ms", long(0, i64::MAX), Some("0"), Some("log.roll.jitter.ms"), "Random reduction of segment.ms; no effect."),
    t("segment.ms", long(1, i64::MAX), Some("604800000"), Some("log.roll.ms"), "Segment age before a roll."),
    t("unclean.leader.election.enable", Kind::Bool, Some("false"), Some("unclean.leader.election.enable"), "Elect an out-of-sync replica; no effect (one replica)."),
];
