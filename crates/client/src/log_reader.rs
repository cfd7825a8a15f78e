//! Reading a partition back from offset 0 with plain Fetch requests, read_uncommitted or
//! read_committed — dropping aborted transactions' records as Kafka's consumers do, from the
//! answer's `aborted_transactions` and the ABORT markers. For checkers (`shoal verify`, the
//! tests) that must see exactly what a read_committed consumer sees; not a consumer (no
//! group, no positions, the whole partition in memory).

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};
use shoal_codec::batch::BATCH_HEADER_BYTES;
use shoal_protocol::ApiKey;

use crate::cluster::Cluster;
use crate::error::Error;

/// What one batch may inflate to.
const INFLATED_BYTES_MAX: usize = 64 << 20;

/// A partition's data records, and the codecs of the batches they came in.
#[derive(Debug, Default)]
pub struct PartitionRecords {
    pub records: Vec<Record>,
    pub codecs: BTreeSet<String>,
}

/// Every data record of `topic`-`partition` from offset 0 up to the end (read_uncommitted)
/// or the last stable offset (`read_committed`, without aborted transactions' records);
/// control records are dropped.
///
/// An error saying the partition moved (NOT_LEADER_OR_FOLLOWER, an unknown or unreachable
/// leader) marks `cluster`'s metadata stale before it is returned, so a caller that retries
/// asks the new leader rather than the cached one.
///
/// # Errors
/// The cluster's errors, a partition error code, or a batch that does not decode.
pub async fn read_partition(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> Result<PartitionRecords, Error> {
    let read = read_from_leader(cluster, topic, partition, read_committed).await;
    let moved = |e: &Error| e.requires_metadata_refresh() || e.requires_metadata_update();
    if read.as_ref().err().is_some_and(moved) {
        cluster.invalidate_metadata();
    }
    read
}

async fn read_from_leader(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> Result<PartitionRecords, Error> {
    let info = cluster.topic(topic).await?;
    let leader = cluster.leader(topic, partition).await?;
    let mut out = PartitionRecords::default();
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
        let response = cluster.send(leader, &request).await?;
        if let Some(e) = Error::from_code(ApiKey::Fetch, response.error_code, None) {
            return Err(e);
        }
        let malformed = |reason: String| Error::MalformedResponse {
            addr: format!("node {leader}"),
            api: ApiKey::Fetch,
            version: -1,
            reason,
        };
        let p = response
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| malformed(format!("no answer for {topic}-{partition}")))?;
        if let Some(e) = Error::from_code(ApiKey::Fetch, p.error_code, None) {
            return Err(e);
        }
        let mut aborted: Vec<(i64, i64)> = p
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.first_offset, a.producer_id.0))
            .collect();
        aborted.sort();
        let mut aborted = aborted.into_iter().peekable();
        let mut active: BTreeSet<i64> = BTreeSet::new();
        let mut bytes = p.records.clone().unwrap_or_default();
        let mut last = None;
        // A tail shorter than a batch header is a partial batch.
        while bytes.len() >= BATCH_HEADER_BYTES {
            let set = RecordBatchDecoder::decode_with_custom_compression(
                &mut bytes,
                Some(|input: &mut Bytes, codec: Compression| {
                    crate::share_consumer::records::inflate(input, codec, INFLATED_BYTES_MAX)
                }),
            )
            .map_err(|e| malformed(format!("record batch: {e}")))?;
            out.codecs.insert(format!("{:?}", set.compression));
            let Some(first) = set.records.first() else {
                continue;
            };
            while let Some((_, pid)) = aborted.next_if(|(at, _)| *at <= first.offset) {
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
            None => return Ok(out),
        }
    }
}
