//! shoal-core
pub mod group_coordinator;
pub mod hash;
pub mod producer_state;
