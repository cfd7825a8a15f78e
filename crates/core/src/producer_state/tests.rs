use super::*;

const NOW: i64 = 1_000_000;

fn batch(id: i64, epoch: i16, seq: i32, count: i32) -> BatchInfo {
    BatchInfo {
        producer_id: ProducerId(id),
        producer_epoch: ProducerEpoch(epoch),
        base_sequence: seq,
        last_offset_delta: count - 1,
        max_timestamp: NOW,
        transactional: false,
        control: false,
    }
}

fn manager() -> ProducerStateManager {
    ProducerStateManager::new(ProducerStateConfig::default())
}

/// Checks and, if allowed, appends at `*end`; returns the decision.
fn produce(
    m: &mut ProducerStateManager,
    end: &mut i64,
    batches: &[BatchInfo],
) -> Result<Decision, ProducerStateError> {
    let decision = m.check(batches)?;
    if decision == Decision::Append {
        for b in batches {
            m.on_append(b, *end);
            *end += i64::from(b.last_offset_delta) + 1;
        }
    }
    Ok(decision)
}

#[test]
fn sequence_continues_and_duplicates_return_the_original_offsets() {
    let mut m = manager();
    let mut end = 0;
    assert_eq!(
        produce(&mut m, &mut end, &[batch(7, 0, 0, 3)]),
        Ok(Decision::Append)
    );
    assert_eq!(
        produce(&mut m, &mut end, &[batch(7, 0, 3, 2)]),
        Ok(Decision::Append)
    );
    assert_eq!(end, 5);
    match produce(&mut m, &mut end, &[batch(7, 0, 0, 3)]) {
        Ok(Decision::Duplicate(meta)) => {
            assert_eq!((meta.first_offset, meta.last_offset), (0, 2));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(end, 5, "a duplicate appends nothing");
    // Same first sequence but a different range is not a duplicate: it is out of order.
    let err = produce(&mut m, &mut end, &[batch(7, 0, 0, 4)]).unwrap_err();
    assert_eq!(err.error_code(), OUT_OF_ORDER_SEQUENCE_NUMBER);
}

#[test]
fn gaps_old_epochs_and_new_epochs() {
    let mut m = manager();
    let mut end = 0;
    produce(&mut m, &mut end, &[batch(1, 2, 0, 1)]).unwrap();
    let gap = produce(&mut m, &mut end, &[batch(1, 2, 5, 1)]).unwrap_err();
    assert_eq!(gap.error_code(), OUT_OF_ORDER_SEQUENCE_NUMBER);
    let old = produce(&mut m, &mut end, &[batch(1, 1, 1, 1)]).unwrap_err();
    assert_eq!(old.error_code(), INVALID_PRODUCER_EPOCH);
    let bad_start = produce(&mut m, &mut end, &[batch(1, 3, 1, 1)]).unwrap_err();
    assert_eq!(bad_start.error_code(), OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(
        produce(&mut m, &mut end, &[batch(1, 3, 0, 1)]),
        Ok(Decision::Append)
    );
    assert_eq!(m.entry(ProducerId(1)).unwrap().epoch(), ProducerEpoch(3));
    assert_eq!(m.entry(ProducerId(1)).unwrap().batches().len(), 1);
}

#[test]
fn unknown_producers_accept_any_sequence_and_negative_sequences_are_invalid() {
    let mut m = manager();
    let mut end = 0;
    assert_eq!(
        produce(&mut m, &mut end, &[batch(9, 4, 1234, 1)]),
        Ok(Decision::Append)
    );
    let err = produce(&mut m, &mut end, &[batch(10, 0, -1, 1)]).unwrap_err();
    assert_eq!(err.error_code(), INVALID_RECORD);
    // Non-idempotent batches are not checked.
    assert_eq!(
        produce(&mut m, &mut end, &[batch(-1, -1, -1, 3)]),
        Ok(Decision::Append)
    );
    assert_eq!(m.len(), 1);
}

#[test]
fn sequences_wrap_at_i32_max() {
    let mut m = manager();
    let mut end = 0;
    produce(&mut m, &mut end, &[batch(1, 0, i32::MAX - 1, 4)]).unwrap();
    // MAX-1, MAX, 0, 1
    assert_eq!(m.entry(ProducerId(1)).unwrap().last_sequence(), Some(1));
    assert_eq!(
        produce(&mut m, &mut end, &[batch(1, 0, 2, 1)]),
        Ok(Decision::Append)
    );
    assert_eq!(increment_sequence(i32::MAX, 1), 0);
    assert!(in_sequence(i32::MAX, 0));
}

#[test]
fn a_set_is_validated_as_a_whole_before_anything_is_appended() {
    let mut m = manager();
    let mut end = 0;
    produce(&mut m, &mut end, &[batch(1, 0, 0, 1)]).unwrap();
    // Second batch continues the first one within the same set.
    assert_eq!(
        produce(&mut m, &mut end, &[batch(1, 0, 1, 2), batch(1, 0, 3, 1)]),
        Ok(Decision::Append)
    );
    // A gap in the second batch refuses the set; the first batch is not recorded.
    let err = produce(&mut m, &mut end, &[batch(1, 0, 4, 1), batch(1, 0, 9, 1)]).unwrap_err();
    assert_eq!(err.error_code(), OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(m.entry(ProducerId(1)).unwrap().last_sequence(), Some(3));
}

#[test]
fn only_the_last_five_batches_are_deduplicated() {
    let mut m = manager();
    let mut end = 0;
    for seq in 0..7 {
        produce(&mut m, &mut end, &[batch(1, 0, seq, 1)]).unwrap();
    }
    assert!(matches!(
        m.check(&[batch(1, 0, 2, 1)]),
        Ok(Decision::Duplicate(_))
    ));
    // Sequence 1 is no longer cached: Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER.
    assert_eq!(
        m.check(&[batch(1, 0, 1, 1)]).unwrap_err().error_code(),
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
}

fn txn(id: i64, epoch: i16, seq: i32, count: i32) -> BatchInfo {
    BatchInfo {
        transactional: true,
        ..batch(id, epoch, seq, count)
    }
}

fn marker(id: i64, epoch: i16) -> BatchInfo {
    BatchInfo {
        transactional: true,
        control: true,
        base_sequence: NO_SEQUENCE,
        ..batch(id, epoch, NO_SEQUENCE, 1)
    }
}

/// Checks and appends a marker at `*end`; returns what it completed.
fn end_txn(
    m: &mut ProducerStateManager,
    end: &mut i64,
    id: i64,
    epoch: i16,
) -> Result<Option<CompletedTxn>, ProducerStateError> {
    m.check_marker(ProducerId(id), ProducerEpoch(epoch), 0)?;
    let done = m.on_append(&marker(id, epoch), *end);
    *end += 1;
    Ok(done)
}

#[test]
fn an_open_transaction_counts_only_at_its_own_epoch() {
    let mut m = manager();
    let mut end = 0;
    assert!(!m.has_ongoing_txn(ProducerId(1), ProducerEpoch(5)));
    produce(&mut m, &mut end, &[txn(1, 5, 0, 2)]).unwrap();
    assert!(m.has_ongoing_txn(ProducerId(1), ProducerEpoch(5)));
    // Transaction version 2: EndTxn bumped the epoch to 6 and the marker is not here yet; a
    // batch at 6 belongs to the next transaction, not to the one still open at 5.
    assert!(!m.has_ongoing_txn(ProducerId(1), ProducerEpoch(6)));
    assert!(!m.has_ongoing_txn(ProducerId(2), ProducerEpoch(5)));
    end_txn(&mut m, &mut end, 1, 6).unwrap();
    assert!(!m.has_ongoing_txn(ProducerId(1), ProducerEpoch(6)));
}

#[test]
fn transactional_batches_start_a_transaction_and_a_marker_ends_it() {
    let mut m = manager();
    let mut end = 0;
    produce(&mut m, &mut end, &[batch(1, 5, 0, 2)]).unwrap();
    assert_eq!(m.first_unstable_offset(), None);
    assert_eq!(
        produce(&mut m, &mut end, &[txn(1, 5, 2, 3)]),
        Ok(Decision::Append)
    );
    assert_eq!(
        m.entry(ProducerId(1)).unwrap().current_txn_first_offset(),
        Some(2)
    );
    // A second batch of the same transaction keeps the first offset.
    produce(&mut m, &mut end, &[txn(1, 5, 5, 1)]).unwrap();
    produce(&mut m, &mut end, &[txn(2, 0, 0, 1)]).unwrap();
    assert_eq!(m.first_unstable_offset(), Some(2));
    assert_eq!(
        m.ongoing_txns().collect::<Vec<_>>(),
        vec![(2, ProducerId(1)), (6, ProducerId(2))]
    );
    // Non-transactional batch during the transaction.
    let err = produce(&mut m, &mut end, &[batch(1, 5, 6, 1)]).unwrap_err();
    assert_eq!(err.error_code(), INVALID_TXN_STATE);
    // Zombie transactional batch.
    let err = produce(&mut m, &mut end, &[txn(1, 4, 6, 1)]).unwrap_err();
    assert_eq!(err.error_code(), INVALID_PRODUCER_EPOCH);
    // Gaps are still gaps inside a transaction.
    let err = produce(&mut m, &mut end, &[txn(1, 5, 9, 1)]).unwrap_err();
    assert_eq!(err.error_code(), OUT_OF_ORDER_SEQUENCE_NUMBER);
    // Markers: an old epoch is refused, the current one ends the transaction.
    assert_eq!(
        end_txn(&mut m, &mut end, 1, 4).unwrap_err().error_code(),
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        end_txn(&mut m, &mut end, 1, 5),
        Ok(Some(CompletedTxn {
            producer_id: ProducerId(1),
            first_offset: 2,
            last_offset: 7
        }))
    );
    assert_eq!(m.first_unstable_offset(), Some(6));
    // A second marker ends nothing but is allowed.
    assert_eq!(end_txn(&mut m, &mut end, 1, 5), Ok(None));
    // After the marker, plain batches are fine again.
    assert_eq!(
        produce(&mut m, &mut end, &[batch(1, 5, 6, 1)]),
        Ok(Decision::Append)
    );
    assert!(m.ongoing_consistent());
}

#[test]
fn a_set_mixing_transactional_and_plain_batches_of_one_producer_is_refused() {
    let mut m = manager();
    let mut end = 0;
    let err = produce(&mut m, &mut end, &[txn(1, 0, 0, 1), batch(1, 0, 1, 1)]).unwrap_err();
    assert_eq!(err.error_code(), INVALID_TXN_STATE);
    assert!(m.is_empty());
    assert_eq!(m.first_unstable_offset(), None);
}

#[test]
fn transaction_version_2_markers_bump_the_epoch() {
    let mut m = manager();
    let mut end = 0;
    produce(&mut m, &mut end, &[txn(1, 3, 0, 2)]).unwrap();
    // TV2: the coordinator writes the marker with epoch + 1.
    assert!(end_txn(&mut m, &mut end, 1, 4).unwrap().is_some());
    let e = m.entry(ProducerId(1)).unwrap();
    assert_eq!(e.epoch(), ProducerEpoch(4));
    assert_eq!(e.last_sequence(), None);
    // The old epoch is now fenced, the new one starts at sequence 0.
    assert_eq!(
        produce(&mut m, &mut end, &[txn(1, 3, 2, 1)])
            .unwrap_err()
            .error_code(),
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        produce(&mut m, &mut end, &[txn(1, 4, 0, 1)]),
        Ok(Decision::Append)
    );
    assert_eq!(m.first_unstable_offset(), Some(3));
    // A marker for an unknown producer creates it (as Kafka does) and ends nothing.
    assert_eq!(end_txn(&mut m, &mut end, 9, 0), Ok(None));
    assert_eq!(m.entry(ProducerId(9)).unwrap().epoch(), ProducerEpoch(0));
}

#[test]
fn ongoing_transactions_are_not_expired_and_survive_restore() {
    let mut m = ProducerStateManager::new(ProducerStateConfig {
        producer_id_expiration: Duration::from_millis(1000),
        producers_max: 2,
    });
    let mut a = txn(1, 0, 0, 1);
    a.max_timestamp = 100;
    let mut b = batch(2, 0, 0, 1);
    b.max_timestamp = 200;
    m.on_append(&a, 10);
    m.on_append(&b, 11);
    assert_eq!(m.expire(5000), 1);
    assert_eq!(m.first_unstable_offset(), Some(10));
    let entry = m.entry(ProducerId(1)).unwrap().clone();
    let mut restored = ProducerStateManager::new(*m.config());
    restored.restore(ProducerId(1), entry.clone());
    restored.restore(ProducerId(1), entry);
    assert_eq!(restored.first_unstable_offset(), Some(10));
    assert!(restored.ongoing_consistent());
    // Eviction of a producer with a transaction (all have one) keeps the index in step.
    let mut c = txn(3, 0, 0, 1);
    c.max_timestamp = 300;
    let mut d = txn(4, 0, 0, 1);
    d.max_timestamp = 400;
    restored.on_append(&c, 12);
    restored.on_append(&d, 13);
    assert_eq!(restored.len(), 2);
    assert_eq!(restored.first_unstable_offset(), Some(12));
    assert!(restored.ongoing_consistent());
}

#[test]
fn idle_producers_expire_and_the_oldest_is_evicted_when_full() {
    let mut m = ProducerStateManager::new(ProducerStateConfig {
        producer_id_expiration: Duration::from_millis(1000),
        producers_max: 2,
    });
    let mut a = batch(1, 0, 0, 1);
    a.max_timestamp = 100;
    let mut b = batch(2, 0, 0, 1);
    b.max_timestamp = 200;
    let mut c = batch(3, 0, 0, 1);
    c.max_timestamp = 300;
    m.on_append(&a, 0);
    m.on_append(&b, 1);
    m.on_append(&c, 2);
    assert_eq!(m.len(), 2);
    assert!(m.entry(ProducerId(1)).is_none(), "oldest evicted");
    assert_eq!(m.expire(1199), 0);
    assert_eq!(m.expire(1200), 1);
    assert!(m.entry(ProducerId(2)).is_none());
    assert_eq!(m.expire(1300), 1);
    assert!(m.is_empty());
}

#[test]
fn restore_keeps_the_newest_batches() {
    let metas = (0..8).map(|i| BatchMetadata {
        first_sequence: i,
        last_sequence: i,
        first_offset: i64::from(i),
        last_offset: i64::from(i),
        max_timestamp: 0,
    });
    let entry = ProducerEntry::restore(ProducerEpoch(1), metas, 0, None, -1);
    assert_eq!(entry.batches().len(), BATCHES_RETAINED);
    assert_eq!(entry.batches().next().unwrap().first_sequence, 3);
}

#[test]
fn markers_from_an_older_coordinator_are_fenced() {
    let mut m = manager();
    let mut end = 0;
    let mut t = batch(1, 0, 0, 1);
    t.transactional = true;
    m.check(&[t]).unwrap();
    m.on_append(&t, end);
    end += 1;
    // No marker yet: any coordinator epoch is accepted.
    assert!(m.check_marker(ProducerId(1), ProducerEpoch(0), 3).is_ok());
    m.on_append(&marker(1, 0), end);
    m.on_marker_coordinator_epoch(ProducerId(1), 3);
    assert_eq!(
        m.entry(ProducerId(1)).map(ProducerEntry::coordinator_epoch),
        Some(3)
    );
    let fenced = m
        .check_marker(ProducerId(1), ProducerEpoch(0), 2)
        .unwrap_err();
    assert_eq!(fenced.error_code(), 52);
    assert!(m.check_marker(ProducerId(1), ProducerEpoch(0), 3).is_ok());
    assert!(m.check_marker(ProducerId(1), ProducerEpoch(0), 4).is_ok());
    // The producer epoch is checked first, as in Kafka's appendEndTxnMarker.
    let both = m
        .check_marker(ProducerId(1), ProducerEpoch(-1), 1)
        .unwrap_err();
    assert_eq!(both.error_code(), 47);
}

// Invariants checked in production (issue 28 point 6). No batch sequence can break one (the
// property tests check that), so these put the ongoing-transaction index out of step by hand;
// the checks that find it are the ones release builds run.

/// The state is stopped on `violation`: every produce and marker is refused.
fn assert_stopped(m: &mut ProducerStateManager, violation: &ProducerStateViolation) {
    assert_eq!(m.violation(), Some(violation));
    let stopped = ProducerStateError::Stopped(violation.clone());
    assert_eq!(m.check(&[batch(9, 0, 0, 1)]), Err(stopped.clone()));
    assert_eq!(stopped.error_code(), -1, "UNKNOWN_SERVER_ERROR");
    assert_eq!(
        m.check_marker(ProducerId(9), ProducerEpoch(0), 0),
        Err(stopped.clone())
    );
    m.clear();
    assert_eq!(
        m.check(&[batch(9, 0, 0, 1)]),
        Err(stopped),
        "clear keeps the stop"
    );
}

#[test]
fn a_transaction_ending_outside_the_ongoing_index_stops_the_state() {
    let mut m = manager();
    let mut end = 0;
    produce(&mut m, &mut end, &[txn(7, 0, 0, 3)]).unwrap();
    assert_eq!(m.first_unstable_offset(), Some(0));
    m.ongoing.clear();
    m.on_append(&marker(7, 0), end);
    let violation = ProducerStateViolation::OngoingIndex {
        producer_id: ProducerId(7),
        first_offset: 0,
        indexed: false,
    };
    assert_eq!(violation.invariant(), "ongoing-index");
    assert_stopped(&mut m, &violation);
}

#[test]
fn a_transaction_starting_where_the_index_already_has_it_stops_the_state() {
    let mut m = manager();
    m.ongoing.insert((0, ProducerId(7)));
    m.on_append(&txn(7, 0, 0, 3), 0);
    let violation = ProducerStateViolation::OngoingIndex {
        producer_id: ProducerId(7),
        first_offset: 0,
        indexed: true,
    };
    assert_stopped(&mut m, &violation);
    // A snapshot entry restored over an index that already holds it: the same.
    let mut m = manager();
    m.ongoing.insert((4, ProducerId(8)));
    m.restore(
        ProducerId(8),
        ProducerEntry::restore(ProducerEpoch(0), Vec::new(), NOW, Some(4), -1),
    );
    let violation = ProducerStateViolation::OngoingIndex {
        producer_id: ProducerId(8),
        first_offset: 4,
        indexed: true,
    };
    assert_stopped(&mut m, &violation);
}

#[test]
fn a_batch_the_broker_writes_without_a_sequence_joins_the_transaction_not_the_sequence() {
    let mut m = manager();
    let mut end = 0;
    // The client's first batch of the transaction on this partition.
    assert_eq!(
        produce(&mut m, &mut end, &[txn(9, 2, 0, 2)]),
        Ok(Decision::Append)
    );
    // The broker appends five dead letters for the producer's transaction (no sequence).
    let internal = txn(9, 2, NO_SEQUENCE, 5);
    assert_eq!(m.on_append(&internal, end), None);
    end += 5;
    // The client's sequence goes on where it was: 2, not after the broker's batch.
    assert_eq!(
        produce(&mut m, &mut end, &[txn(9, 2, 2, 1)]),
        Ok(Decision::Append)
    );
    // A transaction the broker's batch starts is ongoing until the marker ends it.
    let mut m = manager();
    assert_eq!(m.on_append(&txn(5, 1, NO_SEQUENCE, 1), 40), None);
    assert_eq!(m.first_unstable_offset(), Some(40));
    let mut at = 41;
    let done = end_txn(&mut m, &mut at, 5, 1).expect("marker accepted");
    assert_eq!(
        done.map(|t| (t.first_offset, t.last_offset)),
        Some((40, 41))
    );
    assert_eq!(m.first_unstable_offset(), None);
    // ...and the client's first batch at that epoch may start at sequence 0.
    assert_eq!(
        produce(&mut m, &mut at, &[txn(5, 1, 0, 1)]),
        Ok(Decision::Append)
    );
}
