//! Acknowledgements and releases: ShareFetch / ShareAcknowledge acknowledgement batches, a
//! closed session or departed member, lapsed acquisition locks and log start offset moves.

use super::runs::Run;
use super::types::{
    AckBatch, AcknowledgeType, InvalidRequestReason, RecordState, RecordStateReason, ShareError,
    StateWrite,
};
use super::SharePartition;

/// Kafka's `validateAcknowledgementBatches` (KafkaApis), the INVALID_REQUEST checks the broker
/// makes per partition before anything is acknowledged: `first <= last`; batches strictly
/// ascending and disjoint; at least one type; several types only one per offset; every type
/// known, and RENEW (4) only when `renew_allowed` (ShareFetch/ShareAcknowledge v2 with
/// `IsRenewAck`).
///
/// # Errors
/// [`ShareError::InvalidRequest`] naming the first violation.
pub fn validate_acknowledge_batches(
    batches: &[AckBatch],
    renew_allowed: bool,
) -> Result<(), ShareError> {
    let invalid = |reason| Err(ShareError::InvalidRequest(reason));
    let mut previous_last: Option<i64> = None;
    for b in batches {
        if b.first_offset > b.last_offset {
            return invalid(InvalidRequestReason::FirstAfterLast {
                first: b.first_offset,
                last: b.last_offset,
            });
        }
        if let Some(previous_last) = previous_last.filter(|p| b.first_offset <= *p) {
            return invalid(InvalidRequestReason::NotAscending {
                first: b.first_offset,
                previous_last,
            });
        }
        previous_last = Some(b.last_offset);
        let records = i128::from(b.last_offset) - i128::from(b.first_offset) + 1;
        match b.ack_types.len() {
            0 => return invalid(InvalidRequestReason::EmptyAckTypes),
            1 => {}
            len if i128::try_from(len).ok() != Some(records) => {
                return invalid(InvalidRequestReason::AckTypesLength {
                    len,
                    records: i64::try_from(records).unwrap_or(i64::MAX),
                });
            }
            _ => {}
        }
        for &id in &b.ack_types {
            match AcknowledgeType::from_id(id) {
                None => return invalid(InvalidRequestReason::UnknownAckType(id)),
                Some(AcknowledgeType::Renew) if !renew_allowed => {
                    return invalid(InvalidRequestReason::RenewNotAllowed)
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// The acknowledge type of each offset range of a batch: `(first, last, type)` with runs of
/// equal per-offset types joined. Types must have been validated.
pub(super) fn typed_ranges(b: &AckBatch) -> Vec<(i64, i64, AcknowledgeType)> {
    let mut out: Vec<(i64, i64, AcknowledgeType)> = Vec::new();
    if let [single] = b.ack_types.as_slice() {
        if let Some(t) = AcknowledgeType::from_id(*single) {
            out.push((b.first_offset, b.last_offset, t));
        }
        return out;
    }
    for (offset, &id) in (b.first_offset..=b.last_offset).zip(&b.ack_types) {
        let Some(t) = AcknowledgeType::from_id(id) else {
            continue;
        };
        match out.last_mut() {
            Some(prev) if prev.2 == t && prev.1 + 1 == offset => prev.1 = offset,
            _ => out.push((offset, offset, t)),
        }
    }
    out
}

impl SharePartition {
    /// Applies `member_id`'s acknowledgement batches, all or nothing. Offsets below the SPSO
    /// are skipped (they were archived with the log start offset); offsets without data
    /// inside the window are skipped; every other offset must be ACQUIRED by the member with
    /// its lock not yet expired. GAP and REJECT archive, ACCEPT acknowledges, RELEASE makes a
    /// record AVAILABLE again (ARCHIVED at the delivery limit), RENEW extends the lock to
    /// `now_ms + record lock duration` and persists nothing. Locks already due expire too.
    ///
    /// # Errors
    /// INVALID_REQUEST for malformed batches (see [`validate_acknowledge_batches`], with
    /// RENEW allowed: the broker checks `IsRenewAck`) or a batch ending past the last
    /// acquired offset; INVALID_RECORD_STATE when no in-flight record is in a batch or a
    /// record is not acquired by the member. Nothing changes on these errors.
    /// [`ShareError::InvariantViolated`] or [`ShareError::Stopped`] (see
    /// [`SharePartition::violation`]).
    pub fn acknowledge(
        &mut self,
        member_id: &str,
        batches: &[AckBatch],
        now_ms: i64,
    ) -> Result<Option<StateWrite>, ShareError> {
        self.running()?;
        validate_acknowledge_batches(batches, true)?;
        for b in batches {
            self.check_acknowledge(member_id, b, now_ms)?;
        }
        let mut op = self.begin();
        self.expire_due(now_ms, &mut op);
        let limit = self.config.delivery_count_limit;
        let dead = self.config.dead_letter_state();
        let renewed = self.lock_deadline(now_ms);
        for b in batches {
            for (first, last, ack) in typed_ranges(b) {
                let first = first.max(self.start);
                self.update_range(first, last, &mut op, |r| {
                    if r.state != RecordState::Acquired {
                        return None;
                    }
                    let count = r.delivery_count;
                    Some(match ack {
                        AcknowledgeType::Renew => Run {
                            deadline_ms: renewed,
                            ..r.clone()
                        },
                        AcknowledgeType::Accept => {
                            Run::unowned(r.last, RecordState::Acknowledged, count)
                        }
                        AcknowledgeType::Gap => Run::unowned(r.last, RecordState::Archived, count),
                        AcknowledgeType::Reject => Run::unowned(r.last, dead, count),
                        AcknowledgeType::Release if count >= limit => {
                            Run::unowned(r.last, dead, count)
                        }
                        AcknowledgeType::Release => {
                            Run::unowned(r.last, RecordState::Available, count)
                        }
                    })
                });
            }
        }
        self.advance_start();
        self.finish(op)
    }

    /// The state checks of one (structurally valid) batch, without changing anything.
    fn check_acknowledge(
        &self,
        member_id: &str,
        b: &AckBatch,
        now_ms: i64,
    ) -> Result<(), ShareError> {
        if b.last_offset < self.start {
            return Ok(());
        }
        let not_found = ShareError::InvalidRecordState {
            offset: b.first_offset,
            reason: RecordStateReason::NotFound,
        };
        let Some((_, last_run)) = self.runs.last() else {
            return Err(not_found);
        };
        if b.last_offset > last_run.last {
            return Err(ShareError::InvalidRequest(
                InvalidRequestReason::PastAcquiredRecords {
                    last: b.last_offset,
                    end: last_run.last,
                },
            ));
        }
        let lo = b.first_offset.max(self.start);
        let keys = self.runs.keys_intersecting(lo, b.last_offset);
        if keys.is_empty() {
            return Err(not_found);
        }
        for key in keys {
            let Some(run) = self.runs.get(key) else {
                continue;
            };
            can_acknowledge(run, member_id, now_ms).map_err(|reason| {
                ShareError::InvalidRecordState {
                    offset: key.max(lo),
                    reason,
                }
            })?;
        }
        Ok(())
    }

    /// The member's session closed or the member left: its ACQUIRED records become AVAILABLE
    /// (ARCHIVED at the delivery limit) with their delivery count kept, as an expired lock
    /// would. Kafka's `releaseAcquiredRecords` code decreases the count, but Apache Kafka 4.4
    /// observed with librdkafka 2.16 delivers records a consumer closed on without
    /// acknowledging again with delivery count 2 (tests/interop/test_share.py): Shoal does
    /// what the broker does, not what its source seems to say. Locks already due expire too.
    ///
    /// # Errors
    /// [`ShareError::InvariantViolated`] or [`ShareError::Stopped`].
    pub fn release_member(
        &mut self,
        member_id: &str,
        now_ms: i64,
    ) -> Result<Option<StateWrite>, ShareError> {
        self.running()?;
        let mut op = self.begin();
        self.expire_due(now_ms, &mut op);
        let held: Vec<(i64, i64)> = self
            .runs
            .iter()
            .filter(|(_, r)| r.state == RecordState::Acquired && r.owned_by(member_id))
            .map(|(first, r)| (first, r.last))
            .collect();
        let limit = self.config.delivery_count_limit;
        let dead = self.config.dead_letter_state();
        for (first, last) in held {
            self.update_range(first, last, &mut op, |r| {
                (r.state == RecordState::Acquired && r.owned_by(member_id)).then(|| {
                    let state = if r.delivery_count >= limit {
                        dead
                    } else {
                        RecordState::Available
                    };
                    Run::unowned(r.last, state, r.delivery_count)
                })
            });
        }
        self.advance_start();
        self.finish(op)
    }

    /// Releases every lock whose deadline is at or before `now_ms`: AVAILABLE again, or
    /// ARCHIVED at the delivery limit (Kafka's acquisition lock timeout).
    ///
    /// # Errors
    /// [`ShareError::InvariantViolated`] or [`ShareError::Stopped`].
    pub fn expire_locks(&mut self, now_ms: i64) -> Result<Option<StateWrite>, ShareError> {
        self.running()?;
        let mut op = self.begin();
        self.expire_due(now_ms, &mut op);
        self.advance_start();
        self.finish(op)
    }

    /// The log start offset moved (retention, DeleteRecords): records below it are gone, so
    /// the SPSO moves to it and tracking below it ends, ACQUIRED records included (their
    /// acknowledgements are then skipped). Returns the write with the new SPSO.
    ///
    /// # Errors
    /// [`ShareError::InvariantViolated`] or [`ShareError::Stopped`].
    pub fn update_log_start_offset(
        &mut self,
        log_start_offset: i64,
    ) -> Result<Option<StateWrite>, ShareError> {
        self.running()?;
        if log_start_offset <= self.start {
            return Ok(None);
        }
        let op = self.begin();
        self.runs.split_at(log_start_offset);
        while let Some((first, _)) = self.runs.first().filter(|(k, _)| *k < log_start_offset) {
            self.runs.remove(first);
        }
        self.start = log_start_offset;
        self.next_new = self.next_new.max(log_start_offset);
        self.advance_start();
        self.finish(op)
    }
}

/// Whether `member_id` may acknowledge (or renew) the records of `run`: they must be ACQUIRED
/// by it with the lock not yet due. Every acknowledge type's target state is a valid
/// transition from ACQUIRED ([`RecordState::validate_transition`]).
fn can_acknowledge(run: &Run, member_id: &str, now_ms: i64) -> Result<(), RecordStateReason> {
    match run.state {
        RecordState::Acquired => {}
        RecordState::Available
        | RecordState::Acknowledged
        | RecordState::Archiving
        | RecordState::Archived => return Err(RecordStateReason::NotAcquired),
        RecordState::TxPending => return Err(RecordStateReason::TxPending),
    }
    if !run.owned_by(member_id) {
        return Err(RecordStateReason::NotOwner);
    }
    if run.deadline_ms <= now_ms {
        return Err(RecordStateReason::LockExpired);
    }
    Ok(())
}
