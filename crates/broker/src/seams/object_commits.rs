//! A cluster's commit point (`shared/spec/cluster.md`, "The commit point"): the bytes appended
//! to the partitions since their last commit go into one new object, and then one etcd
//! transaction (`shoal_cluster::commits`) compares every partition's owner fence and that it
//! continues exactly at its committed end, and records the new ends and where the bytes are.
//! Only then is anything in it acknowledged. A PUT that does not finish within the deadline
//! ([`ObjectCommits::with_put_deadline`]; a broker uses its lease) fails the commit like a
//! refused PUT: producers get KAFKA_STORAGE_ERROR and retry, and the next commit tries again.
//!
//! Group commit: one commit at a time per broker; a caller whose records an earlier commit
//! already covered returns at once, and a commit takes everything appended to its partitions
//! up to when it starts, for whoever appended it. The local log stays the owner's working copy:
//! what it holds past the committed end is not durable.
//!
//! The fence a partition is committed under is the one its owner key had when this node opened
//! it at that leader epoch (`EtcdOwnership`'s table); a newer owner, or none, fails the
//! comparison in etcd, whatever this node believes: [`CommitError::Fenced`]. An outcome etcd
//! did not report (a timeout) fails the commit; the next one re-reads the committed end, and
//! the contiguity comparison keeps it from skipping or overwriting what may have landed.
//!
//! No transaction naming an object is sent once `shoal_cluster::collector::REFERENCE_DEADLINE`
//! has passed since its PUT began (the commit fails retriably instead): the object collector
//! deletes objects it has seen unreferenced for longer than that and a margin.
//!
//! A partition's log start (DeleteRecords, retention) is recorded in etcd before the local
//! log moves it ([`Durability::record_log_start`]: `shoal_cluster::retention::trim`, fenced
//! like a commit, after committing what the start would pass), so that a node that takes the
//! partition over starts its log there too. A trim refused because a compaction rewrote the
//! index meanwhile is tried again a few times; one refused because this node lost the
//! partition fails with [`CommitError::Fenced`], and the local log keeps its start.
//!
//! A partition this node takes over is restored first ([`Durability::restore`]:
//! `shoal_cluster::restore::catch_up`). A commit that surely recorded nothing (its object not
//! stored) truncates each partition back to its committed end; the truncation bumps the log's
//! generation, and every commit call whose partition changed generation since it appended
//! fails, so no waiter mistakes a later commit for its own (decision 0018's commit
//! generation).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_cluster::collector::REFERENCE_DEADLINE;
use shoal_cluster::commits::{self, CommitRefused, PartitionCommit};
use shoal_cluster::{restore, retention};
use shoal_cluster::{ObjectRef, Objects, OwnerTable, Session};

use super::durability::{CommitError, Committing, Durability};
use super::ownership::{NotServed, Owner};
use crate::topic_registry::Partition;

/// Commits to object storage and etcd.
pub struct ObjectCommits {
    node_id: i32,
    session: Arc<Session>,
    owners: Arc<OwnerTable>,
    objects: Objects,
    /// Each partition's committed end, as this node last committed or read it.
    committed: Mutex<HashMap<(String, i32), i64>>,
    /// One commit at a time.
    gate: tokio::sync::Mutex<()>,
    /// How long an object's PUT may take before the commit fails (see [`Self::with_put_deadline`]).
    put_deadline: Duration,
}

impl std::fmt::Debug for ObjectCommits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCommits")
            .field("node_id", &self.node_id)
            .field("objects", &self.objects)
            .finish_non_exhaustive()
    }
}

fn failed(e: impl std::fmt::Display) -> CommitError {
    CommitError::Failed(e.to_string())
}

/// One partition's uncommitted bytes.
struct Pending {
    key: (String, i32),
    fence: i64,
    base_offset: i64,
    end_offset: i64,
    bytes: Bytes,
}

/// How long an object's PUT may take, unless set with [`ObjectCommits::with_put_deadline`]
/// (a broker sets its lease: past it, its partitions may be someone else's anyway).
pub const DEFAULT_PUT_DEADLINE: Duration = Duration::from_secs(9);

/// Trims of one log start refused (by a compaction that rewrote the index meanwhile) before
/// recording it fails.
const TRIM_REFUSALS_MAX: u32 = 5;
/// Trims of one log start at most (each deletes at most a group of index entries; the next
/// log start's trim deletes what is left).
const TRIM_ROUNDS_MAX: u32 = 64;

/// Partitions recorded per etcd transaction at most (etcd's default `--max-txn-ops` is 128;
/// a commit compares two keys per partition).
pub const PARTITIONS_PER_TXN: usize = 50;

impl ObjectCommits {
    pub fn new(
        node_id: i32,
        session: Arc<Session>,
        owners: Arc<OwnerTable>,
        objects: Objects,
    ) -> Self {
        Self {
            node_id,
            session,
            owners,
            objects,
            committed: Mutex::new(HashMap::new()),
            gate: tokio::sync::Mutex::new(()),
            put_deadline: DEFAULT_PUT_DEADLINE,
        }
    }

