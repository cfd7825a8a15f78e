//! `shoal transactions`: list and describe transactions, show a partition's producers, and abort
//! a hanging transaction — what Kafka's `kafka-transactions` tool does. Listing and describing
//! go through the client's [`shoal_client::Admin`].

use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, ProducerId, TopicName, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::admin::ListTransactionsFilter;
use shoal_client::{Connection, Error};

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
    // DescribeProducers and WriteTxnMarkers are not the Admin client's (yet): those two
    // commands keep their own connection to the bootstrap broker.
    let connect = || async {
        Connection::connect(bootstrap)
            .await
            .with_context(|| format!("cannot connect to {bootstrap}"))
    };
    match command {
        TransactionsCommand::List => {
            let admin = crate::admin::connect(bootstrap).await?;
            let listed = admin
                .list_transactions(&ListTransactionsFilter::default())
                .await;
            admin.close().await;
            let listed = listed?;
            println!("{:<40} {:>12} State", "TransactionalId", "ProducerId");
            for t in listed {
                println!(
                    "{:<40} {:>12} {}",
                    t.transactional_id, t.producer_id, t.state
                );
            }
        }
        TransactionsCommand::Describe { transactional_ids } => {
            let admin = crate::admin::connect(bootstrap).await?;
            let described = admin.describe_transactions(&transactional_ids).await;
            admin.close().await;
            for (id, result) in described? {
                let t = match result {
                    Ok(t) => t,
                    // No answer for the id: nothing to say about it.
                    Err(Error::IncompleteResponse { .. }) => continue,
                    Err(e @ Error::Kafka { .. }) => {
                        println!("{id}: error {}", e.code());
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let partitions: Vec<String> = t
                    .partitions
                    .iter()
                    .map(|(tp, p)| format!("{tp}-{p}"))
                    .collect();
                println!(
                    "{id} producer {} epoch {} state {} timeout {} ms started {} partitions [{}]",
                    t.producer_id,
                    t.producer_epoch,
                    t.state,
                    t.timeout.as_millis(),
                    t.start_time_ms.unwrap_or(-1),
                    partitions.join(", ")
                );
            }
        }
        TransactionsCommand::DescribeProducers { topic, partition } => {
            let mut conn = connect().await?;
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
            let mut conn = connect().await?;
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
