//! Api keys: every key `kafka-protocol` 0.18 knows, plus the ones Shoal decodes that it lacks.
//!
//! [`ApiKey`] has the same variants and discriminants as `kafka_protocol::messages::ApiKey`
//! and the same methods (`valid_versions`, header versions, `iter`, `TryFrom<i16>`), plus
//! [`ApiKey::TxnShareAcknowledge`] (KIP-1289, [`TXN_SHARE_ACKNOWLEDGE_KEY`]). It is what
//! `shoal_protocol::messages::ApiKey` names, so code importing the key from there sees one type
//! whatever the key; a `kafka-protocol` key converts with `From`/`Into` and compares with `==`.
//!
//! A key being listed here says nothing about whether a broker serves it: that is
//! [`crate::api::ApiTable`].

use kafka_protocol::messages::ApiKey as KafkaApiKey;
use kafka_protocol::protocol::VersionRange;

/// TxnShareAcknowledge's api key (KIP-1289). The proposal's "request 93, response 94" is wrong
/// (a request and its response share one key, and 93 is taken upstream); the draft
/// implementation uses 95, and so does Shoal (spec §3.1).
pub const TXN_SHARE_ACKNOWLEDGE_KEY: i16 = 95;

macro_rules! api_keys {
    (kafka { $($kv:ident = $kn:literal,)* } shoal { $($sv:ident = $sn:expr,)* }) => {
        /// Valid api keys: `kafka-protocol`'s and Shoal's own.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i16)]
        pub enum ApiKey {
            $($kv = $kn,)*
            $($sv = $sn,)*
        }

        impl ApiKey {
            /// Every key, in key order.
            const ALL: &'static [ApiKey] = &[$(ApiKey::$kv,)* $(ApiKey::$sv,)*];

            /// The same key in `kafka-protocol`, `None` for keys it does not know.
            pub fn to_kafka_protocol(self) -> Option<KafkaApiKey> {
                match self {
                    $(ApiKey::$kv => Some(KafkaApiKey::$kv),)*
                    $(ApiKey::$sv => None,)*
                }
            }

            /// Kafka's name of the api (the `request` tag of its metrics).
            pub fn name(self) -> &'static str {
                match self {
                    $(ApiKey::$kv => stringify!($kv),)*
                    $(ApiKey::$sv => stringify!($sv),)*
                }
            }
        }

        impl From<KafkaApiKey> for ApiKey {
            fn from(key: KafkaApiKey) -> Self {
                match key {
                    $(KafkaApiKey::$kv => ApiKey::$kv,)*
                }
            }
        }
    };
}

api_keys! {
    kafka {
        Produce = 0,
        Fetch = 1,
        ListOffsets = 2,
        Metadata = 3,
        OffsetCommit = 8,
        OffsetFetch = 9,
        FindCoordinator = 10,
        JoinGroup = 11,
        Heartbeat = 12,
        LeaveGroup = 13,
        SyncGroup = 14,
        DescribeGroups = 15,
        ListGroups = 16,
        SaslHandshake = 17,
        ApiVersions = 18,
        CreateTopics = 19,
        DeleteTopics = 20,
        DeleteRecords = 21,
        InitProducerId = 22,
        OffsetForLeaderEpoch = 23,
        AddPartitionsToTxn = 24,
        AddOffsetsToTxn = 25,
        EndTxn = 26,
        WriteTxnMarkers = 27,
        TxnOffsetCommit = 28,
        DescribeAcls = 29,
        CreateAcls = 30,
        DeleteAcls = 31,
        DescribeConfigs = 32,
        AlterConfigs = 33,
        AlterReplicaLogDirs = 34,
        DescribeLogDirs = 35,
        SaslAuthenticate = 36,
        CreatePartitions = 37,
        CreateDelegationToken = 38,
        RenewDelegationToken = 39,
        ExpireDelegationToken = 40,
        DescribeDelegationToken = 41,
        DeleteGroups = 42,
        ElectLeaders = 43,
        IncrementalAlterConfigs = 44,
        AlterPartitionReassignments = 45,
        ListPartitionReassignments = 46,
        OffsetDelete = 47,
        DescribeClientQuotas = 48,
        AlterClientQuotas = 49,
        DescribeUserScramCredentials = 50,
        AlterUserScramCredentials = 51,
        Vote = 52,
        BeginQuorumEpoch = 53,
        EndQuorumEpoch = 54,
        DescribeQuorum = 55,
        AlterPartition = 56,
        UpdateFeatures = 57,
        Envelope = 58,
        FetchSnapshot = 59,
        DescribeCluster = 60,
        DescribeProducers = 61,
        BrokerRegistration = 62,
        BrokerHeartbeat = 63,
        UnregisterBroker = 64,
        DescribeTransactions = 65,
        ListTransactions = 66,
        AllocateProducerIds = 67,
        ConsumerGroupHeartbeat = 68,
        ConsumerGroupDescribe = 69,
        ControllerRegistration = 70,
        GetTelemetrySubscriptions = 71,
        PushTelemetry = 72,
        AssignReplicasToDirs = 73,
        ListConfigResources = 74,
        DescribeTopicPartitions = 75,
        ShareGroupHeartbeat = 76,
        ShareGroupDescribe = 77,
        ShareFetch = 78,
        ShareAcknowledge = 79,
        AddRaftVoter = 80,
        RemoveRaftVoter = 81,
        UpdateRaftVoter = 82,
        InitializeShareGroupState = 83,
        ReadShareGroupState = 84,
        WriteShareGroupState = 85,
        DeleteShareGroupState = 86,
        ReadShareGroupStateSummary = 87,
        DescribeShareGroupOffsets = 90,
        AlterShareGroupOffsets = 91,
        DeleteShareGroupOffsets = 92,
    }
    shoal {
        TxnShareAcknowledge = TXN_SHARE_ACKNOWLEDGE_KEY,
    }
}

