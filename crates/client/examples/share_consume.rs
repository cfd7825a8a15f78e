//! Consumes COUNT records of TOPIC as a member of share group GROUP, acknowledging each with
//! an explicit ACCEPT, and prints one summary line. The group is first set to start from the
//! earliest offset (`share.auto.offset.reset=earliest`; share groups start at the latest by
//! default), so records produced before the example started are read too.
//!
//! ```text
//! cargo run -p shoal-client --example share_consume -- BOOTSTRAP TOPIC GROUP COUNT
//! ```

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::share_consumer::{AcknowledgeType, ShareConsumer, ShareConsumerConfig};
use shoal_client::{Admin, ClientConfig};

/// Gives up when no record came for this long.
const IDLE_MAX: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, group, count] = args.as_slice() else {
        bail!("usage: share_consume BOOTSTRAP TOPIC GROUP COUNT");
    };
    let count: usize = count.parse().context("COUNT")?;
    let admin = Admin::connect(ClientConfig::from_properties([(
        "bootstrap.servers",
        bootstrap,
    )])?)
    .await?;
    let set = admin
        .incremental_alter_configs(
            &[(
                ConfigResource::group(group.clone()),
                vec![AlterConfigOp::Set {
                    name: "share.auto.offset.reset".into(),
                    value: "earliest".into(),
                }],
            )],
            Mode::Apply,
        )
        .await?;
    for (_, result) in set {
        result.context("share.auto.offset.reset")?;
    }
    admin.close().await;

    let config = ShareConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "shoal-example-share-consume"),
        ("group.id", group.as_str()),
        ("share.acknowledgement.mode", "explicit"),
    ])?;
    let mut consumer = ShareConsumer::new(config).await?;
    consumer.subscribe([topic.clone()]);
    let started = Instant::now();
    let mut last = Instant::now();
    let mut consumed = 0usize;
    let mut redelivered = 0usize;
    while consumed < count {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() && last.elapsed() > IDLE_MAX {
            bail!("no record for {IDLE_MAX:?} after {consumed} of {count}");
        }
        for record in &records {
            consumer.acknowledge(record, AcknowledgeType::Accept)?;
            redelivered += usize::from(record.delivery_count > 1);
            consumed += 1;
            last = Instant::now();
        }
    }
    consumer.commit_sync().await?;
    let seconds = started.elapsed().as_secs_f64();
    consumer.close().await;
    println!(
        "consumed {consumed} records from {topic} in share group {group} in {seconds:.3} s \
         ({redelivered} redelivered): {:.0} records/s",
        consumed as f64 / seconds
    );
    Ok(())
}
