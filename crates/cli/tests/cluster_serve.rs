//! Three `shoal serve` processes forming one cluster over a real etcd (Debian's `etcd-server`,
//! started on loopback by `shoal_cluster::rig`) and a shared object-store directory, driven
//! by shoal-client: topics created at one broker are served by all, records produced with
//! acks=all survive a kill -9 of their owner exactly once, a group's committed offset
//! survives a kill -9 of its coordinator, transactions over partitions of every broker
//! commit and abort everywhere (markers sent to the partitions' owners) across a kill -9 of
//! their coordinator, a share group keeps its state on other brokers (the share-state RPCs)
//! across a kill -9, a broker paused past its lease is fenced, and the cluster goes on when
//! one of three etcd members dies.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use shoal_client::admin::{Admin, Mode, NewTopic};
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::{ClientConfig, Cluster, Connection};
use shoal_cluster::rig::start_etcd;

const WAIT: Duration = Duration::from_secs(60);
const PARTITIONS: i32 = 6;

struct Broker {
    node_id: i32,
    addr: SocketAddr,
    child: Child,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_broker(node_id: i32, dir: &Path, etcd: &str, objects: &Path) -> Broker {
    let port = common::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = std::fs::File::create(dir.join(format!("broker-{node_id}.log"))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "serve",
            "--node-id",
            &node_id.to_string(),
            "--listen",
            &addr.to_string(),
        ])
        .arg("--data-dir")
        .arg(dir.join(format!("data-{node_id}")))
        .args(["--metadata-store", &format!("etcd://{etcd}")])
        .arg("--object-store")
        .arg(format!("file://{}", objects.display()))
        .args(["--cluster-name", "test"])
        // Short lease: the test waits for it to expire after a kill -9.
        .args(["--set", "broker.session.timeout.ms=3000"])
        .args(["--set", "offsets.topic.num.partitions=6"])
        .args(["--set", "transaction.state.log.num.partitions=3"])
        .args(["--set", "share.coordinator.state.topic.num.partitions=3"])
        .env("SHOAL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start shoal serve");
    common::wait_listening(addr, &mut child);
    Broker {
        node_id,
        addr,
        child,
    }
}

fn kill9(broker: &mut Broker) {
    broker.child.kill().unwrap();
    broker.child.wait().unwrap();
}

fn config(addr: SocketAddr) -> ClientConfig {
    ClientConfig::from_properties([
        ("bootstrap.servers", addr.to_string().as_str()),
        ("request.timeout.ms", "5000"),
        ("retry.backoff.ms", "100"),
        ("reconnect.backoff.max.ms", "500"),
    ])
    .unwrap()
}

/// Retries `attempt` until it succeeds or [`WAIT`] passes.
async fn eventually<T, E: std::fmt::Debug, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        match attempt().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(
                    start.elapsed() < WAIT,
                    "{what}: still failing after {WAIT:?}: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Produces `values` to `topic` with acks=all and idempotence, each acknowledged.
async fn produce(bootstrap: SocketAddr, topic: &str, values: std::ops::Range<u32>) {
    let producer = Producer::new(
        ProducerConfig::builder(config(bootstrap))
            .build()
            .expect("producer config"),
    )
    .await
    .expect("producer");
    let mut deliveries = Vec::new();
    for i in values {
        let record = ProducerRecord::new(topic, format!("v{i}")).with_key(format!("k{i}"));
        deliveries.push(producer.send(record).await.expect("send"));
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
    producer.close().await;
}

/// Every record value of every partition of `topic`, counted.
async fn read_all(bootstrap: SocketAddr, topic: &str) -> BTreeMap<String, usize> {
    let cluster = Cluster::connect(config(bootstrap)).await.unwrap();
    read_all_through(&cluster, topic).await
}

/// [`read_all`] through a client whose metadata may be stale: a partition that moved must
/// be found at its new leader.
async fn read_all_through(cluster: &Cluster, topic: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let records = eventually("read a partition", || {
            shoal_client::log_reader::read_partition(cluster, topic, partition, true)
        })
        .await;
        for r in records.records {
            let value =
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            *counts.entry(value).or_insert(0) += 1;
        }
    }
    counts
}

/// The node coordinating `group` and a connection to it (asked at `bootstrap`).
async fn coordinator(bootstrap: SocketAddr, group: &str) -> Result<(i32, Connection), String> {
    let mut conn = Connection::connect(bootstrap)
        .await
        .map_err(|e| e.to_string())?;
    let r = conn
        .request(
            3,
            &FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.into())),
        )
        .await
        .map_err(|e| e.to_string())?;
    if r.error_code != 0 {
        return Err(format!("FindCoordinator: {}", r.error_code));
    }
    let addr: SocketAddr = format!("{}:{}", r.host, r.port).parse().unwrap();
    let conn = Connection::connect(addr).await.map_err(|e| e.to_string())?;
    Ok((r.node_id.0, conn))
}

