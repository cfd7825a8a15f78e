//! One test per rule of the share-partition state machine (protocol-notes §4), error cases
//! included.

use super::*;
use crate::share_coordinator::{ReadState, StateBatch};

const LOCK: i64 = 1_000;
const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const REJECT: i8 = 3;
const GAP: i8 = 0;
const RENEW: i8 = 4;

fn config() -> SharePartitionConfig {
    SharePartitionConfig {
        record_lock_duration_ms: LOCK,
        delivery_count_limit: 5,
        record_locks_max: 100,
        dead_letter: false,
    }
}

fn sp() -> SharePartition {
    SharePartition::new(config(), 0, 0).expect("valid")
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

fn txn(base: i64, last: i64, producer_id: i64) -> FetchedBatch {
    FetchedBatch {
        is_transactional: true,
        producer_id,
        ..data(base, last)
    }
}

fn marker(offset: i64, producer_id: i64) -> FetchedBatch {
    FetchedBatch {
        is_control: true,
        is_transactional: true,
        producer_id,
        ..data(offset, offset)
    }
}

/// Batches of `size` records covering `[first, last]`.
fn batches(first: i64, last: i64, size: i64) -> Vec<FetchedBatch> {
    let mut out = Vec::new();
    let mut base = first;
    while base <= last {
        out.push(data(base, (base + size - 1).min(last)));
        base += size;
    }
    out
}

fn request<'a>(
    member: &'a str,
    fetched: &'a [FetchedBatch],
    max: i32,
    now: i64,
) -> AcquireRequest<'a> {
    AcquireRequest {
        member_id: member,
        fetch_offset: fetched.first().map_or(0, |b| b.base_offset),
        fetched,
        max_records: max,
        batch_size: 500,
        mode: AcquireMode::BatchOptimized,
        isolation: Isolation::ReadUncommitted,
        now_ms: now,
    }
}

fn acquire(
    sp: &mut SharePartition,
    member: &str,
    fetched: &[FetchedBatch],
    max: i32,
    now: i64,
) -> Vec<(i64, i64, i16)> {
    let mut req = request(member, fetched, max, now);
    req.fetch_offset = sp.next_fetch_offset();
    let acq = sp.acquire(&req).expect("acquire");
    acq.records
        .iter()
        .map(|r| (r.first_offset, r.last_offset, r.delivery_count))
        .collect()
}

fn ack(
    sp: &mut SharePartition,
    member: &str,
    first: i64,
    last: i64,
    types: Vec<i8>,
    now: i64,
) -> Result<Option<StateWrite>, ShareError> {
    sp.acknowledge(member, &[AckBatch::new(first, last, types)], now)
}

fn state_of(sp: &SharePartition, offset: i64) -> Option<(RecordState, i16, Option<String>)> {
    sp.ranges()
        .find(|r| r.first_offset <= offset && offset <= r.last_offset)
        .map(|r| (r.state, r.delivery_count, r.member_id))
}

fn pb(first: i64, last: i64, state: RecordState, delivery_count: i16) -> PersistedBatch {
    PersistedBatch {
        first_offset: first,
        last_offset: last,
        state,
        delivery_count,
        staged_txn: None,
    }
}

fn loaded(start: i64, batches: &[(i64, i64, i8, i16)]) -> SharePartition {
    let state = ReadState {
        state_epoch: 3,
        start_offset: start,
        state_batches: batches
            .iter()
            .map(|&(f, l, s, c)| StateBatch::new(f, l, s, c))
            .collect(),
    };
    SharePartition::from_persisted(config(), &state)
        .expect("load")
        .0
}

#[test]
fn record_state_ids_and_transitions_match_kafka() {
    let ids: Vec<i8> = RecordState::ALL.iter().map(|s| s.id()).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(RecordState::from_id(3), Some(RecordState::Archiving));
    assert_eq!(RecordState::from_id(5), Some(RecordState::TxPending));
    use RecordState::*;
    for from in RecordState::ALL {
        for to in RecordState::ALL {
            let expected = matches!(
                (from, to),
                (Available, Acquired | Archiving | Archived)
                    | (
                        Acquired,
                        Available | Acknowledged | Archiving | Archived | TxPending
                    )
                    | (TxPending, Available | Acknowledged | Archiving | Archived)
                    | (Archiving, Archived)
            );
            assert_eq!(
                from.validate_transition(to).is_ok(),
                expected,
                "{from:?} -> {to:?}"
            );
        }
    }
    assert!(Acknowledged.is_terminal() && Archived.is_terminal());
    assert!(!Available.is_terminal() && !Acquired.is_terminal() && !TxPending.is_terminal());
    assert!(!Archiving.is_terminal());
}

