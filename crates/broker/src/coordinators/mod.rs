//! The coordinators: one runtime ([`runtime`]) that drives every coordinator's sans-IO shard
//! the same way, and each coordinator's place in the broker (its topic, configuration and
//! effects).
//!
//! They run on the node's state (`crate::node::NodeState`) and are composed into the broker by
//! `crate::broker`. Must not: import the broker, the share partitions or a handler; reach
//! another coordinator's service other than through what it is handed at start (the
//! transaction coordinator's `crate::participants::Participants`).

pub mod group_coordinator;
pub mod log_io;
pub mod runtime;
pub mod share_coordinator;
pub mod txn_coordinator;
