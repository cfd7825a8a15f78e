//! An in-process broker on 127.0.0.1:0 for integration tests.

#![allow(dead_code)]

pub mod cluster;
pub mod features;
pub mod log_cut;
pub mod sasl;
pub mod share;
pub mod txn;
pub mod txn_share;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use shoal_broker::seams::clock::{Clock, SystemClock};
use shoal_broker::seams::SeamOverrides;
use shoal_broker::{Broker, BrokerConfig, BrokerOptions};
use shoal_client::Connection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

// The broker decodes untrusted frames: install the allocator the `shoal` binary uses.
#[global_allocator]
static ALLOCATOR: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// Wall-clock milliseconds.
pub fn now_ms() -> i64 {
    SystemClock.now_ms()
}

pub struct TestBroker {
    pub addr: SocketAddr,
    pub broker: Arc<Broker>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestBroker {
    pub async fn start(dir: &Path) -> TestBroker {
        Self::start_with(dir, &[]).await
    }

    pub async fn start_with(dir: &Path, settings: &[(&str, &str)]) -> TestBroker {
        Self::start_with_seams(dir, settings, SeamOverrides::default()).await
    }

    /// A broker whose clock, ownership, commit point or metadata store are the given ones.
    pub async fn start_with_seams(
        dir: &Path,
        settings: &[(&str, &str)],
        seams: SeamOverrides,
    ) -> TestBroker {
        let mut config = BrokerConfig::default();
        config.set("group.initial.rebalance.delay.ms", "0").unwrap();
        config.set("offsets.topic.num.partitions", "3").unwrap();
        for (k, v) in settings {
            config.set(k, v).unwrap();
        }
        let listener = shoal_broker::server::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let broker = Broker::open(
            config,
            BrokerOptions {
                data_dir: dir.to_path_buf(),
                advertised_host: addr.ip().to_string(),
                advertised_port: addr.port(),
                seams,
            },
        )
        .await
        .unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(shoal_broker::server::run(broker.clone(), listener, async {
            let _ = stopped.await;
        }));
        TestBroker {
            addr,
            broker,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A broker serving the listeners its `listeners` setting names (as `shoal serve` binds
    /// them); returns it with each listener's bound address, in order.
    pub async fn start_listeners(
        dir: &Path,
        settings: &[(&str, &str)],
    ) -> (TestBroker, Vec<SocketAddr>) {
        let mut config = BrokerConfig::default();
        config.set("group.initial.rebalance.delay.ms", "0").unwrap();
        config.set("offsets.topic.num.partitions", "3").unwrap();
        for (k, v) in settings {
            config.set(k, v).unwrap();
        }
        let listeners = shoal_broker::config::listeners::parse_listeners(&config).unwrap();
        let bound = shoal_broker::server::bind_listeners(&config, &listeners)
            .await
            .unwrap();
        let addrs: Vec<SocketAddr> = bound.iter().map(|b| b.local_addr().unwrap()).collect();
        let first = bound[0].listener.advertised.clone().unwrap();
        let broker = Broker::open(
            config,
            BrokerOptions {
                data_dir: dir.to_path_buf(),
                advertised_host: first.host,
                advertised_port: first.port,
                seams: SeamOverrides::default(),
            },
        )
        .await
        .unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(shoal_broker::server::run_listeners(
            broker.clone(),
            bound,
            async {
                let _ = stopped.await;
            },
        ));
        let broker = TestBroker {
            addr: addrs[0],
            broker,
            stop: Some(stop),
            task: Some(task),
        };
        (broker, addrs)
    }

    pub async fn connect(&self) -> Connection {
        Connection::connect(self.addr).await.unwrap()
    }

    /// Clean shutdown; waits until the data directory is released.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("broker did not stop in time")
                .unwrap()
                .unwrap();
        }
        // The directory lock is released when the last Arc<NodeState> goes: the broker's, once
        // no background task holds the broker or the node's state.
        let broker = self.broker;
        for _ in 0..100 {
            if Arc::strong_count(&broker) == 1 && Arc::strong_count(&broker.node) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl TestBroker {
    /// Stops without a clean shutdown, as kill -9 would: no clean-shutdown marker, no
    /// snapshots, nothing synced (what reached the page cache stays, as it would). Drop every
    /// connection first; waits until the data directory is released.
    pub async fn crash(mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        let broker = self.broker;
        for _ in 0..250 {
            if Arc::strong_count(&broker) == 1 && Arc::strong_count(&broker.node) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("broker still referenced after the crash");
    }
}

/// Creates `name` with `partitions` partitions; panics unless it succeeded.
pub async fn create_topic(conn: &mut Connection, name: &str, partitions: i32) {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
    let response = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(kafka_protocol::protocol::StrBytes::from_string(
                    name.to_string(),
                )))
                .with_num_partitions(partitions)
                .with_replication_factor(-1)]),
        )
        .await
        .unwrap();
    assert_eq!(response.topics[0].error_code, 0);
}

/// A fresh idempotent producer (InitProducerId without a transactional id): (id, epoch).
pub async fn init_producer_id(conn: &mut Connection) -> (i64, i16) {
    use kafka_protocol::messages::InitProducerIdRequest;
    let response = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60000),
        )
        .await
        .unwrap();
    assert_eq!(response.error_code, 0);
    (response.producer_id.0, response.producer_epoch)
}

