//! The sender task: the one loop that turns the accumulator's ready batches into Produce
//! requests and the transaction manager's due requests into coordinator requests.
//!
//! Each round: one due coordinator request (InitProducerId, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn) is sent and answered; then expired batches fail, ready
//! partitions are drained (a first send takes its base sequence from the transaction
//! manager), encoded as record batches with `compression.type`, grouped per leader into one
//! ProduceRequest each and written; the loop goes on while the answers are awaited, so up to
//! `max.in.flight.requests.per.connection` Produce requests are in flight per broker (and,
//! the accumulator's rule, as many batches per partition). A task per request awaits its
//! answer and applies it to the accumulator, the transaction manager and the delivery
//! futures.
//!
//! Order: a broker's requests are written one after the other on one pipelined connection,
//! and Kafka brokers answer a connection's requests in order; the answers are applied in
//! that same order too (each task waits for the one before it on that broker), so a
//! partition's delivery futures complete in the order its records were sent. With
//! idempotence a retried batch keeps its sequence: the batches behind a failed one come back
//! OUT_OF_ORDER_SEQUENCE_NUMBER and are resent after it, and the broker recognises one it
//! already has.
//!
//! Versions: without transaction version 2 a transactional producer sends Produce at most
//! v11 and EndTxn at most v4 (newer versions mean the KIP-890 semantics: partitions added
//! implicitly, the epoch bumped at every EndTxn).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProduceRequest, ProduceResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::init_producer_id::{InitProducerIdV6, TWO_PHASE_COMMIT_VERSION};
use shoal_protocol::{ApiKey, ErrorCode};

use super::accumulator::{BatchId, SendResult};
use super::batch::{self, BatchHeader};
use super::config::Acks;
use super::shared::{Shared, State};
use super::transaction::{
    CoordinatorRequest, CoordinatorResponse, Next, ProducerIdEpoch, TopicPartition, TwoPhaseCommit,
    TxnErrorKind, TxnState,
};
use crate::broker::PendingResponse;
use crate::cluster::CoordinatorType;
use crate::error::Error;

/// Produce v12 is the first with KIP-890's implicit partition adds.
const PRODUCE_V1_MAX: i16 = 11;
/// EndTxn v5 is the first answering the bumped epoch (transaction version 2).
const END_TXN_V1_MAX: i16 = 4;
/// AddPartitionsToTxn v4+ is the brokers' batched form; clients send v3 at most.
const ADD_PARTITIONS_CLIENT_MAX: i16 = 3;

/// Runs until the producer closes and nothing is left to send.
pub(super) async fn run(shared: Arc<Shared>) {
    let mut pipelines = Pipelines::default();
    loop {
        let coordinator_busy = coordinator_step(&shared).await;
        let next_ms = produce_round(&shared, &mut pipelines).await;
        if shared.closing.load(Ordering::Acquire) {
            let mut st = shared.lock();
            // A transaction's due request (EndTxn) is waited for; an idempotent producer's
            // epoch bump is not needed once nothing is left to send.
            let due = st.txn.is_transactional() && st.txn.poll_request().is_some();
            if st.acc.incomplete() == 0 && !due {
                st.stopped = true;
                drop(st);
                shared.progress.notify_waiters();
                return;
            }
        }
        if coordinator_busy {
            continue;
        }
        let wait = match next_ms {
            Some(at) => Duration::from_millis(at.saturating_sub(shared.now_ms()).max(0) as u64),
            None => Duration::from_secs(1),
        };
        if !wait.is_zero() {
            let _ = tokio::time::timeout(wait, shared.wake.notified()).await;
        }
    }
}

/// Sends the transaction manager's due request, if any, and applies its answer. Returns
/// whether one was sent.
async fn coordinator_step(shared: &Shared) -> bool {
    let Some(request) = shared.lock().txn.poll_request() else {
        return false;
    };
    let backoff = shared.config.client().retry_backoff();
    let v2 = shared.lock().txn.transaction_v2();
    let answer = send_coordinator(shared, &request, v2).await;
    let response = match answer {
        Ok(r) => r,
        // Not answered: the same request is handed out again.
        Err(e) if e.is_retriable() => {
            tokio::time::sleep(backoff).await;
            return true;
        }
        Err(e) => error_response(&request, e.code()),
    };
    let next = {
        let mut st = shared.lock();
        let before = st.txn.producer();
        let next = st.txn.on_response(response);
        if st.txn.producer() != before {
            st.acc.reset_sequences();
        }
        next
    };
    shared.progress.notify_waiters();
    if let Next::Retry {
        find_coordinator,
        refresh_metadata,
    } = next
    {
        if find_coordinator {
            if let Some(tid) = shared.config.transactional_id() {
                shared
                    .cluster
                    .invalidate_coordinator(CoordinatorType::Transaction, tid);
            }
        }
        if refresh_metadata {
            shared.cluster.invalidate_metadata();
        }
        tokio::time::sleep(backoff).await;
    }
    true
}

