//! Random interleavings of the application's calls, operation answers and coordinator answers
//! (errors of every class among them), checked against a small reference model of what each
//! call may do and against the transaction rules of the module docs:
//!
//! - the application's calls succeed exactly when the model says they may, and a refused
//!   call changes nothing;
//! - FatalError is never left;
//! - EndTxn is handed out only when nothing is in flight, and only for a transaction the
//!   coordinator knows about; a commit only when no operation of the transaction failed;
//! - a committed transaction is one all of whose operations succeeded (output and share
//!   acknowledgements alike), so output is committed iff its acknowledgements are;
//! - version 1 sends a batch only to a partition AddPartitionsToTxn added; version 2 takes
//!   the bumped epoch from every EndTxn, and sequences restart at 0 with a new epoch;
//! - once the application stops failing things, every transaction completes (no stall).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Action {
    Init,
    Begin,
    Commit,
    Abort,
    Produce(i32),
    Offsets,
    ShareAcks,
    /// Finish the n-th operation in flight with the code.
    Finish(usize, i16),
    /// Answer the outstanding coordinator request (polling first) with the code.
    Answer(i16),
    /// The coordinator answers EndTxn with an epoch that does not follow.
    BadEndTxn,
    SetV2(bool),
}

/// Answer codes: mostly success, then retriable, abortable and (rarely) fatal ones.
fn code() -> impl Strategy<Value = i16> {
    prop_oneof![
        40 => Just(0),
        3 => Just(16),  // NOT_COORDINATOR (retry, find coordinator)
        3 => Just(51),  // CONCURRENT_TRANSACTIONS (retry)
        2 => Just(100), // UNKNOWN_TOPIC_ID (share acks: retry after a refresh)
        2 => Just(113), // STALE_MEMBER_EPOCH (abortable share acks)
        2 => Just(45),  // OUT_OF_ORDER_SEQUENCE_NUMBER (abortable produce)
        2 => Just(120), // TRANSACTION_ABORTABLE
        2 => Just(59),  // UNKNOWN_PRODUCER_ID
        1 => Just(90),  // PRODUCER_FENCED (fatal)
        1 => Just(35),  // UNSUPPORTED_VERSION (fatal)
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => Just(Action::Init),
        3 => Just(Action::Begin),
        2 => Just(Action::Commit),
        1 => Just(Action::Abort),
        4 => (0..3i32).prop_map(Action::Produce),
        1 => Just(Action::Offsets),
        2 => Just(Action::ShareAcks),
        6 => (0..4usize, code()).prop_map(|(i, c)| Action::Finish(i, c)),
        6 => code().prop_map(Action::Answer),
        1 => any::<bool>().prop_map(Action::SetV2),
    ]
}

/// What the reference model tracks of the open transaction.
#[derive(Debug, Default)]
struct Txn {
    /// Operations admitted and not finished: id -> (kind, partition for produce).
    open: BTreeMap<OperationId, Operation>,
    /// Some operation of this transaction failed (or its partition/offsets failed to join).
    failed: bool,
    /// The coordinator knows of this transaction.
    known: bool,
    /// Version 1: partitions AddPartitionsToTxn succeeded for.
    added: BTreeSet<TopicPartition>,
    /// Operations that succeeded.
    succeeded: usize,
    /// Operations dropped by an abort or failed: a commit must have none.
    lost: usize,
}

struct Run {
    tm: TransactionManager,
    txn: Txn,
    epoch_before_end: Option<ProducerIdEpoch>,
    fatal_seen: bool,
    commits: usize,
}

fn is_illegal(e: &TxnError) -> bool {
    matches!(e.kind, TxnErrorKind::IllegalState { .. })
}

impl Run {
    fn new(v2: bool) -> Run {
        Run {
            tm: TransactionManager::new(
                TxnConfig {
                    transactional_id: Some("tid".into()),
                    transaction_timeout_ms: 60_000,
                    two_phase_commit: false,
                },
                v2,
            ),
            txn: Txn::default(),
            epoch_before_end: None,
            fatal_seen: false,
            commits: 0,
        }
    }

    /// Operations the model holds open that the manager dropped.
    fn dropped(&self) -> Vec<OperationId> {
        self.txn
            .open
            .keys()
            .copied()
            .filter(|id| !self.tm.is_in_flight(*id))
            .collect()
    }

