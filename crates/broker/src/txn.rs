//! Driver of the transaction coordinator (`shoal_core::txn_coordinator`).
//!
//! One task owns the sans-IO machine, like the group coordinator's driver: it takes the queued
//! requests, feeds them and timer ticks to the machine, appends the emitted records to
//! `__transaction_state` (fsynced) and only then answers. Markers the machine asks for are
//! written by a separate task per transaction — a COMMIT or ABORT control batch appended to
//! every partition of the transaction, and on the partitions of a transactional participant
//! (`__consumer_offsets`, `__share_group_state`: `crate::participants`) also handed to it —
//! which reports back so the machine can complete the transaction.
//! A marker that cannot be written is retried with backoff; a partition that no longer exists
//! is skipped, as Kafka skips deleted partitions. At start the machine is rebuilt from the log
//! and transactions left in PrepareCommit/PrepareAbort get their markers again.
//!
//! Markers are not fsynced before the transaction completes (they become durable with the
//! partition's next group commit, which a background flush starts at once on partitions that
//! fsync every write, or with the partition's lazy flushes otherwise). Instead the
//! Complete record is preceded, in the same fsync, by a [`TxnRecord::Markers`] record listing
//! the id's markers not yet known durable with their offsets. Log recovery keeps a prefix of
//! each partition, so at the next start a marker was lost iff its partition now ends at or
//! before its offset; such a marker is written again (and fsynced) before the broker serves
//! anyone, if its producer still has the transaction open there. This takes one fsync of a
//! busy data partition out of every commit's critical path (the next transaction of the id
//! waits for its predecessor to complete).
//!
//! Must not: answer before the records a reply depends on are fsynced; let a Complete record
//! become durable without the Markers record that covers its markers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use shoal_core::txn_coordinator as tc;
use shoal_core::txn_coordinator::{
    partition_for, ListTransactionsRequest, ListTransactionsResponse, Output, PendingMarker,
    ProducerId, ReplyToken, TransactionDescription, TransactionResult, TxnConfig, TxnCoordinator,
    TxnRecord, TxnRequest, TxnResponse, WriteMarkers,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::broker::{now_ms, Broker};
use crate::internal::{EncodedRecord, Replayed};
use crate::participants::{Participant, TxnMarker};

/// Name of the internal topic holding transaction state.
pub const TRANSACTION_STATE: &str = "__transaction_state";
/// Requests queued at most before callers wait (backpressure).
const QUEUE_REQUESTS_MAX: usize = 10_000;
/// Requests handled in one pass (one fsync) at most.
const PASS_REQUESTS_MAX: usize = 1_000;
/// Longest sleep between timer checks.
const TICK_MAX: Duration = Duration::from_millis(500);
/// Longest a request is held for its transaction's markers; then the machine answers it
/// (CONCURRENT_TRANSACTIONS while the markers are still pending) and the client retries, as it
/// would with Kafka, instead of waiting on a marker that cannot be written into its timeout.
const HOLD_MAX: Duration = Duration::from_secs(1);
/// Requests of one transactional id held while its markers are written, at most; more get
/// CONCURRENT_TRANSACTIONS from the machine, as Kafka answers, and the client retries.
const HELD_PER_ID_MAX: usize = 16;
/// Markers one id's Markers record lists before their partitions are flushed whatever their
/// policy (with lazy flushing and no flush interval nothing else would, and the list, written
/// again with every completion of the id, would grow without bound).
const MARKERS_LISTED_MAX: usize = 64;
/// Backoff bounds between marker write attempts.
const MARKER_RETRY_MIN: Duration = Duration::from_millis(50);
const MARKER_RETRY_MAX: Duration = Duration::from_secs(2);

enum Command {
    Request(TxnRequest, oneshot::Sender<TxnResponse>),
    /// The transaction's markers are appended (not necessarily durable) at these offsets.
    MarkersWritten(WriteMarkers, Vec<PendingMarker>),
    Describe(Vec<String>, oneshot::Sender<Vec<TransactionDescription>>),
    List(
        ListTransactionsRequest,
        oneshot::Sender<ListTransactionsResponse>,
    ),
}

/// The coordinator failed to answer (not running, or its write failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// Handle to the transaction coordinator task.
#[derive(Default)]
pub struct TxnService {
    tx: Mutex<Option<mpsc::Sender<Command>>>,
}

/// File in the data directory holding the transaction coordinator's last epoch.
pub const COORDINATOR_EPOCH_FILE: &str = "transaction-coordinator-epoch";

/// The epoch of a new coordinator load: one more than the last, recorded durably first
/// (the first load of a directory starts at the current time in seconds).
///
/// Every load gets a higher epoch, which goes into its markers: a partition refuses markers
/// older than the last it saw (TRANSACTION_COORDINATOR_FENCED), so a marker write still in
/// flight from an earlier incarnation cannot land after the new one's.
///
/// # Errors
/// The file cannot be read, parsed or written.
pub fn next_coordinator_epoch(data_dir: &std::path::Path) -> anyhow::Result<i32> {
    let path = data_dir.join(COORDINATOR_EPOCH_FILE);
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| anyhow::anyhow!("{path:?} does not hold a coordinator epoch"))?,
        // Data directories from before this file used the load time in seconds as the epoch
        // (their markers carry it): start above any of those.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (now_ms() / 1000).clamp(0, i64::from(i32::MAX - 1)) as i32
        }
        Err(e) => anyhow::bail!("cannot read {path:?}: {e}"),
    };
    let next = last
        .checked_add(1)
        .ok_or_else(|| anyhow::anyhow!("coordinator epochs exhausted"))?;
    crate::producers::write_durably(&path, format!("{next}\n").as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write {path:?}: {e}"))?;
    Ok(next)
}

