//! What every broker of a cluster shares besides ownership and commits: the metadata log
//! (topics, configs, feature levels, credentials — records the broker encodes; opaque here),
//! the cluster id, and the producer ids each broker reserves a block at a time.
//!
//! The metadata log is a sequence of keys `meta/<n>`, `n` from 0, each **created only if
//! absent**: a broker appends at the sequence after the last record it has applied, so an
//! append made on a stale view (another broker appended meanwhile) is refused and the broker
//! catches up before it decides again. The records are therefore one total order every broker
//! replays identically, without a controller: etcd's transaction is the arbiter.
//!
//! Must not: append anywhere but right after the last record read (gaps would hide records);
//! hand out a producer id twice (each block is reserved by a compare-and-swap).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, WatchOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::keys::Keys;

/// Records read per etcd request while catching up.
const PAGE: i64 = 512;

/// The key just past every key starting with `prefix` (etcd's range end of a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The metadata records from sequence `from` on, in order, as (sequence, bytes).
///
/// # Errors
/// etcd unreachable, or a gap in the log (a record missing between two others).
pub async fn read_log(
    client: &Client,
    keys: &Keys,
    from: u64,
) -> crate::Result<Vec<(u64, Vec<u8>)>> {
    let mut c = client.clone();
    let end = prefix_end(&keys.metadata_log());
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        let response = c.get(keys.metadata_record(next), Some(options)).await?;
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let sequence =
                keys.parse_metadata_record(&key)
                    .ok_or_else(|| crate::Error::Invalid {
                        what: "metadata log key",
                        detail: key.to_string(),
                    })?;
            if sequence != next {
                return Err(crate::Error::Invalid {
                    what: "metadata log",
                    detail: format!("record {next} is missing (found {sequence})"),
                });
            }
            out.push((sequence, kv.value().to_vec()));
            next += 1;
        }
        if !response.more() || response.kvs().is_empty() {
            return Ok(out);
        }
    }
}

/// Appends `bytes` as record `sequence` if no record has that sequence yet.
///
/// # Errors
/// `Ok(false)` when another broker appended that record first (nothing written); `Err` when
/// etcd could not be asked (the outcome is unknown: read the log before appending again).
pub async fn append(
    client: &Client,
    keys: &Keys,
    sequence: u64,
    bytes: &[u8],
) -> crate::Result<bool> {
    let key = keys.metadata_record(sequence);
    let txn = Txn::new()
        .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, bytes.to_vec(), None)]);
    Ok(client.clone().txn(txn).await?.succeeded())
}

/// The cluster's id: `proposed` if this broker is the first to say, else the one stored.
///
/// # Errors
/// etcd unreachable.
pub async fn cluster_id(client: &Client, keys: &Keys, proposed: &str) -> crate::Result<String> {
    let key = keys.cluster_id();
    let txn = Txn::new()
        .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), proposed, None)])
        .or_else([TxnOp::get(key, None)]);
    let response = client.clone().txn(txn).await?;
    if response.succeeded() {
        return Ok(proposed.to_string());
    }
    for op in response.op_responses() {
        if let etcd_client::TxnOpResponse::Get(get) = op {
            if let Some(kv) = get.kvs().first() {
                return Ok(String::from_utf8_lossy(kv.value()).into_owned());
            }
        }
    }
    Err(crate::Error::Invalid {
        what: "cluster id",
        detail: "neither created nor read".to_string(),
    })
}

/// Reserves `count` producer ids for this broker alone; returns the first.
///
/// # Errors
/// etcd unreachable, a malformed counter, or ids exhausted.
pub async fn reserve_producer_ids(client: &Client, keys: &Keys, count: i64) -> crate::Result<i64> {
    advance(client, keys.producer_ids(), "producer id counter", count).await
}

/// A transaction-coordinator epoch higher than every one handed out before, to any broker:
/// a coordinator loaded later (the new owner of a `__transaction_state` partition) marks its
/// transaction markers with a higher epoch than any earlier load, so a partition refuses a
/// late marker of a fenced coordinator. The first is 1.
///
/// # Errors
/// etcd unreachable, a malformed counter, or epochs exhausted.
pub async fn next_coordinator_epoch(client: &Client, keys: &Keys) -> crate::Result<i32> {
    let what = "transaction coordinator epoch";
    let last = advance(client, keys.coordinator_epochs(), what, 1).await?;
    i32::try_from(last + 1).map_err(|_| crate::Error::Invalid {
        what,
        detail: "exhausted".to_string(),
    })
}

/// Adds `count` to the counter at `key` (absent: 0) by compare-and-swap; returns its value
/// before, which no other caller is given.
async fn advance(
    client: &Client,
    key: String,
    what: &'static str,
    count: i64,
) -> crate::Result<i64> {
    let mut c = client.clone();
    loop {
        let response = c.get(key.clone(), None).await?;
        let (first, compare) = match response.kvs().first() {
            None => (0, Compare::version(key.clone(), CompareOp::Equal, 0)),
            Some(kv) => {
                let text = String::from_utf8_lossy(kv.value());
                let first = text
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| crate::Error::Invalid {
                        what,
                        detail: text.to_string(),
                    })?;
                let compare =
                    Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision());
                (first, compare)
            }
        };
        let next = first
            .checked_add(count)
            .ok_or_else(|| crate::Error::Invalid {
                what,
                detail: "exhausted".to_string(),
            })?;
        let txn =
            Txn::new()
                .when([compare])
                .and_then([TxnOp::put(key.clone(), next.to_string(), None)]);
        if c.txn(txn).await?.succeeded() {
            return Ok(first);
        }
    }
}

/// Wakes a [`Notify`] whenever a metadata record is appended (and every `fallback`, in case a
/// watch event was missed while the watch was re-established); stopped when dropped.
pub struct LogWatch {
    task: JoinHandle<()>,
    appended: Arc<Notify>,
}

impl Drop for LogWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LogWatch {
    /// Starts watching the metadata log of `keys`' cluster.
    pub fn start(client: Client, keys: Keys, fallback: Duration) -> LogWatch {
        let appended = Arc::new(Notify::new());
        let notify = appended.clone();
        let task = tokio::spawn(async move {
            let prefix = keys.metadata_log();
            loop {
                let mut c = client.clone();
                match c
                    .watch(prefix.clone(), Some(WatchOptions::new().with_prefix()))
                    .await
                {
                    Ok(mut stream) => loop {
                        match tokio::time::timeout(fallback, stream.message()).await {
                            Ok(Ok(Some(_))) | Err(_) => notify.notify_one(),
                            Ok(Ok(None)) => break,
                            Ok(Err(e)) => {
                                warn!(error = %e, "etcd watch of the metadata log broke");
                                break;
                            }
                        }
                    },
                    Err(e) => warn!(error = %e, "cannot watch the metadata log"),
                }
                notify.notify_one();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        LogWatch { task, appended }
    }

    /// The notification a record was (or may have been) appended.
    pub fn appended(&self) -> Arc<Notify> {
        self.appended.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_at_its_successor() {
        assert_eq!(prefix_end("/a/meta/"), b"/a/meta0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
