//! Features (KIP-584): describe (ApiVersions: the supported ranges and finalized levels, with
//! their epoch) and update (UpdateFeatures: upgrade, safe or unsafe downgrade, validate only).
//!
//! UpdateFeatures is all or nothing: one refused update fails the request and none is applied.
//! Up to v1 the controller answers per feature, and a request-level error (NOT_CONTROLLER,
//! CLUSTER_AUTHORIZATION_FAILED) is the outer `Err`. v2 drops the per-feature results and puts
//! the first refusal in the request's error: that outcome, error or success, is then every
//! feature's, as Kafka's admin client reports it.

use std::collections::BTreeMap;

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiVersionsRequest, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::{ApiKey, ErrorCode};

use super::{check, in_order, s, Admin, ItemResults, Mode};
use crate::broker::{SOFTWARE_NAME, SOFTWARE_VERSION};
use crate::error::Error;
use crate::versions::FEATURES_MAX;

/// What [`Admin::describe_features`] reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureMetadata {
    /// Finalized level by feature name (a feature left out is at level 0).
    pub finalized: BTreeMap<String, i16>,
    /// The epoch of the finalized levels, `None` when the broker has none.
    pub finalized_epoch: Option<i64>,
    /// The levels the broker supports, `(min, max)` by feature name.
    pub supported: BTreeMap<String, (i16, i16)>,
}

/// How a level may change (UpdateFeatures v1 `UpgradeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpgradeType {
    Upgrade,
    /// A downgrade that loses no metadata.
    SafeDowngrade,
    /// A downgrade that may lose metadata.
    UnsafeDowngrade,
}

impl UpgradeType {
    fn code(self) -> i8 {
        match self {
            UpgradeType::Upgrade => 1,
            UpgradeType::SafeDowngrade => 2,
            UpgradeType::UnsafeDowngrade => 3,
        }
    }
}

/// One feature's new level; level 0 disables it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FeatureUpdate {
    pub level: i16,
    pub upgrade_type: UpgradeType,
}

impl Admin {
    /// The supported and finalized features of a broker (ApiVersions v3+; v4+ lists the
    /// features whose minimum level is 0 too).
    ///
    /// # Errors
    /// When no broker answered, or one answered with an error.
    pub async fn describe_features(&self) -> Result<FeatureMetadata, Error> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(SOFTWARE_NAME))
            .with_client_software_version(StrBytes::from_static_str(SOFTWARE_VERSION));
        let response = self
            .cluster
            .retry(|| async {
                let r = self.cluster.send_any(&request).await?;
                check(ApiKey::ApiVersions, r.error_code, None)?;
                Ok(r)
            })
            .await?;
        if response.supported_features.len() > FEATURES_MAX
            || response.finalized_features.len() > FEATURES_MAX
        {
            return Err(Error::MalformedResponse {
                addr: String::new(),
                api: ApiKey::ApiVersions,
                version: -1,
                reason: format!("more than {FEATURES_MAX} features"),
            });
        }
        Ok(FeatureMetadata {
            finalized: response
                .finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.max_version_level))
                .collect(),
            finalized_epoch: (response.finalized_features_epoch >= 0)
                .then_some(response.finalized_features_epoch),
            supported: response
                .supported_features
                .iter()
                .map(|f| (f.name.to_string(), (f.min_version, f.max_version)))
                .collect(),
        })
    }

    /// Changes finalized feature levels in one UpdateFeatures, one result per feature.
    ///
    /// # Errors
    /// When the request could not be made, or (v0-1) its request-level error
    /// (NOT_CONTROLLER after retries, CLUSTER_AUTHORIZATION_FAILED); per feature,
    /// INVALID_UPDATE_VERSION with the controller's reason (at v2, the request's error for
    /// every feature).
    pub async fn update_features(
        &self,
        updates: &BTreeMap<String, FeatureUpdate>,
        mode: Mode,
    ) -> Result<ItemResults<String, ()>, Error> {
        let keys: Vec<String> = updates.keys().cloned().collect();
        let request = UpdateFeaturesRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_validate_only(mode.validate_only())
            .with_feature_updates(
                updates
                    .iter()
                    .map(|(name, u)| {
                        FeatureUpdateKey::default()
                            .with_feature(s(name))
                            .with_max_version_level(u.level)
                            .with_upgrade_type(u.upgrade_type.code())
                    })
                    .collect(),
            );
        let (version, response) = self
            .cluster
            .retry(|| async {
                let (version, r) = self.controller_once(|_| request.clone()).await?;
                if r.error_code == ErrorCode::NOT_CONTROLLER.0 {
                    self.cluster.invalidate_metadata();
                    check(
                        ApiKey::UpdateFeatures,
                        r.error_code,
                        r.error_message.as_ref(),
                    )?;
                }
                Ok((version, r))
            })
            .await?;
        features_updated(&keys, version, response)
    }
}

