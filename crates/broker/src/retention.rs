//! Periodic log maintenance: retention by time and size (`log.retention.check.interval.ms`),
//! time-based flushing when `flush.messages` is not 1 (`log.flush.interval.ms`), each
//! partition's recovery point (`log.flush.offset.checkpoint.interval.ms`: after kill -9 only the
//! bytes past it are scanned), and pruning of superseded `__share_group_state` records
//! (`share.coordinator.state.topic.prune.interval.ms`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::broker::{now_ms, Broker};

/// Shortest pause between maintenance passes, whatever the configuration says.
const TICK_MIN: Duration = Duration::from_millis(100);

pub async fn run(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut last_retention = tokio::time::Instant::now();
    let mut last_flush = tokio::time::Instant::now();
    let mut last_prune = tokio::time::Instant::now();
    let mut last_checkpoint = tokio::time::Instant::now();
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
            let broker = broker.clone();
            let _ = tokio::task::spawn_blocking(move || enforce_retention(&broker)).await;
        }
        if last_checkpoint.elapsed() >= checkpoint_every {
            last_checkpoint = tokio::time::Instant::now();
            let broker = broker.clone();
            let _ = tokio::task::spawn_blocking(move || checkpoint_recovery_points(&broker)).await;
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
            if let Err(e) = broker.flusher.flush(partitions).await {
                warn!(error = %e, "periodic flush failed");
            }
        }
    }
}

/// Writes the recovery point of every partition whose fsynced prefix moved.
fn checkpoint_recovery_points(broker: &Broker) {
    for topic in broker.topic_list() {
        for p in topic.partitions() {
            if let Err(e) = p.lock().checkpoint_recovery_point() {
                warn!(topic = %p.topic, partition = p.index, error = %e, "recovery point not written");
            }
        }
    }
}

fn enforce_retention(broker: &Broker) {
    let now = now_ms();
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
