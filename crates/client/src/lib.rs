//! Shoal's async Rust client.
//!
//! Today this crate holds the protocol-level [`Connection`]: one TCP connection that sends
//! typed Kafka requests and reads typed responses, in order, and the sans-IO parts of the
//! cluster layer: version negotiation ([`versions`]), backoff and retry budgets ([`backoff`]),
//! the metadata cache ([`metadata`]), typed errors ([`Error`]) and [`ClientConfig`].

pub mod backoff;
pub mod config;
mod connection;
pub mod error;
pub mod metadata;
pub mod versions;

pub use config::{ClientConfig, ClientConfigBuilder};
pub use connection::{correlation_id, ClientError, Connection, RESPONSE_BYTES_MAX};
pub use error::{Error, ErrorClass};
pub use versions::ApiVersions;
