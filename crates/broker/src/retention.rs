//! Periodic log maintenance: retention by time and size (`log.retention.check.interval.ms`),
//! time-based flushing when `flush.messages` is not 1 (`log.flush.interval.ms`), each
//! partition's recovery point (`log.flush.offset.checkpoint.interval.ms`: after kill -9 only the
//! bytes past it are scanned), pruning of superseded `__share_group_state` records
//! (`share.coordinator.state.topic.prune.interval.ms`), and closing segment files left idle
//! (every minute; see `shoal_storage::log::close_idle_files`).
//!
//! In a cluster a partition's log start is recorded where a new owner finds it before the
//! local log moves it (`Durability::record_log_start`): retention there works out the start
//! each partition this node owns would have ([`shoal_storage::Log::retention_start`]), records
//! it, and only then deletes the segments below it; a start not recorded (fenced, etcd
//! failing) leaves the local log as it was, and the next pass tries again. Partitions this
//! node does not own keep their local logs as they are.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::broker::Broker;
use crate::topic_registry::Partition;

/// Shortest pause between maintenance passes, whatever the configuration says.
const TICK_MIN: Duration = Duration::from_millis(100);
/// Extra passes (one per tick) for partitions a recovery-point pass found mid-flush.
const CHECKPOINT_RETRIES: u32 = 10;
/// How often segment files unused since the previous sweep are closed: a partition idle for
/// one to two of these holds no descriptor.
const IDLE_FILES_EVERY: Duration = Duration::from_secs(60);

pub async fn run(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut last_retention = tokio::time::Instant::now();
    let mut last_flush = tokio::time::Instant::now();
    let mut last_prune = tokio::time::Instant::now();
    let mut last_checkpoint = tokio::time::Instant::now();
    let mut checkpoint_retries = 0u32;
    let mut last_idle_sweep = tokio::time::Instant::now();
    loop {
        let config = broker.current_config();
        let retention_every =
            Duration::from_millis(config.long("log.retention.check.interval.ms") as u64);
        let flush_every = Duration::from_millis(
            config
                .long("log.flush.interval.ms")
                .min(i64::from(u32::MAX)) as u64,
        );
        let checkpoint_every =
            Duration::from_millis(config.long("log.flush.offset.checkpoint.interval.ms") as u64);
        let tick = retention_every
            .min(flush_every)
            .min(checkpoint_every)
            .clamp(TICK_MIN, Duration::from_secs(1));
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.changed() => return,
        }
        if last_retention.elapsed() >= retention_every {
            last_retention = tokio::time::Instant::now();
            if broker.durability.records_log_start() {
                enforce_recorded_retention(&broker).await;
            } else {
                let broker = broker.clone();
                let _ = tokio::task::spawn_blocking(move || enforce_retention(&broker)).await;
            }
        }
        if last_checkpoint.elapsed() >= checkpoint_every || checkpoint_retries > 0 {
            if checkpoint_retries == 0 {
                last_checkpoint = tokio::time::Instant::now();
            }
            let broker = broker.clone();
            let skipped = tokio::task::spawn_blocking(move || checkpoint_recovery_points(&broker))
                .await
                .unwrap_or(0);
            // Partitions caught mid-flush are tried again on the next ticks, a few times.
            checkpoint_retries = if skipped == 0 {
                0
            } else if checkpoint_retries == 0 {
                CHECKPOINT_RETRIES
            } else {
                checkpoint_retries - 1
            };
        }
        if last_idle_sweep.elapsed() >= IDLE_FILES_EVERY {
            last_idle_sweep = tokio::time::Instant::now();
            let closed = tokio::task::spawn_blocking(shoal_storage::log::close_idle_files)
                .await
                .unwrap_or(0);
            if closed > 0 {
                debug!(closed, "closed idle segment files");
            }
        }
        let prune_every = Duration::from_millis(
            config.long("share.coordinator.state.topic.prune.interval.ms") as u64,
        );
        if last_prune.elapsed() >= prune_every {
            last_prune = tokio::time::Instant::now();
            match broker.share.prune(&broker).await {
                Ok(0) => {}
                Ok(n) => info!(offsets = n, "pruned superseded share-group state"),
                Err(e) => warn!(error = %e, "share-group state pruning failed"),
            }
        }
        if last_flush.elapsed() >= flush_every {
            last_flush = tokio::time::Instant::now();
            let partitions: Vec<_> = broker
                .topic_list()
                .iter()
                .flat_map(|t| t.partitions())
                .filter(|p| {
                    let log = p.lock();
                    log.flushed_offset() < log.log_end_offset()
                })
                .collect();
            if let Err(e) = broker.durability.commit(partitions).await {
                warn!(error = %e, "periodic flush failed");
            }
        }
    }
}

