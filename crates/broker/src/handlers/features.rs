//! UpdateFeatures: change finalized feature levels (`transaction.version`, `share.version`),
//! as Kafka's `kafka-features` tool does through the controller.
//!
//! Each update is checked against the supported range and the downgrade rules
//! ([`check_update`]); a `share.version` change below 3 is also refused while share-group
//! records are TX_PENDING ([`check_tx_pending`], spec §3.5). Kafka's all-or-nothing rule holds:
//! one refused update fails the request, and `validate_only` runs every check and applies
//! nothing.

use shoal_protocol::messages::update_features_response::UpdatableFeatureResult;
use shoal_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};
use shoal_protocol::ErrorCode;

use super::str_bytes;
use crate::broker::Broker;
use crate::feature_levels::{
    check_tx_pending, check_update, leaves_txn_acks, SAFE_DOWNGRADE, UPGRADE,
};

pub async fn update_features(
    broker: &Broker,
    version: i16,
    request: &UpdateFeaturesRequest,
) -> UpdateFeaturesResponse {
    // Held until the levels are set: a staging that passed its level check finishes first,
    // and none starts between the TX_PENDING count and the downgrade.
    let _gate = broker.feature_gate.write().await;
    let (current, _) = broker.features().await;
    // Counted only when an update would leave transactional acknowledgements (it reads the
    // share-state store under its lock).
    let leaves = request.feature_updates.iter().any(|u| {
        let name = u.feature.as_str();
        leaves_txn_acks(
            name,
            current.get(name).copied().unwrap_or(0),
            u.max_version_level,
        )
    });
    let tx_pending = if leaves {
        broker.share.tx_pending_records(None).await
    } else {
        0
    };
    let mut results = Vec::with_capacity(request.feature_updates.len());
    let mut accepted = Vec::new();
    for update in &request.feature_updates {
        let name = update.feature.as_str();
        // v0 has only AllowDowngrade; v1+ has UpgradeType.
        let upgrade_type = if version == 0 {
            if update.allow_downgrade {
                SAFE_DOWNGRADE
            } else {
                UPGRADE
            }
        } else {
            update.upgrade_type
        };
        let level = update.max_version_level;
        let now = current.get(name).copied().unwrap_or(0);
        let mut result = UpdatableFeatureResult::default().with_feature(update.feature.clone());
        match check_update(name, now, level, upgrade_type)
            .and_then(|()| check_tx_pending(name, now, level, tx_pending))
        {
            Ok(()) => accepted.push((name.to_string(), level)),
            Err(message) => {
                result.error_code = ErrorCode::INVALID_UPDATE_VERSION.code();
                result.error_message = Some(str_bytes(message));
            }
        }
        results.push(result);
    }
    let all_valid = results.iter().all(|r| r.error_code == 0);
    if all_valid && !request.validate_only {
        for (name, level) in accepted {
            if let Err(e) = broker.set_feature_level(&name, level).await {
                for r in &mut results {
                    r.error_code = e.code.code();
                    r.error_message = Some(str_bytes(e.message.clone()));
                }
                break;
            }
        }
    } else if !all_valid {
        // Kafka applies all or nothing: the valid updates of a failed request are not applied.
        for r in &mut results {
            if r.error_code == 0 {
                r.error_code = ErrorCode::INVALID_UPDATE_VERSION.code();
                r.error_message = Some(str_bytes("Another update in the request was invalid."));
            }
        }
    }
    // v2 carries no per-feature results: the first failure is the request's error, else a
    // client reports the update as done (kafka-features printed "upgraded to 99").
    let mut response = UpdateFeaturesResponse::default();
    if version >= 2 {
        if let Some(failed) = results.iter().find(|r| r.error_code != 0) {
            response.error_code = failed.error_code;
            response.error_message = failed.error_message.clone();
        }
    }
    response.with_results(results)
}
