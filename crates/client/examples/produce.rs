//! Produces COUNT records of 1 KiB (keys `key-0`, `key-1`, ...) to TOPIC with an idempotent
//! producer and prints one summary line.
//!
//! ```text
//! cargo run -p shoal-client --example produce -- BOOTSTRAP TOPIC COUNT
//! ```

use std::collections::VecDeque;
use std::time::Instant;

use anyhow::{bail, Context};
use bytes::Bytes;
use shoal_client::producer::{DeliveryFuture, Producer, ProducerConfig, ProducerRecord};

/// Delivery futures kept before waiting for the oldest: bounds the example's memory.
const OUTSTANDING_MAX: usize = 50_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, count] = args.as_slice() else {
        bail!("usage: produce BOOTSTRAP TOPIC COUNT");
    };
    let count: u64 = count.parse().context("COUNT")?;
    let config = ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "shoal-example-produce"),
    ])?;
    let producer = Producer::new(config).await?;
    let value = Bytes::from(vec![b'x'; 1024]);
    let started = Instant::now();
    let mut outstanding: VecDeque<DeliveryFuture> = VecDeque::new();
    for i in 0..count {
        let record = ProducerRecord::new(topic.clone(), value.clone()).with_key(format!("key-{i}"));
        outstanding.push_back(producer.send(record).await?);
        if outstanding.len() >= OUTSTANDING_MAX {
            if let Some(oldest) = outstanding.pop_front() {
                oldest.await?;
            }
        }
    }
    for delivery in outstanding {
        delivery.await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    producer.close().await;
    println!(
        "produced {count} records of 1024 bytes to {topic} in {seconds:.3} s: {:.0} records/s",
        count as f64 / seconds
    );
    Ok(())
}
