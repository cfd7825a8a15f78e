//! The topic registry: topics by name and id, their partitions and effective configs.
//!
//! Admin changes (create, delete, grow, alter configs) are serialized by the registry's async
//! admin lock and written to the metadata log before they are visible. Each partition's log sits
//! behind its own short `std::sync::Mutex` (no awaits while held), so the data path takes no
//! global lock beyond a read lock on the name map.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use tokio::sync::Notify;

use shoal_core::producer_state::ProducerStateConfig;
use shoal_storage::{CompactionConfig, Log, LogConfig, TimestampType};
use uuid::Uuid;

use crate::cluster_metadata::TopicMeta;
use crate::config::{BrokerConfig, ConfigMap};
use crate::producer_state::{remove_stale_snapshots, PartitionProducers};

/// Kafka's limit on topic-name length.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Kafka's topic-name rule: 1..=249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be '{name}'"));
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(format!(
            "topic name is longer than {TOPIC_NAME_BYTES_MAX} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name '{name}' contains '{c}'; legal characters are ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// One partition of a topic, owning its log.
pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    /// The owner epoch this node opened the partition under (`seams::ownership`; -1 when it
    /// did not own it): it serves and commits the partition only while it still owns it
    /// under this epoch.
    pub leader_epoch: i32,
    pub log: Mutex<Log>,
    /// Producer state, loaded on first use; lock only while holding `log` (lock order: log,
    /// then producers).
    pub producers: Mutex<Option<PartitionProducers>>,
    /// Long-polling readers to wake on the next append.
    waiters: Mutex<Vec<Weak<Notify>>>,
    /// Held while this partition's fsync runs (group commit, see `seams::durability`). Public
    /// so that a test can hold a write between its append and its fsync without blocking a
    /// thread.
    pub flush_gate: tokio::sync::Mutex<()>,
}

/// Readers registered on one partition at most; past it a reader waits for its timeout.
pub const PARTITION_WAITERS_MAX: usize = 100_000;

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Partition({}-{})", self.topic, self.index)
    }
}

impl Partition {
    /// Registers `waker` to be notified once, on the next append (or deletion). Register before
    /// reading: an append after the read then wakes the reader, one before it is seen by it.
    pub fn watch(&self, waker: &Arc<Notify>) {
        let mut waiters = self
            .waiters
            .lock()
            .expect("partition waiters lock poisoned");
        waiters.retain(|w| w.strong_count() > 0);
        if waiters.len() < PARTITION_WAITERS_MAX {
            waiters.push(Arc::downgrade(waker));
        }
    }

    /// Wakes every registered reader.
    pub fn wake(&self) {
        let waiters = std::mem::take(
            &mut *self
                .waiters
                .lock()
                .expect("partition waiters lock poisoned"),
        );
        for waker in waiters.iter().filter_map(Weak::upgrade) {
            waker.notify_one();
        }
    }

    /// Locks the log. A poisoned lock means a panic happened mid-change; the log's in-memory
    /// state may be inconsistent, so we keep failing loudly rather than serve it.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log
            .lock()
            .expect("partition log lock poisoned by an earlier panic")
    }

    /// Locks the producer state; call with the log lock held (`log` proves it) and the state
    /// loaded if it was not.
    ///
    /// # Errors
    /// Loading the state failed (the log or a snapshot could not be read).
    pub fn producers(
        &self,
        log: &mut Log,
        config: ProducerStateConfig,
        now_ms: i64,
    ) -> Result<MappedProducers<'_>, shoal_storage::StorageError> {
        let mut guard = self
            .producers
            .lock()
            .expect("partition producer lock poisoned by an earlier panic");
        if guard.is_none() {
            *guard = Some(PartitionProducers::load(log, config, now_ms)?);
        }
        Ok(MappedProducers(guard))
    }

    /// The last stable offset (the first offset of the earliest ongoing transaction, else the
    /// high watermark); call with the log lock held (`log` proves it). Loads the producer state
    /// if it was not (once per partition: a snapshot plus the batches after it), which also
    /// completes the log's aborted-transaction index; afterwards O(log n).
    ///
    /// # Errors
    /// Loading or catching up the state failed (the log or a snapshot could not be read).
    pub fn last_stable_offset(
        &self,
        log: &mut Log,
        config: ProducerStateConfig,
        now_ms: i64,
    ) -> Result<i64, shoal_storage::StorageError> {
        let mut producers = self.producers(log, config, now_ms)?;
        producers.sync_with(log)?;
        Ok(producers.last_stable_offset(log))
    }

    /// The producer state if it is loaded; call with the log lock held.
    pub fn loaded_producers(&self) -> std::sync::MutexGuard<'_, Option<PartitionProducers>> {
        self.producers
            .lock()
            .expect("partition producer lock poisoned by an earlier panic")
    }

    /// Clean shutdown: closes the log (sync, seal, clean-shutdown marker) and writes a durable
    /// producer snapshot at the log end if the state was loaded.
    ///
    /// # Errors
    /// The first storage error; the log is then recovered on the next open.
    pub fn shutdown(&self) -> Result<(), shoal_storage::StorageError> {
        let mut log = self.lock();
        log.shutdown()?;
        if let Some(producers) = self.loaded_producers().as_mut() {
            producers.snapshot(&log, true)?;
        }
        Ok(())
    }
}

