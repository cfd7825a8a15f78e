//! ARCHIVING (KIP-1191): records on their way to the group's dead-letter queue.
//!
//! When the group has a dead-letter topic (`SharePartitionConfig::dead_letter`), a record
//! archived by a REJECT (acknowledged, or committed by a transaction) or by the delivery limit
//! (a release, a lapsed lock, a closed session or an aborted transaction at the limit) goes
//! to ARCHIVING instead of ARCHIVED. ARCHIVING is persisted like any state (id 3), holds no
//! lock and no owner, is never acquired or acknowledged, and the SPSO stops at it.
//!
//! The broker, once the write that made records ARCHIVING is durable, writes one dead-letter
//! record per offset ([`SharePartition::archiving`]) and then calls
//! [`SharePartition::complete_archiving`], whose write moves them to ARCHIVED. A crash between
//! the two leaves them ARCHIVING in the persisted state, so the broker finds them again on
//! load and finishes the job; it must recognise dead-letter records it already wrote (see
//! `docs/decisions/0022-share-dead-letter-queues.md`). That is the whole exactly-once
//! argument on this side: ARCHIVED is never persisted before the dead-letter record is.
//!
//! Why a record is ARCHIVING is not persisted (Kafka's `DeliveryState` has no field for it):
//! [`DeadLetterCause::of`] infers it from the delivery count, the same before and after a
//! restart, so the record written after a crash is the one that would have been written.

use super::{AckBatch, AcknowledgeType, RecordState, Run, ShareError, SharePartition, StateWrite};

/// Why a record goes to the dead-letter queue (the `__dlq.errors.message` header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadLetterCause {
    /// Rejected by a consumer (REJECT), before its last delivery.
    ClientReject,
    /// Delivered `share.delivery.count.limit` times.
    DeliveryCountExceeded,
}

impl DeadLetterCause {
    /// The cause of an ARCHIVING record delivered `delivery_count` times under `limit`: a
    /// record at the limit counts as past it, even when its last delivery was rejected.
    pub fn of(delivery_count: i16, limit: i16) -> DeadLetterCause {
        if delivery_count >= limit {
            DeadLetterCause::DeliveryCountExceeded
        } else {
            DeadLetterCause::ClientReject
        }
    }

    /// Kafka's wording of the cause.
    pub const fn message(self) -> &'static str {
        match self {
            DeadLetterCause::ClientReject => "Offset rejected by client.",
            DeadLetterCause::DeliveryCountExceeded => {
                "Offset delivery count exceeded the threshold."
            }
        }
    }
}

/// A run of ARCHIVING records, as [`SharePartition::archiving`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLetterRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
    pub cause: DeadLetterCause,
}

impl SharePartition {
    /// Every ARCHIVING run, in offset order.
    pub fn archiving(&self) -> Vec<DeadLetterRange> {
        let limit = self.config.delivery_count_limit;
        self.runs
            .iter()
            .filter(|(_, r)| r.state == RecordState::Archiving)
            .map(|(first, r)| DeadLetterRange {
                first_offset: first,
                last_offset: r.last,
                delivery_count: r.delivery_count,
                cause: DeadLetterCause::of(r.delivery_count, limit),
            })
            .collect()
    }

    /// The dead letters the REJECTs of `batches` would have, by their records' current
    /// delivery counts: for a transaction that carries them (issue 31), called on the copy
    /// [`SharePartition::stage`] staged them on, so each count is the one their COMMIT would
    /// archive them with. Offsets not tracked are left out.
    pub fn dead_letters_of(&self, batches: &[AckBatch]) -> Vec<DeadLetterRange> {
        let limit = self.config.delivery_count_limit;
        let mut out = Vec::new();
        for b in batches {
            for (first, last, ack) in super::acknowledge::typed_ranges(b) {
                if ack != AcknowledgeType::Reject {
                    continue;
                }
                for key in self.runs.keys_intersecting(first, last) {
                    let Some(run) = self.runs.get(key) else {
                        continue;
                    };
                    out.push(DeadLetterRange {
                        first_offset: key.max(first),
                        last_offset: run.last.min(last),
                        delivery_count: run.delivery_count,
                        cause: DeadLetterCause::of(run.delivery_count, limit),
                    });
                }
            }
        }
        out
    }

    /// Records ARCHIVING.
    pub fn archiving_count(&self) -> i64 {
        self.runs.counts().archiving
    }

    /// The dead-letter records of the ARCHIVING records in `[first, last]` are written: they
    /// become ARCHIVED (other records in the range are left as they are). Returns the write
    /// to persist.
    ///
    /// # Errors
    /// [`ShareError::InvariantViolated`] or [`ShareError::Stopped`].
    pub fn complete_archiving(
        &mut self,
        first: i64,
        last: i64,
    ) -> Result<Option<StateWrite>, ShareError> {
        self.running()?;
        let mut op = self.begin();
        let first = first.max(self.start);
        self.update_range(first, last, &mut op, |r| {
            (r.state == RecordState::Archiving)
                .then(|| Run::unowned(r.last, RecordState::Archived, r.delivery_count))
        });
        self.advance_start();
        self.finish(op)
    }
}
