//! The commit point: where appended records become durable, fenced by ownership.
//!
//! Every durable write of a partition — a produce with acks ≥ 1, a coordinator's records, a
//! share-state record, a transaction marker — is appended to the partition's log and then
//! committed here, and is acknowledged only once [`Durability::commit`] returned `Ok`. The
//! commit checks, inside the same step that makes the bytes durable, that this node still
//! owns each partition under the epoch it opened it with ([`Ownership::serves`]): a node that
//! lost a partition meanwhile (a zombie) fails with [`CommitError::Fenced`] and acknowledges
//! nothing.
//!
//! [`LocalDisk`] is today's single node: group-commit fsync of the partition's segment
//! files. [`FailingCommits`] is the simulated one: it fails the commits it is told to, as an
//! object store or etcd would (a cluster implementation, issue 29, writes the bytes to an
//! object and compares the owner epochs in the etcd transaction that records it; see
//! `docs/decisions/0018-the-seams-a-cluster-needs.md`).
//!
//! A partition's log start (DeleteRecords, retention) is durable on one node by the local
//! log's own checkpoint; a cluster records it where a new owner finds it first
//! ([`Durability::records_log_start`], [`Durability::record_log_start`]), and the local log
//! moves only once that succeeded.
//!
//! Group commit in [`LocalDisk`]: each partition commits on its own. A writer notes the log
//! end offset it needs on disk, queues on the partition's flush gate and, once through,
//! returns at once if the fsync that held the gate already covered its offset; otherwise it
//! fsyncs everything appended so far (off the async threads, outside the partition lock), for
//! itself and everyone who appended meanwhile. Partitions never wait for each other: a
//! coordinator's small write is not queued behind a megabyte of user data, which is what a
//! transaction's chain of durable steps (AddPartitionsToTxn, Produce, EndTxn, markers) would
//! otherwise pay at every step.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use shoal_protocol::ErrorCode;
use tracing::error;

use super::ownership::{NotServed, Ownership};
use crate::topic_registry::Partition;

/// A commit in progress.
pub type Committing<'a> = Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send + 'a>>;

/// Why a commit failed; nothing of it may be acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// This node no longer owns `topic`-`partition` under the epoch it opened it with.
    Fenced {
        topic: String,
        partition: i32,
        now: NotServed,
    },
    /// The bytes could not be made durable (an fsync, a PUT or the metadata write failed).
    Failed(String),
}

impl CommitError {
    /// The error a client gets for a write of a data partition in a failed commit: it
    /// refreshes its metadata on NOT_LEADER_OR_FOLLOWER, and retries KAFKA_STORAGE_ERROR.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            CommitError::Fenced { .. } => ErrorCode::NOT_LEADER_OR_FOLLOWER,
            CommitError::Failed(_) => ErrorCode::KAFKA_STORAGE_ERROR,
        }
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Fenced {
                topic, partition, ..
            } => write!(
                f,
                "{topic}-{partition} is no longer owned by this node under the epoch it was opened with"
            ),
            CommitError::Failed(e) => f.write_str(e),
        }
    }
}

/// Makes appended records durable; one instance per broker process.
pub trait Durability: Send + Sync + std::fmt::Debug {
    /// Returns once every record appended to `partitions` before the call is durable and this
    /// node was found, in the same step, to own each of them under the epoch it opened it
    /// with. The partitions commit concurrently.
    ///
    /// # Errors
    /// [`CommitError::Fenced`] for a partition owned elsewhere now (nothing of it may be
    /// acknowledged), or [`CommitError::Failed`]; the first met.
    fn commit(&self, partitions: Vec<Arc<Partition>>) -> Committing<'_>;