#[test]
fn config_is_validated_and_throttle_limit_is_half_the_delivery_limit() {
    let bad = [
        SharePartitionConfig {
            record_lock_duration_ms: 0,
            ..config()
        },
        SharePartitionConfig {
            delivery_count_limit: 1,
            ..config()
        },
        SharePartitionConfig {
            delivery_count_limit: 11,
            ..config()
        },
        SharePartitionConfig {
            record_locks_max: 0,
            ..config()
        },
    ];
    for c in bad {
        assert!(matches!(
            SharePartition::new(c, 0, 0),
            Err(ShareError::InvalidConfig(_))
        ));
    }
    assert!(SharePartition::new(config(), -1, 0).is_err());
    let mut sp = sp();
    assert!(sp
        .set_config(SharePartitionConfig {
            delivery_count_limit: 1,
            ..config()
        })
        .is_err());
    assert_eq!(sp.config(), &config());
    sp.set_config(SharePartitionConfig {
        record_lock_duration_ms: 5,
        ..config()
    })
    .expect("valid");
    acquire(&mut sp, "m1", &[data(0, 0)], 1, 10);
    assert_eq!(sp.next_lock_deadline(), Some(15));
    let throttle = |limit| {
        SharePartitionConfig {
            delivery_count_limit: limit,
            ..config()
        }
        .throttle_delivery_count()
    };
    assert_eq!(
        (
            throttle(2),
            throttle(3),
            throttle(5),
            throttle(6),
            throttle(10)
        ),
        (2, 2, 3, 3, 5)
    );
}

#[test]
fn new_records_are_acquired_as_whole_log_batches() {
    let mut sp = sp();
    let log = batches(0, 14, 5);
    // MaxRecords 7 ends inside the second batch: the whole batch is acquired.
    assert_eq!(acquire(&mut sp, "m1", &log, 7, 0), vec![(0, 9, 1)]);
    assert_eq!(sp.next_fetch_offset(), 10);
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.in_flight_count()),
        (0, 9, 10)
    );
    assert_eq!(sp.counts().acquired, 10);
    assert_eq!(sp.next_lock_deadline(), Some(LOCK));
    assert_eq!(
        sp.acquired_by("m1"),
        vec![AcquiredRecords {
            first_offset: 0,
            last_offset: 9,
            delivery_count: 1
        }]
    );
    assert_eq!(sp.in_flight_batch_count(), 1, "one run for both batches");
    // Another member continues after them.
    assert_eq!(acquire(&mut sp, "m2", &log[2..], 7, 0), vec![(10, 14, 1)]);
}

#[test]
fn acquisition_alone_persists_nothing() {
    let mut sp = sp();
    let log = batches(0, 9, 5);
    let mut req = request("m1", &log, 100, 0);
    req.fetch_offset = 0;
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(acq.write, None);
    assert_eq!(sp.persisted_view().batches, vec![]);
}

#[test]
fn batch_optimized_splits_ranges_at_batch_boundaries_once_batch_size_is_reached() {
    let mut sp = sp();
    let log = batches(0, 11, 3);
    let mut req = request("m1", &log, 100, 0);
    req.batch_size = 5;
    let got: Vec<_> = sp
        .acquire(&req)
        .expect("acquire")
        .records
        .iter()
        .map(|r| (r.first_offset, r.last_offset))
        .collect();
    assert_eq!(got, vec![(0, 5), (6, 11)]);
    // Smaller than a batch: one range per batch.
    let mut sp2 = SharePartition::new(config(), 0, 0).expect("valid");
    req.batch_size = 1;
    let got: Vec<_> = sp2
        .acquire(&req)
        .expect("acquire")
        .records
        .iter()
        .map(|r| (r.first_offset, r.last_offset))
        .collect();
    assert_eq!(got, vec![(0, 2), (3, 5), (6, 8), (9, 11)]);
}

#[test]
fn record_limit_returns_at_most_max_records_and_keeps_the_tail_available() {
    let mut sp = sp();
    let log = [data(0, 9)];
    let mut req = request("m1", &log, 4, 0);
    req.mode = AcquireMode::RecordLimit;
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(
        acq.records,
        vec![AcquiredRecords {
            first_offset: 0,
            last_offset: 3,
            delivery_count: 1
        }]
    );
    assert_eq!(acq.write, None, "never-delivered tail is not persisted");
    assert_eq!(state_of(&sp, 4), Some((RecordState::Available, 0, None)));
    assert_eq!(
        (
            sp.next_fetch_offset(),
            sp.end_offset(),
            sp.in_flight_count()
        ),
        (4, 9, 10)
    );
    // The next read starts inside the batch; the tail is delivered as a first delivery.
    req.member_id = "m2";
    req.fetch_offset = sp.next_fetch_offset();
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(
        acq.records,
        vec![AcquiredRecords {
            first_offset: 4,
            last_offset: 7,
            delivery_count: 1
        }]
    );
}

#[test]
fn accepting_moves_the_start_offset_and_the_write_carries_it() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &batches(0, 9, 5), 100, 0);
    let write = ack(&mut sp, "m1", 0, 9, vec![ACCEPT], 10)
        .expect("ack")
        .expect("write");
    assert_eq!(
        write,
        StateWrite {
            start_offset: 10,
            state_epoch: 0,
            delivery_complete_count: 0,
            batches: vec![]
        }
    );
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.in_flight_count()),
        (10, 10, 0)
    );
    assert_eq!(sp.next_fetch_offset(), 10);
    assert_eq!(sp.ranges().count(), 0, "terminal records leave the cache");
}

