use super::*;

fn config() -> AccumulatorConfig {
    AccumulatorConfig {
        batch_size: 100,
        linger_ms: 10,
        buffer_memory: 1_000,
        max_in_flight: 2,
        delivery_timeout_ms: 1_000,
        retry_backoff_ms: 50,
        retry_backoff_max_ms: 200,
    }
}

const P: u8 = 0;

fn seq() -> impl FnMut(usize) -> i32 {
    let mut next = 0i32;
    move |n| {
        let base = next;
        next += n as i32;
        base
    }
}

#[test]
fn records_fill_a_batch_and_a_full_batch_goes_without_lingering() {
    let mut acc = Accumulator::new(config());
    let (a, closed) = acc.append(&P, 40, 0).unwrap();
    assert_eq!((a.index, closed), (0, None));
    let (b, _) = acc.append(&P, 40, 0).unwrap();
    assert_eq!((b.batch, b.index), (a.batch, 1));
    assert_eq!(acc.ready(0), (vec![], Some(10)), "lingering");
    // The third record does not fit: the batch closes and is ready at once.
    let (c, closed) = acc.append(&P, 40, 1).unwrap();
    assert_eq!(closed, Some(a.batch));
    assert_ne!(c.batch, a.batch);
    assert_eq!(acc.ready(1).0, vec![P]);
    let d = acc.drain(&P, 1, None).unwrap();
    assert_eq!(
        (d.batch, d.records, d.bytes, d.attempt),
        (a.batch, 2, 80, 1)
    );
    // The next batch lingers until 11.
    assert_eq!(acc.drain(&P, 5, None), None);
    assert_eq!(acc.drain(&P, 11, None).unwrap().batch, c.batch);
    assert_eq!(acc.memory_in_use(), 120);
}

#[test]
fn buffer_memory_bounds_what_is_not_completed() {
    let mut acc = Accumulator::new(config());
    for _ in 0..10 {
        acc.append(&P, 100, 0).unwrap();
    }
    assert_eq!(
        acc.append(&P, 1, 0),
        Err(AppendError::BufferFull {
            used: 1_000,
            max: 1_000
        })
    );
    assert_eq!(
        acc.append(&P, 1_001, 0),
        Err(AppendError::RecordTooLarge {
            size: 1_001,
            max: 1_000
        })
    );
    let d = acc.drain(&P, 0, None).unwrap();
    let done = acc
        .complete(&P, d.batch, SendResult::Ok { base_offset: 0 }, false, 1)
        .unwrap();
    assert_eq!(done.outcome, Completed::Written { base_offset: 0 });
    assert_eq!(acc.memory_in_use(), 900);
    acc.append(&P, 100, 1).unwrap();
}

#[test]
fn at_most_max_in_flight_batches_per_partition() {
    let mut acc = Accumulator::new(config());
    for _ in 0..4 {
        acc.append(&P, 100, 0).unwrap();
    }
    assert!(acc.drain(&P, 0, None).is_some());
    assert!(acc.drain(&P, 0, None).is_some());
    assert_eq!(acc.drain(&P, 0, None), None);
    assert_eq!(acc.ready(0).0, Vec::<u8>::new());
    // Another partition is not held back.
    acc.append(&1, 100, 0).unwrap();
    assert_eq!(acc.ready(0).0, vec![1]);
}

#[test]
fn a_retried_batch_keeps_its_sequence_and_goes_back_in_order() {
    let mut acc = Accumulator::new(config());
    for _ in 0..3 {
        acc.append(&P, 100, 0).unwrap();
    }
    let mut s = seq();
    let first = acc.drain(&P, 0, Some(&mut s)).unwrap();
    let second = acc.drain(&P, 0, Some(&mut s)).unwrap();
    assert_eq!(
        (first.base_sequence, second.base_sequence),
        (Some(0), Some(1))
    );
    // Both fail (the second out of order behind the first); answered in order.
    let timeout = SendResult::Err(ErrorCode::REQUEST_TIMED_OUT);
    assert_eq!(acc.complete(&P, first.batch, timeout, true, 10), None);
    let ooo = SendResult::Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(acc.complete(&P, second.batch, ooo, true, 10), None);
    // Backoff: not before 60.
    assert_eq!(acc.drain(&P, 59, Some(&mut s)), None);
    let again = acc.drain(&P, 60, Some(&mut s)).unwrap();
    assert_eq!(
        (again.batch, again.base_sequence, again.attempt),
        (first.batch, Some(0), 2)
    );
    // The second retry waits until sequence 0 is answered (as Java's accumulator does).
    assert_eq!(acc.drain(&P, 60, Some(&mut s)), None);
    acc.complete(
        &P,
        again.batch,
        SendResult::Ok { base_offset: 0 },
        false,
        61,
    );
    let again2 = acc.drain(&P, 61, Some(&mut s)).unwrap();
    assert_eq!(
        (again2.batch, again2.base_sequence),
        (second.batch, Some(1))
    );
    // The never-sent third batch gets the next sequence after them.
    let third = acc.drain(&P, 61, Some(&mut s)).unwrap();
    assert_eq!(third.base_sequence, Some(2));
}

