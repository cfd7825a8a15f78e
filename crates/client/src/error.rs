//! [`Error`]: why a client operation failed, with the Kafka error code when the broker gave one,
//! and its class ([`ErrorClass`]) in the Java client's terms.
//!
//! The class is what a caller decides on: retry the operation (the cluster layer does that
//! itself, within `retries` and `default.api.timeout.ms`), abort the transaction and go on
//! with the same producer, or give the producer up. The producer's transaction manager will
//! read it; the cluster layer only ever retries [`ErrorClass::Retriable`] errors.

use std::time::Duration;

use shoal_protocol::{ApiKey, ErrorCode};

use crate::producer::transaction::TxnErrorKind;

/// What a caller can do after an [`Error`] (Java client: `RetriableException`,
/// `TransactionAbortableException` and the abortable errors of `TransactionManager`, and the
/// fatal ones after which the producer must be closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Transient: the same request may succeed later (a leader moving, a broker restarting,
    /// a coordinator loading, a timeout).
    Retriable,
    /// The operation failed for good, but the client lives on: inside a transaction, the
    /// transaction must be aborted (a failed send, an authorization error on a topic,
    /// TRANSACTION_ABORTABLE); outside one, only this operation failed.
    Abortable,
    /// The client cannot go on: fenced by a newer instance, not authorized for its
    /// transactional id or the cluster, an api or version the broker lacks, a configuration
    /// error. Close it.
    Fatal,
}

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker answered with an error code.
    #[error("{api:?} failed with {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        code: ErrorCode,
        api: ApiKey,
        message: Option<String>,
    },
    /// The broker does not serve `api` at any version this client can send; nothing was sent.
    #[error("broker {node_id} does not support {api:?} at versions {client_min}-{client_max}{}", broker_range.map(|(a, b)| format!(" (it serves {a}-{b})")).unwrap_or_else(|| " (it does not serve it)".into()))]
    UnsupportedVersion {
        node_id: i32,
        api: ApiKey,
        client_min: i16,
        client_max: i16,
        /// The broker's range, `None` when it does not list the api at all.
        broker_range: Option<(i16, i16)>,
    },
    #[error("i/o with {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("{addr} closed the connection")]
    ConnectionClosed { addr: String },
    #[error("response frame of {size} bytes from {addr} exceeds receive.message.max.bytes {max}")]
    ResponseTooLarge {
        addr: String,
        size: usize,
        max: usize,
    },
    /// A response that does not decode, or decodes to something impossible (a negative frame
    /// size, a wrong correlation id, a partition index out of range, a limit exceeded).
    #[error("malformed {api:?} v{version} response from {addr}: {reason}")]
    MalformedResponse {
        addr: String,
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("encoding {api:?} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("configuration {key}: {reason}")]
    Config { key: String, reason: String },
    /// None of the bootstrap servers (or known brokers) could be reached.
    #[error("no broker reachable (last error: {last})")]
    NoBrokerAvailable { last: Box<Error> },
    /// Metadata names no broker with this id (it left the cluster, or metadata is stale).
    #[error("broker {node_id} is not in the cluster metadata")]
    UnknownBroker { node_id: i32 },
    /// A response that decodes but leaves out an item the request asked about (a topic, a
    /// resource, a group): the broker's answer for that item is unknown. Not retried, as
    /// Kafka's admin client fails such an item at once.
    #[error("{api:?} response has no result for {item}")]
    IncompleteResponse { api: ApiKey, item: String },
    /// The operation was attempted after [`crate::Cluster::close`].
    #[error("the client is closed")]
    Closed,
    /// A transactional (or idempotent) producer's operation failed or was not allowed; the
    /// error says whether the producer is unusable (fatal) or the transaction must abort.
    #[error("transaction: {0}")]
    Transaction(crate::producer::transaction::TxnError),
    /// A share consumer's call the acknowledgement book refused (an acknowledgement in
    /// implicit mode, a poll with records of the last one unacknowledged in explicit mode, a
    /// record not waiting); nothing changed.
    #[error("share acknowledgement: {0}")]
    ShareAcknowledgement(crate::share_consumer::acknowledgements::AckError),
}

/// The error codes the Java client treats as fatal for a producer (it must be closed):
/// fenced by a newer instance, not authorized for its identity, or a broker lacking what the
/// client needs.
const FATAL_CODES: &[ErrorCode] = &[
    ErrorCode::PRODUCER_FENCED,
    ErrorCode::INVALID_PRODUCER_EPOCH,
    ErrorCode::TRANSACTION_COORDINATOR_FENCED,
    ErrorCode::FENCED_INSTANCE_ID,
    ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode::UNSUPPORTED_VERSION,
    ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ErrorCode::INVALID_TXN_STATE,
    ErrorCode::SASL_AUTHENTICATION_FAILED,
];

/// The codes after which cached metadata is stale and must be fetched again before a retry.
const METADATA_REFRESH_CODES: &[ErrorCode] = &[
    ErrorCode::NOT_LEADER_OR_FOLLOWER,
    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode::UNKNOWN_TOPIC_ID,
    ErrorCode::LEADER_NOT_AVAILABLE,
    ErrorCode::FENCED_LEADER_EPOCH,
    ErrorCode::UNKNOWN_LEADER_EPOCH,
    ErrorCode::INCONSISTENT_TOPIC_ID,
    ErrorCode::REPLICA_NOT_AVAILABLE,
    ErrorCode::KAFKA_STORAGE_ERROR,
];

/// The codes after which the cached coordinator is stale and must be looked up again.
const COORDINATOR_REFRESH_CODES: &[ErrorCode] = &[
    ErrorCode::NOT_COORDINATOR,
    ErrorCode::COORDINATOR_NOT_AVAILABLE,
];

/// The class of a broker error code (see [`ErrorClass`]).
pub fn class_of(code: ErrorCode) -> ErrorClass {
    if FATAL_CODES.contains(&code) {
        ErrorClass::Fatal
    } else if code.is_retriable() {
        ErrorClass::Retriable
    } else {
        ErrorClass::Abortable
    }
}

impl Error {
    /// A broker error for `code`, or `None` when `code` is NONE.
    pub fn from_code(api: impl Into<ApiKey>, code: i16, message: Option<&str>) -> Option<Error> {
        (code != 0).then(|| Error::Kafka {
            code: ErrorCode(code),
            api: api.into(),
            message: message.map(str::to_owned),
        })
    }

    /// The Kafka error code: the broker's, or the one Kafka's clients map a local failure to
    /// (NETWORK_EXCEPTION, REQUEST_TIMED_OUT, UNSUPPORTED_VERSION, INVALID_CONFIG).
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Kafka { code, .. } => *code,
            Error::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_VERSION,
            Error::Timeout { .. } => ErrorCode::REQUEST_TIMED_OUT,
            Error::Io { .. }
            | Error::ConnectionClosed { .. }
            | Error::ResponseTooLarge { .. }
            | Error::MalformedResponse { .. }
            | Error::NoBrokerAvailable { .. }
            | Error::UnknownBroker { .. } => ErrorCode::NETWORK_EXCEPTION,
            Error::Config { .. } => ErrorCode::INVALID_CONFIG,
            Error::Encode { .. } | Error::IncompleteResponse { .. } | Error::Closed => {
                ErrorCode::UNKNOWN_SERVER_ERROR
            }
            Error::ShareAcknowledgement(_) => ErrorCode::INVALID_RECORD_STATE,
            Error::Transaction(e) => match &e.kind {
                TxnErrorKind::Broker { code, .. } => *code,
                TxnErrorKind::IllegalState { .. } => ErrorCode::INVALID_TXN_STATE,
                TxnErrorKind::Unsupported(_) => ErrorCode::UNSUPPORTED_VERSION,
                TxnErrorKind::InvalidResponse(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
            },
        }
    }

    /// See [`ErrorClass`]. Connection failures and timeouts are retriable (the connection is
    /// dropped and made again); so is a malformed or oversized response, which closes the
    /// connection as Kafka's clients do, and is bounded like any retry.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Kafka { code, .. } => class_of(*code),
            Error::Io { .. }
            | Error::Timeout { .. }
            | Error::ConnectionClosed { .. }
            | Error::ResponseTooLarge { .. }
            | Error::MalformedResponse { .. }
            | Error::NoBrokerAvailable { .. }
            | Error::UnknownBroker { .. } => ErrorClass::Retriable,
            Error::Encode { .. } | Error::IncompleteResponse { .. } => ErrorClass::Abortable,
            Error::UnsupportedVersion { .. } | Error::Config { .. } | Error::Closed => {
                ErrorClass::Fatal
            }
            // Misuse (begin twice, commit outside a transaction) costs only that call.
            Error::Transaction(e) if e.fatal => ErrorClass::Fatal,
            Error::Transaction(_) => ErrorClass::Abortable,
            // Misuse costs only that call; the consumer lives on.
            Error::ShareAcknowledgement(_) => ErrorClass::Abortable,
        }
    }

    pub fn is_retriable(&self) -> bool {
        self.class() == ErrorClass::Retriable
    }

    /// Whether a transaction this error happened in must be aborted (abortable errors; fatal
    /// ones also end the transaction, but the producer cannot abort it).
    pub fn requires_abort(&self) -> bool {
        self.class() == ErrorClass::Abortable
    }

    pub fn is_fatal(&self) -> bool {
        self.class() == ErrorClass::Fatal
    }

    /// Whether cached metadata must be refreshed before retrying: a leader moved, a topic is
    /// unknown to the broker asked, or the broker named in metadata is gone.
    pub fn requires_metadata_refresh(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => METADATA_REFRESH_CODES.contains(code),
            Error::UnknownBroker { .. } => true,
            _ => false,
        }
    }

    /// Whether the broker asked could not be reached (connection refused, closed, an I/O
    /// error, no answer within `request.timeout.ms`): its partitions may have moved to another
    /// broker, which only new metadata names. Unlike [`Error::requires_metadata_refresh`] the
    /// cache stays usable meanwhile — an update is requested ([`crate::Cluster::request_metadata_update`])
    /// and fetched in the background, as Kafka's clients do on every disconnection.
    pub fn requires_metadata_update(&self) -> bool {
        matches!(
            self,
            Error::Io { .. } | Error::ConnectionClosed { .. } | Error::Timeout { .. }
        )
    }

    /// Whether a cached coordinator must be looked up again before retrying.
    pub fn requires_coordinator_lookup(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => COORDINATOR_REFRESH_CODES.contains(code),
            // The coordinator's connection failed: it may have moved.
            Error::Io { .. } | Error::ConnectionClosed { .. } | Error::Timeout { .. } => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(code: ErrorCode) -> Error {
        Error::Kafka {
            code,
            api: ApiKey::Produce,
            message: None,
        }
    }

    #[test]
    fn classes_follow_the_java_client() {
        assert_eq!(
            kafka(ErrorCode::NOT_LEADER_OR_FOLLOWER).class(),
            ErrorClass::Retriable
        );
        assert_eq!(kafka(ErrorCode::PRODUCER_FENCED).class(), ErrorClass::Fatal);
        assert_eq!(
            kafka(ErrorCode::TRANSACTION_ABORTABLE).class(),
            ErrorClass::Abortable
        );
        assert_eq!(
            kafka(ErrorCode::TOPIC_AUTHORIZATION_FAILED).class(),
            ErrorClass::Abortable
        );
        assert_eq!(
            kafka(ErrorCode::MESSAGE_TOO_LARGE).class(),
            ErrorClass::Abortable
        );
        assert!(kafka(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS).is_retriable());
        assert!(kafka(ErrorCode::INVALID_PRODUCER_EPOCH).is_fatal());
        let timeout = Error::Timeout {
            what: "Metadata".into(),
            after: Duration::from_secs(1),
        };
        assert!(timeout.is_retriable());
        assert_eq!(timeout.code(), ErrorCode::REQUEST_TIMED_OUT);
    }

    #[test]
    fn no_fatal_code_is_also_retriable() {
        for code in FATAL_CODES {
            assert!(!code.is_retriable(), "{code}");
        }
    }

    #[test]
    fn metadata_refresh_codes_are_the_stale_metadata_ones() {
        for code in [
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode::UNKNOWN_TOPIC_ID,
        ] {
            assert!(kafka(code).requires_metadata_refresh(), "{code}");
            assert!(kafka(code).is_retriable(), "{code}");
        }
        assert!(!kafka(ErrorCode::NOT_COORDINATOR).requires_metadata_refresh());
        assert!(kafka(ErrorCode::NOT_COORDINATOR).requires_coordinator_lookup());
    }

    /// A broker that cannot be reached asks for a metadata update, without marking the cache
    /// stale (which would make every lookup wait for a fetch).
    #[test]
    fn unreachable_brokers_request_a_metadata_update_only() {
        let refused = Error::Io {
            addr: "127.0.0.1:9".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        let closed = Error::ConnectionClosed {
            addr: "127.0.0.1:9".into(),
        };
        for e in [&refused, &closed] {
            assert!(e.requires_metadata_update(), "{e:?}");
            assert!(!e.requires_metadata_refresh(), "{e:?}");
            assert!(e.is_retriable(), "{e:?}");
        }
        assert!(!kafka(ErrorCode::NOT_LEADER_OR_FOLLOWER).requires_metadata_update());
    }

    #[test]
    fn errors_are_send_sync_and_display_lowercase() {
        fn check<T: Send + Sync + std::error::Error>() {}
        check::<Error>();
        let e = Error::from_code(ApiKey::Metadata, 3, None).unwrap();
        assert_eq!(
            e.to_string(),
            "Metadata failed with UNKNOWN_TOPIC_OR_PARTITION(3)"
        );
        assert!(Error::from_code(ApiKey::Metadata, 0, None).is_none());
    }
}