impl TxnService {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replays `__transaction_state` and starts the coordinator task (which re-sends the
    /// markers of transactions found prepared).
    ///
    /// # Errors
    /// The log cannot be read.
    pub fn start(&self, broker: &Arc<Broker>) -> anyhow::Result<()> {
        let config = txn_config(broker);
        let coordinator_epoch = next_coordinator_epoch(&broker.data_dir)?;
        let mut machine = TxnCoordinator::new(config, coordinator_epoch);
        let (replayed, pending) = replay(broker, &mut machine)?;
        let rewritten = recover_markers(broker, &pending, coordinator_epoch)?;
        let mut resumed = machine.loaded(now_ms());
        // The Markers lists are stale now (see `tc::markers::lost_markers`): the run loop
        // persists their clearing first, before it takes any request.
        let mut records = tc::markers::cleared_lists(pending.keys());
        records.append(&mut resumed.records);
        resumed.records = records;
        info!(
            records = replayed,
            transactions = machine.len(),
            markers_rewritten = rewritten,
            "transaction coordinator loaded"
        );
        let (tx, rx) = mpsc::channel(QUEUE_REQUESTS_MAX);
        *self.tx.lock().expect("txn service lock poisoned") = Some(tx.clone());
        tokio::spawn(run(Arc::downgrade(broker), machine, rx, tx, resumed));
        Ok(())
    }

    fn sender(&self) -> Result<mpsc::Sender<Command>, Unavailable> {
        self.tx
            .lock()
            .expect("txn service lock poisoned")
            .clone()
            .ok_or(Unavailable)
    }

    /// Sends one request and waits for its (possibly deferred) reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call(&self, request: TxnRequest) -> Result<TxnResponse, Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.sender()?
            .send(Command::Request(request, reply))
            .await
            .map_err(|_| Unavailable)?;
        wait.await.map_err(|_| Unavailable)
    }

    /// DescribeTransactions.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn describe(
        &self,
        ids: Vec<String>,
    ) -> Result<Vec<TransactionDescription>, Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.sender()?
            .send(Command::Describe(ids, reply))
            .await
            .map_err(|_| Unavailable)?;
        wait.await.map_err(|_| Unavailable)
    }

    /// ListTransactions.
    ///
    /// # Errors
    /// [`Unavailable`].
    pub async fn list(
        &self,
        request: ListTransactionsRequest,
    ) -> Result<ListTransactionsResponse, Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.sender()?
            .send(Command::List(request, reply))
            .await
            .map_err(|_| Unavailable)?;
        wait.await.map_err(|_| Unavailable)
    }
}

fn txn_config(broker: &Broker) -> TxnConfig {
    let c = &broker.config;
    TxnConfig {
        transaction_max_timeout_ms: c.long("transaction.max.timeout.ms") as i32,
        transactional_id_expiration_ms: c.long("transactional.id.expiration.ms"),
        ..TxnConfig::default()
    }
}

