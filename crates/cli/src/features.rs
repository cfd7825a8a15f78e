//! `shoal features`: show the supported and finalized feature levels, and upgrade, downgrade
//! or disable one — what Kafka's `kafka-features` tool does, over the same requests
//! (ApiVersions for describe, UpdateFeatures for changes) through the client's [`Admin`]. `share.version` 3 is
//! transactional acknowledgements; the broker refuses to leave it while share-group records
//! are TX_PENDING.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use shoal_broker::feature_levels::{METADATA_VERSION, METADATA_VERSION_LEVEL};
use shoal_client::admin::{FeatureUpdate, Mode, UpgradeType};
use shoal_client::{Admin, Error};

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

async fn describe(admin: &Admin) -> anyhow::Result<()> {
    let features = admin
        .describe_features()
        .await
        .map_err(|e| crate::admin::failed("ApiVersions", e))?;
    let epoch = features.finalized_epoch.unwrap_or(-1);
    for line in describe_lines(&features.supported, &features.finalized, epoch) {
        println!("{line}");
    }
    Ok(())
}

/// Sends the changes in one UpdateFeatures and prints one line per feature; fails if any was
/// refused (the broker then applied none).
async fn update(
    admin: &Admin,
    op: &str,
    levels: BTreeMap<String, i16>,
    upgrade_type: UpgradeType,
    dry_run: bool,
) -> anyhow::Result<()> {
    let updates = levels
        .iter()
        .map(|(name, level)| {
            let update = FeatureUpdate {
                level: *level,
                upgrade_type,
            };
            (name.clone(), update)
        })
        .collect();
    let mode = if dry_run {
        Mode::ValidateOnly
    } else {
        Mode::Apply
    };
    let results = match admin.update_features(&updates, mode).await {
        Ok(results) => results,
        Err(Error::Kafka { code, message, .. }) => bail!(
            "UpdateFeatures: {code}{}",
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ),
        Err(e) => return Err(e.into()),
    };
    let mut failed = 0;
    for (name, result) in &results {
        let level = levels.get(name).copied().unwrap_or_default();
        let what = if op == "disable" {
            name.clone()
        } else {
            format!("{name} to {level}")
        };
        match result {
            Ok(()) => {
                let done = if op == "disable" {
                    "disabled".to_string()
                } else {
                    format!("{op}d to {level}")
                };
                let verb = if dry_run { "can be" } else { "was" };
                println!("{name} {verb} {done}.");
            }
            Err(Error::Kafka { code, message, .. }) => {
                failed += 1;
                println!(
                    "{} {op} {what}. {code}: {}",
                    if dry_run { "Can not" } else { "Could not" },
                    message.as_deref().unwrap_or("no message")
                );
            }
            Err(_) => {
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
    let admin = crate::admin::connect(bootstrap).await?;
    let downgrade_type = |unsafe_downgrade: bool| {
        if unsafe_downgrade {
            UpgradeType::UnsafeDowngrade
        } else {
            UpgradeType::SafeDowngrade
        }
    };
    let result = match command {
        FeaturesCommand::Describe => describe(&admin).await,
        FeaturesCommand::Upgrade { features, dry_run } => {
            let levels = parse_levels(&features)?;
            update(&admin, "upgrade", levels, UpgradeType::Upgrade, dry_run).await
        }
        FeaturesCommand::Downgrade {
            features,
            unsafe_downgrade,
            dry_run,
        } => {
            let levels = parse_levels(&features)?;
            let kind = downgrade_type(unsafe_downgrade);
            update(&admin, "downgrade", levels, kind, dry_run).await
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
            let kind = downgrade_type(unsafe_downgrade);
            update(&admin, "disable", levels, kind, dry_run).await
        }
    };
    admin.close().await;
    result
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