/// A locked, loaded [`PartitionProducers`].
pub struct MappedProducers<'a>(std::sync::MutexGuard<'a, Option<PartitionProducers>>);

impl std::ops::Deref for MappedProducers<'_> {
    type Target = PartitionProducers;
    fn deref(&self) -> &PartitionProducers {
        self.0.as_ref().expect("loaded by Partition::producers")
    }
}

impl std::ops::DerefMut for MappedProducers<'_> {
    fn deref_mut(&mut self) -> &mut PartitionProducers {
        self.0.as_mut().expect("loaded by Partition::producers")
    }
}

/// A topic with its partitions.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub internal: bool,
    partitions: RwLock<Vec<Arc<Partition>>>,
    configs: RwLock<ConfigMap>,
}

impl Topic {
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .expect("topic partitions lock poisoned")
            .clone()
    }

    pub fn partition(&self, index: i32) -> Option<Arc<Partition>> {
        let partitions = self
            .partitions
            .read()
            .expect("topic partitions lock poisoned");
        usize::try_from(index)
            .ok()
            .and_then(|i| partitions.get(i).cloned())
    }

    pub fn partition_count(&self) -> usize {
        self.partitions
            .read()
            .expect("topic partitions lock poisoned")
            .len()
    }

    /// The topic's overrides (not the defaults).
    pub fn overrides(&self) -> ConfigMap {
        self.configs
            .read()
            .expect("topic configs lock poisoned")
            .clone()
    }

    pub fn set_overrides(&self, configs: ConfigMap) {
        *self.configs.write().expect("topic configs lock poisoned") = configs;
    }

    /// Puts `partition` in place of the partition of its index (a reopened partition, see
    /// `crate::takeover`); requests that took the old one finish on it.
    pub fn replace_partition(&self, partition: Arc<Partition>) {
        let mut partitions = self
            .partitions
            .write()
            .expect("topic partitions lock poisoned");
        if let Some(slot) = usize::try_from(partition.index)
            .ok()
            .and_then(|i| partitions.get_mut(i))
        {
            *slot = partition;
        }
    }

    pub fn meta(&self) -> TopicMeta {
        TopicMeta {
            name: self.name.clone(),
            id: self.id,
            partitions: self.partition_count() as u32,
            configs: self.overrides(),
            internal: self.internal,
        }
    }
}

/// The effective value of a topic key: override, else broker synonym, else default.
pub fn effective(broker: &BrokerConfig, overrides: &ConfigMap, key: &str) -> String {
    overrides
        .get(key)
        .map(str::to_string)
        .or_else(|| broker.topic_default(key))
        .unwrap_or_default()
}

fn effective_long(broker: &BrokerConfig, overrides: &ConfigMap, key: &str) -> i64 {
    effective(broker, overrides, key).parse().unwrap_or(0)
}

