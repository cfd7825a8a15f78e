//! The producer: [`Producer`] (the async handle) and its sender task ([`sender`]), built on
//! parts that decide without doing I/O: the transaction manager ([`transaction`]), the error
//! classes of transactional requests ([`errors`]), the partitioner ([`partitioner`]) and the
//! record accumulator that batches records and orders their retries ([`accumulator`]).
//! Settings are in [`config`].

pub mod accumulator;
pub mod config;
pub mod errors;
pub mod partitioner;
#[allow(clippy::module_inception)]
mod producer;
mod sender;
pub mod transaction;

pub use config::{Acks, ProducerConfig, ProducerConfigBuilder};
pub use producer::{
    ConsumerGroupMetadata, DeliveryFuture, Producer, ProducerRecord, RecordMetadata,
};
pub use transaction::TopicPartition;
