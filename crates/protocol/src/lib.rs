//! Kafka wire codec for Shoal.
//!
//! Owns: length-prefixed framing with a size limit ([`frame`]), request-header parsing and the
//! request/response enums over the `kafka-protocol` crate's message types ([`request`],
//! [`response`]), responses whose records are sent apart from the rest ([`splice`]), hand-written codecs for the share RPC versions that crate lacks ([`share`]), the
//! codec's version range per api key and the table of APIs a broker can advertise ([`api`]) and
//! Kafka's error codes ([`ErrorCode`]).
//!
//! Must not: perform I/O, spawn tasks, read clocks or panic on bytes from the network. Every
//! decoding failure is a typed [`request::RequestError`] that the broker turns into the reply a
//! Kafka client expects (or, for frames Kafka itself would reject, a closed connection).

pub mod alloc;
pub mod api;
pub mod api_key;
/// Kafka's error codes: [`ErrorCode`] lives in `shoal-codec`, re-exported here.
pub mod error {
    pub use shoal_codec::ErrorCode;
}
pub mod frame;
pub mod init_producer_id;
pub mod request;
pub mod response;
pub mod share;
pub mod splice;

pub use api_key::{ApiKey, TXN_SHARE_ACKNOWLEDGE_KEY};
pub use error::ErrorCode;
pub use kafka_protocol;
pub use uuid;
/// `kafka-protocol`'s messages, with its `ApiKey` replaced by [`api_key::ApiKey`] (the same keys
/// plus the ones Shoal decodes that `kafka-protocol` lacks).
pub mod messages {
    pub use crate::api_key::ApiKey;
    pub use kafka_protocol::messages::*;
}
pub use kafka_protocol::protocol::StrBytes;
pub use request::{decode_request, peek_header, Request, RequestError, RequestFrame};
pub use response::{encode_response, Response};
