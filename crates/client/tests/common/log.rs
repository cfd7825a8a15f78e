//! Reading a partition back with raw requests through the cluster layer, for the producer's
//! tests: CreateTopics, and Fetch (read_uncommitted or read_committed, dropping the aborted
//! transactions' records as a consumer does), with every codec decompressed.

use std::collections::BTreeSet;
use std::io::Read;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, CreateTopicsRequest, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};
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

/// A fetched batch's records with its codec.
#[derive(Debug)]
pub struct Fetched {
    pub records: Vec<Record>,
    pub codecs: BTreeSet<String>,
}

/// Every data record of `topic`-`partition` from offset 0 (control records dropped; with
/// `read_committed`, records of aborted transactions too, using the answer's
/// `aborted_transactions` as Kafka's consumers do).
pub async fn fetch_all(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> Fetched {
    let info = cluster.topic(topic).await.unwrap();
    let leader = cluster.leader(topic, partition).await.unwrap();
    let mut out = Fetched {
        records: Vec::new(),
        codecs: BTreeSet::new(),
    };
    let mut offset = 0i64;
    loop {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(64 * 1024 * 1024)
            .with_isolation_level(i8::from(read_committed))
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.into())))
                .with_topic_id(info.topic_id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(32 * 1024 * 1024)])]);
        let response = cluster.send(leader, &request).await.unwrap();
        assert_eq!(response.error_code, 0);
        let p = &response.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch {topic}-{partition}");
        let mut aborted: Vec<(i64, i64)> = p
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.first_offset, a.producer_id.0))
            .collect();
        aborted.sort();
        let mut active: BTreeSet<i64> = BTreeSet::new();
        let mut bytes = p.records.clone().unwrap_or_default();
        let mut last = None;
        while bytes.len() >= 61 {
            let set =
                RecordBatchDecoder::decode_with_custom_compression(&mut bytes, Some(decompress))
                    .unwrap();
            out.codecs.insert(format!("{:?}", set.compression));
            let Some(first) = set.records.first() else {
                continue;
            };
            while let Some((at, pid)) = aborted.first().copied() {
                if at > first.offset {
                    break;
                }
                aborted.remove(0);
                active.insert(pid);
            }
            last = set.records.last().map(|r| r.offset);
            if first.control {
                // An ABORT marker (control type 0) ends that producer's aborted range.
                let kind = first.key.as_ref().and_then(|k| k.get(2..4)).map(|b| b[1]);
                if read_committed && kind == Some(0) {
                    active.remove(&first.producer_id);
                }
                continue;
            }
            if read_committed && first.transactional && active.contains(&first.producer_id) {
                continue;
            }
            out.records.extend(set.records);
        }
        match last {
            Some(l) => offset = l + 1,
            None => return out,
        }
    }
}

fn decompress(input: &mut Bytes, codec: Compression) -> anyhow::Result<Bytes> {
    let mut out = Vec::new();
    match codec {
        Compression::None => return Ok(input.clone()),
        Compression::Gzip => {
            flate2::read::MultiGzDecoder::new(&input[..]).read_to_end(&mut out)?;
        }
        Compression::Lz4 => {
            lz4_flex::frame::FrameDecoder::new(&input[..]).read_to_end(&mut out)?;
        }
        Compression::Zstd => out = zstd::stream::decode_all(&input[..])?,
        Compression::Snappy => {
            // xerial framing: 16-byte header, then [len u32 BE][raw block]...
            let mut rest = &input[16..];
            while rest.len() >= 4 {
                let len = u32::from_be_bytes(rest[..4].try_into()?) as usize;
                out.extend(snap::raw::Decoder::new().decompress_vec(&rest[4..4 + len])?);
                rest = &rest[4 + len..];
            }
        }
    }
    Ok(Bytes::from(out))
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
