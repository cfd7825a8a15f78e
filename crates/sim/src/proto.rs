//! The requests and responses model clients exchange with the simulated broker: Kafka's APIs
//! reduced to the fields the exactly-once path uses, with Kafka's error codes.

use shoal_core::share_partition::AckBatch;

/// A client connection: its index and incarnation (a restarted client is a new incarnation,
/// and answers addressed to an earlier one are dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr {
    pub client: usize,
    pub incarnation: u32,
}

/// One delivered record: its input partition, offset and delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub partition: i32,
    pub offset: i64,
    pub delivery_count: i16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Req {
    /// ShareGroupHeartbeat: epoch 0 joins, -1 leaves. `full` sends the subscription again
    /// (what Kafka's client does after a failed heartbeat), which makes the answer carry the
    /// whole assignment.
    Heartbeat {
        group: String,
        member: String,
        epoch: i32,
        full: bool,
    },
    /// ShareFetch of the given input partitions.
    ShareFetch {
        group: String,
        member: String,
        partitions: Vec<i32>,
        max_records: i32,
    },
    /// ShareAcknowledge (explicit mode, not transactional).
    ShareAck {
        group: String,
        member: String,
        acks: Vec<(i32, AckBatch)>,
    },
    /// InitProducerId (v6: KIP-939's flags).
    InitProducerId {
        txn_id: String,
        producer_id: i64,
        producer_epoch: i16,
        /// `Enable2Pc`: the producer's transactions are decided outside Kafka.
        enable_2pc: bool,
        /// `KeepPreparedTxn`: keep an ongoing two-phase-commit transaction for this
        /// incarnation to complete instead of aborting it.
        keep_prepared: bool,
    },
    /// A transactional Produce (v12+: the partition is added implicitly).
    Produce {
        txn_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partition: i32,
        base_sequence: i32,
        /// Output record keys (the input partition and offset each came from).
        keys: Vec<Vec<u8>>,
    },
    /// TxnShareAcknowledge (KIP-1289).
    TxnShareAck {
        txn_id: String,
        producer_id: i64,
        producer_epoch: i16,
        group: String,
        member: String,
        member_epoch: i32,
        parts: Vec<(i32, Vec<AckBatch>)>,
    },
    /// EndTxn v5 (transaction version 2).
    EndTxn {
        txn_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Heartbeat {
        code: i16,
        member_epoch: i32,
        /// Assigned input partitions, when the answer carries an assignment.
        assignment: Option<Vec<i32>>,
    },
    ShareFetch {
        code: i16,
        records: Vec<Delivered>,
    },
    ShareAck {
        code: i16,
    },
    InitProducerId {
        code: i16,
        producer_id: i64,
        producer_epoch: i16,
        /// The kept prepared transaction's producer id and epoch (-1: none).
        ongoing_producer_id: i64,
        ongoing_producer_epoch: i16,
    },
    Produce {
        code: i16,
    },
    TxnShareAck {
        code: i16,
    },
    EndTxn {
        code: i16,
        producer_id: i64,
        producer_epoch: i16,
    },
}

impl Req {
    pub fn name(&self) -> &'static str {
        match self {
            Req::Heartbeat { .. } => "Heartbeat",
            Req::ShareFetch { .. } => "ShareFetch",
            Req::ShareAck { .. } => "ShareAck",
            Req::InitProducerId { .. } => "InitProducerId",
            Req::Produce { .. } => "Produce",
            Req::TxnShareAck { .. } => "TxnShareAck",
            Req::EndTxn { .. } => "EndTxn",
        }
    }
}

/// Kafka error codes the simulation uses, as `shoal-core` defines them.
pub mod codes {
    use shoal_core::group_coordinator::{share, ErrorCode};
    use shoal_core::share_partition::error_codes as sp;
    use shoal_core::txn_coordinator::error_codes as tc;

    pub const NONE: i16 = ErrorCode::NONE.0;
    pub const UNKNOWN_MEMBER_ID: i16 = ErrorCode::UNKNOWN_MEMBER_ID.0;
    pub const FENCED_MEMBER_EPOCH: i16 = share::FENCED_MEMBER_EPOCH.0;
    /// Kafka's STALE_MEMBER_EPOCH (`Errors.java`); the share-group coordinator never answers
    /// it, only TxnShareAcknowledge's member check does.
    pub const STALE_MEMBER_EPOCH: i16 = 113;
    pub const INVALID_RECORD_STATE: i16 = sp::INVALID_RECORD_STATE.0;
    pub const PRODUCER_FENCED: i16 = tc::PRODUCER_FENCED.0;
    pub const INVALID_PRODUCER_EPOCH: i16 = tc::INVALID_PRODUCER_EPOCH.0;
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = tc::INVALID_PRODUCER_ID_MAPPING.0;
    pub const CONCURRENT_TRANSACTIONS: i16 = tc::CONCURRENT_TRANSACTIONS.0;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = ErrorCode::COORDINATOR_NOT_AVAILABLE.0;
    pub const KAFKA_STORAGE_ERROR: i16 = ErrorCode::KAFKA_STORAGE_ERROR.0;
    pub const UNKNOWN_SERVER_ERROR: i16 = ErrorCode::UNKNOWN_SERVER_ERROR.0;
}
