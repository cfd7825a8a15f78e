//! The one coordinator runtime: drives any [`CoordinatorShard`] the same way.
//!
//! One task owns the shard. At start it rebuilds the shard by replaying the shard's internal
//! topic (records and transaction markers, in log order per partition; each record with its
//! batch's framing and its offset, see `CoordinatorShard::landed`). Then, pass after
//! pass, it takes every input queued since the last pass (at most [`PASS_INPUTS_MAX`]), in
//! the order they were queued, feeds them and a timer tick to the shard, appends the records
//! the shard emitted as their framing says (`shoal_core::coordinator::Framing`: per partition
//! in order, consecutive records of one framing in one batch — plain, or a producer's
//! transactional batch — and a marker as a control batch; see [`super::log_io`]), then one
//! group-commit fsync, tells the shard where each record landed, and only then delivers the
//! pass's replies and hands its effects to the [`Host`]. If the append
//! fails, nothing of the pass is answered (every waiting caller, deferred ones included, gets
//! [`Unavailable`], which handlers answer as COORDINATOR_NOT_AVAILABLE so clients retry) and
//! the shard is rebuilt from the log, so its state never runs ahead of what is durable.
//!
//! The order of a pass is `shoal_core::coordinator::Passes`, which the simulator drives too;
//! this module adds the queue, the timer, the append and the reload.
//!
//! Ownership: a shard holds the state of the partitions of its topic this node serves, replayed
//! under the epoch each is owned under, and records those epochs in
//! `NodeState::coordinator_loads` — requests for a partition are taken only once it is there
//! (`crate::leadership`: COORDINATOR_LOAD_IN_PROGRESS before). When the partitions served
//! change (a cluster moved one here or away: checked every [`TICK_MAX`]), the shard is
//! rebuilt over the new set; callers waiting in the old one get [`Unavailable`] and retry.
//!
//! Order: [`Runtime::submit`] queues an input before it returns, and a connection handles its
//! requests one at a time up to that point, so the inputs of one connection take effect in
//! the order they were sent even when their replies are awaited later (pipelined
//! OffsetCommits share passes, and so fsyncs, without being reordered).
//!
//! Must not: deliver a reply before the records of its pass are durable; apply an input out of
//! its queue order; keep serving from a state the log does not hold after a failed append.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use shoal_core::coordinator::{
    CoordinatorShard, Emitted, Framing, Passes, Queued, ShardRecord, TxnMarker,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use super::log_io::{Replayed, ToAppend};
use crate::node::NodeState;
use crate::participants::marker_from_control;

/// Inputs queued at most before callers wait (backpressure).
pub const QUEUE_INPUTS_MAX: usize = 10_000;
/// Inputs handled in one pass (one fsync) at most.
pub const PASS_INPUTS_MAX: usize = 1_000;
/// Longest sleep between timer checks.
const TICK_MAX: Duration = Duration::from_millis(500);

/// The coordinator failed to answer (not running, or the write of its pass failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// What a coordinator gives the runtime besides its shard: where its records live, how to
/// make a fresh shard, and what to do with its effects. Every method is given the node's
/// state ([`NodeState`]); a host that needs more (another coordinator) holds it itself.
pub trait Host<S: CoordinatorShard>: Send + Sync + 'static {
    /// The internal topic holding the shard's records.
    fn topic(&self) -> &'static str;

    /// A new, empty shard configured from the node's configuration (replay fills it).
    ///
    /// # Errors
    /// What the shard needs cannot be had (a coordinator epoch cannot be recorded).
    fn new_shard<'a>(
        &'a self,
        node: &'a NodeState,
    ) -> impl Future<Output = anyhow::Result<S>> + Send + 'a;

    /// Called after the replay, before [`CoordinatorShard::loaded`] (whose output follows
    /// what this adds to `out`): work that must be done before anything is served, on the
    /// broker's first load (`first`) or on a reload after a failed append.
    ///
    /// # Errors
    /// The coordinator must not serve (at the first load, the broker does not start).
    fn after_replay<'a>(
        &'a self,
        _node: &'a NodeState,
        _shard: &'a mut S,
        _first: bool,
        _out: &'a mut Emitted<S>,
    ) -> impl Future<Output = anyhow::Result<()>> + Send + 'a {
        std::future::ready(Ok(()))
    }

    /// Inputs fed at the start of every pass, before the `queued` ones: state the shard
    /// follows from elsewhere in the broker (the topics), or that it needs for the queued
    /// inputs (fresh producer ids). Their replies are not awaited.
    fn pass_inputs(&self, node: &NodeState, shard: &S, queued: &[&S::Input]) -> Vec<S::Input>;

    /// Work to do once a pass is durable.
    fn effects(&self, node: &Arc<NodeState>, effects: Vec<S::Effect>);
}