#[test]
fn partial_and_per_offset_acknowledgements_split_the_batch() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 9)], 100, 0);
    let write = ack(&mut sp, "m1", 2, 4, vec![ACCEPT], 10)
        .expect("ack")
        .expect("write");
    assert_eq!(write.batches, vec![pb(2, 4, RecordState::Acknowledged, 1)]);
    assert_eq!(write.start_offset, 0, "0 and 1 are still acquired");
    assert_eq!(write.delivery_complete_count, 3);
    // Per offset: 0 accept, 1 accept, then 5..=9 release, reject, gap, renew, accept.
    let batches = [
        AckBatch::new(0, 1, vec![ACCEPT, ACCEPT]),
        AckBatch::new(5, 9, vec![RELEASE, REJECT, GAP, RENEW, ACCEPT]),
    ];
    let write = sp
        .acknowledge("m1", &batches, 20)
        .expect("ack")
        .expect("write");
    assert_eq!(sp.start_offset(), 5);
    assert_eq!(write.start_offset, 5);
    assert_eq!(
        write.batches,
        vec![
            pb(5, 5, RecordState::Available, 1),
            pb(6, 7, RecordState::Archived, 1),
            pb(9, 9, RecordState::Acknowledged, 1),
        ],
        "the renewed offset 8 has nothing new to persist"
    );
    assert_eq!(write.delivery_complete_count, 3);
    assert_eq!(
        state_of(&sp, 8),
        Some((RecordState::Acquired, 1, Some("m1".into())))
    );
    assert_eq!(sp.next_fetch_offset(), 5);
}

#[test]
fn acknowledgements_of_other_members_or_unacquired_records_are_invalid_record_state() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &batches(0, 9, 5), 10, 0);
    acquire(&mut sp, "m2", &batches(10, 14, 5), 5, 0);
    let err = ack(&mut sp, "m2", 0, 4, vec![ACCEPT], 1).expect_err("not owner");
    assert_eq!(err.error_code(), error_codes::INVALID_RECORD_STATE);
    assert!(matches!(
        err,
        ShareError::InvalidRecordState {
            reason: RecordStateReason::NotOwner,
            ..
        }
    ));
    // Released records are no longer acquired.
    ack(&mut sp, "m1", 0, 4, vec![RELEASE], 1).expect("release");
    let err = ack(&mut sp, "m1", 0, 4, vec![ACCEPT], 2).expect_err("available");
    assert!(matches!(
        err,
        ShareError::InvalidRecordState {
            reason: RecordStateReason::NotAcquired,
            ..
        }
    ));
    // All or nothing: a valid batch followed by an invalid one changes nothing.
    let batches = [
        AckBatch::new(5, 9, vec![ACCEPT]),
        AckBatch::new(10, 14, vec![ACCEPT]),
    ];
    let err = sp
        .acknowledge("m1", &batches, 3)
        .expect_err("second batch is m2's");
    assert_eq!(err.error_code(), error_codes::INVALID_RECORD_STATE);
    assert_eq!(
        state_of(&sp, 5),
        Some((RecordState::Acquired, 1, Some("m1".into())))
    );
    // Terminal records cannot be acknowledged again.
    ack(&mut sp, "m1", 5, 9, vec![REJECT], 4).expect("reject");
    ack(&mut sp, "m2", 10, 14, vec![RELEASE], 4).expect("release");
    let err = ack(&mut sp, "m1", 5, 9, vec![ACCEPT], 5).expect_err("archived");
    assert!(matches!(
        err,
        ShareError::InvalidRecordState {
            reason: RecordStateReason::NotAcquired,
            ..
        }
    ));
}

#[test]
fn acknowledging_after_the_lock_expired_is_invalid_record_state() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 4)], 100, 0);
    let err = ack(&mut sp, "m1", 0, 4, vec![ACCEPT], LOCK).expect_err("expired");
    assert!(matches!(
        err,
        ShareError::InvalidRecordState {
            reason: RecordStateReason::LockExpired,
            ..
        }
    ));
    assert_eq!(
        state_of(&sp, 0),
        Some((RecordState::Acquired, 1, Some("m1".into()))),
        "errors change nothing"
    );
}

#[test]
fn batches_past_the_acquired_records_or_without_in_flight_records() {
    let mut sp = sp();
    let err = ack(&mut sp, "m1", 0, 4, vec![ACCEPT], 0).expect_err("nothing in flight");
    assert!(matches!(
        err,
        ShareError::InvalidRecordState {
            reason: RecordStateReason::NotFound,
            ..
        }
    ));
    acquire(&mut sp, "m1", &[data(0, 4)], 100, 0);
    let err = ack(&mut sp, "m1", 3, 7, vec![ACCEPT], 1).expect_err("past end");
    assert_eq!(err.error_code(), error_codes::INVALID_REQUEST);
    // Below the start offset: skipped without error.
    ack(&mut sp, "m1", 0, 4, vec![ACCEPT], 1).expect("accept");
    assert_eq!(ack(&mut sp, "m1", 0, 4, vec![ACCEPT], 2), Ok(None));
}