/// Markers not known durable, by transactional id (the last Markers record of each).
type PendingMarkers = HashMap<String, Vec<PendingMarker>>;

/// Replays every record of `__transaction_state` into `machine`; returns how many, and the
/// markers the last Markers record of each id lists.
fn replay(
    broker: &Broker,
    machine: &mut TxnCoordinator,
) -> anyhow::Result<(usize, PendingMarkers)> {
    let mut count = 0;
    let mut pending = PendingMarkers::new();
    crate::internal::replay_topic(broker, TRANSACTION_STATE, |item| {
        let Replayed::Record { record, .. } = item else {
            return;
        };
        let Some(key) = record.key.as_deref() else {
            return;
        };
        match TxnRecord::decode(key, record.value.as_deref()) {
            Ok(TxnRecord::Markers {
                transactional_id,
                markers,
            }) => {
                count += 1;
                if markers.is_empty() {
                    pending.remove(&transactional_id);
                } else {
                    pending.insert(transactional_id, markers);
                }
            }
            Ok(r) => {
                machine.replay(&r);
                count += 1;
            }
            Err(e) => {
                warn!(offset = record.offset, error = %e, "skipping undecodable transaction record")
            }
        }
    })?;
    Ok((count, pending))
}

/// Writes again, and fsyncs, every listed marker a crash lost ([`tc::markers::lost_markers`]:
/// it is no longer at its offset and its producer still has a transaction open there; on a
/// participant's partition, always, and the participant is then handed the marker), then
/// fsyncs every listed partition. Runs before the broker serves requests, so nothing can have
/// been appended since recovery. Returns how many markers were written.
///
/// # Errors
/// A partition's producer state cannot be loaded, or a marker cannot be written or fsynced:
/// the transaction would stay open there, so the broker must not start.
fn recover_markers(
    broker: &Arc<Broker>,
    pending: &PendingMarkers,
    coordinator_epoch: i32,
) -> anyhow::Result<usize> {
    let mut written = 0;
    // Every listed marker is judged before any is written again (a rewrite appends where
    // another lost marker was; see `tc::markers::lost_markers`).
    let lost = tc::markers::lost_markers(
        pending.values().flatten(),
        |m| {
            let tp = &m.partition;
            let Ok(partition) = crate::markers::partition(broker, &tp.topic, tp.partition) else {
                return Ok(None);
            };
            let log = partition.lock();
            let at = match log.iter_batches(m.offset).next() {
                Some(batch) => Some(batch?.header),
                None => None,
            };
            Ok::<_, anyhow::Error>(Some(at.is_some_and(|h| {
                h.base_offset() == m.offset
                    && h.is_control()
                    && h.producer_id() == m.producer_id.0
                    && h.producer_epoch() == m.producer_epoch.0
            })))
        },
        |tp| Participant::of(&tp.topic).is_some(),
        |m| {
            let tp = &m.partition;
            let Ok(partition) = crate::markers::partition(broker, &tp.topic, tp.partition) else {
                return Ok(false);
            };
            let mut log = partition.lock();
            let config = crate::producers::state_config(&broker.config);
            let mut producers = partition.producers(&mut log, config, now_ms())?;
            producers.sync_with(&mut log)?;
            let open = producers
                .state()
                .ongoing_txns()
                .any(|(_, pid)| pid.0 == m.producer_id.0);
            Ok::<bool, anyhow::Error>(open)
        },
    )?;
    for m in lost {
        let tp = &m.partition;
        let Ok(partition) = crate::markers::partition(broker, &tp.topic, tp.partition) else {
            continue;
        };
        let commit = m.result.is_commit();
        crate::markers::write_marker(
            broker,
            &partition,
            m.producer_id.0,
            m.producer_epoch.0,
            commit,
            coordinator_epoch,
        )
        .map_err(|code| {
            anyhow::anyhow!(
                "cannot write the lost marker of producer {} on {}-{}: error {}",
                m.producer_id.0,
                tp.topic,
                tp.partition,
                code.0
            )
        })?;
        partition.lock().sync()?;
        warn!(topic = %tp.topic, partition = tp.partition, producer_id = m.producer_id.0, commit, "transaction marker lost in a crash written again");
        written += 1;
        if let Some(participant) = Participant::of(&tp.topic) {
            // The participant loaded (replayed its topic) before this marker existed.
            participant.hand_at_start(
                broker,
                TxnMarker {
                    partition: tp.partition,
                    producer_id: m.producer_id.0,
                    producer_epoch: m.producer_epoch.0,
                    commit,
                },
            );
        }
    }
    // Every listed partition durable, so that the lists can be cleared (the caller writes
    // `tc::markers::cleared_lists` before serving).
    for m in pending.values().flatten() {
        if let Ok(partition) =
            crate::markers::partition(broker, &m.partition.topic, m.partition.partition)
        {
            partition.lock().sync()?;
        }
    }
    Ok(written)
}

