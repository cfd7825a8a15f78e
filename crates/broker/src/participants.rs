//! Transactional participants: the internal topics whose records can be transactional, and the
//! one path by which a transaction's COMMIT or ABORT marker is written to one of their
//! partitions and reaches the state kept from them.
//!
//! [`write_marker`] is that path for every marker (the transaction coordinator's marker task,
//! WriteTxnMarkers); the lost-marker rewrite at start appends its markers itself, before
//! anything is served, and queues them with [`Participant::hand_at_start`] (decision 0005):
//!
//! - [`Participant::ShareState`] (`__share_group_state`): the marker is written by the
//!   share-state coordinator on its runtime, like every other write there (decision 0019), so
//!   that it sees its partitions in log order and can refuse a staging whose transaction
//!   already ended. It resolves the acknowledgements a TxnShareAcknowledge staged there under
//!   the producer (TX_PENDING, KIP-1289) — COMMIT acknowledges or archives them, ABORT makes
//!   them available again — and then the live share partitions do the same.
//! - [`Participant::Offsets`] (`__consumer_offsets`): the marker is appended here, then the
//!   group coordinator's pending transactional offset commits of the producer become
//!   committed or vanish.
//! - any other partition: the marker is appended (`crate::markers`).
//!
//! Each participant applies a marker with one function of its own, which both the live path
//! and the replay of its topic at start (which sees the control batches) call, so replayed
//! state equals live state.
//!
//! The participants' services are reached through the [`Participants`] trait, which whatever
//! composes the coordinator services implements (`crate::broker::Broker`) and hands to the
//! transaction coordinator at start: no coordinator imports another, nor the broker.
//!
//! Must not: call request handlers (arrows point handlers → drivers → core); import a
//! coordinator, the share partitions or the broker; hand a marker to a participant before it
//! is appended to the participant's partition (a reload must find it).

use std::future::Future;
use std::sync::Weak;

use shoal_protocol::ErrorCode;
use shoal_storage::batch::BatchHeader;
use shoal_storage::RecordView;
use tracing::warn;

use crate::node::{NodeState, CONSUMER_OFFSETS, SHARE_GROUP_STATE};
use crate::topic_registry::Partition;

pub use shoal_core::coordinator::TxnMarker;

/// The marker a control batch read back from `partition` holds; None for other control
/// records (or an unreadable key).
pub fn marker_from_control(
    partition: i32,
    header: &BatchHeader,
    records: &[RecordView],
) -> Option<TxnMarker> {
    let commit = records
        .first()
        .and_then(|r| r.key.as_deref())
        .and_then(control_record_is_commit)?;
    Some(TxnMarker {
        partition,
        producer_id: header.producer_id(),
        producer_epoch: header.producer_epoch(),
        commit,
    })
}

/// Reads a control record key (`[version i16][type i16]`, type 0 = ABORT, 1 = COMMIT).
pub fn control_record_is_commit(key: &[u8]) -> Option<bool> {
    match key {
        [_, _, 0, 0, ..] => Some(false),
        [_, _, 0, 1, ..] => Some(true),
        _ => None,
    }
}

/// An internal topic whose records can be transactional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Participant {
    /// `__consumer_offsets`: the group coordinator.
    Offsets,
    /// `__share_group_state`: the share-state store.
    ShareState,
}

impl Participant {
    /// Every participant.
    pub const ALL: [Participant; 2] = [Participant::Offsets, Participant::ShareState];

    /// The participant owning `topic`, if any.
    pub fn of(topic: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.topic() == topic)
    }

    /// The participant's topic.
    pub fn topic(self) -> &'static str {
        match self {
            Participant::Offsets => CONSUMER_OFFSETS,
            Participant::ShareState => SHARE_GROUP_STATE,
        }
    }

    /// [`write_marker`]'s hand-over at start, before the broker serves anyone (the participants
    /// are loaded, the marker was appended after their replay): queued ahead of every request
    /// before this returns.
    pub fn hand_at_start(self, participants: &impl Participants, marker: TxnMarker) {
        if !participants.queue_marker_at_start(self, marker) {
            warn!(
                topic = self.topic(),
                ?marker,
                "transaction participant unavailable; the marker applies on its reload"
            );
        }
    }
}