#[test]
fn malformed_acknowledgement_batches_are_invalid_request() {
    use InvalidRequestReason::*;
    let cases: Vec<(Vec<AckBatch>, bool, InvalidRequestReason)> = vec![
        (
            vec![AckBatch::new(5, 4, vec![1])],
            true,
            FirstAfterLast { first: 5, last: 4 },
        ),
        (
            vec![AckBatch::new(0, 4, vec![1]), AckBatch::new(4, 6, vec![1])],
            true,
            NotAscending {
                first: 4,
                previous_last: 4,
            },
        ),
        (
            vec![AckBatch::new(5, 6, vec![1]), AckBatch::new(0, 1, vec![1])],
            true,
            NotAscending {
                first: 0,
                previous_last: 6,
            },
        ),
        (vec![AckBatch::new(0, 4, vec![])], true, EmptyAckTypes),
        (
            vec![AckBatch::new(0, 4, vec![1, 1])],
            true,
            AckTypesLength { len: 2, records: 5 },
        ),
        (vec![AckBatch::new(0, 0, vec![5])], true, UnknownAckType(5)),
        (
            vec![AckBatch::new(0, 1, vec![1, -1])],
            true,
            UnknownAckType(-1),
        ),
        (vec![AckBatch::new(0, 0, vec![4])], false, RenewNotAllowed),
    ];
    for (batches, renew_allowed, reason) in cases {
        assert_eq!(
            validate_acknowledge_batches(&batches, renew_allowed),
            Err(ShareError::InvalidRequest(reason.clone()))
        );
        if renew_allowed {
            let mut sp = sp();
            acquire(&mut sp, "m1", &[data(0, 9)], 100, 0);
            let err = sp.acknowledge("m1", &batches, 1).expect_err("invalid");
            assert_eq!(err, ShareError::InvalidRequest(reason));
            assert_eq!(err.error_code(), error_codes::INVALID_REQUEST);
        }
    }
    assert_eq!(
        validate_acknowledge_batches(&[AckBatch::new(0, 0, vec![4])], true),
        Ok(())
    );
    assert_eq!(validate_acknowledge_batches(&[], false), Ok(()));
}

#[test]
fn release_and_lock_expiry_archive_at_the_delivery_limit() {
    let cfg = SharePartitionConfig {
        delivery_count_limit: 2,
        ..config()
    };
    let mut sp = SharePartition::new(cfg, 0, 0).expect("valid");
    acquire(&mut sp, "m1", &[data(0, 4)], 100, 0);
    let w = ack(&mut sp, "m1", 0, 4, vec![RELEASE], 1)
        .expect("release")
        .expect("write");
    assert_eq!(w.batches, vec![pb(0, 4, RecordState::Available, 1)]);
    assert_eq!(
        acquire(&mut sp, "m2", &[data(0, 4)], 100, 2),
        vec![(0, 4, 2)]
    );
    let w = ack(&mut sp, "m2", 0, 4, vec![RELEASE], 3)
        .expect("release")
        .expect("write");
    assert_eq!(
        w.start_offset, 5,
        "archived at the limit, so the start offset moves"
    );
    // Lock expiry at the limit archives too.
    acquire(&mut sp, "m1", &[data(5, 9)], 100, 10);
    sp.expire_locks(10 + LOCK).expect("running").expect("write");
    assert_eq!(
        acquire(&mut sp, "m1", &[data(5, 9)], 100, 2_000),
        vec![(5, 9, 2)]
    );
    let w = sp
        .expire_locks(2_000 + LOCK)
        .expect("running")
        .expect("write");
    assert_eq!((w.start_offset, sp.start_offset()), (10, 10));
}

#[test]
fn lock_expiry_makes_records_available_again() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 4), data(5, 9)], 5, 0);
    assert_eq!(sp.next_lock_deadline(), Some(LOCK));
    assert_eq!(sp.expire_locks(LOCK - 1).expect("running"), None);
    let w = sp.expire_locks(LOCK).expect("running").expect("write");
    assert_eq!(w.batches, vec![pb(0, 4, RecordState::Available, 1)]);
    assert_eq!(sp.next_lock_deadline(), None);
    assert_eq!(state_of(&sp, 0), Some((RecordState::Available, 1, None)));
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(
        acquire(&mut sp, "m2", &[data(0, 4), data(5, 9)], 100, LOCK),
        vec![(0, 4, 2), (5, 9, 1)]
    );
}

