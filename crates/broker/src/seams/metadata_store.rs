//! Where the cluster's metadata (topics, their configs, dynamic broker and group configs,
//! feature levels) is kept: a log of [`MetaRecord`]s replayed into a `MetadataImage` at
//! start and appended to, durably, before an admin change is answered.
//!
//! [`LocalMetadataLog`] is today's single node: the `__cluster_metadata-0` log in the data
//! directory, fsynced on every append. [`MemoryMetadataStore`] is the simulated one, with
//! appends that fail when told to. In a cluster (issue 29) this is etcd, where every broker
//! reads and watches it; see `docs/decisions/0018-the-seams-a-cluster-needs.md`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use shoal_storage::batch::{encode_batch, BatchOptions};
use shoal_storage::{Log, LogConfig};
use tracing::warn;

use crate::cluster_metadata::MetaRecord;

/// Decompression budget of a metadata batch (they are written uncompressed by us).
const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The metadata records, in order; appended to only under the broker's admin lock.
pub trait MetadataStore: Send + Sync + std::fmt::Debug {
    /// Every record, in the order appended. An undecodable record is skipped with a warning.
    ///
    /// # Errors
    /// The store cannot be read.
    fn records(&self) -> anyhow::Result<Vec<MetaRecord>>;

    /// Appends `record` durably; `now_ms` is its timestamp.
    ///
    /// # Errors
    /// The record is not durable (the admin change it carries is refused).
    fn append(&self, record: &MetaRecord, now_ms: i64) -> Result<(), String>;
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

impl MetadataStore for LocalMetadataLog {
    fn records(&self) -> anyhow::Result<Vec<MetaRecord>> {
        let log = self.lock();
        let mut records = Vec::new();
        for batch in log.iter_batches(0) {
            let batch = batch?;
            for record in shoal_storage::batch::decode_records(&batch.bytes, DECODE_BYTES_MAX)? {
                let (Some(key), Some(value)) = (&record.key, &record.value) else {
                    continue;
                };
                match MetaRecord::decode(key, value) {
                    Ok(r) => records.push(r),
                    Err(e) => warn!(offset = record.offset, error = %e, "skipping metadata record"),
                }
            }
        }
        Ok(records)
    }

    fn append(&self, record: &MetaRecord, now_ms: i64) -> Result<(), String> {
        let (key, value) = record.encode();
        let mut batch = encode_batch(
            &[(Some(&key[..]), Some(&value[..]))],
            BatchOptions {
                timestamp_ms: now_ms,
                ..BatchOptions::default()
            },
        );
        let mut log = self.lock();
        log.append(&mut batch, now_ms).map_err(|e| e.to_string())?;
        log.sync().map_err(|e| e.to_string())
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
    fn records(&self) -> anyhow::Result<Vec<MetaRecord>> {
        Ok(self.lock().clone())
    }

    fn append(&self, record: &MetaRecord, _now_ms: i64) -> Result<(), String> {
        if self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err("simulated metadata write failure".to_string());
        }
        self.lock().push(record.clone());
        Ok(())
    }
}
