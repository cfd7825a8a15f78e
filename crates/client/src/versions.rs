//! ApiVersions negotiation, sans-IO: the versions this client can send of every api it knows
//! ([`CLIENT_APIS`]), and for one broker the highest version both sides support
//! ([`ApiVersions::version`]).
//!
//! An api the broker does not list, or lists only outside our range, is a typed
//! [`Error::UnsupportedVersion`] before anything is sent: the caller learns it cannot use the
//! feature on this broker instead of getting a closed connection.

use std::collections::BTreeMap;

use kafka_protocol::messages::ApiVersionsResponse;
use shoal_protocol::api::codec_versions;
use shoal_protocol::{ApiKey, ErrorCode};

use crate::error::Error;

/// Most api keys an ApiVersions response may list (Kafka has fewer than 100).
pub const API_KEYS_MAX: usize = 1024;
/// Most finalized features an ApiVersions response may list.
pub const FEATURES_MAX: usize = 64;

/// Every api this client sends, with the lowest version it will send. The highest is what
/// `shoal-protocol`'s codec encodes and decodes ([`codec_versions`]).
///
/// Lowest versions: what our code fills in correctly and Kafka 4.x brokers still serve
/// (KIP-896 removed older ones): Metadata from 10 (topic ids), Produce from 3 (record batch
/// v2), Fetch from 4 (isolation level), FindCoordinator from 1 (key type), and the
/// transactional and share apis from their first version.
pub const CLIENT_APIS: &[(ApiKey, i16)] = &[
    (ApiKey::Produce, 3),
    (ApiKey::Fetch, 4),
    (ApiKey::ListOffsets, 1),
    (ApiKey::Metadata, 10),
    (ApiKey::OffsetCommit, 2),
    (ApiKey::OffsetFetch, 1),
    (ApiKey::FindCoordinator, 1),
    (ApiKey::ListGroups, 0),
    (ApiKey::ApiVersions, 0),
    (ApiKey::CreateTopics, 2),
    (ApiKey::DeleteTopics, 1),
    (ApiKey::InitProducerId, 0),
    (ApiKey::AddPartitionsToTxn, 0),
    (ApiKey::AddOffsetsToTxn, 0),
    (ApiKey::EndTxn, 0),
    (ApiKey::TxnOffsetCommit, 0),
    (ApiKey::DescribeConfigs, 1),
    (ApiKey::AlterConfigs, 0),
    (ApiKey::CreatePartitions, 0),
    (ApiKey::DeleteGroups, 0),
    (ApiKey::IncrementalAlterConfigs, 0),
    // v1: the upgrade type (safe and unsafe downgrades); v0 has only AllowDowngrade.
    (ApiKey::UpdateFeatures, 1),
    (ApiKey::DescribeCluster, 0),
    (ApiKey::DescribeProducers, 0),
    (ApiKey::DescribeTransactions, 0),
    (ApiKey::ListTransactions, 0),
    // What `Admin::abort_transaction` sends to a partition leader (v1+: Kafka 4 serves no v0).
    (ApiKey::WriteTxnMarkers, 1),
    (ApiKey::ShareGroupHeartbeat, 1),
    (ApiKey::ShareGroupDescribe, 1),
    (ApiKey::ShareFetch, 1),
    (ApiKey::ShareAcknowledge, 1),
    (ApiKey::DescribeShareGroupOffsets, 0),
    (ApiKey::AlterShareGroupOffsets, 0),
    (ApiKey::DeleteShareGroupOffsets, 0),
    (ApiKey::TxnShareAcknowledge, 0),
    // SASL, on connections whose security.protocol asks for it (v1: SaslAuthenticate
    // requests rather than bare tokens).
    (ApiKey::SaslHandshake, 1),
    (ApiKey::SaslAuthenticate, 0),
];

/// The versions this client can send of `api`, `None` for an api it does not know.
pub fn client_range(api: ApiKey) -> Option<(i16, i16)> {
    let (_, min) = CLIENT_APIS.iter().find(|(key, _)| *key == api)?;
    let codec = codec_versions(api)?;
    let min = (*min).max(codec.min);
    (min <= codec.max).then_some((min, codec.max))
}

