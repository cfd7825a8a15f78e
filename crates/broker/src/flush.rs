//! Group commit: many acknowledged writes, one fsync per partition at a time.
//!
//! A produce with acks=1/all appends under the partition lock, releases it, then asks the
//! flusher to make its partitions durable and waits. Each partition commits on its own: a
//! writer notes the log end offset it needs on disk, queues on the partition's flush gate and,
//! once through, returns at once if the fsync that held the gate already covered its offset;
//! otherwise it fsyncs everything appended so far (off the async threads, outside the
//! partition lock), for itself and everyone who appended meanwhile. Partitions never wait for
//! each other: a coordinator's small write is not queued behind a megabyte of user data, which
//! is what a transaction's chain of durable steps (AddPartitionsToTxn, Produce, EndTxn,
//! markers) would otherwise pay at every step.

use std::sync::Arc;

use tracing::error;

use crate::topics::Partition;

/// Makes appended data durable; cheap to clone.
#[derive(Clone, Default)]
pub struct Flusher {}

impl Flusher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns once every write appended to `partitions` before the call is on disk.
    /// The partitions are flushed concurrently.
    ///
    /// # Errors
    /// An fsync failed (the broker cannot promise durability; the client gets
    /// KAFKA_STORAGE_ERROR): the first such error.
    pub async fn flush(&self, partitions: Vec<Arc<Partition>>) -> Result<(), String> {
        match partitions.len() {
            0 => Ok(()),
            1 => flush_partition(&partitions[0]).await,
            _ => {
                let mut set = tokio::task::JoinSet::new();
                for p in partitions {
                    set.spawn(async move { flush_partition(&p).await });
                }
                let mut first_error = None;
                while let Some(joined) = set.join_next().await {
                    let result = joined.unwrap_or_else(|e| Err(format!("fsync task failed: {e}")));
                    if let Err(e) = result {
                        first_error.get_or_insert(e);
                    }
                }
                first_error.map_or(Ok(()), Err)
            }
        }
    }
}

/// Group commit of one partition (see the module docs).
async fn flush_partition(partition: &Arc<Partition>) -> Result<(), String> {
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
        log.sync_handle()
            .map_err(|e| format!("{}-{}: {e}", partition.topic, partition.index))?
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
            Err(e)
        }
        Err(e) => Err(format!("fsync task failed: {e}")),
    }
}
