//! Share-group helpers of the client tests: a topic filled with numbered records, share
//! consumers on it, polling until enough records came.

use std::time::{Duration, Instant};

use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{ShareConsumer, ShareConsumerConfig, ShareRecord};
use shoal_client::Admin;

use super::log::create_topic;
use super::{config, Broker};

/// Creates `topic`, writes `count` records (`value-i`, keyed `ki`) and sets the group to start from the earliest offset (share groups start at the
/// latest by default).
pub async fn setup(broker: &Broker, topic: &str, partitions: i32, count: usize, group: &str) {
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    create_topic(admin.cluster(), topic, partitions).await;
    let set = admin
        .incremental_alter_configs(
            &[(
                ConfigResource::group(group),
                vec![AlterConfigOp::Set {
                    name: "share.auto.offset.reset".into(),
                    value: "earliest".into(),
                }],
            )],
            Mode::Apply,
        )
        .await
        .unwrap();
    assert!(set[0].1.is_ok(), "{:?}", set[0]);
    admin.close().await;
    let producer = Producer::new(
        ProducerConfig::builder(config(broker, &[]))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    // Ten records a batch at most (waiting for each ten), so that a fetch can take part of
    // a partition: the broker acquires whole batches.
    for chunk in (0..count).collect::<Vec<_>>().chunks(10) {
        let mut deliveries = Vec::new();
        for i in chunk {
            let record = ProducerRecord::new(topic, format!("value-{i}")).with_key(format!("k{i}"));
            deliveries.push(producer.send(record).await.unwrap());
        }
        for d in deliveries {
            d.await.unwrap();
        }
    }
    producer.close().await;
}

pub async fn consumer(broker: &Broker, group: &str, mode: &str, topic: &str) -> ShareConsumer {
    consumer_with(broker, group, mode, topic, &[]).await
}

pub async fn consumer_with(
    broker: &Broker,
    group: &str,
    mode: &str,
    topic: &str,
    extra: &[(&str, &str)],
) -> ShareConsumer {
    let bootstrap = broker.addr.to_string();
    let mut props = vec![
        ("bootstrap.servers", bootstrap.as_str()),
        ("group.id", group),
        ("share.acknowledgement.mode", mode),
        ("request.timeout.ms", "5000"),
        ("retry.backoff.ms", "20"),
        ("retry.backoff.max.ms", "200"),
        ("fetch.max.wait.ms", "200"),
    ];
    props.extend_from_slice(extra);
    let c = ShareConsumerConfig::from_properties(props).unwrap();
    let mut consumer = ShareConsumer::new(c).await.unwrap();
    consumer.subscribe([topic]);
    consumer
}

/// Polls until `count` records came or `within` passed.
pub async fn poll_until(c: &mut ShareConsumer, count: usize, within: Duration) -> Vec<ShareRecord> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < count && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(500)).await.unwrap());
    }
    out
}

pub fn value(r: &ShareRecord) -> String {
    String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()
}
