//! The clients of the engines a Shoal cluster runs on (`shared/spec/cluster.md`): **etcd** for
//! broker membership, partition ownership and the commit index, **object storage** for the
//! record bytes. Nothing here is a consensus or replication protocol of Shoal's own: etcd's
//! serializable transactions and leases carry the hard parts, and every commit is fenced
//! inside the etcd transaction that records it.
//!
//! - [`keys`]: where everything lives in etcd, under one prefix per cluster.
//! - [`session`]: a broker's lease, kept alive in the background; what the broker writes under
//!   it (its registration, the partitions it owns) disappears when it stops renewing it.
//! - [`owners`]: claiming and releasing a partition (the owner key's revision is the leader
//!   epoch), and a table of brokers and owners kept current by a watch.
//! - [`assigner`]: one elected broker decides which broker owns what
//!   (`shoal_core::assignment::rebalance`), fenced by its election key; every broker claims
//!   what is assigned to it and releases what is not.
//! - [`membership`]: a broker's background rounds — campaign, assign if assigner, reconcile.
//! - [`commits`]: the commit point — an etcd transaction that compares the owner epoch of every
//!   partition it touches and that each continues exactly at its committed end, then records
//!   the new ends and where the bytes are.
//! - [`compaction`]: a partition's small index entries rewritten by its owner into one
//!   per-partition segment object, swapped in by one fenced transaction, so the index stays
//!   bounded.
//! - [`collector`]: objects no index entry names (replaced by compaction, or a failed or
//!   fenced commit's) deleted once provably unreferenced; etcd's history compacted.
//! - [`retention`]: a partition's log start recorded in etcd and the index entries wholly
//!   below it deleted, fenced (not yet called by the broker).
//! - [`maintenance`]: a broker's background rounds of both.
//! - [`metadata`]: the metadata log every broker replays (appended only right after the last
//!   record read), the cluster id, producer-id blocks.
//! - [`objects`]: immutable objects under names no other write uses, on S3 or in a directory
//!   (fsynced, with its directory, before a commit may name it).
//! - [`restore`]: a new owner's local log brought to exactly the committed records (the
//!   uncommitted truncated, the missing fetched from the objects).
//! - [`status`]: the cluster as etcd records it, for `shoal cluster status`.
//! - [`rig`]: real etcd and S3 servers started on loopback, for tests.
//!
//! Must not: acknowledge anything on a lock or a cached owner alone — only a commit fences; name
//! an object twice; depend on the broker (the broker's seams use this crate, not the reverse).

pub mod assigner;
pub mod collector;
pub mod commits;
pub mod compaction;
pub mod keys;
pub mod maintenance;
pub mod membership;
pub mod metadata;
pub mod objects;
pub mod owners;
pub mod restore;
pub mod retention;
pub mod rig;
pub mod session;
pub mod status;

pub use commits::{commit, CommitRefused, PartitionCommit};
/// The etcd client every engine call takes.
pub use etcd_client::Client as EtcdClient;
pub use keys::Keys;
pub use objects::{ObjectRef, Objects};
pub use owners::{Claim, Owner, OwnerTable};
pub use session::Session;

/// Why an engine call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("object store: {0}")]
    Objects(String),
    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },
}

pub type Result<T> = std::result::Result<T, Error>;
