//! Unit tests of transactional acknowledgements (TX_PENDING, KIP-1289).

use super::*;
use crate::share_coordinator::{
    InitializeState, ShareCoordinatorConfig, SharePartitionKey, ShareStateRecord, ShareStateStore,
    StagedTxn, StateBatch, TopicId,
};

const LOCK: i64 = 1_000;
const PID: i64 = 42;
const EPOCH: i16 = 3;

fn config(limit: i16, locks: i64) -> SharePartitionConfig {
    SharePartitionConfig {
        record_lock_duration_ms: LOCK,
        delivery_count_limit: limit,
        record_locks_max: locks,
        dead_letter: false,
    }
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

fn acquire(sp: &mut SharePartition, member: &str, first: i64, last: i64, now: i64) {
    let fetched = [data(first, last)];
    let req = AcquireRequest {
        member_id: member,
        fetch_offset: sp.next_fetch_offset(),
        fetched: &fetched,
        max_records: 500,
        batch_size: 500,
        mode: AcquireMode::BatchOptimized,
        isolation: Isolation::ReadUncommitted,
        now_ms: now,
    };
    sp.acquire(&req).expect("acquire");
}

fn state_of(sp: &SharePartition, offset: i64) -> Option<RecordRange> {
    sp.ranges()
        .find(|r| r.first_offset <= offset && offset <= r.last_offset)
}

fn stage(
    sp: &mut SharePartition,
    member: &str,
    batches: &[(i64, i64, Vec<i8>)],
    now: i64,
) -> Result<Option<StateWrite>, ShareError> {
    let batches: Vec<AckBatch> = batches
        .iter()
        .map(|(f, l, t)| AckBatch::new(*f, *l, t.clone()))
        .collect();
    sp.stage(now, member, (PID, EPOCH), &batches, false)
}

fn staged(ack_type: i8) -> Option<StagedTxn> {
    Some(StagedTxn {
        producer_id: PID,
        producer_epoch: EPOCH,
        ack_type,
        dead_lettered: false,
    })
}

fn fixture() -> SharePartition {
    let mut sp = SharePartition::new(config(5, 100), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 9, 0);
    sp
}

#[test]
fn staging_moves_acquired_records_to_tx_pending_and_cancels_their_locks() {
    let mut sp = fixture();
    let write = stage(&mut sp, "m1", &[(0, 4, vec![1])], 10)
        .expect("staged")
        .expect("persisted");
    let r = state_of(&sp, 2).expect("tracked");
    assert_eq!((r.state, r.delivery_count), (RecordState::TxPending, 1));
    assert_eq!((r.member_id, r.lock_deadline_ms), (None, None));
    assert_eq!(r.staged_txn, staged(1));
    // Only the still-acquired 5..=9 hold a lock.
    assert_eq!(sp.next_lock_deadline(), Some(LOCK));
    assert!(sp.acquired_by("m1").iter().all(|a| a.first_offset >= 5));
    // Persisted as state 5 with the pre-acquisition count and the staging.
    assert_eq!(
        write.batches,
        vec![PersistedBatch {
            first_offset: 0,
            last_offset: 4,
            state: RecordState::TxPending,
            delivery_count: 0,
            staged_txn: staged(1),
        }]
    );
    assert_eq!(sp.tx_pending_count(), 5);
    assert_eq!(sp.counts().tx_pending, 5);
    assert_eq!(sp.txn_stats().staged, 5);
    sp.check_invariants();
}

#[test]
fn staging_is_all_or_nothing_and_names_why() {
    let mut sp = fixture();
    acquire(&mut sp, "m2", 10, 14, 0);
    let before: Vec<RecordRange> = sp.ranges().collect();
    let refused = |r: Result<Option<StateWrite>, ShareError>| match r {
        Err(ShareError::InvalidRecordState { reason, .. }) => reason,
        other => panic!("expected INVALID_RECORD_STATE, got {other:?}"),
    };
    // One good batch, one held by another member: nothing staged.
    let r = stage(&mut sp, "m1", &[(0, 4, vec![1]), (10, 11, vec![1])], 1);
    assert_eq!(refused(r), RecordStateReason::NotOwner);
    // Past the tracked records.
    let r = stage(&mut sp, "m1", &[(0, 4, vec![1]), (15, 20, vec![1])], 1);
    assert_eq!(refused(r), RecordStateReason::NotInFlight);
    // RELEASE and RENEW have no transactional meaning; neither has an unknown type.
    for t in [2, 4, 9] {
        let r = stage(&mut sp, "m1", &[(0, 1, vec![1, t])], 1);
        assert_eq!(refused(r), RecordStateReason::NotTransactional);
    }
    // A lapsed lock.
    let r = stage(&mut sp, "m1", &[(0, 1, vec![1])], LOCK);
    assert_eq!(refused(r), RecordStateReason::LockExpired);
    // Malformed: INVALID_REQUEST before anything else.
    let r = stage(&mut sp, "m1", &[(3, 1, vec![1])], 1);
    assert_eq!(
        r.map(|_| ()).map_err(|e| e.error_code()),
        Err(error_codes::INVALID_REQUEST)
    );
    let r = stage(&mut sp, "m1", &[(0, 3, vec![1]), (3, 4, vec![1])], 1);
    assert_eq!(
        r.map(|_| ()).map_err(|e| e.error_code()),
        Err(error_codes::INVALID_REQUEST)
    );
    let r = stage(&mut sp, "m1", &[(0, 3, vec![1, 1])], 1);
    assert_eq!(
        r.map(|_| ()).map_err(|e| e.error_code()),
        Err(error_codes::INVALID_REQUEST)
    );
    assert_eq!(sp.ranges().collect::<Vec<_>>(), before, "nothing changed");
    assert_eq!(sp.txn_stats(), TxnStats::default());
    // Staging twice: the second one finds TX_PENDING.
    stage(&mut sp, "m1", &[(0, 1, vec![1])], 1).expect("staged");
    let r = stage(&mut sp, "m1", &[(1, 2, vec![1])], 1);
    assert_eq!(refused(r), RecordStateReason::TxPending);
    // Staging below the SPSO.
    let mut sp = SharePartition::new(config(5, 100), 5, 0).expect("valid");
    acquire(&mut sp, "m1", 5, 9, 0);
    let r = stage(&mut sp, "m1", &[(3, 6, vec![1])], 1);
    assert_eq!(refused(r), RecordStateReason::NotInFlight);
}

#[test]
fn commit_acknowledges_accepts_and_archives_rejects_and_gaps() {
    let mut sp = fixture();
    stage(&mut sp, "m1", &[(0, 2, vec![1, 3, 0]), (3, 3, vec![1])], 1).expect("staged");
    let out = sp.apply_marker(PID, EPOCH + 1, true).expect("running");
    assert!(out.wake);
    assert_eq!(out.resolved, 4);
    assert_eq!(out.staged_at_ms.iter().map(|(n, _)| n).sum::<i64>(), 4);
    assert!(out.staged_at_ms.iter().all(|(_, t)| *t == Some(1)));
    // All four terminal: the SPSO passes them.
    assert_eq!(sp.start_offset(), 4);
    let write = out.write.expect("persisted");
    assert_eq!(write.start_offset, 4);
    assert_eq!(sp.txn_stats().committed, 4);
    assert_eq!(sp.tx_pending_count(), 0);
    // Resolution states before the SPSO moves: check on a partition with an earlier hole.
    let mut sp = fixture();
    stage(&mut sp, "m1", &[(1, 3, vec![1, 3, 0])], 1).expect("staged");
    sp.apply_marker(PID, EPOCH, true).expect("running");
    assert_eq!(
        state_of(&sp, 1).map(|r| r.state),
        Some(RecordState::Acknowledged)
    );
    assert_eq!(
        state_of(&sp, 2).map(|r| r.state),
        Some(RecordState::Archived)
    );
    assert_eq!(
        state_of(&sp, 3).map(|r| r.state),
        Some(RecordState::Archived)
    );
    assert_eq!(sp.start_offset(), 0, "offset 0 is still acquired");
    sp.check_invariants();
}

#[test]
fn abort_makes_records_available_keeping_the_count_and_archives_at_the_limit() {
    let mut sp = SharePartition::new(config(2, 100), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 4, 0);
    stage(&mut sp, "m1", &[(0, 4, vec![1])], 1).expect("staged");
    let out = sp.apply_marker(PID, EPOCH + 1, false).expect("running");
    assert!(out.wake);
    let r = state_of(&sp, 0).expect("tracked");
    assert_eq!((r.state, r.delivery_count), (RecordState::Available, 1));
    assert_eq!(sp.next_fetch_offset(), 0, "redelivered at once");
    assert_eq!(sp.txn_stats().aborted, 5);
    // Second delivery is the last: its abort archives.
    acquire(&mut sp, "m2", 0, 4, 2);
    sp.stage(
        3,
        "m2",
        (PID, EPOCH + 1),
        &[AckBatch::new(0, 4, vec![1])],
        false,
    )
    .expect("staged");
    sp.apply_marker(PID, EPOCH + 2, false).expect("running");
    assert_eq!(sp.start_offset(), 5, "archived at the delivery limit");
    sp.check_invariants();
}

#[test]
fn older_epoch_duplicate_and_foreign_markers_change_nothing() {
    let mut sp = fixture();
    stage(&mut sp, "m1", &[(0, 4, vec![1])], 1).expect("staged");
    let before: Vec<RecordRange> = sp.ranges().collect();
    for (pid, epoch) in [(PID, EPOCH - 1), (PID + 1, EPOCH + 5)] {
        for commit in [true, false] {
            let out = sp.apply_marker(pid, epoch, commit).expect("running");
            assert_eq!(out, MarkerOutcome::default(), "{pid} {epoch} {commit}");
        }
    }
    assert_eq!(sp.ranges().collect::<Vec<_>>(), before);
    assert!(sp.apply_marker(PID, EPOCH, true).expect("running").wake);
    let after: Vec<RecordRange> = sp.ranges().collect();
    // A duplicate, and a late abort of the same transaction.
    assert_eq!(
        sp.apply_marker(PID, EPOCH, true).expect("running"),
        MarkerOutcome::default()
    );
    assert_eq!(
        sp.apply_marker(PID, EPOCH + 1, false).expect("running"),
        MarkerOutcome::default()
    );
    assert_eq!(sp.ranges().collect::<Vec<_>>(), after);
}

#[test]
fn acknowledgements_of_tx_pending_records_are_refused_and_leave_them_pending() {
    let mut sp = fixture();
    stage(&mut sp, "m1", &[(0, 4, vec![1])], 1).expect("staged");
    for t in 0..=4 {
        let r = sp.acknowledge("m1", &[AckBatch::new(3, 6, vec![t])], 2);
        assert_eq!(
            r,
            Err(ShareError::InvalidRecordState {
                offset: 3,
                reason: RecordStateReason::TxPending
            })
        );
    }
    assert_eq!(sp.tx_pending_count(), 5);
    assert_eq!(sp.acquired_by("m1").len(), 1, "5..=9 still held");
}

#[test]
fn lock_expiry_member_leave_and_session_close_do_not_release_tx_pending() {
    let mut sp = fixture();
    stage(&mut sp, "m1", &[(0, 4, vec![1])], 1).expect("staged");
    sp.expire_locks(10 * LOCK).expect("running");
    sp.release_member("m1", 10 * LOCK).expect("running");
    let r = state_of(&sp, 0).expect("tracked");
    assert_eq!((r.first_offset, r.last_offset), (0, 4));
    assert_eq!(r.state, RecordState::TxPending);
    assert_eq!(
        state_of(&sp, 5).map(|r| r.state),
        Some(RecordState::Available),
        "the rest was released"
    );
    assert_eq!(sp.next_lock_deadline(), None);
    sp.check_invariants();
}

#[test]
fn the_spso_stops_at_tx_pending_and_the_record_lock_window_counts_it() {
    let mut sp = SharePartition::new(config(5, 10), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 9, 0);
    stage(&mut sp, "m1", &[(0, 0, vec![1])], 1).expect("staged");
    sp.acknowledge("m1", &[AckBatch::new(1, 9, vec![1])], 1)
        .expect("acknowledged");
    assert_eq!(sp.start_offset(), 0);
    assert_eq!(sp.in_flight_count(), 10);
    assert!(!sp.can_acquire_records(), "the window is full");
    let out = sp.apply_marker(PID, EPOCH + 1, true).expect("running");
    assert!(out.wake);
    assert_eq!(sp.start_offset(), 10);
    assert!(sp.can_acquire_records());
}

#[test]
fn a_log_start_move_past_tx_pending_drops_it_and_its_marker_is_then_a_no_op() {
    let mut sp = fixture();
    stage(&mut sp, "m1", &[(0, 4, vec![1])], 1).expect("staged");
    let write = sp
        .update_log_start_offset(3)
        .expect("running")
        .expect("moved");
    assert_eq!(write.start_offset, 3);
    assert_eq!(sp.tx_pending_count(), 2);
    let out = sp.apply_marker(PID, EPOCH, false).expect("running");
    assert_eq!(out.resolved, 2);
    sp.update_log_start_offset(20).expect("running");
    assert_eq!(
        sp.apply_marker(PID, EPOCH, true).expect("running"),
        MarkerOutcome::default()
    );
}

#[test]
fn records_archived_by_read_committed_or_the_limit_cannot_be_staged() {
    let mut sp = SharePartition::new(config(5, 100), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 4, 0);
    sp.acknowledge("m1", &[AckBatch::new(1, 1, vec![3])], 1)
        .expect("rejected");
    let r = stage(&mut sp, "m1", &[(0, 2, vec![1])], 1);
    assert!(matches!(
        r,
        Err(ShareError::InvalidRecordState {
            offset: 1,
            reason: RecordStateReason::NotAcquired
        })
    ));
}

/// Persists every write through a share-state store as encoded records, as the broker does.
struct Persisted {
    store: ShareStateStore,
    key: SharePartitionKey,
    records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Persisted {
    fn new() -> Persisted {
        let mut p = Persisted {
            store: ShareStateStore::new(ShareCoordinatorConfig::default()).expect("config"),
            key: SharePartitionKey::new("g", TopicId([1; 16]), 0),
            records: Vec::new(),
        };
        let init = InitializeState {
            state_epoch: 0,
            start_offset: 0,
        };
        let r = p.store.initialize(&p.key, init, 0).expect("init");
        p.append(&r);
        p
    }

    fn append(&mut self, r: &ShareStateRecord) {
        let (k, v) = r.encode().expect("encodes");
        let decoded = ShareStateRecord::decode(&k, v.as_deref()).expect("decodes");
        self.store.replay(&decoded);
        self.records.push((k, v));
    }

    fn write(&mut self, w: Option<StateWrite>) {
        if let Some(w) = w {
            let r = self
                .store
                .write(&self.key, &w.to_write_state(0), 0)
                .expect("write");
            self.append(&r);
        }
    }

    fn reload(&self, cfg: SharePartitionConfig) -> SharePartition {
        let mut fresh = ShareStateStore::new(ShareCoordinatorConfig::default()).expect("config");
        for (k, v) in &self.records {
            fresh.replay(&ShareStateRecord::decode(k, v.as_deref()).expect("decodes"));
        }
        let (read, _) = fresh.read(&self.key, 0, 0).expect("read");
        SharePartition::from_persisted(cfg, &read).expect("load").0
    }
}

#[test]
fn staging_survives_a_restart_and_resolves_as_it_would_have_live() {
    for commit in [true, false] {
        let mut p = Persisted::new();
        let mut sp = SharePartition::new(config(5, 100), 0, 0).expect("valid");
        acquire(&mut sp, "m1", 0, 9, 0);
        p.write(
            sp.acknowledge("m1", &[AckBatch::new(5, 9, vec![2])], 1)
                .expect("released"),
        );
        acquire(&mut sp, "m1", 5, 9, 2);
        p.write(stage(&mut sp, "m1", &[(0, 7, vec![1, 1, 3, 3, 0, 1, 1, 3])], 3).expect("staged"));
        let mut reloaded = p.reload(config(5, 100));
        assert_eq!(reloaded.persisted_view(), sp.persisted_view());
        let r = state_of(&reloaded, 6).expect("tracked");
        assert_eq!((r.state, r.delivery_count), (RecordState::TxPending, 2));
        assert_eq!(reloaded.tx_pending_count(), 8);
        let live = sp.apply_marker(PID, EPOCH + 1, commit).expect("running");
        let replayed = reloaded
            .apply_marker(PID, EPOCH + 1, commit)
            .expect("running");
        assert_eq!(live.write, replayed.write);
        assert_eq!(sp.persisted_view(), reloaded.persisted_view());
        // The resolution wins over the staging in the store's merge.
        p.write(live.write);
        assert_eq!(
            p.reload(config(5, 100)).persisted_view(),
            sp.persisted_view()
        );
    }
}

#[test]
fn loading_refuses_inconsistent_staging() {
    let load = |batch: StateBatch| {
        let state = crate::share_coordinator::ReadState {
            state_epoch: 0,
            start_offset: 0,
            state_batches: vec![batch],
        };
        SharePartition::from_persisted(config(5, 100), &state).map(|_| ())
    };
    let txn = staged(1);
    assert!(
        load(StateBatch::new(0, 3, 5, 0)).is_err(),
        "state 5 without staging"
    );
    assert!(load(StateBatch::new(0, 3, 0, 1).with_staged_txn(txn)).is_err());
    let bad_ack = txn.map(|t| StagedTxn { ack_type: 2, ..t });
    assert!(load(StateBatch::new(0, 3, 5, 0).with_staged_txn(bad_ack)).is_err());
    assert!(load(StateBatch::new(0, 3, 5, 0).with_staged_txn(txn)).is_ok());
}

#[test]
fn state_batches_carry_the_staging_in_a_tagged_field_and_old_records_decode() {
    let key = SharePartitionKey::new("g", TopicId([2; 16]), 3);
    let batches = vec![
        StateBatch::new(0, 4, 5, 1).with_staged_txn(staged(3)),
        StateBatch::new(5, 9, 0, 1),
    ];
    let record = ShareStateRecord::Update {
        key: key.clone(),
        value: crate::share_coordinator::ShareUpdateValue {
            snapshot_epoch: 0,
            leader_epoch: 0,
            start_offset: 0,
            delivery_complete_count: -1,
            state_batches: batches,
        },
    };
    let (k, v) = record.encode().expect("encodes");
    let v = v.expect("value");
    assert_eq!(ShareStateRecord::decode(&k, Some(&v)), Ok(record.clone()));
    // The staged batch's tagged section: 1 field, tag 0, 11 bytes.
    let tail: Vec<u8> = [1u8, 0, 11]
        .into_iter()
        .chain(PID.to_be_bytes())
        .chain(EPOCH.to_be_bytes())
        .chain([3u8])
        .collect();
    assert!(v.windows(tail.len()).any(|w| w == tail.as_slice()));
    // Without the tag (as written before TX_PENDING existed) the batch decodes without staging.
    let plain = ShareStateRecord::Update {
        key,
        value: crate::share_coordinator::ShareUpdateValue {
            snapshot_epoch: 0,
            leader_epoch: 0,
            start_offset: 0,
            delivery_complete_count: -1,
            state_batches: vec![StateBatch::new(0, 4, 0, 1)],
        },
    };
    let (k, v) = plain.encode().expect("encodes");
    let ShareStateRecord::Update { value, .. } =
        ShareStateRecord::decode(&k, v.as_deref()).expect("decodes")
    else {
        panic!("an update");
    };
    assert_eq!(value.state_batches[0].staged_txn, None);
    // A staging tag of the wrong size is refused, not misread.
    let mut bad = v.clone().expect("value");
    let at = bad.len() - 2; // the batch's empty tagged section, before the value's
    bad.splice(at..at + 1, [1u8, 0, 2, 0, 0]);
    assert!(ShareStateRecord::decode(&k, Some(&bad)).is_err());
}

#[test]
fn staging_expires_due_locks_and_moves_the_spso_past_what_they_archive() {
    let mut sp = SharePartition::new(config(2, 100), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 0, 0);
    sp.expire_locks(LOCK).expect("running");
    acquire(&mut sp, "m1", 0, 0, LOCK);
    acquire(&mut sp, "m2", 1, 1, 2 * LOCK - 1);
    // m1's lock on 0 (second and last delivery) is due: it is archived, the SPSO passes it.
    let write = stage(&mut sp, "m2", &[(1, 1, vec![1])], 2 * LOCK)
        .expect("staged")
        .expect("persisted");
    assert_eq!(sp.start_offset(), 1);
    assert_eq!(write.start_offset, 1);
    sp.check_invariants();
}

#[test]
fn read_committed_and_stale_batch_archiving_leave_tx_pending_alone() {
    let mut sp = SharePartition::new(config(5, 100), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 4, 0);
    stage(&mut sp, "m1", &[(0, 4, vec![1])], 1).expect("staged");
    // A read_committed fetch over an aborted transaction (5..=7, ABORT marker at 8) starting
    // before the staged records: the aborted data is archived, the marker is delivered, the
    // staged records are untouched.
    let txn = |base: i64, last: i64| FetchedBatch {
        is_transactional: true,
        producer_id: 9,
        ..data(base, last)
    };
    let fetched = [
        txn(5, 7),
        FetchedBatch {
            is_control: true,
            ..txn(8, 8)
        },
    ];
    let aborted = [AbortedTransaction {
        producer_id: 9,
        first_offset: 5,
    }];
    let req = AcquireRequest {
        member_id: "m2",
        fetch_offset: 0,
        fetched: &fetched,
        max_records: 500,
        batch_size: 500,
        mode: AcquireMode::BatchOptimized,
        isolation: Isolation::ReadCommitted { aborted: &aborted },
        now_ms: 2,
    };
    let acq = sp.acquire(&req).expect("acquire");
    assert_eq!(
        acq.records
            .iter()
            .map(|r| r.first_offset)
            .collect::<Vec<_>>(),
        vec![8]
    );
    assert_eq!(
        state_of(&sp, 6).map(|r| r.state),
        Some(RecordState::Archived)
    );
    let r = state_of(&sp, 0).expect("tracked");
    assert_eq!(
        (r.first_offset, r.last_offset, r.state),
        (0, 4, RecordState::TxPending)
    );
    // Archived aborted data cannot be staged.
    let r = sp.stage(
        3,
        "m2",
        (PID, EPOCH),
        &[AckBatch::new(6, 6, vec![0])],
        false,
    );
    assert!(matches!(
        r,
        Err(ShareError::InvalidRecordState {
            reason: RecordStateReason::NotAcquired,
            ..
        })
    ));
    // Committing moves the SPSO past the staged records and the archived data to the marker.
    sp.apply_marker(PID, EPOCH, true).expect("running");
    assert_eq!(sp.start_offset(), 8);
    sp.check_invariants();
}

#[test]
fn a_lowered_delivery_limit_archives_on_abort() {
    let mut sp = SharePartition::new(config(5, 100), 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 0, 0);
    sp.expire_locks(LOCK).expect("running");
    acquire(&mut sp, "m1", 0, 0, LOCK);
    stage(&mut sp, "m1", &[(0, 0, vec![1])], LOCK + 1).expect("staged");
    sp.set_config(config(2, 100)).expect("valid");
    sp.apply_marker(PID, EPOCH, false).expect("running");
    assert_eq!(sp.start_offset(), 1, "second delivery of 2: archived");
}

#[test]
fn stage_all_stages_every_partition_or_none() {
    let a = fixture();
    let mut b = SharePartition::new(config(5, 100), 0, 0).expect("valid");
    acquire(&mut b, "m2", 0, 4, 0);
    let ok = [AckBatch::new(0, 4, vec![1])];
    // The second partition's records are held by another member: nothing is staged.
    let refused = stage_all(
        [(&a, &ok[..], false), (&b, &ok[..], false)],
        1,
        "m1",
        (PID, EPOCH),
    );
    let (index, error) = refused.expect_err("m2 holds the second partition's records");
    assert_eq!(index, 1);
    assert_eq!(error.error_code().0, 121);
    assert_eq!(a.tx_pending_count(), 0);
    assert_eq!(b.tx_pending_count(), 0);
    // Both accept: the copies are staged, each with the write that persists it.
    let mut b2 = SharePartition::new(config(5, 100), 0, 0).expect("valid");
    acquire(&mut b2, "m1", 0, 4, 0);
    let staged = stage_all(
        [(&a, &ok[..], false), (&b2, &ok[..], false)],
        1,
        "m1",
        (PID, EPOCH),
    )
    .expect("staged");
    assert_eq!(staged.len(), 2);
    for (copy, write) in &staged {
        assert_eq!(copy.tx_pending_count(), 5);
        assert!(write.is_some());
    }
    assert_eq!(
        a.tx_pending_count(),
        0,
        "the originals are untouched until installed"
    );
}

/// A group with a dead-letter queue, records 0..=9 acquired by m1.
fn dead_letter_fixture() -> SharePartition {
    let cfg = SharePartitionConfig {
        dead_letter: true,
        ..config(5, 100)
    };
    let mut sp = SharePartition::new(cfg, 0, 0).expect("valid");
    acquire(&mut sp, "m1", 0, 9, 0);
    sp
}

#[test]
fn a_reject_whose_transaction_carries_its_dead_letter_commits_to_archived() {
    let cfg = SharePartitionConfig {
        dead_letter: true,
        ..config(5, 100)
    };
    let mut p = Persisted::new();
    let mut sp = dead_letter_fixture();
    // 1..=2 carried in the transaction; 3 and 4 staged without (another request).
    let carried = [AckBatch::new(1, 2, vec![3])];
    p.write(
        sp.stage(1, "m1", (PID, EPOCH), &carried, true)
            .expect("staged"),
    );
    let plain = [AckBatch::new(3, 4, vec![3, 1])];
    p.write(
        sp.stage(1, "m1", (PID, EPOCH), &plain, false)
            .expect("staged"),
    );
    // The flag is persisted: a reload resolves as the live machine does.
    let mut reloaded = p.reload(cfg);
    assert_eq!(reloaded.persisted_view(), sp.persisted_view());
    let live = sp.apply_marker(PID, EPOCH + 1, true).expect("running");
    let replayed = reloaded
        .apply_marker(PID, EPOCH + 1, true)
        .expect("running");
    assert_eq!(live.write, replayed.write);
    let state = |o| state_of(&sp, o).map(|r| r.state);
    assert_eq!(state(1), Some(RecordState::Archived));
    assert_eq!(state(2), Some(RecordState::Archived));
    // Not carried: written after the commit, through ARCHIVING.
    assert_eq!(state(3), Some(RecordState::Archiving));
    assert_eq!(state(4), Some(RecordState::Acknowledged));
    sp.check_invariants();
}

#[test]
fn an_aborted_reject_that_carried_its_dead_letter_is_available_again() {
    let mut sp = dead_letter_fixture();
    sp.stage(1, "m1", (PID, EPOCH), &[AckBatch::new(0, 1, vec![3])], true)
        .expect("staged");
    sp.apply_marker(PID, EPOCH + 1, false).expect("running");
    assert_eq!(
        state_of(&sp, 0).map(|r| r.state),
        Some(RecordState::Available)
    );
    // The flag means nothing for ACCEPT and GAP: they resolve as always.
    let mut sp = dead_letter_fixture();
    sp.stage(
        1,
        "m1",
        (PID, EPOCH),
        &[AckBatch::new(1, 2, vec![1, 0])],
        true,
    )
    .expect("staged");
    sp.apply_marker(PID, EPOCH + 1, true).expect("running");
    let state = |o| state_of(&sp, o).map(|r| r.state);
    assert_eq!(state(1), Some(RecordState::Acknowledged));
    assert_eq!(state(2), Some(RecordState::Archived));
}

#[test]
fn the_dead_lettered_flag_is_a_twelfth_byte_only_when_set() {
    let flagged = StagedTxn {
        producer_id: PID,
        producer_epoch: EPOCH,
        ack_type: 3,
        dead_lettered: true,
    };
    let bytes = flagged.to_bytes();
    assert_eq!(bytes.len(), 12);
    assert_eq!(bytes[11], 1);
    assert_eq!(StagedTxn::from_bytes(&bytes), Some(flagged));
    let plain = StagedTxn {
        dead_lettered: false,
        ..flagged
    };
    assert_eq!(plain.to_bytes().len(), 11);
    assert_eq!(StagedTxn::from_bytes(&plain.to_bytes()), Some(plain));
    // An unknown flag, or a size of neither form, is refused rather than misread.
    let mut unknown = bytes.clone();
    unknown[11] = 2;
    assert_eq!(StagedTxn::from_bytes(&unknown), None);
    assert_eq!(StagedTxn::from_bytes(&bytes[..10]), None);
    assert_eq!(
        StagedTxn::from_bytes(&[bytes.clone(), vec![0]].concat()),
        None
    );
}
