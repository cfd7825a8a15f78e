//! Shoal's async Rust client.
//!
//! Today this crate holds the protocol-level [`Connection`]: one TCP connection that sends
//! typed Kafka requests and reads typed responses, in order. The broker's integration tests and
//! the CLI's admin commands use it. The high-level Producer, Consumer, ShareConsumer and
//! TransactionalShareAcknowledger of `shared/DESIGN.md` are built on it in later steps.

mod connection;

pub use connection::{correlation_id, ClientError, Connection, RESPONSE_BYTES_MAX};