/// Writes the recovery point of every partition whose fsynced prefix moved, with a producer
/// snapshot at the same offset (loading the producer state first if no one has yet), so that
/// after a crash both the log scan and the producer-state replay start at the point. A
/// partition with unflushed data is skipped (the snapshot would be past the point); returns
/// how many were, for the caller to try again soon.
fn checkpoint_recovery_points(broker: &Broker) -> usize {
    let state = crate::producer_state::state_config(&broker.config);
    let now = broker.now_ms();
    let mut skipped = 0;
    for topic in broker.topic_list() {
        for p in topic.partitions() {
            let mut log = p.lock();
            if log.flushed_offset() < log.log_end_offset() {
                skipped += 1;
                continue;
            }
            match p.producers(&mut log, state, now) {
                Ok(mut producers) => {
                    if producers.end_offset() == log.log_end_offset()
                        && !producers.snapshot_is_current()
                    {
                        if let Err(e) = producers.snapshot(&log, false) {
                            warn!(topic = %p.topic, partition = p.index, error = %e, "producer snapshot not written");
                        }
                    }
                }
                Err(e) => {
                    warn!(topic = %p.topic, partition = p.index, error = %e, "producer state not loaded");
                }
            }
            if let Err(e) = log.checkpoint_recovery_point() {
                warn!(topic = %p.topic, partition = p.index, error = %e, "recovery point not written");
            }
        }
    }
    skipped
}

fn enforce_retention(broker: &Broker) {
    let now = broker.now_ms();
    for topic in broker.topic_list() {
        for p in topic.partitions() {
            match p.lock().enforce_retention(now) {
                Ok(0) => {}
                Ok(n) => {
                    info!(topic = %p.topic, partition = p.index, segments = n, "retention deleted segments")
                }
                Err(e) => {
                    warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                }
            }
        }
    }
}

/// Retention in a cluster (see the module docs).
async fn enforce_recorded_retention(broker: &Arc<Broker>) {
    let due = {
        let broker = broker.clone();
        tokio::task::spawn_blocking(move || retention_due(&broker))
            .await
            .unwrap_or_default()
    };
    for (p, start) in due {
        if let Err(e) = broker.durability.record_log_start(p.clone(), start).await {
            warn!(topic = %p.topic, partition = p.index, start, error = %e,
                "retention: log start not recorded");
            continue;
        }
        let moved = tokio::task::spawn_blocking(move || {
            let moved = p.lock().delete_records_before(start);
            (p, moved)
        })
        .await;
        match moved {
            Ok((p, Ok(_))) => {
                info!(topic = %p.topic, partition = p.index, start, "retention moved the log start")
            }
            Ok((p, Err(e))) => {
                warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
            }
            Err(e) => warn!(error = %e, "retention task failed"),
        }
    }
}

/// The partitions this node owns whose retention would move their log start, and where to.
fn retention_due(broker: &Broker) -> Vec<(Arc<Partition>, i64)> {
    let now = broker.now_ms();
    let mut due = Vec::new();
    for topic in broker.topic_list() {
        for p in topic.partitions() {
            if broker
                .ownership
                .serves(&p.topic, p.index, p.leader_epoch)
                .is_err()
            {
                continue;
            }
            let (start, now_start) = {
                let log = p.lock();
                (log.retention_start(now), log.log_start_offset())
            };
            if start > now_start {
                due.push((p, start));
            }
        }
    }
    due
}