#[test]
fn a_due_lock_counts_as_expired_in_every_call() {
    let mut sp = sp();
    let log = [data(0, 4)];
    acquire(&mut sp, "m1", &log, 100, 0);
    // No expire_locks call: the next acquisition sees the records AVAILABLE.
    let mut req = request("m2", &log, 100, LOCK);
    req.fetch_offset = 0;
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(
        acq.records,
        vec![AcquiredRecords {
            first_offset: 0,
            last_offset: 4,
            delivery_count: 2
        }]
    );
    assert_eq!(
        acq.write.expect("expiry persisted").batches,
        vec![pb(0, 4, RecordState::Available, 1)]
    );
}

#[test]
fn renew_extends_the_lock_and_persists_nothing() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 4)], 100, 0);
    assert_eq!(ack(&mut sp, "m1", 0, 4, vec![RENEW], 500), Ok(None));
    assert_eq!(sp.next_lock_deadline(), Some(500 + LOCK));
    assert_eq!(sp.expire_locks(LOCK).expect("running"), None);
    assert_eq!(
        state_of(&sp, 0),
        Some((RecordState::Acquired, 1, Some("m1".into())))
    );
    let err = ack(&mut sp, "m2", 0, 4, vec![RENEW], 600).expect_err("not owner");
    assert_eq!(err.error_code(), error_codes::INVALID_RECORD_STATE);
}

#[test]
fn releasing_a_member_keeps_the_delivery_count() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 4)], 100, 0);
    ack(&mut sp, "m1", 0, 4, vec![RELEASE], 1).expect("release");
    assert_eq!(
        acquire(&mut sp, "m1", &[data(0, 4), data(5, 9)], 100, 2),
        vec![(0, 4, 2), (5, 9, 1)]
    );
    acquire(&mut sp, "m2", &[data(10, 12)], 100, 2);
    let write = sp
        .release_member("m1", 3)
        .expect("running")
        .expect("the counts become persisted");
    assert_eq!(
        write.batches,
        vec![
            PersistedBatch {
                first_offset: 0,
                last_offset: 4,
                state: RecordState::Available,
                delivery_count: 2,
                staged_txn: None,
            },
            PersistedBatch {
                first_offset: 5,
                last_offset: 9,
                state: RecordState::Available,
                delivery_count: 1,
                staged_txn: None,
            }
        ]
    );
    assert_eq!(state_of(&sp, 0), Some((RecordState::Available, 2, None)));
    assert_eq!(state_of(&sp, 5), Some((RecordState::Available, 1, None)));
    assert_eq!(
        state_of(&sp, 10),
        Some((RecordState::Acquired, 1, Some("m2".into())))
    );
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(sp.acquired_by("m1"), vec![]);
    // The next delivery is the third of 0-4.
    assert_eq!(
        acquire(&mut sp, "m3", &[data(0, 4)], 100, 4),
        vec![(0, 4, 3)]
    );
}

#[test]
fn redelivery_is_throttled_past_half_the_delivery_limit() {
    // limit 6: throttle at count >= 3, last attempt at count 5.
    let cfg = SharePartitionConfig {
        delivery_count_limit: 6,
        ..config()
    };
    let state = ReadState {
        state_epoch: 0,
        start_offset: 0,
        state_batches: vec![
            StateBatch::new(0, 4, 0, 1),
            StateBatch::new(5, 24, 0, 3),
            StateBatch::new(25, 34, 0, 4),
            StateBatch::new(35, 39, 0, 5),
        ],
    };
    let (mut sp, _) = SharePartition::from_persisted(cfg, &state).expect("load");
    let log = batches(0, 49, 5);
    // Unthrottled records first; the throttled ones wait for a later fetch, as do new ones.
    assert_eq!(acquire(&mut sp, "m1", &log, 100, 0), vec![(0, 4, 2)]);
    // Count 3: MaxRecords halved once (8 >> 1 = 4), alone.
    assert_eq!(acquire(&mut sp, "m1", &log[1..], 8, 0), vec![(5, 8, 4)]);
    // 100 >> 1 = 50 covers the rest of the count-3 run (9..=24).
    assert_eq!(acquire(&mut sp, "m1", &log[1..], 100, 0), vec![(9, 24, 4)]);
    assert_eq!(sp.next_fetch_offset(), 25);
    // Count 4: halved twice (8 >> 2 = 2).
    assert_eq!(acquire(&mut sp, "m1", &log[5..], 8, 0), vec![(25, 26, 5)]);
    // Count 5 = limit - 1: the last attempt goes alone.
    let mut req = request("m1", &log[7..], 100, 0);
    req.fetch_offset = 35;
    assert_eq!(
        sp.acquire(&req).expect("acquire").records,
        vec![AcquiredRecords {
            first_offset: 35,
            last_offset: 35,
            delivery_count: 6
        }]
    );
}

