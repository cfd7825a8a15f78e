use super::*;

const PID: ProducerIdEpoch = ProducerIdEpoch { id: 7, epoch: 3 };

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("out", partition)
}

fn manager(v2: bool) -> TransactionManager {
    TransactionManager::new(
        TxnConfig {
            transactional_id: Some("tid".into()),
            transaction_timeout_ms: 60_000,
            two_phase_commit: false,
        },
        v2,
    )
}

/// A manager in `Ready` with producer `PID`.
fn ready(v2: bool) -> TransactionManager {
    let mut tm = manager(v2);
    tm.init_transactions().unwrap();
    assert_eq!(
        tm.poll_request(),
        Some(CoordinatorRequest::InitProducerId {
            transactional_id: Some("tid".into()),
            transaction_timeout_ms: 60_000,
            two_phase_commit: TwoPhaseCommit::Disabled,
            producer: None,
        })
    );
    assert_eq!(
        tm.on_response(CoordinatorResponse::InitProducerId(Ok(PID))),
        Next::Continue
    );
    assert_eq!(tm.state(), TxnState::Ready);
    tm
}

/// A version 2 manager committing a transaction of one successful produce (EndTxn due).
fn committing() -> TransactionManager {
    let mut tm = ready(true);
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    tm.finish_operation(op, ErrorCode::NONE);
    assert_eq!(tm.begin_commit(), Ok(Completion::Pending));
    tm
}

fn end(commit: bool, producer: ProducerIdEpoch) -> Option<CoordinatorRequest> {
    Some(CoordinatorRequest::EndTxn {
        transactional_id: "tid".into(),
        producer,
        commit,
    })
}

fn bumped(p: ProducerIdEpoch) -> ProducerIdEpoch {
    ProducerIdEpoch {
        id: p.id,
        epoch: p.epoch + 1,
    }
}

#[test]
fn a_version_2_transaction_commits_and_takes_the_bumped_epoch() {
    let mut tm = ready(true);
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    assert!(
        tm.operation_ready(op),
        "version 2 adds partitions implicitly"
    );
    assert_eq!(tm.next_sequence(&tp(0), 5), 0);
    assert_eq!(tm.next_sequence(&tp(0), 5), 5);
    assert_eq!(tm.finish_operation(op, ErrorCode::NONE), Next::Continue);
    assert_eq!(tm.begin_commit(), Ok(Completion::Pending));
    assert_eq!(tm.poll_request(), end(true, PID));
    // Handed out again until answered.
    assert_eq!(tm.poll_request(), end(true, PID));
    assert_eq!(
        tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(bumped(PID))))),
        Next::Continue
    );
    assert_eq!(tm.state(), TxnState::Ready);
    assert_eq!(tm.producer(), Some(bumped(PID)));
    assert_eq!(
        tm.next_sequence(&tp(0), 1),
        0,
        "a new epoch restarts sequences"
    );
    assert_eq!(tm.poll_request(), None);
}

#[test]
fn a_version_1_transaction_adds_partitions_and_offsets_first() {
    let mut tm = ready(false);
    tm.begin().unwrap();
    let a = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    let b = tm.start_operation(Operation::Produce(tp(1))).unwrap();
    assert!(!tm.operation_ready(a));
    assert_eq!(
        tm.poll_request(),
        Some(CoordinatorRequest::AddPartitionsToTxn {
            transactional_id: "tid".into(),
            producer: PID,
            partitions: vec![tp(0), tp(1)],
        })
    );
    assert_eq!(
        tm.on_response(CoordinatorResponse::AddPartitionsToTxn(vec![
            (tp(0), ErrorCode::NONE),
            (tp(1), ErrorCode::NONE),
        ])),
        Next::Continue
    );
    assert!(tm.operation_ready(a) && tm.operation_ready(b));
    let offsets = tm
        .start_operation(Operation::OffsetCommit {
            group_id: "g".into(),
        })
        .unwrap();
    assert!(!tm.operation_ready(offsets));
    assert_eq!(
        tm.poll_request(),
        Some(CoordinatorRequest::AddOffsetsToTxn {
            transactional_id: "tid".into(),
            producer: PID,
            group_id: "g".into(),
        })
    );
    assert_eq!(
        tm.on_response(CoordinatorResponse::AddOffsetsToTxn(ErrorCode::NONE)),
        Next::Continue
    );
    assert!(tm.operation_ready(offsets));
    for op in [a, b, offsets] {
        assert_eq!(tm.finish_operation(op, ErrorCode::NONE), Next::Continue);
    }
    assert_eq!(tm.begin_commit(), Ok(Completion::Pending));
    assert_eq!(tm.poll_request(), end(true, PID));
    // Version 1 keeps its epoch.
    tm.on_response(CoordinatorResponse::EndTxn(Ok(None)));
    assert_eq!((tm.state(), tm.producer()), (TxnState::Ready, Some(PID)));
}

