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
//! - once the application stops failing things, every transaction completes (no stall);
//! - two-phase commit (KIP-939) among all of the above: `prepare` succeeds exactly when
//!   configured, under version 2, in a transaction with nothing in flight, and hands out a
//!   token never seen before; `complete` commits exactly when its token names the prepared
//!   transaction and finds nothing to do in `Ready`; a restarted instance that keeps the
//!   prepared transaction gets the coordinator's ongoing one, and can commit it only through
//!   a token `prepare` handed out for it — so a kept transaction nobody prepared (its
//!   operations perhaps failed) is never committed.
//!
//! A second property drives two-phase commit (KIP-939) against a model coordinator through
//! prepares, checkpoints, crashes and keep-prepared restarts (see its section below).

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
    /// `prepare` (two-phase commit).
    Prepare,
    /// `complete` with the last token `prepare` handed out (true) or one naming no prepared
    /// transaction (false).
    Complete(bool),
    /// The process dies and a new instance starts, keeping a prepared transaction (true)
    /// or not; its InitProducerId is answered by `Answer`.
    Restart(bool),
}

/// A token no `prepare` hands out (the model's producer id is 1).
const FOREIGN_TOKEN: PreparedTxnState = PreparedTxnState {
    producer_id: 2,
    epoch: 0,
};

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
        2 => Just(Action::Prepare),
        2 => any::<bool>().prop_map(Action::Complete),
        1 => any::<bool>().prop_map(Action::Restart),
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
    /// A prepared transaction nothing joined, completed: it still ends with an EndTxn, an
    /// abort whatever the token says (its bump keeps tokens unique).
    empty_prepared: bool,
}

impl Txn {
    /// A transaction a new instance kept: it may commit only if `prepare` handed out its
    /// token (then all its operations had succeeded); otherwise count it as failed.
    fn kept(prepared: bool) -> Txn {
        Txn {
            known: true,
            failed: !prepared,
            ..Txn::default()
        }
    }
}

struct Run {
    tm: TransactionManager,
    two_phase: bool,
    txn: Txn,
    epoch_before_end: Option<ProducerIdEpoch>,
    fatal_seen: bool,
    commits: usize,
    /// The model coordinator's current epoch (producer id 1).
    coordinator_epoch: i16,
    /// The epoch of the transaction the coordinator holds open, if one is.
    coordinator_ongoing: Option<i16>,
    /// Every token `prepare` handed out, in order (the application's checkpoints).
    tokens: Vec<PreparedTxnState>,
}

fn is_illegal(e: &TxnError) -> bool {
    matches!(e.kind, TxnErrorKind::IllegalState { .. })
}

impl Run {
    fn manager(v2: bool, two_phase: bool) -> TransactionManager {
        TransactionManager::new(
            TxnConfig {
                transactional_id: Some("tid".into()),
                transaction_timeout_ms: 60_000,
                two_phase_commit: two_phase,
            },
            v2,
        )
    }

    fn new(v2: bool, two_phase: bool) -> Run {
        Run {
            tm: Self::manager(v2, two_phase),
            two_phase,
            txn: Txn::default(),
            epoch_before_end: None,
            fatal_seen: false,
            commits: 0,
            coordinator_epoch: -1,
            coordinator_ongoing: None,
            tokens: Vec::new(),
        }
    }

