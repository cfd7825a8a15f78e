//! Why a produce was refused by the producer-state checks, with Kafka's error codes.

use super::{ProducerEpoch, ProducerId};

/// Kafka's `OUT_OF_ORDER_SEQUENCE_NUMBER`.
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// Kafka's `INVALID_PRODUCER_EPOCH`.
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
/// Kafka's `INVALID_TXN_STATE`.
pub const INVALID_TXN_STATE: i16 = 48;
/// Kafka's `INVALID_RECORD`.
pub const INVALID_RECORD: i16 = 87;
/// Kafka's `TRANSACTION_COORDINATOR_FENCED`.
pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
/// Kafka's `UNKNOWN_SERVER_ERROR`.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;

/// A broken invariant of a partition's producer state, found in production as in tests: a bug
/// in Shoal, never a client's doing. The producer state that finds one stops (see
/// [`super::ProducerStateManager::violation`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerStateViolation {
    /// The ongoing-transaction index does not mirror the producers' entries: a transaction
    /// ended that the index did not hold, or one started (or was restored) that it already
    /// held. The last stable offset is read from that index.
    #[error(
        "ongoing-transaction index out of step: producer {} transaction at offset {} {}",
        producer_id.0, first_offset,
        if *indexed { "already indexed" } else { "not indexed" }
    )]
    OngoingIndex {
        producer_id: ProducerId,
        first_offset: i64,
        /// Whether the index already held it (a start) or not (an end).
        indexed: bool,
    },
    /// More than `BATCHES_RETAINED` batches remembered for a producer.
    #[error("producer {} remembers {} batches", producer_id.0, batches)]
    BatchesRetained {
        producer_id: ProducerId,
        batches: usize,
    },
}

impl ProducerStateViolation {
    /// A short, stable name of the broken invariant, for logs.
    pub fn invariant(&self) -> &'static str {
        match self {
            Self::OngoingIndex { .. } => "ongoing-index",
            Self::BatchesRetained { .. } => "batches-retained",
        }
    }
}

/// A batch the producer state refuses; nothing of the request may be appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerStateError {
    /// The batch's epoch is older than the producer's current one (a zombie producer).
    #[error(
        "Epoch of producer {} is {}, which is smaller than the last seen epoch {}",
        producer_id.0, epoch.0, current.0
    )]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        current: ProducerEpoch,
    },
    /// The batch does not continue the producer's sequence (a gap or a reordering).
    #[error(
        "Out of order sequence number for producer {} at epoch {}: {} (incoming seq. number), {} (current end sequence number)",
        producer_id.0, epoch.0, base_sequence, last_sequence
    )]
    OutOfOrderSequence {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        base_sequence: i32,
        /// The producer's last appended sequence at this epoch (-1 for a new epoch).
        last_sequence: i32,
    },
    /// A batch with a producer id but no sequence (Kafka's LogValidator refuses it).
    #[error(
        "Invalid sequence number {} in record batch with producerId {}",
        base_sequence, producer_id.0
    )]
    InvalidSequence {
        producer_id: ProducerId,
        base_sequence: i32,
    },
    /// A non-transactional batch from a producer with an ongoing transaction on the partition.
    #[error(
        "Expected transactional write from producer {} (a transaction is ongoing)",
        producer_id.0
    )]
    NotTransactional { producer_id: ProducerId },
    /// A transaction marker from an older coordinator than the producer's last marker.
    #[error(
        "Coordinator epoch {} of the marker for producer {} is older than the last seen {}",
        coordinator_epoch, producer_id.0, current
    )]
    CoordinatorFenced {
        producer_id: ProducerId,
        coordinator_epoch: i32,
        current: i32,
    },
    /// The partition's producer state found one of its invariants broken and stopped: nothing
    /// is appended to the partition (UNKNOWN_SERVER_ERROR) until the broker restarts and
    /// rebuilds it from the log.
    #[error("producer state stopped: invariant violated: {0}")]
    Stopped(ProducerStateViolation),
}

impl ProducerStateError {
    /// The Kafka error code a produce response carries for this error.
    pub fn error_code(&self) -> i16 {
        match self {
            Self::InvalidProducerEpoch { .. } => INVALID_PRODUCER_EPOCH,
            Self::OutOfOrderSequence { .. } => OUT_OF_ORDER_SEQUENCE_NUMBER,
            Self::InvalidSequence { .. } => INVALID_RECORD,
            Self::NotTransactional { .. } => INVALID_TXN_STATE,
            Self::CoordinatorFenced { .. } => TRANSACTION_COORDINATOR_FENCED,
            Self::Stopped(_) => UNKNOWN_SERVER_ERROR,
        }
    }
}