    fn snapshot(&self) -> (TxnState, usize, Option<ProducerIdEpoch>) {
        (self.tm.state(), self.tm.in_flight(), self.tm.producer())
    }

    /// A refused call must leave everything as it was.
    fn check_refusal<T: std::fmt::Debug>(
        &self,
        before: (TxnState, usize, Option<ProducerIdEpoch>),
        r: &Result<T, TxnError>,
    ) {
        if let Err(e) = r {
            assert_eq!(before, self.snapshot(), "a refused call changed state: {e}");
            // Misuse, or the error that holds the transaction, or an unsupported feature.
            let holding = match before.0 {
                TxnState::AbortableError => e.abortable,
                TxnState::FatalError => e.fatal,
                _ => false,
            };
            assert!(
                is_illegal(e) || holding || matches!(e.kind, TxnErrorKind::Unsupported(_)),
                "{e:?}"
            );
        }
    }

    fn step(&mut self, a: &Action) {
        let state = self.tm.state();
        let before = self.snapshot();
        let v2 = self.tm.transaction_v2();
        match a {
            Action::Init => {
                let r = self.tm.init_transactions();
                assert_eq!(r.is_ok(), state == TxnState::Uninitialized, "{r:?}");
                self.check_refusal(before, &r);
            }
            Action::Begin => {
                let r = self.tm.begin();
                assert_eq!(r.is_ok(), state == TxnState::Ready, "{r:?}");
                self.check_refusal(before, &r);
                if r.is_ok() {
                    self.txn = Txn::default();
                }
            }
            Action::Commit => {
                let r = self.tm.begin_commit();
                assert_eq!(r.is_ok(), state == TxnState::InTransaction, "{r:?}");
                self.check_refusal(before, &r);
                if state == TxnState::AbortableError {
                    assert!(r.as_ref().is_err_and(|e| e.abortable), "{r:?}");
                }
                if let Ok(Completion::Done) = r {
                    assert!(!self.txn.known && self.txn.open.is_empty());
                    assert_eq!(self.tm.state(), TxnState::Ready);
                }
            }
            Action::Abort => {
                let r = self.tm.begin_abort();
                let allowed = matches!(state, TxnState::InTransaction | TxnState::AbortableError);
                assert_eq!(r.is_ok(), allowed, "{r:?}");
                self.check_refusal(before, &r);
                if r.is_ok() {
                    // What the abort dropped can never have been sent.
                    let dropped = self.dropped();
                    for id in dropped {
                        let op = self.txn.open.remove(&id).unwrap();
                        if let Operation::Produce(tp) = &op {
                            assert!(
                                !v2 && !self.txn.added.contains(tp),
                                "dropped a sendable batch"
                            );
                        }
                        self.txn.lost += 1;
                    }
                }
            }
            Action::Produce(_) | Action::Offsets | Action::ShareAcks => {
                let op = match a {
                    Action::Produce(p) => Operation::Produce(TopicPartition::new("out", *p)),
                    Action::Offsets => Operation::OffsetCommit {
                        group_id: "g".into(),
                    },
                    _ => Operation::ShareAcknowledgements,
                };
                let r = self.tm.start_operation(op.clone());
                let allowed = state == TxnState::InTransaction
                    && (v2 || op != Operation::ShareAcknowledgements);
                assert_eq!(r.is_ok(), allowed, "{op:?} in {state:?}: {r:?}");
                self.check_refusal(before, &r);
                if op == Operation::ShareAcknowledgements && !v2 && state == TxnState::InTransaction
                {
                    assert!(r
                        .as_ref()
                        .is_err_and(|e| matches!(e.kind, TxnErrorKind::Unsupported(_))));
                }
                if let Ok(id) = r {
                    if v2 {
                        self.txn.known = true;
                    }
                    self.txn.open.insert(id, op);
                }
            }
            Action::Finish(i, c) => {
                let Some(id) = self.txn.open.keys().nth(*i).copied() else {
                    return;
                };
                let op = self.txn.open[&id].clone();
                if !self.tm.operation_ready(id) {
                    // Not sent yet (version 1: waiting to join); nothing to finish.
                    if let (Operation::Produce(tp), false) = (&op, self.fatal_seen) {
                        assert!(!self.txn.added.contains(tp));
                    }
                    return;
                }
                if let Operation::Produce(tp) = &op {
                    assert!(v2 || self.txn.added.contains(tp), "sent before it joined");
                }
                let code = ErrorCode(*c);
                let next = self.tm.finish_operation(id, code);
                if code.is_ok() {
                    assert_eq!(next, Next::Continue);
                    self.txn.open.remove(&id);
                    self.txn.succeeded += 1;
                    return;
                }
                match classify(op.api(), code) {
                    Handling::Retry { .. } => {
                        assert!(matches!(next, Next::Retry { .. }));
                        assert!(self.tm.is_in_flight(id));
                    }
                    class => {
                        assert!(matches!(next, Next::Failed(_)), "{next:?}");
                        self.txn.open.remove(&id);
                        self.txn.failed = true;
                        self.txn.lost += 1;
                        if class == Handling::Fatal {
                            assert_eq!(self.tm.state(), TxnState::FatalError);
                        } else if matches!(state, TxnState::InTransaction | TxnState::Committing) {
                            assert_eq!(self.tm.state(), TxnState::AbortableError);
                        } else {
                            assert_eq!(self.tm.state(), state);
                        }
                    }
                }
            }
            Action::Answer(c) => self.answer(ErrorCode(*c), false),
            Action::BadEndTxn => self.answer(ErrorCode::NONE, true),
            Action::SetV2(v) => {
                self.tm.set_transaction_v2(*v);
                let open = matches!(
                    state,
                    TxnState::InTransaction
                        | TxnState::Committing
                        | TxnState::Aborting
                        | TxnState::AbortableError
                );
                assert_eq!(self.tm.transaction_v2(), if open { v2 } else { *v });
            }
        }
        self.check_always(state);
    }