fn error_response(request: &CoordinatorRequest, code: ErrorCode) -> CoordinatorResponse {
    match request {
        CoordinatorRequest::InitProducerId { .. } => CoordinatorResponse::InitProducerId(Err(code)),
        CoordinatorRequest::AddPartitionsToTxn { partitions, .. } => {
            CoordinatorResponse::AddPartitionsToTxn(
                partitions.iter().map(|tp| (tp.clone(), code)).collect(),
            )
        }
        CoordinatorRequest::AddOffsetsToTxn { .. } => CoordinatorResponse::AddOffsetsToTxn(code),
        CoordinatorRequest::EndTxn { .. } => CoordinatorResponse::EndTxn(Err(code)),
    }
}

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_owned()))
}

async fn send_coordinator(
    shared: &Shared,
    request: &CoordinatorRequest,
    v2: bool,
) -> Result<CoordinatorResponse, Error> {
    let cluster = &shared.cluster;
    let txn = CoordinatorType::Transaction;
    match request {
        CoordinatorRequest::InitProducerId {
            transactional_id,
            transaction_timeout_ms,
            two_phase_commit,
            producer,
        } => {
            let p = producer.unwrap_or(ProducerIdEpoch { id: -1, epoch: -1 });
            let r = InitProducerIdV6(
                InitProducerIdRequest::default()
                    .with_transactional_id(transactional_id.as_deref().map(tid))
                    .with_transaction_timeout_ms(*transaction_timeout_ms)
                    .with_producer_id(ProducerId(p.id))
                    .with_producer_epoch(p.epoch)
                    .with_enable_2_pc(two_phase_commit.is_enabled())
                    .with_keep_prepared_txn(*two_phase_commit == TwoPhaseCommit::KeepPrepared),
            );
            let answer = match transactional_id {
                Some(id) if two_phase_commit.is_enabled() => {
                    // Below v6 the flags would be dropped silently and the transaction would
                    // time out: refuse instead.
                    let versions = cluster.coordinator_versions(txn, id).await?;
                    if versions.version(ApiKey::InitProducerId)? < TWO_PHASE_COMMIT_VERSION {
                        return Ok(CoordinatorResponse::InitProducerId(Err(
                            ErrorCode::UNSUPPORTED_VERSION,
                        )));
                    }
                    cluster.send_to_coordinator(txn, id, &r).await?
                }
                Some(id) => cluster.send_to_coordinator(txn, id, &r).await?,
                // An idempotent producer's id comes from any broker.
                None => cluster.send_any(&r).await?,
            };
            let ongoing = ProducerIdEpoch {
                id: answer.ongoing_txn_producer_id.0,
                epoch: answer.ongoing_txn_producer_epoch,
            };
            let producer = ProducerIdEpoch {
                id: answer.producer_id.0,
                epoch: answer.producer_epoch,
            };
            Ok(match ErrorCode(answer.error_code) {
                c if c.is_ok() && ongoing.id >= 0 => {
                    CoordinatorResponse::InitProducerIdKept { producer, ongoing }
                }
                c if c.is_ok() => CoordinatorResponse::InitProducerId(Ok(producer)),
                c => CoordinatorResponse::InitProducerId(Err(c)),
            })
        }
        CoordinatorRequest::AddPartitionsToTxn {
            transactional_id,
            producer,
            partitions,
        } => {
            let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
            for tp in partitions {
                match topics.iter_mut().find(|t| t.name.0.as_str() == tp.topic) {
                    Some(t) => t.partitions.push(tp.partition),
                    None => topics.push(
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                            .with_partitions(vec![tp.partition]),
                    ),
                }
            }
            let r = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid(transactional_id))
                .with_v3_and_below_producer_id(ProducerId(producer.id))
                .with_v3_and_below_producer_epoch(producer.epoch)
                .with_v3_and_below_topics(topics);
            let answer = cluster
                .send_to_coordinator_at_most(
                    txn,
                    transactional_id,
                    Some(ADD_PARTITIONS_CLIENT_MAX),
                    &r,
                )
                .await?;
            let mut results = Vec::new();
            for t in &answer.results_by_topic_v3_and_below {
                for p in &t.results_by_partition {
                    results.push((
                        TopicPartition::new(t.name.0.to_string(), p.partition_index),
                        ErrorCode(p.partition_error_code),
                    ));
                }
            }
            Ok(CoordinatorResponse::AddPartitionsToTxn(results))
        }
        CoordinatorRequest::AddOffsetsToTxn {
            transactional_id,
            producer,
            group_id,
        } => {
            let r = AddOffsetsToTxnRequest::default()
                .with_transactional_id(tid(transactional_id))
                .with_producer_id(ProducerId(producer.id))
                .with_producer_epoch(producer.epoch)
                .with_group_id(GroupId(StrBytes::from_string(group_id.clone())));
            let answer = cluster
                .send_to_coordinator(txn, transactional_id, &r)
                .await?;
            Ok(CoordinatorResponse::AddOffsetsToTxn(ErrorCode(
                answer.error_code,
            )))
        }
        CoordinatorRequest::EndTxn {
            transactional_id,
            producer,
            commit,
        } => {
            let r = EndTxnRequest::default()
                .with_transactional_id(tid(transactional_id))
                .with_producer_id(ProducerId(producer.id))
                .with_producer_epoch(producer.epoch)
                .with_committed(*commit);
            let version_max = (!v2).then_some(END_TXN_V1_MAX);
            let answer = cluster
                .send_to_coordinator_at_most(txn, transactional_id, version_max, &r)
                .await?;
            Ok(CoordinatorResponse::EndTxn(
                match ErrorCode(answer.error_code) {
                    c if c.is_ok() => Ok(v2.then_some(ProducerIdEpoch {
                        id: answer.producer_id.0,
                        epoch: answer.producer_epoch,
                    })),
                    c => Err(c),
                },
            ))
        }
    }
}

