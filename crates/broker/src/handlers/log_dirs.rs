//! DescribeLogDirs and AlterReplicaLogDirs, answered as a Kafka broker with a single log
//! directory answers them (`kafka-log-dirs.sh --describe`, `kafka-reassign-partitions.sh`).
//!
//! The one log directory is the data directory, reported by its absolute path. Every partition
//! lives there, with its size in bytes (all segment files, as Kafka's `Log.size`), offset lag 0
//! (there is no future replica to catch up) and `is_future` false. Total and usable bytes
//! (v4+) are those of the directory's filesystem, as Kafka reads them from `File`.

use std::path::{Path, PathBuf};

use shoal_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use shoal_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use shoal_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, DescribeLogDirsRequest,
    DescribeLogDirsResponse,
};
use shoal_protocol::ErrorCode;

use super::{str_bytes, topic_name};
use crate::broker::Broker;

/// The name the data directory is reported under: its absolute path, without resolving
/// symbolic links (Java's `File.getAbsolutePath`, which Kafka's log manager uses).
pub fn log_dir_name(data_dir: &Path) -> String {
    std::path::absolute(data_dir)
        .unwrap_or_else(|_| PathBuf::from(data_dir))
        .to_string_lossy()
        .into_owned()
}

/// The partitions of `topic` to report: all of them, or those the request names that exist
/// (Kafka leaves out the ones it does not host).
fn partitions_of(
    topic: &crate::topic_registry::Topic,
    wanted: Option<&[i32]>,
) -> Vec<DescribeLogDirsPartition> {
    topic
        .partitions()
        .iter()
        .filter(|p| wanted.is_none_or(|w| w.contains(&p.index)))
        .map(|p| {
            let size = p.lock().size_bytes();
            DescribeLogDirsPartition::default()
                .with_partition_index(p.index)
                .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
                .with_offset_lag(0)
                .with_is_future_key(false)
        })
        .collect()
}

pub fn describe_log_dirs(
    broker: &Broker,
    request: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let mut topics = Vec::new();
    match &request.topics {
        None => {
            for topic in broker.topic_list() {
                let partitions = partitions_of(&topic, None);
                if !partitions.is_empty() {
                    topics.push(
                        DescribeLogDirsTopic::default()
                            .with_name(topic_name(topic.name.clone()))
                            .with_partitions(partitions),
                    );
                }
            }
        }
        Some(wanted) => {
            for want in wanted {
                let Some(topic) = broker.topic(want.topic.as_str()) else {
                    continue;
                };
                let partitions = partitions_of(&topic, Some(&want.partitions));
                if !partitions.is_empty() {
                    topics.push(
                        DescribeLogDirsTopic::default()
                            .with_name(want.topic.clone())
                            .with_partitions(partitions),
                    );
                }
            }
        }
    }
    let dir = &broker.data_dir;
    // -1 when the filesystem cannot be asked (Kafka's UNKNOWN_VOLUME_BYTES).
    let total = fs2::total_space(dir).map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let usable = fs2::available_space(dir).map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    DescribeLogDirsResponse::default()
        .with_error_code(0)
        .with_results(vec![DescribeLogDirsResult::default()
            .with_error_code(0)
            .with_log_dir(str_bytes(log_dir_name(dir)))
            .with_topics(topics)
            .with_total_bytes(total)
            .with_usable_bytes(usable)])
}

/// Moving a replica to the directory it is already in succeeds and does nothing; any other
/// path is not a log directory of this broker (LOG_DIR_NOT_FOUND for every partition, known or
/// not, as Kafka answers); an unknown partition in the right directory gets
/// UNKNOWN_TOPIC_OR_PARTITION.
pub fn alter_replica_log_dirs(
    broker: &Broker,
    request: &AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let ours = log_dir_name(&broker.data_dir);
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for dir in &request.dirs {
        let known_dir = dir.path.as_str() == ours;
        for topic in &dir.topics {
            let found = broker.topic(topic.name.as_str());
            let partitions = topic.partitions.iter().map(|&index| {
                let code = if !known_dir {
                    ErrorCode::LOG_DIR_NOT_FOUND
                } else if found.as_ref().and_then(|t| t.partition(index)).is_some() {
                    ErrorCode::NONE
                } else {
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                };
                AlterReplicaLogDirPartitionResult::default()
                    .with_partition_index(index)
                    .with_error_code(code.code())
            });
            match results.iter_mut().find(|r| r.topic_name == topic.name) {
                Some(existing) => existing.partitions.extend(partitions),
                None => results.push(
                    AlterReplicaLogDirTopicResult::default()
                        .with_topic_name(topic.name.clone())
                        .with_partitions(partitions.collect()),
                ),
            }
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}
