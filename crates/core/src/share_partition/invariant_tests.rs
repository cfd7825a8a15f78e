//! The invariants checked in every build (module docs, "Invariants"): a change that breaks one
//! is not applied, the call that made it fails with [`ShareError::InvariantViolated`] and no
//! write, and every later call with [`ShareError::Stopped`].
//!
//! No public call can break an invariant (that is what the property tests check), so these
//! tests make the buggy change through the crate-internal paths every call goes through
//! (`update_range` with `begin`/`finish`, `Runs::insert`, `Runs::track`). Nothing here is compiled out of
//! release builds: `cargo test --release` runs the same checks.

use super::*;

const LOCK: i64 = 1_000;
const ACCEPT: i8 = 1;
const PID: i64 = 7;
const EPOCH: i16 = 1;

fn sp() -> SharePartition {
    let config = SharePartitionConfig {
        record_lock_duration_ms: LOCK,
        delivery_count_limit: 5,
        record_locks_max: 100,
        dead_letter: false,
    };
    SharePartition::new(config, 0, 0).expect("valid")
}

fn data(base: i64, last: i64) -> FetchedBatch {
    FetchedBatch {
        base_offset: base,
        last_offset: last,
        is_control: false,
        producer_id: -1,
        is_transactional: false,
    }
}

fn acquire(sp: &mut SharePartition, member: &str, first: i64, last: i64) -> Result<(), ShareError> {
    let fetched = [data(first, last)];
    sp.acquire(&AcquireRequest {
        member_id: member,
        fetch_offset: first,
        fetched: &fetched,
        max_records: 500,
        batch_size: 500,
        mode: AcquireMode::BatchOptimized,
        isolation: Isolation::ReadUncommitted,
        now_ms: 0,
    })
    .map(|_| ())
}

/// 0..=9 acquired by m1; 5..=9 then ACKNOWLEDGED (tracked: not at the start).
fn half_acknowledged() -> SharePartition {
    let mut sp = sp();
    acquire(&mut sp, "m1", 0, 9).expect("acquired");
    sp.acknowledge("m1", &[AckBatch::new(5, 9, vec![ACCEPT])], 1)
        .expect("acknowledged");
    sp
}

/// 0..=9 acquired by m1; 0..=4 staged by (PID, EPOCH).
fn staged() -> SharePartition {
    let mut sp = sp();
    acquire(&mut sp, "m1", 0, 9).expect("acquired");
    sp.stage(
        1,
        "m1",
        (PID, EPOCH),
        &[AckBatch::new(0, 4, vec![ACCEPT])],
        false,
    )
    .expect("staged");
    sp
}

/// Applies `change` to `[first, last]` as a call does, with `marker` as the call's marker.
fn buggy_call(
    sp: &mut SharePartition,
    first: i64,
    last: i64,
    marker: Option<(i64, i16)>,
    change: impl FnMut(&Run) -> Option<Run>,
) -> Result<Option<StateWrite>, ShareError> {
    let mut op = sp.begin();
    op.marker = marker;
    sp.update_range(first, last, &mut op, change);
    sp.finish(op)
}

fn ranges(sp: &SharePartition) -> Vec<RecordRange> {
    sp.ranges().collect()
}

/// Every state-changing call fails with `Stopped(violation)` and changes nothing.
fn assert_stopped(sp: &mut SharePartition, violation: &Violation) {
    let before = ranges(sp);
    let stopped = ShareError::Stopped(violation.clone());
    let ack = || vec![AckBatch::new(0, 0, vec![ACCEPT])];
    assert_eq!(sp.violation(), Some(violation));
    assert_eq!(acquire(sp, "m2", 10, 19), Err(stopped.clone()));
    assert_eq!(sp.acknowledge("m1", &ack(), 2), Err(stopped.clone()));
    assert_eq!(
        sp.stage(2, "m1", (PID, EPOCH), &ack(), false),
        Err(stopped.clone())
    );
    assert_eq!(sp.release_member("m1", 2), Err(stopped.clone()));
    assert_eq!(sp.expire_locks(10 * LOCK), Err(stopped.clone()));
    assert_eq!(sp.update_log_start_offset(3), Err(stopped.clone()));
    assert_eq!(sp.apply_marker(PID, EPOCH, true), Err(stopped.clone()));
    let batches = ack();
    let copies = stage_all([(&*sp, &batches[..], false)], 2, "m1", (PID, EPOCH));
    assert_eq!(copies.map(|_| ()), Err((0, stopped.clone())));
    assert_eq!(stopped.error_code(), error_codes::UNKNOWN_SERVER_ERROR);
    assert_eq!(ranges(sp), before);
}

#[test]
fn an_invalid_transition_is_not_applied_and_stops_the_partition() {
    let mut sp = half_acknowledged();
    let before = ranges(&sp);
    // ACKNOWLEDGED is terminal: back to AVAILABLE would deliver accepted records again.
    let result = buggy_call(&mut sp, 5, 9, None, |r| {
        Some(Run::unowned(
            r.last,
            RecordState::Available,
            r.delivery_count,
        ))
    });
    let violation = Violation::Transition {
        first: 5,
        last: 9,
        from: RecordState::Acknowledged,
        to: RecordState::Available,
    };
    assert_eq!(
        result,
        Err(ShareError::InvariantViolated(violation.clone()))
    );
    assert_eq!(
        result.unwrap_err().error_code(),
        error_codes::UNKNOWN_SERVER_ERROR
    );
    assert_eq!(violation.invariant(), "valid-transition");
    assert_eq!(ranges(&sp), before, "the bad change was not applied");
    assert_stopped(&mut sp, &violation);
}

