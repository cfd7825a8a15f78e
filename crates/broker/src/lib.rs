//! The Shoal broker: the I/O shell around the sans-IO core.
//!
//! Owns sockets, tasks, clocks, fsync and the translation between Kafka wire messages and the
//! core's types. Layout, from the top layer down (a module imports only modules below it):
//! - network: [`server`]: listener, shutdown, background tasks; [`conn_limits`]:
//!   `max.connections` and per-address limits; [`connection`]: one client connection, requests
//!   answered in order; [`authenticator`]: a SASL listener's authentication conversation;
//!   [`tls`]: SSL and SASL_SSL listeners' TLS settings; [`transport`]: plain or TLS streams;
//!   [`x500`]: a client certificate's subject, for its principal; [`principal_mapper`]: Kafka's
//!   `ssl.principal.mapping.rules` from that subject to the principal's name; [`outbound`]: response frames, record bytes sent from segment files
//!   with `sendfile`.
//! - dispatch: [`dispatch`]: request → handler.
//! - handlers: [`handlers`]: one module per API family; none writes to the socket. With them,
//!   the server's background work: [`retention`] (periodic retention and time-based
//!   flushing) and [`cleaner`] (log compaction).
//! - [`broker`]: the [`Broker`] the layers above hold: the node's state composed with the
//!   services below; it is the transaction coordinator's way to the other coordinators
//!   ([`participants::Participants`]).
//! - services: [`share`]: share partitions and the share-group state they persist;
//!   [`coordinators`]: the one coordinator runtime and the group, transaction and share-state
//!   coordinators on it (records in `__consumer_offsets`, `__transaction_state`,
//!   `__share_group_state`); [`participants`]: how a transaction's markers reach those
//!   topics' coordinators; [`peers`]: the requests sent to the other brokers of a cluster
//!   (transaction markers for the partitions they own).
//! - partition operations: [`markers`]: transaction markers on partitions; [`leadership`]:
//!   what this node serves; [`takeover`]: reopening a partition this node comes to own;
//!   [`metadata_follower`]: applying the metadata other brokers of a cluster change;
//!   [`cluster_member`]: joining a cluster (the seams over etcd and object storage, the lease,
//!   the membership rounds).
//! - node state: [`node`]: the [`NodeState`] every service takes — configuration, identity,
//!   the topic registry, the metadata log and the admin operations, the seams, metrics,
//!   producer ids.
//! - storage and below: [`seams`]: the clock, ownership of partitions, the commit point
//!   (group-commit fsync on one node) and the metadata store, each behind a trait a cluster
//!   implements; [`metrics`]: the registry and the Prometheus endpoint; [`topic_registry`]: topic
//!   registry and partition logs; [`cluster_metadata`]: topic metadata as records in the
//!   `__cluster_metadata` log; [`producer_state`]: producer ids and per-partition producer state
//!   (idempotent producer, ongoing transactions, last stable offset); [`config`],
//!   [`group_configs`], [`feature_levels`]: Kafka-named configuration and feature levels;
//!   [`api_table`]: the APIs served, and those a feature level gates.
//!
//! Embedding: a process that runs the broker must install
//! `shoal_protocol::alloc::ReserveLazily` as its global allocator (the `shoal` binary does), or a
//! malformed frame can abort it; see that module.
//!
//! Must not: panic on bytes from the network or disk (bad input is an error code or a closed
//! connection), hold a partition lock across an await, or fsync under a partition lock.

pub mod api_table;
pub mod archiving;
pub mod authenticator;
pub mod authorization;
pub mod broker;
pub mod cleaner;
pub mod cluster_member;
pub mod cluster_metadata;
pub mod config;
pub mod conn_limits;
pub mod connection;
pub mod coordinators;
pub mod dead_letter;
pub mod dispatch;
pub mod feature_levels;
pub mod group_configs;
pub mod handlers;
pub mod leadership;
pub mod markers;
pub mod metadata_follower;
pub mod metrics;
pub mod node;
pub mod outbound;
pub mod participants;
pub mod peers;
pub mod principal_mapper;
pub mod producer_state;
pub mod retention;
pub mod seams;
pub mod server;
pub mod share;
pub mod share_state;
pub mod takeover;
pub mod tls;
pub mod topic_registry;
pub mod transport;
pub mod x500;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use node::{BrokerOptions, NodeState};