/// A drained batch on its way to a leader.
struct Outgoing {
    tp: TopicPartition,
    batch: BatchId,
    bytes: Bytes,
}

/// The Produce requests in flight to each broker.
#[derive(Default)]
struct Pipelines {
    leaders: HashMap<i32, Pipeline>,
}

#[derive(Default)]
struct Pipeline {
    /// Requests written and not yet applied (the tasks decrement it).
    in_flight: Arc<AtomicUsize>,
    /// Fires (or drops) when the last request's answer has been applied.
    last_applied: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// One request counted in its pipeline's `in_flight` until dropped (a panicking task too).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: &Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::AcqRel);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pipelines {
    fn is_full(&self, leader: i32, max_in_flight: usize) -> bool {
        self.leaders
            .get(&leader)
            .is_some_and(|p| p.in_flight.load(Ordering::Acquire) >= max_in_flight)
    }
}

/// One round of produce requests. Returns when the next batch may become ready (ms).
async fn produce_round(shared: &Arc<Shared>, pipelines: &mut Pipelines) -> Option<i64> {
    let now = shared.now_ms();
    let metadata = shared.cluster.metadata();
    let mut per_leader: HashMap<i32, Vec<Outgoing>> = HashMap::new();
    let mut leaderless: Vec<String> = Vec::new();
    let next = {
        let mut guard = shared.lock();
        let st = &mut *guard;
        for c in st.acc.expire(now) {
            st.finish(c);
        }
        if matches!(
            st.txn.state(),
            TxnState::FatalError | TxnState::AbortableError
        ) {
            // Nothing more of this transaction (or, fatal, of this producer) can be
            // written: fail what waits at once rather than at its delivery timeout, as the
            // Java client's sender aborts undrained batches.
            let code = failure_code(st);
            for c in st.acc.abort_waiting(code) {
                st.finish(c);
            }
        }
        let (ready, next) = st.acc.ready(now);
        let max_in_flight = shared.config.accumulator().max_in_flight.max(1);
        for tp in ready {
            let Some(leader) = metadata.leader(&tp.topic, tp.partition) else {
                if !leaderless.contains(&tp.topic) {
                    leaderless.push(tp.topic.clone());
                }
                continue;
            };
            if pipelines.is_full(leader, max_in_flight) {
                // An answer frees a place and wakes the loop.
                continue;
            }
            if st.txn.is_transactional() && !st.txn.can_send_to(&tp) {
                // Version 1: waiting for AddPartitionsToTxn.
                continue;
            }
            match drain_and_encode(shared, st, &tp, now) {
                Some(Ok(out)) => per_leader.entry(leader).or_default().push(out),
                Some(Err(batch)) => {
                    // A batch that does not encode (a codec failing) can never be sent:
                    // its records fail rather than block the partition.
                    let failed = st.acc.complete(
                        &tp,
                        batch,
                        SendResult::Err(ErrorCode::CORRUPT_MESSAGE),
                        false,
                        now,
                    );
                    if let Some(c) = failed {
                        st.finish(c);
                    }
                }
                None => {}
            }
        }
        next
    };
    shared.progress.notify_waiters();
    if !leaderless.is_empty() {
        // An election under way: the partitions wait (their batches age towards
        // delivery.timeout.ms) while metadata is updated in the background; the loop does not
        // wait for it, and send() goes on using the cache for other partitions.
        shared.cluster.request_metadata_update();
    }
    if per_leader.is_empty() {
        let backoff = shared.config.client().retry_backoff().as_millis() as i64;
        return if leaderless.is_empty() {
            next
        } else {
            Some(now + backoff)
        };
    }
    send_all(shared, pipelines, per_leader).await;
    Some(shared.now_ms())
}

