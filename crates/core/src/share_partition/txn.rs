//! Transactional acknowledgements (KIP-1289): staging into TX_PENDING and resolving by
//! transaction markers.
//!
//! [`SharePartition::stage`] moves ACQUIRED records of one member to TX_PENDING, all or
//! nothing, cancelling their locks and remembering the staging (producer id and epoch, ack
//! type, member, time). [`SharePartition::apply_marker`] resolves what a producer staged when
//! its COMMIT or ABORT marker arrives: COMMIT → ACKNOWLEDGED (ACCEPT) or ARCHIVED (REJECT,
//! GAP); ABORT → AVAILABLE with the delivery count kept (ARCHIVED at the delivery limit). With
//! a dead-letter queue a REJECT's COMMIT and an ABORT at the limit give ARCHIVING instead
//! (`dead_letter.rs`), except a COMMIT of a REJECT whose transaction carried its dead letter
//! (`dead_lettered`, decision 0022 point 6): ARCHIVED at once.
//! Markers match on the producer id and resolve stagings whose epoch is at or below the
//! marker's (transaction version 2 bumps the epoch when it ends a transaction); an older-epoch
//! marker, or one for records no longer TX_PENDING, changes nothing.
//!
//! Nothing else moves a TX_PENDING record: not acknowledgements (INVALID_RECORD_STATE), not
//! lock expiry, not a member leaving or its session closing. The SPSO stops at it (it is not
//! terminal) and the record-lock window counts it.
//!
//! Persisted form: a TX_PENDING record is persisted as delivery state 5 with its staging
//! ([`crate::share_coordinator::StagedTxn`], a tagged field of the state batch) and the
//! delivery count *before* its acquisition, as ACQUIRED records are. Kafka's combiner keeps,
//! per offset, the batch with the higher (count, state); a resolution writes the full count, so
//! it always wins over the staging it resolves, and the staging (count - 1, 5) wins over the
//! AVAILABLE (count - 1, 0) it replaced. Loading a state-5 batch restores TX_PENDING with
//! count + 1; only the member and the staging time are lost.

use std::sync::Arc;

use super::runs::{Run, Staging};
use super::types::{
    AckBatch, AcknowledgeType, MarkerOutcome, RecordState, RecordStateReason, ShareError,
    StateWrite, TxnStats,
};
use super::{acknowledge::validate_acknowledge_batches, SharePartition};
use crate::faults::{self, Fault};

/// A staged copy of a share partition and the write that persists its staging.
pub type StagedCopy = (SharePartition, Option<StateWrite>);

/// One TxnShareAcknowledge's staging across share partitions (KIP-1289 §3.2 step 8), all or
/// nothing: each machine stages its batches on a copy, and the copies with the writes that
/// persist them are returned only if every one accepted. The broker (and the simulator, in the
/// same order) then persists every write as the producer's transactional batch, fsynced, and
/// only then puts the copies in place and answers; answering first would let a crash lose a
/// staging the client was told about. Each part says whether the transaction carries the
/// dead letters of its REJECTs ([`SharePartition::stage`]).
///
/// # Errors
/// The index of the first refused part and its error; nothing is staged then.
pub fn stage_all<'a>(
    parts: impl IntoIterator<Item = (&'a SharePartition, &'a [AckBatch], bool)>,
    now_ms: i64,
    member_id: &str,
    producer: (i64, i16),
) -> Result<Vec<StagedCopy>, (usize, ShareError)> {
    let mut staged = Vec::new();
    for (i, (sp, batches, dead_lettered)) in parts.into_iter().enumerate() {
        let mut copy = sp.clone();
        let write = copy
            .stage(now_ms, member_id, producer, batches, dead_lettered)
            .map_err(|e| (i, e))?;
        staged.push((copy, write));
    }
    Ok(staged)
}