/// One Produce (request `version`, acks=all) of `records` to `topic`-`partition`, as the
/// transactional id `transactional_id` if any: (error, base offset).
pub async fn produce_once(
    conn: &mut Connection,
    version: i16,
    transactional_id: Option<&str>,
    topic: &str,
    partition: i32,
    records: bytes::Bytes,
) -> (i16, i64) {
    let answers = produce_partitions(
        conn,
        version,
        transactional_id,
        topic,
        vec![(partition, records)],
    )
    .await;
    answers[0]
}

/// One Produce (request `version`, acks=all) of a record set to each of `batches`'
/// partitions of `topic`, as the transactional id `transactional_id` if any: per partition,
/// in request order, (error, base offset).
pub async fn produce_partitions(
    conn: &mut Connection,
    version: i16,
    transactional_id: Option<&str>,
    topic: &str,
    batches: Vec<(i32, bytes::Bytes)>,
) -> Vec<(i16, i64)> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
    let request = ProduceRequest::default()
        .with_transactional_id(transactional_id.map(|id| TransactionalId(str_bytes(id))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partition_data(
                batches
                    .into_iter()
                    .map(|(index, records)| {
                        PartitionProduceData::default()
                            .with_index(index)
                            .with_records(Some(records))
                    })
                    .collect(),
            )]);
    let r = conn.request(version, &request).await.unwrap();
    r.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.error_code, p.base_offset))
        .collect()
}

/// Kafka's config resource types (DescribeConfigs, IncrementalAlterConfigs).
pub const TOPIC_RESOURCE: i8 = 2;
pub const GROUP_RESOURCE: i8 = 32;

/// Sets `configs` on the resource `name` of `resource_type` (IncrementalAlterConfigs, SET);
/// panics unless it succeeded.
pub async fn alter_configs(
    conn: &mut Connection,
    resource_type: i8,
    name: &str,
    configs: &[(&str, &str)],
) {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let r = conn
        .request(
            1,
            &IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(str_bytes(name))
                    .with_configs(
                        configs
                            .iter()
                            .map(|(k, v)| {
                                AlterableConfig::default()
                                    .with_name(str_bytes(k))
                                    .with_config_operation(0)
                                    .with_value(Some(str_bytes(v)))
                            })
                            .collect(),
                    ),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(r.responses[0].error_code, 0, "{name}: {configs:?}");
}

fn str_bytes(v: &str) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(v.to_string())
}