/// Drains `tp`'s head batch and encodes it. `Some(Err)` when it does not encode.
fn drain_and_encode(
    shared: &Shared,
    st: &mut State,
    tp: &TopicPartition,
    now: i64,
) -> Option<Result<Outgoing, BatchId>> {
    let idempotent = shared.config.idempotence();
    let producer = st.txn.producer();
    if idempotent && !st.txn.is_transactional() && st.txn.state() != TxnState::Ready {
        // An epoch bump is under way: the batch waits for the new epoch's sequences.
        return None;
    }
    let State {
        acc, txn, batches, ..
    } = st;
    let mut sequence = |records: usize| txn.next_sequence(tp, records as i32);
    let drained = if idempotent && producer.is_some() {
        acc.drain(tp, now, Some(&mut sequence))?
    } else {
        acc.drain(tp, now, None)?
    };
    let Some(batch) = batches.get(&drained.batch) else {
        return Some(Err(drained.batch));
    };
    let (producer_id, producer_epoch) = match producer {
        Some(p) if idempotent => (p.id, p.epoch),
        _ => (-1, -1),
    };
    let header = BatchHeader {
        producer_id,
        producer_epoch,
        base_sequence: drained.base_sequence.unwrap_or(-1),
        transactional: st.txn.is_transactional(),
    };
    Some(
        match batch::encode(&batch.records, header, shared.config.compression()) {
            Ok(bytes) => Ok(Outgoing {
                tp: tp.clone(),
                batch: drained.batch,
                bytes,
            }),
            Err(_) => Err(drained.batch),
        },
    )
}

/// Writes one ProduceRequest per leader and leaves a task per request to await and apply
/// its answer.
async fn send_all(
    shared: &Arc<Shared>,
    pipelines: &mut Pipelines,
    per_leader: HashMap<i32, Vec<Outgoing>>,
) {
    let acks = shared.config.acks();
    let transactional_id = shared.config.transactional_id().map(tid);
    let v2 = shared.lock().txn.transaction_v2();
    // Without transaction version 2, Produce v12+ would mean implicit partition adds.
    let version_max = (transactional_id.is_some() && !v2).then_some(PRODUCE_V1_MAX);
    let timeout_ms = shared.config.client().request_timeout().as_millis() as i32;
    let metadata = shared.cluster.metadata();
    for (leader, outgoing) in per_leader {
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for o in &outgoing {
            let data = PartitionProduceData::default()
                .with_index(o.tp.partition)
                .with_records(Some(o.bytes.clone()));
            match topics.iter_mut().find(|t| t.name.0.as_str() == o.tp.topic) {
                Some(t) => t.partition_data.push(data),
                None => {
                    let topic_id = metadata
                        .topic(&o.tp.topic)
                        .map(|t| t.topic_id)
                        .unwrap_or_default();
                    topics.push(
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(o.tp.topic.clone())))
                            .with_topic_id(topic_id)
                            .with_partition_data(vec![data]),
                    )
                }
            }
        }
        let request = ProduceRequest::default()
            .with_transactional_id(transactional_id.clone())
            .with_acks(acks.wire())
            .with_timeout_ms(timeout_ms)
            .with_topic_data(topics);
        // The write happens here, in the loop, so that a broker's requests go out in the
        // order their batches were drained.
        let written: Result<Option<PendingResponse<ProduceRequest>>, Error> = if acks == Acks::None
        {
            shared
                .cluster
                .send_without_response(leader, version_max, &request)
                .await
                .map(|()| None)
        } else {
            shared
                .cluster
                .submit_at_most(leader, version_max, &request)
                .await
                .map(Some)
        };
        let pipeline = pipelines.leaders.entry(leader).or_default();
        let in_flight = InFlight::new(&pipeline.in_flight);
        let before = pipeline.last_applied.take();
        let (applied, after) = tokio::sync::oneshot::channel();
        pipeline.last_applied = Some(after);
        let shared = shared.clone();
        tokio::spawn(async move {
            let answer = match written {
                Ok(Some(pending)) => pending.response().await.map(Some),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            if let Some(before) = before {
                // Sent or dropped: either way the earlier answer is applied.
                let _ = before.await;
            }
            let (stale, unreachable) = apply(&shared, outgoing, answer);
            if unreachable {
                // The leader could not be reached: its partitions may have moved. Ask for an
                // update, served in the background, and go on with the cache meanwhile — the
                // batches are retried after their backoff to whichever leader metadata names
                // by then (Kafka's sender on a disconnection).
                shared.cluster.request_metadata_update();
            }
            drop(in_flight);
            let _ = applied.send(());
            shared.progress.notify_waiters();
            shared.wake.notify_one();
            // A leader moved or a topic is unknown where we sent: fetch metadata before the
            // retry (which waits its backoff anyway), as the Java client's sender does.
            if !stale.is_empty() {
                shared.cluster.invalidate_metadata();
                for topic in &stale {
                    let _ = shared.cluster.try_topic(topic).await;
                }
                shared.wake.notify_one();
            }
        });
    }
}

