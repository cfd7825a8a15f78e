//! Share-group dead-letter queues (KIP-1191): the dead-letter records of the records a share
//! partition holds ARCHIVING (written by the task in [`crate::archiving`], which then archives
//! them), and those a transaction carries.
//!
//! A group whose `errors.deadletterqueue.topic.name` is set (at `share.version` 2 or above)
//! has its rejected records, and those that reached `share.delivery.count.limit`, made
//! ARCHIVING by its share partitions (`shoal_core::share_partition`, `dead_letter.rs`). This
//! module writes, for each such offset, one record to partition `source partition % partitions`
//! of the dead-letter topic, with Kafka's six `__dlq.errors.*` headers (topic, partition,
//! offset, group, delivery count, message) and the original record's key and value when
//! `errors.deadletterqueue.copy.record.enable` is true (else a null key and value; Kafka 4.4
//! copies no original header either way), and then moves the records to ARCHIVED.
//!
//! Order, and why it is exactly once across kill -9 (decision 0013):
//! 1. ARCHIVING is persisted (the share-state write of the acknowledgement, expiry or marker
//!    that caused it) before this module ever sees the records;
//! 2. the dead-letter records are appended and fsynced (group commit) under the share
//!    partition's slot lock, so nothing else writes dead letters for it meanwhile;
//! 3. only then is ARCHIVED persisted.
//!
//! A crash before 3 leaves the records ARCHIVING in the share state, so they are written again
//! after the restart, when the share partition is loaded. A crash between 2 and 3 would then
//! write them twice; so a share partition loaded with ARCHIVING records (or whose last attempt
//! failed part way) first scans its dead-letter partition for records whose headers name the
//! same group, topic, partition and offset (the headers are the dedupe key: unique per source
//! record, and every dead-letter record of this share partition is in that one partition),
//! and writes only the others. A share partition whose ARCHIVING records were made by this
//! process and whose attempts all succeeded needs no scan: nothing can have been written for
//! them yet.
//!
//! A transaction's REJECTs (KIP-1289's TxnShareAcknowledge) carry their dead letters in the
//! transaction instead ([`in_transaction`], [`write_in_transaction`], decision 0022 points
//! 6–8): written as the producer's transactional batches when the staging is, visible exactly
//! when the transaction commits, and archived by the COMMIT marker itself. The dedupe scan
//! therefore counts a transactional dead letter only once its COMMIT marker follows it.
//!
//! As in Kafka, a dead letter that cannot be written (no such topic and no auto-creation, a
//! topic not enabled with `errors.deadletterqueue.group.enable`, a name against the broker's
//! `errors.deadletterqueue.topic.name.prefix` or starting with `__`) is logged and its record
//! archived regardless; a storage error leaves the records ARCHIVING to be tried again.
//!
//! Must not: move a record to ARCHIVED before its dead-letter record is durable; hold a
//! partition lock across an await.

use std::collections::HashSet;
use std::sync::Arc;

use shoal_codec::batch::{BatchOptions, BatchWriter, Compression};
use shoal_core::producer_state::ProducerId;
use shoal_core::share_coordinator::SharePartitionKey;
use shoal_core::share_partition::DeadLetterRange;
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{control_record_type, decode_records, ControlRecordType, RecordView};
use tracing::{error, warn};

use crate::config::ConfigMap;
use crate::group_configs::{DLQ_COPY_RECORD_ENABLE, DLQ_TOPIC_NAME};
use crate::node::NodeState;
use crate::producer_state::state_config;
use crate::topic_registry::{Partition, Topic};

pub const HEADER_TOPIC: &str = "__dlq.errors.topic";
pub const HEADER_PARTITION: &str = "__dlq.errors.partition";
pub const HEADER_OFFSET: &str = "__dlq.errors.offset";
pub const HEADER_GROUP: &str = "__dlq.errors.group";
pub const HEADER_DELIVERY_COUNT: &str = "__dlq.errors.delivery.count";
pub const HEADER_MESSAGE: &str = "__dlq.errors.message";

/// Topic config that lets share groups use a topic as their dead-letter queue.
pub const TOPIC_GROUP_ENABLE: &str = "errors.deadletterqueue.group.enable";
const AUTO_CREATE: &str = "errors.deadletterqueue.auto.create.topics.enable";
const PREFIX: &str = "errors.deadletterqueue.topic.name.prefix";

