//! `shoal transactions`: list and describe transactions, show a partition's producers, abort
//! a hanging transaction, and force-terminate a prepared (two-phase-commit) one — what Kafka's
//! `kafka-transactions` tool does, through the client's [`Admin`].

use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Subcommand;
use shoal_client::admin::{AbortTransaction, ListTransactionsFilter};
use shoal_client::{Admin, Error};

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
    /// Abort the transaction of a transactional id at its coordinator, even a prepared
    /// (two-phase-commit, KIP-939) one, fencing its producer (Kafka's
    /// `forceTerminateTransaction`).
    ForceTerminate {
        #[arg(long = "transactional-id")]
        transactional_id: String,
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

/// The producers `topic`-`partition` knows, as (producer id, epoch, open transaction's start
/// offset or -1, coordinator epoch).
async fn producers(
    admin: &Admin,
    topic: &str,
    partition: i32,
) -> anyhow::Result<Vec<(i64, i32, i64, i32)>> {
    let described = admin.describe_producers(topic, &[partition]).await?;
    let producers = match described.into_iter().next().map(|(_, r)| r) {
        Some(Ok(producers)) => producers,
        Some(Err(e @ Error::Kafka { .. })) => {
            bail!("{topic}-{partition}: error {}", e.code())
        }
        Some(Err(Error::IncompleteResponse { .. })) | None => {
            bail!("empty DescribeProducers response")
        }
        Some(Err(e)) => return Err(e.into()),
    };
    Ok(producers
        .iter()
        .map(|p| {
            (
                p.producer_id,
                p.producer_epoch,
                p.current_txn_start_offset.unwrap_or(-1),
                p.coordinator_epoch,
            )
        })
        .collect())
}

/// Runs one `shoal transactions` command against `bootstrap`, printing to stdout.
///
/// # Errors
/// Connection failures, Kafka errors in the response, or no transaction to abort.
pub async fn run(bootstrap: SocketAddr, command: TransactionsCommand) -> anyhow::Result<()> {
    let admin = crate::admin::connect(bootstrap).await?;
    let result = run_on(&admin, command).await;
    admin.close().await;
    result
}

async fn run_on(admin: &Admin, command: TransactionsCommand) -> anyhow::Result<()> {
    match command {
        TransactionsCommand::List => {
            let listed = admin
                .list_transactions(&ListTransactionsFilter::default())
                .await?;
            println!("{:<40} {:>12} State", "TransactionalId", "ProducerId");
            for t in listed {
                println!(
                    "{:<40} {:>12} {}",
                    t.transactional_id, t.producer_id, t.state
                );
            }
        }
        TransactionsCommand::Describe { transactional_ids } => {
            for (id, result) in admin.describe_transactions(&transactional_ids).await? {
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
                // KIP-939 marks a two-phase-commit transaction with the largest timeout.
                let timeout = if t.timeout.as_millis() == i32::MAX as u128 {
                    "none (two-phase commit)".to_string()
                } else {
                    format!("{} ms", t.timeout.as_millis())
                };
                println!(
                    "{id} producer {} epoch {} state {} timeout {timeout} started {} partitions [{}]",
                    t.producer_id,
                    t.producer_epoch,
                    t.state,
                    t.start_time_ms.unwrap_or(-1),
                    partitions.join(", ")
                );
            }
        }
        TransactionsCommand::DescribeProducers { topic, partition } => {
            println!(
                "{:>12} {:>6} CurrentTransactionStartOffset",
                "ProducerId", "Epoch"
            );
            for (pid, epoch, start, _) in producers(admin, &topic, partition).await? {
                println!("{pid:>12} {epoch:>6} {start}");
            }
        }
        TransactionsCommand::ForceTerminate { transactional_id } => {
            match admin.force_terminate_transaction(&transactional_id).await {
                Ok(()) => println!("terminated the transaction of {transactional_id}"),
                Err(e @ Error::Kafka { .. }) => bail!("force-terminate failed: {}", e.code()),
                Err(e) => return Err(e.into()),
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
                    let found = producers(admin, &topic, partition).await?;
                    let (pid, epoch, _, coordinator_epoch) = found
                        .into_iter()
                        .find(|(_, _, start, _)| *start == offset)
                        .with_context(|| format!("no open transaction starts at offset {offset} of {topic}-{partition}"))?;
                    (pid, epoch, coordinator_epoch)
                }
                (None, Some(pid), Some(epoch)) => (pid, i32::from(epoch), coordinator_epoch),
                _ => bail!("give --start-offset, or --producer-id and --producer-epoch"),
            };
            let epoch = i16::try_from(epoch)
                .with_context(|| format!("producer epoch {epoch} is not a 16-bit integer"))?;
            let abort = AbortTransaction {
                topic: topic.clone(),
                partition,
                producer_id: pid,
                producer_epoch: epoch,
                coordinator_epoch,
            };
            match admin.abort_transaction(&abort).await {
                Ok(()) => {}
                Err(e @ Error::Kafka { .. }) => bail!("abort failed: {}", e.code()),
                Err(Error::IncompleteResponse { .. }) => bail!("empty WriteTxnMarkers response"),
                Err(e) => return Err(e.into()),
            }
            println!(
                "aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}"
            );
        }
    }
    Ok(())
}