async fn commit_offset(
    bootstrap: SocketAddr,
    group: &str,
    topic: &str,
    offset: i64,
) -> Result<i32, String> {
    let (node, mut conn) = coordinator(bootstrap, group).await?;
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let r = conn.request(8, &request).await.map_err(|e| e.to_string())?;
    match r.topics[0].partitions[0].error_code {
        0 => Ok(node),
        code => Err(format!("OffsetCommit: {code}")),
    }
}

async fn fetch_offset(bootstrap: SocketAddr, group: &str, topic: &str) -> Result<i64, String> {
    let (_, mut conn) = coordinator(bootstrap, group).await?;
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_require_stable(true)
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_indexes(vec![0])]));
    let r = conn.request(7, &request).await.map_err(|e| e.to_string())?;
    if r.error_code != 0 {
        return Err(format!("OffsetFetch: {}", r.error_code));
    }
    let p = &r.topics[0].partitions[0];
    match p.error_code {
        0 => Ok(p.committed_offset),
        code => Err(format!("OffsetFetch partition: {code}")),
    }
}

/// Whether `node` leads a partition of `t`, as `node` itself answers Metadata.
async fn leads_any(addr: SocketAddr, node: i32) -> Result<(), String> {
    let leaders = leaders(addr).await?;
    if leaders.contains(&node) {
        Ok(())
    } else {
        Err(format!("leaders {leaders:?}"))
    }
}

/// Whether `node` leads `t`-`partition`, as `node` itself answers Metadata.
async fn leads(addr: SocketAddr, node: i32, partition: usize) -> Result<(), String> {
    let leaders = leaders(addr).await?;
    if leaders.get(partition) == Some(&node) {
        Ok(())
    } else {
        Err(format!("leaders {leaders:?}"))
    }
}

/// The leader of each partition of `t`, as the broker at `addr` answers Metadata.
async fn leaders(addr: SocketAddr) -> Result<Vec<i32>, String> {
    use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
    let mut conn = Connection::connect(addr).await.map_err(|e| e.to_string())?;
    let r = conn
        .request(
            12,
            &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))))])),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut partitions: Vec<(i32, i32)> = r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0))
        .collect();
    partitions.sort_unstable();
    Ok(partitions.into_iter().map(|(_, leader)| leader).collect())
}