/// Dead-letter records per appended batch at most.
const RECORDS_PER_BATCH_MAX: usize = 500;
/// Bytes read from a log per step (scans and source records).
const READ_BYTES: usize = 1 << 20;
/// Decompressed bytes of one batch read back at most.
const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// Why a group's dead letters cannot be written: its records are archived without one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unwritable {
    #[error(
        "Configured DLQ topic name in share group: {group} cannot start with __, topic: {topic}."
    )]
    Internal { group: String, topic: String },
    #[error("DLQ is not enabled on configured DLQ topic for share group: {group}, topic: {topic}")]
    NotEnabled { group: String, topic: String },
    #[error("Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group}, topic: {topic}, prefix: {prefix}")]
    Prefix {
        group: String,
        topic: String,
        prefix: String,
    },
    #[error(
        "DLQ topic {topic} of share group {group} does not exist and auto-creation is disabled"
    )]
    Missing { group: String, topic: String },
    #[error("DLQ topic {topic} could not be created: {reason}")]
    Create { topic: String, reason: String },
}

/// Why an attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Archive without a dead letter (logged).
    Unwritable(Unwritable),
    /// Try again later; the records stay ARCHIVING.
    Retry(ErrorCode),
}

/// Where a group's dead letters go.
struct Target {
    topic: Arc<Topic>,
    copy_record: bool,
}

/// The group's dead-letter topic, checked as Kafka's validator does (and created when
/// missing and `errors.deadletterqueue.auto.create.topics.enable` is true).
async fn target(node: &NodeState, group: &str) -> Result<Option<Target>, Failure> {
    let overrides = node.group_config_overrides(group);
    let broker = node.current_config();
    let name = crate::group_configs::effective(&broker, &overrides, DLQ_TOPIC_NAME);
    if name.is_empty() {
        return Ok(None);
    }
    let copy_record =
        crate::group_configs::effective(&broker, &overrides, DLQ_COPY_RECORD_ENABLE) == "true";
    let unwritable = |u| Failure::Unwritable(u);
    if name.starts_with("__") {
        return Err(unwritable(Unwritable::Internal {
            group: group.to_string(),
            topic: name,
        }));
    }
    let topic = match node.topic(&name) {
        Some(topic) => topic,
        None if broker.get(AUTO_CREATE) == "true" => create(node, &name).await?,
        None => {
            return Err(unwritable(Unwritable::Missing {
                group: group.to_string(),
                topic: name,
            }))
        }
    };
    if topic.overrides().get(TOPIC_GROUP_ENABLE) != Some("true") {
        return Err(unwritable(Unwritable::NotEnabled {
            group: group.to_string(),
            topic: name,
        }));
    }
    let prefix = broker.get(PREFIX);
    if !prefix.is_empty() && !name.starts_with(prefix) {
        return Err(unwritable(Unwritable::Prefix {
            group: group.to_string(),
            topic: name,
            prefix: prefix.to_string(),
        }));
    }
    Ok(Some(Target { topic, copy_record }))
}

/// Creates a missing dead-letter topic: `num.partitions` partitions, enabled for dead
/// letters. A topic created meanwhile by someone else is used as it is.
async fn create(node: &NodeState, name: &str) -> Result<Arc<Topic>, Failure> {
    if let Err(reason) = crate::topic_registry::validate_topic_name(name) {
        return Err(Failure::Unwritable(Unwritable::Create {
            topic: name.to_string(),
            reason,
        }));
    }
    let partitions = u32::try_from(node.current_config().long("num.partitions")).unwrap_or(1);
    let mut configs = ConfigMap::new();
    configs.insert(TOPIC_GROUP_ENABLE, "true");
    match node.create_topic(name, partitions.max(1), configs).await {
        Ok(topic) => Ok(topic),
        Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => node
            .topic(name)
            .ok_or(Failure::Retry(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)),
        Err(e) => Err(Failure::Unwritable(Unwritable::Create {
            topic: name.to_string(),
            reason: e.message,
        })),
    }
}

/// What a scan of a dead-letter partition found for one source partition's offsets.
#[derive(Debug, Default)]
struct Found {
    /// Dead letters that are, or will be, visible: plain, or in a committed transaction.
    written: HashSet<i64>,
    /// Dead letters in a transaction whose marker is not in the partition yet: they count
    /// only once it commits.
    undecided: HashSet<i64>,
}