/// The highest version in both inclusive ranges, `None` when they do not meet.
pub fn highest_common(client: (i16, i16), broker: (i16, i16)) -> Option<i16> {
    let low = client.0.max(broker.0);
    let high = client.1.min(broker.1);
    (low <= high).then_some(high)
}

/// One broker's answer to ApiVersions, validated: what it serves and its finalized features.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiVersions {
    node_id: i32,
    broker: BTreeMap<i16, (i16, i16)>,
    finalized_features: BTreeMap<String, i16>,
}

impl ApiVersions {
    /// Validates a response. `node_id` names the broker in errors (-1 for a bootstrap server
    /// whose id is not known yet). The error code is the caller's to check first (see
    /// [`ApiVersions::retry_version`] for UNSUPPORTED_VERSION).
    ///
    /// # Errors
    /// Why the table is impossible (an empty or negative range, a key listed twice, more than
    /// [`API_KEYS_MAX`] keys or [`FEATURES_MAX`] features); the caller reports it as a
    /// malformed response.
    pub fn from_response(node_id: i32, response: &ApiVersionsResponse) -> Result<Self, String> {
        if response.api_keys.len() > API_KEYS_MAX {
            return Err(format!(
                "{} api keys, more than {API_KEYS_MAX}",
                response.api_keys.len()
            ));
        }
        if response.finalized_features.len() > FEATURES_MAX {
            return Err(format!(
                "{} finalized features, more than {FEATURES_MAX}",
                response.finalized_features.len()
            ));
        }
        let mut broker = BTreeMap::new();
        for key in &response.api_keys {
            if key.min_version < 0 || key.min_version > key.max_version {
                return Err(format!(
                    "api key {} has the empty range {}-{}",
                    key.api_key, key.min_version, key.max_version
                ));
            }
            if broker
                .insert(key.api_key, (key.min_version, key.max_version))
                .is_some()
            {
                return Err(format!("api key {} listed twice", key.api_key));
            }
        }
        let finalized_features = response
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect();
        Ok(ApiVersions {
            node_id,
            broker,
            finalized_features,
        })
    }

    /// When a broker answers ApiVersions with UNSUPPORTED_VERSION it lists (in a v0 body) the
    /// ApiVersions versions it serves: the version to ask again with, if any is ours.
    pub fn retry_version(response: &ApiVersionsResponse) -> Option<i16> {
        if response.error_code != ErrorCode::UNSUPPORTED_VERSION.0 {
            return None;
        }
        let listed = response
            .api_keys
            .iter()
            .find(|k| k.api_key == ApiKey::ApiVersions as i16)?;
        highest_common(
            client_range(ApiKey::ApiVersions)?,
            (listed.min_version, listed.max_version),
        )
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// The broker's range for `api`, `None` when it does not serve it.
    pub fn broker_range(&self, api: ApiKey) -> Option<(i16, i16)> {
        self.broker.get(&(api as i16)).copied()
    }

    /// The version to send `api` at: the highest both this client and the broker support.
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] when the ranges do not meet, or the broker does not serve
    /// the api; [`Error::Encode`] when this client does not know the api at all.
    pub fn version(&self, api: ApiKey) -> Result<i16, Error> {
        let Some(client) = client_range(api) else {
            return Err(Error::Encode {
                api,
                version: -1,
                reason: "not in this client's api table".into(),
            });
        };
        let broker = self.broker_range(api);
        broker
            .and_then(|broker| highest_common(client, broker))
            .ok_or(Error::UnsupportedVersion {
                node_id: self.node_id,
                api,
                client_min: client.0,
                client_max: client.1,
                broker_range: broker,
            })
    }

