//! Per-partition producer state for the idempotent producer (Kafka's `ProducerStateManager`).
//!
//! Owns, for each producer id that wrote to one partition: its epoch, the metadata of its last
//! [`BATCHES_RETAINED`] appended batches (to answer retries with the original offsets) and the
//! timestamp of its last batch (for `producer.id.expiration.ms`). Decides for an incoming batch
//! set whether it is appended, refused (epoch fencing, sequence gaps) or a duplicate.
//!
//! Protocol: call [`ProducerStateManager::check`] with every batch of a produce request before
//! appending anything; on [`Decision::Append`] append the whole set, then call
//! [`ProducerStateManager::on_append`] for each batch with its assigned base offset. Loading is
//! the same `on_append` over the batches in the log (after a snapshot), so live state equals
//! the state rebuilt from the log.
//!
//! Invariants: at most [`BATCHES_RETAINED`] batches per producer, all of its current epoch, in
//! append order; at most `producers_max` producers (beyond it the producer with the oldest
//! last timestamp is evicted, as if it had expired: the alternative, refusing new producers,
//! would stall healthy clients over idle ones, and an evicted producer that comes back is treated
//! as unknown, which Kafka accepts with any sequence since KIP-360).
//!
//! Transactions (partition side, KIP-98): the first transactional batch of a producer starts an
//! ongoing transaction at its base offset (`current_txn_first_offset`); a control batch (COMMIT
//! or ABORT marker, checked with [`ProducerStateManager::check_marker`], not with the sequence
//! checks) ends it. The ongoing transactions are also kept ordered by first offset, so the first
//! unstable offset (what the last stable offset is made of) is read in O(log n). A producer with
//! an ongoing transaction is never expired and is evicted only if every producer has one.
//! Whether the coordinator added the partition to the transaction is not checked here.
//!
//! Checked in production (every build, O(log n) per batch; issue 28 point 6): the ongoing
//! index mirrors the entries where they change (a transaction that ends was indexed, one that
//! starts or is restored was not), and no producer remembers more than [`BATCHES_RETAINED`]
//! batches. A violation ([`ProducerStateViolation`]) is a value, never a panic: the state is
//! kept, and stopped ([`ProducerStateManager::violation`]): `check` and `check_marker` refuse
//! everything with [`ProducerStateError::Stopped`] (UNKNOWN_SERVER_ERROR), so nothing more is
//! appended to the partition on a last stable offset that may be wrong; `clear` keeps the
//! stop. The broker rebuilds the state from the log on restart. The full O(n) comparison of
//! the index with the entries runs in debug builds only.
//!
//! Must not: read clocks (time comes in as `now_ms`), perform I/O, or panic on batch headers.

mod error;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

pub use error::{
    ProducerStateError, ProducerStateViolation, INVALID_PRODUCER_EPOCH, INVALID_RECORD,
    INVALID_TXN_STATE, OUT_OF_ORDER_SEQUENCE_NUMBER,
};

/// Batches remembered per producer for de-duplication (Kafka's `NUM_BATCHES_TO_RETAIN`, which
/// matches the client's `max.in.flight.requests.per.connection` limit of 5 for idempotence).
pub const BATCHES_RETAINED: usize = 5;
/// Kafka's default `producer.id.expiration.ms` (one day).
pub const PRODUCER_ID_EXPIRATION_DEFAULT: Duration = Duration::from_millis(86_400_000);
/// Default limit on producers remembered per partition.
pub const PRODUCERS_MAX_DEFAULT: usize = 10_000;
/// `baseSequence` of a batch without one.
pub const NO_SEQUENCE: i32 = -1;

pub use crate::ids::{ProducerEpoch, ProducerId, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};

/// The producer-related fields of one incoming or stored batch header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchInfo {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub base_sequence: i32,
    /// `lastOffsetDelta`: the batch covers sequences `base_sequence..=base_sequence + delta`.
    pub last_offset_delta: i32,
    pub max_timestamp: i64,
    pub transactional: bool,
    pub control: bool,
}