    fn answer(&mut self, code: ErrorCode, bad_end: bool) {
        let state = self.tm.state();
        let v2 = self.tm.transaction_v2();
        let Some(request) = self.tm.poll_request() else {
            return;
        };
        let response = match &request {
            CoordinatorRequest::InitProducerId { producer, .. } => {
                assert_eq!(state, TxnState::Initializing);
                let p = match producer {
                    Some(p) => ProducerIdEpoch {
                        id: p.id,
                        epoch: p.epoch + 1,
                    },
                    None => ProducerIdEpoch { id: 1, epoch: 0 },
                };
                CoordinatorResponse::InitProducerId(if code.is_ok() { Ok(p) } else { Err(code) })
            }
            CoordinatorRequest::AddPartitionsToTxn { partitions, .. } => {
                assert!(matches!(
                    state,
                    TxnState::InTransaction | TxnState::Committing
                ));
                for tp in partitions {
                    assert!(!self.txn.added.contains(tp), "{tp:?} added twice");
                }
                // The first partition gets the code, the others succeed.
                CoordinatorResponse::AddPartitionsToTxn(
                    partitions
                        .iter()
                        .enumerate()
                        .map(|(i, tp)| (tp.clone(), if i == 0 { code } else { ErrorCode::NONE }))
                        .collect(),
                )
            }
            CoordinatorRequest::AddOffsetsToTxn { .. } => {
                assert!(matches!(
                    state,
                    TxnState::InTransaction | TxnState::Committing
                ));
                CoordinatorResponse::AddOffsetsToTxn(code)
            }
            CoordinatorRequest::EndTxn {
                commit, producer, ..
            } => {
                assert!(self.txn.open.is_empty(), "EndTxn with operations in flight");
                assert!(self.txn.known, "EndTxn for a transaction nobody knows");
                if *commit {
                    assert_eq!(state, TxnState::Committing);
                    assert!(!self.txn.failed, "commit after a failure");
                    assert_eq!(self.txn.lost, 0, "commit with lost operations");
                } else {
                    assert_eq!(state, TxnState::Aborting);
                }
                self.epoch_before_end = Some(*producer);
                CoordinatorResponse::EndTxn(if bad_end {
                    Ok(Some(ProducerIdEpoch {
                        id: producer.id,
                        epoch: producer.epoch + 2,
                    }))
                } else if code.is_ok() {
                    Ok(v2.then_some(ProducerIdEpoch {
                        id: producer.id,
                        epoch: producer.epoch + 1,
                    }))
                } else {
                    Err(code)
                })
            }
        };
        let next = self.tm.on_response(response.clone());
        match (&request, &response) {
            (CoordinatorRequest::AddPartitionsToTxn { partitions, .. }, _) => {
                for (i, tp) in partitions.iter().enumerate() {
                    if i > 0 || code.is_ok() {
                        self.txn.added.insert(tp.clone());
                        self.txn.known = true;
                    }
                }
                if !code.is_ok() {
                    let class = classify(TxnApi::AddPartitionsToTxn, code);
                    if !class.is_retry() && state != TxnState::Aborting {
                        self.txn.failed = true;
                    }
                }
            }
            (CoordinatorRequest::AddOffsetsToTxn { .. }, _) => {
                if code.is_ok() {
                    self.txn.known = true;
                } else if !classify(TxnApi::AddOffsetsToTxn, code).is_retry() {
                    self.txn.failed = true;
                    // Its TxnOffsetCommit will never be sent.
                    let dropped = self.dropped();
                    for id in dropped {
                        self.txn.open.remove(&id);
                        self.txn.lost += 1;
                    }
                }
            }
            // Version 1 answers carry no epoch: one that is there is ignored.
            (CoordinatorRequest::EndTxn { commit, .. }, CoordinatorResponse::EndTxn(Ok(_)))
                if !bad_end || !v2 =>
            {
                assert_eq!(next, Next::Continue);
                if *commit {
                    self.commits += 1;
                }
                let before = self.epoch_before_end.take().unwrap();
                if v2 {
                    assert_eq!(
                        self.tm.producer(),
                        Some(ProducerIdEpoch {
                            id: before.id,
                            epoch: before.epoch + 1
                        })
                    );
                    // A new epoch: every partition's sequence starts again at 0.
                    assert_eq!(self.tm.next_sequence(&TopicPartition::new("out", 0), 1), 0);
                }
                self.txn = Txn::default();
            }
            (CoordinatorRequest::EndTxn { .. }, _) if bad_end && v2 => {
                assert_eq!(self.tm.state(), TxnState::FatalError);
            }
            _ => {}
        }
        self.check_always(state);
    }