/// Appends `records` (one batch per `__transaction_state` partition) and fsyncs them.
async fn persist(broker: &Arc<Broker>, records: &[TxnRecord]) -> Result<(), String> {
    let partitions = crate::internal::partition_count(broker, TRANSACTION_STATE);
    let mut by_partition: BTreeMap<u32, Vec<EncodedRecord>> = BTreeMap::new();
    for r in records {
        by_partition
            .entry(partition_for(r.transactional_id(), partitions))
            .or_default()
            .push(r.encode());
    }
    crate::internal::append_and_flush(broker, TRANSACTION_STATE, by_partition).await
}

/// Appends one transaction's markers to every partition, retrying the ones that fail until
/// each is written or its partition is gone, hands those on a participant's partition to the
/// participant, starts a background flush of the partitions, and reports completion with the
/// markers' offsets (see the module docs for why it does not wait for the fsync).
async fn write_markers(broker: Weak<Broker>, markers: WriteMarkers, done: mpsc::Sender<Command>) {
    let commit = markers.result == TransactionResult::Commit;
    let mut remaining = markers.partitions.clone();
    let mut appended = Vec::with_capacity(remaining.len());
    let mut to_flush = Vec::with_capacity(remaining.len());
    let mut backoff = MARKER_RETRY_MIN;
    while !remaining.is_empty() {
        let Some(broker) = broker.upgrade() else {
            return;
        };
        let mut failed = Vec::new();
        for tp in remaining {
            let partition = match crate::markers::partition(&broker, &tp.topic, tp.partition) {
                Ok(p) => p,
                Err(_) => {
                    warn!(topic = %tp.topic, partition = tp.partition, "transaction marker skipped: partition no longer exists");
                    continue;
                }
            };
            match crate::markers::write_marker(
                &broker,
                &partition,
                markers.producer_id.0,
                markers.producer_epoch.0,
                commit,
                markers.coordinator_epoch,
            ) {
                Ok(offset) => {
                    crate::participants::marker_appended(
                        &broker,
                        &tp.topic,
                        TxnMarker {
                            partition: tp.partition,
                            producer_id: markers.producer_id.0,
                            producer_epoch: markers.producer_epoch.0,
                            commit,
                        },
                    )
                    .await;
                    to_flush.push(partition);
                    appended.push(PendingMarker {
                        partition: tp,
                        offset,
                        producer_id: markers.producer_id,
                        producer_epoch: markers.producer_epoch,
                        result: markers.result,
                    });
                }
                Err(code) => {
                    warn!(topic = %tp.topic, partition = tp.partition, ?code, "transaction marker failed; retrying");
                    failed.push(tp);
                }
            }
        }
        remaining = failed;
        if !remaining.is_empty() {
            drop(broker);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MARKER_RETRY_MAX);
        }
    }
    if let Some(broker) = broker.upgrade() {
        // Under the partition's own policy: at once where every write is fsynced, else with
        // its lazy flushes (the Markers record covers them meanwhile).
        to_flush.retain(|p| flushes_every_write(&broker, &p.topic));
        flush_in_background(&broker, to_flush);
    }
    let _ = done.send(Command::MarkersWritten(markers, appended)).await;
}

/// Starts fsyncing `partitions` without waiting. A failure is only logged: the markers on them
/// stay listed in their ids' Markers records, and a restart writes them again if lost.
fn flush_in_background(broker: &Broker, partitions: Vec<Arc<crate::topics::Partition>>) {
    if partitions.is_empty() {
        return;
    }
    let flusher = broker.flusher.clone();
    tokio::spawn(async move {
        if let Err(e) = flusher.flush(partitions).await {
            warn!(error = %e, "transaction markers not flushed");
        }
    });
}

