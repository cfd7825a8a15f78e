//! The broker: the node's shared state ([`NodeState`]) composed with the services that run on
//! it — the group coordinator, the transaction coordinator and the share partitions (with their
//! share-state coordinator). This is what the request handlers, dispatch, connections and the
//! server hold.
//!
//! [`Broker`] dereferences to its [`NodeState`], so a handler reads `broker.topic(..)` or
//! `broker.config` as the node's and `broker.groups`, `broker.txn`, `broker.share` as the
//! services'. The services themselves take the `NodeState`, never the `Broker`; where one
//! coordinator must reach another (a transaction's markers on `__consumer_offsets` and
//! `__share_group_state`), the broker is their [`Participants`], handed to the transaction
//! coordinator at start.
//!
//! Must not: hold state of its own beyond the services (shared state belongs in
//! [`NodeState`]); be imported by anything below the handlers.

use std::sync::Arc;

use shoal_protocol::ErrorCode;

use crate::config::BrokerConfig;
use crate::coordinators::group_coordinator::GroupService;
use crate::coordinators::txn_coordinator::TxnService;
use crate::metrics::{Scrape, Scraped};
use crate::node::NodeState;
use crate::participants::{Participant, Participants, TxnMarker};
use crate::share::ShareManager;

pub use crate::node::{
    uuid_base64, AdminError, BrokerOptions, CONSUMER_OFFSETS, INTERNAL_DECODE_BYTES_MAX,
};

/// Everything a connection handler needs: the node's state and the services on it.
pub struct Broker {
    /// The node's shared state (also reached through `Deref`).
    pub node: Arc<NodeState>,
    /// The group coordinator (classic and share groups).
    pub groups: GroupService,
    /// The transaction coordinator.
    pub txn: TxnService,
    /// Share partitions, share sessions and share-group state.
    pub share: Arc<ShareManager>,
}

impl std::ops::Deref for Broker {
    type Target = NodeState;

    fn deref(&self) -> &NodeState {
        &self.node
    }
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Broker(node {}, {:?})", self.node_id, self.data_dir)
    }
}

impl Broker {
    /// Opens the node's state ([`NodeState::open`]), then loads and starts the share-state
    /// coordinator, the group coordinator and the transaction coordinator, in that order (the
    /// transaction coordinator's recovery hands markers to the other two).
    ///
    /// # Errors
    /// Another broker holds the directory, or a log cannot be opened or replayed.
    pub async fn open(config: BrokerConfig, options: BrokerOptions) -> anyhow::Result<Arc<Broker>> {
        let share = Arc::new(ShareManager::new(&config)?);
        let node = NodeState::open(config, options).await?;
        let broker = Arc::new(Broker {
            node,
            groups: GroupService::new(),
            txn: TxnService::new(),
            share,
        });
        broker.share.start(&broker.node).await?;
        broker.groups.start(&broker.node).await?;
        broker
            .txn
            .start(&broker.node, Arc::downgrade(&broker))
            .await?;
        Ok(broker)
    }

    /// The metrics in Prometheus text format: the registry, the partitions and the share
    /// partitions as they are now.
    pub fn render_metrics(&self) -> String {
        let live = self.share.in_flight();
        let persisted = self.share.tx_pending_persisted().unwrap_or_default();
        self.metrics.render(&Scrape {
            topics: self.topic_list(),
            share_live: live,
            share_persisted: persisted,
        })
    }
}

impl Scraped for Broker {
    fn render_metrics(&self) -> String {
        Broker::render_metrics(self)
    }
}

/// The broker composes the participants' services, so it hands a transaction's markers to
/// them (see `crate::participants`).
impl Participants for Broker {
    async fn write_share_state_marker(
        &self,
        marker: TxnMarker,
        coordinator_epoch: i32,
    ) -> Result<(), ErrorCode> {
        self.share
            .write_marker(&self.node, marker, coordinator_epoch)
            .await
    }

    async fn apply_offsets_marker(&self, marker: TxnMarker) -> bool {
        self.groups.apply_marker(marker).await.is_ok()
    }

    fn queue_marker_at_start(&self, participant: Participant, marker: TxnMarker) -> bool {
        match participant {
            Participant::Offsets => self.groups.queue_marker(marker).is_ok(),
            Participant::ShareState => self.share.queue_marker_at_start(marker),
        }
    }
}