#[test]
fn a_retried_batch_waits_for_lower_sequences_in_flight() {
    let mut acc = Accumulator::new(AccumulatorConfig {
        max_in_flight: 5,
        ..config()
    });
    for _ in 0..2 {
        acc.append(&P, 100, 0).unwrap();
    }
    let mut s = seq();
    let first = acc.drain(&P, 0, Some(&mut s)).unwrap();
    let second = acc.drain(&P, 0, Some(&mut s)).unwrap();
    // The second's answer comes first (a retriable error) while the first is in flight.
    let err = SendResult::Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    acc.complete(&P, second.batch, err, true, 0);
    assert_eq!(
        acc.drain(&P, 1_000, Some(&mut s)),
        None,
        "sequence 0 still in flight"
    );
    acc.complete(
        &P,
        first.batch,
        SendResult::Ok { base_offset: 0 },
        false,
        10,
    );
    assert_eq!(
        acc.drain(&P, 100, Some(&mut s)).unwrap().batch,
        second.batch
    );
}

#[test]
fn the_delivery_timeout_fails_batches_instead_of_sending_them() {
    let mut acc = Accumulator::new(config());
    acc.append(&P, 100, 0).unwrap();
    acc.append(&P, 100, 500).unwrap();
    let d = acc.drain(&P, 0, None).unwrap();
    // A retriable error after the timeout completes the batch with REQUEST_TIMED_OUT.
    let done = acc
        .complete(
            &P,
            d.batch,
            SendResult::Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
            true,
            1_000,
        )
        .unwrap();
    assert_eq!(
        done.outcome,
        Completed::Failed {
            code: ErrorCode::REQUEST_TIMED_OUT
        }
    );
    // The waiting batch expires at 1_500.
    assert!(acc.expire(1_499).is_empty());
    let expired = acc.expire(1_500);
    assert_eq!(expired.len(), 1);
    assert_eq!((acc.memory_in_use(), acc.incomplete()), (0, 0));
}

#[test]
fn a_duplicate_sequence_is_a_success_and_a_fatal_error_fails_the_batch() {
    let mut acc = Accumulator::new(config());
    acc.append(&P, 100, 0).unwrap();
    acc.append(&P, 100, 0).unwrap();
    let a = acc.drain(&P, 0, None).unwrap();
    let b = acc.drain(&P, 0, None).unwrap();
    let dup = SendResult::Err(ErrorCode::DUPLICATE_SEQUENCE_NUMBER);
    assert_eq!(
        acc.complete(&P, a.batch, dup, false, 1).unwrap().outcome,
        Completed::Written { base_offset: -1 }
    );
    let fenced = SendResult::Err(ErrorCode::PRODUCER_FENCED);
    assert_eq!(
        acc.complete(&P, b.batch, fenced, false, 1).unwrap().outcome,
        Completed::Failed {
            code: ErrorCode::PRODUCER_FENCED
        }
    );
    // An unknown or repeated answer changes nothing.
    assert_eq!(acc.complete(&P, b.batch, dup, false, 1), None);
}

#[test]
fn flush_and_close_send_without_lingering_and_abort_fails_what_waits() {
    let mut acc = Accumulator::new(config());
    acc.append(&P, 10, 0).unwrap();
    assert!(acc.ready(0).0.is_empty());
    acc.begin_flush();
    assert_eq!(acc.ready(0).0, vec![P]);
    let d = acc.drain(&P, 0, None).unwrap();
    assert!(!acc.flush_done());
    acc.complete(&P, d.batch, SendResult::Ok { base_offset: 7 }, false, 1);
    assert!(acc.flush_done());
    acc.append(&P, 10, 2).unwrap();
    let aborted = acc.abort_waiting(ErrorCode::TRANSACTION_ABORTABLE);
    assert_eq!(aborted.len(), 1);
    assert_eq!(acc.memory_in_use(), 0);
    acc.close();
    assert_eq!(acc.append(&P, 10, 3), Err(AppendError::Closed));
}