impl SharePartition {
    /// Stages `member_id`'s acknowledgement `batches` in the transaction of
    /// (`producer_id`, `producer_epoch`): every offset of every batch must be ACQUIRED by the
    /// member with its lock not yet due, and every type ACCEPT, REJECT or GAP. The records
    /// become TX_PENDING and their locks are cancelled. Returns the write that persists the
    /// staging (`None` only for an empty batch list). Locks already due expire first (only when the call succeeds).
    ///
    /// `dead_lettered`: the transaction carries the dead-letter records of these REJECTs
    /// (written by the broker before the staging is persisted), so their COMMIT archives them
    /// at once instead of making them ARCHIVING; persisted with the staging.
    ///
    /// # Errors
    /// INVALID_REQUEST for malformed batches (first > last, not ascending, types length);
    /// INVALID_RECORD_STATE for RELEASE, RENEW or unknown types, and for an offset that is
    /// not in flight or not ACQUIRED by the member (TX_PENDING included). Nothing changes on
    /// these errors. [`ShareError::InvariantViolated`] or [`ShareError::Stopped`] (see
    /// [`SharePartition::violation`]).
    pub fn stage(
        &mut self,
        now_ms: i64,
        member_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        batches: &[AckBatch],
        dead_lettered: bool,
    ) -> Result<Option<StateWrite>, ShareError> {
        self.running()?;
        // Structure first (types are checked below, as spec §3.2 orders it).
        let structural: Vec<AckBatch> = batches
            .iter()
            .map(|b| AckBatch {
                ack_types: vec![AcknowledgeType::Accept.id(); b.ack_types.len()],
                ..b.clone()
            })
            .collect();
        validate_acknowledge_batches(&structural, false)?;
        for b in batches {
            for &id in &b.ack_types {
                if !AcknowledgeType::from_id(id).is_some_and(AcknowledgeType::is_transactional) {
                    return Err(ShareError::InvalidRecordState {
                        offset: b.first_offset,
                        reason: RecordStateReason::NotTransactional,
                    });
                }
            }
        }
        for b in batches {
            self.check_stage(member_id, b, now_ms)?;
        }
        let mut op = self.begin();
        self.expire_due(now_ms, &mut op);
        let member: Arc<str> = Arc::from(member_id);
        for b in batches {
            for (first, last, ack) in super::acknowledge::typed_ranges(b) {
                let staging = Staging {
                    producer_id,
                    producer_epoch,
                    ack,
                    member: Some(member.clone()),
                    staged_at_ms: Some(now_ms),
                    dead_lettered: dead_lettered && ack == AcknowledgeType::Reject,
                };
                self.update_range(first, last, &mut op, |r| {
                    (r.state == RecordState::Acquired)
                        .then(|| Run::staged(r.last, r.delivery_count, staging.clone()))
                });
            }
        }
        // Expiry may have archived records at the start.
        self.advance_start();
        // check_stage proved every offset ACQUIRED, so every offset was staged.
        let total: i64 = batches
            .iter()
            .map(|b| b.last_offset - b.first_offset + 1)
            .sum();
        let write = self.finish(op)?;
        self.txn_stats.staged = self.txn_stats.staged.saturating_add(total);
        Ok(write)
    }

    /// Every offset of `b` must be a tracked record ACQUIRED by `member_id`, lock not due.
    fn check_stage(&self, member_id: &str, b: &AckBatch, now_ms: i64) -> Result<(), ShareError> {
        let mut cursor = b.first_offset;
        if cursor < self.start {
            return Err(ShareError::InvalidRecordState {
                offset: cursor,
                reason: RecordStateReason::NotInFlight,
            });
        }
        for key in self.runs.keys_intersecting(b.first_offset, b.last_offset) {
            let Some(run) = self.runs.get(key) else {
                continue;
            };
            if key > cursor {
                break;
            }
            let reason = match run.state {
                RecordState::Acquired if !run.owned_by(member_id) => {
                    Some(RecordStateReason::NotOwner)
                }
                RecordState::Acquired if run.deadline_ms <= now_ms => {
                    Some(RecordStateReason::LockExpired)
                }
                RecordState::Acquired => None,
                RecordState::TxPending => Some(RecordStateReason::TxPending),
                RecordState::Available
                | RecordState::Acknowledged
                | RecordState::Archiving
                | RecordState::Archived => Some(RecordStateReason::NotAcquired),
            };
            if let Some(reason) = reason {
                return Err(ShareError::InvalidRecordState {
                    offset: key.max(cursor),
                    reason,
                });
            }
            cursor = run.last.saturating_add(1);
            if cursor > b.last_offset {
                return Ok(());
            }
        }
        Err(ShareError::InvalidRecordState {
            offset: cursor,
            reason: RecordStateReason::NotInFlight,
        })
    }