/// Whether `topic` fsyncs every write before acknowledging it (`flush.messages` = 1).
fn flushes_every_write(broker: &Broker, topic: &str) -> bool {
    let Some(t) = broker.topic(topic) else {
        return false;
    };
    crate::topics::effective(&broker.current_config(), &t.overrides(), "flush.messages") == "1"
}

/// The Markers record to write with a completion of `id`: its earlier markers still not
/// durable plus `appended`; None if there is nothing to list and nothing listed before.
/// Updates `unflushed`.
fn markers_record(
    broker: &Broker,
    unflushed: &mut HashMap<String, Vec<PendingMarker>>,
    id: &str,
    appended: Vec<PendingMarker>,
) -> Option<TxnRecord> {
    let before = unflushed.remove(id).unwrap_or_default();
    let (record, still) = tc::markers::markers_record(id, before, appended, |tp| {
        crate::markers::partition(broker, &tp.topic, tp.partition)
            .ok()
            .map(|p| p.lock().flushed_offset())
    });
    record.as_ref()?;
    if still.len() > MARKERS_LISTED_MAX {
        let mut partitions: Vec<Arc<crate::topics::Partition>> = Vec::new();
        for m in &still {
            if let Ok(p) =
                crate::markers::partition(broker, &m.partition.topic, m.partition.partition)
            {
                if !partitions.iter().any(|q| Arc::ptr_eq(q, &p)) {
                    partitions.push(p);
                }
            }
        }
        flush_in_background(broker, partitions);
    }
    if !still.is_empty() {
        unflushed.insert(id.to_string(), still);
    }
    record
}

async fn run(
    broker: Weak<Broker>,
    mut machine: TxnCoordinator,
    mut rx: mpsc::Receiver<Command>,
    tx: mpsc::Sender<Command>,
    resumed: Output,
) {
    let mut next_token: u64 = 0;
    let mut waiting: HashMap<ReplyToken, oneshot::Sender<TxnResponse>> = HashMap::new();
    // Transactions whose markers are being written, and requests of theirs held until then:
    // the machine would answer them CONCURRENT_TRANSACTIONS and the client would retry after a
    // backoff (librdkafka: 20 ms), which dominates the commit latency of back-to-back
    // transactions. Holding them changes no outcome; it only answers when the answer is known.
    let mut completing: HashSet<String> = HashSet::new();
    let mut held: HashMap<String, Vec<Held>> = HashMap::new();
    // Per id, the markers not yet known durable (what its last Markers record lists).
    let mut unflushed: HashMap<String, Vec<PendingMarker>> = HashMap::new();
    let mut pending = Some(resumed);
    loop {
        let mut output = pending.take().unwrap_or_default();
        if output.records.is_empty() && output.replies.is_empty() && output.markers.is_empty() {
            let first_hold_ends = held
                .values()
                .filter_map(|requests| requests.first())
                .map(|h| (h.since + HOLD_MAX).saturating_duration_since(Instant::now()))
                .min();
            let sleep = machine
                .next_deadline()
                .map(|d| Duration::from_millis((d - now_ms()).max(0) as u64))
                .unwrap_or(TICK_MAX)
                .min(TICK_MAX)
                .min(first_hold_ends.unwrap_or(TICK_MAX));
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
                    for command in batch {
                        match command {
                            Command::Request(request, reply) => {
                                let id = request_txn_id(&request);
                                if completing.contains(id)
                                    && held.get(id).map_or(0, Vec::len) < HELD_PER_ID_MAX
                                {
                                    held.entry(id.to_string()).or_default().push(Held {
                                        request,
                                        reply,
                                        since: Instant::now(),
                                    });
                                    continue;
                                }
                                let Some(b) = broker.upgrade() else { return };
                                let token = ReplyToken(next_token);
                                next_token += 1;
                                waiting.insert(token, reply);
                                output.extend(handle(&mut machine, &b, token, request));
                            }
                            Command::MarkersWritten(markers, appended) => {
                                let Some(b) = broker.upgrade() else { return };
                                // Before the Complete record, in the same fsync.
                                output.records.extend(markers_record(
                                    &b,
                                    &mut unflushed,
                                    &markers.transactional_id,
                                    appended,
                                ));
                                output.extend(machine.markers_written(now_ms(), &markers));
                                completing.remove(&markers.transactional_id);
                                for Held { request, reply, .. } in held.remove(&markers.transactional_id).unwrap_or_default() {
                                    let token = ReplyToken(next_token);
                                    next_token += 1;
                                    waiting.insert(token, reply);
                                    output.extend(handle(&mut machine, &b, token, request));
                                }
                            }
                            Command::Describe(ids, reply) => {
                                let _ = reply.send(machine.describe(&ids));
                            }
                            Command::List(request, reply) => {
                                let _ = reply.send(machine.list(now_ms(), &request));
                            }
                        }
                    }
                }
                _ = tokio::time::sleep(sleep) => {}
            }
            let Some(b) = broker.upgrade() else { return };
            for Held { request, reply, .. } in take_expired(&mut held) {
                let token = ReplyToken(next_token);
                next_token += 1;
                waiting.insert(token, reply);
                output.extend(handle(&mut machine, &b, token, request));
            }
            output.extend(machine.tick(now_ms()));
        }
        let Some(b) = broker.upgrade() else { return };
        if let Err(e) = persist(&b, &output.records).await {
            error!(error = %e, "transaction coordinator write failed; reloading state from the log");
            for (token, _) in output.replies {
                waiting.remove(&token);
            }
            waiting.clear();
            held.clear();
            completing.clear();
            let config = machine.config().clone();
            let epoch = next_coordinator_epoch(&b.data_dir).unwrap_or_else(|e| {
                error!(error = %e, "cannot record the coordinator epoch");
                machine.coordinator_epoch().saturating_add(1)
            });
            machine = TxnCoordinator::new(config, epoch);
            // `unflushed` stays: its markers may still be lost, whatever the log now says.
            if let Err(e) = replay(&b, &mut machine) {
                error!(error = %e, "transaction coordinator reload failed");
            }
            pending = Some(machine.loaded(now_ms()));
            continue;
        }
        for (token, response) in output.replies {
            if let Some(reply) = waiting.remove(&token) {
                let _ = reply.send(response);
            }
        }
        for markers in output.markers {
            completing.insert(markers.transactional_id.clone());
            tokio::spawn(write_markers(broker.clone(), markers, tx.clone()));
        }
    }
}