/// Builds the storage config of a topic from its overrides and the broker defaults.
pub fn log_config(broker: &BrokerConfig, overrides: &ConfigMap) -> LogConfig {
    let long = |key| effective_long(broker, overrides, key);
    let mut config = LogConfig {
        // Kafka's internal.segment.bytes (tests' small segments) takes precedence when set.
        segment_bytes: match effective(broker, overrides, "internal.segment.bytes").parse::<i64>() {
            Ok(bytes) => bytes,
            Err(_) => long("segment.bytes"),
        }
        .max(1) as u64,
        segment_ms: long("segment.ms"),
        retention_ms: long("retention.ms"),
        retention_bytes: long("retention.bytes"),
        max_message_bytes: long("max.message.bytes").max(0) as usize,
        index_interval_bytes: long("index.interval.bytes").clamp(0, i64::from(u32::MAX)) as u32,
        message_timestamp_type: if effective(broker, overrides, "message.timestamp.type")
            == "LogAppendTime"
        {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
        ..LogConfig::default()
    };
    // Compacted topics lose records only to the cleaner (crate::cleaner); with
    // `compact,delete` time and size retention apply too, as in Kafka.
    let policy = effective(broker, overrides, "cleanup.policy");
    if !policy.split(',').any(|p| p == "delete") {
        config.retention_ms = -1;
        config.retention_bytes = -1;
    }
    // As Kafka's LogConfig.maxSegmentMs: records in the active segment cannot be compacted, so
    // a compacted log rolls at least every max.compaction.lag.ms.
    if is_compacted(broker, overrides) {
        config.segment_ms = config.segment_ms.min(long("max.compaction.lag.ms").max(1));
    }
    config
}

/// Whether the topic's `cleanup.policy` includes `compact`.
pub fn is_compacted(broker: &BrokerConfig, overrides: &ConfigMap) -> bool {
    effective(broker, overrides, "cleanup.policy")
        .split(',')
        .any(|p| p.trim() == "compact")
}

/// A double-valued key (`Kind::Text` in the config tables): its effective value if it parses
/// to a finite number within `[min, max]`, else `default`.
fn effective_f64(
    broker: &BrokerConfig,
    overrides: &ConfigMap,
    key: &str,
    (min, max, default): (f64, f64, f64),
) -> f64 {
    effective(broker, overrides, key)
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && (min..=max).contains(v))
        .unwrap_or(default)
}

/// Builds a compacted topic's cleaner settings from its overrides and the broker's
/// `log.cleaner.*` keys.
pub fn compaction_config(broker: &BrokerConfig, overrides: &ConfigMap) -> CompactionConfig {
    let long = |key| effective_long(broker, overrides, key);
    let load_factor = broker
        .get("log.cleaner.io.buffer.load.factor")
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0 && *v <= 1.0)
        .unwrap_or(0.9);
    let threads = broker.long("log.cleaner.threads").clamp(1, 1024) as usize;
    CompactionConfig {
        min_cleanable_dirty_ratio: effective_f64(
            broker,
            overrides,
            "min.cleanable.dirty.ratio",
            (0.0, 1.0, 0.5),
        ),
        delete_retention_ms: long("delete.retention.ms").max(0),
        min_compaction_lag_ms: long("min.compaction.lag.ms").max(0),
        max_compaction_lag_ms: long("max.compaction.lag.ms").max(1),
        offset_map_entries: shoal_storage::log::offset_map_entries(
            broker.long("log.cleaner.dedupe.buffer.size"),
            load_factor,
            threads,
        ),
        ..CompactionConfig::default()
    }
}

/// Partition directory name, as Kafka names it.
pub fn partition_dir(data_dir: &Path, topic: &str, index: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{index}"))
}

/// Name maps of the registry.
#[derive(Debug, Default)]
pub struct TopicMaps {
    pub by_name: HashMap<String, Arc<Topic>>,
    pub by_id: HashMap<Uuid, Arc<Topic>>,
}

/// How a partition's log comes to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// At start-up: open (recovering) what is on disk, creating what is missing.
    Existing,
    /// Just created by the caller: make the directory, fsyncing nothing until the first write
    /// ([`Log::create`]).
    New,
}

