//! `shoal share-groups`: list share groups, describe one (members, assignment, start offset and
//! lag per share partition), and reset a group's start offsets — what Kafka's
//! `kafka-share-groups` tool does, over the Kafka protocol.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, BrokerId, GroupId, ListGroupsRequest, ListOffsetsRequest,
    MetadataRequest, ShareGroupDescribeRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::share::describe_share_group_offsets::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequestGroup,
};
use shoal_protocol::ErrorCode;

#[derive(Subcommand, Debug)]
pub enum ShareGroupsCommand {
    /// List the share groups with their state.
    List,
    /// Describe a share group: members with their assignment, then the start offset and lag
    /// of every share partition it has state for.
    Describe {
        #[arg(long)]
        group: String,
        /// The broker's metrics endpoint (`shoal serve --metrics`): also show each share
        /// partition's in-flight window (records acquired and available between SPSO and SPEO).
        #[arg(long)]
        metrics: Option<String>,
    },
    /// Reset an empty share group's start offsets on a topic (all its partitions, or one).
    Reset {
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: Option<i32>,
        /// The log start offset.
        #[arg(long, conflicts_with_all = ["to_latest", "to_offset"])]
        to_earliest: bool,
        /// The log end offset.
        #[arg(long, conflicts_with_all = ["to_earliest", "to_offset"])]
        to_latest: bool,
        /// An explicit offset.
        #[arg(long, conflicts_with_all = ["to_earliest", "to_latest"])]
        to_offset: Option<i64>,
    },
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn check(code: i16, what: &str) -> anyhow::Result<()> {
    if code != 0 {
        bail!("{what}: {}", ErrorCode(code));
    }
    Ok(())
}

/// Partition count of `topic`.
async fn partitions(conn: &mut Connection, topic: &str) -> anyhow::Result<Vec<i32>> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let r = conn
        .request(
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s(topic))))
            ])),
        )
        .await?;
    let t = r.topics.first().context("empty metadata response")?;
    check(t.error_code, topic)?;
    Ok(t.partitions.iter().map(|p| p.partition_index).collect())
}

/// ListOffsets at `timestamp` (-2 earliest, -1 latest) for each partition.
async fn list_offsets(
    conn: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let r = conn
        .request(
            7,
            &ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|p| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(*p)
                                    .with_timestamp(timestamp)
                            })
                            .collect(),
                    )]),
        )
        .await?;
    let mut out = BTreeMap::new();
    for t in r.topics {
        for p in t.partitions {
            check(p.error_code, &format!("{topic}-{}", p.partition_index))?;
            out.insert(p.partition_index, p.offset);
        }
    }
    Ok(out)
}

/// Reads the share-partition gauges of `group` from a broker's Prometheus endpoint:
/// (topic, partition) → [in flight, acquired, available].
fn share_metrics(addr: &str, group: &str) -> anyhow::Result<BTreeMap<(String, i32), [i64; 3]>> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)
        .with_context(|| format!("cannot connect to the metrics endpoint {addr}"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: shoal\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(parse_share_metrics(&body, group))
}

/// The share-partition gauges of `group` in Prometheus text.
fn parse_share_metrics(body: &str, group: &str) -> BTreeMap<(String, i32), [i64; 3]> {
    let mut out: BTreeMap<(String, i32), [i64; 3]> = BTreeMap::new();
    let wanted = [
        "shoal_share_partition_in_flight_records",
        "shoal_share_partition_acquired_records",
        "shoal_share_partition_available_records",
    ];
    for line in body.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some(i) = wanted.iter().position(|w| *w == name) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string)
        };
        if label("group").as_deref() != Some(group) {
            continue;
        }
        let (Some(topic), Some(partition), Ok(value)) = (
            label("topic"),
            label("partition").and_then(|p| p.parse::<i32>().ok()),
            value.trim().parse::<i64>(),
        ) else {
            continue;
        };
        out.entry((topic, partition)).or_insert([0; 3])[i] = value;
    }
    out
}