#[test]
fn tx_pending_records_change_only_by_their_own_transaction() {
    let resolve = |r: &Run| {
        Some(Run::unowned(
            r.last,
            RecordState::Available,
            r.delivery_count,
        ))
    };
    // TX_PENDING -> AVAILABLE is a valid transition (an ABORT): only who makes it is wrong.
    for (marker, what) in [
        (None, "no marker (the lock-expiry bug)"),
        (Some((PID + 1, EPOCH)), "another producer's marker"),
        (Some((PID, EPOCH - 1)), "an older epoch's marker"),
    ] {
        let mut sp = staged();
        let before = ranges(&sp);
        let violation = Violation::ForeignTxPending {
            first: 0,
            last: 4,
            producer_id: PID,
            producer_epoch: EPOCH,
        };
        assert_eq!(
            buggy_call(&mut sp, 0, 4, marker, resolve),
            Err(ShareError::InvariantViolated(violation.clone())),
            "{what}"
        );
        assert_eq!(ranges(&sp), before, "{what}");
        assert_stopped(&mut sp, &violation);
    }
    // Its own marker, at the staging's epoch or later, may.
    for epoch in [EPOCH, EPOCH + 1] {
        let mut sp = staged();
        let write = buggy_call(&mut sp, 0, 4, Some((PID, epoch)), resolve);
        assert!(write.expect("allowed").is_some());
        assert_eq!(sp.violation(), None);
        sp.check_invariants();
    }
}

#[test]
fn acquired_records_never_change_holder_without_a_release() {
    let mut sp = sp();
    acquire(&mut sp, "m1", 0, 9).expect("acquired");
    let before = ranges(&sp);
    let result = buggy_call(&mut sp, 0, 9, None, |r| {
        Some(Run::acquired(
            r.last,
            r.delivery_count,
            Arc::from("m2"),
            r.deadline_ms,
        ))
    });
    let violation = Violation::HolderChanged { first: 0, last: 9 };
    assert_eq!(
        result,
        Err(ShareError::InvariantViolated(violation.clone()))
    );
    assert_eq!(violation.invariant(), "one-holder-per-record");
    assert_eq!(ranges(&sp), before);
    assert_stopped(&mut sp, &violation);
    // A renewal keeps the holder: allowed.
    let mut sp = self::sp();
    acquire(&mut sp, "m1", 0, 9).expect("acquired");
    let renewed = buggy_call(&mut sp, 0, 9, None, |r| {
        Some(Run {
            deadline_ms: r.deadline_ms + 1,
            ..r.clone()
        })
    });
    assert_eq!(renewed, Ok(None));
}

#[test]
fn malformed_runs_are_not_stored_and_stop_the_partition() {
    let owner = || Some(Arc::<str>::from("m2"));
    let staging = || {
        Some(Staging {
            producer_id: PID,
            producer_epoch: EPOCH,
            ack: AcknowledgeType::Accept,
            member: None,
            staged_at_ms: None,
            dead_lettered: false,
        })
    };
    let run = |last, state, owner, txn| Run {
        last,
        state,
        delivery_count: 1,
        owner,
        deadline_ms: LOCK,
        txn,
    };
    let attributes = |state, owner, staging| Violation::Attributes {
        first: 20,
        last: 29,
        state,
        owner,
        staging,
    };
    // (stored as new records (`track`) or as a change (`insert`), at, run, what is broken)
    let cases = [
        (
            false,
            20,
            run(29, RecordState::Acquired, None, None),
            attributes(RecordState::Acquired, false, false),
        ),
        (
            false,
            20,
            run(29, RecordState::Available, owner(), None),
            attributes(RecordState::Available, true, false),
        ),
        (
            false,
            20,
            run(29, RecordState::TxPending, None, None),
            attributes(RecordState::TxPending, false, false),
        ),
        (
            false,
            20,
            run(29, RecordState::Acquired, owner(), staging()),
            attributes(RecordState::Acquired, true, true),
        ),
        (
            false,
            20,
            run(19, RecordState::Available, None, None),
            Violation::EmptyRange {
                first: 20,
                last: 19,
            },
        ),
        // A second holder for records m1 holds: overlapping, or the same first offset.
        (
            true,
            5,
            run(12, RecordState::Acquired, owner(), None),
            Violation::Overlap {
                first: 5,
                last: 12,
                other: 0,
            },
        ),
        (
            false,
            0,
            run(3, RecordState::Acquired, owner(), None),
            Violation::Overlap {
                first: 0,
                last: 3,
                other: 0,
            },
        ),
    ];
    for (new_records, first, bad, violation) in cases {
        let mut sp = sp();
        acquire(&mut sp, "m1", 0, 9).expect("acquired");
        let before = ranges(&sp);
        let counts = sp.counts();
        if new_records {
            sp.runs.track(first, bad);
        } else {
            sp.runs.insert(first, bad);
        }
        assert_eq!(sp.violation(), Some(&violation));
        assert_eq!(ranges(&sp), before, "{violation}");
        assert_eq!(sp.counts(), counts, "{violation}");
        assert_stopped(&mut sp, &violation);
    }
}

#[test]
fn a_violation_found_on_a_staged_copy_stops_the_original() {
    let mut sp = staged();
    // stage_all works on copies: the broker stops the original with what the copy found.
    let violation = Violation::HolderChanged { first: 5, last: 9 };
    sp.stop(violation.clone());
    sp.stop(Violation::EmptyRange { first: 1, last: 0 });
    assert_stopped(&mut sp, &violation);
}
