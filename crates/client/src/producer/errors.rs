//! What a transactional producer does with each error code, per request: retry it, abort the
//! transaction (the producer lives on), or stop for good.
//!
//! This refines the crate's per-code [`crate::ErrorClass`] for the requests of a
//! transaction: the same code can mean different things to different requests, and a retry
//! may need the coordinator found again or the metadata refreshed first.
//!
//! The classes are the Java client's (`TransactionManager`'s handlers, `Sender`), because an
//! application written against Kafka expects a fenced producer to die and a failed send to
//! cost only the transaction. They differ per request: INVALID_REQUEST is abortable on
//! TxnShareAcknowledge (the draft client of KIP-1289, spec §3.1) and fatal elsewhere; an
//! unknown code is fatal everywhere, as in Java ("unhandled error").

use shoal_protocol::ErrorCode;

/// What the transaction manager does with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handling {
    /// Send the same request again after a backoff.
    Retry {
        /// The coordinator moved or is gone: look it up again first.
        find_coordinator: bool,
        /// A partition's leader or a topic id changed: refresh metadata first.
        refresh_metadata: bool,
    },
    /// The transaction must be aborted; the producer can begin another.
    Abort,
    /// The producer can do nothing transactional any more (fenced, unsupported, not allowed).
    Fatal,
}

impl Handling {
    const RETRY: Handling = Handling::Retry {
        find_coordinator: false,
        refresh_metadata: false,
    };
    const FIND_COORDINATOR: Handling = Handling::Retry {
        find_coordinator: true,
        refresh_metadata: false,
    };
    const REFRESH_METADATA: Handling = Handling::Retry {
        find_coordinator: false,
        refresh_metadata: true,
    };

    pub fn is_retry(self) -> bool {
        matches!(self, Handling::Retry { .. })
    }
}

/// The requests whose errors the transaction manager classifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    TxnOffsetCommit,
    TxnShareAcknowledge,
    EndTxn,
    Produce,
}

impl TxnApi {
    pub fn name(self) -> &'static str {
        match self {
            TxnApi::InitProducerId => "InitProducerId",
            TxnApi::AddPartitionsToTxn => "AddPartitionsToTxn",
            TxnApi::AddOffsetsToTxn => "AddOffsetsToTxn",
            TxnApi::TxnOffsetCommit => "TxnOffsetCommit",
            TxnApi::TxnShareAcknowledge => "TxnShareAcknowledge",
            TxnApi::EndTxn => "EndTxn",
            TxnApi::Produce => "Produce",
        }
    }
}

/// The class of a non-zero `code` answered to `api` inside a transaction.
pub fn classify(api: TxnApi, code: ErrorCode) -> Handling {
    use Handling::{Abort, Fatal};
    let c = code;
    // Fenced, not allowed, or a request the broker cannot serve: fatal for every request.
    if c == ErrorCode::PRODUCER_FENCED
        || c == ErrorCode::INVALID_PRODUCER_EPOCH
        || c == ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        || c == ErrorCode::CLUSTER_AUTHORIZATION_FAILED
        || c == ErrorCode::UNSUPPORTED_VERSION
        || c == ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT
    {
        return Fatal;
    }
    // KIP-890: the coordinator says the transaction cannot go on.
    if c == ErrorCode::TRANSACTION_ABORTABLE {
        return Abort;
    }
    match api {
        TxnApi::InitProducerId | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => {
            coordinator_request(api, c)
        }
        TxnApi::AddPartitionsToTxn => {
            if c == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION {
                Handling::REFRESH_METADATA
            } else if c == ErrorCode::TOPIC_AUTHORIZATION_FAILED
                || c == ErrorCode::OPERATION_NOT_ATTEMPTED
            {
                Abort
            } else {
                coordinator_request(api, c)
            }
        }
        TxnApi::TxnOffsetCommit => {
            if c == ErrorCode::COORDINATOR_NOT_AVAILABLE
                || c == ErrorCode::NOT_COORDINATOR
                || c == ErrorCode::REQUEST_TIMED_OUT
            {
                Handling::FIND_COORDINATOR
            } else if c == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                || c == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                || c == ErrorCode::CONCURRENT_TRANSACTIONS
            {
                Handling::RETRY
            } else if c == ErrorCode::UNKNOWN_MEMBER_ID
                || c == ErrorCode::ILLEGAL_GENERATION
                || c == ErrorCode::FENCED_INSTANCE_ID
                || c == ErrorCode::GROUP_AUTHORIZATION_FAILED
                || c == ErrorCode::REBALANCE_IN_PROGRESS
            {
                // The consumer's generation moved on (Java's CommitFailedException).
                Abort
            } else {
                Fatal
            }
        }
        TxnApi::TxnShareAcknowledge => {
            // Spec §3.1, as the draft client of KIP-1289 classifies them.
            if c == ErrorCode::UNKNOWN_TOPIC_ID || c == ErrorCode::NOT_LEADER_OR_FOLLOWER {
                Handling::REFRESH_METADATA
            } else if c == ErrorCode::GROUP_AUTHORIZATION_FAILED
                || c == ErrorCode::INVALID_RECORD_STATE
                || c == ErrorCode::INVALID_REQUEST
                || c == ErrorCode::UNKNOWN_MEMBER_ID
                || c == ErrorCode::GROUP_ID_NOT_FOUND
                || c == ErrorCode::STALE_MEMBER_EPOCH
            {
                Abort
            } else if c.is_retriable() {
                Handling::RETRY
            } else {
                Fatal
            }
        }
        TxnApi::Produce => {
            if c == ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
                || c == ErrorCode::UNKNOWN_PRODUCER_ID
                || c == ErrorCode::INVALID_PRODUCER_ID_MAPPING
                || c == ErrorCode::TOPIC_AUTHORIZATION_FAILED
                || c == ErrorCode::INVALID_TXN_STATE
            {
                // The batch is lost to this transaction; the next one can start clean.
                Abort
            } else if c.is_retriable() {
                Handling::REFRESH_METADATA
            } else {
                // Record too large, corrupt, invalid: the record failed, the transaction
                // cannot commit without it.
                Abort
            }
        }
    }
}

