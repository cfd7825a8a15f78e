//! ApiVersions: the APIs this broker serves, at the version ranges Kafka 4.1 advertises.

use shoal_protocol::api::ApiTable;
use shoal_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use shoal_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use shoal_protocol::response::Response;
use shoal_protocol::share::TxnShareAcknowledgeResponse;
use shoal_protocol::ErrorCode;

use crate::api_table::TXN_SHARE_APIS;

pub const API_KEY: i16 = ApiKey::ApiVersions as i16;

/// The answer to a request whose API a feature level has turned off, for the feature-gated
/// APIs whose handlers do not check the level themselves: TxnShareAcknowledge below
/// `share.version` 3 gets UNSUPPORTED_VERSION at the top level (spec §3.2, step 1), which the
/// draft's Java client treats as fatal, as it must. `None`: the request goes on to its handler.
/// (The share-group APIs answer UNSUPPORTED_VERSION below level 1 in their own handlers, each
/// in its own response shape.)
pub fn disabled_by_feature(broker: &crate::broker::Broker, api: ApiKey) -> Option<Response> {
    if TXN_SHARE_APIS.contains(&api) && !broker.txn_share_acks_enabled() {
        return Some(
            TxnShareAcknowledgeResponse {
                error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
                ..TxnShareAcknowledgeResponse::default()
            }
            .into(),
        );
    }
    None
}

fn api_keys(table: &ApiTable) -> Vec<ApiVersion> {
    table
        .advertised()
        .map(|r| {
            ApiVersion::default()
                .with_api_key(r.api_key as i16)
                .with_min_version(r.min)
                .with_max_version(r.max)
        })
        .collect()
}

/// ApiVersions with the supported and finalized feature levels (v3+ carries them).
///
/// Below v4 the supported features whose minimum level is 0 are left out, as Kafka does:
/// clients older than ApiVersions v4 (Kafka 3.9) refuse a supported range starting at 0.
pub fn handle(
    table: &ApiTable,
    version: i16,
    _request: &ApiVersionsRequest,
    finalized: &std::collections::BTreeMap<String, i16>,
    finalized_epoch: i64,
) -> ApiVersionsResponse {
    let supported = crate::feature_levels::FEATURES
        .iter()
        .filter(|f| version >= 4 || f.min > 0)
        .map(|f| {
            SupportedFeatureKey::default()
                .with_name(super::str_bytes(f.name))
                .with_min_version(f.min)
                .with_max_version(f.max)
        })
        .collect();
    let finalized = finalized
        .iter()
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(super::str_bytes(name.clone()))
                .with_min_version_level(*level)
                .with_max_version_level(*level)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(0)
        .with_api_keys(api_keys(table))
        .with_supported_features(supported)
        .with_finalized_features_epoch(finalized_epoch)
        .with_finalized_features(finalized)
}

/// The v0 answer to an ApiVersions request at a version we do not serve: the client reads the
/// error and the key list, then retries at a version both sides support.
pub fn unsupported_version_response(table: &ApiTable) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ErrorCode::UNSUPPORTED_VERSION.code())
        .with_api_keys(api_keys(table))
}
