//! The coordinators: one runtime ([`runtime`]) that drives every coordinator's sans-IO shard
//! the same way, and each coordinator's place in the broker (its topic, configuration and
//! effects).

pub mod group_coordinator;
pub mod log_io;
pub mod runtime;
pub mod share_coordinator;
pub mod txn_coordinator;