    /// The finalized level of a feature (`transaction.version`, `share.version`), `None`
    /// when the broker does not report it (not finalized, or an older broker).
    pub fn finalized_feature(&self, name: &str) -> Option<i16> {
        self.finalized_features.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    fn response(keys: &[(i16, i16, i16)]) -> ApiVersionsResponse {
        ApiVersionsResponse::default().with_api_keys(
            keys.iter()
                .map(|&(k, min, max)| {
                    ApiVersion::default()
                        .with_api_key(k)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        )
    }

    #[test]
    fn every_client_api_has_a_codec_range() {
        for (api, min) in CLIENT_APIS {
            let (low, high) = client_range(*api).unwrap_or_else(|| panic!("{api:?}"));
            assert!(low >= *min && low <= high, "{api:?}");
        }
        assert_eq!(client_range(ApiKey::Vote), None);
    }

    #[test]
    fn chooses_the_highest_common_version() {
        let (_, metadata_max) = client_range(ApiKey::Metadata).unwrap();
        let v = ApiVersions::from_response(1, &response(&[(3, 0, 99), (0, 0, 5)])).unwrap();
        assert_eq!(v.version(ApiKey::Metadata).unwrap(), metadata_max);
        assert_eq!(v.version(ApiKey::Produce).unwrap(), 5);
        match v.version(ApiKey::ShareFetch) {
            Err(Error::UnsupportedVersion {
                api: ApiKey::ShareFetch,
                broker_range: None,
                node_id: 1,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let old = ApiVersions::from_response(1, &response(&[(3, 0, 9)])).unwrap();
        assert!(matches!(
            old.version(ApiKey::Metadata),
            Err(Error::UnsupportedVersion {
                broker_range: Some((0, 9)),
                ..
            })
        ));
    }

    #[test]
    fn refuses_impossible_tables() {
        assert!(ApiVersions::from_response(1, &response(&[(3, 5, 4)])).is_err());
        assert!(ApiVersions::from_response(1, &response(&[(3, -1, 4)])).is_err());
        assert!(ApiVersions::from_response(1, &response(&[(3, 0, 4), (3, 0, 4)])).is_err());
        let many: Vec<_> = (0..=API_KEYS_MAX as i16).map(|k| (k, 0, 1)).collect();
        assert!(ApiVersions::from_response(1, &response(&many)).is_err());
    }

    #[test]
    fn reads_finalized_features_and_the_v0_fallback() {
        let mut r = response(&[(18, 0, 2)]);
        r.finalized_features = vec![FinalizedFeatureKey::default()
            .with_name(StrBytes::from_static_str("transaction.version"))
            .with_max_version_level(2)];
        let v = ApiVersions::from_response(1, &r).unwrap();
        assert_eq!(v.finalized_feature("transaction.version"), Some(2));
        assert_eq!(v.finalized_feature("share.version"), None);
        assert_eq!(ApiVersions::retry_version(&r), None);
        r.error_code = ErrorCode::UNSUPPORTED_VERSION.0;
        assert_eq!(ApiVersions::retry_version(&r), Some(2));
    }

    proptest! {
        /// Whatever the broker lists, the chosen version is inside both ranges and no higher
        /// version is; and an error comes exactly when the ranges do not meet.
        #[test]
        fn negotiation_picks_the_highest_version_in_both_ranges(
            api_index in 0..CLIENT_APIS.len(),
            broker_min in 0i16..20,
            width in 0i16..20,
        ) {
            let api = CLIENT_APIS[api_index].0;
            let client = client_range(api).unwrap();
            let broker = (broker_min, broker_min + width);
            let v = ApiVersions::from_response(7, &response(&[(api as i16, broker.0, broker.1)]))
                .unwrap();
            let in_both = |x: i16| client.0 <= x && x <= client.1 && broker.0 <= x && x <= broker.1;
            match v.version(api) {
                Ok(version) => {
                    prop_assert!(in_both(version));
                    prop_assert!(!in_both(version + 1));
                }
                Err(Error::UnsupportedVersion { broker_range, .. }) => {
                    prop_assert_eq!(broker_range, Some(broker));
                    prop_assert!((client.0..=client.1).all(|x| !in_both(x)));
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }
    }
}
