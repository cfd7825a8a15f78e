//! The share consumer's acknowledgement bookkeeping: which delivered records are still
//! waiting for the application, which acknowledgements are due to be sent, and which were
//! handed to a transaction instead (KIP-1289). Sans-IO: the consumer's driver feeds it the
//! records a ShareFetch acquired and sends the batches it takes out.
//!
//! A record delivered by a poll is *waiting* until the application acknowledges it:
//! - `share.acknowledgement.mode=implicit`: the next poll (or a commit, or close) accepts every
//!   record still waiting; [`Acknowledgements::acknowledge`] is refused.
//! - `explicit`: the application acknowledges each record (ACCEPT, RELEASE, REJECT, RENEW);
//!   the next poll is refused while a record of an earlier poll is still waiting, as the Java
//!   client refuses it ("All records must be acknowledged in explicit acknowledgement mode").
//!   RENEW extends the record's lock: once sent, the record is waiting again, and a poll does
//!   not count it against the application.
//!
//! An acknowledgement is *pending* until [`take`](Acknowledgements::take) puts it in a batch
//! (piggybacked on the partition's next ShareFetch, or in a ShareAcknowledge); it is then
//! *sent* until [`on_sent`](Acknowledgements::on_sent) reports the broker's answer. Offsets a
//! fetch acquired without a record (compacted away, control batches) are pending GAPs at once.
//!
//! [`for_transaction`](Acknowledgements::for_transaction) drains the pending ACCEPT / REJECT
//! (and GAP) acknowledgements for `Producer::send_share_acknowledgements_to_transaction`:
//! drained acknowledgements are never sent by the consumer (not on fetch, not in
//! ShareAcknowledge, not on close). A pending RELEASE or RENEW makes it an error that drains
//! nothing (spec §4).
//!
//! Invariants (checked by the property test against a model of each offset's state): an
//! offset of a delivery is acknowledged at most once, by the consumer or by a transaction,
//! never both; every batch is sorted, non-overlapping and well formed; a refused call changes
//! nothing; after [`close`](Acknowledgements::close) nothing is waiting or pending.
//!
//! Generic over the partition key `K` (the consumer uses topic id and partition).

use std::collections::BTreeMap;

/// An acknowledgement type, as ShareAcknowledge numbers them (GAP, 0, only for offsets
/// without a record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AcknowledgeType {
    Gap,
    Accept,
    Release,
    Reject,
    Renew,
}

impl AcknowledgeType {
    pub fn code(self) -> i8 {
        match self {
            AcknowledgeType::Gap => 0,
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
            AcknowledgeType::Renew => 4,
        }
    }

    /// Whether a transaction can carry it (the broker refuses RELEASE and RENEW there).
    pub fn transactional(self) -> bool {
        matches!(
            self,
            AcknowledgeType::Gap | AcknowledgeType::Accept | AcknowledgeType::Reject
        )
    }
}

/// `share.acknowledgement.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcknowledgementMode {
    #[default]
    Implicit,
    Explicit,
}

/// A run of offsets with their types: one type for the whole run, or one per offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub types: Vec<AcknowledgeType>,
}

impl AckBatch {
    /// The type of `offset` (inside the batch).
    pub fn type_of(&self, offset: i64) -> AcknowledgeType {
        if self.types.len() == 1 {
            self.types[0]
        } else {
            self.types[(offset - self.first_offset) as usize]
        }
    }

    pub fn offsets(&self) -> impl Iterator<Item = i64> {
        self.first_offset..=self.last_offset
    }
}

/// One range of offsets a ShareFetch acquired (its AcquiredRecords entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// Why a call was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    #[error("acknowledge() needs share.acknowledgement.mode=explicit")]
    ImplicitMode,
    #[error("All records must be acknowledged in explicit acknowledgement mode.")]
    Unacknowledged,
    #[error("offset {0} is not waiting to be acknowledged")]
    NotWaiting(i64),
    #[error("a transaction can carry only ACCEPT and REJECT; {0:?} is pending")]
    NotTransactional(AcknowledgeType),
    #[error("GAP is not an acknowledgement an application gives")]
    Gap,
    #[error("offset {0} is acknowledged twice")]
    Duplicate(i64),
    #[error("acquired records out of order, overlapping or too many: {0}")]
    InvalidAcquired(&'static str),
}