impl BatchInfo {
    /// Whether the batch carries a producer id (is idempotent or transactional).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id.0 >= 0
    }

    /// The sequence of the batch's last record, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// `sequence + increment`, wrapping from `i32::MAX` to 0 (Kafka's `incrementSequence`).
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    let increment = increment.max(0);
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// Whether `next` directly follows `last` (Kafka's `inSequence`).
fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// What the log holds for one appended batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// What one producer has appended to the partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerEntry {
    epoch: ProducerEpoch,
    /// Oldest first; all at `epoch`; at most [`BATCHES_RETAINED`].
    batches: VecDeque<BatchMetadata>,
    last_timestamp: i64,
    /// First offset of the ongoing transaction on this partition, if one is ongoing.
    current_txn_first_offset: Option<i64>,
    /// Coordinator epoch of the last transaction marker (-1: none yet), which fences markers
    /// from older coordinators.
    coordinator_epoch: i32,
}

impl ProducerEntry {
    /// An entry restored from a snapshot; only the newest [`BATCHES_RETAINED`] batches are kept.
    pub fn restore(
        epoch: ProducerEpoch,
        batches: impl IntoIterator<Item = BatchMetadata>,
        last_timestamp: i64,
        current_txn_first_offset: Option<i64>,
        coordinator_epoch: i32,
    ) -> Self {
        let mut kept: VecDeque<BatchMetadata> = batches.into_iter().collect();
        while kept.len() > BATCHES_RETAINED {
            kept.pop_front();
        }
        ProducerEntry {
            epoch,
            batches: kept,
            last_timestamp,
            current_txn_first_offset,
            coordinator_epoch,
        }
    }

    pub fn epoch(&self) -> ProducerEpoch {
        self.epoch
    }

    /// The retained batches, oldest first.
    pub fn batches(&self) -> impl ExactSizeIterator<Item = &BatchMetadata> + '_ {
        self.batches.iter()
    }

    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    pub fn current_txn_first_offset(&self) -> Option<i64> {
        self.current_txn_first_offset
    }

    /// Coordinator epoch of the producer's last transaction marker, -1 if none.
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// The last appended sequence at the current epoch, if any batch is retained.
    pub fn last_sequence(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_sequence)
    }

    fn find_duplicate(&self, batch: &BatchInfo) -> Option<BatchMetadata> {
        if batch.producer_epoch != self.epoch {
            return None;
        }
        let last = batch.last_sequence();
        self.batches
            .iter()
            .find(|b| b.first_sequence == batch.base_sequence && b.last_sequence == last)
            .copied()
    }
}

/// Limits and timeouts of one partition's producer state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerStateConfig {
    /// `producer.id.expiration.ms`: producers idle longer are forgotten by `expire`.
    pub producer_id_expiration: Duration,
    /// Producers remembered; the one with the oldest last timestamp is evicted beyond it.
    pub producers_max: usize,
}

impl Default for ProducerStateConfig {
    fn default() -> Self {
        ProducerStateConfig {
            producer_id_expiration: PRODUCER_ID_EXPIRATION_DEFAULT,
            producers_max: PRODUCERS_MAX_DEFAULT,
        }
    }
}

/// What to do with a produce request's batch set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Append the set, then report each batch to [`ProducerStateManager::on_append`].
    Append,
    /// A retry of an appended batch: append nothing and answer with the original batch's
    /// offsets and NONE, as Kafka does.
    Duplicate(BatchMetadata),
}

/// A transaction a control batch just ended on this partition (Kafka's `CompletedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// Offset of the control batch (marker) that ended it.
    pub last_offset: i64,
}

/// The producer state of one partition.
#[derive(Clone, Debug)]
pub struct ProducerStateManager {
    config: ProducerStateConfig,
    producers: HashMap<ProducerId, ProducerEntry>,
    /// `(current_txn_first_offset, producer)` of every producer with an ongoing transaction:
    /// exactly the entries whose `current_txn_first_offset` is set.
    ongoing: BTreeSet<(i64, ProducerId)>,
    /// The first broken invariant found; the state is stopped once it is set.
    violation: Option<ProducerStateViolation>,
}

impl ProducerStateManager {
    /// # Panics
    /// If `config.producers_max` is 0 (a configuration error caught by the caller).
    pub fn new(config: ProducerStateConfig) -> Self {
        assert!(config.producers_max > 0, "producers_max must be positive");
        ProducerStateManager {
            config,
            producers: HashMap::new(),
            ongoing: BTreeSet::new(),
            violation: None,
        }
    }

    /// The broken invariant that stopped this producer state, if one did (see the module
    /// docs).
    pub fn violation(&self) -> Option<&ProducerStateViolation> {
        self.violation.as_ref()
    }

