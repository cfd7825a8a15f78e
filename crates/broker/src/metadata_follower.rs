//! Following the metadata other brokers of a cluster change: topics created, grown or
//! deleted, configs, feature levels, credentials. [`run`] waits for the shared store's signal
//! (`seams::metadata_store::MetadataStore::appended_elsewhere`) and applies the new records
//! to this node the one way every metadata change takes effect (`NodeState::follow_metadata`).
//! On a single node, the only writer, there is nothing to follow and it returns at once.
//!
//! Admin changes do not wait for this task: they catch up under the admin lock before they
//! decide, so a change is never decided on a stale image; this task keeps what requests read
//! without that lock (topics, configs) current within one etcd watch event.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, warn};

use crate::node::NodeState;

/// Pause after a failed read of the store before trying again.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Applies other brokers' metadata records as they are appended, until `stop` turns true.
pub async fn run(node: std::sync::Weak<NodeState>, mut stop: watch::Receiver<bool>) {
    let Some(changes) = node.upgrade().and_then(|n| n.metadata_changes.clone()) else {
        return;
    };
    loop {
        tokio::select! {
            () = changes.notified() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        let Some(node) = node.upgrade() else { return };
        match node.follow_metadata().await {
            Ok(0) => {}
            Ok(applied) => debug!(applied, "applied metadata records of other brokers"),
            Err(e) => {
                warn!(error = %e, "cannot read the cluster's metadata; retrying");
                changes.notify_one();
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}