#[test]
fn an_empty_transaction_completes_without_end_txn() {
    for v2 in [false, true] {
        let mut tm = ready(v2);
        tm.begin().unwrap();
        assert_eq!(tm.begin_commit(), Ok(Completion::Done));
        assert_eq!((tm.state(), tm.poll_request()), (TxnState::Ready, None));
        tm.begin().unwrap();
        assert_eq!(tm.begin_abort(), Ok(Completion::Done));
        assert_eq!(tm.producer(), Some(PID));
    }
}

#[test]
fn end_txn_waits_for_every_operation_in_flight() {
    for commit in [true, false] {
        let mut tm = ready(true);
        tm.begin().unwrap();
        let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
        let acks = tm
            .start_operation(Operation::ShareAcknowledgements)
            .unwrap();
        let completion = if commit {
            tm.begin_commit()
        } else {
            tm.begin_abort()
        };
        assert_eq!(completion, Ok(Completion::Pending));
        assert_eq!(tm.poll_request(), None, "batches still in flight");
        tm.finish_operation(op, ErrorCode::NONE);
        assert_eq!(tm.poll_request(), None, "acknowledgements still in flight");
        tm.finish_operation(acks, ErrorCode::NONE);
        assert_eq!(tm.poll_request(), end(commit, PID));
    }
}

#[test]
fn a_failed_send_makes_the_transaction_abortable_and_refuses_the_commit() {
    let mut tm = ready(true);
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    let Next::Failed(e) = tm.finish_operation(op, ErrorCode::MESSAGE_TOO_LARGE) else {
        panic!("the batch failed")
    };
    assert!(e.abortable && !e.fatal);
    assert_eq!(tm.state(), TxnState::AbortableError);
    assert_eq!(tm.begin_commit(), Err(e.clone()));
    assert_eq!(
        tm.start_operation(Operation::Produce(tp(1))),
        Err(e),
        "nothing joins a transaction that must abort"
    );
    assert_eq!(tm.begin_abort(), Ok(Completion::Pending));
    assert_eq!(tm.poll_request(), end(false, PID));
    tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(bumped(PID)))));
    assert_eq!(tm.state(), TxnState::Ready);
    assert_eq!(tm.last_error(), None);
}