    fn check_always(&mut self, before: TxnState) {
        if before == TxnState::FatalError || self.fatal_seen {
            assert_eq!(self.tm.state(), TxnState::FatalError, "FatalError was left");
        }
        if self.tm.state() == TxnState::FatalError {
            self.fatal_seen = true;
            assert_eq!(self.tm.poll_request(), None);
        }
        if self.tm.state() == TxnState::Ready {
            assert_eq!(self.tm.in_flight(), 0);
        }
    }

    /// Everything succeeds from here on: the transaction must complete.
    fn drain(&mut self) {
        for _ in 0..64 {
            match self.tm.state() {
                TxnState::FatalError | TxnState::Ready | TxnState::Uninitialized => return,
                TxnState::InTransaction => {
                    self.step(&Action::Commit);
                }
                TxnState::AbortableError => {
                    self.step(&Action::Abort);
                }
                _ => {}
            }
            if !self.txn.open.is_empty() {
                for i in (0..self.txn.open.len()).rev() {
                    self.step(&Action::Finish(i, 0));
                }
            }
            self.answer(ErrorCode::NONE, false);
        }
        panic!("stalled in {:?} with {:?}", self.tm.state(), self.txn);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_transaction_manager_keeps_the_transaction_rules(
        v2 in any::<bool>(),
        actions in prop::collection::vec(action(), 1..150),
        bad_end_at in prop::option::weighted(0.1, 0..150usize),
    ) {
        let mut run = Run::new(v2);
        // Most runs start with a producer id (misuse before it is among the actions too).
        run.step(&Action::Init);
        run.step(&Action::Answer(0));
        for (i, a) in actions.iter().enumerate() {
            if bad_end_at == Some(i) {
                run.step(&Action::BadEndTxn);
            }
            run.step(a);
        }
        run.drain();
        let s = run.tm.state();
        prop_assert!(matches!(s, TxnState::Ready | TxnState::FatalError | TxnState::Uninitialized));
    }
}
