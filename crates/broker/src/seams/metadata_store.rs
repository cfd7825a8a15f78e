//! Where the cluster's metadata (topics, their configs, dynamic broker and group configs,
//! feature levels) is kept: a log of [`MetaRecord`]s replayed into a `MetadataImage` at
//! start and appended to, durably, before an admin change is answered.
//!
//! [`LocalMetadataLog`] is today's single node: the `__cluster_metadata-0` log in the data
//! directory, fsynced on every append. [`MemoryMetadataStore`] is the simulated one, with
//! appends that fail when told to. [`EtcdMetadataStore`] is a cluster's: one log in etcd every
//! broker reads, watches and appends to, each append made only at the position after the last
//! record its broker applied (see `docs/decisions/0018-the-seams-a-cluster-needs.md`).
//!
//! Beside the log, the counters a cluster's brokers share: producer-id blocks
//! ([`ProducerIdBlocks`]) and transaction-coordinator epochs ([`CoordinatorEpochs`]; one node's
//! in [`EpochFile`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use shoal_storage::batch::{encode_batch, BatchOptions};
use shoal_storage::{Log, LogConfig};
use tokio::sync::Notify;
use tracing::warn;

use crate::cluster_metadata::MetaRecord;

/// Decompression budget of a metadata batch (they are written uncompressed by us).
const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A store call in progress.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a cluster's brokers reserve blocks of producer ids (`shoal_cluster::metadata`): each
/// block is handed to one broker only.
pub trait ProducerIdBlocks: Send + Sync + std::fmt::Debug {
    /// Reserves `count` ids for this broker; returns the first.
    ///
    /// # Errors
    /// The reservation could not be made (or its outcome is unknown).
    fn reserve(&self, count: i64) -> Pending<'_, Result<i64, String>>;
}

/// Where transaction-coordinator epochs come from: each load of the transaction coordinator
/// takes one higher than every load before it (`coordinators::txn_coordinator`), so markers of
/// a coordinator that has since been replaced are refused by the partitions.
pub trait CoordinatorEpochs: Send + Sync + std::fmt::Debug {
    /// The next epoch, recorded before it is returned.
    ///
    /// # Errors
    /// It cannot be recorded (or its outcome is unknown).
    fn next(&self) -> Pending<'_, Result<i32, String>>;
}

/// One node's coordinator epochs: the last one in a file of its data directory.
#[derive(Debug)]
pub struct EpochFile {
    path: PathBuf,
    clock: Arc<dyn crate::seams::clock::Clock>,
}

/// File in the data directory holding the transaction coordinator's last epoch.
pub const COORDINATOR_EPOCH_FILE: &str = "transaction-coordinator-epoch";

impl EpochFile {
    pub fn new(data_dir: &Path, clock: Arc<dyn crate::seams::clock::Clock>) -> Self {
        EpochFile {
            path: data_dir.join(COORDINATOR_EPOCH_FILE),
            clock,
        }
    }

    /// One more than the last, written durably first (the first of a directory is the time
    /// in seconds: directories from before this file used it as the epoch).
    fn next_now(&self) -> anyhow::Result<i32> {
        let path = &self.path;
        let last = match std::fs::read_to_string(path) {
            Ok(text) => text
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| anyhow::anyhow!("{path:?} does not hold a coordinator epoch"))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (self.clock.now_ms() / 1000).clamp(0, i64::from(i32::MAX - 1)) as i32
            }
            Err(e) => anyhow::bail!("cannot read {path:?}: {e}"),
        };
        let next = last
            .checked_add(1)
            .ok_or_else(|| anyhow::anyhow!("coordinator epochs exhausted"))?;
        crate::producer_state::write_durably(path, format!("{next}\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {path:?}: {e}"))?;
        Ok(next)
    }
}

impl CoordinatorEpochs for EpochFile {
    fn next(&self) -> Pending<'_, Result<i32, String>> {
        Box::pin(std::future::ready(
            self.next_now().map_err(|e| e.to_string()),
        ))
    }
}

/// Why a record was not appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// Another broker appended first: the caller decided on a stale image, must catch up
    /// ([`MetadataStore::read_from`]) and decide again. Only a shared store says this.
    Stale,
    /// The record is not durable (the admin change it carries is refused).
    Failed(String),
}

