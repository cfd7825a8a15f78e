//! [`Producer`]: the async handle applications hold. It puts records into the accumulator
//! (waiting up to `max.block.ms` for metadata and for `buffer.memory`), hands back a
//! [`DeliveryFuture`] per record, and runs the transaction calls by changing the
//! [`TransactionManager`]'s state and waiting for the sender task ([`super::sender`]) to
//! drive the coordinator requests.
//!
//! Shared state is one `std::sync::Mutex<State>` ([`super::shared`]: accumulator, records of
//! each batch, transaction manager, partitioner), never held across an await; the sender task
//! is the only one that does network I/O for produce and transaction-coordinator requests.
//! TxnOffsetCommit goes from the calling task to the group coordinator.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    GroupId, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::{ApiKey, ErrorCode};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::accumulator::{Accumulator, AppendError};
use super::batch::BatchRecord;
use super::config::ProducerConfig;
use super::partitioner::StickyPartitioner;
use super::shared::{PendingBatch, RecordMetadata, Shared, State};
use super::transaction::{
    Completion as TxnCompletion, Next, Operation, OperationId, PreparedOutcome, PreparedTxnState,
    TopicPartition, TransactionManager, TxnConfig, TxnError, TxnErrorKind, TxnState,
};
use crate::cluster::{Cluster, CoordinatorType};
use crate::error::Error;

/// A record to send. `partition: None` lets the partitioner choose (murmur2 of the key,
/// sticky without one); `timestamp: None` is the time of `send` (CreateTime).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    pub topic: String,
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys are unique within a record (a later duplicate replaces an earlier one).
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }
    pub fn with_key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }
    pub fn with_partition(mut self, partition: i32) -> ProducerRecord {
        self.partition = Some(partition);
        self
    }
    pub fn with_header(
        mut self,
        key: impl Into<String>,
        value: impl Into<Bytes>,
    ) -> ProducerRecord {
        self.headers.push((key.into(), Some(value.into())));
        self
    }
    pub fn with_timestamp(mut self, ms: i64) -> ProducerRecord {
        self.timestamp = Some(ms);
        self
    }
}

/// The outcome of one sent record; resolves when its batch is written or has failed for
/// good. Dropping it does not cancel the send.
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata, Error>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

/// A consumer group's identity for `send_offsets_to_transaction` (Java's
/// `ConsumerGroupMetadata`): a group id alone (generation -1) skips the broker's fencing of
/// stale group members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    pub fn new(group_id: impl Into<String>) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

pub(super) fn txn_error(e: TxnError) -> Error {
    Error::Transaction(e)
}

/// Waits on the transaction state after a commit, abort or init: `Ready` is success,
/// an error state the failure.
fn settled(state: &State, pending: TxnState) -> Option<Result<(), Error>> {
    let txn = &state.txn;
    match txn.state() {
        s if s == pending => None,
        // Ready, or (KIP-939) holding a kept prepared transaction after init.
        TxnState::Ready | TxnState::PreparedTransaction => Some(Ok(())),
        TxnState::AbortableError | TxnState::FatalError => Some(Err(txn_error(
            txn.last_error().cloned().unwrap_or(TxnError {
                kind: TxnErrorKind::IllegalState {
                    state: txn.state(),
                    reason: "the transaction failed",
                },
                fatal: txn.state() == TxnState::FatalError,
                abortable: txn.state() == TxnState::AbortableError,
            }),
        ))),
        _ => None,
    }
}

#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    sender: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.begin_close();
    }
}

/// A Kafka producer: idempotent by default, transactional with a `transactional.id`.
/// Cheap to clone (clones share one sender task and one cluster connection layer), `Send +
/// Sync`. The last clone dropped stops the sender after what is buffered; call
/// [`Producer::close`] to wait for that.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<Handle>,
}

