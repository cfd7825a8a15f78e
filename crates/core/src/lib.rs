//! shoal-core
pub mod group_coordinator;
pub mod hash;
