//! A broker as a member of a cluster (`shared/spec/cluster.md`): `shoal serve --node-id N
//! --metadata-store etcd://… --object-store URL`.
//!
//! [`ClusterMember::join`] connects to etcd and the object store, takes a lease and returns
//! the seams the broker opens with — ownership from etcd's owner keys
//! ([`crate::seams::ownership::EtcdOwnership`]), commits as an object plus a fenced etcd
//! transaction ([`crate::seams::object_commits::ObjectCommits`]), the shared metadata log,
//! cluster id and producer-id blocks ([`crate::seams::metadata_store::EtcdMetadataStore`]).
//! Once the broker is open and listening, [`ClusterMember::start`] registers its endpoint and
//! starts its membership rounds over every partition of every topic it knows: the elected
//! assigner spreads them over the live brokers, each broker claims what is assigned to it,
//! and the broker's takeover task (`crate::takeover`) reopens what it comes to own. Its
//! upkeep (`shoal_cluster::maintenance`, every 30 s) compacts the index of each partition it
//! owns into segment objects and, while it is the assigner, deletes unreferenced objects and
//! compacts etcd's history.
//!
//! When the lease is lost (the process was paused, or cut off from etcd, past the session
//! timeout) the broker's owner keys are gone and every later commit of it is fenced; it stops
//! ([`ClusterMember::lost`]) rather than serve from a state others have moved past, and is
//! started again as a new member. A clean stop revokes the lease ([`ClusterMember::leave`]) so
//! the others take its partitions over at once instead of after the timeout.
//!
//! Not yet: the internal topics' coordinators follow ownership only at start (they replay
//! what they own then); reloading a coordinator partition taken over at run time is issue 29's
//! next step.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use shoal_cluster::maintenance::{self, Maintenance};
use shoal_cluster::membership::{Membership, Partitions};
use shoal_cluster::session::{self, Session};
use shoal_cluster::{Keys, Objects, OwnerTable};
use tracing::info;

use crate::node::NodeState;
use crate::seams::metadata_store::EtcdMetadataStore;
use crate::seams::object_commits::ObjectCommits;
use crate::seams::ownership::EtcdOwnership;
use crate::seams::SeamOverrides;

/// How often a broker campaigns, assigns (as assigner) and claims what is assigned to it.
const MEMBERSHIP_PERIOD: Duration = Duration::from_millis(500);
/// How long etcd may take to answer a call.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the lease is checked for loss.
const LOST_CHECK: Duration = Duration::from_millis(200);

/// Where a cluster member finds the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub node_id: i32,
    /// `etcd://HOST:PORT[,HOST:PORT…]`.
    pub metadata_store: String,
    /// `s3://BUCKET?endpoint=…` or `file:///DIR`.
    pub object_store: String,
    /// Several clusters may share one etcd: each under its own name.
    pub cluster_name: String,
    /// Kafka's `broker.session.timeout.ms`: the lease; a broker silent that long loses what it
    /// owns.
    pub session_timeout: Duration,
}

/// This broker's membership of a cluster.
pub struct ClusterMember {
    node_id: i32,
    session: Arc<Session>,
    table: Arc<OwnerTable>,
    objects: Objects,
    membership: Option<Membership>,
    maintenance: Option<Maintenance>,
}

impl std::fmt::Debug for ClusterMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterMember")
            .field("node_id", &self.node_id)
            .field("lease", &self.session.lease())
            .finish_non_exhaustive()
    }
}