/// The owner epoch to open a partition (topic name, index) under; see
/// `seams::ownership::Ownership::epoch_to_open`.
pub type EpochOf<'a> = dyn Fn(&str, i32) -> i32 + Sync + 'a;

/// Opens every partition log of every topic in `metas` at start-up, `threads` partitions at a
/// time (Kafka's `num.recovery.threads.per.data.dir`): after a crash each one may scan its
/// unflushed tail, and at ten thousand partitions even a clean open is worth spreading.
///
/// # Errors
/// A storage error of some partition (the first met).
pub fn open_topics(
    data_dir: &Path,
    broker: &BrokerConfig,
    epoch_of: &EpochOf<'_>,
    metas: &[&TopicMeta],
    threads: usize,
) -> Result<Vec<Arc<Topic>>, shoal_storage::StorageError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let work: Vec<(usize, i32)> = metas
        .iter()
        .enumerate()
        .flat_map(|(t, meta)| (0..meta.partitions as i32).map(move |i| (t, i)))
        .collect();
    let configs: Vec<LogConfig> = metas
        .iter()
        .map(|m| log_config(broker, &m.configs))
        .collect();
    let opened: Vec<Mutex<Option<Arc<Partition>>>> =
        work.iter().map(|_| Mutex::new(None)).collect();
    let first_error = Mutex::new(None);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, work.len().max(1)) {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(t, index)) = work.get(at) else {
                    break;
                };
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                let epoch = epoch_of(&metas[t].name, index);
                let opened_at = (index, epoch);
                match open_partition(data_dir, metas[t], opened_at, configs[t], Opening::Existing) {
                    Ok(p) => *lock(&opened[at]) = Some(p),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        lock(&first_error).get_or_insert(e);
                    }
                }
            });
        }
    });
    if let Some(e) = first_error
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(e);
    }
    let mut opened = opened
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner));
    let mut topics = Vec::with_capacity(metas.len());
    for meta in metas {
        let partitions: Vec<Arc<Partition>> = (0..meta.partitions)
            .map_while(|_| opened.next().flatten())
            .collect();
        if partitions.len() != meta.partitions as usize {
            // Unreachable: every slot is filled when no open failed.
            return Err(shoal_storage::StorageError::Io {
                op: "open",
                path: partition_dir(data_dir, &meta.name, partitions.len() as i32),
                source: std::io::Error::other("partition not opened"),
            });
        }
        topics.push(new_topic(meta, partitions));
    }
    Ok(topics)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn new_topic(meta: &TopicMeta, partitions: Vec<Arc<Partition>>) -> Arc<Topic> {
    Arc::new(Topic {
        name: meta.name.clone(),
        id: meta.id,
        internal: meta.internal,
        partitions: RwLock::new(partitions),
        configs: RwLock::new(meta.configs.clone()),
    })
}

/// Opens every partition log of `meta`.
///
/// # Errors
/// The first storage error.
pub fn open_topic(
    data_dir: &Path,
    broker: &BrokerConfig,
    epoch_of: &EpochOf<'_>,
    meta: &TopicMeta,
    opening: Opening,
) -> Result<Arc<Topic>, shoal_storage::StorageError> {
    let config = log_config(broker, &meta.configs);
    let mut partitions = Vec::with_capacity(meta.partitions as usize);
    for index in 0..meta.partitions as i32 {
        let at = (index, epoch_of(&meta.name, index));
        partitions.push(open_partition(data_dir, meta, at, config, opening)?);
    }
    Ok(new_topic(meta, partitions))
}

/// Opens partition `index` of `meta` under owner epoch `epoch` (`at` = (index, epoch)).
fn open_partition(
    data_dir: &Path,
    meta: &TopicMeta,
    (index, epoch): (i32, i32),
    config: LogConfig,
    opening: Opening,
) -> Result<Arc<Partition>, shoal_storage::StorageError> {
    let dir = partition_dir(data_dir, &meta.name, index);
    let log = match opening {
        Opening::New => Log::create(&dir, config)?,
        Opening::Existing => {
            let log = Log::open(&dir, config)?;
            // Before anything is appended: a snapshot past the recovered end describes lost
            // data.
            remove_stale_snapshots(&log)?;
            log
        }
    };
    Ok(Arc::new(Partition {
        topic: meta.name.clone(),
        topic_id: meta.id,
        index,
        leader_epoch: epoch,
        log: Mutex::new(log),
        producers: Mutex::new(None),
        waiters: Mutex::new(Vec::new()),
        flush_gate: tokio::sync::Mutex::new(()),
    }))
}

