//! Produces COUNT records to TOPIC in transactions of 1,000 records with TRANSACTIONAL_ID,
//! committing each, and prints one summary line.
//!
//! ```text
//! cargo run -p shoal-client --example transactional_produce -- BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT
//! ```

use std::time::Instant;

use anyhow::{bail, Context};
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};

const RECORDS_PER_TRANSACTION: u64 = 1_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, transactional_id, count] = args.as_slice() else {
        bail!("usage: transactional_produce BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT");
    };
    let count: u64 = count.parse().context("COUNT")?;
    let config = ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "shoal-example-transactional-produce"),
        ("transactional.id", transactional_id.as_str()),
    ])?;
    let producer = Producer::new(config).await?;
    producer.init_transactions().await?;
    let started = Instant::now();
    let mut sent = 0;
    let mut transactions = 0;
    while sent < count {
        producer.begin_transaction()?;
        let mut deliveries = Vec::new();
        let end = (sent + RECORDS_PER_TRANSACTION).min(count);
        for i in sent..end {
            let record = ProducerRecord::new(topic.clone(), format!("record-{i}"))
                .with_key(format!("key-{i}"));
            deliveries.push(producer.send(record).await?);
        }
        if let Err(e) = producer.commit_transaction().await {
            if e.requires_abort() {
                producer.abort_transaction().await?;
            }
            return Err(e.into());
        }
        for d in deliveries {
            d.await?;
        }
        sent = end;
        transactions += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    producer.close().await;
    println!(
        "committed {count} records to {topic} in {transactions} transactions in {seconds:.3} s: \
         {:.0} records/s",
        count as f64 / seconds
    );
    Ok(())
}
