//! The producer's parts that decide without doing I/O: the transaction manager
//! ([`transaction`]) and the error classes of transactional requests ([`errors`]). The
//! producer built on them (batching, partitioning, the sender) comes with issue 11.

pub mod errors;
pub mod transaction;
