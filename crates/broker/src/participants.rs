//! Transactional participants: the internal topics whose records can be transactional, and the
//! one path by which a transaction's COMMIT or ABORT marker reaches the state kept from them.
//!
//! A marker is appended to a partition by `crate::markers` (for the transaction coordinator's
//! driver, for WriteTxnMarkers, and for the lost-marker rewrite at start — decision 0005). If
//! the partition belongs to a participant, the marker is then handed to that participant:
//!
//! - [`Participant::Offsets`] (`__consumer_offsets`): the group coordinator's pending
//!   transactional offset commits of the producer become committed or vanish;
//! - [`Participant::ShareState`] (`__share_group_state`): the share-state store and the live
//!   share partitions; the acknowledgements a TxnShareAcknowledge staged there under the
//!   producer (TX_PENDING, KIP-1289) resolve: COMMIT acknowledges or archives them, ABORT
//!   makes them available again.
//!
//! Each participant applies a marker with one function of its own, which both the live path
//! (through [`Participant::hand`] or [`Participant::hand_at_start`]) and the replay of its topic
//! at start (which sees the control batches) call, so replayed state equals live state.
//!
//! Must not: call request handlers (arrows point handlers → drivers → core); hand a marker to a
//! participant before it is appended to the participant's partition (a reload must find it).

use shoal_storage::batch::BatchHeader;
use shoal_storage::RecordView;
use tracing::warn;

use crate::broker::{Broker, CONSUMER_OFFSETS};
use crate::share::SHARE_GROUP_STATE;

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

    /// Hands a marker just appended to the participant's partition to it, and waits until it
    /// is applied. If the participant is unavailable the marker stays in the log, and its next
    /// load (replay) applies it.
    pub async fn hand(self, broker: &Broker, marker: TxnMarker) {
        let applied = match self {
            Participant::Offsets => broker.groups.apply_marker(marker).await.is_ok(),
            Participant::ShareState => {
                broker.share.apply_marker(broker, marker).await;
                true
            }
        };
        if !applied {
            warn!(
                topic = self.topic(),
                ?marker,
                "transaction participant unavailable; the marker applies on its reload"
            );
        }
    }

    /// [`Participant::hand`] at start, before the broker serves anyone (the participants are
    /// loaded, the marker was written after their replay): applied, or queued ahead of every
    /// request, before this returns.
    pub fn hand_at_start(self, broker: &Broker, marker: TxnMarker) {
        let applied = match self {
            Participant::Offsets => broker.groups.queue_marker(marker).is_ok(),
            Participant::ShareState => broker.share.apply_marker_at_start(broker, marker),
        };
        if !applied {
            warn!(
                topic = self.topic(),
                ?marker,
                "transaction participant unavailable; the marker applies on its reload"
            );
        }
    }
}

/// Hands a marker appended to `topic`-`marker.partition` to the topic's participant, if it has
/// one (a marker on a data partition needs nothing more).
pub async fn marker_appended(broker: &Broker, topic: &str, marker: TxnMarker) {
    if let Some(participant) = Participant::of(topic) {
        participant.hand(broker, marker).await;
    }
}