/// The dead letters of `group`'s `topic`-`source_partition` in `partition` from `from` on (the
/// dedupe scan), of producer `only` if given. A transactional dead letter counts once its
/// COMMIT marker follows it; an aborted one does not count.
fn scan(
    partition: &Partition,
    from: i64,
    only: Option<i64>,
    (group, topic, source_partition): (&str, &str, i32),
) -> Result<Found, ErrorCode> {
    let mut found = Found::default();
    // Each producer's dead letters waiting for its marker.
    let mut pending: std::collections::HashMap<i64, Vec<i64>> = Default::default();
    let (mut at, end) = {
        let log = partition.lock();
        (from.max(log.log_start_offset()), log.log_end_offset())
    };
    let source_partition = source_partition.to_string();
    while at < end {
        let read = partition
            .lock()
            .read(at, READ_BYTES, None)
            .map_err(|e| ErrorCode(e.kafka_error_code()))?;
        if read.next_offset <= at {
            break;
        }
        at = read.next_offset;
        for batch in split_batches(&read.records) {
            let Ok((header, range)) = batch else { break };
            let producer = header.producer_id();
            if only.is_some_and(|p| p != producer) {
                continue;
            }
            if header.is_control() {
                let letters = pending.remove(&producer).unwrap_or_default();
                if matches!(
                    control_record_type(&read.records[range]),
                    Ok(ControlRecordType::Commit)
                ) {
                    found.written.extend(letters);
                }
                continue;
            }
            let records = decode_records(&read.records[range], DECOMPRESSED_BYTES_MAX)
                .map_err(|e| ErrorCode(e.kafka_error_code()))?;
            for r in records {
                let h = |name: &str| header_value(&r, name);
                if h(HEADER_GROUP) == Some(group.as_bytes())
                    && h(HEADER_TOPIC) == Some(topic.as_bytes())
                    && h(HEADER_PARTITION) == Some(source_partition.as_bytes())
                {
                    let offset = h(HEADER_OFFSET)
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|v| v.parse::<i64>().ok());
                    if header.is_transactional() {
                        pending.entry(producer).or_default().extend(offset);
                    } else {
                        found.written.extend(offset);
                    }
                }
            }
        }
    }
    found.undecided = pending.into_values().flatten().collect();
    Ok(found)
}

/// The last value of header `name` (Kafka's "last header with the same name wins").
fn header_value<'a>(r: &'a RecordView, name: &str) -> Option<&'a [u8]> {
    r.headers
        .iter()
        .rev()
        .find(|h| h.key.as_ref() == name.as_bytes())
        .and_then(|h| h.value.as_deref())
}

/// The records of `partition` in `[first, last]`, by offset (copy mode).
fn source_records(
    partition: &Partition,
    first: i64,
    last: i64,
) -> Result<Vec<RecordView>, ErrorCode> {
    let mut out = Vec::new();
    let mut at = first.max(partition.lock().log_start_offset());
    while at <= last {
        let read = match partition.lock().read(at, READ_BYTES, None) {
            Ok(read) => read,
            Err(_) => break,
        };
        if read.next_offset <= at {
            break;
        }
        at = read.next_offset;
        for batch in split_batches(&read.records) {
            let Ok((header, range)) = batch else { break };
            if header.is_control() {
                continue;
            }
            let records = decode_records(&read.records[range], DECOMPRESSED_BYTES_MAX)
                .map_err(|e| ErrorCode(e.kafka_error_code()))?;
            out.extend(
                records
                    .into_iter()
                    .filter(|r| (first..=last).contains(&r.offset)),
            );
        }
    }
    Ok(out)
}

/// One dead-letter record to write.
struct Letter {
    offset: i64,
    delivery_count: i16,
    message: &'static str,
    original: Option<RecordView>,
}