    /// Brings the local `log` of `topic`-`partition` to exactly what was committed, before
    /// this node serves a partition it takes over (`crate::takeover`). On one node the local
    /// log is what was committed: nothing to do.
    ///
    /// # Errors
    /// The committed records could not be read, or the log not changed.
    fn restore<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
        log: &'a mut shoal_storage::Log,
    ) -> Committing<'a> {
        let _ = (topic, partition, log);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Whether a partition's log start (DeleteRecords, retention) must be recorded through
    /// [`Durability::record_log_start`] before the local log moves it. On one node the local
    /// log's own checkpoint is the record: `false`, and callers keep their one-step path.
    fn records_log_start(&self) -> bool {
        false
    }

    /// Records `start` as `partition`'s log start where a node that takes it over finds it,
    /// as its owner under the epoch it opened it with; the caller then moves the local log
    /// start there, and only if this returned `Ok` (a refused record changes nothing: the
    /// local log keeps its start, and the caller may try again). Records past the committed
    /// end up to `start` are committed first. On one node there is nothing to record.
    ///
    /// # Errors
    /// [`CommitError::Fenced`] if this node no longer owns `partition` under that epoch, or
    /// [`CommitError::Failed`].
    fn record_log_start(&self, partition: Arc<Partition>, start: i64) -> Committing<'_> {
        let _ = (partition, start);
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The single node's commit: fsync of the local segment files, fenced by [`Ownership`].
#[derive(Debug)]
pub struct LocalDisk {
    ownership: Arc<dyn Ownership>,
}

impl LocalDisk {
    pub fn new(ownership: Arc<dyn Ownership>) -> Self {
        Self { ownership }
    }

    fn fence(&self, partition: &Partition) -> Result<(), CommitError> {
        self.ownership
            .serves(&partition.topic, partition.index, partition.leader_epoch)
            .map_err(|now| CommitError::Fenced {
                topic: partition.topic.clone(),
                partition: partition.index,
                now,
            })
    }

    /// Group commit of one partition (see the module docs).
    async fn commit_one(&self, partition: &Arc<Partition>) -> Result<(), CommitError> {
        self.fence(partition)?;
        let target = partition.lock().log_end_offset();
        if partition.lock().flushed_offset() >= target {
            return Ok(());
        }
        let _gate = partition.flush_gate.lock().await;
        // The fsync that held the gate may have covered this write already.
        let handle = {
            let log = partition.lock();
            if log.flushed_offset() >= target {
                return Ok(());
            }
            log.sync_handle().map_err(|e| {
                CommitError::Failed(format!("{}-{}: {e}", partition.topic, partition.index))
            })?
        };
        let synced = {
            let partition = partition.clone();
            tokio::task::spawn_blocking(move || {
                let result = handle.sync();
                if result.is_ok() {
                    partition.lock().mark_flushed(&handle);
                }
                result
            })
            .await
        };
        match synced {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                let e = format!("{}-{}: {e}", partition.topic, partition.index);
                error!(error = %e, "fsync failed; acknowledged writes are not durable");
                Err(CommitError::Failed(e))
            }
            Err(e) => Err(CommitError::Failed(format!("fsync task failed: {e}"))),
        }
    }
}

impl Durability for LocalDisk {
    fn commit(&self, partitions: Vec<Arc<Partition>>) -> Committing<'_> {
        Box::pin(async move {
            match partitions.len() {
                0 => Ok(()),
                1 => self.commit_one(&partitions[0]).await,
                _ => {
                    let commits = partitions.iter().map(|p| self.commit_one(p));
                    let mut first_error = None;
                    for result in join_all(commits).await {
                        if let Err(e) = result {
                            first_error.get_or_insert(e);
                        }
                    }
                    first_error.map_or(Ok(()), Err)
                }
            }
        })
    }
}

/// Polls every future to completion concurrently (on this task: the fsyncs themselves run
/// on the blocking pool) and returns their results in order.
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, f) in pending.iter_mut().enumerate() {
            if done[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(out) => done[i] = Some(out),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// The simulated commit: [`LocalDisk`], except that the commits it is told to fail, fail
/// before anything is made durable (an object store refusing a PUT, etcd unreachable).
#[derive(Debug)]
pub struct FailingCommits {
    inner: LocalDisk,
    fail_next: AtomicUsize,
}

impl FailingCommits {
    pub fn new(ownership: Arc<dyn Ownership>) -> Self {
        Self {
            inner: LocalDisk::new(ownership),
            fail_next: AtomicUsize::new(0),
        }
    }

    /// The next `n` commits fail.
    pub fn fail_next(&self, n: usize) {
        self.fail_next.store(n, Ordering::SeqCst);
    }
}

impl Durability for FailingCommits {
    fn commit(&self, partitions: Vec<Arc<Partition>>) -> Committing<'_> {
        let fail = !partitions.is_empty()
            && self
                .fail_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if fail {
            return Box::pin(std::future::ready(Err(CommitError::Failed(
                "simulated commit failure".to_string(),
            ))));
        }
        self.inner.commit(partitions)
    }
}