fn features_updated(
    keys: &[String],
    version: i16,
    response: UpdateFeaturesResponse,
) -> Result<ItemResults<String, ()>, Error> {
    if response.results.is_empty() {
        let top = |api| check(api, response.error_code, response.error_message.as_ref());
        if version >= 2 {
            // v2 carries no per-feature results: the request's outcome is every feature's,
            // as Kafka's admin client completes every feature's future with it.
            return Ok(keys
                .iter()
                .map(|k| (k.clone(), top(ApiKey::UpdateFeatures)))
                .collect());
        }
        top(ApiKey::UpdateFeatures)?;
    }
    let answers = response.results.into_iter().map(|f| {
        let result = check(
            ApiKey::UpdateFeatures,
            f.error_code,
            f.error_message.as_ref(),
        );
        (f.feature.to_string(), result)
    });
    Ok(in_order(ApiKey::UpdateFeatures, keys, answers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;

    fn keys() -> Vec<String> {
        vec!["share.version".into(), "transaction.version".into()]
    }

    #[test]
    fn v1_answers_per_feature_and_a_missing_one_is_an_error() {
        let response =
            UpdateFeaturesResponse::default().with_results(vec![UpdatableFeatureResult::default()
                .with_feature(s("share.version"))
                .with_error_code(ErrorCode::INVALID_UPDATE_VERSION.0)
                .with_error_message(Some(s("records are TX_PENDING")))]);
        let results = features_updated(&keys(), 1, response).unwrap();
        let e = results[0].1.as_ref().unwrap_err();
        assert_eq!(e.code(), ErrorCode::INVALID_UPDATE_VERSION);
        assert!(e.to_string().ends_with("records are TX_PENDING"), "{e}");
        assert!(matches!(
            results[1].1,
            Err(Error::IncompleteResponse { .. })
        ));
    }

    #[test]
    fn v2_gives_every_feature_the_request_s_outcome() {
        let refused = UpdateFeaturesResponse::default()
            .with_error_code(ErrorCode::INVALID_UPDATE_VERSION.0)
            .with_error_message(Some(s("no")));
        let results = features_updated(&keys(), 2, refused).unwrap();
        for (_, r) in &results {
            let e = r.as_ref().unwrap_err();
            assert_eq!(e.code(), ErrorCode::INVALID_UPDATE_VERSION);
            assert!(e.to_string().ends_with(": no"), "{e}");
        }
        let done = features_updated(&keys(), 2, UpdateFeaturesResponse::default()).unwrap();
        assert!(done.iter().all(|(_, r)| r.is_ok()));
        // v1 without results: the request's error fails the call, or no feature is answered.
        let e = features_updated(
            &keys(),
            1,
            UpdateFeaturesResponse::default().with_error_code(ErrorCode::NOT_CONTROLLER.0),
        )
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::NOT_CONTROLLER);
        let none = features_updated(&keys(), 1, UpdateFeaturesResponse::default()).unwrap();
        assert!(none
            .iter()
            .all(|(_, r)| matches!(r, Err(Error::IncompleteResponse { .. }))));
    }

    #[test]
    fn upgrade_types_are_kafka_s_codes() {
        assert_eq!(UpgradeType::Upgrade.code(), 1);
        assert_eq!(UpgradeType::SafeDowngrade.code(), 2);
        assert_eq!(UpgradeType::UnsafeDowngrade.code(), 3);
    }
}
