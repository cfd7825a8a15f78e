//! `shoal cluster status`: what a cluster's etcd holds — brokers and their leases, the
//! assigner, the object collector's last round (objects awaiting collection), and each
//! partition's owner, leader epoch, assigned broker, committed end, committed runs and
//! compaction lag (`shoal_cluster::status`).

use std::time::Duration;

use clap::Subcommand;
use shoal_cluster::session::{connect, endpoints_from_url};
use shoal_cluster::Keys;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Brokers, leases, the assigner, and every partition's owner and commit state.
    Status,
}

/// Runs `command` against the cluster `cluster` whose etcd is `metadata_store`.
///
/// # Errors
/// A malformed URL or name, or etcd unreachable.
pub async fn run(
    command: ClusterCommand,
    metadata_store: &str,
    cluster: &str,
) -> anyhow::Result<()> {
    let endpoints = endpoints_from_url(metadata_store)?;
    let keys = Keys::new(cluster)?;
    let client = connect(&endpoints, Duration::from_secs(5)).await?;
    match command {
        ClusterCommand::Status => {
            let status = shoal_cluster::status::read(&client, &keys).await?;
            print!("cluster {cluster} at {}\n{status}", endpoints.join(","));
        }
    }
    Ok(())
}