#[test]
fn a_failure_while_committing_stops_the_commit() {
    let mut tm = ready(true);
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    assert_eq!(tm.begin_commit(), Ok(Completion::Pending));
    assert!(matches!(
        tm.finish_operation(op, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        Next::Failed(_)
    ));
    assert_eq!(tm.state(), TxnState::AbortableError);
    assert_eq!(tm.poll_request(), None, "no commit after a failed send");
    tm.begin_abort().unwrap();
    assert_eq!(tm.poll_request(), end(false, PID));
}

#[test]
fn fencing_is_fatal_and_final() {
    let mut tm = ready(true);
    tm.begin().unwrap();
    let op = tm
        .start_operation(Operation::ShareAcknowledgements)
        .unwrap();
    let Next::Failed(e) = tm.finish_operation(op, ErrorCode::PRODUCER_FENCED) else {
        panic!("fenced")
    };
    assert!(e.fatal);
    assert_eq!(tm.state(), TxnState::FatalError);
    assert_eq!(tm.begin_abort(), Err(e.clone()));
    assert_eq!(tm.begin_commit(), Err(e.clone()));
    assert_eq!(tm.begin(), Err(e.clone()));
    assert_eq!(tm.start_operation(Operation::Produce(tp(0))), Err(e));
    assert_eq!(tm.poll_request(), None);
    assert_eq!(tm.state(), TxnState::FatalError);
}

#[test]
fn share_acknowledgements_follow_the_draft_clients_error_classes() {
    let abortable = [
        ErrorCode::STALE_MEMBER_EPOCH,
        ErrorCode::INVALID_RECORD_STATE,
        ErrorCode::UNKNOWN_MEMBER_ID,
    ];
    for code in abortable {
        let mut tm = ready(true);
        tm.begin().unwrap();
        let op = tm
            .start_operation(Operation::ShareAcknowledgements)
            .unwrap();
        assert!(matches!(tm.finish_operation(op, code), Next::Failed(e) if e.abortable));
        assert_eq!(tm.state(), TxnState::AbortableError, "{code:?}");
    }
    let mut tm = ready(true);
    tm.begin().unwrap();
    let op = tm
        .start_operation(Operation::ShareAcknowledgements)
        .unwrap();
    assert_eq!(
        tm.finish_operation(op, ErrorCode::UNKNOWN_TOPIC_ID),
        Next::Retry {
            find_coordinator: false,
            refresh_metadata: true
        }
    );
    assert!(tm.is_in_flight(op), "a retried operation stays in flight");
    assert_eq!(tm.state(), TxnState::InTransaction);
}

#[test]
fn share_acknowledgements_need_transaction_version_2_and_change_nothing_without_it() {
    let mut tm = ready(false);
    tm.begin().unwrap();
    let refused = tm
        .start_operation(Operation::ShareAcknowledgements)
        .unwrap_err();
    assert!(matches!(refused.kind, TxnErrorKind::Unsupported(_)));
    assert!(!refused.fatal && !refused.abortable);
    assert_eq!((tm.state(), tm.in_flight()), (TxnState::InTransaction, 0));
    assert_eq!(
        tm.begin_commit(),
        Ok(Completion::Done),
        "nothing was started"
    );
    // Outside a transaction: an illegal-state error, whatever the version.
    let mut tm = ready(true);
    assert!(matches!(
        tm.start_operation(Operation::ShareAcknowledgements),
        Err(TxnError {
            kind: TxnErrorKind::IllegalState { .. },
            ..
        })
    ));
    assert_eq!(tm.state(), TxnState::Ready);
}

#[test]
fn misuse_is_an_illegal_state_and_changes_nothing() {
    let mut tm = manager(true);
    assert!(tm.begin().is_err());
    assert!(tm.begin_commit().is_err());
    assert!(tm.begin_abort().is_err());
    assert_eq!(tm.state(), TxnState::Uninitialized);
    let mut tm = ready(true);
    assert!(tm.init_transactions().is_err());
    assert!(tm.begin_commit().is_err());
    tm.begin().unwrap();
    assert!(tm.begin().is_err());
    assert_eq!(tm.state(), TxnState::InTransaction);
    let mut idempotent = TransactionManager::new(
        TxnConfig {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            two_phase_commit: false,
        },
        true,
    );
    assert!(idempotent
        .start_operation(Operation::Produce(tp(0)))
        .is_err());
    idempotent.init_transactions().unwrap();
    let Some(CoordinatorRequest::InitProducerId {
        transactional_id: None,
        ..
    }) = idempotent.poll_request()
    else {
        panic!("an idempotent producer asks for an id without a transactional id")
    };
    idempotent.on_response(CoordinatorResponse::InitProducerId(Ok(PID)));
    assert!(idempotent.begin().is_err());
    let op = idempotent
        .start_operation(Operation::Produce(tp(0)))
        .unwrap();
    assert!(idempotent.operation_ready(op));
}

#[test]
fn coordinator_errors_are_retried_with_the_same_request() {
    let mut tm = committing();
    assert_eq!(tm.poll_request(), end(true, PID));
    assert_eq!(
        tm.on_response(CoordinatorResponse::EndTxn(Err(ErrorCode::NOT_COORDINATOR))),
        Next::Retry {
            find_coordinator: true,
            refresh_metadata: false
        }
    );
    assert_eq!(tm.poll_request(), end(true, PID));
    assert!(tm
        .on_response(CoordinatorResponse::EndTxn(Err(
            ErrorCode::CONCURRENT_TRANSACTIONS
        )))
        .eq(&Next::Retry {
            find_coordinator: false,
            refresh_metadata: false
        }));
    assert_eq!(tm.poll_request(), end(true, PID));
    tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(bumped(PID)))));
    assert_eq!(tm.state(), TxnState::Ready);
}