    /// Fails a commit whose object is not stored within `deadline`, with a retriable error
    /// (KAFKA_STORAGE_ERROR), instead of holding every commit of this broker behind it. A
    /// stalled store (paused, partitioned, overloaded) otherwise keeps a PUT waiting for the
    /// S3 client's own timeouts and retries — minutes — while producers time out and resend.
    /// The PUT given up on may still land: its object is named by no commit (an orphan).
    #[must_use]
    pub fn with_put_deadline(mut self, deadline: Duration) -> Self {
        self.put_deadline = deadline;
        self
    }

    /// The fence this node owns `partition` under at the epoch it opened it with.
    fn fence(&self, partition: &Partition) -> Result<i64, CommitError> {
        let fenced = |now| CommitError::Fenced {
            topic: partition.topic.clone(),
            partition: partition.index,
            now,
        };
        match self.owners.owner(&partition.topic, partition.index) {
            Some(o) if o.node_id == self.node_id && o.leader_epoch == partition.leader_epoch => {
                Ok(o.fence)
            }
            Some(o) => Err(fenced(NotServed::Elsewhere(Owner {
                node_id: o.node_id,
                epoch: o.leader_epoch,
            }))),
            None => Err(fenced(NotServed::Offline)),
        }
    }

    async fn committed_end(&self, key: &(String, i32)) -> Result<i64, CommitError> {
        let known = self
            .committed
            .lock()
            .expect("commit map poisoned")
            .get(key)
            .copied();
        match known {
            Some(end) => Ok(end),
            None => {
                let end = commits::committed_end(&self.session, &key.0, key.1)
                    .await
                    .map_err(failed)?;
                self.committed
                    .lock()
                    .expect("commit map poisoned")
                    .insert(key.clone(), end);
                Ok(end)
            }
        }
    }

    /// What `partition` holds past its committed end, if anything.
    async fn pending(&self, partition: &Partition) -> Result<Option<Pending>, CommitError> {
        let fence = self.fence(partition)?;
        let key = (partition.topic.clone(), partition.index);
        let base_offset = self.committed_end(&key).await?;
        let mut bytes = BytesMut::new();
        let mut next = base_offset;
        let end_offset = {
            let log = partition.lock();
            let end = log.log_end_offset();
            while next < end {
                let slice = log
                    .read_slice(next, usize::MAX, Some(end), false)
                    .map_err(failed)?;
                let Some(region) = slice.region else { break };
                bytes.extend_from_slice(&region.read().map_err(failed)?);
                next = slice.next_offset;
            }
            next
        };
        Ok((end_offset > base_offset).then(|| Pending {
            key,
            fence,
            base_offset,
            end_offset,
            bytes: bytes.freeze(),
        }))
    }

