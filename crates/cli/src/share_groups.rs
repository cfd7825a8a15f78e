//! `shoal share-groups`: list share groups, describe one (members, assignment, start offset and
//! lag per share partition), and reset a group's start offsets — what Kafka's
//! `kafka-share-groups` tool does, over the Kafka protocol through the client's [`Admin`].
//! With `--metrics`, describe adds what no Kafka API carries, read from the broker's
//! Prometheus endpoint: the in-flight window, the TX_PENDING records and transactional
//! acknowledgements (KIP-1289) of each share partition, and the broker-wide
//! time-in-TX_PENDING summary.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use shoal_client::admin::OffsetSpec;
use shoal_client::{Admin, Error};

use crate::admin::failed;

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
        /// partition's in-flight window (records acquired and available between SPSO and
        /// SPEO), its TX_PENDING records and transactional acknowledgements (staged,
        /// committed, aborted), and the broker's time-in-TX_PENDING summary. Kafka's
        /// DescribeShareGroupOffsets carries none of these.
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

/// What a broker's Prometheus endpoint says about one share partition of a group. A field is
/// None when the broker did not report it (no live machine: only `tx_pending`, from the
/// persisted state).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct SharePartitionMetrics {
    in_flight: Option<i64>,
    acquired: Option<i64>,
    available: Option<i64>,
    tx_pending: Option<i64>,
    staged: Option<i64>,
    committed: Option<i64>,
    aborted: Option<i64>,
}

/// The broker-wide time-in-TX_PENDING histogram: cumulative buckets (upper bound in seconds,
/// records), records observed and their total time.
#[derive(Debug, Default, Clone, PartialEq)]
struct TxPendingTime {
    buckets: Vec<(f64, u64)>,
    count: u64,
    sum_s: f64,
}

impl TxPendingTime {
    /// The upper bound of the bucket holding quantile `q`; None past the last bound.
    fn quantile_bound(&self, q: f64) -> Option<f64> {
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        self.buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= rank)
            .map(|(bound, _)| *bound)
    }

    /// One line: how many records were resolved and how long they were TX_PENDING.
    fn summary(&self) -> String {
        if self.count == 0 {
            return "Time in TX_PENDING (broker-wide): no staged record resolved yet".to_string();
        }
        let bound = |q: f64| match self.quantile_bound(q) {
            Some(b) => format!("<= {b} s"),
            None => format!("> {} s", self.buckets.last().map_or(0.0, |(b, _)| *b)),
        };
        format!(
            "Time in TX_PENDING (broker-wide): {} record(s) resolved, mean {:.3} s, p50 {}, p99 {}",
            self.count,
            self.sum_s / self.count as f64,
            bound(0.5),
            bound(0.99)
        )
    }
}

/// A group's share-partition series by (topic, partition).
type GroupShareMetrics = BTreeMap<(String, i32), SharePartitionMetrics>;

/// Reads a broker's Prometheus endpoint: the share-partition series of `group` and the
/// broker-wide time-in-TX_PENDING histogram.
fn share_metrics(addr: &str, group: &str) -> anyhow::Result<(GroupShareMetrics, TxPendingTime)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)
        .with_context(|| format!("cannot connect to the metrics endpoint {addr}"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: shoal\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok((
        parse_share_metrics(&body, group),
        parse_tx_pending_time(&body),
    ))
}

/// The value of label `key` in `k1="v1",k2="v2"`.
fn label(labels: &str, key: &str) -> Option<String> {
    labels
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_string)
}