#[test]
fn the_record_lock_limit_stops_new_acquisitions_but_not_redelivery() {
    let cfg = SharePartitionConfig {
        record_locks_max: 10,
        ..config()
    };
    let mut sp = SharePartition::new(cfg, 0, 0).expect("valid");
    let log = batches(0, 19, 4);
    // 10 records allowed; the batch holding offset 9 ends at 11 (overshoot < one batch).
    assert_eq!(acquire(&mut sp, "m1", &log, 100, 0), vec![(0, 11, 1)]);
    assert_eq!(sp.in_flight_count(), 12);
    assert!(!sp.can_acquire_records());
    assert_eq!(acquire(&mut sp, "m2", &log[3..], 100, 0), vec![]);
    ack(&mut sp, "m1", 4, 7, vec![RELEASE], 1).expect("release");
    assert!(sp.can_acquire_records());
    assert_eq!(sp.next_fetch_offset(), 4);
    // At the limit only the released records inside the window are re-acquired.
    assert_eq!(acquire(&mut sp, "m2", &log[1..], 100, 2), vec![(4, 7, 2)]);
    ack(&mut sp, "m1", 0, 3, vec![ACCEPT], 3).expect("accept");
    // The window moved to 4..=11: two more records fit, rounded up to the batch end.
    assert_eq!(acquire(&mut sp, "m2", &log[3..], 100, 3), vec![(12, 15, 1)]);
    assert_eq!(sp.in_flight_count(), 12);
}

#[test]
fn read_committed_archives_aborted_transactions_and_returns_markers() {
    // pid 7 aborts 0..=1 (marker 4), pid 8 commits 2..=3 (marker 5), 6..=7 plain.
    let log = [
        txn(0, 1, 7),
        txn(2, 3, 8),
        marker(4, 7),
        marker(5, 8),
        data(6, 7),
    ];
    let aborted = [AbortedTransaction {
        producer_id: 7,
        first_offset: 0,
    }];
    let mut sp = sp();
    let mut req = request("m1", &log, 100, 0);
    req.isolation = Isolation::ReadCommitted { aborted: &aborted };
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(
        acq.records,
        vec![AcquiredRecords {
            first_offset: 2,
            last_offset: 7,
            delivery_count: 1
        }]
    );
    assert_eq!(
        sp.start_offset(),
        2,
        "the archived aborted records are passed"
    );
    let w = acq.write.expect("archival persisted");
    assert_eq!(w.start_offset, 2);
    // read_uncommitted returns everything.
    let mut sp = SharePartition::new(config(), 0, 0).expect("valid");
    req.isolation = Isolation::ReadUncommitted;
    assert_eq!(
        sp.acquire(&req).expect("acquire").records,
        vec![AcquiredRecords {
            first_offset: 0,
            last_offset: 7,
            delivery_count: 1
        }]
    );
    // Markers are acknowledged by the client as gaps.
    ack(
        &mut sp,
        "m1",
        0,
        7,
        vec![ACCEPT, ACCEPT, ACCEPT, ACCEPT, GAP, GAP, ACCEPT, ACCEPT],
        1,
    )
    .expect("ack");
    assert_eq!(sp.start_offset(), 8);
}

#[test]
fn stale_available_records_before_the_first_fetched_batch_are_archived() {
    // Persisted: 5..=9 released once; 0..=4 never persisted (a gap to fetch again).
    let mut sp = loaded(0, &[(5, 9, 0, 1)]);
    assert_eq!(sp.next_fetch_offset(), 0);
    // Compaction removed 0..=2: the read from 0 starts at 3.
    let log = [data(3, 9)];
    let mut req = request("m1", &log, 100, 0);
    req.fetch_offset = 0;
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(
        acq.records,
        vec![
            AcquiredRecords {
                first_offset: 3,
                last_offset: 4,
                delivery_count: 1
            },
            AcquiredRecords {
                first_offset: 5,
                last_offset: 9,
                delivery_count: 2
            },
        ]
    );
    assert_eq!(sp.start_offset(), 3);
    assert_eq!(acq.write.expect("write").start_offset, 3);
}

#[test]
fn persisted_gaps_are_fetched_again_and_loading_checks_the_batches() {
    let sp = loaded(10, &[(15, 19, 2, 1), (25, 29, 0, 2)]);
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()),
        (10, 29, 10)
    );
    assert_eq!(sp.in_flight_count(), 20);
    assert_eq!(sp.state_epoch(), 3);
    assert_eq!(state_of(&sp, 12), Some((RecordState::Available, 0, None)));
    assert_eq!(state_of(&sp, 22), Some((RecordState::Available, 0, None)));
    let mut sp = sp;
    let got = acquire(&mut sp, "m1", &batches(10, 29, 5), 100, 0);
    assert_eq!(got, vec![(10, 14, 1), (20, 24, 1), (25, 29, 3)]);
    // Invalid persisted states.
    let bad: Vec<(i64, Vec<StateBatch>)> = vec![
        (-1, vec![]),
        (10, vec![StateBatch::new(5, 12, 0, 1)]),
        (
            0,
            vec![StateBatch::new(0, 5, 0, 1), StateBatch::new(5, 6, 0, 1)],
        ),
        (0, vec![StateBatch::new(3, 2, 0, 1)]),
        (0, vec![StateBatch::new(0, 2, 1, 1)]),
        (0, vec![StateBatch::new(0, 2, 6, 1)]),
        (0, vec![StateBatch::new(0, 2, 0, -1)]),
    ];
    for (start_offset, state_batches) in bad {
        let state = ReadState {
            state_epoch: 0,
            start_offset,
            state_batches,
        };
        let err = SharePartition::from_persisted(config(), &state).expect_err("invalid");
        assert_eq!(err.error_code(), error_codes::UNKNOWN_SERVER_ERROR);
    }
}