/// The metadata records, in order; appended to only under the broker's admin lock. A record's
/// position is the number of records before it.
pub trait MetadataStore: Send + Sync + std::fmt::Debug {
    /// Every record from position `from` on, in order. An undecodable record is skipped with
    /// a warning (it still takes its position).
    ///
    /// # Errors
    /// The store cannot be read.
    fn read_from(&self, from: u64) -> Pending<'_, anyhow::Result<Vec<Option<MetaRecord>>>>;

    /// Appends `record` durably at position `at` — the number of records the caller has
    /// applied; `now_ms` is its timestamp.
    ///
    /// # Errors
    /// [`AppendError::Stale`] when `at` is no longer the end (a shared store), else
    /// [`AppendError::Failed`].
    fn append<'a>(
        &'a self,
        record: &'a MetaRecord,
        at: u64,
        now_ms: i64,
    ) -> Pending<'a, Result<(), AppendError>>;

    /// Woken when another broker may have appended (a shared store); `None` when this broker
    /// is the only writer, so that what it applied is always the whole log.
    fn appended_elsewhere(&self) -> Option<Arc<Notify>> {
        None
    }

    /// The cluster's id, when the store is shared by a cluster (else the data directory's).
    fn cluster_id(&self) -> Option<String> {
        None
    }
}

/// The metadata log of a single node's data directory.
#[derive(Debug)]
pub struct LocalMetadataLog {
    log: Mutex<Log>,
}

impl LocalMetadataLog {
    /// Opens (or creates) the log in `dir`, recovering a torn tail.
    ///
    /// # Errors
    /// The log cannot be opened.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            log: Mutex::new(Log::open(dir, LogConfig::default())?),
        })
    }
}

impl LocalMetadataLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LocalMetadataLog {
    fn read_all(&self) -> anyhow::Result<Vec<Option<MetaRecord>>> {
        let log = self.lock();
        let mut records = Vec::new();
        for batch in log.iter_batches(0) {
            let batch = batch?;
            for record in shoal_storage::batch::decode_records(&batch.bytes, DECODE_BYTES_MAX)? {
                let (Some(key), Some(value)) = (&record.key, &record.value) else {
                    records.push(None);
                    continue;
                };
                records.push(decoded(MetaRecord::decode(key, value), record.offset));
            }
        }
        Ok(records)
    }

    fn append_now(&self, record: &MetaRecord, now_ms: i64) -> Result<(), AppendError> {
        let (key, value) = record.encode();
        let mut batch = encode_batch(
            &[(Some(&key[..]), Some(&value[..]))],
            BatchOptions {
                timestamp_ms: now_ms,
                ..BatchOptions::default()
            },
        );
        let failed = |e: shoal_storage::StorageError| AppendError::Failed(e.to_string());
        let mut log = self.lock();
        log.append(&mut batch, now_ms).map_err(failed)?;
        log.sync().map_err(failed)
    }
}

/// A decoded record, or `None` (logged) when it could not be decoded.
fn decoded<E: std::fmt::Display>(
    record: Result<MetaRecord, E>,
    position: i64,
) -> Option<MetaRecord> {
    match record {
        Ok(r) => Some(r),
        Err(e) => {
            warn!(position, error = %e, "skipping metadata record");
            None
        }
    }
}

impl MetadataStore for LocalMetadataLog {
    fn read_from(&self, from: u64) -> Pending<'_, anyhow::Result<Vec<Option<MetaRecord>>>> {
        // The only writer is this node: read once, at start.
        let records = self
            .read_all()
            .map(|all| all.into_iter().skip(from as usize).collect());
        Box::pin(std::future::ready(records))
    }

    fn append<'a>(
        &'a self,
        record: &'a MetaRecord,
        _at: u64,
        now_ms: i64,
    ) -> Pending<'a, Result<(), AppendError>> {
        Box::pin(std::future::ready(self.append_now(record, now_ms)))
    }
}

/// The simulated metadata store: records in memory, shared by the handles cloned from it (a
/// restarted broker of a test sees what the previous one appended), with appends that fail
/// when told to.
#[derive(Debug, Clone, Default)]
pub struct MemoryMetadataStore {
    records: Arc<Mutex<Vec<MetaRecord>>>,
    fail_next: Arc<AtomicUsize>,
}

