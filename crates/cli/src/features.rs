//! `shoal features`: show the supported and finalized feature levels, and upgrade, downgrade
//! or disable one — what Kafka's `kafka-features` tool does, over the same requests
//! (ApiVersions for describe, UpdateFeatures for changes). `share.version` 3 is
//! transactional acknowledgements; the broker refuses to leave it while share-group records
//! are TX_PENDING.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiVersionsRequest, UpdateFeaturesRequest};
use kafka_protocol::protocol::StrBytes;
use shoal_broker::features::{
    METADATA_VERSION, METADATA_VERSION_LEVEL, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE,
};
use shoal_client::Connection;
use shoal_protocol::ErrorCode;

/// Kafka's release name of [`METADATA_VERSION_LEVEL`], the only `metadata.version` Shoal has.
const METADATA_VERSION_RELEASE: &str = "4.4-IV2";

#[derive(Subcommand, Debug)]
pub enum FeaturesCommand {
    /// Show every supported feature with its range and finalized level.
    Describe,
    /// Raise one or more features (`--feature share.version=3`).
    Upgrade {
        /// NAME=LEVEL (repeatable).
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// Check the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Lower one or more features (`--feature share.version=1`).
    Downgrade {
        /// NAME=LEVEL (repeatable).
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// Ask for an unsafe downgrade (Kafka's UNSAFE_DOWNGRADE). Shoal still refuses to
        /// leave share.version 3 while records are TX_PENDING.
        #[arg(long = "unsafe")]
        unsafe_downgrade: bool,
        /// Check the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Set one or more features to level 0.
    Disable {
        /// NAME (repeatable).
        #[arg(long = "feature", value_name = "NAME", required = true)]
        features: Vec<String>,
        /// Ask for an unsafe downgrade.
        #[arg(long = "unsafe")]
        unsafe_downgrade: bool,
        /// Check the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `NAME=LEVEL`, each name once.
fn parse_levels(specs: &[String]) -> anyhow::Result<BTreeMap<String, i16>> {
    let mut levels = BTreeMap::new();
    for spec in specs {
        let (name, level) = spec
            .split_once('=')
            .with_context(|| format!("--feature expects NAME=LEVEL, got {spec}"))?;
        let name = name.trim();
        let level: i16 = level
            .trim()
            .parse()
            .with_context(|| format!("{spec}: the level is not a 16-bit integer"))?;
        if levels.insert(name.to_string(), level).is_some() {
            bail!("feature {name} given more than once");
        }
    }
    Ok(levels)
}

fn level_text(name: &str, level: i16) -> String {
    if name == METADATA_VERSION && level == METADATA_VERSION_LEVEL {
        METADATA_VERSION_RELEASE.to_string()
    } else {
        level.to_string()
    }
}

/// One describe line per supported feature, in name order.
fn describe_lines(
    supported: &BTreeMap<String, (i16, i16)>,
    finalized: &BTreeMap<String, i16>,
    epoch: i64,
) -> Vec<String> {
    let epoch = if epoch < 0 {
        "-".to_string()
    } else {
        epoch.to_string()
    };
    supported
        .iter()
        .map(|(name, (min, max))| {
            let level = finalized.get(name).copied().unwrap_or(0);
            format!(
                "Feature: {name}\tSupportedMinVersion: {}\tSupportedMaxVersion: {}\t\
                 FinalizedVersionLevel: {}\tEpoch: {epoch}",
                level_text(name, *min),
                level_text(name, *max),
                level_text(name, level),
            )
        })
        .collect()
}

async fn describe(conn: &mut Connection) -> anyhow::Result<()> {
    // v4: below it a broker leaves out the supported features whose minimum level is 0.
    let r = conn.request(4, &ApiVersionsRequest::default()).await?;
    if r.error_code != 0 {
        bail!("ApiVersions: {}", ErrorCode(r.error_code));
    }
    let supported = r
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), (f.min_version, f.max_version)))
        .collect();
    let finalized = r
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.max_version_level))
        .collect();
    for line in describe_lines(&supported, &finalized, r.finalized_features_epoch) {
        println!("{line}");
    }
    Ok(())
}

