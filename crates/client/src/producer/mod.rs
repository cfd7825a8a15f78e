//! The producer's parts that decide without doing I/O: the transaction manager
//! ([`transaction`]), the error classes of transactional requests ([`errors`]), the
//! partitioner ([`partitioner`]) and the record accumulator that batches records and orders
//! their retries ([`accumulator`]). The producer built on them (the sender and its
//! connections) comes with issue 11.

pub mod accumulator;
pub mod errors;
pub mod partitioner;
pub mod transaction;