/// The share-partition series of `group` in Prometheus text.
fn parse_share_metrics(body: &str, group: &str) -> GroupShareMetrics {
    type Field = fn(&mut SharePartitionMetrics) -> &mut Option<i64>;
    let wanted: [(&str, Field); 7] = [
        ("shoal_share_partition_in_flight_records", |m| {
            &mut m.in_flight
        }),
        ("shoal_share_partition_acquired_records", |m| {
            &mut m.acquired
        }),
        ("shoal_share_partition_available_records", |m| {
            &mut m.available
        }),
        ("shoal_share_partition_txn_pending_records", |m| {
            &mut m.tx_pending
        }),
        ("shoal_share_partition_txn_staged_records_total", |m| {
            &mut m.staged
        }),
        ("shoal_share_partition_txn_committed_records_total", |m| {
            &mut m.committed
        }),
        ("shoal_share_partition_txn_aborted_records_total", |m| {
            &mut m.aborted
        }),
    ];
    let mut out = GroupShareMetrics::new();
    for line in body.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((_, field)) = wanted.iter().find(|(w, _)| *w == name) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        if label(labels, "group").as_deref() != Some(group) {
            continue;
        }
        let (Some(topic), Some(partition), Ok(value)) = (
            label(labels, "topic"),
            label(labels, "partition").and_then(|p| p.parse::<i32>().ok()),
            value.trim().parse::<i64>(),
        ) else {
            continue;
        };
        *field(out.entry((topic, partition)).or_default()) = Some(value);
    }
    out
}

/// The broker-wide `shoal_share_txn_pending_time_seconds` histogram in Prometheus text.
fn parse_tx_pending_time(body: &str) -> TxPendingTime {
    const NAME: &str = "shoal_share_txn_pending_time_seconds";
    let mut h = TxPendingTime::default();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(NAME) else {
            continue;
        };
        if let Some(rest) = rest.strip_prefix("_bucket{") {
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            if let (Some(Ok(bound)), Ok(n)) = (
                label(labels, "le").map(|b| b.parse::<f64>()),
                value.trim().parse::<u64>(),
            ) {
                if bound.is_finite() {
                    h.buckets.push((bound, n));
                }
            }
        } else if let Some(v) = rest.strip_prefix("_count ") {
            h.count = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = rest.strip_prefix("_sum ") {
            h.sum_s = v.trim().parse().unwrap_or(0.0);
        }
    }
    h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    h
}

/// Runs one `shoal share-groups` command against `bootstrap`, printing to stdout.
///
/// # Errors
/// Connection failures or Kafka errors in the responses.
pub async fn run(bootstrap: SocketAddr, command: ShareGroupsCommand) -> anyhow::Result<()> {
    let admin = crate::admin::connect(bootstrap).await?;
    let result = match command {
        ShareGroupsCommand::List => list(&admin).await,
        ShareGroupsCommand::Describe { group, metrics } => {
            describe(&admin, &group, metrics.as_deref()).await
        }
        ShareGroupsCommand::Reset {
            group,
            topic,
            partition,
            to_earliest,
            to_latest,
            to_offset,
        } => {
            let to = match (to_earliest, to_latest, to_offset) {
                (true, _, _) => ResetTo::Spec(OffsetSpec::Earliest),
                (_, true, _) => ResetTo::Spec(OffsetSpec::Latest),
                (_, _, Some(o)) => ResetTo::Offset(o),
                _ => ResetTo::Unset,
            };
            reset(&admin, &group, &topic, partition, to).await
        }
    };
    admin.close().await;
    result
}

async fn list(admin: &Admin) -> anyhow::Result<()> {
    let groups = admin
        .list_share_groups()
        .await
        .map_err(|e| failed("ListGroups", e))?;
    println!("{:<40} State", "GroupId");
    for g in groups {
        println!("{:<40} {}", g.group_id, g.state);
    }
    Ok(())
}