/// Three brokers over `etcd` (its endpoints, comma-separated) sharing the object directory
/// `dir`/objects, with topic `t` created at the first.
async fn three_brokers_with_topic(dir: &Path, etcd: &str) -> Vec<Broker> {
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    let brokers: Vec<Broker> = (1..=3)
        .map(|id| start_broker(id, dir, etcd, &objects))
        .collect();
    let admin = Admin::connect(config(brokers[0].addr)).await.unwrap();
    for (topic, result) in admin
        .create_topics(&[NewTopic::new("t").partitions(PARTITIONS)], Mode::Apply)
        .await
        .unwrap()
    {
        result.unwrap_or_else(|e| panic!("create {topic}: {e:?}"));
    }
    admin.close().await;
    brokers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_serve_one_cluster_and_survive_a_kill_9_of_any() {
    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    // Created at broker 1, produced through broker 2: every broker knows the topic.
    let mut brokers = three_brokers_with_topic(dir.path(), &etcd.endpoint).await;
    let addr = |b: &Broker| b.addr;
    produce(addr(&brokers[1]), "t", 0..300).await;
    let counts = read_all(addr(&brokers[2]), "t").await;
    assert_eq!(counts.len(), 300);
    assert!(counts.values().all(|n| *n == 1));

    // A committed offset, then the coordinator's broker killed: the new coordinator replays it.
    let group = "g";
    let coordinator_node = eventually("commit an offset", || {
        commit_offset(addr(&brokers[0]), group, "t", 42)
    })
    .await;
    let victim = brokers
        .iter()
        .position(|b| b.node_id == coordinator_node)
        .unwrap();
    let survivor = addr(&brokers[(victim + 1) % 3]);
    // A reader that learned the leaders before the kill (some of them the victim).
    let stale_reader = Cluster::connect(config(survivor)).await.unwrap();
    stale_reader.topic("t").await.unwrap();
    kill9(&mut brokers[victim]);
    let offset = eventually("fetch the offset from the new coordinator", || {
        fetch_offset(survivor, group, "t")
    })
    .await;
    assert_eq!(offset, 42, "the committed offset was lost in the failover");

    // Produce through a survivor while the dead broker's partitions move: every record
    // acknowledged before and after is there exactly once.
    produce(survivor, "t", 300..600).await;
    let counts = read_all_through(&stale_reader, "t").await;
    let duplicated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "duplicated: {duplicated:?}");
    let missing: Vec<u32> = (0..600)
        .filter(|i| !counts.contains_key(&format!("v{i}")))
        .collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    assert_eq!(counts.len(), 600);

    // The killed broker restarted at once (its lease may still be live: it waits it out)
    // rejoins with its stale directory, is given partitions back and restores them.
    let restarted = brokers[victim].node_id;
    let dead = std::mem::replace(
        &mut brokers[victim],
        start_broker(restarted, dir.path(), &etcd.endpoint, &objects),
    );
    drop(dead);
    let back = addr(&brokers[victim]);
    eventually("the restarted broker leads a partition again", || {
        leads_any(back, restarted)
    })
    .await;
    produce(back, "t", 600..900).await;
    let counts = read_all(back, "t").await;
    assert!(
        counts.values().all(|n| *n == 1),
        "duplicated after the rejoin"
    );
    assert_eq!(counts.len(), 900);

    // The survivors stop cleanly, leaving the cluster.
    for (i, b) in brokers.iter_mut().enumerate() {
        if i != victim {
            assert!(common::terminate(&mut b.child).success());
        }
    }
}

/// The node coordinating transactional id `id`, as `bootstrap` answers FindCoordinator.
async fn txn_coordinator(bootstrap: SocketAddr, id: &str) -> Result<i32, String> {
    let mut conn = Connection::connect(bootstrap)
        .await
        .map_err(|e| e.to_string())?;
    let r = conn
        .request(
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(id.into()))
                .with_key_type(1),
        )
        .await
        .map_err(|e| e.to_string())?;
    if r.error_code != 0 {
        return Err(format!("FindCoordinator: {}", r.error_code));
    }
    Ok(r.node_id.0)
}

/// One transaction of transactional id `id` through `bootstrap`: `values` spread over every
/// partition of `t`, then committed (or aborted).
async fn transaction(bootstrap: SocketAddr, id: &str, values: std::ops::Range<u32>, commit: bool) {
    let mut builder = ProducerConfig::builder(config(bootstrap));
    builder.transactional_id(id);
    let producer = Producer::new(builder.build().expect("producer config"))
        .await
        .expect("producer");
    eventually("init transactions", || producer.init_transactions()).await;
    producer.begin_transaction().expect("begin");
    for i in values {
        let record = ProducerRecord::new("t", format!("v{i}"))
            .with_key(format!("k{i}"))
            .with_partition(i as i32 % PARTITIONS);
        drop(producer.send(record).await.expect("send"));
    }
    if commit {
        producer.commit_transaction().await.expect("commit");
    } else {
        producer.abort_transaction().await.expect("abort");
    }
    producer.close().await;
}