impl Producer {
    /// Connects and starts the sender. An idempotent producer also gets its producer id
    /// (InitProducerId) here; a transactional one in [`Producer::init_transactions`].
    ///
    /// # Errors
    /// The cluster layer's connection errors; InitProducerId's error.
    pub async fn new(config: ProducerConfig) -> Result<Producer, Error> {
        let cluster = Cluster::connect(config.client().clone()).await?;
        let txn = TransactionManager::new(
            TxnConfig {
                transactional_id: config.transactional_id().map(str::to_owned),
                transaction_timeout_ms: config.transaction_timeout().as_millis() as i32,
                two_phase_commit: config.two_phase_commit(),
            },
            false,
        );
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let state = State {
            acc: Accumulator::new(*config.accumulator()),
            batches: HashMap::new(),
            txn,
            partitioner: StickyPartitioner::new(seed),
            stopped: false,
        };
        let shared = Arc::new(Shared::new(cluster, config, state));
        let sender = tokio::spawn(super::sender::run(shared.clone()));
        let producer = Producer {
            inner: Arc::new(Handle {
                shared,
                sender: Mutex::new(Some(sender)),
            }),
        };
        let s = producer.shared();
        if s.config.idempotence() && s.config.transactional_id().is_none() {
            s.lock().txn.init_transactions().map_err(txn_error)?;
            s.wake.notify_one();
            s.wait_until("InitProducerId", Some(s.config.max_block()), |st| {
                settled(st, TxnState::Initializing)
            })
            .await??;
        }
        Ok(producer)
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The cluster layer this producer uses (metadata, raw requests).
    pub fn cluster(&self) -> &Cluster {
        &self.shared().cluster
    }

    /// The producer id and epoch in use (idempotent and transactional producers).
    pub fn producer_id_epoch(&self) -> Option<(i64, i16)> {
        self.shared().lock().txn.producer().map(|p| (p.id, p.epoch))
    }

    /// Puts `record` into its partition's batch and returns the future of its delivery.
    /// Waits up to `max.block.ms` for the topic's metadata and for room in `buffer.memory`.
    /// Records of one partition are written in the order `send` returned for them.
    ///
    /// Cancellation-safe: a future dropped before it returns has sent nothing.
    ///
    /// # Errors
    /// [`Error::Timeout`] after `max.block.ms`; MESSAGE_TOO_LARGE for a record larger than
    /// `buffer.memory`; UNKNOWN_TOPIC_OR_PARTITION for a partition the topic lacks;
    /// [`Error::Transaction`] outside a transaction (transactional producers) or after a
    /// fatal error; [`Error::Closed`] once closing.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, Error> {
        let s = self.shared();
        if s.closing.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let max_block = s.config.max_block();
        let deadline = tokio::time::Instant::now() + max_block;
        let info = tokio::time::timeout_at(deadline, s.cluster.topic(&record.topic))
            .await
            .map_err(|_| Error::Timeout {
                what: format!("metadata of topic {}", record.topic),
                after: max_block,
            })??;
        let partitions = info.partitions.len() as i32;
        if let Some(p) = record.partition {
            if !(0..partitions).contains(&p) {
                return Err(Error::Kafka {
                    code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    api: ApiKey::Produce,
                    message: Some(format!("{} has {partitions} partitions", record.topic)),
                });
            }
        }
        let size = record_size(&record);
        let timestamp = record.timestamp.unwrap_or_else(now_unix_ms);
        let mut record = Some(record);
        loop {
            let notified = s.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_append(&mut record, size, timestamp, partitions)? {
                Some(future) => return Ok(future),
                None => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Err(Error::Timeout {
                            what: "room in buffer.memory".into(),
                            after: max_block,
                        });
                    }
                }
            }
        }
    }

    /// One attempt to append: `None` when `buffer.memory` is full.
    fn try_append(
        &self,
        record: &mut Option<ProducerRecord>,
        size: usize,
        timestamp: i64,
        partitions: i32,
    ) -> Result<Option<DeliveryFuture>, Error> {
        let s = self.shared();
        let now = s.now_ms();
        let mut guard = s.lock();
        let st = &mut *guard;
        let r = record.as_ref().ok_or(Error::Closed)?;
        let partition = match r.partition {
            Some(p) => p,
            None => st
                .partitioner
                .partition(&r.topic, r.key.as_deref(), partitions, &[]),
        };
        let tp = TopicPartition::new(r.topic.clone(), partition);
        let transactional = st.txn.is_transactional();
        let op = if transactional {
            Some(
                st.txn
                    .start_operation(Operation::Produce(tp.clone()))
                    .map_err(txn_error)?,
            )
        } else {
            if st.txn.state() == TxnState::FatalError {
                let e = st.txn.last_error().cloned();
                return Err(e.map(txn_error).unwrap_or(Error::Closed));
            }
            None
        };
        let appended = st.acc.append(&tp, size, now);
        let (appended, closed) = match appended {
            Ok(a) => a,
            Err(e) => {
                if let Some(op) = op {
                    st.txn.finish_operation(op, ErrorCode::NONE);
                }
                return match e {
                    AppendError::BufferFull { .. } => Ok(None),
                    AppendError::RecordTooLarge { size, max } => Err(Error::Kafka {
                        code: ErrorCode::MESSAGE_TOO_LARGE,
                        api: ApiKey::Produce,
                        message: Some(format!("record of {size} bytes, buffer.memory {max}")),
                    }),
                    AppendError::Closed => Err(Error::Closed),
                };
            }
        };
        let r = record.take().ok_or(Error::Closed)?;
        let (tx, rx) = oneshot::channel();
        let batch = st
            .batches
            .entry(appended.batch)
            .or_insert_with(|| PendingBatch {
                records: Vec::new(),
                waiters: Vec::new(),
                op: None,
            });
        if batch.op.is_none() {
            batch.op = op;
        } else if let Some(op) = op {
            // The record joined a batch that already belongs to the transaction.
            st.txn.finish_operation(op, ErrorCode::NONE);
        }
        let batch = st.batches.get_mut(&appended.batch).expect("inserted above");
        batch.records.push(to_record(r, timestamp));
        batch.waiters.push(tx);
        if closed.is_some() {
            st.partitioner
                .batch_closed(&tp.topic, tp.partition, partitions, &[]);
            s.wake.notify_one();
        } else if appended.index == 0 {
            s.wake.notify_one();
        }
        Ok(Some(DeliveryFuture { rx }))
    }

    /// Sends everything buffered without lingering and waits until every batch has
    /// completed (written or failed; see each record's [`DeliveryFuture`]). Records sent
    /// meanwhile by other tasks are waited for too.
    ///
    /// # Errors
    /// [`Error::Closed`] when the sender stopped with records left.
    pub async fn flush(&self) -> Result<(), Error> {
        let s = self.shared();
        s.lock().acc.begin_flush();
        s.wake.notify_one();
        s.wait_until("flush", None, |st| {
            if st.acc.flush_done() {
                Some(Ok(()))
            } else if st.stopped {
                Some(Err(Error::Closed))
            } else {
                None
            }
        })
        .await?
    }

    /// Sends what is buffered, stops the sender and closes the connections. Later calls on
    /// any clone fail with [`Error::Closed`].
    pub async fn close(&self) {
        let s = self.shared();
        s.begin_close();
        let sender = self
            .inner
            .sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.await;
        }
        s.cluster.close().await;
    }

    // ---- transactions ----

    /// Gets the producer id of `transactional.id`, fencing older producers with it, and
    /// completes or aborts what they left open. Uses transaction version 2 when the
    /// cluster finalizes `transaction.version` ≥ 2.
    ///
    /// # Errors
    /// [`Error::Config`] without a `transactional.id`; [`Error::Transaction`] when called
    /// twice or refused by the coordinator; [`Error::Timeout`] after `max.block.ms`.
    pub async fn init_transactions(&self) -> Result<(), Error> {
        self.init(false).await
    }

    /// As [`Producer::init_transactions`] for a two-phase-commit producer (KIP-939,
    /// `transaction.two.phase.commit.enable`), except that a transaction the previous
    /// instance prepared is kept instead of aborted: [`Producer::prepared_transaction`] then
    /// names it, and only [`Producer::complete_transaction`] (or an abort) ends it. The
    /// previous instance is fenced either way.
    ///
    /// # Errors
    /// As [`Producer::init_transactions`]; [`Error::Transaction`] without two-phase commit
    /// configured, or UNSUPPORTED_VERSION from a broker without InitProducerId v6;
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the broker does not allow two-phase commit.
    pub async fn init_transactions_keep_prepared(&self) -> Result<(), Error> {
        self.init(true).await
    }

    async fn init(&self, keep_prepared: bool) -> Result<(), Error> {
        let s = self.shared();
        let Some(tid) = s.config.transactional_id() else {
            return Err(Error::Config {
                key: "transactional.id".into(),
                reason: "init_transactions needs one".into(),
            });
        };
        let versions = s
            .cluster
            .coordinator_versions(CoordinatorType::Transaction, tid)
            .await?;
        let v2 = versions
            .finalized_feature("transaction.version")
            .is_some_and(|v| v >= 2);
        {
            let mut st = s.lock();
            st.txn.set_transaction_v2(v2);
            if keep_prepared {
                st.txn.init_transactions_keep_prepared()
            } else {
                st.txn.init_transactions()
            }
            .map_err(txn_error)?;
        }
        s.wake.notify_one();
        s.wait_until("init_transactions", Some(s.config.max_block()), |st| {
            settled(st, TxnState::Initializing)
        })
        .await?
    }

    /// Whether transactions use version 2 (KIP-890), as found by `init_transactions`.
    pub fn transaction_v2(&self) -> bool {
        self.shared().lock().txn.transaction_v2()
    }

    /// The transaction manager's state (`Ready` between transactions, `InTransaction`,
    /// `AbortableError` after a failed operation, ...).
    pub fn transaction_state(&self) -> TxnState {
        self.shared().lock().txn.state()
    }

    /// Begins a transaction: every record sent until commit or abort belongs to it.
    ///
    /// # Errors
    /// [`Error::Transaction`] unless initialized and between transactions.
    pub fn begin_transaction(&self) -> Result<(), Error> {
        self.shared().lock().txn.begin().map_err(txn_error)
    }

    /// Flushes, then commits (EndTxn). A transaction in which a send or an offset commit
    /// failed cannot commit: the error says so, and the transaction must be aborted.
    ///
    /// # Errors
    /// [`Error::Transaction`]: abortable (abort, then go on) or fatal (close the producer);
    /// [`Error::Timeout`] after `max.block.ms` waiting for the coordinator.
    pub async fn commit_transaction(&self) -> Result<(), Error> {
        let s = self.shared();
        self.flush().await?;
        let completion = s.lock().txn.begin_commit().map_err(txn_error)?;
        self.complete(completion, TxnState::Committing, "commit_transaction")
            .await
    }

    /// Prepares the open transaction (KIP-939's first phase, for a producer with
    /// `transaction.two.phase.commit.enable`): flushes, so that every record, offset commit
    /// and share acknowledgement of the transaction is registered and answered, and returns
    /// the token to store (in a checkpoint) and give to [`Producer::complete_transaction`],
    /// in this instance or, after a crash, in the next one
    /// ([`Producer::init_transactions_keep_prepared`]). The transaction never times out on
    /// the broker; nothing more can be sent in it.
    ///
    /// # Errors
    /// [`Error::Transaction`] outside a transaction, without two-phase commit configured, or
    /// when a send failed (abortable: abort it).
    pub async fn prepare_transaction(&self) -> Result<PreparedTxnState, Error> {
        self.flush().await?;
        let s = self.shared();
        // The flush answered every batch; wait for the other operations too.
        s.wait_until("prepare_transaction", Some(s.config.max_block()), |st| {
            (st.txn.in_flight() == 0 || st.txn.state() != TxnState::InTransaction).then_some(())
        })
        .await?;
        s.lock().txn.prepare().map_err(txn_error)
    }

    /// The prepared transaction this producer holds (after
    /// [`Producer::prepare_transaction`] or a keep-prepared init), if any.
    pub fn prepared_transaction(&self) -> Option<PreparedTxnState> {
        self.shared().lock().txn.prepared()
    }

    /// Ends the prepared transaction (KIP-939's second phase): commits it when `state` is
    /// its token, aborts it otherwise; does nothing when no transaction is prepared (an
    /// earlier completion ended it), so a completion interrupted by a crash can simply be
    /// repeated by the next instance. Answers which of the three it did.
    ///
    /// # Errors
    /// [`Error::Transaction`] when a transaction other than a prepared one is open, or the
    /// EndTxn fails; [`Error::Timeout`] after `max.block.ms`.
    pub async fn complete_transaction(
        &self,
        state: &PreparedTxnState,
    ) -> Result<PreparedOutcome, Error> {
        let s = self.shared();
        let (outcome, completion) = s.lock().txn.complete(*state).map_err(txn_error)?;
        let pending = match outcome {
            PreparedOutcome::Commit => TxnState::Committing,
            _ => TxnState::Aborting,
        };
        self.complete(completion, pending, "complete_transaction")
            .await?;
        Ok(outcome)
    }

    /// Aborts the transaction: the records not yet sent fail (TRANSACTION_ABORTABLE), those
    /// in flight are waited for, then EndTxn(abort). Also the way out of an abortable error.
    ///
    /// # Errors
    /// As [`Producer::commit_transaction`].
    pub async fn abort_transaction(&self) -> Result<(), Error> {
        let s = self.shared();
        let completion = {
            let mut st = s.lock();
            let completion = st.txn.begin_abort().map_err(txn_error)?;
            for c in st.acc.abort_waiting(ErrorCode::TRANSACTION_ABORTABLE) {
                st.finish(c);
            }
            completion
        };
        s.progress.notify_waiters();
        self.complete(completion, TxnState::Aborting, "abort_transaction")
            .await
    }

    async fn complete(
        &self,
        completion: TxnCompletion,
        pending: TxnState,
        what: &str,
    ) -> Result<(), Error> {
        let s = self.shared();
        if completion == TxnCompletion::Done {
            return Ok(());
        }
        s.wake.notify_one();
        s.wait_until(what, Some(s.config.max_block()), |st| settled(st, pending))
            .await?
    }

    /// Commits a consumer group's offsets in the open transaction (TxnOffsetCommit to the
    /// group coordinator; with transaction version 1, AddOffsetsToTxn first). `offsets` are
    /// the next offsets to consume.
    ///
    /// # Errors
    /// [`Error::Transaction`] outside a transaction or when the commit failed (abortable:
    /// the group's generation moved on; fatal: fenced).
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, i64)],
        group: &ConsumerGroupMetadata,
    ) -> Result<(), Error> {
        let s = self.shared();
        let max_block = s.config.max_block();
        let id = s
            .lock()
            .txn
            .start_operation(Operation::OffsetCommit {
                group_id: group.group_id.clone(),
            })
            .map_err(txn_error)?;
        s.wake.notify_one();
        let waited = s
            .wait_until("AddOffsetsToTxn", Some(max_block), |st| {
                if st.txn.operation_ready(id) {
                    Some(Ok(()))
                } else if !st.txn.is_in_flight(id) {
                    Some(Err(st.txn.last_error().cloned().map(txn_error)))
                } else {
                    None
                }
            })
            .await;
        match waited {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.unwrap_or(Error::Closed)),
            Err(timeout) => {
                s.lock()
                    .txn
                    .fail_operation(id, ErrorCode::REQUEST_TIMED_OUT);
                return Err(timeout);
            }
        }
        let result = self.txn_offset_commit(id, offsets, group).await;
        s.wake.notify_one();
        s.progress.notify_waiters();
        result
    }

    async fn txn_offset_commit(
        &self,
        id: OperationId,
        offsets: &[(TopicPartition, i64)],
        group: &ConsumerGroupMetadata,
    ) -> Result<(), Error> {
        let s = self.shared();
        let (producer, v2) = {
            let st = s.lock();
            (st.txn.producer(), st.txn.transaction_v2())
        };
        let producer = producer.ok_or(Error::Closed)?;
        let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
        for (tp, offset) in offsets {
            let partition = TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1);
            match topics.iter_mut().find(|t| t.name.0.as_str() == tp.topic) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                s.config.transactional_id().unwrap_or_default().to_owned(),
            )))
            .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
            .with_producer_id(ProducerId(producer.id))
            .with_producer_epoch(producer.epoch)
            .with_generation_id(group.generation_id)
            .with_member_id(StrBytes::from_string(group.member_id.clone()))
            .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
            .with_topics(topics);
        // Transaction version 1 must not send the version 2 request (v5+).
        let version_max = (!v2).then_some(4);
        let deadline = Instant::now() + s.config.max_block();
        loop {
            let answer = s
                .cluster
                .send_to_coordinator_at_most(
                    CoordinatorType::Group,
                    &group.group_id,
                    version_max,
                    &request,
                )
                .await;
            let code = match answer {
                Ok(r) => r
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| ErrorCode(p.error_code))
                    .find(|c| !c.is_ok())
                    .unwrap_or(ErrorCode::NONE),
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    tokio::time::sleep(s.config.client().retry_backoff()).await;
                    continue;
                }
                Err(e) => e.code(),
            };
            let next = if Instant::now() >= deadline && !code.is_ok() {
                s.lock().txn.fail_operation(id, code)
            } else {
                s.lock().txn.finish_operation(id, code)
            };
            match next {
                Next::Continue => return Ok(()),
                Next::Failed(e) => return Err(txn_error(e)),
                Next::Retry {
                    find_coordinator, ..
                } => {
                    if find_coordinator {
                        s.cluster
                            .invalidate_coordinator(CoordinatorType::Group, &group.group_id);
                    }
                    tokio::time::sleep(s.config.client().retry_backoff()).await;
                }
            }
        }
    }
}

fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A record's size in a batch, about: Kafka's record overhead (at most 21 bytes of varints
/// and attributes) plus key, value and headers.
fn record_size(r: &ProducerRecord) -> usize {
    let bytes = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
    21 + bytes(&r.key)
        + bytes(&r.value)
        + r.headers
            .iter()
            .map(|(k, v)| 10 + k.len() + bytes(v))
            .sum::<usize>()
}

fn to_record(r: ProducerRecord, timestamp: i64) -> BatchRecord {
    BatchRecord {
        key: r.key,
        value: r.value,
        headers: r.headers,
        timestamp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_futures_are_send_and_sync() {
        fn send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
        send_sync::<Producer>();
        fn spawnable<F: Future + Send>(_: F) {}
        fn check(p: &Producer, config: ProducerConfig) {
            spawnable(Producer::new(config));
            spawnable(p.send(ProducerRecord::new("t", "v")));
            spawnable(p.flush());
            spawnable(p.close());
            spawnable(p.init_transactions());
            spawnable(p.commit_transaction());
            spawnable(p.abort_transaction());
            spawnable(p.send_offsets_to_transaction(&[], &ConsumerGroupMetadata::new("g")));
        }
        let _ = check;
        fn send<T: Send>() {}
        send::<DeliveryFuture>();
    }
}
