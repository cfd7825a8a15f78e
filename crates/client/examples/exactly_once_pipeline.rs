//! An exactly-once queue pipeline (KIP-1289): reads INPUT as a member of share group GROUP
//! (explicit acknowledgement), writes each record to OUTPUT as `processed:` + its value (key
//! and headers kept), and commits the outputs with the ACCEPT acknowledgements of their inputs
//! in one transaction of up to N records (`--records-per-txn`, default 100; a transaction is
//! committed earlier when a poll comes back empty). It runs until killed, printing one line
//! per commit to stderr: `committed R records in transaction T (total C) in D ms`, D being
//! the duration of the commit step (staging the acknowledgements and committing).
//!
//! ```text
//! cargo run --release -p shoal-client --example exactly_once_pipeline -- \
//!     --bootstrap 127.0.0.1:9092 --input orders --output orders-processed \
//!     --group order-workers --transactional-id order-worker-1 [--records-per-txn 100]
//! ```
//!
//! Run several with the same group and different transactional ids to share the work; a
//! restarted worker must reuse its transactional id, which fences its old instance and aborts
//! the transaction it left open (the records come back). The example sets the group's
//! `share.auto.offset.reset` to `earliest` first (a share group starts at the end of its
//! topics by default), as a user expects a pipeline to process what is already queued.
//!
//! Errors: an abortable one (STALE_MEMBER_EPOCH after a rebalance, INVALID_RECORD_STATE after
//! a lock expired, a failed send) aborts the transaction and goes on: its records are
//! redelivered. A fatal one (PRODUCER_FENCED: another instance took the transactional id) and
//! any other failure (the broker unreachable for longer than the client's timeouts) exit
//! non-zero, leaving the open transaction to be aborted by the next instance or its timeout.
//!
//! `--broken-skip-acknowledgements` is a deliberately wrong pipeline, for testing checkers
//! such as `shoal verify`: it commits the outputs but never acknowledges the inputs, so they
//! come back after their locks expire and are processed again.
//!
//! `--at-least-once` is the non-transactional baseline (for benchmarks): the outputs are
//! sent by an idempotent producer without a transaction; after each poll the worker flushes
//! them, waits for each to be acknowledged, then acknowledges the inputs ACCEPT (RELEASE for
//! one whose output failed) — explicit mode refuses the next poll until it has — and every N
//! records (or on an empty poll) commits the acknowledgements (`commit_sync`); between
//! commits they ride on the next ShareFetch. A crash between flush and acknowledgement
//! duplicates outputs. It prints `committed R records in batch T (total C) in D ms`, D being
//! the flushes and the commit since the previous line.

use std::time::{Duration, Instant};

use anyhow::bail;
use shoal_client::producer::{DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareAcknowledgements, ShareConsumer, ShareGroupMetadata, ShareRecord,
};
use shoal_client::{Error, ErrorClass};

mod support;

/// What the output value starts with.
const PREFIX: &str = "processed:";
const CLIENT_ID: &str = "shoal-example-exactly-once-pipeline";

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const USAGE: &str = "usage: exactly_once_pipeline --bootstrap B --input IN --output OUT \
                     --group G --transactional-id TID [--records-per-txn N] [--at-least-once]";

/// The output of one input record.
fn transform(output: &str, r: &ShareRecord) -> ProducerRecord {
    let mut value = PREFIX.as_bytes().to_vec();
    value.extend_from_slice(r.value.as_deref().unwrap_or_default());
    ProducerRecord {
        topic: output.to_owned(),
        key: r.key.clone(),
        value: Some(value.into()),
        headers: r.headers.clone(),
        ..ProducerRecord::default()
    }
}

/// The open transaction: its acknowledgements so far and the member they belong to.
struct Open {
    acks: ShareAcknowledgements,
    metadata: ShareGroupMetadata,
    records: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = support::Flags::parse(USAGE, &["broken-skip-acknowledgements", "at-least-once"])?;
    let bootstrap = flags.required("bootstrap")?;
    let input = flags.required("input")?;
    let output = flags.required("output")?;
    let group = flags.required("group")?;
    let transactional_id = flags.required("transactional-id")?;
    let records_per_txn = flags.number("records-per-txn", 100)? as usize;
    let skip_acknowledgements = flags.switch("broken-skip-acknowledgements");