/// The participants' services, as the transaction coordinator's markers reach them:
/// implemented by whatever composes them (the broker), so that the coordinators below it need
/// not know one another.
pub trait Participants: Send + Sync + 'static {
    /// The share-state participant: writes `marker` to its `__share_group_state` partition
    /// through the share-state coordinator, durably, and resolves the stagings it ends
    /// (`crate::share::ShareManager::write_marker`).
    ///
    /// # Errors
    /// The marker's refusal, or COORDINATOR_NOT_AVAILABLE when it could not be written.
    fn write_share_state_marker(
        &self,
        marker: TxnMarker,
        coordinator_epoch: i32,
    ) -> impl Future<Output = Result<(), ErrorCode>> + Send;

    /// The offsets participant: applies a marker just appended to a `__consumer_offsets`
    /// partition and waits until it is applied. False when the group coordinator is not
    /// running (the marker is in the log, so its next load applies it).
    fn apply_offsets_marker(&self, marker: TxnMarker) -> impl Future<Output = bool> + Send;

    /// Queues a marker appended at start to `participant`'s partition ahead of every request
    /// (see [`Participant::hand_at_start`]). False when the participant is not running.
    fn queue_marker_at_start(&self, participant: Participant, marker: TxnMarker) -> bool;
}

/// Participants held without keeping them alive (a background task's hold): once they are
/// gone, a marker is not written (COORDINATOR_NOT_AVAILABLE) nor applied.
impl<P: Participants> Participants for Weak<P> {
    async fn write_share_state_marker(
        &self,
        marker: TxnMarker,
        coordinator_epoch: i32,
    ) -> Result<(), ErrorCode> {
        match self.upgrade() {
            Some(p) => p.write_share_state_marker(marker, coordinator_epoch).await,
            None => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        }
    }

    async fn apply_offsets_marker(&self, marker: TxnMarker) -> bool {
        match self.upgrade() {
            Some(p) => p.apply_offsets_marker(marker).await,
            None => false,
        }
    }

    fn queue_marker_at_start(&self, participant: Participant, marker: TxnMarker) -> bool {
        self.upgrade()
            .is_some_and(|p| p.queue_marker_at_start(participant, marker))
    }
}

/// How [`write_marker`] left a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerWritten {
    /// Appended at this offset, not yet known durable.
    At(i64),
    /// Durable (written by the share-state coordinator, which fsyncs before it answers).
    Durable,
}

/// Writes a COMMIT (`marker.commit`) or ABORT marker of `marker.producer_id` at
/// `marker.producer_epoch` from a transaction coordinator of `coordinator_epoch` to
/// `partition` (whose index is `marker.partition`), and hands it to the partition's
/// participant, if any, through `participants` (see the module docs).
///
/// # Errors
/// The marker's refusal as `crate::markers::write_marker` gives it (INVALID_PRODUCER_EPOCH,
/// TRANSACTION_COORDINATOR_FENCED, a storage error), or COORDINATOR_NOT_AVAILABLE when the
/// share-state coordinator could not write it. Retrying is harmless.
pub async fn write_marker(
    node: &NodeState,
    participants: &impl Participants,
    partition: &Partition,
    marker: TxnMarker,
    coordinator_epoch: i32,
) -> Result<MarkerWritten, ErrorCode> {
    debug_assert_eq!(partition.index, marker.partition);
    if partition.topic == SHARE_GROUP_STATE {
        participants
            .write_share_state_marker(marker, coordinator_epoch)
            .await?;
        return Ok(MarkerWritten::Durable);
    }
    let offset = crate::markers::write_marker(
        node,
        partition,
        marker.producer_id,
        marker.producer_epoch,
        marker.commit,
        coordinator_epoch,
    )?;
    if partition.topic == CONSUMER_OFFSETS && !participants.apply_offsets_marker(marker).await {
        warn!(
            topic = CONSUMER_OFFSETS,
            ?marker,
            "transaction participant unavailable; the marker applies on its reload"
        );
    }
    Ok(MarkerWritten::At(offset))
}