/// Applies one ProduceRequest's answer (or failure) to its batches. Returns the topics
/// whose metadata the answer says is stale, and whether the leader could not be reached
/// (a metadata update is wanted, without making lookups wait).
fn apply(
    shared: &Shared,
    outgoing: Vec<Outgoing>,
    answer: Result<Option<ProduceResponse>, Error>,
) -> (Vec<String>, bool) {
    let idempotent = shared.config.idempotence();
    let metadata = shared.cluster.metadata();
    let now = shared.now_ms();
    let mut st = shared.lock();
    let mut codes: HashMap<(String, i32), (ErrorCode, i64)> = HashMap::new();
    let failure = match answer {
        Ok(Some(response)) => {
            for t in &response.responses {
                let name = if t.name.0.is_empty() {
                    metadata
                        .topic_name(t.topic_id)
                        .map(str::to_owned)
                        .unwrap_or_default()
                } else {
                    t.name.0.to_string()
                };
                for p in &t.partition_responses {
                    codes.insert(
                        (name.clone(), p.index),
                        (ErrorCode(p.error_code), p.base_offset),
                    );
                }
            }
            None
        }
        Ok(None) => None,
        Err(e) => Some(e),
    };
    let unreachable = failure
        .as_ref()
        .is_some_and(Error::requires_metadata_update);
    let mut stale = Vec::new();
    for o in outgoing {
        let mut refresh = false;
        let (result, retriable) = match (&failure, acks_none(shared)) {
            (Some(e), _) => {
                refresh |= e.requires_metadata_refresh();
                (SendResult::Err(e.code()), e.is_retriable())
            }
            (None, true) => (SendResult::Ok { base_offset: -1 }, false),
            (None, false) => match codes.get(&(o.tp.topic.clone(), o.tp.partition)) {
                Some((code, base_offset)) if code.is_ok() => (
                    SendResult::Ok {
                        base_offset: *base_offset,
                    },
                    false,
                ),
                Some((code, _)) => {
                    let stale = Error::Kafka {
                        code: *code,
                        api: shoal_protocol::ApiKey::Produce,
                        message: None,
                    };
                    refresh |= stale.requires_metadata_refresh();
                    // With idempotence, an out-of-order answer follows a failed earlier
                    // batch: resending in order resolves it (the accumulator's rule).
                    let retriable = code.is_retriable()
                        || (idempotent && *code == ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
                    (SendResult::Err(*code), retriable)
                }
                None => (SendResult::Err(ErrorCode::NETWORK_EXCEPTION), true),
            },
        };
        if refresh {
            stale.push(o.tp.topic.clone());
        }
        if let Some(c) = st.acc.complete(&o.tp, o.batch, result, retriable, now) {
            st.finish(c);
        }
    }
    (stale, unreachable)
}

/// The code a transaction's error gives the batches it fails.
fn failure_code(st: &State) -> ErrorCode {
    match st.txn.last_error().map(|e| &e.kind) {
        Some(TxnErrorKind::Broker { code, .. }) => *code,
        _ => ErrorCode::INVALID_TXN_STATE,
    }
}

fn acks_none(shared: &Shared) -> bool {
    shared.config.acks() == Acks::None
}
