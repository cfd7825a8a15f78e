//! Transaction markers on data partitions: the partition side of WriteTxnMarkers; and the
//! transactional batches the broker itself writes for a producer's transaction.
//!
//! [`write_marker`] appends a COMMIT or ABORT control batch for one producer to one partition,
//! under the partition lock: the marker's epoch is checked against the producer state (not its
//! sequence: markers carry none), the batch is appended, and recording it ends the producer's
//! ongoing transaction there (moving the last stable offset) and, for ABORT, adds the
//! transaction to the log's aborted-transaction index. [`write_marker_durably`] also waits for
//! the group-commit fsync, as the WriteTxnMarkers API answers only once the marker is durable.
//! (The transaction coordinator uses [`write_marker`] and does not wait: see
//! `crate::coordinators::txn_coordinator` and decision 0005. Markers to `__share_group_state`
//! go through the share-state coordinator's runtime, which appends them with [`write_marker`]:
//! see `crate::participants`.)
//!
//! [`append_for_producer`] appends a batch the broker writes on a producer's behalf, inside
//! its transaction and without a sequence: the share-state stagings of KIP-1289 (through the
//! coordinator runtime, `crate::coordinators::log_io`) and the dead letters a transaction
//! carries (`crate::dead_letter`). Recording it starts the producer's transaction on the
//! partition if none is ongoing, so the markers resolve it like any of the producer's batches.
//!
//! Must not: await or fsync under the partition lock; decide anything the coordinator owns
//! (which partitions are in a transaction, the coordinator epoch's validity).

use std::sync::Arc;

use shoal_core::producer_state::{ProducerEpoch, ProducerId};
use shoal_protocol::ErrorCode;
use shoal_storage::{encode_end_txn_marker, EndTxnMarker, StorageError};

use crate::node::NodeState;
use crate::producer_state::state_config;
use crate::topic_registry::Partition;

fn storage_error(partition: &Partition, e: &StorageError) -> ErrorCode {
    tracing::error!(partition = ?partition, error = %e, "cannot write transaction marker");
    ErrorCode(e.kafka_error_code())
}

/// The partition `index` of `topic`, for a marker.
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers WriteTxnMarkers for a partition it lacks;
/// NOT_LEADER_OR_FOLLOWER (or LEADER_NOT_AVAILABLE) for one this node does not lead.
pub fn partition(node: &NodeState, topic: &str, index: i32) -> Result<Arc<Partition>, ErrorCode> {
    let topic = node
        .topic(topic)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    node.led_partition(&topic, index)
}

/// Appends a transaction marker (COMMIT if `commit`, else ABORT) for `producer_id` at
/// `producer_epoch` to `partition` and returns its offset. The marker is written even if the
/// producer has no ongoing transaction there (Kafka does; it ends nothing). A newer epoch than
/// the producer's (transaction version 2 markers carry epoch + 1) is accepted and becomes the
/// producer's epoch. Not durable on return: flush the partition, use [`write_marker_durably`],
/// or, as the transaction coordinator does, record the offset so a restart can rewrite it.
///
/// A marker whose coordinator epoch is older than that of the producer's last marker on the
/// partition is a fenced coordinator's (TRANSACTION_COORDINATOR_FENCED): the transaction
/// coordinator takes a higher epoch every time it loads, so a marker write still in flight
/// from before a reload cannot land after the reloaded coordinator's.
///
/// Synchronous, takes the partition lock briefly (loading the producer state on first use).
///
/// # Errors
/// INVALID_PRODUCER_EPOCH if `producer_epoch` is older than the producer's current epoch;
/// TRANSACTION_COORDINATOR_FENCED (see above);
/// KAFKA_STORAGE_ERROR (or the storage error's code) if the state cannot be loaded or the
/// append fails. Nothing is appended on error.
pub fn write_marker(
    node: &NodeState,
    partition: &Partition,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<i64, ErrorCode> {
    if producer_id < 0 {
        return Err(ErrorCode::INVALID_REQUEST);
    }
    let now = node.now_ms();
    let mut log = partition.lock();
    let mut producers = partition
        .producers(&mut log, state_config(&node.config), now)
        .map_err(|e| storage_error(partition, &e))?;
    match producers.check_marker(
        &mut log,
        ProducerId(producer_id),
        ProducerEpoch(producer_epoch),
        coordinator_epoch,
    ) {
        Err(e) => return Err(storage_error(partition, &e)),
        Ok(Err(refused)) => return Err(ErrorCode(refused.error_code())),
        Ok(Ok(())) => {}
    }
    let marker = EndTxnMarker {
        commit,
        coordinator_epoch,
    };
    let mut batch = encode_end_txn_marker(producer_id, producer_epoch, marker, now);
    let info = log
        .append(&mut batch, now)
        .map_err(|e| storage_error(partition, &e))?;
    if let Err(e) = producers.on_appended(&mut log, &batch) {
        // The marker and the state (and the in-memory index) stand; a file write failed.
        tracing::warn!(partition = ?partition, error = %e, "recording a transaction marker");
    }
    drop(producers);
    drop(log);
    // The LSO may have moved: wake read_committed long polls.
    partition.wake();
    Ok(info.first_offset)
}

/// Appends `batch` — transactional, of `producer_id` at `producer_epoch`, without a sequence —
/// to `partition` for the producer's transaction, and records it in the partition's producer
/// state; returns its base offset. Not durable until the caller's group commit.
///
/// # Errors
/// A newer epoch's marker already ended the producer's transaction here (the batch would
/// belong to no transaction, and nothing would ever resolve it), or the producer state cannot
/// be loaded, or the append fails. Nothing is appended on error.
pub fn append_for_producer(
    node: &NodeState,
    partition: &Partition,
    producer_id: i64,
    producer_epoch: i16,
    batch: &mut bytes::BytesMut,
) -> Result<i64, String> {
    let now = node.now_ms();
    let mut log = partition.lock();
    let mut producers = partition
        .producers(&mut log, state_config(&node.config), now)
        .map_err(|e| e.to_string())?;
    let current = producers
        .state()
        .entry(ProducerId(producer_id))
        .map(|e| e.epoch().0);
    if current.is_some_and(|epoch| epoch > producer_epoch) {
        return Err(format!(
            "transactional batch of producer {producer_id} at epoch {producer_epoch} fenced on \
             {partition:?}"
        ));
    }
    let appended = log.append(batch, now).map_err(|e| e.to_string())?;
    if let Err(e) = producers.on_appended(&mut log, batch) {
        // The batch and the in-memory state stand; a snapshot write failed.
        tracing::warn!(partition = ?partition, error = %e,
            "recording a transactional batch written for a producer");
    }
    Ok(appended.first_offset)
}

/// [`write_marker`], then waits for the group-commit fsync of the partition.
///
/// Cancellation-safe in the sense that a cancelled call leaves the marker appended (it may or
/// may not be durable yet); the coordinator retries markers, which is harmless.
///
/// # Errors
/// As [`write_marker`]; KAFKA_STORAGE_ERROR if the fsync fails (the marker may then be lost).
pub async fn write_marker_durably(
    node: &NodeState,
    partition: Arc<Partition>,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<i64, ErrorCode> {
    let offset = write_marker(
        node,
        &partition,
        producer_id,
        producer_epoch,
        commit,
        coordinator_epoch,
    )?;
    node.durability.commit(vec![partition]).await.map_err(|e| {
        tracing::error!(error = %e, "cannot flush transaction marker");
        e.error_code()
    })?;
    Ok(offset)
}