/// The requests the transaction coordinator answers.
fn coordinator_request(api: TxnApi, c: ErrorCode) -> Handling {
    if c == ErrorCode::COORDINATOR_NOT_AVAILABLE || c == ErrorCode::NOT_COORDINATOR {
        Handling::FIND_COORDINATOR
    } else if c == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        || c == ErrorCode::CONCURRENT_TRANSACTIONS
        || c == ErrorCode::REQUEST_TIMED_OUT
    {
        Handling::RETRY
    } else if api != TxnApi::InitProducerId
        && (c == ErrorCode::UNKNOWN_PRODUCER_ID || c == ErrorCode::INVALID_PRODUCER_ID_MAPPING)
    {
        // KIP-360: the coordinator lost the producer id; aborting bumps the epoch.
        Handling::Abort
    } else if api == TxnApi::AddOffsetsToTxn && c == ErrorCode::GROUP_AUTHORIZATION_FAILED {
        Handling::Abort
    } else {
        Handling::Fatal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APIS: [TxnApi; 7] = [
        TxnApi::InitProducerId,
        TxnApi::AddPartitionsToTxn,
        TxnApi::AddOffsetsToTxn,
        TxnApi::TxnOffsetCommit,
        TxnApi::TxnShareAcknowledge,
        TxnApi::EndTxn,
        TxnApi::Produce,
    ];

    #[test]
    fn fencing_and_unsupported_versions_are_fatal_for_every_request() {
        for api in APIS {
            for code in [
                ErrorCode::PRODUCER_FENCED,
                ErrorCode::INVALID_PRODUCER_EPOCH,
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                ErrorCode::UNSUPPORTED_VERSION,
            ] {
                assert_eq!(classify(api, code), Handling::Fatal, "{api:?} {code:?}");
            }
            assert_eq!(
                classify(api, ErrorCode::TRANSACTION_ABORTABLE),
                Handling::Abort,
                "{api:?}"
            );
        }
    }

    #[test]
    fn txn_share_acknowledge_errors_are_classified_as_the_draft_client_does() {
        let api = TxnApi::TxnShareAcknowledge;
        for code in [
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
            ErrorCode::TRANSACTION_ABORTABLE,
            ErrorCode::INVALID_RECORD_STATE,
            ErrorCode::INVALID_REQUEST,
            ErrorCode::UNKNOWN_MEMBER_ID,
            ErrorCode::GROUP_ID_NOT_FOUND,
            ErrorCode::STALE_MEMBER_EPOCH,
        ] {
            assert_eq!(classify(api, code), Handling::Abort, "{code:?}");
        }
        assert_eq!(
            classify(api, ErrorCode::UNKNOWN_TOPIC_ID),
            Handling::REFRESH_METADATA
        );
        for code in [
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ErrorCode::CONCURRENT_TRANSACTIONS,
            ErrorCode::REQUEST_TIMED_OUT,
        ] {
            assert!(classify(api, code).is_retry(), "{code:?}");
        }
        // "Anything else" is fatal: FENCED_MEMBER_EPOCH, TRANSACTIONAL_ID_NOT_FOUND,
        // INVALID_PRODUCER_ID_MAPPING and codes nobody knows.
        for code in [
            ErrorCode::FENCED_MEMBER_EPOCH,
            ErrorCode::TRANSACTIONAL_ID_NOT_FOUND,
            ErrorCode::INVALID_PRODUCER_ID_MAPPING,
            ErrorCode::UNKNOWN_SERVER_ERROR,
            ErrorCode(9999),
        ] {
            assert_eq!(classify(api, code), Handling::Fatal, "{code:?}");
        }
    }

    #[test]
    fn coordinator_errors_retry_and_a_lost_producer_id_aborts() {
        for api in [
            TxnApi::EndTxn,
            TxnApi::AddPartitionsToTxn,
            TxnApi::AddOffsetsToTxn,
        ] {
            assert_eq!(
                classify(api, ErrorCode::NOT_COORDINATOR),
                Handling::FIND_COORDINATOR
            );
            assert_eq!(
                classify(api, ErrorCode::CONCURRENT_TRANSACTIONS),
                Handling::RETRY
            );
            assert_eq!(
                classify(api, ErrorCode::UNKNOWN_PRODUCER_ID),
                Handling::Abort
            );
            assert_eq!(classify(api, ErrorCode::INVALID_TXN_STATE), Handling::Fatal);
        }
        assert_eq!(
            classify(
                TxnApi::InitProducerId,
                ErrorCode::INVALID_PRODUCER_ID_MAPPING
            ),
            Handling::Fatal
        );
        assert_eq!(
            classify(TxnApi::TxnOffsetCommit, ErrorCode::ILLEGAL_GENERATION),
            Handling::Abort
        );
        assert_eq!(
            classify(TxnApi::Produce, ErrorCode::NOT_LEADER_OR_FOLLOWER),
            Handling::REFRESH_METADATA
        );
        assert_eq!(
            classify(TxnApi::Produce, ErrorCode::MESSAGE_TOO_LARGE),
            Handling::Abort
        );
    }
}
