use super::*;
use AcknowledgeType::{Accept, Gap, Reject, Release, Renew};

const P: u8 = 0;

fn acquired(first: i64, last: i64, delivery_count: i16) -> Acquired {
    Acquired {
        first_offset: first,
        last_offset: last,
        delivery_count,
    }
}

fn batch(first: i64, last: i64, types: &[AcknowledgeType]) -> AckBatch {
    AckBatch {
        first_offset: first,
        last_offset: last,
        types: types.to_vec(),
    }
}

/// A consumer that polled once and got offsets 0..=4 with records.
fn delivered(mode: AcknowledgementMode) -> Acknowledgements<u8> {
    let mut a = Acknowledgements::new(mode);
    a.begin_poll().unwrap();
    a.deliver(&P, &[acquired(0, 4, 1)], &[0, 1, 2, 3, 4])
        .unwrap();
    a
}

#[test]
fn implicit_mode_accepts_the_last_poll_at_the_next_poll() {
    let mut a = delivered(AcknowledgementMode::Implicit);
    assert_eq!(a.acknowledge(&P, 0, Accept), Err(AckError::ImplicitMode));
    // A fetch in the background piggybacks nothing of records the application still has.
    assert_eq!(a.take(&P), vec![]);
    a.begin_poll().unwrap();
    assert_eq!((a.waiting(), a.pending()), (0, 5));
    let sent = a.take(&P);
    assert_eq!(sent, vec![batch(0, 4, &[Accept])]);
    let outcomes = a.on_sent(&P, &sent, 0);
    assert_eq!(outcomes.len(), 5);
    assert_eq!(a.pending() + a.waiting(), 0);
}

#[test]
fn explicit_mode_refuses_a_poll_while_records_wait() {
    let mut a = delivered(AcknowledgementMode::Explicit);
    a.acknowledge(&P, 0, Accept).unwrap();
    assert_eq!(a.begin_poll(), Err(AckError::Unacknowledged));
    assert_eq!(
        AckError::Unacknowledged.to_string(),
        "All records must be acknowledged in explicit acknowledgement mode."
    );
    for (o, t) in [(1, Release), (2, Reject), (3, Accept), (4, Accept)] {
        a.acknowledge(&P, o, t).unwrap();
    }
    assert_eq!(a.acknowledge(&P, 0, Reject), Err(AckError::NotWaiting(0)));
    assert_eq!(a.acknowledge(&P, 9, Accept), Err(AckError::NotWaiting(9)));
    assert_eq!(a.acknowledge(&P, 1, Gap), Err(AckError::Gap));
    a.begin_poll().unwrap();
    assert_eq!(
        a.take(&P),
        vec![batch(0, 4, &[Accept, Release, Reject, Accept, Accept])]
    );
}

#[test]
fn offsets_without_records_are_gaps_and_batches_split_at_holes() {
    let mut a = Acknowledgements::new(AcknowledgementMode::Explicit);
    a.deliver(&P, &[acquired(0, 3, 1), acquired(6, 7, 2)], &[0, 2, 6, 7])
        .unwrap();
    assert_eq!((a.waiting(), a.pending()), (4, 2));
    assert_eq!(a.delivery_count(&P, 6), Some(2));
    for o in [0, 2, 6, 7] {
        a.acknowledge(&P, o, Accept).unwrap();
    }
    assert_eq!(
        a.take(&P),
        vec![
            batch(0, 3, &[Accept, Gap, Accept, Gap]),
            batch(6, 7, &[Accept])
        ]
    );
}

#[test]
fn renew_keeps_the_record_and_a_poll_does_not_wait_for_it() {
    let mut a = delivered(AcknowledgementMode::Explicit);
    for o in 0..4 {
        a.acknowledge(&P, o, Accept).unwrap();
    }
    a.acknowledge(&P, 4, Renew).unwrap();
    let sent = a.take(&P);
    assert_eq!(
        sent,
        vec![batch(0, 4, &[Accept, Accept, Accept, Accept, Renew])]
    );
    a.on_sent(&P, &sent, 0);
    assert_eq!(a.waiting(), 1, "renewed: still held");
    a.begin_poll().unwrap();
    a.acknowledge(&P, 4, Accept).unwrap();
    assert_eq!(a.take(&P), vec![batch(4, 4, &[Accept])]);
    // A failed renewal loses the record.
    let mut a = delivered(AcknowledgementMode::Explicit);
    a.acknowledge(&P, 0, Renew).unwrap();
    let sent = a.take(&P);
    let outcomes = a.on_sent(&P, &sent, 121);
    assert_eq!(outcomes[0].error_code, 121);
    assert_eq!(a.acknowledge(&P, 0, Accept), Err(AckError::NotWaiting(0)));
}

