//! Reading a partition back with raw requests through the cluster layer, for the producer's
//! tests: CreateTopics, and Fetch (read_uncommitted or read_committed, dropping the aborted
//! transactions' records as a consumer does), with every codec decompressed.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Cluster;

/// Creates `topic` with `partitions` partitions (an existing one is fine).
pub async fn create_topic(cluster: &Cluster, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    let response = cluster.send_any(&request).await.unwrap();
    for t in &response.topics {
        assert!(
            t.error_code == 0 || t.error_code == 36,
            "CreateTopics {topic}: {}",
            t.error_code
        );
    }
    // Wait until metadata shows every partition with a leader.
    for _ in 0..200 {
        cluster.invalidate_metadata();
        if let Ok(info) = cluster.topic(topic).await {
            if info.partitions.len() == partitions as usize
                && info.partitions.iter().all(|p| p.leader.is_some())
            {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{topic} has no leaders");
}

/// A partition's records with their codecs.
pub type Fetched = shoal_client::log_reader::PartitionRecords;

/// Every data record of `topic`-`partition` from offset 0 (control records dropped; with
/// `read_committed`, records of aborted transactions too, as Kafka's consumers do):
/// [`shoal_client::log_reader::read_partition`].
pub async fn fetch_all(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> Fetched {
    shoal_client::log_reader::read_partition(cluster, topic, partition, read_committed)
        .await
        .unwrap()
}

/// [`fetch_all`] with read_committed, again until at least `count` records are visible or
/// ten seconds have passed: a commit's markers are written after EndTxn answers (in Kafka
/// as in Shoal), so the last stable offset can lag the commit briefly.
pub async fn fetch_committed(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    count: usize,
) -> Fetched {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let fetched = fetch_all(cluster, topic, partition, true).await;
        if fetched.records.len() >= count || std::time::Instant::now() >= deadline {
            return fetched;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
