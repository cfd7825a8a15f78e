//! The Shoal broker: the I/O shell around the sans-IO core.
//!
//! Owns sockets, tasks, clocks, fsync and the translation between Kafka wire messages and the
//! core's types. Layout:
//! - [`server`]: listener, shutdown; [`conn_limits`]: `max.connections` and per-address limits; [`connection`]: one client connection,
//!   requests answered in order; [`dispatch`]: request → handler; [`outbound`]: response
//!   frames, record bytes sent from segment files with `sendfile`.
//! - [`handlers`]: one module per API family; none writes to the socket.
//! - [`broker`]: shared state and admin operations; [`topics`]: topic registry and partition
//!   logs; [`meta`]: topic metadata as records in the `__cluster_metadata` log.
//! - [`seams`]: the clock, ownership of partitions, the commit point (group-commit fsync on
//!   one node) and the metadata store, each behind a trait a cluster implements;
//!   [`retention`]: periodic retention and time-based flushing.
//! - [`coordinators`]: the one coordinator runtime and the group and transaction
//!   coordinators on it (records in `__consumer_offsets`, `__transaction_state`); [`share`]:
//!   share partitions and the share-group state they persist.
//! - [`api_table`]: the APIs served, and those a feature level gates.
//! - [`producers`]: producer ids and per-partition producer state (idempotent producer,
//!   ongoing transactions, last stable offset); [`markers`]: transaction markers on partitions.
//! - [`config`]: Kafka-named configuration; [`metrics`]: Prometheus endpoint.
//!
//! Embedding: a process that runs the broker must install
//! `shoal_protocol::alloc::ReserveLazily` as its global allocator (the `shoal` binary does), or a
//! malformed frame can abort it; see that module.
//!
//! Must not: panic on bytes from the network or disk (bad input is an error code or a closed
//! connection), hold a partition lock across an await, or fsync under a partition lock.

pub mod api_table;
pub mod broker;
pub mod cleaner;
pub mod config;
pub mod conn_limits;
pub mod connection;
pub mod coordinators;
pub mod dispatch;
pub mod features;
pub mod group_configs;
pub mod handlers;
pub mod leadership;
pub mod markers;
pub mod meta;
pub mod metrics;
pub mod outbound;
pub mod participants;
pub mod producers;
pub mod retention;
pub mod seams;
pub mod server;
pub mod share;
pub mod topics;

pub use broker::{Broker, BrokerOptions};
pub use config::BrokerConfig;
