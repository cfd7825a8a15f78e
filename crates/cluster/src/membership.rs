//! A broker's part in the cluster, run in the background: every `period` it campaigns to be
//! the assigner; as assigner it rebalances the partitions over the live brokers
//! (`shoal_core::assignment::rebalance_by`, each topic spread) and records the result; as any broker it reconciles
//! its ownership with the recorded assignment (claims what is assigned to it and free,
//! releases what it owns and is assigned elsewhere). The partitions to assign come from the
//! caller (the topics it knows), the live brokers and owners from its [`OwnerTable`].
//!
//! How fast ownership follows a death: the dead broker's lease expires (its TTL), the
//! assigner's next round reassigns (one period), the new owner's next round claims it (one
//! more period at most).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use shoal_core::assignment::rebalance_by;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::assigner::{self, Partition};
use crate::owners::OwnerTable;
use crate::session::Session;

/// The partitions the cluster assigns, asked at every round.
pub type Partitions = Arc<dyn Fn() -> BTreeSet<Partition> + Send + Sync>;

/// A running membership loop; stopped when dropped.
pub struct Membership {
    task: JoinHandle<()>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Membership {
    /// Starts `node_id`'s loop over `session`, one round every `period`.
    pub fn start(
        session: Arc<Session>,
        node_id: i32,
        table: Arc<OwnerTable>,
        partitions: Partitions,
        period: Duration,
    ) -> Membership {
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = round(&session, node_id, &table, &partitions).await {
                    warn!(node_id, error = %e, "cluster membership round failed");
                }
                tokio::time::sleep(period).await;
            }
        });
        Membership { task }
    }
}

/// One round: assign (if this broker is, or becomes, the assigner), then reconcile.
///
/// # Errors
/// etcd unreachable or the lease gone.
pub async fn round(
    session: &Session,
    node_id: i32,
    table: &OwnerTable,
    partitions: &Partitions,
) -> crate::Result<()> {
    let current = assigner::read(session).await?;
    let assignment = match assigner::campaign(session, node_id).await? {
        Ok(leadership) => {
            let live: BTreeSet<i32> = table.brokers().iter().map(|b| b.node_id).collect();
            // Each topic spread over the brokers.
            let next = rebalance_by(&current, &partitions(), &live, |(topic, _)| topic.clone());
            if next != current {
                if assigner::write(session, leadership, &current, &next).await? {
                    info!(node_id, partitions = next.len(), "partitions reassigned");
                    next
                } else {
                    current
                }
            } else {
                current
            }
        }
        Err(_) => current,
    };
    let owned: BTreeMap<_, _> = table.owners().into_iter().collect();
    assigner::reconcile(session, node_id, &assignment, &owned).await?;
    Ok(())
}
