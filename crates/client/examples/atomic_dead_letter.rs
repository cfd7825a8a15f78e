//! A dead-letter queue that is exactly-once (KIP-1289 with Kafka 4.4's share-group dead-letter
//! queues, KIP-1191): reads INPUT as a member of share group GROUP (explicit acknowledgement)
//! and checks each record's value. A value that is a decimal integer is transformed (its
//! double, as a decimal, key and headers kept), written to OUTPUT and ACCEPTed; any other value
//! is REJECTed, and the broker writes its dead letter to DEAD_LETTER — the original key and
//! value with Kafka's `__dlq.errors.*` headers saying where it came from — inside the same
//! transaction as the outputs and the acknowledgements (TxnShareAcknowledge). A transaction
//! holds up to N records (`--records-per-txn`, default 100; earlier when a poll comes back
//! empty), so a bad record is in the dead-letter topic, to read_committed readers, exactly when
//! its rejection commits: never for an aborted transaction, never twice. It runs until killed,
//! printing one line per commit to stderr: `committed R records (A accepted, D dead-lettered)
//! in transaction T`.
//!
//! ```text
//! cargo run --release -p shoal-client --example atomic_dead_letter -- \
//!     --bootstrap 127.0.0.1:9092 --input amounts --output amounts-doubled \
//!     --dead-letter dlq.amounts --group amount-workers --transactional-id amount-worker-1 \
//!     [--records-per-txn 100]
//! ```
//!
//! First it creates DEAD_LETTER if missing (the broker's default partition count) and enables
//! it for dead letters (topic config `errors.deadletterqueue.group.enable=true`), then sets the
//! group's `errors.deadletterqueue.topic.name` to it, `errors.deadletterqueue.copy.record.enable`
//! to `true` and, as `exactly_once_pipeline`, `share.auto.offset.reset` to `earliest`. The
//! name must start with the broker's `errors.deadletterqueue.topic.name.prefix` (`dlq.` unless
//! configured otherwise) or the broker writes no dead letter, as Kafka does. Abortable errors
//! abort the transaction and go on (the records come back), others exit non-zero.

use std::time::Duration;

use anyhow::{bail, Context};
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode, NewTopic};
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareAcknowledgements, ShareGroupMetadata, ShareRecord,
};
use shoal_client::{Error, ErrorClass};
use shoal_protocol::ErrorCode;

mod support;

const CLIENT_ID: &str = "shoal-example-atomic-dead-letter";

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const USAGE: &str = "usage: atomic_dead_letter --bootstrap B --input IN --output OUT \
                     --dead-letter DLQ --group G --transactional-id TID [--records-per-txn N]";

/// The topic config that lets share groups write dead letters to a topic.
const GROUP_ENABLE: &str = "errors.deadletterqueue.group.enable";

/// The check and the transformation: a decimal integer doubles (the output record); anything
/// else is a dead letter (`None`: rejected, and the broker writes it).
fn judge(r: &ShareRecord, output: &str) -> Option<ProducerRecord> {
    let value = r.value.as_deref().unwrap_or_default();
    let doubled = std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|n| n.checked_mul(2))?;
    Some(ProducerRecord {
        topic: output.to_owned(),
        key: r.key.clone(),
        value: Some(doubled.to_string().into()),
        headers: r.headers.clone(),
        ..ProducerRecord::default()
    })
}

/// Makes `dead_letter` a dead-letter topic (created when missing, enabled for share groups)
/// and `group`'s dead-letter queue, copying the rejected records' keys and values.
async fn configure_dead_letters(
    bootstrap: &str,
    group: &str,
    dead_letter: &str,
) -> anyhow::Result<()> {
    let admin = support::admin(bootstrap).await?;
    let enabled = async {
        let topic = NewTopic::new(dead_letter).config(GROUP_ENABLE, "true");
        for (_, created) in admin.create_topics(&[topic], Mode::Apply).await? {
            match created {
                Err(e) if e.code() == ErrorCode::TOPIC_ALREADY_EXISTS => {}
                other => {
                    other.with_context(|| format!("creating {dead_letter}"))?;
                }
            }
        }
        // An existing topic may not be enabled yet.
        let enable = vec![AlterConfigOp::Set {
            name: GROUP_ENABLE.into(),
            value: "true".into(),
        }];
        let set = admin
            .incremental_alter_configs(&[(ConfigResource::topic(dead_letter), enable)], Mode::Apply)
            .await?;
        for (_, result) in set {
            result.with_context(|| format!("{GROUP_ENABLE} on {dead_letter}"))?;
        }
        anyhow::Ok(())
    }
    .await;
    admin.close().await;
    enabled?;
    support::set_group_configs(
        bootstrap,
        group,
        &[
            ("share.auto.offset.reset", "earliest"),
            ("errors.deadletterqueue.topic.name", dead_letter),
            ("errors.deadletterqueue.copy.record.enable", "true"),
        ],
    )
    .await
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

    configure_dead_letters(&bootstrap, &group, &dead_letter).await?;
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
            let Some(out) = judge(r, &output) else {
                // The broker writes the dead letter when these acknowledgements are staged.
                txn.rejected += 1;
                consumer.acknowledge(r, AcknowledgeType::Reject)?;
                continue;
            };
            txn.accepted += 1;
            let sent = producer.send(out).await;
            consumer.acknowledge(r, AcknowledgeType::Accept)?;
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