impl MemoryMetadataStore {
    /// The next `n` appends fail.
    pub fn fail_next(&self, n: usize) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<MetaRecord>> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl MetadataStore for MemoryMetadataStore {
    fn read_from(&self, from: u64) -> Pending<'_, anyhow::Result<Vec<Option<MetaRecord>>>> {
        let records = self
            .lock()
            .iter()
            .skip(from as usize)
            .cloned()
            .map(Some)
            .collect();
        Box::pin(std::future::ready(Ok(records)))
    }

    fn append<'a>(
        &'a self,
        record: &'a MetaRecord,
        _at: u64,
        _now_ms: i64,
    ) -> Pending<'a, Result<(), AppendError>> {
        let failed = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = if failed {
            Err(AppendError::Failed(
                "simulated metadata write failure".to_string(),
            ))
        } else {
            self.lock().push(record.clone());
            Ok(())
        };
        Box::pin(std::future::ready(result))
    }
}

/// A cluster's metadata log: etcd's `meta/<n>` records (`shoal_cluster::metadata`), shared by
/// every broker. An append made on a stale view is refused ([`AppendError::Stale`]); a watch
/// tells the broker when others appended.
pub struct EtcdMetadataStore {
    client: shoal_cluster::EtcdClient,
    keys: shoal_cluster::Keys,
    watch: shoal_cluster::metadata::LogWatch,
    cluster_id: String,
}

impl std::fmt::Debug for EtcdMetadataStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMetadataStore")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl EtcdMetadataStore {
    /// The metadata log of `keys`' cluster, watched from now on; the cluster's id is read, or
    /// set to `proposed_id` by the first broker.
    ///
    /// # Errors
    /// etcd unreachable.
    pub async fn open(
        client: shoal_cluster::EtcdClient,
        keys: shoal_cluster::Keys,
        proposed_id: &str,
    ) -> anyhow::Result<Self> {
        let cluster_id = shoal_cluster::metadata::cluster_id(&client, &keys, proposed_id).await?;
        // The watch wakes on appends; the fallback re-reads in case an event was lost.
        let watch = shoal_cluster::metadata::LogWatch::start(
            client.clone(),
            keys.clone(),
            std::time::Duration::from_secs(5),
        );
        Ok(EtcdMetadataStore {
            client,
            keys,
            watch,
            cluster_id,
        })
    }
}

impl ProducerIdBlocks for EtcdMetadataStore {
    fn reserve(&self, count: i64) -> Pending<'_, Result<i64, String>> {
        Box::pin(async move {
            shoal_cluster::metadata::reserve_producer_ids(&self.client, &self.keys, count)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

impl CoordinatorEpochs for EtcdMetadataStore {
    fn next(&self) -> Pending<'_, Result<i32, String>> {
        Box::pin(async move {
            shoal_cluster::metadata::next_coordinator_epoch(&self.client, &self.keys)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

impl MetadataStore for EtcdMetadataStore {
    fn read_from(&self, from: u64) -> Pending<'_, anyhow::Result<Vec<Option<MetaRecord>>>> {
        Box::pin(async move {
            let records = shoal_cluster::metadata::read_log(&self.client, &self.keys, from).await?;
            Ok(records
                .into_iter()
                .map(|(sequence, bytes)| decoded(MetaRecord::from_bytes(&bytes), sequence as i64))
                .collect())
        })
    }

    fn append<'a>(
        &'a self,
        record: &'a MetaRecord,
        at: u64,
        _now_ms: i64,
    ) -> Pending<'a, Result<(), AppendError>> {
        Box::pin(async move {
            let bytes = record.to_bytes();
            match shoal_cluster::metadata::append(&self.client, &self.keys, at, &bytes).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(AppendError::Stale),
                Err(e) => Err(AppendError::Failed(e.to_string())),
            }
        })
    }

    fn appended_elsewhere(&self) -> Option<Arc<Notify>> {
        Some(self.watch.appended())
    }

    fn cluster_id(&self) -> Option<String> {
        Some(self.cluster_id.clone())
    }
}
