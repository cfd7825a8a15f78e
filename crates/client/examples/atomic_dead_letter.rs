//! A dead-letter queue that is exactly-once (KIP-1289): reads INPUT as a member of share group
//! GROUP (explicit acknowledgement) and checks each record's value. A value that is a decimal
//! integer is transformed (its double, as a decimal, key and headers kept), written to OUTPUT
//! and ACCEPTed; any other value is written unchanged to DEAD_LETTER, with headers saying where
//! it came from and why, and REJECTed (archived: never delivered again). Outputs, dead letters
//! and both kinds of acknowledgement commit in one transaction of up to N records
//! (`--records-per-txn`, default 100; earlier when a poll comes back empty), so a bad record is
//! in the dead-letter topic exactly when it is rejected. It runs until killed, printing one
//! line per commit to stderr: `committed R records (A accepted, D dead-lettered) in
//! transaction T`.
//!
//! ```text
//! cargo run --release -p shoal-client --example atomic_dead_letter -- \
//!     --bootstrap 127.0.0.1:9092 --input amounts --output amounts-doubled \
//!     --dead-letter amounts-dlq --group amount-workers --transactional-id amount-worker-1 \
//!     [--records-per-txn 100]
//! ```
//!
//! As `exactly_once_pipeline`, it sets the group's `share.auto.offset.reset` to `earliest`
//! first; abortable errors abort the transaction and go on, others exit non-zero.

use std::time::Duration;

use anyhow::bail;
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareAcknowledgements, ShareGroupMetadata, ShareRecord,
};
use shoal_client::{Error, ErrorClass};

mod support;

const CLIENT_ID: &str = "shoal-example-atomic-dead-letter";

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const USAGE: &str = "usage: atomic_dead_letter --bootstrap B --input IN --output OUT \
                     --dead-letter DLQ --group G --transactional-id TID [--records-per-txn N]";

/// Where a record goes.
enum Verdict {
    Output(ProducerRecord),
    DeadLetter(ProducerRecord),
}

/// The check and the transformation: a decimal integer doubles; anything else is a dead letter.
fn judge(r: &ShareRecord, output: &str, dead_letter: &str) -> Verdict {
    let value = r.value.as_deref().unwrap_or_default();
    let number = std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|n| n.checked_mul(2));
    let base = ProducerRecord {
        key: r.key.clone(),
        headers: r.headers.clone(),
        ..ProducerRecord::default()
    };
    match number {
        Some(doubled) => Verdict::Output(ProducerRecord {
            topic: output.to_owned(),
            value: Some(doubled.to_string().into()),
            ..base
        }),
        None => Verdict::DeadLetter(
            ProducerRecord {
                topic: dead_letter.to_owned(),
                value: r.value.clone(),
                ..base
            }
            .with_header(
                "dlq.source",
                format!("{}-{}@{}", r.topic, r.partition, r.offset),
            )
            .with_header("dlq.reason", "value is not a decimal integer"),
        ),
    }
}

/// The open transaction.
struct Open {
    acks: ShareAcknowledgements,
    metadata: ShareGroupMetadata,
    accepted: usize,
    rejected: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = support::Flags::parse(USAGE, &[])?;
    let bootstrap = flags.required("bootstrap")?;
    let input = flags.required("input")?;
    let output = flags.required("output")?;
    let dead_letter = flags.required("dead-letter")?;
    let group = flags.required("group")?;
    let transactional_id = flags.required("transactional-id")?;
    let records_per_txn = flags.number("records-per-txn", 100)? as usize;

    support::start_at_earliest(&bootstrap, &group).await?;
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", CLIENT_ID),
        ("transactional.id", transactional_id.as_str()),
        ("linger.ms", "5"),
    ])?)
    .await?;
    producer.init_transactions().await?;
    let mut consumer = support::explicit_consumer(
        &bootstrap,
        &group,
        &input,
        CLIENT_ID,
        records_per_txn.min(500),
    )
    .await?;

    let mut open: Option<Open> = None;
    let mut transactions = 0u64;
    loop {
        let records = support::retrying(consumer.poll(Duration::from_millis(500))).await?;
        if records.is_empty() {
            if let Some(txn) = open.take() {
                finish(&producer, txn, &mut transactions).await?;
            }
            continue;
        }
        for r in &records {
            // A transaction holds N records at most, even when a poll brings more.
            if open
                .as_ref()
                .is_some_and(|t| t.accepted + t.rejected >= records_per_txn)
            {
                let mut txn = open.take().expect("open");
                txn.acks
                    .extend(consumer.acknowledgements_for_transaction()?)?;
                finish(&producer, txn, &mut transactions).await?;
            }
            let txn = match &mut open {
                Some(txn) => txn,
                None => {
                    producer.begin_transaction()?;
                    open.insert(Open {
                        acks: ShareAcknowledgements::new(),
                        metadata: consumer.share_group_metadata(),
                        accepted: 0,
                        rejected: 0,
                    })
                }
            };
            let (record, ack) = match judge(r, &output, &dead_letter) {
                Verdict::Output(out) => {
                    txn.accepted += 1;
                    (out, AcknowledgeType::Accept)
                }
                Verdict::DeadLetter(dead) => {
                    txn.rejected += 1;
                    (dead, AcknowledgeType::Reject)
                }
            };
            let sent = producer.send(record).await;
            consumer.acknowledge(r, ack)?;
            if let Err(e) = sent {
                // Drained and dropped: sent by no one, the records come back.
                consumer.acknowledgements_for_transaction()?;
                abort_on(&producer, e, txn.accepted + txn.rejected).await?;
                open = None;
            }
        }
        // Drained before the next poll, which would otherwise carry them (not
        // transactional); once per poll, as draining walks every record the consumer holds.
        if let Some(txn) = &mut open {
            txn.acks
                .extend(consumer.acknowledgements_for_transaction()?)?;
        }
    }
}

/// Stages the acknowledgements and commits; on an abortable error aborts instead.
async fn finish(producer: &Producer, txn: Open, transactions: &mut u64) -> anyhow::Result<()> {
    let records = txn.accepted + txn.rejected;
    let mut result = producer
        .send_share_acknowledgements_to_transaction(&txn.acks, &txn.metadata)
        .await;
    if result.is_ok() {
        result = producer.commit_transaction().await;
    }
    match result {
        Ok(()) => {
            *transactions += 1;
            eprintln!(
                "committed {records} records ({} accepted, {} dead-lettered) in transaction \
                 {transactions}",
                txn.accepted, txn.rejected
            );
            Ok(())
        }
        Err(e) => abort_on(producer, e, records).await,
    }
}

/// Aborts after an abortable error (the records come back); any other error ends the worker.
async fn abort_on(producer: &Producer, e: Error, records: usize) -> anyhow::Result<()> {
    if e.class() != ErrorClass::Abortable {
        bail!("transaction failed ({:?}): {e}", e.code());
    }
    eprintln!("aborting a transaction of {records} records: {e}");
    producer.abort_transaction().await?;
    Ok(())
}