impl ClusterMember {
    /// Connects to the cluster's engines and takes a lease; returns the member and the seams
    /// to open the broker with.
    ///
    /// # Errors
    /// A malformed URL, etcd or the object store unreachable.
    pub async fn join(options: &ClusterOptions) -> anyhow::Result<(ClusterMember, SeamOverrides)> {
        let endpoints = session::endpoints_from_url(&options.metadata_store)?;
        let objects = Objects::from_url(&options.object_store)?;
        let keys = Keys::new(&options.cluster_name)?;
        let client = session::connect(&endpoints, ETCD_TIMEOUT).await?;
        let ttl = i64::try_from(options.session_timeout.as_secs().max(2)).unwrap_or(i64::MAX);
        let session = Arc::new(Session::start(client.clone(), keys.clone(), ttl).await?);
        let table = Arc::new(OwnerTable::start(client.clone(), keys.clone()).await?);
        let proposed_id = crate::node::uuid_base64(uuid::Uuid::new_v4());
        let metadata = Arc::new(EtcdMetadataStore::open(client, keys, &proposed_id).await?);
        let seams = SeamOverrides {
            ownership: Some(Arc::new(EtcdOwnership::new(options.node_id, table.clone()))),
            durability: Some(Arc::new(
                ObjectCommits::new(
                    options.node_id,
                    session.clone(),
                    table.clone(),
                    objects.clone(),
                )
                // A PUT outliving the lease would commit for an owner that may be gone.
                .with_put_deadline(options.session_timeout),
            )),
            metadata: Some(metadata.clone()),
            producer_ids: Some(metadata.clone()),
            coordinator_epochs: Some(metadata),
            ..SeamOverrides::default()
        };
        let member = ClusterMember {
            node_id: options.node_id,
            session,
            table,
            objects,
            membership: None,
            maintenance: None,
        };
        Ok((member, seams))
    }

    /// Registers `endpoint` (`host:port`, as clients reach this broker) and starts the
    /// membership rounds over the partitions of every topic `node` knows.
    ///
    /// # Errors
    /// The node id is registered by another live broker (after waiting out one lease, which a
    /// crashed previous process of this broker may still hold), or etcd is unreachable.
    pub async fn start(&mut self, node: &Arc<NodeState>, endpoint: &str) -> anyhow::Result<()> {
        // A broker restarted after a crash finds its previous process's registration until
        // that lease expires: it waits that long, no longer.
        let deadline = tokio::time::Instant::now()
            + Duration::from_secs(self.session.ttl_secs().unsigned_abs() + 1);
        loop {
            match self.session.register(self.node_id, endpoint).await {
                Ok(()) => break,
                Err(shoal_cluster::Error::Invalid { .. })
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(LOST_CHECK).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Serve only once this broker sees itself registered: Metadata names the live brokers
        // (and one as the controller), and a client told of none has nowhere to go.
        let seen_by = tokio::time::Instant::now() + ETCD_TIMEOUT;
        while !self
            .table
            .brokers()
            .iter()
            .any(|b| b.node_id == self.node_id)
        {
            if tokio::time::Instant::now() >= seen_by {
                anyhow::bail!(
                    "registered, but not seen in etcd's broker list within {ETCD_TIMEOUT:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let weak: Weak<NodeState> = Arc::downgrade(node);
        let partitions: Partitions = Arc::new(move || {
            let Some(node) = weak.upgrade() else {
                return BTreeSet::new();
            };
            node.topic_list()
                .iter()
                .flat_map(|t| (0..t.partition_count() as i32).map(|index| (t.name.clone(), index)))
                .collect()
        });
        self.membership = Some(Membership::start(
            self.session.clone(),
            self.node_id,
            self.table.clone(),
            partitions,
            MEMBERSHIP_PERIOD,
        ));
        self.maintenance = Some(Maintenance::start(
            self.session.clone(),
            self.node_id,
            self.table.clone(),
            self.objects.clone(),
            maintenance::Options::default(),
        ));
        info!(
            node_id = self.node_id,
            endpoint,
            lease = self.session.lease(),
            "joined the cluster"
        );
        Ok(())
    }

    /// Resolves when this broker's lease is lost: it owns nothing any more and must stop.
    pub async fn lost(&self) {
        while !self.session.is_lost() {
            tokio::time::sleep(LOST_CHECK).await;
        }
    }

    /// Leaves the cluster cleanly: no more rounds, the lease revoked so that what this broker
    /// owned is taken over at once.
    ///
    /// # Errors
    /// etcd unreachable (the lease then expires on its own).
    pub async fn leave(mut self) -> anyhow::Result<()> {
        self.membership = None;
        self.maintenance = None;
        self.session.revoke().await?;
        info!(node_id = self.node_id, "left the cluster");
        Ok(())
    }
}
