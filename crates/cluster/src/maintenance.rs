//! A broker's background upkeep of the cluster's index and objects, every `period`:
//!
//! - it compacts ([`crate::compaction`]) each partition it owns, under the fence its owner
//!   table shows for it (a stale view only gets the transaction refused);
//! - while it is the elected assigner (the `assigner` key is under its lease), it collects
//!   unreferenced objects ([`crate::collector`]) — one broker at a time, so the work is not
//!   done twice (two at once would still be safe).
//!
//! Each step is safe to stop anywhere (see those modules); a failure is logged and the next
//! round starts over from etcd.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::collector::Collector;
use crate::compaction::{self, Policy};
use crate::objects::Objects;
use crate::owners::OwnerTable;
use crate::session::Session;

/// How the upkeep runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub period: Duration,
    pub policy: Policy,
    /// The collector's grace ([`crate::collector::DEFAULT_GRACE`]).
    pub grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            period: Duration::from_secs(30),
            policy: Policy::default(),
            grace: crate::collector::DEFAULT_GRACE,
        }
    }
}

/// The running upkeep; stopped when dropped.
pub struct Maintenance {
    task: JoinHandle<()>,
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Maintenance {
    /// Starts `node_id`'s upkeep.
    pub fn start(
        session: Arc<Session>,
        node_id: i32,
        table: Arc<OwnerTable>,
        objects: Objects,
        options: Options,
    ) -> Maintenance {
        let task = tokio::spawn(async move {
            let mut collector = Collector::new(options.grace);
            loop {
                tokio::time::sleep(options.period).await;
                compact_owned(&session, node_id, &table, &objects, options.policy).await;
                match is_assigner(&session).await {
                    Ok(true) => match collector.round(&session, &objects).await {
                        Ok(done) => debug!(node_id, ?done, "objects collected"),
                        Err(e) => warn!(node_id, error = %e, "object collection failed"),
                    },
                    // Not (or no longer) the collector: whoever is starts its grace afresh.
                    Ok(false) => collector = Collector::new(options.grace),
                    Err(e) => warn!(node_id, error = %e, "cannot read the assigner"),
                }
            }
        });
        Maintenance { task }
    }
}

/// Compacts every partition `node_id` owns, as `table` shows it.
pub async fn compact_owned(
    session: &Session,
    node_id: i32,
    table: &OwnerTable,
    objects: &Objects,
    policy: Policy,
) {
    for ((topic, partition), owner) in table.owners() {
        if owner.node_id != node_id {
            continue;
        }
        let at = (topic.as_str(), partition);
        match compaction::compact(session, objects, node_id, at, owner.fence, policy).await {
            Ok(done) if done.groups > 0 || done.refused > 0 => {
                debug!(%topic, partition, ?done, "partition index compacted");
            }
            Ok(_) => {}
            Err(e) => warn!(%topic, partition, error = %e, "partition compaction failed"),
        }
    }
}

/// Whether this session holds the `assigner` key.
///
/// # Errors
/// etcd unreachable.
pub async fn is_assigner(session: &Session) -> crate::Result<bool> {
    let mut client = session.client();
    let got = client.get(session.keys().assigner(), None).await?;
    Ok(got
        .kvs()
        .first()
        .is_some_and(|kv| kv.lease() == session.lease()))
}