    /// The coordinator learnt of the transaction (a partition, offsets or acknowledgements
    /// joined it).
    fn known(&mut self) {
        self.txn.known = true;
        if self.coordinator_ongoing.is_none() {
            self.coordinator_ongoing = self.tm.producer().map(|p| p.epoch);
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
            // The application ends a prepared transaction only with `complete`.
            Action::Commit if state == TxnState::PreparedTransaction => {}
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
                let allowed = matches!(
                    state,
                    TxnState::InTransaction
                        | TxnState::AbortableError
                        | TxnState::PreparedTransaction
                );
                assert_eq!(r.is_ok(), allowed, "{r:?}");
                self.check_refusal(before, &r);
                if r.is_ok() && state == TxnState::PreparedTransaction && !self.txn.known {
                    // Its token was handed out: it still ends with an EndTxn (and a bump).
                    assert_eq!(r, Ok(Completion::Pending));
                    self.txn.known = true;
                    self.txn.empty_prepared = true;
                }
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
                        self.known();
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
                        | TxnState::PreparedTransaction
                        | TxnState::Committing
                        | TxnState::Aborting
                        | TxnState::AbortableError
                );
                assert_eq!(self.tm.transaction_v2(), if open { v2 } else { *v });
            }
            Action::Prepare => {
                let r = self.tm.prepare();
                let allowed = self.two_phase
                    && v2
                    && state == TxnState::InTransaction
                    && self.txn.open.is_empty()
                    && self.tm.outstanding.is_none();
                assert_eq!(r.is_ok(), allowed, "prepare in {state:?}: {r:?}");
                self.check_refusal(before, &r);
                if let Ok(token) = r {
                    let p = before.2.unwrap();
                    assert_eq!(token, PreparedTxnState::new(p.id, p.epoch));
                    assert!(
                        !self.tokens.contains(&token),
                        "token {token} handed out twice"
                    );
                    self.tokens.push(token);
                    assert_eq!(self.tm.state(), TxnState::PreparedTransaction);
                    assert_eq!(self.tm.prepared(), Some(token));
                    assert_eq!(self.tm.poll_request(), None, "prepare ends nothing");
                }
            }
            Action::Complete(latest) => {
                let token = match (latest, self.tokens.as_slice()) {
                    (true, [.., last]) => *last,
                    (false, [first, _, ..]) => *first,
                    _ => FOREIGN_TOKEN,
                };
                let prepared = self.tm.prepared();
                let empty = !self.txn.known;
                let r = self.tm.complete(token);
                self.check_refusal(before, &r);
                match state {
                    TxnState::PreparedTransaction => {
                        let (outcome, completion) = r.unwrap();
                        let commit = prepared == Some(token);
                        let expected = if commit {
                            PreparedOutcome::Commit
                        } else {
                            PreparedOutcome::Abort
                        };
                        assert_eq!(outcome, expected);
                        if commit {
                            assert!(self.tokens.contains(&token));
                        }
                        let next = match (completion, commit) {
                            (Completion::Done, _) => TxnState::Ready,
                            (Completion::Pending, true) => TxnState::Committing,
                            (Completion::Pending, false) => TxnState::Aborting,
                        };
                        assert_eq!(self.tm.state(), next);
                        if completion == Completion::Done {
                            self.txn = Txn::default();
                        } else if empty {
                            self.txn.known = true;
                            self.txn.empty_prepared = true;
                        }
                    }
                    TxnState::Ready => {
                        assert_eq!(r, Ok((PreparedOutcome::NothingPrepared, Completion::Done)));
                    }
                    _ => assert!(r.is_err(), "{r:?}"),
                }
            }
            Action::Restart(keep) => {
                // A new process: what the old one had in flight dies with it.
                self.tm = Self::manager(v2, self.two_phase);
                let r = if *keep {
                    self.tm.init_transactions_keep_prepared()
                } else {
                    self.tm.init_transactions()
                };
                assert_eq!(r.is_ok(), !*keep || self.two_phase, "{r:?}");
                if r.is_err() {
                    self.tm.init_transactions().unwrap();
                }
                self.txn = Txn::default();
                self.epoch_before_end = None;
                self.fatal_seen = false;
                return;
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
            CoordinatorRequest::InitProducerId {
                producer,
                two_phase_commit,
                ..
            } => {
                assert_eq!(state, TxnState::Initializing);
                assert_eq!(two_phase_commit.is_enabled(), self.two_phase);
                if !code.is_ok() {
                    CoordinatorResponse::InitProducerId(Err(code))
                } else {
                    let keep = *two_phase_commit == TwoPhaseCommit::KeepPrepared;
                    let c = &mut self.coordinator_epoch;
                    match (producer, self.coordinator_ongoing, keep) {
                        (Some(p), _, _) => {
                            // The bump that ends an abort: whatever was open is over.
                            self.coordinator_ongoing = None;
                            *c = (*c).max(p.epoch + 1);
                            CoordinatorResponse::InitProducerId(Ok(ProducerIdEpoch {
                                id: p.id,
                                epoch: p.epoch + 1,
                            }))
                        }
                        (None, Some(data), true) => {
                            // Kept: the new instance's epoch fences the old one.
                            *c += 1;
                            CoordinatorResponse::InitProducerIdKept {
                                producer: ProducerIdEpoch { id: 1, epoch: *c },
                                ongoing: ProducerIdEpoch { id: 1, epoch: data },
                            }
                        }
                        (None, ongoing, _) => {
                            if ongoing.is_some() {
                                // Fenced and aborted: the abort's bump, then the new epoch.
                                self.coordinator_ongoing = None;
                                *c += 1;
                            }
                            *c += 1;
                            CoordinatorResponse::InitProducerId(Ok(ProducerIdEpoch {
                                id: 1,
                                epoch: *c,
                            }))
                        }
                    }
                }
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
                    assert!(
                        state == TxnState::Aborting || self.txn.empty_prepared,
                        "an abort in {state:?}"
                    );
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
            (_, CoordinatorResponse::InitProducerIdKept { ongoing, .. }) => {
                assert_eq!(next, Next::Continue);
                assert_eq!(self.tm.state(), TxnState::PreparedTransaction);
                let kept = PreparedTxnState::new(ongoing.id, ongoing.epoch);
                assert_eq!(self.tm.prepared(), Some(kept));
                self.txn = Txn::kept(self.tokens.contains(&kept));
            }
            (_, CoordinatorResponse::InitProducerId(Ok(_))) => {
                assert_eq!(self.tm.state(), TxnState::Ready);
                assert_eq!(self.tm.prepared(), None);
            }
            (CoordinatorRequest::AddPartitionsToTxn { partitions, .. }, _) => {
                for (i, tp) in partitions.iter().enumerate() {
                    if i > 0 || code.is_ok() {
                        self.txn.added.insert(tp.clone());
                        self.known();
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
                    self.known();
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
                self.coordinator_ongoing = None;
                let before = self.epoch_before_end.take().unwrap();
                if v2 {
                    self.coordinator_epoch = before.epoch + 1;
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
                TxnState::PreparedTransaction => {
                    self.step(&Action::Complete(true));
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
        two_phase in any::<bool>(),
        actions in prop::collection::vec(action(), 1..150),
        bad_end_at in prop::option::weighted(0.1, 0..150usize),
    ) {
        let mut run = Run::new(v2, two_phase);
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

// ---- two-phase commit (KIP-939): prepare, crash, keep, complete ----
//
// A checkpointing source against a model coordinator: it stages operations, prepares, writes
// the token into its checkpoint (or crashes first), completes with its last checkpoint's token
// (or a stale one), and restarts, keeping the prepared transaction or not. Checked: every token
// `prepare` hands out is new (so a stale checkpoint can never name a later transaction); an
// EndTxn commits only the transaction the completing token names, and only one the coordinator
// holds; a kept transaction is the coordinator's ongoing one; nothing prepared completes
// nothing.

#[derive(Clone, Debug)]
enum Step2pc {
    Begin,
    Stage,
    Prepare,
    /// The token of the prepared transaction reaches the checkpoint.
    Checkpoint,
    /// Complete with the last checkpoint's token (true) or an older token (false).
    Complete(bool),
    /// The client dies (its operations with it) and a new one starts, keeping (true) or not.
    Restart(bool),
}

fn step_2pc() -> impl Strategy<Value = Step2pc> {
    prop_oneof![
        2 => Just(Step2pc::Begin),
        3 => Just(Step2pc::Stage),
        2 => Just(Step2pc::Prepare),
        2 => Just(Step2pc::Checkpoint),
        2 => any::<bool>().prop_map(Step2pc::Complete),
        1 => any::<bool>().prop_map(Step2pc::Restart),
    ]
}

/// The coordinator of the one transactional id (producer id 1, transaction version 2).
struct Coordinator2pc {
    epoch: i16,
    /// The epoch the ongoing transaction's records were written with.
    ongoing: Option<i16>,
}

struct Source {
    tm: TransactionManager,
    coordinator: Coordinator2pc,
    tokens: Vec<PreparedTxnState>,
    checkpoint: Option<PreparedTxnState>,
    /// The token of the last `complete` call.
    completing: Option<PreparedTxnState>,
    commits: usize,
}

impl Source {
    fn client() -> TransactionManager {
        TransactionManager::new(
            TxnConfig {
                transactional_id: Some("tid".into()),
                transaction_timeout_ms: 60_000,
                two_phase_commit: true,
            },
            true,
        )
    }

    fn start(&mut self, keep: bool) {
        self.tm = Self::client();
        if keep {
            self.tm.init_transactions_keep_prepared().unwrap();
        } else {
            self.tm.init_transactions().unwrap();
        }
        let Some(CoordinatorRequest::InitProducerId {
            two_phase_commit, ..
        }) = self.tm.poll_request()
        else {
            panic!("InitProducerId first");
        };
        let c = &mut self.coordinator;
        c.epoch += 1;
        let kept = match (two_phase_commit, c.ongoing) {
            (TwoPhaseCommit::KeepPrepared, Some(data)) => Some(data),
            (TwoPhaseCommit::Enabled, Some(_)) => {
                // Aborted (fence, then the version 2 abort bump).
                c.ongoing = None;
                c.epoch += 1;
                None
            }
            (TwoPhaseCommit::Disabled, _) => panic!("two-phase commit is configured"),
            _ => None,
        };
        let producer = ProducerIdEpoch {
            id: 1,
            epoch: c.epoch,
        };
        let response = match kept {
            Some(data) => CoordinatorResponse::InitProducerIdKept {
                producer,
                ongoing: ProducerIdEpoch { id: 1, epoch: data },
            },
            None => CoordinatorResponse::InitProducerId(Ok(producer)),
        };
        assert_eq!(self.tm.on_response(response), Next::Continue);
        match kept {
            Some(data) => {
                assert_eq!(self.tm.state(), TxnState::PreparedTransaction);
                assert_eq!(self.tm.prepared(), Some(PreparedTxnState::new(1, data)));
            }
            None => {
                assert_eq!(self.tm.state(), TxnState::Ready);
                assert_eq!(self.tm.prepared(), None);
            }
        }
    }

    /// Answers the coordinator requests due (EndTxn), as the model coordinator would.
    fn serve(&mut self) {
        while let Some(request) = self.tm.poll_request() {
            let CoordinatorRequest::EndTxn {
                commit, producer, ..
            } = request
            else {
                panic!("unexpected {request:?}");
            };
            let c = &mut self.coordinator;
            assert_eq!(
                producer,
                ProducerIdEpoch {
                    id: 1,
                    epoch: c.epoch
                },
                "fenced EndTxn"
            );
            if commit {
                let data = c
                    .ongoing
                    .expect("a commit of a transaction the coordinator lacks");
                assert_eq!(
                    self.completing,
                    Some(PreparedTxnState::new(1, data)),
                    "committed a transaction the completing token does not name"
                );
                self.commits += 1;
            }
            c.ongoing = None;
            c.epoch += 1;
            let next = ProducerIdEpoch {
                id: 1,
                epoch: c.epoch,
            };
            assert_eq!(
                self.tm
                    .on_response(CoordinatorResponse::EndTxn(Ok(Some(next)))),
                Next::Continue
            );
        }
    }

    fn step(&mut self, step: &Step2pc) {
        let state = self.tm.state();
        match step {
            Step2pc::Begin => {
                assert_eq!(self.tm.begin().is_ok(), state == TxnState::Ready);
            }
            Step2pc::Stage => {
                let r = self.tm.start_operation(Operation::ShareAcknowledgements);
                assert_eq!(r.is_ok(), state == TxnState::InTransaction);
                if let Ok(id) = r {
                    let epoch = self.tm.producer().unwrap().epoch;
                    let c = &mut self.coordinator;
                    assert!(c.ongoing.is_none_or(|e| e == epoch));
                    c.ongoing = Some(epoch);
                    assert_eq!(
                        self.tm.finish_operation(id, ErrorCode::NONE),
                        Next::Continue
                    );
                }
            }
            Step2pc::Prepare => {
                let r = self.tm.prepare();
                assert_eq!(r.is_ok(), state == TxnState::InTransaction, "{r:?}");
                if let Ok(token) = r {
                    assert!(
                        !self.tokens.contains(&token),
                        "token {token} handed out twice"
                    );
                    self.tokens.push(token);
                    assert_eq!(self.tm.poll_request(), None, "prepare ends nothing");
                }
            }
            Step2pc::Checkpoint => {
                if let Some(token) = self.tm.prepared() {
                    self.checkpoint = Some(token);
                }
            }
            Step2pc::Complete(latest) => {
                let token = if *latest {
                    self.checkpoint
                } else {
                    self.tokens.first().copied()
                };
                let Some(token) = token else { return };
                self.completing = Some(token);
                let prepared = self.tm.prepared();
                let r = self.tm.complete(token);
                match state {
                    TxnState::PreparedTransaction => {
                        let (outcome, _) = r.unwrap();
                        assert_eq!(outcome == PreparedOutcome::Commit, prepared == Some(token));
                    }
                    TxnState::Ready => {
                        assert_eq!(r, Ok((PreparedOutcome::NothingPrepared, Completion::Done)));
                    }
                    _ => assert!(r.is_err()),
                }
                self.serve();
            }
            Step2pc::Restart(keep) => self.start(*keep),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn prepared_transactions_commit_only_what_a_checkpoint_named(
        steps in prop::collection::vec(step_2pc(), 1..120),
    ) {
        let mut s = Source {
            tm: Source::client(),
            coordinator: Coordinator2pc { epoch: -1, ongoing: None },
            tokens: Vec::new(),
            checkpoint: None,
            completing: None,
            commits: 0,
        };
        s.start(false);
        for step in &steps {
            s.step(step);
        }
        // A last restart that keeps, completed by the checkpoint, leaves nothing open.
        s.start(true);
        s.step(&Step2pc::Complete(true));
        if s.checkpoint.is_none() && s.tm.state() == TxnState::PreparedTransaction {
            s.completing = Some(PreparedTxnState::new(0, 0));
            s.tm.complete(PreparedTxnState::new(0, 0)).unwrap();
            s.serve();
        }
        prop_assert_eq!(s.tm.state(), TxnState::Ready);
        prop_assert_eq!(s.coordinator.ongoing, None);
    }
}