/// Every value of `t` visible to read_committed, once `expected` of them are (a transaction's
/// records stay invisible until its marker is on every partition).
async fn committed(bootstrap: SocketAddr, expected: usize) -> BTreeMap<String, usize> {
    eventually("the committed transactions visible", || async {
        let counts = read_all(bootstrap, "t").await;
        if counts.len() >= expected {
            Ok(counts)
        } else {
            Err(format!("{} of {expected} visible", counts.len()))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_over_every_broker_commit_and_abort_across_a_coordinator_kill_9() {
    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut brokers = three_brokers_with_topic(dir.path(), &etcd.endpoint).await;
    // Once the assigner has spread the partitions over the three.
    eventually("the partitions spread over every broker", || async {
        let l = leaders(brokers[0].addr).await?;
        let owners: std::collections::BTreeSet<i32> = l.iter().copied().collect();
        if owners == [1, 2, 3].into() {
            Ok(())
        } else {
            Err(format!("leaders {l:?}"))
        }
    })
    .await;

    // Committed and aborted, each with records on every broker's partitions.
    let id = "cross-broker";
    transaction(brokers[1].addr, id, 0..60, true).await;
    transaction(brokers[1].addr, id, 60..120, false).await;
    transaction(brokers[2].addr, id, 120..180, true).await;
    let expected: Vec<String> = (0..60).chain(120..180).map(|i| format!("v{i}")).collect();
    let counts = committed(brokers[0].addr, expected.len()).await;
    assert_eq!(counts.keys().cloned().collect::<Vec<_>>(), {
        let mut e = expected.clone();
        e.sort();
        e
    });
    assert!(counts.values().all(|n| *n == 1));

    // The coordinator's broker killed: a survivor takes the transactional id over, fences the
    // old producer and its markers reach every partition, the dead broker's included once
    // they have moved.
    let coordinator_node = eventually("find the coordinator", || {
        txn_coordinator(brokers[0].addr, id)
    })
    .await;
    let victim = brokers
        .iter()
        .position(|b| b.node_id == coordinator_node)
        .unwrap();
    kill9(&mut brokers[victim]);
    let survivor = brokers[(victim + 1) % 3].addr;
    transaction(survivor, id, 180..240, true).await;
    transaction(survivor, id, 240..300, false).await;
    let expected: Vec<String> = (0..60)
        .chain(120..180)
        .chain(180..240)
        .map(|i| format!("v{i}"))
        .collect();
    let counts = committed(survivor, expected.len()).await;
    let mut e = expected;
    e.sort();
    assert_eq!(counts.keys().cloned().collect::<Vec<_>>(), e);
    assert!(counts.values().all(|n| *n == 1), "duplicated: {counts:?}");
}

/// One acks=all Produce of `value` to `topic`-`partition` over `conn`, answered in the
/// background (a paused broker answers only once woken, if at all).
fn send_produce(
    mut conn: Connection,
    topic: &str,
    partition: i32,
    value: &str,
) -> tokio::task::JoinHandle<Result<kafka_protocol::messages::ProduceResponse, String>> {
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    let batch = shoal_storage::batch::encode_batch(
        &[(None, Some(value.as_bytes()))],
        shoal_storage::batch::BatchOptions::default(),
    );
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(bytes::Bytes::from(batch)))])]);
    tokio::spawn(async move { conn.request(9, &request).await.map_err(|e| e.to_string()) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_paused_past_its_lease_is_fenced_and_its_late_write_never_visible() {
    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut brokers = three_brokers_with_topic(dir.path(), &etcd.endpoint).await;
    produce(brokers[0].addr, "t", 0..60).await;

    // The owner of t-0, paused with a write in its socket.
    let owner = eventually("t-0 has an owner", || async {
        for b in &brokers {
            if leads(b.addr, b.node_id, 0).await.is_ok() {
                return Ok(b.node_id);
            }
        }
        Err("no owner yet")
    })
    .await;
    let zombie = brokers.iter().position(|b| b.node_id == owner).unwrap();
    let conn = Connection::connect(brokers[zombie].addr).await.unwrap();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(brokers[zombie].child.id() as i32, libc::SIGSTOP) };
    let late = send_produce(conn, "t", 0, "zombie");

    // Past its lease (3 s) the others take its partitions over and take writes.
    let survivor = brokers[(zombie + 1) % 3].addr;
    eventually("the others take the paused broker's partitions", || async {
        let now = leaders(survivor).await?;
        if now.contains(&owner) || now.contains(&-1) {
            Err(format!("leaders {now:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    produce(survivor, "t", 60..120).await;

    // Woken: its write is refused or its connection closed, and it stops.
    // SAFETY: as above.
    unsafe { libc::kill(brokers[zombie].child.id() as i32, libc::SIGCONT) };
    if let Ok(Ok(Ok(response))) = tokio::time::timeout(WAIT, late).await {
        let code = response.responses[0].partition_responses[0].error_code;
        assert_ne!(
            code, 0,
            "the paused owner acknowledged a write after losing t-0"
        );
    }
    let start = Instant::now();
    while brokers[zombie].child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the fenced broker did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counts = read_all(survivor, "t").await;
    assert!(
        !counts.contains_key("zombie"),
        "the zombie's write became visible"
    );
    assert_eq!(counts.len(), 120);
    assert!(counts.values().all(|n| *n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_goes_on_when_one_of_three_etcd_members_is_killed() {
    let mut etcd = shoal_cluster::rig::start_etcd_cluster(3).unwrap();
    let endpoints = etcd
        .iter()
        .map(|m| m.endpoint.clone())
        .collect::<Vec<_>>()
        .join(",");
    let dir = tempfile::tempdir().unwrap();
    let mut brokers = three_brokers_with_topic(dir.path(), &endpoints).await;
    produce(brokers[1].addr, "t", 0..100).await;

    // One member gone (whichever it is, leader included): two of three still decide.
    drop(etcd.remove(0));
    produce(brokers[2].addr, "t", 100..200).await;
    let offset = eventually("commit an offset", || {
        commit_offset(brokers[0].addr, "g", "t", 7)
    })
    .await;
    assert!((1..=3).contains(&offset));
    let counts = read_all(brokers[1].addr, "t").await;
    assert_eq!(counts.len(), 200);
    assert!(counts.values().all(|n| *n == 1));
    // No broker lost its lease or stopped.
    for b in &mut brokers {
        assert!(
            b.child.try_wait().unwrap().is_none(),
            "node {} stopped",
            b.node_id
        );
    }
}

/// Polls `group` on `topic` through `bootstrap`, accepting every record, until `target`
/// distinct values were accepted in all (with `seen`) or [`WAIT`] passes; commits and closes.
/// Returns the values this consumer accepted, each with how often it was delivered to it.
async fn share_consume(
    bootstrap: SocketAddr,
    topic: &str,
    group: &str,
    seen: &BTreeMap<String, usize>,
    target: usize,
) -> BTreeMap<String, usize> {
    use shoal_client::share_consumer::{AcknowledgeType, ShareConsumer, ShareConsumerConfig};
    let addr = bootstrap.to_string();
    let config = ShareConsumerConfig::from_properties([
        ("bootstrap.servers", addr.as_str()),
        ("group.id", group),
        ("share.acknowledgement.mode", "explicit"),
        ("request.timeout.ms", "5000"),
        ("retry.backoff.ms", "100"),
        ("reconnect.backoff.max.ms", "500"),
    ])
    .unwrap();
    let mut consumer = ShareConsumer::new(config).await.unwrap();
    consumer.subscribe([topic.to_string()]);
    let mut accepted = BTreeMap::new();
    let start = Instant::now();
    while seen.len() + accepted.len() < target && start.elapsed() < WAIT {
        let Ok(records) = consumer.poll(Duration::from_millis(500)).await else {
            continue;
        };
        for r in &records {
            let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
            *accepted.entry(value.into_owned()).or_insert(0) += 1;
            consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        if !records.is_empty() {
            // Acknowledged durably before counting them as done.
            let _ = consumer.commit_sync().await;
        }
    }
    let _ = consumer.commit_sync().await;
    consumer.close().await;
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_groups_keep_their_state_on_other_brokers_across_a_kill_9() {
    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut brokers = three_brokers_with_topic(dir.path(), &etcd.endpoint).await;
    let first = brokers[0].addr;
    produce(first, "t", 0..300).await;
    let admin = Admin::connect(config(first)).await.unwrap();
    for (_, result) in admin
        .incremental_alter_configs(
            &[(
                shoal_client::admin::ConfigResource::group("sg".to_string()),
                vec![shoal_client::admin::AlterConfigOp::Set {
                    name: "share.auto.offset.reset".into(),
                    value: "earliest".into(),
                }],
            )],
            Mode::Apply,
        )
        .await
        .unwrap()
    {
        result.unwrap();
    }
    admin.close().await;

    // Six data partitions and three state partitions over three brokers: most share
    // partitions keep their state on another broker than their leader.
    let before = share_consume(first, "t", "sg", &BTreeMap::new(), 150).await;
    assert!(before.len() >= 150, "accepted only {}", before.len());

    // A broker killed: its data and state partitions move; nothing accepted comes back.
    // New records land on every partition, the moved ones included; produced at once, so the
    // producer must look the moved partitions up again when their old leader refuses it.
    kill9(&mut brokers[2]);
    produce(first, "t", 300..600).await;
    let after = share_consume(first, "t", "sg", &before, 600).await;
    let again: Vec<&String> = after.keys().filter(|v| before.contains_key(*v)).collect();
    assert!(
        again.is_empty(),
        "accepted records delivered again: {again:?}"
    );
    let missing: Vec<u32> = (0..600)
        .filter(|i| {
            let v = format!("v{i}");
            !before.contains_key(&v) && !after.contains_key(&v)
        })
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
}
