//! Feature levels: what this broker supports and what is finalized, as Kafka's feature
//! versioning (KIP-584) exposes them in ApiVersions and changes them with UpdateFeatures.
//!
//! Finalized levels are records in the metadata log; a new data directory starts at each
//! feature's default level (DESIGN.md: `transaction.version=2`, `share.version` at its newest
//! level), and a directory that already has levels keeps them.
//!
//! `share.version` is numbered as Apache Kafka numbers it (spec §3.5):
//! - 1 ([`SHARE_VERSION_SHARE_GROUPS`]): share groups (KIP-932). From level 1 the share-group
//!   RPCs are advertised and served; below it they are not advertised and answer
//!   UNSUPPORTED_VERSION.
//! - 2 ([`SHARE_VERSION_DLQ`]): Kafka 4.4's share-group dead-letter queues (KIP-1191), not
//!   built in Shoal: level 2 is accepted and behaves exactly as level 1 (decision 0012).
//! - 3 ([`SHARE_VERSION_TXN_ACKS`]): transactional acknowledgements (KIP-1289). From level 3
//!   TxnShareAcknowledge (api key 95) is advertised and served; below it it is not advertised
//!   and answers UNSUPPORTED_VERSION. Leaving level 3 is refused while any share-group record
//!   is TX_PENDING ([`check_tx_pending`]).

/// Feature names.
pub const TRANSACTION_VERSION: &str = "transaction.version";
pub const SHARE_VERSION: &str = "share.version";
pub const METADATA_VERSION: &str = "metadata.version";

/// `share.version` 1: share groups (KIP-932).
pub const SHARE_VERSION_SHARE_GROUPS: i16 = 1;
/// `share.version` 2: Kafka 4.4's share-group dead-letter queues (KIP-1191, decision 0022).
pub const SHARE_VERSION_DLQ: i16 = 2;
/// `share.version` 3: transactional acknowledgements (KIP-1289, the draft's `SV_3`).
pub const SHARE_VERSION_TXN_ACKS: i16 = 3;

/// Kafka 4.4's newest `metadata.version` level, 4.4-IV2: the level whose behaviour this broker
/// answers with. It is the only level supported and always finalized: a single node has no
/// metadata quorum to upgrade in steps, and no behaviour here depends on an older level
/// (decision 0006).
pub const METADATA_VERSION_LEVEL: i16 = 33;

/// A feature this broker knows, with its supported range and the level a new directory gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSpec {
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
    pub default_level: i16,
}

/// Every feature this broker supports.
pub const FEATURES: &[FeatureSpec] = &[
    FeatureSpec {
        name: METADATA_VERSION,
        min: METADATA_VERSION_LEVEL,
        max: METADATA_VERSION_LEVEL,
        default_level: METADATA_VERSION_LEVEL,
    },
    FeatureSpec {
        name: SHARE_VERSION,
        min: 0,
        max: SHARE_VERSION_TXN_ACKS,
        default_level: SHARE_VERSION_TXN_ACKS,
    },
    FeatureSpec {
        name: TRANSACTION_VERSION,
        min: 0,
        max: 2,
        default_level: 2,
    },
];

pub fn spec(name: &str) -> Option<&'static FeatureSpec> {
    FEATURES.iter().find(|f| f.name == name)
}

/// UpdateFeatures upgrade types (v1+).
pub const UPGRADE: i8 = 1;
pub const SAFE_DOWNGRADE: i8 = 2;
pub const UNSAFE_DOWNGRADE: i8 = 3;

/// Checks one requested change against the supported range and the current level.
///
/// # Errors
/// Kafka's INVALID_UPDATE_VERSION message for an unknown feature, a level outside the
/// supported range, a downgrade the request did not allow, or a downgrade type asking for a
/// higher level (Kafka's controller refuses that too).
pub fn check_update(name: &str, current: i16, level: i16, upgrade_type: i8) -> Result<(), String> {
    let Some(spec) = spec(name) else {
        return Err(format!(
            "Could not apply finalized feature update because the provided feature {name} is not supported."
        ));
    };
    if level < spec.min || level > spec.max {
        return Err(format!(
            "Invalid update version {level} for feature {name}: supported levels are {}-{}.",
            spec.min, spec.max
        ));
    }
    if level < current && upgrade_type == UPGRADE {
        return Err(format!(
            "Invalid update version {level} for feature {name}: can not downgrade from {current} without a downgrade type."
        ));
    }
    if level > current && upgrade_type != UPGRADE {
        return Err(format!(
            "Invalid update version {level} for feature {name}: a downgrade can not raise the level from {current}."
        ));
    }
    Ok(())
}

/// Whether a `share.version` change from `current` to `level` leaves transactional
/// acknowledgements (level 3 or above to below 3).
pub fn leaves_txn_acks(name: &str, current: i16, level: i16) -> bool {
    name == SHARE_VERSION && current >= SHARE_VERSION_TXN_ACKS && level < SHARE_VERSION_TXN_ACKS
}