#[test]
fn answers_that_cannot_be_right_are_fatal() {
    for answer in [
        None,
        Some(PID),
        Some(ProducerIdEpoch { id: 7, epoch: 9 }),
        Some(ProducerIdEpoch { id: 8, epoch: -1 }),
    ] {
        let mut tm = committing();
        tm.poll_request();
        let next = tm.on_response(CoordinatorResponse::EndTxn(Ok(answer)));
        assert!(
            matches!(&next, Next::Failed(e) if matches!(e.kind, TxnErrorKind::InvalidResponse(_))),
            "{answer:?}: {next:?}"
        );
        assert_eq!(tm.state(), TxnState::FatalError);
    }
    // A new producer id (the epoch ran out) is fine.
    let mut tm = committing();
    tm.poll_request();
    let fresh = ProducerIdEpoch { id: 8, epoch: 0 };
    tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(fresh))));
    assert_eq!(tm.producer(), Some(fresh));
    // AddPartitionsToTxn answering for a partition never asked for.
    let mut tm = ready(false);
    tm.begin().unwrap();
    tm.start_operation(Operation::Produce(tp(0))).unwrap();
    tm.poll_request();
    tm.on_response(CoordinatorResponse::AddPartitionsToTxn(vec![(
        tp(9),
        ErrorCode::NONE,
    )]));
    assert_eq!(tm.state(), TxnState::FatalError);
    // An answer to another request.
    let mut tm = ready(true);
    tm.begin().unwrap();
    tm.start_operation(Operation::Produce(tp(0))).unwrap();
    assert_eq!(tm.poll_request(), None);
    assert_eq!(
        tm.on_response(CoordinatorResponse::AddOffsetsToTxn(ErrorCode::NONE)),
        Next::Continue,
        "nothing outstanding: ignored"
    );
    let mut tm = manager(true);
    tm.init_transactions().unwrap();
    tm.poll_request();
    tm.on_response(CoordinatorResponse::EndTxn(Ok(None)));
    assert_eq!(tm.state(), TxnState::FatalError);
}

#[test]
fn an_abort_drops_batches_waiting_for_their_partition() {
    let mut tm = ready(false);
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    assert!(!tm.operation_ready(op));
    // Aborted before AddPartitionsToTxn was sent: nothing reached the coordinator.
    assert_eq!(tm.begin_abort(), Ok(Completion::Done));
    assert!(!tm.is_in_flight(op));
    assert_eq!(tm.poll_request(), None);
    assert_eq!(tm.state(), TxnState::Ready);
}

#[test]
fn version_1_recovers_a_lost_producer_id_by_bumping_the_epoch_after_the_abort() {
    let mut tm = ready(false);
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    tm.poll_request();
    tm.on_response(CoordinatorResponse::AddPartitionsToTxn(vec![(
        tp(0),
        ErrorCode::NONE,
    )]));
    tm.finish_operation(op, ErrorCode::NONE);
    tm.begin_commit().unwrap();
    tm.poll_request();
    assert!(matches!(
        tm.on_response(CoordinatorResponse::EndTxn(Err(
            ErrorCode::UNKNOWN_PRODUCER_ID
        ))),
        Next::Failed(e) if e.abortable
    ));
    assert_eq!(tm.state(), TxnState::AbortableError);
    tm.begin_abort().unwrap();
    assert_eq!(tm.poll_request(), end(false, PID));
    tm.on_response(CoordinatorResponse::EndTxn(Ok(None)));
    assert_eq!(tm.state(), TxnState::Initializing);
    assert_eq!(
        tm.poll_request(),
        Some(CoordinatorRequest::InitProducerId {
            transactional_id: Some("tid".into()),
            transaction_timeout_ms: 60_000,
            two_phase_commit: TwoPhaseCommit::Disabled,
            producer: Some(PID),
        })
    );
    tm.on_response(CoordinatorResponse::InitProducerId(Ok(bumped(PID))));
    assert_eq!(
        (tm.state(), tm.producer()),
        (TxnState::Ready, Some(bumped(PID)))
    );
}

#[test]
fn sequences_wrap_past_i32_max_to_zero() {
    let mut tm = ready(true);
    let p = tp(0);
    tm.sequences.insert(p.clone(), i32::MAX - 2);
    assert_eq!(tm.next_sequence(&p, 5), i32::MAX - 2);
    assert_eq!(tm.next_sequence(&p, 1), 2);
}