    /// Records a broken invariant (the first one is kept).
    fn flag(&mut self, violation: ProducerStateViolation) {
        if self.violation.is_none() {
            self.violation = Some(violation);
        }
    }

    /// `Ok` while no invariant was found broken.
    fn running(&self) -> Result<(), ProducerStateError> {
        match &self.violation {
            Some(v) => Err(ProducerStateError::Stopped(v.clone())),
            None => Ok(()),
        }
    }

    /// Adds `(first_offset, producer_id)` to the ongoing index, which must not hold it.
    fn index_ongoing(&mut self, first_offset: i64, producer_id: ProducerId) {
        if !self.ongoing.insert((first_offset, producer_id)) {
            self.flag(ProducerStateViolation::OngoingIndex {
                producer_id,
                first_offset,
                indexed: true,
            });
        }
    }

    /// The first offset of the earliest ongoing transaction (Kafka's first unstable offset);
    /// the last stable offset is this, or the high watermark if `None`.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(offset, _)| *offset)
    }

    /// Whether `producer_id` has a transaction open here at `epoch`, so that a batch of its at
    /// that epoch continues it. A transaction open at an older epoch is the previous one, its
    /// marker not appended yet: under transaction version 2 every end bumps the epoch and the
    /// client starts the next transaction as soon as EndTxn answers, so a batch at the new
    /// epoch begins another transaction and must be verified with the coordinator (Kafka's
    /// `hasOngoingTransaction(producerId, producerEpoch)` compares the epoch too).
    pub fn has_ongoing_txn(&self, producer_id: ProducerId, epoch: ProducerEpoch) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.epoch == epoch)
    }

    /// Every ongoing transaction as `(first offset, producer)`, earliest first.
    pub fn ongoing_txns(&self) -> impl Iterator<Item = (i64, ProducerId)> + '_ {
        self.ongoing.iter().copied()
    }

    /// Checks a transaction marker (COMMIT/ABORT control batch) before it is appended. Markers
    /// carry no sequence and skip the sequence checks; only the epoch is checked, as Kafka's
    /// `appendEndTxnMarker` does: a marker older than the producer's epoch is a zombie's. A
    /// newer epoch is accepted (transaction version 2 markers carry the bumped epoch) and
    /// becomes the producer's epoch when the marker is recorded by `on_append`. A marker for a
    /// producer without an ongoing transaction here is allowed (it ends nothing). A marker from a
    /// coordinator older than the one that wrote the producer's last marker is refused
    /// (Kafka's `checkCoordinatorEpoch`).
    ///
    /// # Errors
    /// [`ProducerStateError::InvalidProducerEpoch`], [`ProducerStateError::CoordinatorFenced`].
    pub fn check_marker(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
    ) -> Result<(), ProducerStateError> {
        self.running()?;
        match self.producers.get(&producer_id) {
            Some(e) if epoch < e.epoch => Err(ProducerStateError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current: e.epoch,
            }),
            Some(e) if e.coordinator_epoch > coordinator_epoch => {
                Err(ProducerStateError::CoordinatorFenced {
                    producer_id,
                    coordinator_epoch,
                    current: e.coordinator_epoch,
                })
            }
            _ => Ok(()),
        }
    }

    /// Records the coordinator epoch of a transaction marker of `producer_id` just recorded by
    /// [`ProducerStateManager::on_append`] (the marker's value carries it, its header does not).
    pub fn on_marker_coordinator_epoch(&mut self, producer_id: ProducerId, coordinator_epoch: i32) {
        if let Some(e) = self.producers.get_mut(&producer_id) {
            e.coordinator_epoch = coordinator_epoch;
        }
    }

    /// Removes a producer, keeping `ongoing` in step.
    fn remove(&mut self, producer_id: ProducerId) {
        if let Some(e) = self.producers.remove(&producer_id) {
            if let Some(first) = e.current_txn_first_offset {
                self.ongoing.remove(&(first, producer_id));
            }
        }
    }

    /// O(n) check that `ongoing` mirrors the entries (debug builds and tests).
    fn ongoing_consistent(&self) -> bool {
        let from_entries: BTreeSet<(i64, ProducerId)> = self
            .producers
            .iter()
            .filter_map(|(id, e)| e.current_txn_first_offset.map(|f| (f, *id)))
            .collect();
        from_entries == self.ongoing
    }

    pub fn config(&self) -> &ProducerStateConfig {
        &self.config
    }

    /// Number of producers remembered.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn entry(&self, producer_id: ProducerId) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every producer and its entry, in no particular order (for snapshots).
    pub fn entries(&self) -> impl Iterator<Item = (ProducerId, &ProducerEntry)> + '_ {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// Puts back an entry read from a snapshot (evicting as `on_append` does when full).
    pub fn restore(&mut self, producer_id: ProducerId, entry: ProducerEntry) {
        if self.producers.contains_key(&producer_id) {
            self.remove(producer_id);
        } else {
            self.make_room();
        }
        if let Some(first) = entry.current_txn_first_offset {
            self.index_ongoing(first, producer_id);
        }
        self.producers.insert(producer_id, entry);
    }

    /// Decides what to do with a batch set, checking every batch (in order, each one against
    /// the state the earlier ones would leave) before anything is appended. Batches without a
    /// producer id are not checked. A duplicate of an appended batch makes the whole set a
    /// [`Decision::Duplicate`], as in Kafka.
    ///
    /// # Errors
    /// The first batch's [`ProducerStateError`]; nothing may then be appended.
    pub fn check(&self, batches: &[BatchInfo]) -> Result<Decision, ProducerStateError> {
        self.running()?;
        // (epoch, last sequence, in a transaction) of producers changed by earlier batches of
        // this set.
        let mut pending: Vec<(ProducerId, ProducerEpoch, i32, bool)> = Vec::new();
        for batch in batches.iter().filter(|b| b.has_producer_id()) {
            let id = batch.producer_id;
            if batch.base_sequence < 0 {
                return Err(ProducerStateError::InvalidSequence {
                    producer_id: id,
                    base_sequence: batch.base_sequence,
                });
            }
            let committed = self.producers.get(&id);
            if let Some(duplicate) = committed.and_then(|e| e.find_duplicate(batch)) {
                return Ok(Decision::Duplicate(duplicate));
            }
            let current = match pending.iter().find(|(p, ..)| *p == id) {
                Some(&(_, epoch, last, in_txn)) => Some((epoch, Some(last), in_txn)),
                None => committed.map(|e| {
                    (
                        e.epoch,
                        e.last_sequence(),
                        e.current_txn_first_offset.is_some(),
                    )
                }),
            };
            Self::validate(batch, current)?;
            let in_txn = batch.transactional;
            let update = (id, batch.producer_epoch, batch.last_sequence(), in_txn);
            match pending.iter_mut().find(|(p, ..)| *p == id) {
                Some(slot) => *slot = update,
                None => pending.push(update),
            }
        }
        Ok(Decision::Append)
    }

    /// Kafka's `checkProducerEpoch` + `checkSequence` + the transaction-state check of
    /// `appendDataBatch` for a client batch; `current` is the producer's (epoch, last sequence
    /// at that epoch, transaction ongoing), `None` if unknown.
    fn validate(
        batch: &BatchInfo,
        current: Option<(ProducerEpoch, Option<i32>, bool)>,
    ) -> Result<(), ProducerStateError> {
        let id = batch.producer_id;
        let epoch = batch.producer_epoch;
        let Some((current_epoch, last_sequence, in_txn)) = current else {
            // Unknown producer (new, expired, or its batches deleted): any sequence (KIP-360);
            // a transactional batch starts a transaction.
            return Ok(());
        };
        if epoch < current_epoch {
            return Err(ProducerStateError::InvalidProducerEpoch {
                producer_id: id,
                epoch,
                current: current_epoch,
            });
        }
        Self::check_sequence(batch, current_epoch, last_sequence)?;
        if in_txn && !batch.transactional {
            return Err(ProducerStateError::NotTransactional { producer_id: id });
        }
        Ok(())
    }

    fn check_sequence(
        batch: &BatchInfo,
        current_epoch: ProducerEpoch,
        last_sequence: Option<i32>,
    ) -> Result<(), ProducerStateError> {
        let id = batch.producer_id;
        let epoch = batch.producer_epoch;
        if current_epoch.0 == NO_PRODUCER_EPOCH {
            return Ok(());
        }
        if epoch != current_epoch {
            if batch.base_sequence != 0 {
                return Err(ProducerStateError::OutOfOrderSequence {
                    producer_id: id,
                    epoch,
                    base_sequence: batch.base_sequence,
                    last_sequence: NO_SEQUENCE,
                });
            }
            return Ok(());
        }
        let last = last_sequence.unwrap_or(NO_SEQUENCE);
        if !in_sequence(last, batch.base_sequence) {
            return Err(ProducerStateError::OutOfOrderSequence {
                producer_id: id,
                epoch,
                base_sequence: batch.base_sequence,
                last_sequence: last,
            });
        }
        Ok(())
    }

    /// Records a batch now in the log at `base_offset`: after a successful append of a set that
    /// [`ProducerStateManager::check`] (or, for a marker, [`ProducerStateManager::check_marker`])
    /// allowed, and when rebuilding from the log. Does not validate (the log is the truth).
    /// Batches without a producer id are ignored. A transactional batch starts the producer's
    /// transaction if none is ongoing; a control batch ends it and returns it (`None` if no
    /// transaction was ongoing: an empty transaction leaves no trace, as in Kafka). A batch
    /// without a sequence (written by the broker itself) leaves the sequence history alone.
    pub fn on_append(&mut self, batch: &BatchInfo, base_offset: i64) -> Option<CompletedTxn> {
        if !batch.has_producer_id() {
            return None;
        }
        let id = batch.producer_id;
        if !self.producers.contains_key(&id) {
            self.make_room();
        }
        let entry = self.producers.entry(id).or_insert_with(|| ProducerEntry {
            epoch: batch.producer_epoch,
            batches: VecDeque::with_capacity(BATCHES_RETAINED),
            last_timestamp: batch.max_timestamp,
            current_txn_first_offset: None,
            coordinator_epoch: -1,
        });
        if entry.epoch != batch.producer_epoch {
            entry.epoch = batch.producer_epoch;
            entry.batches.clear();
        }
        entry.last_timestamp = batch.max_timestamp;
        if batch.control {
            // A transaction marker ends the producer's transaction; it carries no sequence.
            let first = entry.current_txn_first_offset.take()?;
            if !self.ongoing.remove(&(first, id)) {
                self.flag(ProducerStateViolation::OngoingIndex {
                    producer_id: id,
                    first_offset: first,
                    indexed: false,
                });
            }
            debug_assert!(self.ongoing_consistent());
            return Some(CompletedTxn {
                producer_id: id,
                first_offset: first,
                last_offset: base_offset,
            });
        }
        let started = batch.transactional && entry.current_txn_first_offset.is_none();
        if started {
            entry.current_txn_first_offset = Some(base_offset);
        }
        if batch.base_sequence < 0 {
            // A batch without a sequence is one the broker wrote for the producer's
            // transaction (a share-state staging, a dead letter): it takes part in the
            // transaction but not in the client's sequence, which must go on where it was.
            if started {
                self.index_ongoing(base_offset, id);
            }
            return None;
        }
        let last_offset = base_offset.saturating_add(i64::from(batch.last_offset_delta.max(0)));
        if entry.batches.len() == BATCHES_RETAINED {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMetadata {
            first_sequence: batch.base_sequence,
            last_sequence: batch.last_sequence(),
            first_offset: base_offset,
            last_offset,
            max_timestamp: batch.max_timestamp,
        });
        let batches = entry.batches.len();
        if started {
            self.index_ongoing(base_offset, id);
        }
        if batches > BATCHES_RETAINED {
            self.flag(ProducerStateViolation::BatchesRetained {
                producer_id: id,
                batches,
            });
        }
        debug_assert!(self.ongoing_consistent());
        None
    }

    /// Forgets producers idle for `producer.id.expiration.ms` (last batch timestamp older than
    /// `now_ms - expiration`), except those with an ongoing transaction. Returns how many.
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let expiration =
            i64::try_from(self.config.producer_id_expiration.as_millis()).unwrap_or(i64::MAX);
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < expiration
        });
        before - self.producers.len()
    }

    /// Forgets every producer (the log was emptied or is being rebuilt); a stopped state stays
    /// stopped.
    pub fn clear(&mut self) {
        self.producers.clear();
        self.ongoing.clear();
    }

    /// Evicts the producer with the oldest last timestamp (ties: lowest id) while full.
    fn make_room(&mut self) {
        while self.producers.len() >= self.config.producers_max {
            let oldest = self
                .producers
                .iter()
                .filter(|(_, e)| e.current_txn_first_offset.is_none())
                .min_by_key(|(id, e)| (e.last_timestamp, **id))
                .or_else(|| {
                    self.producers
                        .iter()
                        .min_by_key(|(id, e)| (e.last_timestamp, **id))
                })
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => self.remove(id),
                None => break,
            }
        }
    }
}