async fn describe(admin: &Admin, group: &str, metrics: Option<&str>) -> anyhow::Result<()> {
    let described = admin.describe_share_groups(&[group]).await?;
    let g = match described.into_iter().next().map(|(_, r)| r) {
        Some(Ok(g)) => g,
        Some(Err(Error::IncompleteResponse { .. })) | None => {
            bail!("empty ShareGroupDescribe response")
        }
        Some(Err(e)) => return Err(failed(group, e)),
    };
    println!(
        "group {group}: state {}, epoch {}, assignor {}, {} member(s)",
        g.state,
        g.epoch,
        g.assignor,
        g.members.len()
    );
    println!("{:<38} {:<24} Assignment", "MemberId", "ClientId");
    for m in &g.members {
        let assignment: Vec<String> = m
            .assignment
            .iter()
            .map(|(topic, _, partitions)| format!("{topic}:{partitions:?}"))
            .collect();
        println!(
            "{:<38} {:<24} {}",
            m.member_id,
            m.client_id,
            assignment.join(" ")
        );
    }
    let offsets = match admin.describe_share_group_offsets(group, None).await {
        Ok(offsets) => offsets,
        Err(Error::IncompleteResponse { .. }) => {
            bail!("empty DescribeShareGroupOffsets response")
        }
        Err(e) => return Err(failed(group, e)),
    };
    let (scraped, tx_time) = match metrics {
        Some(addr) => {
            let (partitions, time) = share_metrics(addr, group)?;
            (partitions, Some(time))
        }
        None => (BTreeMap::new(), None),
    };
    print!(
        "{:<30} {:>9} {:>14} {:>10}",
        "Topic", "Partition", "StartOffset", "Lag"
    );
    if metrics.is_some() {
        print!(
            " {:>9} {:>9} {:>9} {:>10} {:>9} {:>12} {:>10}",
            "InFlight",
            "Acquired",
            "Available",
            "TX_PENDING",
            "TxnStaged",
            "TxnCommitted",
            "TxnAborted"
        );
    }
    println!();
    let cell = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for ((topic, partition), offset) in &offsets {
        // A share partition the coordinator could not read: no offset to show.
        let (start, lag) = match offset {
            Ok(o) => (Some(o.start_offset), Some(o.lag)),
            Err(_) => (None, None),
        };
        print!(
            "{:<30} {:>9} {:>14} {:>10}",
            topic,
            partition,
            cell(start),
            cell(lag)
        );
        if metrics.is_some() {
            let m = scraped
                .get(&(topic.clone(), *partition))
                .copied()
                .unwrap_or_default();
            print!(
                " {:>9} {:>9} {:>9} {:>10} {:>9} {:>12} {:>10}",
                cell(m.in_flight),
                cell(m.acquired),
                cell(m.available),
                cell(m.tx_pending),
                cell(m.staged),
                cell(m.committed),
                cell(m.aborted)
            );
        }
        println!();
    }
    match tx_time {
        Some(time) => println!("{}", time.summary()),
        // DescribeShareGroupOffsets is Kafka's schema and carries no TX_PENDING count;
        // the broker's metrics endpoint is where it is.
        None => println!(
            "(TX_PENDING counts and transactional acknowledgements: add --metrics HOST:PORT)"
        ),
    }
    Ok(())
}

/// Where `reset` moves the start offsets to.
enum ResetTo {
    Spec(OffsetSpec),
    Offset(i64),
    Unset,
}

