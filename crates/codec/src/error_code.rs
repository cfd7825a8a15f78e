//! Kafka error codes, generated from the table in `shared/reference/error-codes.txt`.
//!
//! Owns: [`ErrorCode`], the one newtype for Kafka's `i16` error codes, with their names and
//! whether Kafka marks them retriable. `shoal-protocol` and `shoal-core` re-export it.

/// A Kafka protocol error code. Unknown codes are kept as they are (`ErrorCode(n)`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    pub const NONE: ErrorCode = ErrorCode(0);
    pub const OFFSET_OUT_OF_RANGE: ErrorCode = ErrorCode(1);
    pub const CORRUPT_MESSAGE: ErrorCode = ErrorCode(2);
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    pub const INVALID_FETCH_SIZE: ErrorCode = ErrorCode(4);
    pub const LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(5);
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode(6);
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(7);
    pub const BROKER_NOT_AVAILABLE: ErrorCode = ErrorCode(8);
    pub const REPLICA_NOT_AVAILABLE: ErrorCode = ErrorCode(9);
    pub const MESSAGE_TOO_LARGE: ErrorCode = ErrorCode(10);
    pub const STALE_CONTROLLER_EPOCH: ErrorCode = ErrorCode(11);
    pub const OFFSET_METADATA_TOO_LARGE: ErrorCode = ErrorCode(12);
    pub const NETWORK_EXCEPTION: ErrorCode = ErrorCode(13);
    pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = ErrorCode(14);
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode(15);
    pub const NOT_COORDINATOR: ErrorCode = ErrorCode(16);
    pub const INVALID_TOPIC_EXCEPTION: ErrorCode = ErrorCode(17);
    pub const RECORD_LIST_TOO_LARGE: ErrorCode = ErrorCode(18);
    pub const NOT_ENOUGH_REPLICAS: ErrorCode = ErrorCode(19);
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode = ErrorCode(20);
    pub const INVALID_REQUIRED_ACKS: ErrorCode = ErrorCode(21);
    pub const ILLEGAL_GENERATION: ErrorCode = ErrorCode(22);
    pub const INCONSISTENT_GROUP_PROTOCOL: ErrorCode = ErrorCode(23);
    pub const INVALID_GROUP_ID: ErrorCode = ErrorCode(24);
    pub const UNKNOWN_MEMBER_ID: ErrorCode = ErrorCode(25);
    pub const INVALID_SESSION_TIMEOUT: ErrorCode = ErrorCode(26);
    pub const REBALANCE_IN_PROGRESS: ErrorCode = ErrorCode(27);
    pub const INVALID_COMMIT_OFFSET_SIZE: ErrorCode = ErrorCode(28);
    pub const TOPIC_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(29);
    pub const GROUP_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(30);
    pub const CLUSTER_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(31);
    pub const INVALID_TIMESTAMP: ErrorCode = ErrorCode(32);
    pub const UNSUPPORTED_SASL_MECHANISM: ErrorCode = ErrorCode(33);
    pub const ILLEGAL_SASL_STATE: ErrorCode = ErrorCode(34);
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    pub const TOPIC_ALREADY_EXISTS: ErrorCode = ErrorCode(36);
    pub const INVALID_PARTITIONS: ErrorCode = ErrorCode(37);
    pub const INVALID_REPLICATION_FACTOR: ErrorCode = ErrorCode(38);
    pub const INVALID_REPLICA_ASSIGNMENT: ErrorCode = ErrorCode(39);
    pub const INVALID_CONFIG: ErrorCode = ErrorCode(40);
    pub const NOT_CONTROLLER: ErrorCode = ErrorCode(41);
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: ErrorCode = ErrorCode(43);
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode = ErrorCode(45);
    pub const DUPLICATE_SEQUENCE_NUMBER: ErrorCode = ErrorCode(46);
    pub const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode(47);
    pub const INVALID_TXN_STATE: ErrorCode = ErrorCode(48);
    pub const INVALID_PRODUCER_ID_MAPPING: ErrorCode = ErrorCode(49);
    pub const INVALID_TRANSACTION_TIMEOUT: ErrorCode = ErrorCode(50);
    pub const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode(51);
    pub const TRANSACTION_COORDINATOR_FENCED: ErrorCode = ErrorCode(52);
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(53);
    pub const SECURITY_DISABLED: ErrorCode = ErrorCode(54);
    pub const OPERATION_NOT_ATTEMPTED: ErrorCode = ErrorCode(55);
    pub const KAFKA_STORAGE_ERROR: ErrorCode = ErrorCode(56);
    pub const LOG_DIR_NOT_FOUND: ErrorCode = ErrorCode(57);
    pub const SASL_AUTHENTICATION_FAILED: ErrorCode = ErrorCode(58);
    pub const UNKNOWN_PRODUCER_ID: ErrorCode = ErrorCode(59);
    pub const REASSIGNMENT_IN_PROGRESS: ErrorCode = ErrorCode(60);
    pub const DELEGATION_TOKEN_AUTH_DISABLED: ErrorCode = ErrorCode(61);
    pub const DELEGATION_TOKEN_NOT_FOUND: ErrorCode = ErrorCode(62);
    pub const DELEGATION_TOKEN_OWNER_MISMATCH: ErrorCode = ErrorCode(63);
    pub const DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: ErrorCode = ErrorCode(64);
    pub const DELEGATION_TOKEN_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(65);
    pub const DELEGATION_TOKEN_EXPIRED: ErrorCode = ErrorCode(66);
    pub const INVALID_PRINCIPAL_TYPE: ErrorCode = ErrorCode(67);
    pub const NON_EMPTY_GROUP: ErrorCode = ErrorCode(68);
    pub const GROUP_ID_NOT_FOUND: ErrorCode = ErrorCode(69);
    pub const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = ErrorCode(70);
    pub const INVALID_FETCH_SESSION_EPOCH: ErrorCode = ErrorCode(71);
    pub const LISTENER_NOT_FOUND: ErrorCode = ErrorCode(72);
    pub const TOPIC_DELETION_DISABLED: ErrorCode = ErrorCode(73);
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode(74);
    pub const UNKNOWN_LEADER_EPOCH: ErrorCode = ErrorCode(75);
    pub const UNSUPPORTED_COMPRESSION_TYPE: ErrorCode = ErrorCode(76);
    pub const STALE_BROKER_EPOCH: ErrorCode = ErrorCode(77);
    pub const OFFSET_NOT_AVAILABLE: ErrorCode = ErrorCode(78);
    pub const MEMBER_ID_REQUIRED: ErrorCode = ErrorCode(79);
    pub const PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(80);
    pub const GROUP_MAX_SIZE_REACHED: ErrorCode = ErrorCode(81);
    pub const FENCED_INSTANCE_ID: ErrorCode = ErrorCode(82);
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode = ErrorCode(83);
    pub const ELECTION_NOT_NEEDED: ErrorCode = ErrorCode(84);
    pub const NO_REASSIGNMENT_IN_PROGRESS: ErrorCode = ErrorCode(85);
    pub const GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode = ErrorCode(86);
    pub const INVALID_RECORD: ErrorCode = ErrorCode(87);
    pub const UNSTABLE_OFFSET_COMMIT: ErrorCode = ErrorCode(88);
    pub const THROTTLING_QUOTA_EXCEEDED: ErrorCode = ErrorCode(89);
    pub const PRODUCER_FENCED: ErrorCode = ErrorCode(90);
    pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(91);
    pub const DUPLICATE_RESOURCE: ErrorCode = ErrorCode(92);
    pub const UNACCEPTABLE_CREDENTIAL: ErrorCode = ErrorCode(93);
    pub const INCONSISTENT_VOTER_SET: ErrorCode = ErrorCode(94);
    pub const INVALID_UPDATE_VERSION: ErrorCode = ErrorCode(95);
    pub const FEATURE_UPDATE_FAILED: ErrorCode = ErrorCode(96);
    pub const PRINCIPAL_DESERIALIZATION_FAILURE: ErrorCode = ErrorCode(97);
    pub const SNAPSHOT_NOT_FOUND: ErrorCode = ErrorCode(98);
    pub const POSITION_OUT_OF_RANGE: ErrorCode = ErrorCode(99);
    pub const UNKNOWN_TOPIC_ID: ErrorCode = ErrorCode(100);
    pub const DUPLICATE_BROKER_REGISTRATION: ErrorCode = ErrorCode(101);
    pub const BROKER_ID_NOT_REGISTERED: ErrorCode = ErrorCode(102);
    pub const INCONSISTENT_TOPIC_ID: ErrorCode = ErrorCode(103);
    pub const INCONSISTENT_CLUSTER_ID: ErrorCode = ErrorCode(104);
    pub const TRANSACTIONAL_ID_NOT_FOUND: ErrorCode = ErrorCode(105);
    pub const FETCH_SESSION_TOPIC_ID_ERROR: ErrorCode = ErrorCode(106);
    pub const INELIGIBLE_REPLICA: ErrorCode = ErrorCode(107);
    pub const NEW_LEADER_ELECTED: ErrorCode = ErrorCode(108);
    pub const OFFSET_MOVED_TO_TIERED_STORAGE: ErrorCode = ErrorCode(109);
    pub const FENCED_MEMBER_EPOCH: ErrorCode = ErrorCode(110);
    pub const UNRELEASED_INSTANCE_ID: ErrorCode = ErrorCode(111);
    pub const UNSUPPORTED_ASSIGNOR: ErrorCode = ErrorCode(112);
    pub const STALE_MEMBER_EPOCH: ErrorCode = ErrorCode(113);
    pub const MISMATCHED_ENDPOINT_TYPE: ErrorCode = ErrorCode(114);
    pub const UNSUPPORTED_ENDPOINT_TYPE: ErrorCode = ErrorCode(115);
    pub const UNKNOWN_CONTROLLER_ID: ErrorCode = ErrorCode(116);
    pub const UNKNOWN_SUBSCRIPTION_ID: ErrorCode = ErrorCode(117);
    pub const TELEMETRY_TOO_LARGE: ErrorCode = ErrorCode(118);
    pub const INVALID_REGISTRATION: ErrorCode = ErrorCode(119);
    pub const TRANSACTION_ABORTABLE: ErrorCode = ErrorCode(120);
    pub const INVALID_RECORD_STATE: ErrorCode = ErrorCode(121);
    pub const SHARE_SESSION_NOT_FOUND: ErrorCode = ErrorCode(122);
    pub const INVALID_SHARE_SESSION_EPOCH: ErrorCode = ErrorCode(123);
    pub const FENCED_STATE_EPOCH: ErrorCode = ErrorCode(124);
    pub const INVALID_VOTER_KEY: ErrorCode = ErrorCode(125);
    pub const DUPLICATE_VOTER: ErrorCode = ErrorCode(126);
    pub const VOTER_NOT_FOUND: ErrorCode = ErrorCode(127);
    pub const INVALID_REGULAR_EXPRESSION: ErrorCode = ErrorCode(128);
    pub const REBOOTSTRAP_REQUIRED: ErrorCode = ErrorCode(129);
    pub const STREAMS_INVALID_TOPOLOGY: ErrorCode = ErrorCode(130);
    pub const STREAMS_INVALID_TOPOLOGY_EPOCH: ErrorCode = ErrorCode(131);
    pub const STREAMS_TOPOLOGY_FENCED: ErrorCode = ErrorCode(132);
    pub const SHARE_SESSION_LIMIT_REACHED: ErrorCode = ErrorCode(133);

    /// Kafka's upper-case name of the code, or `None` for codes this table does not know.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            -1 => Some("UNKNOWN_SERVER_ERROR"),
            0 => Some("NONE"),
            1 => Some("OFFSET_OUT_OF_RANGE"),
            2 => Some("CORRUPT_MESSAGE"),
            3 => Some("UNKNOWN_TOPIC_OR_PARTITION"),
            4 => Some("INVALID_FETCH_SIZE"),
            5 => Some("LEADER_NOT_AVAILABLE"),
            6 => Some("NOT_LEADER_OR_FOLLOWER"),
            7 => Some("REQUEST_TIMED_OUT"),
            8 => Some("BROKER_NOT_AVAILABLE"),
            9 => Some("REPLICA_NOT_AVAILABLE"),
            10 => Some("MESSAGE_TOO_LARGE"),
            11 => Some("STALE_CONTROLLER_EPOCH"),
            12 => Some("OFFSET_METADATA_TOO_LARGE"),
            13 => Some("NETWORK_EXCEPTION"),
            14 => Some("COORDINATOR_LOAD_IN_PROGRESS"),
            15 => Some("COORDINATOR_NOT_AVAILABLE"),
            16 => Some("NOT_COORDINATOR"),
            17 => Some("INVALID_TOPIC_EXCEPTION"),
            18 => Some("RECORD_LIST_TOO_LARGE"),
            19 => Some("NOT_ENOUGH_REPLICAS"),
            20 => Some("NOT_ENOUGH_REPLICAS_AFTER_APPEND"),
            21 => Some("INVALID_REQUIRED_ACKS"),
            22 => Some("ILLEGAL_GENERATION"),
            23 => Some("INCONSISTENT_GROUP_PROTOCOL"),
            24 => Some("INVALID_GROUP_ID"),
            25 => Some("UNKNOWN_MEMBER_ID"),
            26 => Some("INVALID_SESSION_TIMEOUT"),
            27 => Some("REBALANCE_IN_PROGRESS"),
            28 => Some("INVALID_COMMIT_OFFSET_SIZE"),
            29 => Some("TOPIC_AUTHORIZATION_FAILED"),
            30 => Some("GROUP_AUTHORIZATION_FAILED"),
            31 => Some("CLUSTER_AUTHORIZATION_FAILED"),
            32 => Some("INVALID_TIMESTAMP"),
            33 => Some("UNSUPPORTED_SASL_MECHANISM"),
            34 => Some("ILLEGAL_SASL_STATE"),
            35 => Some("UNSUPPORTED_VERSION"),
            36 => Some("TOPIC_ALREADY_EXISTS"),
            37 => Some("INVALID_PARTITIONS"),
            38 => Some("INVALID_REPLICATION_FACTOR"),
            39 => Some("INVALID_REPLICA_ASSIGNMENT"),
            40 => Some("INVALID_CONFIG"),
            41 => Some("NOT_CONTROLLER"),
            42 => Some("INVALID_REQUEST"),
            43 => Some("UNSUPPORTED_FOR_MESSAGE_FORMAT"),
            44 => Some("POLICY_VIOLATION"),
            45 => Some("OUT_OF_ORDER_SEQUENCE_NUMBER"),
            46 => Some("DUPLICATE_SEQUENCE_NUMBER"),
            47 => Some("INVALID_PRODUCER_EPOCH"),
            48 => Some("INVALID_TXN_STATE"),
            49 => Some("INVALID_PRODUCER_ID_MAPPING"),
            50 => Some("INVALID_TRANSACTION_TIMEOUT"),
            51 => Some("CONCURRENT_TRANSACTIONS"),
            52 => Some("TRANSACTION_COORDINATOR_FENCED"),
            53 => Some("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
            54 => Some("SECURITY_DISABLED"),
            55 => Some("OPERATION_NOT_ATTEMPTED"),
            56 => Some("KAFKA_STORAGE_ERROR"),
            57 => Some("LOG_DIR_NOT_FOUND"),
            58 => Some("SASL_AUTHENTICATION_FAILED"),
            59 => Some("UNKNOWN_PRODUCER_ID"),
            60 => Some("REASSIGNMENT_IN_PROGRESS"),
            61 => Some("DELEGATION_TOKEN_AUTH_DISABLED"),
            62 => Some("DELEGATION_TOKEN_NOT_FOUND"),
            63 => Some("DELEGATION_TOKEN_OWNER_MISMATCH"),
            64 => Some("DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"),
            65 => Some("DELEGATION_TOKEN_AUTHORIZATION_FAILED"),
            66 => Some("DELEGATION_TOKEN_EXPIRED"),
            67 => Some("INVALID_PRINCIPAL_TYPE"),
            68 => Some("NON_EMPTY_GROUP"),
            69 => Some("GROUP_ID_NOT_FOUND"),
            70 => Some("FETCH_SESSION_ID_NOT_FOUND"),
            71 => Some("INVALID_FETCH_SESSION_EPOCH"),
            72 => Some("LISTENER_NOT_FOUND"),
            73 => Some("TOPIC_DELETION_DISABLED"),
            74 => Some("FENCED_LEADER_EPOCH"),
            75 => Some("UNKNOWN_LEADER_EPOCH"),
            76 => Some("UNSUPPORTED_COMPRESSION_TYPE"),
            77 => Some("STALE_BROKER_EPOCH"),
            78 => Some("OFFSET_NOT_AVAILABLE"),
            79 => Some("MEMBER_ID_REQUIRED"),
            80 => Some("PREFERRED_LEADER_NOT_AVAILABLE"),
            81 => Some("GROUP_MAX_SIZE_REACHED"),
            82 => Some("FENCED_INSTANCE_ID"),
            83 => Some("ELIGIBLE_LEADERS_NOT_AVAILABLE"),
            84 => Some("ELECTION_NOT_NEEDED"),
            85 => Some("NO_REASSIGNMENT_IN_PROGRESS"),
            86 => Some("GROUP_SUBSCRIBED_TO_TOPIC"),
            87 => Some("INVALID_RECORD"),
            88 => Some("UNSTABLE_OFFSET_COMMIT"),
            89 => Some("THROTTLING_QUOTA_EXCEEDED"),
            90 => Some("PRODUCER_FENCED"),
            91 => Some("RESOURCE_NOT_FOUND"),
            92 => Some("DUPLICATE_RESOURCE"),
            93 => Some("UNACCEPTABLE_CREDENTIAL"),
            94 => Some("INCONSISTENT_VOTER_SET"),
            95 => Some("INVALID_UPDATE_VERSION"),
            96 => Some("FEATURE_UPDATE_FAILED"),
            97 => Some("PRINCIPAL_DESERIALIZATION_FAILURE"),
            98 => Some("SNAPSHOT_NOT_FOUND"),
            99 => Some("POSITION_OUT_OF_RANGE"),
            100 => Some("UNKNOWN_TOPIC_ID"),
            101 => Some("DUPLICATE_BROKER_REGISTRATION"),
            102 => Some("BROKER_ID_NOT_REGISTERED"),
            103 => Some("INCONSISTENT_TOPIC_ID"),
            104 => Some("INCONSISTENT_CLUSTER_ID"),
            105 => Some("TRANSACTIONAL_ID_NOT_FOUND"),
            106 => Some("FETCH_SESSION_TOPIC_ID_ERROR"),
            107 => Some("INELIGIBLE_REPLICA"),
            108 => Some("NEW_LEADER_ELECTED"),
            109 => Some("OFFSET_MOVED_TO_TIERED_STORAGE"),
            110 => Some("FENCED_MEMBER_EPOCH"),
            111 => Some("UNRELEASED_INSTANCE_ID"),
            112 => Some("UNSUPPORTED_ASSIGNOR"),
            113 => Some("STALE_MEMBER_EPOCH"),
            114 => Some("MISMATCHED_ENDPOINT_TYPE"),
            115 => Some("UNSUPPORTED_ENDPOINT_TYPE"),
            116 => Some("UNKNOWN_CONTROLLER_ID"),
            117 => Some("UNKNOWN_SUBSCRIPTION_ID"),
            118 => Some("TELEMETRY_TOO_LARGE"),
            119 => Some("INVALID_REGISTRATION"),
            120 => Some("TRANSACTION_ABORTABLE"),
            121 => Some("INVALID_RECORD_STATE"),
            122 => Some("SHARE_SESSION_NOT_FOUND"),
            123 => Some("INVALID_SHARE_SESSION_EPOCH"),
            124 => Some("FENCED_STATE_EPOCH"),
            125 => Some("INVALID_VOTER_KEY"),
            126 => Some("DUPLICATE_VOTER"),
            127 => Some("VOTER_NOT_FOUND"),
            128 => Some("INVALID_REGULAR_EXPRESSION"),
            129 => Some("REBOOTSTRAP_REQUIRED"),
            130 => Some("STREAMS_INVALID_TOPOLOGY"),
            131 => Some("STREAMS_INVALID_TOPOLOGY_EPOCH"),
            132 => Some("STREAMS_TOPOLOGY_FENCED"),
            133 => Some("SHARE_SESSION_LIMIT_REACHED"),
            _ => None,
        }
    }

    /// Whether Kafka marks the error retriable.
    pub const fn is_retriable(self) -> bool {
        matches!(
            self.0,
            2 | 3
                | 5
                | 6
                | 7
                | 9
                | 13
                | 14
                | 15
                | 16
                | 19
                | 20
                | 41
                | 51
                | 56
                | 70
                | 71
                | 72
                | 74
                | 75
                | 78
                | 80
                | 83
                | 84
                | 88
                | 89
                | 100
                | 103
                | 106
                | 122
                | 123
                | 133
        )
    }

    /// The wire value.
    pub const fn code(self) -> i16 {
        self.0
    }

    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The same as [`ErrorCode::is_ok`] (the name the coordinators use).
    pub const fn is_none(self) -> bool {
        self.is_ok()
    }
}

impl std::fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name}({})", self.0),
            None => write!(f, "UNKNOWN({})", self.0),
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl From<ErrorCode> for i16 {
    fn from(code: ErrorCode) -> i16 {
        code.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(ErrorCode::INVALID_RECORD_STATE.0, 121);
        assert_eq!(ErrorCode(121).name(), Some("INVALID_RECORD_STATE"));
        assert_eq!(ErrorCode(-1).name(), Some("UNKNOWN_SERVER_ERROR"));
        assert_eq!(ErrorCode(9999).name(), None);
        assert!(ErrorCode::NOT_COORDINATOR.is_retriable());
        assert!(!ErrorCode::PRODUCER_FENCED.is_retriable());
    }
}
