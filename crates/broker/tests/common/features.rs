//! Finalized features over the wire for the integration tests: UpdateFeatures and what
//! ApiVersions advertises.

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, UpdateFeaturesRequest};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::messages::ApiKey;

/// UpdateFeatures upgrade types.
pub const UPGRADE: i8 = 1;
pub const SAFE_DOWNGRADE: i8 = 2;
pub const UNSAFE_DOWNGRADE: i8 = 3;

pub fn feature(name: &str, level: i16, upgrade_type: i8) -> FeatureUpdateKey {
    FeatureUpdateKey::default()
        .with_feature(StrBytes::from_string(name.to_string()))
        .with_max_version_level(level)
        .with_upgrade_type(upgrade_type)
}

/// UpdateFeatures v1 (per-feature results) of `updates`: each feature's (name, error code,
/// message).
pub async fn update(
    conn: &mut Connection,
    updates: Vec<FeatureUpdateKey>,
    validate_only: bool,
) -> Vec<(String, i16, Option<String>)> {
    let r = conn
        .request(
            1,
            &UpdateFeaturesRequest::default()
                .with_timeout_ms(5000)
                .with_validate_only(validate_only)
                .with_feature_updates(updates),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.results
        .iter()
        .map(|f| {
            (
                f.feature.to_string(),
                f.error_code,
                f.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect()
}

/// Moves `share.version` to `level`; panics unless it succeeded.
pub async fn set_share_version(conn: &mut Connection, level: i16, upgrade_type: i8) {
    let results = update(
        conn,
        vec![feature("share.version", level, upgrade_type)],
        false,
    )
    .await;
    assert_eq!(results[0].1, 0, "share.version -> {level}: {results:?}");
}

/// ApiVersions v4; panics unless it succeeded.
pub async fn api_versions(conn: &mut Connection) -> ApiVersionsResponse {
    let r = conn
        .request(4, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
    r
}

/// The (min, max) version `r` advertises for `key`, None if it does not list it.
pub fn advertised(r: &ApiVersionsResponse, key: ApiKey) -> Option<(i16, i16)> {
    r.api_keys
        .iter()
        .find(|k| k.api_key == key as i16)
        .map(|k| (k.min_version, k.max_version))
}
