//! The APIs this broker implements, and those a feature level turns on or off: what
//! ApiVersions advertises and what a connection decodes (`Broker::api_table`,
//! `Broker::feature_gated_apis`). Not a handler: the broker's state and the connection read it.

use shoal_protocol::api::ApiTable;
use shoal_protocol::messages::ApiKey;

/// The share-group APIs, served while `share.version` is at least 1.
pub const SHARE_APIS: &[ApiKey] = &[
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareGroupDescribe,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    ApiKey::DescribeShareGroupOffsets,
    ApiKey::AlterShareGroupOffsets,
    ApiKey::DeleteShareGroupOffsets,
];

/// The transactional-acknowledgement APIs (KIP-1289), served while `share.version` is at
/// least 3 ([`crate::feature_levels::SHARE_VERSION_TXN_ACKS`]).
pub const TXN_SHARE_APIS: &[ApiKey] = &[ApiKey::TxnShareAcknowledge];

/// Everything the broker implements whatever the feature levels.
pub fn broker_api_table() -> ApiTable {
    [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::Metadata,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::SyncGroup,
        ApiKey::DescribeGroups,
        ApiKey::ListGroups,
        ApiKey::ApiVersions,
        ApiKey::CreateTopics,
        ApiKey::DeleteTopics,
        ApiKey::DeleteRecords,
        ApiKey::DescribeConfigs,
        ApiKey::AlterReplicaLogDirs,
        ApiKey::DescribeLogDirs,
        ApiKey::AlterConfigs,
        ApiKey::CreatePartitions,
        ApiKey::DeleteGroups,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::OffsetDelete,
        ApiKey::DescribeCluster,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::EndTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::DescribeTransactions,
        ApiKey::ListTransactions,
        ApiKey::UpdateFeatures,
        ApiKey::DescribeProducers,
        ApiKey::WriteTxnMarkers,
        // Share-state RPCs between brokers (`handlers::share_state`); Kafka advertises them
        // whatever share.version is.
        ApiKey::InitializeShareGroupState,
        ApiKey::ReadShareGroupState,
        ApiKey::WriteShareGroupState,
        ApiKey::DeleteShareGroupState,
        ApiKey::ReadShareGroupStateSummary,
        // SASL: answered by a SASL listener's authenticator before authentication, and
        // ILLEGAL_SASL_STATE anywhere else, as Kafka advertises and answers them on every
        // listener.
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
        ApiKey::DescribeUserScramCredentials,
        ApiKey::AlterUserScramCredentials,
        // Versions stop where the codec stops (ApiTable::with): v5, as the request type does
        // although the response type goes to v6 (KIP-939 two-phase commit).
        ApiKey::InitProducerId,
    ]
    .into_iter()
    .fold(ApiTable::new(), ApiTable::with)
    // ACLs at the versions Kafka 4.4 serves (1-3: KIP-896 removed 0); without an authorizer
    // they are answered SECURITY_DISABLED, as Kafka answers them.
    .with_range(ApiKey::DescribeAcls, 1, 3)
    .with_range(ApiKey::CreateAcls, 1, 3)
    .with_range(ApiKey::DeleteAcls, 1, 3)
}