#[test]
fn an_idempotent_producer_bumps_its_epoch_and_restarts_sequences() {
    let mut tm = TransactionManager::new(
        TxnConfig {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            two_phase_commit: false,
        },
        true,
    );
    assert!(tm.bump_idempotent_epoch().is_err(), "no producer id yet");
    tm.init_transactions().unwrap();
    assert!(tm.poll_request().is_some());
    let first = ProducerIdEpoch { id: 7, epoch: 0 };
    assert_eq!(
        tm.on_response(CoordinatorResponse::InitProducerId(Ok(first))),
        Next::Continue
    );
    let tp = TopicPartition::new("t", 0);
    assert_eq!(tm.next_sequence(&tp, 3), 0);
    assert_eq!(tm.next_sequence(&tp, 1), 3);
    tm.bump_idempotent_epoch().unwrap();
    assert_eq!(tm.state(), TxnState::Initializing);
    assert!(tm.bump_idempotent_epoch().is_err(), "one bump at a time");
    match tm.poll_request() {
        Some(CoordinatorRequest::InitProducerId {
            transactional_id: None,
            producer: Some(p),
            ..
        }) => assert_eq!(p, first),
        other => panic!("{other:?}"),
    }
    let bumped = ProducerIdEpoch { id: 7, epoch: 1 };
    assert_eq!(
        tm.on_response(CoordinatorResponse::InitProducerId(Ok(bumped))),
        Next::Continue
    );
    assert_eq!(tm.state(), TxnState::Ready);
    assert_eq!(tm.producer(), Some(bumped));
    assert_eq!(
        tm.next_sequence(&tp, 1),
        0,
        "sequences restart with the new epoch"
    );
}

// ---- two-phase commit (KIP-939) ----

fn two_phase(keep: bool) -> TransactionManager {
    let mut tm = TransactionManager::new(
        TxnConfig {
            transactional_id: Some("tid".into()),
            transaction_timeout_ms: 60_000,
            two_phase_commit: true,
        },
        true,
    );
    if keep {
        tm.init_transactions_keep_prepared().unwrap();
    } else {
        tm.init_transactions().unwrap();
    }
    let Some(CoordinatorRequest::InitProducerId {
        two_phase_commit, ..
    }) = tm.poll_request()
    else {
        panic!("InitProducerId first")
    };
    let want = if keep {
        TwoPhaseCommit::KeepPrepared
    } else {
        TwoPhaseCommit::Enabled
    };
    assert_eq!(two_phase_commit, want);
    tm
}

#[test]
fn prepared_token_round_trips_as_a_string() {
    let token = PreparedTxnState::new(1234, 7);
    assert_eq!(token.to_string(), "1234:7");
    assert_eq!("1234:7".parse::<PreparedTxnState>(), Ok(token));
    for bad in ["", "1234", "a:1", "1:b", "-1:0", "1:-1", "1:2:3", "1:40000"] {
        assert!(bad.parse::<PreparedTxnState>().is_err(), "{bad:?}");
    }
}

#[test]
fn prepare_needs_two_phase_commit_and_everything_answered() {
    // Not configured: refused.
    let mut tm = ready(true);
    tm.begin().unwrap();
    assert!(matches!(
        tm.prepare().unwrap_err().kind,
        TxnErrorKind::IllegalState { .. }
    ));
    assert!(tm.init_transactions_keep_prepared().is_err());
    // Configured: refused while an operation is in flight, then prepared.
    let mut tm = two_phase(false);
    tm.on_response(CoordinatorResponse::InitProducerId(Ok(PID)));
    assert!(tm.prepare().is_err(), "outside a transaction");
    tm.begin().unwrap();
    let op = tm
        .start_operation(Operation::ShareAcknowledgements)
        .unwrap();
    assert!(tm.prepare().is_err(), "an operation in flight");
    assert_eq!(tm.state(), TxnState::InTransaction);
    tm.finish_operation(op, ErrorCode::NONE);
    let token = tm.prepare().unwrap();
    assert_eq!(token, PreparedTxnState::new(PID.id, PID.epoch));
    assert_eq!(tm.state(), TxnState::PreparedTransaction);
    assert_eq!(tm.prepared(), Some(token));
    // Nothing joins a prepared transaction, and nothing begins.
    assert!(tm.start_operation(Operation::Produce(tp(0))).is_err());
    assert!(tm.begin().is_err());
    assert_eq!(tm.poll_request(), None, "no EndTxn before complete");
}