#[test]
fn a_transaction_drains_accepts_and_rejects_and_the_consumer_never_sends_them() {
    let mut a = delivered(AcknowledgementMode::Explicit);
    a.acknowledge(&P, 0, Accept).unwrap();
    a.acknowledge(&P, 1, Reject).unwrap();
    let txn = a.for_transaction().unwrap();
    assert_eq!(txn[&P], vec![batch(0, 1, &[Accept, Reject])]);
    assert_eq!(a.take(&P), vec![]);
    assert_eq!(a.acknowledge(&P, 0, Release), Err(AckError::NotWaiting(0)));
    // Close releases what is still waiting, and nothing of the transaction's.
    assert_eq!(a.close()[&P], vec![batch(2, 4, &[Release])]);
    assert_eq!(a.waiting() + a.pending(), 0);
}

#[test]
fn a_pending_release_or_renew_refuses_the_transaction_and_drains_nothing() {
    for t in [Release, Renew] {
        let mut a = delivered(AcknowledgementMode::Explicit);
        a.acknowledge(&P, 0, Accept).unwrap();
        a.acknowledge(&P, 1, t).unwrap();
        assert_eq!(a.for_transaction(), Err(AckError::NotTransactional(t)));
        assert_eq!(a.pending(), 2);
        assert_eq!(a.take(&P), vec![batch(0, 1, &[Accept, t])]);
    }
    let mut a = delivered(AcknowledgementMode::Implicit);
    assert_eq!(a.for_transaction(), Err(AckError::ImplicitMode));
}

#[test]
fn untrusted_acquired_ranges_are_refused_and_change_nothing() {
    let mut a: Acknowledgements<u8> = Acknowledgements::new(AcknowledgementMode::Explicit);
    for (ranges, present) in [
        (vec![acquired(5, 4, 1)], vec![]),
        (vec![acquired(-1, 4, 1)], vec![]),
        (vec![acquired(0, 4, 1), acquired(4, 6, 1)], vec![]),
        (vec![acquired(6, 7, 1), acquired(0, 4, 1)], vec![]),
        (vec![acquired(0, ACQUIRED_OFFSETS_MAX, 1)], vec![]),
        (vec![acquired(0, 4, 1)], vec![9]),
    ] {
        assert!(matches!(
            a.deliver(&P, &ranges, &present),
            Err(AckError::InvalidAcquired(_))
        ));
        assert_eq!(a.waiting() + a.pending(), 0);
    }
}

#[test]
fn a_redelivered_offset_replaces_the_old_delivery_and_forget_drops_a_partition() {
    let mut a = delivered(AcknowledgementMode::Explicit);
    a.deliver(&P, &[acquired(3, 4, 2)], &[3, 4]).unwrap();
    assert_eq!(a.delivery_count(&P, 4), Some(2));
    assert_eq!(a.waiting(), 5);
    assert_eq!(a.forget(&P), vec![0, 1, 2, 3, 4]);
    assert_eq!(a.waiting(), 0);
    a.begin_poll().unwrap();
}

#[test]
fn commit_in_implicit_mode_accepts_the_last_poll() {
    let mut a = delivered(AcknowledgementMode::Implicit);
    assert_eq!(a.commit()[&P], vec![batch(0, 4, &[Accept])]);
    assert_eq!(a.waiting(), 0);
    let mut a = delivered(AcknowledgementMode::Explicit);
    assert!(
        a.commit().is_empty(),
        "explicit: only what was acknowledged"
    );
    assert_eq!(a.waiting(), 5);
}
