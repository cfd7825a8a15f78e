//! The producer: [`Producer`] (the async handle) and its sender task, built on parts that
//! decide without doing I/O: the transaction manager ([`transaction`]), the error classes of
//! transactional requests ([`errors`]), the partitioner ([`partitioner`]) and the record
//! accumulator that batches records and orders their retries ([`accumulator`]). Settings
//! are in [`config`].
//!
//! `send` has two steps, as in the Java client and unlike rdkafka's `FutureProducer::send`:
//! awaiting `send` puts the record into a batch (this is where `max.block.ms`
//! back-pressure waits), and the [`DeliveryFuture`] it returns resolves when the broker has
//! answered. An application can thus keep many records in flight from one task, and the
//! order of `send` calls is the order records of a partition are written in.
//!
//! Delivery: with idempotence (the default; `acks=all`, at most five requests in flight) a
//! record is written once, in order, through retries and broker restarts; an acknowledged
//! record was written (Shoal: fsynced). Without it, retries may duplicate. A transaction
//! commits only if every record sent in it was written. After a batch of an idempotent
//! producer fails for good, its sequence would leave a gap the broker refuses, so the
//! producer takes a new producer id or epoch (KIP-360) and restarts its sequences; a batch
//! being retried across that restart may then be written twice, as with the Java client.
//!
//! Up to `max.in.flight.requests.per.connection` (default 5) Produce requests are in flight
//! per broker on its pipelined connection, applied in the order they were sent.
//!
//! Limitations now: `flush` waits for every record buffered, including those sent while it
//! waits.

pub mod accumulator;
mod acknowledger;
pub(crate) mod batch;
pub mod config;
pub mod errors;
pub mod partitioner;
#[allow(clippy::module_inception)]
mod producer;
mod sender;
mod share_acks;
mod shared;
pub mod transaction;

pub use acknowledger::TransactionalShareAcknowledger;
pub use config::{Acks, ProducerConfig, ProducerConfigBuilder};
pub use producer::{ConsumerGroupMetadata, DeliveryFuture, Producer, ProducerRecord};
pub use shared::RecordMetadata;
pub use transaction::{
    ParsePreparedTxnStateError, PreparedOutcome, PreparedTxnState, TopicPartition, TxnState,
};
