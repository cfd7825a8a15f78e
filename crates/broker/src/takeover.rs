//! Serving a partition this node comes to own under a new epoch (`shared/spec/cluster.md`:
//! "a broker that takes a partition rebuilds its state from storage by replay").
//!
//! A node serves a partition only under the epoch it opened it with (`crate::leadership`):
//! whatever it holds of a partition it owned before, or never owned, may be stale. [`run`]
//! watches the ownership seam and, for each partition now owned here under another
//! epoch than it was opened with, reopens it: the old partition is shut down (later appends to
//! it fail, and its requests answer with an error the client retries), the log is opened
//! again and brought to exactly the committed records by the durability seam
//! ([`crate::seams::durability::Durability::restore`]: a no-op on one node, the cluster's
//! objects otherwise), its producer snapshots are dropped (they may describe records that were
//! truncated; the state is rebuilt from the log), and the new partition is put in place under
//! the new epoch.
//!
//! The partitions of the internal topics are reopened the same way; their coordinators notice
//! the new epoch and replay the partition before they serve it (`coordinators::runtime`,
//! `NodeState::coordinator_loads`).

use std::sync::Arc;
use std::time::Duration;

use shoal_storage::{producer_snapshot, Log};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::node::NodeState;
use crate::topic_registry::{log_config, partition_dir, partition_over, Topic};

/// How often ownership is compared with what is open.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Reopens partitions taken over, until `stop` turns true.
pub async fn run(node: std::sync::Weak<NodeState>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        let Some(node) = node.upgrade() else { return };
        for topic in node.topic_list() {
            for partition in topic.partitions() {
                let Some(owner) = node.ownership.owner(&topic.name, partition.index) else {
                    continue;
                };
                if owner.node_id == node.node_id && owner.epoch != partition.leader_epoch {
                    if let Err(e) = reopen(&node, &topic, partition.index, owner.epoch).await {
                        warn!(topic = %topic.name, partition = partition.index, error = %e,
                            "cannot take over the partition; retrying");
                    }
                }
            }
        }
    }
}

/// Reopens `topic`-`index` under `epoch` (see the module docs).
///
/// # Errors
/// The log could not be closed, opened or restored; the old partition stays in place (shut
/// down if that much was done), and the next check tries again.
pub async fn reopen(
    node: &NodeState,
    topic: &Arc<Topic>,
    index: i32,
    epoch: i32,
) -> anyhow::Result<()> {
    let Some(old) = topic.partition(index) else {
        return Ok(());
    };
    old.shutdown()?;
    let config = log_config(&node.current_config(), &topic.overrides());
    let mut log = Log::open(&partition_dir(&node.data_dir, &topic.name, index), config)?;
    node.durability
        .restore(&topic.name, index, &mut log)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    producer_snapshot::delete_where(log.dir(), |_| true)?;
    let end = log.log_end_offset();
    topic.replace_partition(partition_over(topic, index, epoch, log));
    info!(topic = %topic.name, partition = index, epoch, end, "partition taken over");
    Ok(())
}