/// Who waits for an answer of the runtime.
enum Waiter<R> {
    Reply(oneshot::Sender<R>),
    Marker(oneshot::Sender<()>),
}

type Message<S> = Queued<S, Waiter<<S as CoordinatorShard>::Reply>>;

/// Handle to one coordinator's task.
pub struct Runtime<S: CoordinatorShard> {
    tx: Mutex<Option<mpsc::Sender<Message<S>>>>,
}

impl<S: CoordinatorShard> Default for Runtime<S> {
    fn default() -> Self {
        Self {
            tx: Mutex::new(None),
        }
    }
}

impl<S> Runtime<S>
where
    S: CoordinatorShard + Send + 'static,
    S::Input: Send,
    S::Reply: Send,
    S::Record: Send + Sync,
    S::Effect: Send,
{
    /// Replays the host's topic into a new shard and starts the task.
    ///
    /// # Errors
    /// The log cannot be read.
    pub async fn start<H: Host<S>>(&self, node: &Arc<NodeState>, host: H) -> anyhow::Result<()> {
        let loaded = load(node, &host, true).await?;
        info!(
            topic = host.topic(),
            records = loaded.replayed,
            partitions = loaded.served.len(),
            "coordinator loaded"
        );
        let (tx, rx) = mpsc::channel(QUEUE_INPUTS_MAX);
        *self.tx.lock().expect("coordinator runtime lock poisoned") = Some(tx);
        tokio::spawn(run(Arc::downgrade(node), host, loaded, rx));
        Ok(())
    }

    fn sender(&self) -> Result<mpsc::Sender<Message<S>>, Unavailable> {
        self.tx
            .lock()
            .expect("coordinator runtime lock poisoned")
            .clone()
            .ok_or(Unavailable)
    }

    /// Queues `input` (waiting for room if the queue is full) and returns a future of its
    /// reply. The input is in the queue when this returns: inputs submitted one after another
    /// are handled in that order, whenever their replies are awaited.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running; the future fails the same way when
    /// the pass holding the input could not be persisted.
    pub async fn submit(
        &self,
        input: S::Input,
    ) -> Result<impl Future<Output = Result<S::Reply, Unavailable>> + Send + 'static, Unavailable>
    {
        let (reply, wait) = oneshot::channel();
        self.sender()?
            .send(Queued::Input(input, Some(Waiter::Reply(reply))))
            .await
            .map_err(|_| Unavailable)?;
        Ok(async move { wait.await.map_err(|_| Unavailable) })
    }

    /// Sends one input and waits for its (possibly deferred) reply.
    ///
    /// # Errors
    /// [`Unavailable`] as [`Runtime::submit`].
    pub async fn call(&self, input: S::Input) -> Result<S::Reply, Unavailable> {
        self.submit(input).await?.await
    }

    /// Applies a transaction marker just appended to the shard's topic (see
    /// `crate::participants`). Waits until it is applied.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running (the marker is in the log, so the
    /// next load applies it).
    pub async fn apply_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.sender()?
            .send(Queued::Marker(marker, Some(Waiter::Marker(reply))))
            .await
            .map_err(|_| Unavailable)?;
        wait.await.map_err(|_| Unavailable)
    }

    /// [`Runtime::apply_marker`] without waiting: queued ahead of every input submitted after
    /// this returns.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or its queue is full.
    pub fn queue_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        self.sender()?
            .try_send(Queued::Marker(marker, None))
            .map_err(|_| Unavailable)
    }
}

