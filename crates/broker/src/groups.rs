//! Driver of the classic group coordinator (`shoal_core::group_coordinator`).
//!
//! One task owns the sans-IO machine. It takes every request queued since its last pass, feeds
//! them (and timer ticks) to the machine, appends the records the machine emitted to
//! `__consumer_offsets` — one batch per partition, then one group-commit fsync — and only then
//! delivers the replies. If the append fails, the replies are dropped (the client sees
//! COORDINATOR_NOT_AVAILABLE and retries) and the machine is rebuilt from the log, so its state
//! never runs ahead of what is durable. At start the machine is rebuilt by replaying the log.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use shoal_core::group_coordinator::{
    partition_for, GroupConfig, GroupCoordinator, GroupRecord, GroupRequest, GroupResponse, Output,
    ReplyToken,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::broker::{now_ms, Broker, CONSUMER_OFFSETS};
use crate::internal::{EncodedRecord, Replayed};

/// Requests queued at most before callers wait (backpressure).
const QUEUE_REQUESTS_MAX: usize = 10_000;
/// Requests handled in one pass (one fsync) at most.
const PASS_REQUESTS_MAX: usize = 1_000;
/// Longest sleep between timer checks.
const TICK_MAX: Duration = Duration::from_millis(500);

type Pending = (GroupRequest, oneshot::Sender<GroupResponse>);

/// The coordinator failed to answer (not running, or its write failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// Handle to the group coordinator task.
pub struct GroupService {
    tx: Mutex<Option<mpsc::Sender<Pending>>>,
}

impl Default for GroupService {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupService {
    pub fn new() -> Self {
        Self {
            tx: Mutex::new(None),
        }
    }

    /// Replays `__consumer_offsets` and starts the coordinator task.
    ///
    /// # Errors
    /// The log cannot be read.
    pub fn start(&self, broker: &Arc<Broker>) -> anyhow::Result<()> {
        let config = group_config(broker);
        let mut machine = GroupCoordinator::new(config.clone());
        let replayed = replay(broker, &mut machine)?;
        machine.loaded(now_ms());
        info!(records = replayed, "group coordinator loaded");
        let (tx, rx) = mpsc::channel(QUEUE_REQUESTS_MAX);
        *self.tx.lock().expect("group service lock poisoned") = Some(tx);
        tokio::spawn(run(Arc::downgrade(broker), machine, config, rx));
        Ok(())
    }

    /// Sends one request and waits for its (possibly deferred) reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call(&self, request: GroupRequest) -> Result<GroupResponse, Unavailable> {
        let tx = self
            .tx
            .lock()
            .expect("group service lock poisoned")
            .clone()
            .ok_or(Unavailable)?;
        let (reply, wait) = oneshot::channel();
        tx.send((request, reply)).await.map_err(|_| Unavailable)?;
        wait.await.map_err(|_| Unavailable)
    }
}

fn group_config(broker: &Broker) -> GroupConfig {
    let c = &broker.config;
    GroupConfig {
        min_session_timeout_ms: c.long("group.min.session.timeout.ms") as i32,
        max_session_timeout_ms: c.long("group.max.session.timeout.ms") as i32,
        initial_rebalance_delay_ms: c.long("group.initial.rebalance.delay.ms"),
        max_size: c.long("group.max.size") as usize,
        offsets_retention_ms: c.long("offsets.retention.minutes") * 60_000,
        ..GroupConfig::default()
    }
}

/// Replays every record of `__consumer_offsets` into `machine`; returns how many.
fn replay(broker: &Broker, machine: &mut GroupCoordinator) -> anyhow::Result<usize> {
    let mut count = 0;
    crate::internal::replay_topic(broker, CONSUMER_OFFSETS, |item| match item {
        Replayed::Control { header, records } => {
            // A transaction marker: resolve that producer's pending offset commits.
            if let Some(commit) = records
                .first()
                .and_then(|r| r.key.as_deref())
                .and_then(control_record_is_commit)
            {
                machine.replay_end_txn(header.producer_id(), commit);
                count += 1;
            }
        }
        Replayed::Record { partition, record } => {
            let Some(key) = record.key.as_deref() else {
                return;
            };
            match GroupRecord::decode(key, record.value.as_deref()) {
                Ok(r) => {
                    machine.replay(&r);
                    count += 1;
                }
                Err(e) => warn!(
                    partition,
                    offset = record.offset,
                    error = %e,
                    "skipping undecodable group record"
                ),
            }
        }
    })?;
    Ok(count)
}

/// Reads a control record key (`[version i16][type i16]`, type 0 = ABORT, 1 = COMMIT).
pub fn control_record_is_commit(key: &[u8]) -> Option<bool> {
    match key {
        [_, _, 0, 0, ..] => Some(false),
        [_, _, 0, 1, ..] => Some(true),
        _ => None,
    }
}

/// Appends `records` (one batch per partition) and fsyncs them.
async fn persist(broker: &Arc<Broker>, records: &[GroupRecord]) -> Result<(), String> {
    let partitions = crate::internal::partition_count(broker, CONSUMER_OFFSETS);
    let mut by_partition: BTreeMap<u32, Vec<EncodedRecord>> = BTreeMap::new();
    for r in records {
        by_partition
            .entry(partition_for(r.group_id(), partitions))
            .or_default()
            .push(r.encode());
    }
    crate::internal::append_and_flush(broker, CONSUMER_OFFSETS, by_partition).await
}

async fn run(
    broker: Weak<Broker>,
    mut machine: GroupCoordinator,
    config: GroupConfig,
    mut rx: mpsc::Receiver<Pending>,
) {
    let mut next_token: u64 = 0;
    let mut waiting: HashMap<ReplyToken, oneshot::Sender<GroupResponse>> = HashMap::new();
    loop {
        let sleep = machine
            .next_deadline()
            .map(|d| Duration::from_millis((d - now_ms()).max(0) as u64))
            .unwrap_or(TICK_MAX)
            .min(TICK_MAX);
        let mut output = Output::default();
        tokio::select! {
            received = rx.recv() => {
                let Some(first) = received else { return };
                let mut batch = vec![first];
                while batch.len() < PASS_REQUESTS_MAX {
                    match rx.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                for (request, reply) in batch {
                    let token = ReplyToken(next_token);
                    next_token += 1;
                    waiting.insert(token, reply);
                    output.extend(machine.handle(now_ms(), token, request));
                }
            }
            _ = tokio::time::sleep(sleep) => {}
        }
        output.extend(machine.tick(now_ms()));
        let Some(broker) = broker.upgrade() else {
            return;
        };
        if let Err(e) = persist(&broker, &output.records).await {
            error!(error = %e, "group coordinator write failed; reloading state from the log");
            // Drop every reply of this pass: their changes are not durable.
            for (token, _) in output.replies {
                waiting.remove(&token);
            }
            machine = GroupCoordinator::new(config.clone());
            if let Err(e) = replay(&broker, &mut machine) {
                error!(error = %e, "group coordinator reload failed");
            }
            machine.loaded(now_ms());
            // Members waiting on deferred replies must rejoin: their senders drop here.
            waiting.clear();
            continue;
        }
        for (token, response) in output.replies {
            if let Some(reply) = waiting.remove(&token) {
                let _ = reply.send(response);
            }
        }
    }
}