impl ApiKey {
    /// The request header version for a request of this key at `version`.
    pub fn request_header_version(&self, version: i16) -> i16 {
        match self.to_kafka_protocol() {
            Some(key) => key.request_header_version(version),
            // Every Shoal-only message is flexible at every version: header v2.
            None => 2,
        }
    }

    /// The response header version for a response of this key at `version`.
    pub fn response_header_version(&self, version: i16) -> i16 {
        match self.to_kafka_protocol() {
            Some(key) => key.response_header_version(version),
            None => 1,
        }
    }

    /// The versions Kafka's schemas define for this key (for TxnShareAcknowledge: the draft
    /// implementation's `validVersions`).
    pub fn valid_versions(&self) -> VersionRange {
        match self.to_kafka_protocol() {
            Some(key) => key.valid_versions(),
            // TxnShareAcknowledge, the only Shoal-only key: v0.
            None => VersionRange { min: 0, max: 0 },
        }
    }

    /// Every key, in key order.
    pub fn iter() -> impl Iterator<Item = ApiKey> {
        Self::ALL.iter().copied()
    }
}

impl TryFrom<i16> for ApiKey {
    type Error = ();

    fn try_from(key: i16) -> Result<Self, Self::Error> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| *k as i16 == key)
            .ok_or(())
    }
}

impl TryFrom<ApiKey> for KafkaApiKey {
    type Error = ();

    fn try_from(key: ApiKey) -> Result<Self, Self::Error> {
        key.to_kafka_protocol().ok_or(())
    }
}

impl PartialEq<KafkaApiKey> for ApiKey {
    fn eq(&self, other: &KafkaApiKey) -> bool {
        *self as i16 == *other as i16
    }
}

impl PartialEq<ApiKey> for KafkaApiKey {
    fn eq(&self, other: &ApiKey) -> bool {
        *self as i16 == *other as i16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kafka_protocol_key_maps_to_the_same_number_and_back() {
        let mut n = 0;
        for kafka in KafkaApiKey::iter() {
            let ours = ApiKey::from(kafka);
            assert_eq!(ours as i16, kafka as i16);
            assert_eq!(ours.to_kafka_protocol(), Some(kafka));
            assert_eq!(ours, kafka);
            assert_eq!(ApiKey::try_from(kafka as i16), Ok(ours));
            assert_eq!(ours.valid_versions(), kafka.valid_versions());
            assert_eq!(format!("{ours:?}"), format!("{kafka:?}"));
            n += 1;
        }
        assert_eq!(ApiKey::iter().count(), n + 1);
    }

    #[test]
    fn txn_share_acknowledge_is_key_95_with_its_name() {
        let key = ApiKey::try_from(95).unwrap();
        assert_eq!(key, ApiKey::TxnShareAcknowledge);
        assert_eq!(key as i16, TXN_SHARE_ACKNOWLEDGE_KEY);
        assert_eq!(key.name(), "TxnShareAcknowledge");
        assert_eq!(format!("{key:?}"), "TxnShareAcknowledge");
        assert_eq!(key.to_kafka_protocol(), None);
        assert!(KafkaApiKey::try_from(95).is_err());
        assert_eq!((key.valid_versions().min, key.valid_versions().max), (0, 0));
        assert_eq!(key.request_header_version(0), 2);
        assert_eq!(key.response_header_version(0), 1);
        assert!(ApiKey::try_from(96).is_err());
    }

    #[test]
    fn keys_iterate_in_key_order() {
        let keys: Vec<i16> = ApiKey::iter().map(|k| k as i16).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    }
}
