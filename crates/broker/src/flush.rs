//! Group commit: many acknowledged writes, one fsync per partition.
//!
//! A produce with acks=1/all appends under the partition lock, releases it, then asks the
//! flusher to make its partitions durable and waits. The flusher task takes every request that
//! queued up while the previous fsync ran, fsyncs each distinct partition once (off the async
//! threads, outside the partition locks) and answers them all. Throughput holds because the
//! cost of an fsync is shared by everything that arrived during the one before it.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tracing::error;

use crate::topics::Partition;

/// Requests queued at most before producers wait for room (backpressure).
const QUEUE_REQUESTS_MAX: usize = 4096;

struct FlushRequest {
    partitions: Vec<Arc<Partition>>,
    done: oneshot::Sender<Result<(), String>>,
}

/// Handle to the flusher task.
#[derive(Clone)]
pub struct Flusher {
    tx: mpsc::Sender<FlushRequest>,
}

impl Flusher {
    /// Starts the flusher on the current runtime.
    pub fn start() -> (Flusher, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE_REQUESTS_MAX);
        let task = tokio::spawn(run(rx));
        (Flusher { tx }, task)
    }

    /// Returns once every write appended to `partitions` before the call is on disk.
    ///
    /// # Errors
    /// The fsync failed (the broker cannot promise durability; the client gets
    /// KAFKA_STORAGE_ERROR), or the flusher has stopped.
    pub async fn flush(&self, partitions: Vec<Arc<Partition>>) -> Result<(), String> {
        if partitions.is_empty() {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        self.tx
            .send(FlushRequest { partitions, done })
            .await
            .map_err(|_| "flusher stopped".to_string())?;
        wait.await.map_err(|_| "flusher stopped".to_string())?
    }
}

async fn run(mut rx: mpsc::Receiver<FlushRequest>) {
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut distinct: HashMap<usize, Arc<Partition>> = HashMap::new();
        for request in &batch {
            for p in &request.partitions {
                distinct.insert(Arc::as_ptr(p) as usize, p.clone());
            }
        }
        let partitions: Vec<Arc<Partition>> = distinct.into_values().collect();
        let result = tokio::task::spawn_blocking(move || sync_all(&partitions))
            .await
            .unwrap_or_else(|e| Err(format!("fsync task failed: {e}")));
        if let Err(e) = &result {
            error!(error = %e, "fsync failed; acknowledged writes are not durable");
        }
        for request in batch.drain(..) {
            let _ = request.done.send(result.clone());
        }
    }
}

fn sync_all(partitions: &[Arc<Partition>]) -> Result<(), String> {
    let mut first_error = None;
    for p in partitions {
        // Take what we need under the lock, fsync outside it so appends continue meanwhile.
        let handle = p.lock().sync_handle();
        match handle.sync() {
            Ok(()) => p.lock().mark_flushed(&handle),
            Err(e) => {
                first_error.get_or_insert_with(|| format!("{}-{}: {e}", p.topic, p.index));
            }
        }
    }
    match first_error {
        None => Ok(()),
        Some(e) => Err(e),
    }
}