    async fn commit_all(&self, partitions: &[Arc<Partition>]) -> Result<(), CommitError> {
        let _gate = self.gate.lock().await;
        let mut pending = Vec::new();
        for partition in partitions {
            if let Some(p) = self.pending(partition).await? {
                pending.push((partition.clone(), p));
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        let name = Objects::unique_name(self.node_id);
        let mut object = BytesMut::new();
        let mut parts = Vec::with_capacity(pending.len());
        for (_, p) in &pending {
            parts.push(PartitionCommit {
                topic: p.key.0.clone(),
                partition: p.key.1,
                fence: p.fence,
                base_offset: p.base_offset,
                end_offset: p.end_offset,
                object: ObjectRef {
                    name: name.clone(),
                    position: object.len() as u64,
                    len: p.bytes.len() as u64,
                },
            });
            object.extend_from_slice(&p.bytes);
        }
        let put_started = tokio::time::Instant::now();
        let stored =
            tokio::time::timeout(self.put_deadline, self.objects.put(&name, object.freeze()))
                .await
                .unwrap_or_else(|_| {
                    Err(shoal_cluster::Error::Objects(format!(
                        "object {name} not stored within {:?}",
                        self.put_deadline
                    )))
                });
        if let Err(e) = stored {
            self.truncate_uncommitted(&pending);
            return Err(failed(e));
        }
        // etcd takes at most 128 comparisons per transaction (two per partition): a commit of
        // more partitions is recorded in several, in order. Once one fails, the later ones
        // surely recorded nothing and go back to their committed end.
        let mut outcome = Ok(());
        for (parts, pending) in parts
            .chunks(PARTITIONS_PER_TXN)
            .zip(pending.chunks(PARTITIONS_PER_TXN))
        {
            if outcome.is_err() {
                self.truncate_uncommitted(pending);
                continue;
            }
            // The object collector deletes an object it has seen unreferenced for its grace,
            // trusting that nothing names an object past this deadline after its PUT began.
            if put_started.elapsed() >= REFERENCE_DEADLINE {
                self.truncate_uncommitted(pending);
                outcome = Err(failed(format!(
                    "object {name} not recorded within {REFERENCE_DEADLINE:?} of its PUT"
                )));
                continue;
            }
            outcome = self.record(parts, pending).await;
        }
        outcome
    }

    /// Records `parts` (the object holding their bytes is stored) in one fenced transaction.
    async fn record(
        &self,
        parts: &[PartitionCommit],
        pending: &[(Arc<Partition>, Pending)],
    ) -> Result<(), CommitError> {
        match commits::commit(&self.session, parts).await {
            Ok(Ok(_)) => {
                let mut committed = self.committed.lock().expect("commit map poisoned");
                for (_, p) in pending {
                    committed.insert(p.key.clone(), p.end_offset);
                }
                Ok(())
            }
            Ok(Err(CommitRefused::Fenced {
                topic,
                partition,
                owner,
            })) => Err(CommitError::Fenced {
                topic,
                partition,
                now: match owner {
                    Some(o) => NotServed::Elsewhere(Owner {
                        node_id: o.node_id,
                        epoch: o.leader_epoch,
                    }),
                    None => NotServed::Offline,
                },
            }),
            Ok(Err(CommitRefused::NotContiguous {
                topic,
                partition,
                committed_end,
            })) => {
                self.committed
                    .lock()
                    .expect("commit map poisoned")
                    .insert((topic.clone(), partition), committed_end);
                Err(failed(format!(
                    "{topic}-{partition}: committed end is {committed_end}, not where this \
                     commit started"
                )))
            }
            Err(e) => {
                // Unknown outcome: the bytes stay (they may be committed); the ends are read
                // again before the next commit, whose contiguity comparison settles it.
                let mut committed = self.committed.lock().expect("commit map poisoned");
                for (_, p) in pending {
                    committed.remove(&p.key);
                }
                Err(failed(e))
            }
        }
    }

    /// Records `start` as `partition`'s log start (see [`Durability::record_log_start`]).
    async fn trim(&self, partition: &Arc<Partition>, start: i64) -> Result<(), CommitError> {
        let fence = self.fence(partition)?;
        let key = (partition.topic.clone(), partition.index);
        if self.committed_end(&key).await? < start {
            self.commit_all(std::slice::from_ref(partition)).await?;
            let end = self.committed_end(&key).await?;
            if end < start {
                return Err(failed(format!(
                    "{}-{}: log start {start} is past the committed end {end}",
                    key.0, key.1
                )));
            }
        }
        let (mut refusals, mut rounds, mut recorded) = (0, 0, false);
        loop {
            let trimmed = retention::trim(&self.session, (&key.0, key.1), fence, start)
                .await
                .map_err(failed)?;
            if trimmed.refused {
                // Owned elsewhere now, or the index changed under the trim; once the start
                // is recorded, the entries left are the next trim's.
                self.fence(partition)?;
                if recorded {
                    return Ok(());
                }
                refusals += 1;
                if refusals >= TRIM_REFUSALS_MAX {
                    return Err(failed(format!(
                        "{}-{}: log start {start} refused {refusals} times",
                        key.0, key.1
                    )));
                }
                continue;
            }
            recorded = true;
            rounds += 1;
            if trimmed.entries_deleted == 0 || rounds >= TRIM_ROUNDS_MAX {
                return Ok(());
            }
        }
    }

    /// After a commit that surely recorded nothing: each partition's log goes back to its
    /// committed end, so that no later commit carries these bytes without their writers
    /// knowing (they are told the commit failed; the generation bump tells the others).
    fn truncate_uncommitted(&self, pending: &[(Arc<Partition>, Pending)]) {
        for (partition, p) in pending {
            let mut log = partition.lock();
            if let Err(e) = log.truncate_to(p.base_offset) {
                tracing::error!(topic = %p.key.0, partition = p.key.1, error = %e,
                    "cannot truncate the uncommitted records; the partition must be reopened");
            }
        }
    }
}

impl Durability for ObjectCommits {
    fn commit(&self, partitions: Vec<Arc<Partition>>) -> Committing<'_> {
        // What the caller appended is in the log of this generation; a failed commit (this
        // one or another caller's) truncates the log back to its committed end and bumps it.
        let appended: Vec<u64> = partitions.iter().map(|p| p.lock().generation()).collect();
        Box::pin(async move {
            let outcome = self.commit_all(&partitions).await;
            for (partition, generation) in partitions.iter().zip(appended) {
                if partition.lock().generation() != generation {
                    return Err(failed(format!(
                        "{}-{}: records truncated after a failed commit",
                        partition.topic, partition.index
                    )));
                }
            }
            outcome
        })
    }

    fn records_log_start(&self) -> bool {
        true
    }

    fn record_log_start(&self, partition: Arc<Partition>, start: i64) -> Committing<'_> {
        Box::pin(async move { self.trim(&partition, start).await })
    }

    fn restore<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
        log: &'a mut shoal_storage::Log,
    ) -> Committing<'a> {
        Box::pin(async move {
            let _gate = self.gate.lock().await;
            let done = restore::catch_up(&self.session, &self.objects, topic, partition, log)
                .await
                .map_err(failed)?;
            tracing::info!(
                topic,
                partition,
                truncated = done.truncated,
                fetched = done.fetched,
                end = done.end,
                log_start = log.log_start_offset(),
                "partition restored from the committed records"
            );
            self.committed
                .lock()
                .expect("commit map poisoned")
                .insert((topic.to_string(), partition), done.end);
            Ok(())
        })
    }
}