/// Refuses a change that leaves transactional acknowledgements while `tx_pending` share-group
/// records are TX_PENDING (spec §3.5): below level 3 TxnShareAcknowledge is no longer served,
/// and staged acknowledgements would sit under a level that claims no transaction can hold
/// them. Every downgrade type is refused alike, `--unsafe` included: the caller's way out is to
/// end the open transactions (commit or abort them, or let them time out), which resolves the
/// records; nothing is lost by waiting. Any other change passes.
///
/// # Errors
/// The INVALID_UPDATE_VERSION message naming the count and how to proceed.
pub fn check_tx_pending(
    name: &str,
    current: i16,
    level: i16,
    tx_pending: i64,
) -> Result<(), String> {
    if leaves_txn_acks(name, current, level) && tx_pending > 0 {
        return Err(format!(
            "Invalid update version {level} for feature {name}: can not downgrade below \
             {SHARE_VERSION_TXN_ACKS} (transactional acknowledgements) while {tx_pending} \
             share-group record(s) are TX_PENDING in open transactions; commit or abort those \
             transactions (or wait for them to time out) and retry."
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_are_checked_against_the_supported_range() {
        assert!(check_update(TRANSACTION_VERSION, 2, 1, SAFE_DOWNGRADE).is_ok());
        assert!(check_update(TRANSACTION_VERSION, 2, 1, UPGRADE).is_err());
        assert!(check_update(TRANSACTION_VERSION, 1, 2, UPGRADE).is_ok());
        assert!(check_update(TRANSACTION_VERSION, 2, 3, UPGRADE).is_err());
        assert!(check_update("no.such.version", 0, 1, UPGRADE).is_err());
        assert!(check_update(TRANSACTION_VERSION, 2, 0, UNSAFE_DOWNGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 0, 1, UPGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 1, 2, UPGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 1, 3, UPGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 3, 4, UPGRADE).is_err());
        assert!(check_update(SHARE_VERSION, 3, 1, UPGRADE).is_err());
        assert!(check_update(SHARE_VERSION, 3, 1, SAFE_DOWNGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 3, 0, UNSAFE_DOWNGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 3, 3, UPGRADE).is_ok());
        assert!(check_update(SHARE_VERSION, 3, 3, SAFE_DOWNGRADE).is_ok());
        assert!(check_update(METADATA_VERSION, 33, 33, UPGRADE).is_ok());
        assert!(check_update(METADATA_VERSION, 33, 32, UNSAFE_DOWNGRADE).is_err());
        assert!(check_update(METADATA_VERSION, 33, 34, UPGRADE).is_err());
    }

    #[test]
    fn a_downgrade_type_can_not_raise_a_level() {
        for downgrade in [SAFE_DOWNGRADE, UNSAFE_DOWNGRADE] {
            let refused = check_update(SHARE_VERSION, 1, 3, downgrade).unwrap_err();
            assert!(refused.contains("can not raise"), "{refused}");
            assert!(check_update(TRANSACTION_VERSION, 1, 2, downgrade).is_err());
        }
    }

    #[test]
    fn share_version_levels_are_kafkas() {
        let share = spec(SHARE_VERSION).unwrap();
        assert_eq!((share.min, share.max), (0, 3));
        assert_eq!(share.default_level, SHARE_VERSION_TXN_ACKS);
        assert_eq!(
            (
                SHARE_VERSION_SHARE_GROUPS,
                SHARE_VERSION_DLQ,
                SHARE_VERSION_TXN_ACKS
            ),
            (1, 2, 3)
        );
    }

    #[test]
    fn leaving_level_3_is_refused_only_while_records_are_tx_pending() {
        for level in [0, 1, 2] {
            let refused = check_tx_pending(SHARE_VERSION, 3, level, 4).unwrap_err();
            assert!(
                refused.contains("4 share-group record(s) are TX_PENDING"),
                "{refused}"
            );
            assert!(
                refused.contains(&format!("Invalid update version {level}")),
                "{refused}"
            );
            assert!(check_tx_pending(SHARE_VERSION, 3, level, 0).is_ok());
        }
        // Staying at or above 3, or moving between levels below it: no transactional
        // acknowledgements are given up, whatever is pending.
        assert!(check_tx_pending(SHARE_VERSION, 3, 3, 4).is_ok());
        assert!(check_tx_pending(SHARE_VERSION, 1, 3, 4).is_ok());
        assert!(check_tx_pending(SHARE_VERSION, 2, 1, 4).is_ok());
        assert!(check_tx_pending(SHARE_VERSION, 1, 0, 4).is_ok());
        // Another feature's downgrade never looks at share-group records.
        assert!(check_tx_pending(TRANSACTION_VERSION, 3, 1, 4).is_ok());
        assert!(leaves_txn_acks(SHARE_VERSION, 3, 2));
        assert!(!leaves_txn_acks(SHARE_VERSION, 2, 1));
        assert!(!leaves_txn_acks(TRANSACTION_VERSION, 3, 1));
    }
}