/// Sends the changes in one UpdateFeatures (v1: a result per feature) and prints one line per
/// feature; fails if any was refused (the broker then applied none).
async fn update(
    conn: &mut Connection,
    op: &str,
    levels: BTreeMap<String, i16>,
    upgrade_type: i8,
    dry_run: bool,
) -> anyhow::Result<()> {
    let request = UpdateFeaturesRequest::default()
        .with_timeout_ms(60_000)
        .with_validate_only(dry_run)
        .with_feature_updates(
            levels
                .iter()
                .map(|(name, level)| {
                    FeatureUpdateKey::default()
                        .with_feature(StrBytes::from_string(name.clone()))
                        .with_max_version_level(*level)
                        .with_upgrade_type(upgrade_type)
                })
                .collect(),
        );
    let r = conn.request(1, &request).await?;
    if r.error_code != 0 {
        bail!(
            "UpdateFeatures: {}{}",
            ErrorCode(r.error_code),
            r.error_message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
    }
    let mut failed = 0;
    for (name, level) in &levels {
        let what = if op == "disable" {
            name.clone()
        } else {
            format!("{name} to {level}")
        };
        let result = r.results.iter().find(|f| f.feature.as_str() == name);
        match result {
            Some(f) if f.error_code == 0 => {
                let done = if op == "disable" {
                    "disabled".to_string()
                } else {
                    format!("{op}d to {level}")
                };
                let verb = if dry_run { "can be" } else { "was" };
                println!("{name} {verb} {done}.");
            }
            Some(f) => {
                failed += 1;
                println!(
                    "{} {op} {what}. {}: {}",
                    if dry_run { "Can not" } else { "Could not" },
                    ErrorCode(f.error_code),
                    f.error_message.as_deref().unwrap_or("no message")
                );
            }
            None => {
                failed += 1;
                println!("Could not {op} {what}: the broker did not answer for it.");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} feature update(s) failed", levels.len());
    }
    Ok(())
}

pub async fn run(bootstrap: SocketAddr, command: FeaturesCommand) -> anyhow::Result<()> {
    let mut conn = Connection::connect(bootstrap)
        .await
        .with_context(|| format!("cannot connect to {bootstrap}"))?;
    let downgrade_type = |unsafe_downgrade: bool| {
        if unsafe_downgrade {
            UNSAFE_DOWNGRADE
        } else {
            SAFE_DOWNGRADE
        }
    };
    match command {
        FeaturesCommand::Describe => describe(&mut conn).await,
        FeaturesCommand::Upgrade { features, dry_run } => {
            update(
                &mut conn,
                "upgrade",
                parse_levels(&features)?,
                UPGRADE,
                dry_run,
            )
            .await
        }
        FeaturesCommand::Downgrade {
            features,
            unsafe_downgrade,
            dry_run,
        } => {
            let levels = parse_levels(&features)?;
            update(
                &mut conn,
                "downgrade",
                levels,
                downgrade_type(unsafe_downgrade),
                dry_run,
            )
            .await
        }
        FeaturesCommand::Disable {
            features,
            unsafe_downgrade,
            dry_run,
        } => {
            let mut levels = BTreeMap::new();
            for name in features {
                if levels.insert(name.clone(), 0).is_some() {
                    bail!("feature {name} given more than once");
                }
            }
            update(
                &mut conn,
                "disable",
                levels,
                downgrade_type(unsafe_downgrade),
                dry_run,
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_once_each() {
        let levels =
            parse_levels(&["share.version=3".into(), " transaction.version = 1".into()]).unwrap();
        assert_eq!(
            levels.into_iter().collect::<Vec<_>>(),
            vec![
                ("share.version".to_string(), 3),
                ("transaction.version".to_string(), 1)
            ]
        );
        assert!(parse_levels(&["share.version".into()]).is_err());
        assert!(parse_levels(&["share.version=x".into()]).is_err());
        assert!(parse_levels(&["share.version=1".into(), "share.version=2".into()]).is_err());
    }

    #[test]
    fn describe_lines_name_metadata_version_by_release() {
        let supported = BTreeMap::from([
            ("share.version".to_string(), (0, 3)),
            ("metadata.version".to_string(), (33, 33)),
        ]);
        let finalized = BTreeMap::from([("metadata.version".to_string(), 33)]);
        assert_eq!(
            describe_lines(&supported, &finalized, 7),
            vec![
                "Feature: metadata.version\tSupportedMinVersion: 4.4-IV2\t\
                 SupportedMaxVersion: 4.4-IV2\tFinalizedVersionLevel: 4.4-IV2\tEpoch: 7",
                "Feature: share.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 3\t\
                 FinalizedVersionLevel: 0\tEpoch: 7",
            ]
        );
        assert!(describe_lines(&supported, &finalized, -1)[0].ends_with("Epoch: -"));
    }
}
