//! Shoal's async Rust client for Kafka 4.x brokers (Shoal and Apache Kafka), on tokio.
//!
//! # Layering
//!
//! ```text
//!   Producer ──────────┐   ShareConsumer ─────────┐   Admin
//!   (batching, acks,   │   (membership, sessions, │   (topics, configs,
//!    idempotence)      │    poll, acknowledge)    │    groups, features)
//!        │             │         │                │       │
//!   TransactionManager │   ShareAcknowledgements  │       │
//!   (sans-IO)          │   bookkeeping (sans-IO)  │       │
//!        └─────────────┴─────────┴────────────────┴───────┘
//!                                │
//!                             Cluster
//!        bootstrap · metadata · one pipelined BrokerConnection per broker and per coordinator ·
//!        ApiVersions negotiation · timeouts · retries with backoff · reconnection
//!                                │
//!                          shoal-protocol (codec, no I/O)
//! ```
//!
//! - [`Cluster`] is the base every component stands on: a cheap-to-clone, `Send + Sync`
//!   handle. It finds brokers and leaders ([`Cluster::leader`], [`Cluster::topic`]),
//!   coordinators ([`Cluster::coordinator`]), sends any typed request at the highest version
//!   both sides support ([`Cluster::send`], [`Cluster::send_to_coordinator`]) and retries
//!   ([`Cluster::retry`]). Components never open sockets of their own.
//! - Stateful decisions are sans-IO, with time and randomness passed in, so they are tested
//!   exhaustively without a broker: version negotiation ([`versions`]), backoff and retry
//!   budgets ([`backoff`]), the metadata cache and its refresh rules ([`metadata`]).
//!   The async shells ([`cluster`], [`broker`]) only read clocks, sleep and move bytes.
//! - **Producer** ([`Producer`], [`producer`]): an async handle, cheap to clone, over one
//!   sender task. `send` puts a record into the record accumulator
//!   ([`producer::accumulator`]: batching by `batch.size` and `linger.ms`, `buffer.memory`
//!   back-pressure bounded by `max.block.ms`, ordered retries, `delivery.timeout.ms`) at the
//!   partition the partitioner picks ([`producer::partitioner`]: Java's murmur2 for keys,
//!   sticky without), and returns a future of its [`RecordMetadata`]. The sender drains
//!   ready batches, encodes them with `compression.type`, writes one ProduceRequest per
//!   leader with [`Cluster::submit_at_most`] (up to `max.in.flight.requests.per.connection`
//!   in flight per broker on its pipelined connection) and reports each partition's answer
//!   back, in send order. The transaction
//!   manager ([`producer::transaction`], sans-IO: `Uninitialized → Ready → InTransaction →
//!   Committing/Aborting → Ready`, plus `AbortableError` and `FatalError`) owns the producer
//!   id and epoch, the sequences of idempotent batches (idempotence is on by default) and
//!   what the open transaction holds: partitions, consumer-group offsets
//!   (`send_offsets_to_transaction`, TxnOffsetCommit to the group coordinator) and — for
//!   KIP-1289 — share acknowledgements, each an *operation* admitted only in
//!   `InTransaction`; the sender sends its coordinator requests (InitProducerId,
//!   AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) to [`CoordinatorType::Transaction`].
//!   Transaction version 2 (KIP-890: partitions added by Produce v12+, the epoch bumped at
//!   every EndTxn) is used when the cluster finalizes `transaction.version` ≥ 2 (read from
//!   [`ApiVersions::finalized_feature`]), version 1 otherwise. Errors keep the Java
//!   client's classes ([`producer::errors`]).
//!   [`Producer::send_share_acknowledgements_to_transaction`] is one more operation
//!   (`Operation::ShareAcknowledgements`) per TxnShareAcknowledge, one request per leader of
//!   the acknowledged share partitions carrying all of that leader's partitions (staged all
//!   or nothing); no commit is sent while one is unanswered or after one failed.
//!   [`TransactionalShareAcknowledger`] is a transactional producer that sends no records:
//!   begin, TxnShareAcknowledge, commit per call.
//! - **ShareConsumer** ([`ShareConsumer`], [`share_consumer`]): membership over
//!   ShareGroupHeartbeat on the group coordinator's connection, from a heartbeat task
//!   ([`share_consumer::membership`], sans-IO: a client-generated member id, epoch,
//!   assignment by topic id, rejoin with epoch 0 after FENCED_MEMBER_EPOCH or
//!   UNKNOWN_MEMBER_ID, leave with -1); one share session per leader (ShareFetch epochs 0,
//!   1, 2, ... and -1 to close), each behind an async mutex so every request carries the
//!   session's next epoch; and the sans-IO acknowledgement book
//!   ([`share_consumer::acknowledgements`]): per topic-partition, the records delivered and
//!   not yet acknowledged, the acknowledgements pending (piggybacked on the next ShareFetch
//!   to the partition's leader, or sent by `commit_sync` / `commit_async` in
//!   ShareAcknowledge, or by `close` with epoch -1), and — for KIP-1289 — acknowledgements
//!   *drained for a transaction*, which the consumer never sends itself (not on fetch, not
//!   on close) and which `acknowledgements_for_transaction()` hands to the producer as a
//!   [`ShareAcknowledgements`] value, sent with the member's [`ShareGroupMetadata`]
//!   (`share_group_metadata()`; [`share_consumer::transactional`]). Fetched batches are decoded bounded
//!   ([`share_consumer::records`]); each [`share_consumer::ShareRecord`] carries its
//!   delivery count and the acquisition-lock timeout of the answer it came in.
//! - [`Admin`] ([`admin`]): topics, configs (topic, broker, GROUP), share groups, features
//!   and transactions over [`Cluster::send`], [`Cluster::send_any`] and
//!   [`Cluster::send_to_coordinator`], each answer mapped to typed results in Kafka's
//!   per-item shape ([`admin::ItemResults`]: one `Result` per topic, resource or group asked,
//!   in the order asked; a missing item is [`Error::IncompleteResponse`]). Whole requests
//!   are retried per [`ErrorClass`]; single items on NOT_CONTROLLER, NOT_COORDINATOR and
//!   COORDINATOR_LOAD_IN_PROGRESS, as Kafka's admin client retries them.
//!
//! # Errors
//!
//! [`Error`] carries the Kafka error code ([`Error::code`]) and its class ([`ErrorClass`]:
//! retriable, abortable, fatal), as the Java client classifies them; the cluster layer retries
//! only retriable errors and refreshes metadata on NOT_LEADER_OR_FOLLOWER,
//! UNKNOWN_TOPIC_OR_PARTITION and UNKNOWN_TOPIC_ID ([`Error::requires_metadata_refresh`]),
//! and requests a metadata update in the background, using the cache meanwhile, when a broker
//! cannot be reached ([`Error::requires_metadata_update`], [`Cluster::request_metadata_update`]).
//! An api the broker lacks is [`Error::UnsupportedVersion`] before anything is sent.
//! The producer's transaction errors are [`Error::Transaction`], fatal (fenced: close the
//! producer) or abortable (abort the transaction and go on); a record that failed is
//! [`Error::Kafka`] with the partition's code (REQUEST_TIMED_OUT after
//! `delivery.timeout.ms`). A share consumer call the acknowledgement book refuses (an
//! acknowledgement in implicit mode, a poll with the last poll's records unacknowledged in
//! explicit mode) is [`Error::ShareAcknowledgement`], and changes nothing.
//!
//! # Untrusted responses
//!
//! Every response frame is bounded by `receive.message.max.bytes` before anything is
//! allocated, and read into a buffer that grows with the bytes that arrive. Decoding errors,
//! wrong correlation ids and impossible metadata (duplicate brokers, gaps in partition
//! numbers, more than the [`metadata`] limits) are [`Error::MalformedResponse`], and the
//! connection is dropped. One hazard remains outside this crate's reach: `kafka-protocol`
//! 0.18 sizes an array with `Vec::with_capacity(n)` from the wire before reading it, so a
//! hostile frame can request a huge allocation, and an allocation failure aborts the process
//! (decision 0002). A process that talks to brokers it does not trust should install
//! [`shoal_protocol::alloc::ReserveLazily`] as its global allocator, as Shoal's own binaries
//! and this crate's tests do; the fix proper is bounded decoders (upstream, or ours).
//!
//! # The raw [`Connection`]
//!
//! [`Connection`] stays what it was: one socket, requests at the version the caller names, no
//! negotiation or retries. The broker's integration tests use it to send exact bytes.
//!
//! # Quick start
//!
//! A producer (idempotent by default) and a transaction:
//!
//! ```no_run
//! use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
//!
//! # async fn run() -> Result<(), shoal_client::Error> {
//! let config = ProducerConfig::from_properties([
//!     ("bootstrap.servers", "127.0.0.1:9092"),
//!     ("linger.ms", "5"),
//!     ("compression.type", "zstd"),
//! ])?;
//! let producer = Producer::new(config).await?;
//! // `send` waits for room in the buffer; the future it returns, for the broker's answer.
//! let delivery = producer.send(ProducerRecord::new("orders", "hello").with_key("id-1")).await?;
//! let written = delivery.await?;
//! println!("{}-{} at offset {}", written.topic, written.partition, written.offset);
//! producer.close().await;
//!
//! let config = ProducerConfig::from_properties([
//!     ("bootstrap.servers", "127.0.0.1:9092"),
//!     ("transactional.id", "orders-enricher"),
//! ])?;
//! let producer = Producer::new(config).await?;
//! producer.init_transactions().await?; // fences older producers with this id
//! producer.begin_transaction()?;
//! producer.send(ProducerRecord::new("orders", "a")).await?;
//! producer.send(ProducerRecord::new("orders", "b")).await?;
//! match producer.commit_transaction().await {
//!     Ok(()) => {}
//!     Err(e) if e.requires_abort() => producer.abort_transaction().await?,
//!     Err(e) => return Err(e), // fatal: fenced, unsupported, not authorized
//! }
//! producer.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! A share consumer in explicit mode (every record of a poll acknowledged before the next):
//!
//! ```no_run
//! use shoal_client::share_consumer::{AcknowledgeType, ShareConsumer, ShareConsumerConfig};
//!
//! # async fn run() -> Result<(), shoal_client::Error> {
//! let config = ShareConsumerConfig::from_properties([
//!     ("bootstrap.servers", "127.0.0.1:9092"),
//!     ("group.id", "order-workers"),
//!     ("share.acknowledgement.mode", "explicit"),
//! ])?;
//! let mut consumer = ShareConsumer::new(config).await?;
//! consumer.subscribe(["orders"]);
//! for record in consumer.poll(std::time::Duration::from_secs(1)).await? {
//!     println!("{}-{}@{} delivery {}", record.topic, record.partition, record.offset,
//!              record.delivery_count);
//!     consumer.acknowledge(&record, AcknowledgeType::Accept)?;
//! }
//! consumer.commit_sync().await?; // or let the next poll carry the acknowledgements
//! consumer.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! Exactly once from a queue (KIP-1289; Shoal with `share.version` 3): the output and the
//! acknowledgements of the records it came from commit in one transaction, or neither does
//! and the records come back.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
//! use shoal_client::share_consumer::{AcknowledgeType, ShareConsumer, ShareConsumerConfig};
//!
//! # async fn run() -> Result<(), shoal_client::Error> {
//! let mut consumer = ShareConsumer::new(ShareConsumerConfig::from_properties([
//!     ("bootstrap.servers", "127.0.0.1:9092"),
//!     ("group.id", "enrichers"),
//!     ("share.acknowledgement.mode", "explicit"),
//! ])?)
//! .await?;
//! consumer.subscribe(["orders"]);
//! let producer = Producer::new(ProducerConfig::from_properties([
//!     ("bootstrap.servers", "127.0.0.1:9092"),
//!     ("transactional.id", "enricher-1"),
//! ])?)
//! .await?;
//! producer.init_transactions().await?;
//! loop {
//!     let records = consumer.poll(Duration::from_secs(1)).await?;
//!     if records.is_empty() {
//!         continue;
//!     }
//!     producer.begin_transaction()?;
//!     for r in &records {
//!         let value = r.value.clone().unwrap_or_default();
//!         producer.send(ProducerRecord::new("enriched", value)).await?;
//!         consumer.acknowledge(r, AcknowledgeType::Accept)?;
//!     }
//!     // Taken out of the consumer: it will never send these itself.
//!     let acks = consumer.acknowledgements_for_transaction()?;
//!     let metadata = consumer.share_group_metadata();
//!     let result = match producer
//!         .send_share_acknowledgements_to_transaction(&acks, &metadata)
//!         .await
//!     {
//!         Ok(()) => producer.commit_transaction().await,
//!         Err(e) => Err(e),
//!     };
//!     match result {
//!         Ok(()) => {}
//!         // A rebalance (STALE_MEMBER_EPOCH) or a failed send: the records come back.
//!         Err(e) if e.requires_abort() => producer.abort_transaction().await?,
//!         Err(e) => return Err(e), // fenced by a newer instance: stop
//!     }
//! }
//! # }
//! ```
//!
//! The cluster layer on its own:
//!
//! ```no_run
//! use shoal_client::{ClientConfig, Cluster};
//!
//! # async fn run() -> Result<(), shoal_client::Error> {
//! let config = ClientConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?;
//! let cluster = Cluster::connect(config).await?;
//! let leader = cluster.leader("orders", 0).await?;
//! let versions = cluster.api_versions(leader).await?;
//! println!("leader {leader}, Produce v{}", versions.version(shoal_protocol::ApiKey::Produce)?);
//! cluster.close().await;
//! # Ok(())
//! # }
//! ```

pub mod admin;
pub mod backoff;
pub mod broker;
pub mod cluster;
pub mod config;
mod connection;
pub mod error;
pub mod log_reader;
pub mod metadata;
pub mod producer;
pub mod security;
pub mod share_consumer;
pub mod versions;

// Decoding arbitrary bytes in the unit tests must not abort them (decision 0002).
#[cfg(test)]
#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

pub use admin::Admin;
pub use broker::{BrokerConnection, PendingResponse};
pub use cluster::{Cluster, ClusterStats, CoordinatorType};
pub use config::{ClientConfig, ClientConfigBuilder};
pub use connection::{correlation_id, ClientError, Connection, RESPONSE_BYTES_MAX};
pub use error::{Error, ErrorClass};
pub use producer::{
    Producer, ProducerConfig, ProducerRecord, RecordMetadata, TransactionalShareAcknowledger,
};
pub use share_consumer::{
    ShareAcknowledgements, ShareConsumer, ShareConsumerConfig, ShareGroupMetadata,
};
pub use versions::ApiVersions;
