//! The seams a cluster needs (issue 28, decision 0018): the broker reaches time, ownership
//! and durable storage only through these traits, each with today's single-node
//! implementation and a simulated one for tests.
//!
//! - [`clock`]: wall-clock milliseconds ([`clock::SystemClock`], [`clock::ManualClock`]);
//! - [`ownership`]: which node owns a partition, and so a coordinator or a share partition,
//!   under which epoch ([`ownership::SingleNode`], [`ownership::Assignments`], and a
//!   cluster's [`ownership::EtcdOwnership`] over `shoal_cluster`);
//! - [`durability`]: the commit point of every partition write, fenced by the owner epoch
//!   ([`durability::LocalDisk`], [`durability::FailingCommits`], and a cluster's
//!   [`object_commits::ObjectCommits`]: an object, then a fenced etcd transaction), and where
//!   a partition's log start is recorded before its local log moves it (nowhere on one node);
//! - [`metadata_store`]: the metadata records and the cluster id
//!   ([`metadata_store::LocalMetadataLog`], [`metadata_store::MemoryMetadataStore`], and a
//!   cluster's [`metadata_store::EtcdMetadataStore`]), and where producer ids are reserved.
//!
//! Reads and appends of a partition go through its `topics::Partition` (the owner's log);
//! what makes them durable, and whether this node may make them so, is decided here.

pub mod clock;
pub mod durability;
pub mod metadata_store;
pub mod object_commits;
pub mod ownership;

use std::sync::Arc;

use clock::Clock;
use durability::Durability;
use metadata_store::MetadataStore;
use ownership::Ownership;

/// Implementations to use instead of the single node's (tests and simulations); each one
/// left `None` is today's.
#[derive(Debug, Clone, Default)]
pub struct SeamOverrides {
    pub clock: Option<Arc<dyn Clock>>,
    pub ownership: Option<Arc<dyn Ownership>>,
    /// Defaults to [`durability::LocalDisk`] over the ownership in use.
    pub durability: Option<Arc<dyn Durability>>,
    pub metadata: Option<Arc<dyn MetadataStore>>,
    /// Where producer ids are reserved in blocks; defaults to a file of the data directory.
    pub producer_ids: Option<Arc<dyn metadata_store::ProducerIdBlocks>>,
    /// Where transaction-coordinator epochs come from; defaults to a file of the data
    /// directory ([`metadata_store::EpochFile`]).
    pub coordinator_epochs: Option<Arc<dyn metadata_store::CoordinatorEpochs>>,
}
