//! The log cleaner: compaction of every `cleanup.policy=compact` partition, internal topics
//! included (Kafka's `LogCleaner` with its `LogCleanerManager`).
//!
//! One background task (`log.cleaner.threads` > 0 and `log.cleaner.enable`; on a small box one
//! cleaner is what Kafka's default gives too) repeatedly picks the partition most in need —
//! one past `max.compaction.lag.ms` first, else the dirtiest at or above its
//! `min.cleanable.dirty.ratio`, else one whose tombstones' delete horizon passed — and cleans
//! it with shoal-storage's cleaner: a snapshot of its inactive segments under the partition
//! lock, the long read and write on a blocking thread without the lock (throttled to
//! `log.cleaner.io.max.bytes.per.second`, abandoned at shutdown), the swap under the lock.
//! When nothing needs cleaning it sleeps `log.cleaner.backoff.ms`.
//!
//! Internal topics: `__transaction_state` is compacted as Kafka compacts it (its records are
//! whole states per key). `__consumer_offsets` keeps the records Shoal writes for offsets
//! committed inside a transaction, the transaction markers and tombstones, whose meaning
//! depends on their order (decision 0008); `__share_group_state` is `cleanup.policy=delete`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shoal_storage::log::Throttler;
use shoal_storage::{CompactionConfig, StorageError};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::broker::{Broker, CONSUMER_OFFSETS};
use crate::topic_registry::{compaction_config, is_compacted, Partition};

/// Shortest sleep between passes, whatever `log.cleaner.backoff.ms` says (0 would spin).
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest sleep between checks of `log.cleaner.enable` when the cleaner is off.
const DISABLED_RECHECK: Duration = Duration::from_secs(1);

/// Key type of the records `__consumer_offsets` holds for offsets committed inside a
/// transaction (resolved by the markers after them).
const PENDING_OFFSET_COMMIT_KEY: i16 =
    shoal_core::group_coordinator::RECORD_TYPE_PENDING_OFFSET_COMMIT;

fn is_pending_offset_commit(key: &[u8]) -> bool {
    key.len() >= 2 && i16::from_be_bytes([key[0], key[1]]) == PENDING_OFFSET_COMMIT_KEY
}

/// The compaction settings of `topic` with its overrides, adjusted for internal topics.
pub fn topic_compaction(broker: &Broker, topic: &str) -> Option<CompactionConfig> {
    let t = broker.topic(topic)?;
    let config = broker.current_config();
    let overrides = t.overrides();
    if !is_compacted(&config, &overrides) {
        return None;
    }
    let mut cc = compaction_config(&config, &overrides);
    if topic == CONSUMER_OFFSETS {
        cc.always_keep = Some(is_pending_offset_commit);
        cc.keep_markers = true;
        cc.keep_tombstones = true;
    }
    Some(cc)
}

/// Runs the cleaner until `stop`.
pub async fn run(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let stopping = Arc::new(AtomicBool::new(false));
    loop {
        let config = broker.current_config();
        let enabled = config.bool("log.cleaner.enable") && config.long("log.cleaner.threads") > 0;
        let backoff = Duration::from_millis(config.long("log.cleaner.backoff.ms").max(0) as u64)
            .max(BACKOFF_MIN);
        let mut cleaned = false;
        if enabled {
            let b = broker.clone();
            let flag = stopping.clone();
            let clean = tokio::task::spawn_blocking(move || clean_filthiest(&b, &flag));
            tokio::pin!(clean);
            let outcome = tokio::select! {
                r = &mut clean => r,
                _ = stop.changed() => {
                    stopping.store(true, Ordering::Relaxed);
                    let _ = clean.await;
                    return;
                }
            };
            cleaned = matches!(outcome, Ok(true));
        }
        if cleaned {
            continue;
        }
        let pause = if enabled {
            backoff
        } else {
            backoff.min(DISABLED_RECHECK)
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Candidate ordering: past `max.compaction.lag.ms` first, then by dirty ratio.
fn priority(stats: &shoal_storage::DirtyStats) -> (bool, f64) {
    (stats.max_lag_exceeded, stats.dirty_ratio)
}

/// Cleans the partition most in need; returns whether one was cleaned.
fn clean_filthiest(broker: &Broker, stopping: &AtomicBool) -> bool {
    let now = broker.now_ms();
    let mut candidates: Vec<(Arc<Partition>, CompactionConfig, (bool, f64))> = Vec::new();
    for topic in broker.topic_list() {
        let Some(cc) = topic_compaction(broker, &topic.name) else {
            continue;
        };
        for p in topic.partitions() {
            // A cheap look (sizes and timestamps in memory) with the log end as the LSO; the
            // real LSO is taken before cleaning.
            let stats = {
                let log = p.lock();
                log.dirty_stats(now, &cc, log.log_end_offset())
            };
            if stats.needs_cleaning(&cc) {
                candidates.push((p, cc, priority(&stats)));
            }
        }
    }
    candidates.sort_by(|a, b| b.2.partial_cmp(&a.2).unwrap_or(std::cmp::Ordering::Equal));
    for (partition, cc, _) in candidates {
        if stopping.load(Ordering::Relaxed) {
            return false;
        }
        match clean_partition(broker, &partition, &cc, now, stopping) {
            Ok(Some(stats)) => {
                info!(
                    partition = ?partition,
                    segments = stats.segments_cleaned,
                    bytes_before = stats.bytes_before,
                    bytes_after = stats.bytes_after,
                    records_removed = stats.records_removed,
                    cleaned_to = stats.cleaned_to,
                    "log cleaned"
                );
                return true;
            }
            // Not cleanable after all (an open transaction holds the LSO back), or the log
            // changed meanwhile: try the next one.
            Ok(None) => {}
            Err(e) => {
                if !stopping.load(Ordering::Relaxed) {
                    warn!(partition = ?partition, error = %e, "log cleaning failed");
                }
            }
        }
    }
    false
}

fn partition_dir(broker: &Broker, partition: &Partition) -> std::path::PathBuf {
    crate::topic_registry::partition_dir(&broker.data_dir, &partition.topic, partition.index)
}

/// Cleans one partition: snapshot under the lock, run without it, swap under it.
///
/// # Errors
/// Storage errors, or the cancellation at shutdown.
pub fn clean_partition(
    broker: &Broker,
    partition: &Partition,
    cc: &CompactionConfig,
    now: i64,
    stopping: &AtomicBool,
) -> Result<Option<shoal_storage::CleanStats>, StorageError> {
    let task = {
        let mut log = partition.lock();
        let state = crate::producer_state::state_config(&broker.config);
        let lso = partition.last_stable_offset(&mut log, state, now)?;
        log.prepare_clean(now, cc, lso)
    };
    let Some(task) = task else {
        return Ok(None);
    };
    let config = broker.current_config();
    let rate = config.double("log.cleaner.io.max.bytes.per.second");
    let mut throttler = Throttler::new(rate);
    let cleaned = task.run(&mut |bytes| {
        if stopping.load(Ordering::Relaxed) {
            return Err(StorageError::Io {
                op: "clean",
                path: partition_dir(broker, partition),
                source: std::io::Error::other("broker shutting down"),
            });
        }
        let pause = throttler.record(bytes, broker.now_ms());
        if pause > 0 {
            std::thread::sleep(Duration::from_millis(pause));
        }
        Ok(())
    })?;
    let stats = partition.lock().install_clean(cleaned)?;
    if !stats.installed {
        debug!(partition = ?partition, "log changed during cleaning; will retry");
        return Ok(None);
    }
    Ok(Some(stats))
}