async fn reset(
    admin: &Admin,
    group: &str,
    topic: &str,
    partition: Option<i32>,
    to: ResetTo,
) -> anyhow::Result<()> {
    let described = admin.describe_topics(&[topic]).await?;
    let all: Vec<i32> = match described.into_iter().next().map(|(_, r)| r) {
        Some(Ok(t)) => t.partitions.iter().map(|p| p.partition).collect(),
        Some(Err(e)) => return Err(failed(topic, e)),
        None => bail!("empty metadata response"),
    };
    let chosen: Vec<i32> = match partition {
        Some(p) if all.contains(&p) => vec![p],
        Some(p) => bail!("{topic} has no partition {p}"),
        None => all,
    };
    let offsets: BTreeMap<i32, i64> = match to {
        ResetTo::Spec(spec) => {
            let mut offsets = BTreeMap::new();
            for (p, offset) in admin.list_offsets(topic, &chosen, spec).await? {
                let offset = offset.map_err(|e| failed(&format!("{topic}-{p}"), e))?;
                offsets.insert(p, offset);
            }
            offsets
        }
        ResetTo::Offset(o) => chosen.iter().map(|p| (*p, o)).collect(),
        ResetTo::Unset => bail!("give --to-earliest, --to-latest or --to-offset"),
    };
    let request: Vec<((String, i32), i64)> = offsets
        .iter()
        .map(|(p, o)| ((topic.to_owned(), *p), *o))
        .collect();
    let altered = admin
        .alter_share_group_offsets(group, &request)
        .await
        .map_err(|e| failed(group, e))?;
    for ((_, p), result) in altered {
        result.map_err(|e| failed(&format!("{topic}-{p}"), e))?;
        println!(
            "{group}: {topic}-{p} starts at {}",
            offsets.get(&p).copied().unwrap_or(-1)
        );
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
            shoal_share_partition_txn_pending_records{group=\"g\",topic=\"t\",partition=\"1\"} 12\n\
            shoal_share_partition_txn_staged_records_total{group=\"g\",topic=\"t\",partition=\"1\"} 40\n\
            shoal_share_partition_txn_committed_records_total{group=\"g\",topic=\"t\",partition=\"1\"} 20\n\
            shoal_share_partition_txn_aborted_records_total{group=\"g\",topic=\"t\",partition=\"1\"} 8\n\
            shoal_share_partition_txn_pending_records{group=\"g\",topic=\"t\",partition=\"2\"} 3\n\
            shoal_log_end_offset{topic=\"t\",partition=\"1\"} 100\n";
        let parsed = parse_share_metrics(body, "g");
        assert_eq!(
            parsed.get(&("t".to_string(), 1)),
            Some(&SharePartitionMetrics {
                in_flight: Some(7),
                acquired: Some(5),
                available: Some(2),
                tx_pending: Some(12),
                staged: Some(40),
                committed: Some(20),
                aborted: Some(8),
            })
        );
        // A share partition without a live machine: only its persisted TX_PENDING count.
        assert_eq!(
            parsed.get(&("t".to_string(), 2)),
            Some(&SharePartitionMetrics {
                tx_pending: Some(3),
                ..Default::default()
            })
        );
        assert_eq!(parsed.len(), 2);
    }

    const HISTOGRAM: &str = "# TYPE shoal_share_txn_pending_time_seconds histogram\n\
        shoal_share_txn_pending_time_seconds_bucket{le=\"0.001\"} 0\n\
        shoal_share_txn_pending_time_seconds_bucket{le=\"0.01\"} 60\n\
        shoal_share_txn_pending_time_seconds_bucket{le=\"1\"} 99\n\
        shoal_share_txn_pending_time_seconds_bucket{le=\"900\"} 100\n\
        shoal_share_txn_pending_time_seconds_bucket{le=\"+Inf\"} 100\n\
        shoal_share_txn_pending_time_seconds_sum 12.5\n\
        shoal_share_txn_pending_time_seconds_count 100\n";

    #[test]
    fn time_in_tx_pending_is_summarised_from_the_histogram() {
        let h = parse_tx_pending_time(HISTOGRAM);
        assert_eq!(h.count, 100);
        assert_eq!(
            h.buckets,
            vec![(0.001, 0), (0.01, 60), (1.0, 99), (900.0, 100)]
        );
        assert_eq!(h.quantile_bound(0.5), Some(0.01));
        assert_eq!(h.quantile_bound(0.99), Some(1.0));
        assert_eq!(
            h.summary(),
            "Time in TX_PENDING (broker-wide): 100 record(s) resolved, mean 0.125 s, \
             p50 <= 0.01 s, p99 <= 1 s"
        );
    }

    #[test]
    fn time_in_tx_pending_past_the_last_bucket_and_empty() {
        let past = HISTOGRAM.replace("_bucket{le=\"900\"} 100", "_bucket{le=\"900\"} 99");
        let h = parse_tx_pending_time(&past);
        assert_eq!(h.quantile_bound(0.999), None);
        let stuck = TxPendingTime {
            buckets: vec![(60.0, 0), (900.0, 0)],
            count: 2,
            sum_s: 2000.0,
        };
        assert_eq!(
            stuck.summary(),
            "Time in TX_PENDING (broker-wide): 2 record(s) resolved, mean 1000.000 s, \
             p50 > 900 s, p99 > 900 s"
        );
        let empty = parse_tx_pending_time(
            "shoal_share_txn_pending_time_seconds_bucket{le=\"+Inf\"} 0\n\
             shoal_share_txn_pending_time_seconds_count 0\n",
        );
        assert_eq!(
            empty.summary(),
            "Time in TX_PENDING (broker-wide): no staged record resolved yet"
        );
        // Without the histogram at all (an older broker): the same, not an error.
        assert_eq!(parse_tx_pending_time(""), TxPendingTime::default());
    }
}