    support::start_at_earliest(&bootstrap, &group).await?;
    if flags.switch("at-least-once") {
        return at_least_once(&bootstrap, &input, &output, &group, records_per_txn).await;
    }
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
    let (mut transactions, mut committed) = (0u64, 0u64);
    loop {
        let records = support::retrying(consumer.poll(Duration::from_millis(500))).await?;
        if records.is_empty() {
            if let Some(txn) = open.take() {
                finish(&producer, txn, &mut transactions, &mut committed).await?;
            }
            continue;
        }
        for r in &records {
            // A transaction holds N records at most, even when a poll brings more.
            if open.as_ref().is_some_and(|t| t.records >= records_per_txn) {
                let mut txn = open.take().expect("open");
                drain(&mut consumer, &mut txn, skip_acknowledgements)?;
                finish(&producer, txn, &mut transactions, &mut committed).await?;
            }
            let txn = match &mut open {
                Some(txn) => txn,
                None => {
                    producer.begin_transaction()?;
                    open.insert(Open {
                        acks: ShareAcknowledgements::new(),
                        metadata: consumer.share_group_metadata(),
                        records: 0,
                    })
                }
            };
            let sent = producer.send(transform(&output, r)).await;
            consumer.acknowledge(r, AcknowledgeType::Accept)?;
            txn.records += 1;
            if let Err(e) = sent {
                // Drained and dropped: sent by no one, the records come back.
                consumer.acknowledgements_for_transaction()?;
                abort_on(&producer, e, txn.records).await?;
                open = None;
            }
        }
        // Drained before the next poll, which would otherwise carry them (not
        // transactional); once per poll, as draining walks every record the consumer holds.
        if let Some(txn) = &mut open {
            drain(&mut consumer, txn, skip_acknowledgements)?;
        }
    }
}

/// Moves the consumer's pending acknowledgements into the open transaction.
fn drain(
    consumer: &mut ShareConsumer,
    txn: &mut Open,
    skip_acknowledgements: bool,
) -> anyhow::Result<()> {
    let acks = consumer.acknowledgements_for_transaction()?;
    if !skip_acknowledgements {
        txn.acks.extend(acks)?;
    } // else dropped: sent by no one, the records' locks expire and they come back
    Ok(())
}

/// Stages the acknowledgements and commits; on an abortable error aborts instead.
async fn finish(
    producer: &Producer,
    txn: Open,
    transactions: &mut u64,
    committed: &mut u64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut result = Ok(());
    if !txn.acks.is_empty() {
        result = producer
            .send_share_acknowledgements_to_transaction(&txn.acks, &txn.metadata)
            .await;
    }
    if result.is_ok() {
        result = producer.commit_transaction().await;
    }
    match result {
        Ok(()) => {
            *transactions += 1;
            *committed += txn.records as u64;
            eprintln!(
                "committed {} records in transaction {transactions} (total {committed}) in {:.1} ms",
                txn.records,
                started.elapsed().as_secs_f64() * 1e3
            );
            Ok(())
        }
        Err(e) => abort_on(producer, e, txn.records).await,
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

/// The at-least-once baseline: outputs flushed and acknowledged, then the inputs accepted.
async fn at_least_once(
    bootstrap: &str,
    input: &str,
    output: &str,
    group: &str,
    records_per_batch: usize,
) -> anyhow::Result<()> {
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", CLIENT_ID),
        ("enable.idempotence", "true"),
        ("acks", "all"),
        ("linger.ms", "5"),
    ])?)
    .await?;
    let mut consumer = support::explicit_consumer(
        bootstrap,
        group,
        input,
        CLIENT_ID,
        records_per_batch.min(500),
    )
    .await?;
    let (mut batches, mut committed) = (0u64, 0u64);
    // Explicit mode refuses a poll while a record of the last one is unacknowledged, so each
    // poll's outputs are flushed and its inputs acknowledged before the next poll; the
    // acknowledgements are committed once `records_per_batch` of them are due (or a poll comes
    // back empty), and otherwise ride on the next ShareFetch.
    let mut due = 0u64;
    let mut step = Duration::ZERO;
    loop {
        let records = support::retrying(consumer.poll(Duration::from_millis(500))).await?;
        let empty = records.is_empty();
        if !empty {
            let mut sent = Vec::with_capacity(records.len());
            for r in records {
                let delivery = producer.send(transform(output, &r)).await;
                sent.push((r, delivery));
            }
            let started = Instant::now();
            due += acknowledge_written(&producer, &mut consumer, sent).await?;
            step += started.elapsed();
        }
        if due == 0 || (!empty && (due as usize) < records_per_batch) {
            continue;
        }
        let started = Instant::now();
        if let Err(e) = consumer.commit_sync().await {
            // The records whose acknowledgement failed come back: at least once.
            eprintln!("committing acknowledgements failed: {e}");
            (due, step) = (0, Duration::ZERO);
            continue;
        }
        step += started.elapsed();
        batches += 1;
        committed += due;
        eprintln!(
            "committed {due} records in batch {batches} (total {committed}) in {:.1} ms",
            step.as_secs_f64() * 1e3
        );
        (due, step) = (0, Duration::ZERO);
    }
}

/// Flushes the outputs of one poll's records, then accepts each input whose output was
/// written and releases the others (sent with the next ShareFetch or commit); returns how
/// many were accepted.
async fn acknowledge_written(
    producer: &Producer,
    consumer: &mut ShareConsumer,
    sent: Vec<(ShareRecord, Result<DeliveryFuture, Error>)>,
) -> anyhow::Result<u64> {
    producer.flush().await?;
    let mut accepted = 0u64;
    for (r, delivery) in sent {
        let written = match delivery {
            Ok(delivery) => delivery.await.is_ok(),
            Err(_) => false,
        };
        let kind = if written {
            accepted += 1;
            AcknowledgeType::Accept
        } else {
            AcknowledgeType::Release
        };
        consumer.acknowledge(&r, kind)?;
    }
    Ok(accepted)
}