    /// Applies `producer_id`'s COMMIT (`commit`) or ABORT marker of epoch `producer_epoch`:
    /// resolves every TX_PENDING record it staged at that epoch or before. Idempotent: a
    /// duplicate marker, an older-epoch one or one for a producer with nothing staged changes
    /// nothing (no write, no wake-up).
    ///
    /// # Errors
    /// [`ShareError::InvariantViolated`] (a TX_PENDING record of another transaction was
    /// touched, say) or [`ShareError::Stopped`].
    pub fn apply_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<MarkerOutcome, ShareError> {
        self.running()?;
        let mut op = self.begin();
        op.marker = Some((producer_id, producer_epoch));
        let limit = self.config.delivery_count_limit;
        let dead = self.config.dead_letter_state();
        let mut resolved = 0i64;
        let mut staged_at_ms = Vec::new();
        let ignore_producer = faults::active(Fault::MarkerIgnoresProducer);
        let matches = |t: &Staging| {
            if ignore_producer {
                return true;
            }
            t.producer_id == producer_id
                && if faults::active(Fault::ExactEpochMarker) {
                    t.producer_epoch == producer_epoch
                } else {
                    t.producer_epoch <= producer_epoch
                }
        };
        let keys = if ignore_producer {
            self.runs.staged_keys()
        } else {
            self.runs.staged_by(producer_id)
        };
        for key in keys {
            let Some((first, last)) = self
                .runs
                .get(key)
                .filter(|r| r.txn.as_ref().is_some_and(matches))
                .map(|r| (key, r.last))
            else {
                continue;
            };
            self.update_range(first, last, &mut op, |r| {
                let t = r.txn.as_ref()?;
                if r.state != RecordState::TxPending || !matches(t) {
                    return None;
                }
                let count = r.delivery_count;
                let state = match (commit, t.ack) {
                    (true, AcknowledgeType::Accept) => RecordState::Acknowledged,
                    (true, AcknowledgeType::Gap) => RecordState::Archived,
                    // The transaction carried its dead letters: the marker made them visible.
                    (true, _)
                        if t.dead_lettered && !faults::active(Fault::CommitArchivesCarried) =>
                    {
                        RecordState::Archived
                    }
                    (true, _) => dead,
                    (false, _) if count >= limit => dead,
                    (false, _) => RecordState::Available,
                };
                let n = r.len(first);
                resolved += n;
                staged_at_ms.push((n, t.staged_at_ms));
                Some(Run::unowned(r.last, state, count))
            });
        }
        self.advance_start();
        let write = self.finish(op)?;
        if commit {
            self.txn_stats.committed = self.txn_stats.committed.saturating_add(resolved);
        } else {
            self.txn_stats.aborted = self.txn_stats.aborted.saturating_add(resolved);
        }
        Ok(MarkerOutcome {
            write,
            wake: resolved > 0,
            resolved,
            staged_at_ms,
        })
    }

    /// TX_PENDING records (the `txn-pending-records` gauge).
    pub fn tx_pending_count(&self) -> i64 {
        self.runs.counts().tx_pending
    }

    /// Staged / committed / aborted record counters.
    pub fn txn_stats(&self) -> TxnStats {
        self.txn_stats
    }
}
