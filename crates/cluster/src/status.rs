//! What a cluster looks like in etcd, for `shoal cluster status`: the brokers with their
//! leases, the assigner, and per partition its owner, leader epoch, assigned broker,
//! committed end, how many committed runs its index holds and, of those, how many compaction
//! has yet to fold into a segment (its compaction lag: unsealed entries, the last apart;
//! [`crate::compaction`]); and the object collector's last round (objects awaiting collection)
//! — what a Kafka user reads from `kafka-metadata-quorum`
//! and `kafka-topics --describe`.

use std::collections::BTreeMap;

use etcd_client::{Client, GetOptions};

use crate::assigner::Partition;
use crate::compaction::Policy;
use crate::keys::Keys;
use crate::objects::ObjectRef;

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
    /// Of those, unsealed ones before the last: what compaction has yet to fold.
    pub compaction_lag: usize,
}

/// The object collector's last round, as it recorded it ([`crate::collector`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectorStatus {
    pub listed: usize,
    pub referenced: usize,
    /// Unreferenced, within their grace.
    pub awaiting: usize,
    pub deleted: usize,
}

/// The whole picture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The etcd revision it was read at.
    pub revision: i64,
    pub brokers: Vec<BrokerStatus>,
    pub assigner: Option<i32>,
    pub partitions: BTreeMap<Partition, PartitionStatus>,
    /// None while no live broker has collected.
    pub collector: Option<CollectorStatus>,
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
    // Per partition, whether each index entry (in key order) is sealed.
    let mut sealed: BTreeMap<Partition, Vec<bool>> = BTreeMap::new();
    let segment_bytes = Policy::default().segment_bytes;
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
            status.partitions.entry(p.clone()).or_default().runs += 1;
            let len = ObjectRef::decode(kv.value()).map_or(0, |o| o.len);
            sealed
                .entry(p)
                .or_default()
                .push(len.saturating_mul(2) >= segment_bytes);
        } else if key == keys.collector() {
            status.collector = crate::collector::parse_report(kv.value()).map(
                |(listed, referenced, awaiting, deleted)| CollectorStatus {
                    listed,
                    referenced,
                    awaiting,
                    deleted,
                },
            );
        }
    }
    for (p, entries) in sealed {
        let before_last = &entries[..entries.len().saturating_sub(1)];
        status.partitions.entry(p).or_default().compaction_lag =
            before_last.iter().filter(|s| !**s).count();
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
        match self.collector {
            Some(c) => writeln!(
                f,
                "objects: {} listed, {} referenced, {} awaiting collection, {} deleted last round",
                c.listed, c.referenced, c.awaiting, c.deleted
            )?,
            None => writeln!(f, "objects: not collected yet")?,
        }
        writeln!(f, "partitions: {}", self.partitions.len())?;
        writeln!(
            f,
            "  {:<24} {:>9} {:>6} {:>12} {:>8} {:>13} {:>5} {:>15}",
            "TOPIC",
            "PARTITION",
            "OWNER",
            "LEADER-EPOCH",
            "ASSIGNED",
            "COMMITTED-END",
            "RUNS",
            "COMPACTION-LAG"
        )?;
        let dash = |v: Option<i32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        for ((topic, partition), p) in &self.partitions {
            writeln!(
                f,
                "  {:<24} {:>9} {:>6} {:>12} {:>8} {:>13} {:>5} {:>15}",
                topic,
                partition,
                dash(p.owner.map(|o| o.0)),
                dash(p.owner.map(|o| o.1)),
                dash(p.assigned),
                p.committed_end,
                p.runs,
                p.compaction_lag
            )?;
        }
        Ok(())
    }
}
