//! What a cluster looks like in etcd, for `shoal cluster status`: the brokers with their
//! leases, the assigner, and per partition its owner, leader epoch, assigned broker,
//! committed end and how many committed runs its index holds (what compacting objects into
//! per-partition segments will shrink) — what a Kafka user reads from `kafka-metadata-quorum`
//! and `kafka-topics --describe`.

use std::collections::BTreeMap;

use etcd_client::{Client, GetOptions};

use crate::assigner::Partition;
use crate::keys::Keys;

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerStatus {
    pub node_id: i32,
    pub endpoint: String,
    /// Seconds left on its lease (-1: unknown).
    pub lease_ttl_secs: i64,
}

/// One partition as etcd records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionStatus {
    /// (node id, leader epoch) of its owner, if any.
    pub owner: Option<(i32, i32)>,
    pub assigned: Option<i32>,
    pub committed_end: i64,
    /// Committed runs in its index.
    pub runs: usize,
}

/// The whole picture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The etcd revision it was read at.
    pub revision: i64,
    pub brokers: Vec<BrokerStatus>,
    pub assigner: Option<i32>,
    pub partitions: BTreeMap<Partition, PartitionStatus>,
}

fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

/// Reads the cluster's status from etcd (one consistent revision for the key reads).
///
/// # Errors
/// etcd unreachable.
pub async fn read(client: &Client, keys: &Keys) -> crate::Result<Status> {
    let mut c = client.clone();
    let root = keys.brokers().trim_end_matches("brokers/").to_string();
    let all = c
        .get(root.clone(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut status = Status {
        revision: all.header().map_or(0, |h| h.revision()),
        ..Status::default()
    };
    let mut leases = Vec::new();
    for kv in all.kvs() {
        let key = text(kv.key());
        if let Some(node_id) = keys.parse_broker(&key) {
            leases.push(kv.lease());
            status.brokers.push(BrokerStatus {
                node_id,
                endpoint: text(kv.value()),
                lease_ttl_secs: -1,
            });
        } else if key == keys.assigner() {
            status.assigner = text(kv.value()).parse().ok();
        } else if let Some(p) = keys.parse_owner(&key) {
            let mut fields = text(kv.value())
                .split(' ')
                .map(|f| f.parse::<i32>().ok())
                .collect::<Vec<_>>()
                .into_iter();
            if let (Some(Some(node)), Some(Some(epoch))) = (fields.next(), fields.next()) {
                status.partitions.entry(p).or_default().owner = Some((node, epoch));
            }
        } else if let Some(p) = keys.parse_assignment(&key) {
            status.partitions.entry(p).or_default().assigned = text(kv.value()).parse().ok();
        } else if let Some(p) = keys.parse_end(&key) {
            status.partitions.entry(p).or_default().committed_end =
                text(kv.value()).parse().unwrap_or(-1);
        } else if let Some(p) = keys.parse_index_entry(&key) {
            status.partitions.entry(p).or_default().runs += 1;
        }
    }
    for (broker, lease) in status.brokers.iter_mut().zip(leases) {
        if let Ok(ttl) = c.lease_time_to_live(lease, None).await {
            broker.lease_ttl_secs = ttl.ttl();
        }
    }
    Ok(status)
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "etcd revision {}", self.revision)?;
        writeln!(f, "brokers: {}", self.brokers.len())?;
        for b in &self.brokers {
            writeln!(
                f,
                "  node {:<4} {:<24} lease {}s",
                b.node_id, b.endpoint, b.lease_ttl_secs
            )?;
        }
        match self.assigner {
            Some(n) => writeln!(f, "assigner: node {n}")?,
            None => writeln!(f, "assigner: none")?,
        }
        writeln!(f, "partitions: {}", self.partitions.len())?;
        writeln!(
            f,
            "  {:<24} {:>9} {:>6} {:>12} {:>8} {:>13} {:>5}",
            "TOPIC", "PARTITION", "OWNER", "LEADER-EPOCH", "ASSIGNED", "COMMITTED-END", "RUNS"
        )?;
        let dash = |v: Option<i32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        for ((topic, partition), p) in &self.partitions {
            writeln!(
                f,
                "  {:<24} {:>9} {:>6} {:>12} {:>8} {:>13} {:>5}",
                topic,
                partition,
                dash(p.owner.map(|o| o.0)),
                dash(p.owner.map(|o| o.1)),
                dash(p.assigned),
                p.committed_end,
                p.runs
            )?;
        }
        Ok(())
    }
}