#[test]
fn loading_moves_the_start_past_terminal_records() {
    let state = ReadState {
        state_epoch: 1,
        start_offset: 0,
        state_batches: vec![
            StateBatch::new(0, 4, 2, 1),
            StateBatch::new(5, 6, 4, 2),
            StateBatch::new(7, 9, 0, 1),
        ],
    };
    let (sp, write) = SharePartition::from_persisted(config(), &state).expect("load");
    assert_eq!(sp.start_offset(), 7);
    assert_eq!(write.map(|w| w.start_offset), Some(7));
    let all_done = ReadState {
        state_batches: vec![StateBatch::new(0, 9, 2, 1)],
        ..state
    };
    let (sp, _) = SharePartition::from_persisted(config(), &all_done).expect("load");
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()),
        (10, 10, 10)
    );
}

#[test]
fn log_start_offset_moves_drop_records_below_it() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 9)], 100, 0);
    assert_eq!(sp.update_log_start_offset(0).expect("running"), None);
    let w = sp
        .update_log_start_offset(5)
        .expect("running")
        .expect("write");
    assert_eq!((w.start_offset, w.batches.len()), (5, 0));
    assert_eq!((sp.start_offset(), sp.in_flight_count()), (5, 5));
    // The member's acknowledgement of the whole batch applies to what is left.
    ack(&mut sp, "m1", 0, 9, vec![ACCEPT], 1).expect("ack");
    assert_eq!(sp.start_offset(), 10);
    // Past everything tracked: the window restarts there.
    acquire(&mut sp, "m1", &[data(10, 14)], 100, 1);
    sp.update_log_start_offset(20)
        .expect("running")
        .expect("write");
    assert_eq!(
        (
            sp.start_offset(),
            sp.end_offset(),
            sp.next_fetch_offset(),
            sp.in_flight_count()
        ),
        (20, 20, 20, 0)
    );
    assert_eq!(sp.acquired_by("m1"), vec![]);
}

#[test]
fn offsets_without_data_are_skipped_by_the_start_offset() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 4)], 100, 0);
    // 5..=9 were compacted away: the next read from 5 returns 10..=14.
    let log = [data(10, 14)];
    let mut req = request("m1", &log, 100, 0);
    req.fetch_offset = 5;
    sp.acquire(&req).expect("acquire");
    assert_eq!(
        sp.in_flight_count(),
        15,
        "the hole counts toward the window, as in Kafka"
    );
    let err = ack(&mut sp, "m1", 5, 9, vec![ACCEPT], 1).expect_err("nothing there");
    assert!(matches!(
        err,
        ShareError::InvalidRecordState {
            reason: RecordStateReason::NotFound,
            ..
        }
    ));
    ack(&mut sp, "m1", 0, 4, vec![ACCEPT], 1).expect("ack");
    assert_eq!(sp.start_offset(), 10);
    ack(&mut sp, "m1", 10, 14, vec![ACCEPT], 1).expect("ack");
    assert_eq!(sp.start_offset(), 15);
}

#[test]
fn invalid_fetched_batches_change_nothing() {
    let mut sp = sp();
    for log in [
        vec![data(5, 4)],
        vec![data(0, 4), data(4, 6)],
        vec![data(-1, 2)],
        vec![data(3, 4), data(0, 1)],
    ] {
        let mut req = request("m1", &log, 100, 0);
        req.fetch_offset = 0;
        assert!(matches!(
            sp.acquire(&req),
            Err(ShareError::InvalidFetchedBatches { .. })
        ));
    }
    assert_eq!(sp.ranges().count(), 0);
    let log = [data(0, 4)];
    let mut req = request("m1", &log, 100, 0);
    req.max_records = 0;
    assert_eq!(sp.acquire(&req).expect("nothing").records, vec![]);
}