/// The encoded batches of `letters`, with `options` (a producer's, for a transaction).
fn encode(
    letters: &[Letter],
    (group, topic, source_partition): (&str, &str, i32),
    now_ms: i64,
    options: &BatchOptions,
) -> Vec<Vec<u8>> {
    let partition = source_partition.to_string();
    letters
        .chunks(RECORDS_PER_BATCH_MAX)
        .filter_map(|chunk| {
            let mut w = BatchWriter::default();
            for l in chunk {
                let offset = l.offset.to_string();
                let count = l.delivery_count.to_string();
                let ours: [(&[u8], Option<&[u8]>); 6] = [
                    (HEADER_TOPIC.as_bytes(), Some(topic.as_bytes())),
                    (HEADER_PARTITION.as_bytes(), Some(partition.as_bytes())),
                    (HEADER_OFFSET.as_bytes(), Some(offset.as_bytes())),
                    (HEADER_GROUP.as_bytes(), Some(group.as_bytes())),
                    (HEADER_DELIVERY_COUNT.as_bytes(), Some(count.as_bytes())),
                    (HEADER_MESSAGE.as_bytes(), Some(l.message.as_bytes())),
                ];
                let original = l.original.as_ref();
                let pushed = w.push(
                    now_ms,
                    original.and_then(|r| r.key.as_deref()),
                    original.and_then(|r| r.value.as_deref()),
                    ours.into_iter(),
                );
                if let Err(e) = pushed {
                    error!(error = %e, offset = l.offset, "dead-letter record not encodable");
                }
            }
            (w.record_count() > 0)
                .then(|| w.finish(options, Compression::None))
                .and_then(|r| r.map_err(|e| error!(error = %e, "dead-letter batch")).ok())
        })
        .collect()
}

/// `key`'s topic (None once deleted) and its name (the topic id when deleted), for the headers.
fn source_of(node: &NodeState, key: &SharePartitionKey) -> (Option<Arc<Topic>>, String) {
    let topic_id = uuid::Uuid::from_bytes(key.topic_id.0);
    let source = node.topic_by_id(topic_id);
    let name = source
        .as_ref()
        .map_or_else(|| topic_id.to_string(), |t| t.name.clone());
    (source, name)
}

/// The dead-letter partition of `source_partition`'s records: the source partition number
/// modulo the dead-letter topic's partition count, as in Kafka.
fn partition_for(dead_letter_topic: &Topic, source_partition: i32) -> i32 {
    let count = i32::try_from(dead_letter_topic.partition_count()).unwrap_or(i32::MAX);
    source_partition.rem_euclid(count.max(1))
}

/// The dead letters of `ranges` except the offsets in `skip`, with the original records
/// (from `source`) when `copy_record`.
fn letters(
    source: Option<&Partition>,
    copy_record: bool,
    ranges: &[DeadLetterRange],
    skip: &HashSet<i64>,
) -> Result<Vec<Letter>, ErrorCode> {
    let mut letters = Vec::new();
    for r in ranges {
        let mut originals = match (source, copy_record) {
            (Some(p), true) => source_records(p, r.first_offset, r.last_offset)?
                .into_iter()
                .peekable(),
            _ => Vec::new().into_iter().peekable(),
        };
        for offset in r.first_offset..=r.last_offset {
            while originals.next_if(|o| o.offset < offset).is_some() {}
            let original = originals.next_if(|o| o.offset == offset);
            if skip.contains(&offset) {
                continue;
            }
            letters.push(Letter {
                offset,
                delivery_count: r.delivery_count,
                message: r.cause.message(),
                original,
            });
        }
    }
    Ok(letters)
}

/// Writes (durably) the dead letters of `ranges` of `key`; with `verify`, only those the
/// dead-letter partition does not hold yet. Returns the records written.
pub(crate) async fn write(
    node: &NodeState,
    key: &SharePartitionKey,
    ranges: &[DeadLetterRange],
    verify: bool,
) -> Result<i64, Failure> {
    let Some(target) = target(node, &key.group_id).await? else {
        return Ok(0);
    };
    let (source, source_name) = source_of(node, key);
    let index = partition_for(&target.topic, key.partition);
    let partition = target
        .topic
        .partition(index)
        .ok_or(Failure::Retry(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION))?;
    let skip = if verify {
        let found = scan(
            &partition,
            0,
            None,
            (&key.group_id, &source_name, key.partition),
        )
        .map_err(Failure::Retry)?;
        // A transaction that carried one of these dead letters is being completed: wait for
        // its marker to know whether the dead letter stands.
        let awaited = ranges
            .iter()
            .flat_map(|r| r.first_offset..=r.last_offset)
            .any(|o| found.undecided.contains(&o) && !found.written.contains(&o));
        if awaited {
            return Err(Failure::Retry(ErrorCode::CONCURRENT_TRANSACTIONS));
        }
        found.written
    } else {
        HashSet::new()
    };
    let source_partition = source.as_ref().and_then(|t| t.partition(key.partition));
    let letters = letters(
        source_partition.as_deref(),
        target.copy_record,
        ranges,
        &skip,
    )
    .map_err(Failure::Retry)?;
    if letters.is_empty() {
        return Ok(0);
    }
    let now = node.now_ms();
    let source = (key.group_id.as_str(), source_name.as_str(), key.partition);
    for mut batch in encode(&letters, source, now, &BatchOptions::default()) {
        partition
            .lock()
            .append(&mut batch, now)
            .map_err(|e| Failure::Retry(ErrorCode(e.kafka_error_code())))?;
    }
    node.durability
        .commit(vec![partition.clone()])
        .await
        .map_err(|e| Failure::Retry(e.error_code()))?;
    partition.wake();
    Ok(letters.len() as i64)
}