/// Most offsets one fetch answer may acquire for one partition (an answer is untrusted).
pub const ACQUIRED_OFFSETS_MAX: i64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Delivered, waiting for the application; `renewed`: its lock was renewed, so a poll
    /// does not wait for it.
    Waiting { poll: u64, renewed: bool },
    /// Acknowledged, not yet sent.
    Pending(AcknowledgeType),
    /// In a batch sent, answer awaited.
    Sent(AcknowledgeType),
}

#[derive(Clone, Debug, Default)]
struct Partition {
    held: BTreeMap<i64, Held>,
    delivery_counts: BTreeMap<i64, i16>,
}

/// The bookkeeping of one share consumer (see the module docs).
#[derive(Clone, Debug)]
pub struct Acknowledgements<K: Ord + Clone> {
    mode: AcknowledgementMode,
    poll: u64,
    partitions: BTreeMap<K, Partition>,
}

/// The outcome of a sent batch's offsets for the application's callback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckOutcome {
    pub offset: i64,
    pub ack_type: AcknowledgeType,
    /// The broker's code for the batch (0: done).
    pub error_code: i16,
}

impl<K: Ord + Clone> Acknowledgements<K> {
    pub fn new(mode: AcknowledgementMode) -> Self {
        Acknowledgements {
            mode,
            poll: 0,
            partitions: BTreeMap::new(),
        }
    }

    pub fn mode(&self) -> AcknowledgementMode {
        self.mode
    }

    /// Starts a poll: implicit mode accepts every waiting record; explicit mode refuses while
    /// a record is waiting (renewed ones aside).
    ///
    /// # Errors
    /// [`AckError::Unacknowledged`] (explicit mode); nothing changed.
    pub fn begin_poll(&mut self) -> Result<(), AckError> {
        match self.mode {
            AcknowledgementMode::Implicit => self.accept_waiting(),
            AcknowledgementMode::Explicit => {
                let waiting = self.partitions.values().any(|p| {
                    p.held
                        .values()
                        .any(|h| matches!(h, Held::Waiting { renewed: false, .. }))
                });
                if waiting {
                    return Err(AckError::Unacknowledged);
                }
            }
        }
        self.poll += 1;
        Ok(())
    }

    /// Records the records a fetch acquired for `key`: `acquired` ranges from the answer,
    /// `present` the offsets that came with a record. Offsets acquired without a record are
    /// pending GAPs. An offset already held is a new delivery (its lock expired and this
    /// consumer acquired it again): the old one is forgotten.
    ///
    /// # Errors
    /// [`AckError::InvalidAcquired`] for ranges out of order, overlapping, inverted or too
    /// many offsets, or a present offset outside them; nothing changed.
    pub fn deliver(
        &mut self,
        key: &K,
        acquired: &[Acquired],
        present: &[i64],
    ) -> Result<(), AckError> {
        let mut total = 0i64;
        let mut prev: Option<i64> = None;
        for a in acquired {
            if a.first_offset < 0 || a.first_offset > a.last_offset {
                return Err(AckError::InvalidAcquired("inverted or negative range"));
            }
            if prev.is_some_and(|p| a.first_offset <= p) {
                return Err(AckError::InvalidAcquired(
                    "ranges out of order or overlapping",
                ));
            }
            total = total.saturating_add(a.last_offset - a.first_offset + 1);
            if total > ACQUIRED_OFFSETS_MAX {
                return Err(AckError::InvalidAcquired("too many offsets"));
            }
            prev = Some(a.last_offset);
        }
        let inside = |o: i64| {
            acquired
                .iter()
                .any(|a| a.first_offset <= o && o <= a.last_offset)
        };
        if present.iter().any(|o| !inside(*o)) {
            return Err(AckError::InvalidAcquired(
                "a record outside the acquired ranges",
            ));
        }
        let present: std::collections::BTreeSet<i64> = present.iter().copied().collect();
        let poll = self.poll;
        let p = self.partitions.entry(key.clone()).or_default();
        for a in acquired {
            for o in a.first_offset..=a.last_offset {
                let held = if present.contains(&o) {
                    Held::Waiting {
                        poll,
                        renewed: false,
                    }
                } else {
                    Held::Pending(AcknowledgeType::Gap)
                };
                p.held.insert(o, held);
                p.delivery_counts.insert(o, a.delivery_count);
            }
        }
        Ok(())
    }

