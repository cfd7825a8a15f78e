//! Shoal's deterministic state machines.
//!
//! Owns the protocol logic that must be exactly right and therefore exhaustively testable:
//! - [`acl`]: access control lists and the authorizer deciding each action (Kafka's
//!   `StandardAuthorizer` semantics);
//! - [`assignment`]: which broker of a cluster should own each partition, balanced by count
//!   with the fewest moves;
//! - [`coordinator`]: the interface every coordinator gives the broker's one coordinator
//!   runtime (handle an input, emit records and replies, replay records and markers);
//! - [`group_coordinator`]: the classic consumer-group protocol and committed offsets;
//! - [`producer_state`]: per-partition idempotent-producer sequence and epoch checks;
//! - [`txn_coordinator`]: transactional ids, producer epochs and fencing, the transaction
//!   lifecycle (classic and transaction version 2) and the COMMIT/ABORT marker hand-off;
//! - [`share_partition`]: one share group's in-flight records on one topic partition (KIP-932):
//!   acquisition for ShareFetch, acknowledgements, acquisition locks, SPSO/SPEO, and the state
//!   writes that persist them;
//! - [`share_coordinator`]: the `__share_group_state` records (ShareSnapshot, ShareUpdate) in
//!   Kafka's encoding and the share coordinator shard that replays them and merges updates;
//! - [`share_leader`]: the share-partition leader's orders of work around the share-state
//!   coordinator (loading a machine, staging on copies, persisted before put in place), driven
//!   by the broker and the simulator;
//! - [`share_session`]: share consumers' fetch sessions (epochs, partitions, limits);
//! - [`txn_share_ack`]: a TxnShareAcknowledge's order of work across the group and transaction
//!   coordinators and the staging (KIP-1289 §3.2 steps 5–8), driven by the broker's handler
//!   and the simulator;
//! - [`sasl`]: the SASL mechanisms PLAIN and SCRAM-SHA-256/512, server and client side, and
//!   OAUTHBEARER (signed JWTs against a JSON Web Key Set), server side;
//! - [`tls_store`]: PKCS#12 key and trust stores and encrypted PKCS#8 keys decoded from bytes,
//!   for the broker's TLS listeners and the client (pure decoding: callers read the files);
//! - [`hash`]: Java's `String.hashCode` and Kafka's `Utils.abs`, for coordinator partitioning;
//! - [`ids`]: the id types the machines share (producer id and epoch, reply token, topic id,
//!   transaction partition), re-exported from their former modules.
//!
//! Invariants: every input is an explicit argument, time included (`now_ms`); every durable
//! change is returned as a record for the caller to persist, and replaying those records
//! rebuilds the same state. Must not: perform I/O, read clocks, spawn tasks, take locks or
//! depend on the wire messages (`kafka-protocol`) — the broker converts between wire messages
//! and these types. Kafka's byte encoding of the stored records, `ErrorCode` and
//! `DecodeError` come from `shoal-codec`.

pub mod acl;
pub mod assignment;
pub mod coordinator;
pub mod faults;
pub mod group_coordinator;
pub mod hash;
pub mod ids;
pub mod producer_state;
pub mod sasl;
pub mod share_coordinator;
pub mod share_leader;
pub mod share_partition;
pub mod share_session;
pub mod tls_store;
pub mod txn_coordinator;
pub mod txn_share_ack;