/// A shard rebuilt from the partitions of its topic this node serves.
struct Loaded<S: CoordinatorShard> {
    shard: S,
    /// What the shard's `loaded` emitted (made durable before any input is taken).
    resumed: Emitted<S>,
    /// Records and markers replayed.
    replayed: usize,
    /// The partitions replayed and the epoch each was opened under.
    served: Vec<(i32, i32)>,
}

/// The partitions of `topic` this node serves now, with the epoch each was opened under.
fn served(node: &NodeState, topic: &str) -> Vec<(i32, i32)> {
    let Some(t) = node.topic(topic) else {
        return Vec::new();
    };
    t.partitions()
        .iter()
        .filter(|p| {
            node.ownership
                .serves(topic, p.index, p.leader_epoch)
                .is_ok()
        })
        .map(|p| (p.index, p.leader_epoch))
        .collect()
}

/// A fresh shard rebuilt from the partitions of the host's topic this node serves; records
/// their epochs as loaded.
async fn load<S: CoordinatorShard + Send, H: Host<S>>(
    node: &NodeState,
    host: &H,
    first: bool,
) -> anyhow::Result<Loaded<S>> {
    let mut shard = host.new_shard(node).await?;
    let mut count = 0;
    let topic = host.topic();
    let served = served(node, topic);
    let only: Vec<i32> = served.iter().map(|(index, _)| *index).collect();
    super::log_io::replay_topic(node, topic, &only, |item| match item {
        Replayed::Control {
            partition,
            header,
            records,
        } => {
            if let Some(marker) = marker_from_control(partition, header, records) {
                shard.landed(partition, header.base_offset(), None);
                shard.replay_marker(marker);
                count += 1;
            }
        }
        Replayed::Record {
            partition,
            record,
            framing,
        } => {
            let Some(key) = record.key.as_deref() else {
                return;
            };
            match S::Record::decode(key, record.value.as_deref()) {
                Ok(r) => {
                    let r = r.with_framing(framing);
                    shard.landed(partition, record.offset, Some(&r));
                    shard.replay(r);
                    count += 1;
                }
                Err(e) => warn!(
                    topic,
                    partition,
                    offset = record.offset,
                    error = %e,
                    "skipping undecodable coordinator record"
                ),
            }
        }
    })?;
    let mut resumed = Emitted::default();
    host.after_replay(node, &mut shard, first, &mut resumed)
        .await?;
    shard.loaded(node.now_ms(), &mut resumed);
    let mut loads = node
        .coordinator_loads
        .write()
        .expect("coordinator load lock poisoned");
    loads.retain(|(t, _), _| *t != topic);
    loads.extend(
        served
            .iter()
            .map(|(index, epoch)| ((topic, *index), *epoch)),
    );
    Ok(Loaded {
        shard,
        resumed,
        replayed: count,
        served,
    })
}

/// Rebuilds the shard from the log: every caller waiting in the old one fails. Returns what
/// the reload emitted and the partitions it serves, or None (logged) when it failed.
async fn reload<S: CoordinatorShard + Send, H: Host<S>>(
    node: &NodeState,
    host: &H,
    passes: &mut Passes<S, Waiter<S::Reply>>,
) -> Option<(Emitted<S>, Vec<(i32, i32)>)> {
    match load(node, host, false).await {
        Ok(loaded) => {
            passes.replace(loaded.shard);
            Some((loaded.resumed, loaded.served))
        }
        Err(e) => {
            error!(topic = host.topic(), error = %e, "coordinator reload failed");
            None
        }
    }
}

/// Appends `records` to `topic` as their framing says (per partition in order; consecutive
/// records of one framing share a batch) and fsyncs them. Returns where each landed.
async fn persist<R: ShardRecord>(
    node: &NodeState,
    topic: &str,
    records: &[R],
) -> Result<Vec<(i32, i64)>, String> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let partitions = super::log_io::partition_count(node, topic);
    let mut appends = Vec::with_capacity(records.len());
    for r in records {
        let framing = r.framing();
        let encoded = match framing {
            Framing::Marker { .. } => None,
            _ => Some(r.encode().map_err(|e| e.to_string())?),
        };
        appends.push(ToAppend {
            partition: r.partition(partitions),
            framing,
            encoded,
        });
    }
    super::log_io::append_pass(node, topic, appends).await
}

