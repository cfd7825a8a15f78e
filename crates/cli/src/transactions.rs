//! `shoal transactions`: list and describe transactions, show a partition's producers, and abort
//! a hanging transaction — what Kafka's `kafka-transactions` tool does.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, ProducerId,
    TopicName, TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;

#[derive(Subcommand, Debug)]
pub enum TransactionsCommand {
    /// List every transactional id with its producer and state.
    List,
    /// Describe transactions by transactional id.
    Describe {
        #[arg(long = "transactional-id", required = true)]
        transactional_ids: Vec<String>,
    },
    /// Show the producers a partition knows, with the start offset of any open transaction.
    DescribeProducers {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
    },
    /// Abort a hanging transaction on one partition: the open transaction starting at
    /// `--start-offset`, or the one of `--producer-id` / `--producer-epoch`.
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        start_offset: Option<i64>,
        #[arg(long)]
        producer_id: Option<i64>,
        #[arg(long)]
        producer_epoch: Option<i16>,
        /// With --producer-id: the coordinator epoch of the producer's last marker (as
        /// describe-producers does not show it, -1 if it never had one).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        coordinator_epoch: i32,
    },
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn producers(
    conn: &mut Connection,
    topic: &str,
    partition: i32,
) -> anyhow::Result<Vec<(i64, i16, i64, i32)>> {
    let r = conn
        .request(
            0,
            &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![partition])]),
        )
        .await?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .context("empty DescribeProducers response")?;
    if p.error_code != 0 {
        bail!(
            "{topic}-{partition}: error {}",
            shoal_protocol::ErrorCode(p.error_code)
        );
    }
    Ok(p.active_producers
        .iter()
        .map(|a| {
            (
                a.producer_id.0,
                a.producer_epoch as i16,
                a.current_txn_start_offset,
                a.coordinator_epoch,
            )
        })
        .collect())
}

/// Runs one `shoal transactions` command against `bootstrap`, printing to stdout.
///
/// # Errors
/// Connection failures, Kafka errors in the response, or no transaction to abort.
pub async fn run(bootstrap: SocketAddr, command: TransactionsCommand) -> anyhow::Result<()> {
    let mut conn = Connection::connect(bootstrap)
        .await
        .with_context(|| format!("cannot connect to {bootstrap}"))?;
    match command {
        TransactionsCommand::List => {
            let r = conn.request(1, &ListTransactionsRequest::default()).await?;
            println!("{:<40} {:>12} State", "TransactionalId", "ProducerId");
            for t in r.transaction_states {
                println!(
                    "{:<40} {:>12} {}",
                    t.transactional_id.0.as_str(),
                    t.producer_id.0,
                    t.transaction_state.as_str()
                );
            }
        }
        TransactionsCommand::Describe { transactional_ids } => {
            let request = DescribeTransactionsRequest::default().with_transactional_ids(
                transactional_ids
                    .iter()
                    .map(|t| TransactionalId(s(t)))
                    .collect(),
            );
            let r = conn.request(0, &request).await?;
            for t in r.transaction_states {
                if t.error_code != 0 {
                    println!(
                        "{}: error {}",
                        t.transactional_id.0.as_str(),
                        shoal_protocol::ErrorCode(t.error_code)
                    );
                    continue;
                }
                let partitions: Vec<String> = t
                    .topics
                    .iter()
                    .flat_map(|tp| {
                        tp.partitions
                            .iter()
                            .map(move |p| format!("{}-{p}", tp.topic.0.as_str()))
                    })
                    .collect();
                println!(
                    "{} producer {} epoch {} state {} timeout {} ms started {} partitions [{}]",
                    t.transactional_id.0.as_str(),
                    t.producer_id.0,
                    t.producer_epoch,
                    t.transaction_state.as_str(),
                    t.transaction_timeout_ms,
                    t.transaction_start_time_ms,
                    partitions.join(", ")
                );
            }
        }
        TransactionsCommand::DescribeProducers { topic, partition } => {
            println!(
                "{:>12} {:>6} CurrentTransactionStartOffset",
                "ProducerId", "Epoch"
            );
            for (pid, epoch, start, _) in producers(&mut conn, &topic, partition).await? {
                println!("{pid:>12} {epoch:>6} {start}");
            }
        }
        TransactionsCommand::Abort {
            topic,
            partition,
            start_offset,
            producer_id,
            producer_epoch,
            coordinator_epoch,
        } => {
            let (pid, epoch, coordinator_epoch) = match (start_offset, producer_id, producer_epoch)
            {
                (Some(offset), _, _) => {
                    let found = producers(&mut conn, &topic, partition).await?;
                    let (pid, epoch, _, coordinator_epoch) = found
                        .into_iter()
                        .find(|(_, _, start, _)| *start == offset)
                        .with_context(|| format!("no open transaction starts at offset {offset} of {topic}-{partition}"))?;
                    (pid, epoch, coordinator_epoch)
                }
                (None, Some(pid), Some(epoch)) => (pid, epoch, coordinator_epoch),
                _ => bail!("give --start-offset, or --producer-id and --producer-epoch"),
            };
            let request =
                WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_transaction_result(false)
                    .with_coordinator_epoch(coordinator_epoch)
                    .with_topics(vec![WritableTxnMarkerTopic::default()
                        .with_name(TopicName(s(&topic)))
                        .with_partition_indexes(vec![partition])])]);
            let r = conn.request(1, &request).await?;
            let code = r
                .markers
                .first()
                .and_then(|m| m.topics.first())
                .and_then(|t| t.partitions.first())
                .map(|p| p.error_code)
                .context("empty WriteTxnMarkers response")?;
            if code != 0 {
                bail!("abort failed: {}", shoal_protocol::ErrorCode(code));
            }
            println!(
                "aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}"
            );
        }
    }
    Ok(())
}