/// Runs one `shoal share-groups` command against `bootstrap`, printing to stdout.
///
/// # Errors
/// Connection failures or Kafka errors in the responses.
pub async fn run(bootstrap: SocketAddr, command: ShareGroupsCommand) -> anyhow::Result<()> {
    let mut conn = Connection::connect(bootstrap)
        .await
        .with_context(|| format!("cannot connect to {bootstrap}"))?;
    match command {
        ShareGroupsCommand::List => {
            let r = conn
                .request(
                    5,
                    &ListGroupsRequest::default().with_types_filter(vec![s("share")]),
                )
                .await?;
            check(r.error_code, "ListGroups")?;
            println!("{:<40} State", "GroupId");
            for g in r.groups {
                println!("{:<40} {}", g.group_id.0.as_str(), g.group_state.as_str());
            }
        }
        ShareGroupsCommand::Describe { group, metrics } => {
            let d = conn
                .request(
                    1,
                    &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(&group))]),
                )
                .await?;
            let g = d
                .groups
                .first()
                .context("empty ShareGroupDescribe response")?;
            check(g.error_code, &group)?;
            println!(
                "group {group}: state {}, epoch {}, assignor {}, {} member(s)",
                g.group_state.as_str(),
                g.group_epoch,
                g.assignor_name.as_str(),
                g.members.len()
            );
            println!("{:<38} {:<24} Assignment", "MemberId", "ClientId");
            for m in &g.members {
                let assignment: Vec<String> = m
                    .assignment
                    .topic_partitions
                    .iter()
                    .map(|t| format!("{}:{:?}", t.topic_name.0.as_str(), t.partitions))
                    .collect();
                println!(
                    "{:<38} {:<24} {}",
                    m.member_id.as_str(),
                    m.client_id.as_str(),
                    assignment.join(" ")
                );
            }
            let o = conn
                .request(
                    1,
                    &DescribeShareGroupOffsetsRequest {
                        groups: vec![DescribeShareGroupOffsetsRequestGroup {
                            group_id: GroupId(s(&group)),
                            topics: None,
                            ..Default::default()
                        }],
                        ..Default::default()
                    },
                )
                .await?;
            let og = o
                .groups
                .first()
                .context("empty DescribeShareGroupOffsets response")?;
            check(og.error_code, &group)?;
            let in_flight = match &metrics {
                Some(addr) => share_metrics(addr, &group)?,
                None => BTreeMap::new(),
            };
            print!(
                "{:<30} {:>9} {:>14} {:>10}",
                "Topic", "Partition", "StartOffset", "Lag"
            );
            if metrics.is_some() {
                print!(" {:>9} {:>9} {:>9}", "InFlight", "Acquired", "Available");
            }
            println!();
            for t in &og.topics {
                for p in &t.partitions {
                    print!(
                        "{:<30} {:>9} {:>14} {:>10}",
                        t.topic_name.0.as_str(),
                        p.partition_index,
                        p.start_offset,
                        p.lag
                    );
                    if metrics.is_some() {
                        let key = (t.topic_name.0.to_string(), p.partition_index);
                        match in_flight.get(&key) {
                            Some([f, a, v]) => print!(" {f:>9} {a:>9} {v:>9}"),
                            None => print!(" {:>9} {:>9} {:>9}", "-", "-", "-"),
                        }
                    }
                    println!();
                }
            }
        }
        ShareGroupsCommand::Reset {
            group,
            topic,
            partition,
            to_earliest,
            to_latest,
            to_offset,
        } => {
            let all = partitions(&mut conn, &topic).await?;
            let chosen: Vec<i32> = match partition {
                Some(p) if all.contains(&p) => vec![p],
                Some(p) => bail!("{topic} has no partition {p}"),
                None => all,
            };
            let offsets: BTreeMap<i32, i64> = match (to_earliest, to_latest, to_offset) {
                (true, _, _) => list_offsets(&mut conn, &topic, &chosen, -2).await?,
                (_, true, _) => list_offsets(&mut conn, &topic, &chosen, -1).await?,
                (_, _, Some(o)) => chosen.iter().map(|p| (*p, o)).collect(),
                _ => bail!("give --to-earliest, --to-latest or --to-offset"),
            };
            let r = conn
                .request(
                    0,
                    &AlterShareGroupOffsetsRequest::default()
                        .with_group_id(GroupId(s(&group)))
                        .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(TopicName(s(&topic)))
                            .with_partitions(
                                offsets
                                    .iter()
                                    .map(|(p, o)| {
                                        AlterShareGroupOffsetsRequestPartition::default()
                                            .with_partition_index(*p)
                                            .with_start_offset(*o)
                                    })
                                    .collect(),
                            )]),
                )
                .await?;
            check(r.error_code, &group)?;
            for t in r.responses {
                for p in t.partitions {
                    check(p.error_code, &format!("{topic}-{}", p.partition_index))?;
                    println!(
                        "{group}: {topic}-{} starts at {}",
                        p.partition_index,
                        offsets.get(&p.partition_index).copied().unwrap_or(-1)
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_gauges_are_read_for_one_group() {
        let body = "# TYPE shoal_share_partition_in_flight_records gauge\n\
            shoal_share_partition_in_flight_records{group=\"g\",topic=\"t\",partition=\"1\"} 7\n\
            shoal_share_partition_in_flight_records{group=\"h\",topic=\"t\",partition=\"1\"} 9\n\
            shoal_share_partition_acquired_records{group=\"g\",topic=\"t\",partition=\"1\"} 5\n\
            shoal_share_partition_available_records{group=\"g\",topic=\"t\",partition=\"1\"} 2\n\
            shoal_log_end_offset{topic=\"t\",partition=\"1\"} 100\n";
        let parsed = parse_share_metrics(body, "g");
        assert_eq!(parsed.get(&("t".to_string(), 1)), Some(&[7, 5, 2]));
        assert_eq!(parsed.len(), 1);
    }
}