/// Where a transaction writes the dead letters of one share partition's REJECTs (issue 31).
#[derive(Debug, Clone)]
pub struct InTransaction {
    /// The dead-letter topic's name and the partition, served here.
    pub topic: String,
    pub index: i32,
    partition: Arc<Partition>,
    copy_record: bool,
}

/// The dead-letter partition a transaction can carry `key`'s dead letters to, for a group with
/// dead-letter queues (the caller checks: a dead-letter topic at `share.version` 2 or above):
/// its topic passes Kafka's validation, and this broker serves the partition. `None` otherwise: the REJECTs are
/// then dead-lettered after the commit, through ARCHIVING, as without a transaction (an
/// unusable topic is logged and counted there).
pub async fn in_transaction(node: &NodeState, key: &SharePartitionKey) -> Option<InTransaction> {
    let target = target(node, &key.group_id).await.ok()??;
    let index = partition_for(&target.topic, key.partition);
    let partition = node.led_partition(&target.topic, index).ok()?;
    Some(InTransaction {
        topic: target.topic.name.clone(),
        index,
        partition,
        copy_record: target.copy_record,
    })
}

/// Writes the dead letters `ranges` of `key` into `producer`'s transaction on `to`'s
/// partition — transactional batches of the producer without a sequence, which its markers
/// resolve — skipping those the transaction already carries (a retried TxnShareAcknowledge
/// whose staging failed after its dead letters were written). Durable on return; the count
/// written.
///
/// # Errors
/// The storage error's code, or the producer fenced on the partition; then no staging may
/// claim these dead letters (the client aborts the transaction, which aborts any written).
pub async fn write_in_transaction(
    node: &NodeState,
    key: &SharePartitionKey,
    to: &InTransaction,
    (producer_id, producer_epoch): (i64, i16),
    ranges: &[DeadLetterRange],
) -> Result<i64, ErrorCode> {
    if ranges.is_empty() {
        return Ok(0);
    }
    let (source, source_name) = source_of(node, key);
    let ongoing = {
        let mut log = to.partition.lock();
        let producers = to
            .partition
            .producers(&mut log, state_config(&node.config), node.now_ms())
            .map_err(|e| ErrorCode(e.kafka_error_code()))?;
        producers
            .state()
            .entry(ProducerId(producer_id))
            .filter(|e| e.epoch().0 == producer_epoch)
            .and_then(|e| e.current_txn_first_offset())
    };
    let carried = match ongoing {
        Some(first) => {
            scan(
                &to.partition,
                first,
                Some(producer_id),
                (&key.group_id, &source_name, key.partition),
            )?
            .undecided
        }
        None => HashSet::new(),
    };
    let source_partition = source.as_ref().and_then(|t| t.partition(key.partition));
    let letters = letters(
        source_partition.as_deref(),
        to.copy_record,
        ranges,
        &carried,
    )?;
    if letters.is_empty() {
        return Ok(0);
    }
    let options = BatchOptions {
        producer_id,
        producer_epoch,
        transactional: true,
        ..BatchOptions::default()
    };
    let now = node.now_ms();
    let source = (key.group_id.as_str(), source_name.as_str(), key.partition);
    for batch in encode(&letters, source, now, &options) {
        let mut batch = bytes::BytesMut::from(&batch[..]);
        crate::markers::append_for_producer(
            node,
            &to.partition,
            producer_id,
            producer_epoch,
            &mut batch,
        )
        .map_err(|e| {
            warn!(?key, error = %e, "dead letters of a transaction not written");
            ErrorCode::KAFKA_STORAGE_ERROR
        })?;
    }
    node.durability
        .commit(vec![to.partition.clone()])
        .await
        .map_err(|e| e.error_code())?;
    to.partition.wake();
    Ok(letters.len() as i64)
}
