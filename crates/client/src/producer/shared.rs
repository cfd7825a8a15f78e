//! The producer's state shared by the handle ([`super::producer`]) and the sender task
//! ([`super::sender`]): the accumulator with each batch's records and waiters, the
//! transaction manager and the partitioner behind one `std::sync::Mutex` (never held across
//! an await), and the notifications between them.
//!
//! Must not: do I/O, or import the handle or the sender (both stand on this).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shoal_protocol::{ApiKey, ErrorCode};
use tokio::sync::{oneshot, Notify};

use super::accumulator::{Accumulator, BatchId, Completed, Completion};
use super::batch::BatchRecord;
use super::config::ProducerConfig;
use super::partitioner::StickyPartitioner;
use super::transaction::{OperationId, TopicPartition, TransactionManager};
use crate::cluster::Cluster;
use crate::error::Error;

/// Where a record was written. `offset` is -1 with `acks=0` (the broker does not answer)
/// and when the broker reported the batch as a duplicate of one it already had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (the broker's LogAppendTime when the topic uses it).
    pub timestamp: i64,
}

/// One batch's records and the futures of their senders.
#[derive(Debug)]
pub(super) struct PendingBatch {
    pub records: Vec<BatchRecord>,
    pub waiters: Vec<oneshot::Sender<Result<RecordMetadata, Error>>>,
    /// The transaction operation it belongs to (transactional producers).
    pub op: Option<OperationId>,
}

#[derive(Debug)]
pub(super) struct State {
    pub acc: Accumulator<TopicPartition>,
    pub batches: HashMap<BatchId, PendingBatch>,
    pub txn: TransactionManager,
    pub partitioner: StickyPartitioner,
    /// The sender task has stopped.
    pub stopped: bool,
}

impl State {
    /// Resolves a finished batch's futures and reports it to the transaction manager.
    pub fn finish(&mut self, c: Completion<TopicPartition>) {
        let Some(batch) = self.batches.remove(&c.batch) else {
            return;
        };
        let tp = &c.partition;
        for (i, (waiter, record)) in batch.waiters.into_iter().zip(&batch.records).enumerate() {
            let result = match &c.outcome {
                Completed::Written { base_offset } => Ok(RecordMetadata {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: if *base_offset >= 0 {
                        base_offset + i as i64
                    } else {
                        -1
                    },
                    timestamp: record.timestamp,
                }),
                Completed::Failed { code } => Err(Error::Kafka {
                    code: *code,
                    api: ApiKey::Produce,
                    message: Some(format!("{}-{}", tp.topic, tp.partition)),
                }),
            };
            let _ = waiter.send(result);
        }
        if let Some(op) = batch.op {
            match c.outcome {
                Completed::Written { .. } => self.txn.finish_operation(op, ErrorCode::NONE),
                Completed::Failed { code } => self.txn.fail_operation(op, code),
            };
        } else if matches!(c.outcome, Completed::Failed { .. }) && self.txn.producer().is_some() {
            // An idempotent producer's failed batch may leave a sequence gap; a no-op for
            // other producers and while a bump is under way.
            let _ = self.txn.bump_idempotent_epoch();
        }
    }
}

#[derive(Debug)]
pub(super) struct Shared {
    pub cluster: Cluster,
    pub config: ProducerConfig,
    pub state: Mutex<State>,
    /// Wakes the sender (a batch may be ready, a coordinator request is due, closing).
    pub wake: Notify,
    /// Wakes every caller waiting on the state (memory freed, batch done, txn state).
    pub progress: Notify,
    pub closing: AtomicBool,
    epoch: Instant,
}

impl Shared {
    pub fn new(cluster: Cluster, config: ProducerConfig, state: State) -> Shared {
        Shared {
            cluster,
            config,
            state: Mutex::new(state),
            wake: Notify::new(),
            progress: Notify::new(),
            closing: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // Every update under the lock leaves a consistent state before anything can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The accumulator's clock: milliseconds since the producer started.
    pub fn now_ms(&self) -> i64 {
        self.epoch.elapsed().as_millis() as i64
    }

    /// Waits until `check` answers, at most `timeout` (`None`: as long as it takes);
    /// `check` runs under the lock after every change.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Option<Duration>,
        mut check: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<T, Error> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(done) = check(&mut self.lock()) {
                return Ok(done);
            }
            match (deadline, timeout) {
                (Some(deadline), Some(after)) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Err(Error::Timeout {
                            what: what.into(),
                            after,
                        });
                    }
                }
                _ => notified.await,
            }
        }
    }

    /// Starts closing: no more appends, the sender drains what is buffered.
    pub fn begin_close(&self) {
        self.closing.store(true, Ordering::Release);
        self.lock().acc.close();
        self.wake.notify_one();
    }
}