    /// The application's acknowledgement of a waiting record.
    ///
    /// # Errors
    /// [`AckError::ImplicitMode`]; [`AckError::Gap`]; [`AckError::NotWaiting`] for a record
    /// not delivered, already acknowledged, or handed to a transaction. Nothing changed.
    pub fn acknowledge(
        &mut self,
        key: &K,
        offset: i64,
        ack_type: AcknowledgeType,
    ) -> Result<(), AckError> {
        if self.mode == AcknowledgementMode::Implicit {
            return Err(AckError::ImplicitMode);
        }
        if ack_type == AcknowledgeType::Gap {
            return Err(AckError::Gap);
        }
        let held = self
            .partitions
            .get_mut(key)
            .and_then(|p| p.held.get_mut(&offset))
            .filter(|h| matches!(h, Held::Waiting { .. }))
            .ok_or(AckError::NotWaiting(offset))?;
        *held = Held::Pending(ack_type);
        Ok(())
    }

    /// The delivery count of a held record.
    pub fn delivery_count(&self, key: &K, offset: i64) -> Option<i16> {
        self.partitions
            .get(key)?
            .delivery_counts
            .get(&offset)
            .copied()
    }

    /// Records waiting for the application (renewed ones included).
    pub fn waiting(&self) -> usize {
        self.count(|h| matches!(h, Held::Waiting { .. }))
    }

    /// Acknowledgements not yet sent.
    pub fn pending(&self) -> usize {
        self.count(|h| matches!(h, Held::Pending(_)))
    }

    fn count(&self, f: impl Fn(&Held) -> bool) -> usize {
        self.partitions
            .values()
            .map(|p| p.held.values().filter(|h| f(h)).count())
            .sum()
    }