/// A request held until its transaction completes (see `run`).
struct Held {
    request: TxnRequest,
    reply: oneshot::Sender<TxnResponse>,
    since: Instant,
}

/// Removes and returns the held requests older than [`HOLD_MAX`], oldest first per id.
fn take_expired(held: &mut HashMap<String, Vec<Held>>) -> Vec<Held> {
    let now = Instant::now();
    let mut expired = Vec::new();
    held.retain(|_, requests| {
        let n = requests
            .iter()
            .take_while(|h| now.duration_since(h.since) >= HOLD_MAX)
            .count();
        expired.extend(requests.drain(..n));
        !requests.is_empty()
    });
    expired
}

/// Feeds one request to the machine, with a fresh producer id when it may need one.
fn handle(
    machine: &mut TxnCoordinator,
    broker: &Broker,
    token: ReplyToken,
    mut request: TxnRequest,
) -> Output {
    if machine.needs_fresh_producer_id(&request) {
        match broker.producer_ids.allocate() {
            Ok(id) => set_fresh_id(&mut request, ProducerId(id)),
            Err(e) => error!(error = %e, "cannot allocate a producer id"),
        }
    }
    machine.handle(now_ms(), token, request)
}

fn request_txn_id(request: &TxnRequest) -> &str {
    match request {
        TxnRequest::InitProducerId(r) => &r.transactional_id,
        TxnRequest::AddPartitions(r) => &r.transactional_id,
        TxnRequest::AddOffsets(r) => &r.transactional_id,
        TxnRequest::AddPartitionsImplicit(r) => &r.transactional_id,
        TxnRequest::EndTxn(r) => &r.transactional_id,
        _ => "",
    }
}

fn set_fresh_id(request: &mut TxnRequest, id: ProducerId) {
    match request {
        TxnRequest::InitProducerId(r) => r.fresh_producer_id = Some(id),
        TxnRequest::EndTxn(r) => r.fresh_producer_id = Some(id),
        _ => {}
    }
}