async fn run<S, H>(
    weak: Weak<NodeState>,
    host: H,
    first: Loaded<S>,
    mut rx: mpsc::Receiver<Message<S>>,
) where
    S: CoordinatorShard + Send,
    H: Host<S>,
{
    let mut passes: Passes<S, Waiter<S::Reply>> = Passes::new(first.shard);
    let mut loaded = Some(first.resumed);
    let mut serving = first.served;
    let mut checked = std::time::Instant::now();
    loop {
        let Some(node) = weak.upgrade() else {
            return;
        };
        // What a load emitted is made durable before any input is taken.
        if let Some(emitted) = loaded.take().filter(|l| !l.is_empty()) {
            let pending = passes.resume(emitted);
            if let Some((emitted, now)) = finish_pass(&node, &host, &mut passes, pending).await {
                (loaded, serving) = (Some(emitted), now);
            }
            continue;
        }
        // A partition moved here or away: rebuild over what is served now.
        if checked.elapsed() >= TICK_MAX {
            checked = std::time::Instant::now();
            let now = served(&node, host.topic());
            if now != serving {
                info!(topic = host.topic(), was = ?serving, now = ?now,
                    "partitions served changed; reloading the coordinator");
                let empty = passes.resume(Emitted::default());
                drop(passes.failed(empty));
                match reload(&node, &host, &mut passes).await {
                    Some((emitted, now)) => (loaded, serving) = (Some(emitted), now),
                    None => tokio::time::sleep(TICK_MAX).await,
                }
                continue;
            }
        }
        let sleep = passes
            .shard()
            .next_deadline()
            .map(|d| Duration::from_millis((d - node.now_ms()).max(0) as u64))
            .unwrap_or(TICK_MAX)
            .min(TICK_MAX);
        drop(node);
        let mut batch = Vec::new();
        tokio::select! {
            received = rx.recv() => {
                let Some(first) = received else { return };
                batch.push(first);
                while batch.len() < PASS_INPUTS_MAX {
                    match rx.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
            }
            _ = tokio::time::sleep(sleep) => {}
        }
        let Some(node) = weak.upgrade() else {
            return;
        };
        let fed = {
            let queued: Vec<&S::Input> = batch
                .iter()
                .filter_map(|q| match q {
                    Queued::Input(input, _) => Some(input),
                    Queued::Marker(..) => None,
                })
                .collect();
            host.pass_inputs(&node, passes.shard(), &queued)
        };
        let pending = passes.pass(node.now_ms(), fed, batch);
        if let Some((emitted, now)) = finish_pass(&node, &host, &mut passes, pending).await {
            (loaded, serving) = (Some(emitted), now);
        }
    }
}

/// Appends a pass's records; then delivers its replies and effects, or, if the append failed,
/// drops its waiters and rebuilds the shard, returning what the reload emitted and the
/// partitions it serves.
async fn finish_pass<S: CoordinatorShard + Send, H: Host<S>>(
    node: &Arc<NodeState>,
    host: &H,
    passes: &mut Passes<S, Waiter<S::Reply>>,
    pending: shoal_core::coordinator::Pending<S, Waiter<S::Reply>>,
) -> Option<(Emitted<S>, Vec<(i32, i32)>)> {
    let landed = match persist(node, host.topic(), &pending.records).await {
        Ok(landed) => landed,
        Err(e) => {
            error!(topic = host.topic(), error = %e,
                "coordinator write failed; reloading state from the log");
            // Every waiting caller fails (its sender drops), deferred ones too: their state
            // is being rebuilt from what is durable, which the pass's records are not.
            drop(passes.failed(pending));
            return reload(node, host, passes).await;
        }
    };
    for (record, (partition, offset)) in pending.records.iter().zip(landed) {
        passes.shard_mut().landed(partition, offset, Some(record));
    }
    let delivered = passes.durable(pending);
    for (waiter, reply) in delivered.replies {
        if let Waiter::Reply(tx) = waiter {
            let _ = tx.send(reply);
        }
    }
    for waiter in delivered.markers {
        if let Waiter::Marker(tx) = waiter {
            let _ = tx.send(());
        }
    }
    if !delivered.effects.is_empty() {
        host.effects(node, delivered.effects);
    }
    None
}