    /// Keys with pending acknowledgements.
    pub fn keys_pending(&self) -> Vec<K> {
        self.partitions
            .iter()
            .filter(|(_, p)| p.held.values().any(|h| matches!(h, Held::Pending(_))))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The pending acknowledgements of `key` as batches, now sent (answer with
    /// [`on_sent`](Self::on_sent)): what a ShareFetch to the partition's leader piggybacks.
    /// Waiting records stay waiting, in either mode (a fetch in the background is not the
    /// application saying it is done with them).
    pub fn take(&mut self, key: &K) -> Vec<AckBatch> {
        let Some(p) = self.partitions.get_mut(key) else {
            return Vec::new();
        };
        let mut out: Vec<(i64, AcknowledgeType)> = Vec::new();
        for (o, h) in p.held.iter_mut() {
            if let Held::Pending(t) = *h {
                *h = Held::Sent(t);
                out.push((*o, t));
            }
        }
        batches(&out)
    }

    /// A commit (`commit_sync` / `commit_async`): implicit mode accepts the waiting records
    /// first (the application is done with the last poll's records); then every key's
    /// pending acknowledgements, for a ShareAcknowledge to each leader.
    pub fn commit(&mut self) -> BTreeMap<K, Vec<AckBatch>> {
        if self.mode == AcknowledgementMode::Implicit {
            self.accept_waiting();
        }
        self.take_all()
    }

    /// Every key's pending acknowledgements.
    pub fn take_all(&mut self) -> BTreeMap<K, Vec<AckBatch>> {
        self.keys_pending()
            .into_iter()
            .map(|k| {
                let b = self.take(&k);
                (k, b)
            })
            .filter(|(_, b)| !b.is_empty())
            .collect()
    }

    /// The broker's answer to batches sent for `key` (0 or the partition's error code). A
    /// renewed record is waiting again if the renewal succeeded; every other offset is done.
    /// Offsets not sent are ignored (an untrusted or late answer changes nothing else).
    pub fn on_sent(&mut self, key: &K, sent: &[AckBatch], error_code: i16) -> Vec<AckOutcome> {
        let Some(p) = self.partitions.get_mut(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for b in sent {
            for o in b.offsets() {
                let Some(Held::Sent(t)) = p.held.get(&o).copied() else {
                    continue;
                };
                if t == AcknowledgeType::Renew && error_code == 0 {
                    p.held.insert(
                        o,
                        Held::Waiting {
                            poll: self.poll,
                            renewed: true,
                        },
                    );
                } else {
                    p.held.remove(&o);
                    p.delivery_counts.remove(&o);
                }
                if t != AcknowledgeType::Gap {
                    out.push(AckOutcome {
                        offset: o,
                        ack_type: t,
                        error_code,
                    });
                }
            }
        }
        if p.held.is_empty() {
            self.partitions.remove(key);
        }
        out
    }

    /// Drains the pending ACCEPT / REJECT acknowledgements (and GAPs) for a transaction
    /// (KIP-1289): the consumer will never send them.
    ///
    /// # Errors
    /// [`AckError::ImplicitMode`]; [`AckError::NotTransactional`] when a RELEASE or RENEW is
    /// pending. Nothing drained.
    pub fn for_transaction(&mut self) -> Result<BTreeMap<K, Vec<AckBatch>>, AckError> {
        if self.mode == AcknowledgementMode::Implicit {
            return Err(AckError::ImplicitMode);
        }
        for p in self.partitions.values() {
            for h in p.held.values() {
                if let Held::Pending(t) = h {
                    if !t.transactional() {
                        return Err(AckError::NotTransactional(*t));
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        for (k, p) in self.partitions.iter_mut() {
            let drained: Vec<(i64, AcknowledgeType)> = p
                .held
                .iter()
                .filter_map(|(o, h)| match h {
                    Held::Pending(t) => Some((*o, *t)),
                    _ => None,
                })
                .collect();
            for (o, _) in &drained {
                p.held.remove(o);
                p.delivery_counts.remove(o);
            }
            // A transaction of GAPs alone carries nothing of the application's.
            if drained.iter().any(|(_, t)| *t != AcknowledgeType::Gap) {
                out.insert(k.clone(), batches(&drained));
            } else if !drained.is_empty() {
                // Put them back: they go with the next fetch.
                for (o, t) in drained {
                    p.held.insert(o, Held::Pending(t));
                }
            }
        }
        self.partitions.retain(|_, p| !p.held.is_empty());
        Ok(out)
    }

    /// Closing: implicit mode accepts the waiting records, explicit mode releases them; every
    /// pending acknowledgement is taken out, as batches per key.
    pub fn close(&mut self) -> BTreeMap<K, Vec<AckBatch>> {
        let t = match self.mode {
            AcknowledgementMode::Implicit => AcknowledgeType::Accept,
            AcknowledgementMode::Explicit => AcknowledgeType::Release,
        };
        for p in self.partitions.values_mut() {
            for h in p.held.values_mut() {
                if matches!(h, Held::Waiting { .. }) {
                    *h = Held::Pending(t);
                }
            }
        }
        self.take_all()
    }

    /// The broker dropped this consumer's hold on `key` (share session reset, partition
    /// gone): forgets what it held there. Returns the offsets that were waiting or pending.
    pub fn forget(&mut self, key: &K) -> Vec<i64> {
        self.partitions
            .remove(key)
            .map(|p| {
                p.held
                    .into_iter()
                    .filter(|(_, h)| !matches!(h, Held::Sent(_)))
                    .map(|(o, _)| o)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn accept_waiting(&mut self) {
        for p in self.partitions.values_mut() {
            for h in p.held.values_mut() {
                if let Held::Waiting { .. } = h {
                    *h = Held::Pending(AcknowledgeType::Accept);
                }
            }
        }
    }
}

/// Sorted (offset, type) pairs as batches: one per run of consecutive offsets, with one type
/// when the run has one, else a type per offset.
pub(crate) fn batches(acks: &[(i64, AcknowledgeType)]) -> Vec<AckBatch> {
    let mut out: Vec<AckBatch> = Vec::new();
    for &(o, t) in acks {
        match out.last_mut() {
            Some(b) if b.last_offset.checked_add(1) == Some(o) => {
                b.last_offset = o;
                b.types.push(t);
            }
            _ => out.push(AckBatch {
                first_offset: o,
                last_offset: o,
                types: vec![t],
            }),
        }
    }
    for b in &mut out {
        if b.types.iter().all(|t| *t == b.types[0]) {
            b.types.truncate(1);
        }
    }
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