#[test]
fn views_and_write_conversion() {
    let mut sp = sp();
    acquire(&mut sp, "m1", &[data(0, 9)], 100, 0);
    ack(&mut sp, "m1", 5, 9, vec![REJECT], 1).expect("reject");
    ack(&mut sp, "m1", 0, 1, vec![RELEASE], 1).expect("release");
    let counts = sp.counts();
    assert_eq!(
        (
            counts.available,
            counts.acquired,
            counts.acknowledged,
            counts.archived
        ),
        (2, 3, 0, 5)
    );
    assert_eq!(counts.get(RecordState::Archived), 5);
    assert_eq!(sp.delivery_complete_count(), 5);
    let view = sp.persisted_view();
    assert_eq!(
        view.batches,
        vec![
            pb(0, 1, RecordState::Available, 1),
            pb(5, 9, RecordState::Archived, 1)
        ],
        "acquired 2..=4 were never delivered before: not persisted"
    );
    let ws = view.to_write_state(7);
    assert_eq!(
        (
            ws.leader_epoch,
            ws.state_epoch,
            ws.start_offset,
            ws.delivery_complete_count
        ),
        (7, 0, 0, 5)
    );
    assert_eq!(
        ws.state_batches,
        vec![StateBatch::new(0, 1, 0, 1), StateBatch::new(5, 9, 4, 1)]
    );
    let ranges: Vec<_> = sp
        .ranges()
        .map(|r| (r.first_offset, r.last_offset, r.state, r.lock_deadline_ms))
        .collect();
    assert_eq!(
        ranges,
        vec![
            (0, 1, RecordState::Available, None),
            (2, 4, RecordState::Acquired, Some(LOCK)),
            (5, 9, RecordState::Archived, None)
        ]
    );
    sp.check_invariants();
}

#[test]
fn acknowledge_types_and_modes_round_trip_their_ids() {
    for id in 0..=4 {
        assert_eq!(
            AcknowledgeType::from_id(id).map(AcknowledgeType::id),
            Some(id)
        );
    }
    assert_eq!(AcknowledgeType::from_id(5), None);
    assert_eq!(AcquireMode::from_id(0), Some(AcquireMode::BatchOptimized));
    assert_eq!(AcquireMode::from_id(1), Some(AcquireMode::RecordLimit));
    assert_eq!(AcquireMode::from_id(2), None);
}

fn dead_letter_config() -> SharePartitionConfig {
    SharePartitionConfig {
        delivery_count_limit: 2,
        dead_letter: true,
        ..config()
    }
}

#[test]
fn rejected_and_over_the_limit_records_wait_in_archiving_for_their_dead_letters() {
    let mut sp = SharePartition::new(dead_letter_config(), 0, 0).expect("config");
    assert_eq!(
        acquire(&mut sp, "m1", &batches(0, 5, 6), 100, 0),
        vec![(0, 5, 1)]
    );
    let write = sp
        .acknowledge("m1", &[AckBatch::new(0, 5, vec![3, 0, 2, 1, 3, 2])], 10)
        .expect("acknowledged")
        .expect("a write");
    let persisted: Vec<(i64, i64, RecordState)> = write
        .batches
        .iter()
        .map(|b| (b.first_offset, b.last_offset, b.state))
        .collect();
    assert_eq!(
        persisted,
        vec![
            (0, 0, RecordState::Archiving),
            (1, 1, RecordState::Archived),
            (2, 2, RecordState::Available),
            (3, 3, RecordState::Acknowledged),
            (4, 4, RecordState::Archiving),
            (5, 5, RecordState::Available),
        ],
        "REJECT goes to ARCHIVING, GAP straight to ARCHIVED"
    );
    assert_eq!(sp.start_offset(), 0, "the SPSO stops at ARCHIVING");
    let archiving = sp.archiving();
    assert_eq!(archiving.len(), 2);
    assert_eq!(archiving[0].cause, DeadLetterCause::ClientReject);
    // ARCHIVING cannot be acknowledged, acquired or released.
    let err = sp
        .acknowledge("m1", &[AckBatch::new(0, 0, vec![1])], 20)
        .expect_err("not acquired");
    assert_eq!(err.error_code(), error_codes::INVALID_RECORD_STATE);
    // The released offsets come back at count 2, the limit: released again, they are
    // dead-lettered as past the limit.
    assert_eq!(
        acquire(&mut sp, "m1", &batches(0, 5, 6), 100, 30),
        vec![(2, 2, 2), (5, 5, 2)]
    );
    sp.release_member("m1", 40).expect("released");
    let causes: Vec<(i64, DeadLetterCause)> = sp
        .archiving()
        .iter()
        .map(|r| (r.first_offset, r.cause))
        .collect();
    assert_eq!(
        causes,
        vec![
            (0, DeadLetterCause::ClientReject),
            (2, DeadLetterCause::DeliveryCountExceeded),
            (4, DeadLetterCause::ClientReject),
            (5, DeadLetterCause::DeliveryCountExceeded),
        ]
    );
    // Completing a range archives only its ARCHIVING records; the SPSO moves past them.
    let write = sp
        .complete_archiving(0, 2)
        .expect("running")
        .expect("a write");
    assert_eq!(write.start_offset, 4);
    assert_eq!(sp.archiving_count(), 2);
    sp.complete_archiving(0, 100).expect("running");
    assert_eq!(sp.archiving_count(), 0);
    assert_eq!(sp.start_offset(), 6);
}

#[test]
fn archiving_survives_a_reload() {
    let sp = loaded(0, &[(0, 1, 3, 1), (2, 2, 4, 1)]);
    assert_eq!(sp.start_offset(), 0);
    assert_eq!(sp.archiving_count(), 2);
    assert_eq!(sp.persisted_view().batches[0].state, RecordState::Archiving);
}