/// A partition of `topic` over an already opened `log`, served under owner epoch `epoch`.
pub fn partition_over(topic: &Topic, index: i32, epoch: i32, log: Log) -> Arc<Partition> {
    Arc::new(Partition {
        topic: topic.name.clone(),
        topic_id: topic.id,
        index,
        leader_epoch: epoch,
        log: Mutex::new(log),
        producers: Mutex::new(None),
        waiters: Mutex::new(Vec::new()),
        flush_gate: tokio::sync::Mutex::new(()),
    })
}

/// Adds partitions `existing..meta.partitions` to `topic`.
///
/// # Errors
/// The first storage error; partitions opened before it stay.
pub fn grow_topic(
    data_dir: &Path,
    broker: &BrokerConfig,
    epoch_of: &EpochOf<'_>,
    topic: &Topic,
    meta: &TopicMeta,
) -> Result<(), shoal_storage::StorageError> {
    let config = log_config(broker, &meta.configs);
    let existing = topic.partition_count() as i32;
    for index in existing..meta.partitions as i32 {
        let at = (index, epoch_of(&meta.name, index));
        let partition = open_partition(data_dir, meta, at, config, Opening::New)?;
        topic
            .partitions
            .write()
            .expect("topic partitions lock poisoned")
            .push(partition);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name(".").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
        assert!(validate_topic_name("ü").is_err());
        assert!(validate_topic_name(&"a".repeat(249)).is_ok());
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
    }

    #[test]
    fn compact_and_delete_policies_combine() {
        let broker = BrokerConfig::default();
        let with = |policy: &str| {
            let mut m = ConfigMap::new();
            m.insert("cleanup.policy", policy);
            m.insert("retention.ms", "1000");
            m
        };
        let compact = with("compact");
        assert!(is_compacted(&broker, &compact));
        assert_eq!(log_config(&broker, &compact).retention_ms, -1);
        let both = with("compact,delete");
        assert!(is_compacted(&broker, &both));
        assert_eq!(log_config(&broker, &both).retention_ms, 1000);
        let delete = with("delete");
        assert!(!is_compacted(&broker, &delete));
        assert_eq!(log_config(&broker, &delete).retention_ms, 1000);
    }

    #[test]
    fn compaction_settings_come_from_the_topic_then_the_broker() {
        let mut broker = BrokerConfig::default();
        broker
            .set("log.cleaner.min.cleanable.ratio", "0.25")
            .unwrap();
        let mut topic = ConfigMap::new();
        assert_eq!(
            compaction_config(&broker, &topic).min_cleanable_dirty_ratio,
            0.25
        );
        topic.insert("min.cleanable.dirty.ratio", "0.01");
        topic.insert("max.compaction.lag.ms", "5000");
        let cc = compaction_config(&broker, &topic);
        assert_eq!(cc.min_cleanable_dirty_ratio, 0.01);
        assert_eq!(cc.max_compaction_lag_ms, 5000);
        // A compacted log rolls by max.compaction.lag.ms when it is below segment.ms.
        assert_eq!(log_config(&broker, &topic).segment_ms, 604_800_000);
        topic.insert("cleanup.policy", "compact");
        assert_eq!(log_config(&broker, &topic).segment_ms, 5000);
        // Out of range or not a number: the default.
        topic.insert("min.cleanable.dirty.ratio", "1.5");
        assert_eq!(
            compaction_config(&broker, &topic).min_cleanable_dirty_ratio,
            0.5
        );
        // The dedupe buffer bounds the map, split between cleaner threads.
        broker
            .set("log.cleaner.dedupe.buffer.size", "4000000")
            .unwrap();
        broker.set("log.cleaner.threads", "2").unwrap();
        assert_eq!(
            compaction_config(&broker, &topic).offset_map_entries,
            45_000
        );
    }
}