#[test]
fn complete_commits_a_matching_token_and_aborts_another() {
    for matching in [true, false] {
        let mut tm = two_phase(false);
        tm.on_response(CoordinatorResponse::InitProducerId(Ok(PID)));
        tm.begin().unwrap();
        let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
        tm.finish_operation(op, ErrorCode::NONE);
        let token = tm.prepare().unwrap();
        let given = if matching {
            token
        } else {
            PreparedTxnState::new(PID.id, PID.epoch - 1)
        };
        let (outcome, completion) = tm.complete(given).unwrap();
        assert_eq!(completion, Completion::Pending);
        assert_eq!(
            outcome,
            if matching {
                PreparedOutcome::Commit
            } else {
                PreparedOutcome::Abort
            }
        );
        assert_eq!(tm.poll_request(), end(matching, PID));
        tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(bumped(PID)))));
        assert_eq!(tm.state(), TxnState::Ready);
        assert_eq!(tm.prepared(), None);
        // Completing again is a no-op.
        assert_eq!(
            tm.complete(token),
            Ok((PreparedOutcome::NothingPrepared, Completion::Done))
        );
        assert_eq!(tm.poll_request(), None);
    }
}

#[test]
fn a_restarted_producer_keeps_and_completes_the_prepared_transaction() {
    let ongoing = PID;
    let recovered = bumped(PID);
    let mut tm = two_phase(true);
    // Answers that cannot name this producer's transaction are fatal.
    let mut bad = tm.clone();
    let wrong = ProducerIdEpoch { id: 8, epoch: 3 };
    assert!(matches!(
        bad.on_response(CoordinatorResponse::InitProducerIdKept {
            producer: recovered,
            ongoing: wrong
        }),
        Next::Failed(TxnError { fatal: true, .. })
    ));
    assert_eq!(
        tm.on_response(CoordinatorResponse::InitProducerIdKept {
            producer: recovered,
            ongoing
        }),
        Next::Continue
    );
    assert_eq!(tm.state(), TxnState::PreparedTransaction);
    assert_eq!(tm.producer(), Some(recovered));
    let token: PreparedTxnState = "7:3".parse().unwrap();
    assert_eq!(tm.prepared(), Some(token));
    assert!(tm.begin().is_err(), "complete first");
    let (outcome, completion) = tm.complete(token).unwrap();
    assert_eq!(
        (outcome, completion),
        (PreparedOutcome::Commit, Completion::Pending)
    );
    // EndTxn at the recovered epoch; the answer is the next bump.
    assert_eq!(tm.poll_request(), end(true, recovered));
    tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(bumped(recovered)))));
    assert_eq!(tm.state(), TxnState::Ready);
}

#[test]
fn a_restarted_producer_with_nothing_prepared_is_ready_and_completes_nothing() {
    let mut tm = two_phase(true);
    tm.on_response(CoordinatorResponse::InitProducerId(Ok(bumped(PID))));
    assert_eq!(tm.state(), TxnState::Ready);
    assert_eq!(tm.prepared(), None);
    assert_eq!(
        tm.complete(PreparedTxnState::new(PID.id, PID.epoch)),
        Ok((PreparedOutcome::NothingPrepared, Completion::Done))
    );
    // The next init (same manager cannot re-init) asks to keep again only when told to.
    tm.begin().unwrap();
    assert_eq!(tm.state(), TxnState::InTransaction);
}

#[test]
fn an_empty_prepared_transaction_still_ends_with_end_txn_so_tokens_stay_unique() {
    let mut tm = two_phase(false);
    tm.on_response(CoordinatorResponse::InitProducerId(Ok(PID)));
    tm.begin().unwrap();
    let first = tm.prepare().unwrap();
    let (outcome, completion) = tm.complete(first).unwrap();
    assert_eq!(
        (outcome, completion),
        (PreparedOutcome::Commit, Completion::Pending)
    );
    // Nothing to commit: an abort, which bumps the epoch all the same.
    assert_eq!(tm.poll_request(), end(false, PID));
    tm.on_response(CoordinatorResponse::EndTxn(Ok(Some(bumped(PID)))));
    tm.begin().unwrap();
    let op = tm.start_operation(Operation::Produce(tp(0))).unwrap();
    tm.finish_operation(op, ErrorCode::NONE);
    let second = tm.prepare().unwrap();
    assert_ne!(first, second);
}

#[test]
fn prepare_needs_transaction_version_2() {
    let mut tm = TransactionManager::new(
        TxnConfig {
            transactional_id: Some("tid".into()),
            transaction_timeout_ms: 60_000,
            two_phase_commit: true,
        },
        false,
    );
    tm.init_transactions().unwrap();
    tm.poll_request();
    tm.on_response(CoordinatorResponse::InitProducerId(Ok(PID)));
    tm.begin().unwrap();
    assert!(matches!(
        tm.prepare().unwrap_err().kind,
        TxnErrorKind::Unsupported(_)
    ));
    assert_eq!(tm.state(), TxnState::InTransaction);
}
