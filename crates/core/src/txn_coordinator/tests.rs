//! Unit tests: one per coordinator rule, each checking after every step that the state rebuilt
//! from the emitted records equals the live state.

use super::*;

const T: &str = "txn";
const TIMEOUT: i32 = 60_000;
const MAX: i16 = i16::MAX;

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

struct H {
    c: TxnCoordinator,
    now: i64,
    token: u64,
    next_pid: i64,
    records: Vec<TxnRecord>,
}

impl H {
    fn new() -> H {
        H::with(TxnConfig::default())
    }

    fn with(config: TxnConfig) -> H {
        H {
            c: TxnCoordinator::new(config, 0),
            now: 1_000,
            token: 0,
            next_pid: 1_000,
            records: Vec::new(),
        }
    }

    /// Starts from a stored value (to reach states such as an exhausted epoch).
    fn seeded(id: &str, value: TransactionLogValue) -> H {
        let mut h = H::new();
        let rec = TxnRecord::Transaction {
            transactional_id: id.to_string(),
            value,
        };
        h.c.replay(&rec);
        h.records.push(rec);
        h
    }

    fn absorb(&mut self, out: &Output) {
        self.records.extend(out.records.iter().cloned());
        self.c.check_invariants().unwrap();
        let rebuilt = self.rebuilt(self.c.coordinator_epoch());
        assert_eq!(rebuilt.durable_state(), self.c.durable_state());
    }

    fn rebuilt(&self, epoch: i32) -> TxnCoordinator {
        let mut c = TxnCoordinator::new(self.c.config().clone(), epoch);
        for r in &self.records {
            let (k, v) = r.encode();
            let decoded = TxnRecord::decode(&k, v.as_deref()).unwrap();
            assert_eq!(&decoded, r);
            c.replay(&decoded);
        }
        c
    }

    fn send(&mut self, req: TxnRequest) -> (ReplyToken, Output) {
        self.token += 1;
        let token = ReplyToken(self.token);
        let out = self.c.handle(self.now, token, req);
        self.absorb(&out);
        (token, out)
    }

    fn fresh(&mut self) -> ProducerId {
        self.next_pid += 1;
        ProducerId(self.next_pid)
    }

    fn init_req(&mut self, id: &str, pid: i64, epoch: i16) -> TxnRequest {
        let fresh = Some(self.fresh());
        TxnRequest::InitProducerId(InitProducerIdRequest {
            transactional_id: id.to_string(),
            txn_timeout_ms: TIMEOUT,
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            transaction_version_supported: true,
            fresh_producer_id: fresh,
            two_phase_commit: TwoPhaseCommit::Disabled,
        })
    }

    fn init_2pc(&mut self, id: &str, mode: TwoPhaseCommit) -> InitProducerIdResponse {
        let mut req = self.init_req(id, -1, -1);
        if let TxnRequest::InitProducerId(r) = &mut req {
            r.two_phase_commit = mode;
        }
        let (token, out) = self.send(req);
        init_of(&out, token)
    }

    fn init(&mut self, id: &str, pid: i64, epoch: i16) -> InitProducerIdResponse {
        let req = self.init_req(id, pid, epoch);
        let (token, out) = self.send(req);
        init_of(&out, token)
    }

    fn add(&mut self, id: &str, pid: i64, epoch: i16, parts: &[TopicPartition]) -> Output {
        self.send(TxnRequest::AddPartitions(AddPartitionsRequest {
            transactional_id: id.to_string(),
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            partitions: parts.to_vec(),
            verify_only: false,
        }))
        .1
    }

    fn add_code(&mut self, id: &str, pid: i64, epoch: i16, parts: &[TopicPartition]) -> ErrorCode {
        let out = self.add(id, pid, epoch, parts);
        assert_eq!(out.replies.len(), 1);
        let TxnResponse::AddPartitions(r) = &out.replies[0].1 else {
            panic!("{out:?}")
        };
        let first = r.results[0].error_code;
        assert!(
            r.results.iter().all(|p| p.error_code == first),
            "same error for every partition: {r:?}"
        );
        first
    }

    fn implicit(&mut self, id: &str, pid: i64, epoch: i16, parts: &[TopicPartition]) -> ErrorCode {
        let (_, out) = self.send(TxnRequest::AddPartitionsImplicit(
            AddPartitionsImplicitRequest {
                transactional_id: id.to_string(),
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(epoch),
                partitions: parts.to_vec(),
            },
        ));
        out.replies[0].1.error_code()
    }

    fn end(&mut self, id: &str, pid: i64, epoch: i16, commit: bool, version: i16) -> Output {
        let fresh = Some(self.fresh());
        self.send(TxnRequest::EndTxn(EndTxnRequest {
            transactional_id: id.to_string(),
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            committed: commit,
            version,
            fresh_producer_id: fresh,
        }))
        .1
    }

    fn end_resp(&mut self, id: &str, pid: i64, epoch: i16, commit: bool, v: i16) -> EndTxnResponse {
        let out = self.end(id, pid, epoch, commit, v);
        match &out.replies[..] {
            [(_, TxnResponse::EndTxn(r))] => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    fn written(&mut self, m: &WriteMarkers) -> Output {
        let out = self.c.markers_written(self.now, m);
        self.absorb(&out);
        out
    }

    fn tick(&mut self, now: i64) -> Output {
        self.now = now;
        let out = self.c.tick(now);
        self.absorb(&out);
        out
    }

    fn state(&self, id: &str) -> TransactionLogValue {
        self.c.transaction(id).cloned().expect("known id")
    }
}

fn init_of(out: &Output, token: ReplyToken) -> InitProducerIdResponse {
    match out.replies.iter().find(|(t, _)| *t == token) {
        Some((_, TxnResponse::InitProducerId(r))) => r.clone(),
        other => panic!("no InitProducerId reply: {other:?} in {out:?}"),
    }
}

fn states(out: &Output) -> Vec<TransactionState> {
    out.records
        .iter()
        .filter_map(|r| match r {
            TxnRecord::Transaction { value, .. } => Some(value.state),
            _ => None,
        })
        .collect()
}

fn value(
    pid: i64,
    epoch: i16,
    state: TransactionState,
    tv: TransactionVersion,
) -> TransactionLogValue {
    TransactionLogValue {
        producer_id: ProducerId(pid),
        prev_producer_id: ProducerId(-1),
        next_producer_id: ProducerId(-1),
        producer_epoch: ProducerEpoch(epoch),
        last_producer_epoch: ProducerEpoch(-1),
        txn_timeout_ms: TIMEOUT,
        state,
        partitions: if state == TransactionState::Ongoing {
            BTreeSet::from([tp("t", 0)])
        } else {
            BTreeSet::new()
        },
        txn_start_timestamp_ms: if state == TransactionState::Ongoing {
            1_000
        } else {
            -1
        },
        txn_last_update_timestamp_ms: 1_000,
        client_transaction_version: tv,
        ongoing_producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
    }
}

#[test]
fn partition_for_uses_java_hash() {
    assert_eq!(partition_for("hello", 50), (99_162_322 % 50) as u32);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(partition_for("x", 0), 0);
}

#[test]
fn init_creates_then_bumps() {
    let mut h = H::new();
    let r = h.init(T, -1, -1);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(r.producer_epoch, ProducerEpoch(0));
    let pid = r.producer_id.0;
    assert_eq!(
        pid, 1_001,
        "the fresh id is used for a new transactional id"
    );
    let r = h.init(T, -1, -1);
    assert_eq!((r.producer_id.0, r.producer_epoch.0), (pid, 1));
    assert_eq!(h.state(T).last_producer_epoch, ProducerEpoch(-1));
    assert_eq!(h.state(T).state, TransactionState::Empty);
}

#[test]
fn init_validates_timeout_and_request() {
    let mut h = H::new();
    for timeout in [0, -5, 900_001] {
        let mut req = h.init_req(T, -1, -1);
        if let TxnRequest::InitProducerId(r) = &mut req {
            r.txn_timeout_ms = timeout;
        }
        let (token, out) = h.send(req);
        assert_eq!(
            init_of(&out, token).error_code,
            error_codes::INVALID_TRANSACTION_TIMEOUT
        );
    }
    assert_eq!(h.init(T, 5, -1).error_code, error_codes::INVALID_REQUEST);
    assert_eq!(h.init("", -1, -1).error_code, error_codes::INVALID_REQUEST);
    assert!(h.c.is_empty());
}

#[test]
fn init_with_expected_epoch_bumps_retries_and_fences() {
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    h.init(T, -1, -1); // epoch 1, last -1
    let r = h.init(T, pid, 1);
    assert_eq!(r.producer_epoch, ProducerEpoch(2));
    assert_eq!(h.state(T).last_producer_epoch, ProducerEpoch(1));
    // A retry of that call (response lost) presents the last epoch: same answer.
    let r = h.init(T, pid, 1);
    assert_eq!(
        (r.error_code, r.producer_epoch),
        (error_codes::NONE, ProducerEpoch(2))
    );
    // Anything else is a zombie.
    assert_eq!(h.init(T, pid, 0).error_code, error_codes::PRODUCER_FENCED);
    assert_eq!(
        h.init(T, pid + 7, 2).error_code,
        error_codes::PRODUCER_FENCED
    );
    assert_eq!(
        downgrade_error(TxnApi::InitProducerId, 3, error_codes::PRODUCER_FENCED),
        error_codes::INVALID_PRODUCER_EPOCH
    );
}

#[test]
fn classic_commit_flow() {
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    assert_eq!(
        h.add_code(T, pid, 0, &[tp("a", 0), tp("a", 1)]),
        error_codes::NONE
    );
    assert_eq!(h.state(T).state, TransactionState::Ongoing);
    assert_eq!(h.state(T).txn_start_timestamp_ms, h.now);
    // Already-added partitions: answered without a record.
    let out = h.add(T, pid, 0, &[tp("a", 1)]);
    assert!(out.records.is_empty());
    let offsets_partition = crate::group_coordinator::partition_for("g", 50) as i32;
    let (_, out) = h.send(TxnRequest::AddOffsets(AddOffsetsRequest {
        transactional_id: T.into(),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(0),
        group_id: "g".into(),
        offsets_partition,
    }));
    assert_eq!(out.replies[0].1.error_code(), error_codes::NONE);

    let out = h.end(T, pid, 0, true, 3);
    assert_eq!(states(&out), vec![TransactionState::PrepareCommit]);
    assert_eq!(
        out.replies[0].1.error_code(),
        error_codes::NONE,
        "answered once Prepare is durable"
    );
    let [m] = &out.markers[..] else {
        panic!("{out:?}")
    };
    assert_eq!(
        (m.producer_id.0, m.producer_epoch.0, m.result),
        (pid, 0, TransactionResult::Commit)
    );
    assert_eq!(
        m.partitions,
        vec![
            tp(CONSUMER_OFFSETS_TOPIC, offsets_partition),
            tp("a", 0),
            tp("a", 1)
        ]
    );
    // While markers are outstanding.
    assert_eq!(
        h.end_resp(T, pid, 0, true, 3).error_code,
        error_codes::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(
        h.end_resp(T, pid, 0, false, 3).error_code,
        error_codes::INVALID_TXN_STATE
    );
    assert_eq!(
        h.add_code(T, pid, 0, &[tp("b", 0)]),
        error_codes::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(
        h.init(T, pid, 0).error_code,
        error_codes::CONCURRENT_TRANSACTIONS
    );

    let m = m.clone();
    let out = h.written(&m);
    assert_eq!(states(&out), vec![TransactionState::CompleteCommit]);
    assert!(h.state(T).partitions.is_empty());
    assert!(
        h.written(&m).is_empty(),
        "duplicate notification is a no-op"
    );
    // Retry of the same outcome is fine; the other outcome is not.
    assert_eq!(h.end_resp(T, pid, 0, true, 3).error_code, error_codes::NONE);
    assert_eq!(
        h.end_resp(T, pid, 0, false, 3).error_code,
        error_codes::INVALID_TXN_STATE
    );
    // Next transaction: same epoch for classic clients.
    assert_eq!(h.add_code(T, pid, 0, &[tp("b", 0)]), error_codes::NONE);
    let out = h.end(T, pid, 0, false, 3);
    let m = out.markers[0].clone();
    assert_eq!(m.partitions, vec![tp("b", 0)]);
    h.written(&m);
    assert_eq!(h.state(T).state, TransactionState::CompleteAbort);
    assert_eq!(
        h.end_resp(T, pid, 0, true, 3).error_code,
        error_codes::INVALID_TXN_STATE
    );
    // Classic EndTxn from Empty is invalid.
    let e = h.init(T, pid, 0).producer_epoch.0;
    assert_eq!(
        h.end_resp(T, pid, e, false, 3).error_code,
        error_codes::INVALID_TXN_STATE
    );
}

#[test]
fn add_and_end_errors() {
    let mut h = H::new();
    assert_eq!(
        h.add_code(T, 1, 0, &[tp("a", 0)]),
        error_codes::INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(h.end_resp(T, 1, 0, true, 3).error_code, END_TXN_UNKNOWN_ID);
    let pid = h.init(T, -1, -1).producer_id.0;
    assert_eq!(
        h.add_code(T, pid + 1, 0, &[tp("a", 0)]),
        error_codes::INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        h.add_code(T, pid, 3, &[tp("a", 0)]),
        error_codes::PRODUCER_FENCED
    );
    assert_eq!(
        h.add_code("", pid, 0, &[tp("a", 0)]),
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        h.end_resp(T, pid + 1, 0, true, 3).error_code,
        error_codes::INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        h.end_resp(T, pid, 1, true, 3).error_code,
        error_codes::PRODUCER_FENCED
    );
    assert_eq!(
        h.end_resp(T, pid, 1, true, 5).error_code,
        error_codes::PRODUCER_FENCED
    );
    // Zero partitions: answered, no transaction started.
    let out = h.add(T, pid, 0, &[]);
    assert!(out.records.is_empty());
    assert_eq!(h.state(T).state, TransactionState::Empty);
    for api in [
        TxnApi::AddPartitionsToTxn,
        TxnApi::AddOffsetsToTxn,
        TxnApi::EndTxn,
    ] {
        assert_eq!(
            downgrade_error(api, 1, error_codes::PRODUCER_FENCED),
            error_codes::INVALID_PRODUCER_EPOCH
        );
        assert_eq!(
            downgrade_error(api, 2, error_codes::PRODUCER_FENCED),
            error_codes::PRODUCER_FENCED
        );
    }
    assert_eq!(
        downgrade_error(TxnApi::EndTxn, 0, error_codes::CONCURRENT_TRANSACTIONS),
        error_codes::CONCURRENT_TRANSACTIONS
    );
}

#[test]
fn verify_only_reports_membership_without_writing() {
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    h.add_code(T, pid, 0, &[tp("a", 0)]);
    let (_, out) = h.send(TxnRequest::AddPartitions(AddPartitionsRequest {
        transactional_id: T.into(),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(0),
        partitions: vec![tp("a", 1), tp("a", 0)],
        verify_only: true,
    }));
    assert!(out.records.is_empty());
    let TxnResponse::AddPartitions(r) = &out.replies[0].1 else {
        panic!()
    };
    let codes: Vec<(i32, ErrorCode)> = r
        .results
        .iter()
        .map(|p| (p.partition, p.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (0, error_codes::NONE),
            (1, error_codes::TRANSACTION_ABORTABLE)
        ]
    );
    assert_eq!(h.state(T).partitions.len(), 1);
}

#[test]
fn tv2_flow_bumps_epoch_per_end_and_handles_retries() {
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    assert_eq!(h.implicit(T, pid, 0, &[tp("a", 0)]), error_codes::NONE);
    assert_eq!(
        h.state(T).client_transaction_version,
        TransactionVersion::Tv2
    );
    let out = h.end(T, pid, 0, true, 5);
    let TxnResponse::EndTxn(r) = &out.replies[0].1 else {
        panic!()
    };
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch.0),
        (error_codes::NONE, pid, 1)
    );
    let m = out.markers[0].clone();
    assert_eq!(
        m.producer_epoch,
        ProducerEpoch(1),
        "markers carry the bumped epoch"
    );
    assert_eq!(m.transaction_version, TransactionVersion::Tv2);
    // Retry with the old epoch while markers are outstanding.
    assert_eq!(
        h.end_resp(T, pid, 0, true, 5).error_code,
        error_codes::CONCURRENT_TRANSACTIONS
    );
    h.written(&m);
    // CompleteCommit + commit + retry epoch ⇒ NONE (with the new epoch); + current ⇒ invalid.
    let r = h.end_resp(T, pid, 0, true, 5);
    assert_eq!((r.error_code, r.producer_epoch.0), (error_codes::NONE, 1));
    assert_eq!(
        h.end_resp(T, pid, 1, true, 5).error_code,
        error_codes::INVALID_TXN_STATE
    );
    assert_eq!(
        h.end_resp(T, pid, 0, false, 5).error_code,
        error_codes::INVALID_TXN_STATE
    );
    // The old epoch cannot add.
    assert_eq!(
        h.implicit(T, pid, 0, &[tp("a", 0)]),
        error_codes::PRODUCER_FENCED
    );
    // Second transaction at epoch 1, aborted: epoch 2.
    assert_eq!(h.implicit(T, pid, 1, &[tp("b", 0)]), error_codes::NONE);
    let out = h.end(T, pid, 1, false, 5);
    assert_eq!(out.markers[0].producer_epoch, ProducerEpoch(2));
    let m = out.markers[0].clone();
    h.written(&m);
    assert_eq!(
        h.end_resp(T, pid, 1, false, 5).error_code,
        error_codes::NONE
    );
    // Abort with nothing added: allowed, no markers, straight to CompleteAbort, epoch 3.
    let out = h.end(T, pid, 2, false, 5);
    assert!(out.markers.is_empty());
    assert_eq!(
        states(&out),
        vec![
            TransactionState::PrepareAbort,
            TransactionState::CompleteAbort
        ]
    );
    let TxnResponse::EndTxn(r) = &out.replies[0].1 else {
        panic!()
    };
    assert_eq!(r.producer_epoch, ProducerEpoch(3));
    // A commit with nothing added is not.
    assert_eq!(
        h.end_resp(T, pid, 3, true, 5).error_code,
        error_codes::INVALID_TXN_STATE
    );
}

#[test]
fn share_state_partitions_join_a_tv2_transaction_implicitly() {
    // KIP-1289: `__share_group_state-N` is registered through the implicit add.
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    let sgs = tp("__share_group_state", 7);
    assert_eq!(
        h.implicit(T, pid, 0, std::slice::from_ref(&sgs)),
        error_codes::NONE
    );
    assert_eq!(h.state(T).state, TransactionState::Ongoing);
    let out = h.send(TxnRequest::AddPartitionsImplicit(
        AddPartitionsImplicitRequest {
            transactional_id: T.into(),
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(0),
            partitions: vec![sgs.clone()],
        },
    ));
    assert!(out.1.records.is_empty());
    assert_eq!(h.implicit(T, pid, 0, &[tp("data", 0)]), error_codes::NONE);
    let out = h.end(T, pid, 0, true, 5);
    assert!(out.markers[0].partitions.contains(&sgs));
}

#[test]
fn new_incarnation_aborts_ongoing_then_answers_bumped_epoch() {
    for tv2 in [false, true] {
        let mut h = H::new();
        let pid = h.init(T, -1, -1).producer_id.0;
        if tv2 {
            h.implicit(T, pid, 0, &[tp("a", 0)]);
        } else {
            h.add_code(T, pid, 0, &[tp("a", 0)]);
        }
        let req = h.init_req(T, -1, -1);
        let (token, out) = h.send(req);
        assert!(
            out.replies.is_empty(),
            "the new producer waits for the abort"
        );
        assert_eq!(states(&out), vec![TransactionState::PrepareAbort]);
        let m = out.markers[0].clone();
        let fenced = if tv2 { 2 } else { 1 };
        assert_eq!(
            (m.result, m.producer_epoch.0),
            (TransactionResult::Abort, fenced)
        );
        // Meanwhile: another init is told to retry; the zombie cannot do anything.
        assert_eq!(
            h.init(T, -1, -1).error_code,
            error_codes::CONCURRENT_TRANSACTIONS
        );
        assert_eq!(
            h.end_resp(T, pid, 0, true, if tv2 { 5 } else { 3 })
                .error_code,
            error_codes::CONCURRENT_TRANSACTIONS
        );
        let out = h.written(&m);
        assert_eq!(
            states(&out),
            vec![TransactionState::CompleteAbort, TransactionState::Empty]
        );
        let r = init_of(&out, token);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch.0),
            (error_codes::NONE, pid, fenced + 1)
        );
        // The zombie is fenced for good.
        assert_eq!(
            h.add_code(T, pid, 0, &[tp("a", 0)]),
            error_codes::PRODUCER_FENCED
        );
        assert_eq!(
            h.implicit(T, pid, 0, &[tp("a", 0)]),
            error_codes::PRODUCER_FENCED
        );
        assert_eq!(
            h.end_resp(T, pid, 0, true, 3).error_code,
            error_codes::PRODUCER_FENCED
        );
        assert_eq!(
            h.end_resp(T, pid, 0, true, 5).error_code,
            error_codes::PRODUCER_FENCED
        );
        assert_eq!(h.init(T, pid, 0).error_code, error_codes::PRODUCER_FENCED);
    }
}

#[test]
fn timed_out_transaction_is_fenced_and_aborted_by_tick() {
    for tv2 in [false, true] {
        let mut h = H::new();
        let pid = h.init(T, -1, -1).producer_id.0;
        let start = h.now;
        if tv2 {
            h.implicit(T, pid, 0, &[tp("a", 0)]);
        } else {
            h.add_code(T, pid, 0, &[tp("a", 0)]);
        }
        let deadline = start + i64::from(TIMEOUT) + 1;
        assert_eq!(h.c.next_deadline(), Some(deadline));
        assert!(h.tick(deadline - 1).is_empty());
        let out = h.tick(deadline);
        assert_eq!(states(&out), vec![TransactionState::PrepareAbort]);
        let m = out.markers[0].clone();
        assert!(m.producer_epoch.0 >= 1, "fence bumped the epoch");
        assert_eq!(
            h.c.next_deadline(),
            None,
            "nothing to do until the markers are written"
        );
        h.written(&m);
        assert_eq!(h.state(T).state, TransactionState::CompleteAbort);
        for v in [3, 5] {
            assert_eq!(
                h.end_resp(T, pid, 0, true, v).error_code,
                error_codes::PRODUCER_FENCED
            );
        }
        assert_eq!(
            h.add_code(T, pid, 0, &[tp("a", 1)]),
            error_codes::PRODUCER_FENCED
        );
        // A new incarnation gets a still higher epoch.
        let r = h.init(T, -1, -1);
        assert_eq!(r.producer_epoch.0, m.producer_epoch.0 + 1);
    }
}

#[test]
fn idle_transactional_ids_expire() {
    let mut h = H::new();
    h.init(T, -1, -1);
    let exp = h.c.config().transactional_id_expiration_ms;
    assert_eq!(h.c.next_deadline(), Some(h.now + exp));
    let at = h.now + exp;
    assert!(h.tick(at - 1).is_empty());
    let out = h.tick(at);
    assert_eq!(
        out.records,
        vec![TxnRecord::Tombstone {
            transactional_id: T.into()
        }]
    );
    assert!(h.c.transaction(T).is_none());
    assert_eq!(
        h.c.describe(&[T.into()])[0].error_code,
        error_codes::TRANSACTIONAL_ID_NOT_FOUND
    );
    assert_eq!(h.c.next_deadline(), None);
}

#[test]
fn init_rotates_producer_id_on_epoch_exhaustion() {
    let old = 77;
    let mut h = H::seeded(
        T,
        value(
            old,
            MAX - 1,
            TransactionState::CompleteCommit,
            TransactionVersion::Tv0,
        ),
    );
    let req = h.init_req(T, old, MAX - 1);
    assert!(h.c.needs_fresh_producer_id(&req));
    // Without an id the coordinator asks the client to retry.
    let mut no_id = req.clone();
    if let TxnRequest::InitProducerId(r) = &mut no_id {
        r.fresh_producer_id = None;
    }
    let (token, out) = h.send(no_id);
    assert_eq!(
        init_of(&out, token).error_code,
        error_codes::COORDINATOR_LOAD_IN_PROGRESS
    );
    let (token, out) = h.send(req);
    let r = init_of(&out, token);
    assert_ne!(r.producer_id.0, old);
    assert_eq!(r.producer_epoch, ProducerEpoch(0));
    let v = h.state(T);
    assert_eq!(
        (v.prev_producer_id.0, v.last_producer_epoch.0),
        (old, MAX - 1)
    );
    // A retry of that call with the old id and exhausted epoch gets the same answer.
    let again = h.init(T, old, MAX - 1);
    assert_eq!(
        (again.producer_id, again.producer_epoch),
        (r.producer_id, r.producer_epoch)
    );
}

#[test]
fn tv2_end_rotates_producer_id_on_epoch_exhaustion() {
    let old = 77;
    let mut h = H::seeded(
        T,
        value(
            old,
            MAX - 1,
            TransactionState::Ongoing,
            TransactionVersion::Tv2,
        ),
    );
    let out = h.end(T, old, MAX - 1, true, 5);
    let TxnResponse::EndTxn(r) = &out.replies[0].1 else {
        panic!()
    };
    let new = r.producer_id;
    assert_ne!(new.0, old);
    assert_eq!(r.producer_epoch, ProducerEpoch(0));
    let m = out.markers[0].clone();
    assert_eq!((m.producer_id.0, m.producer_epoch.0), (old, MAX));
    assert_eq!(
        h.state(T).next_producer_id,
        new,
        "the next id is durable with PrepareCommit"
    );
    h.written(&m);
    let v = h.state(T);
    assert_eq!(
        (v.producer_id, v.producer_epoch.0, v.prev_producer_id.0),
        (new, 0, old)
    );
    // Retry across the rotation.
    let r = h.end_resp(T, old, MAX - 1, true, 5);
    assert_eq!(
        (r.error_code, r.producer_id, r.producer_epoch.0),
        (error_codes::NONE, new, 0)
    );
    // The new id works.
    assert_eq!(h.implicit(T, new.0, 0, &[tp("a", 0)]), error_codes::NONE);
}

#[test]
fn restart_in_prepare_commit_resends_markers() {
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    h.add_code(T, pid, 0, &[tp("a", 0), tp("b", 3)]);
    let out = h.end(T, pid, 0, true, 3);
    let before = out.markers[0].clone();
    // Crash before the markers are acknowledged; reload with a higher coordinator epoch.
    let mut c = h.rebuilt(1);
    let out = c.loaded(h.now);
    assert!(out.records.is_empty() && out.replies.is_empty());
    let [after] = &out.markers[..] else {
        panic!("{out:?}")
    };
    assert_eq!(after.coordinator_epoch, 1);
    assert_eq!(
        (
            &after.partitions,
            after.result,
            after.producer_id,
            after.producer_epoch
        ),
        (
            &before.partitions,
            before.result,
            before.producer_id,
            before.producer_epoch
        )
    );
    h.c = c;
    assert!(
        h.written(&before).is_empty(),
        "a pre-restart notification is ignored"
    );
    let after = after.clone();
    let out = h.written(&after);
    assert_eq!(states(&out), vec![TransactionState::CompleteCommit]);
}

#[test]
fn describe_and_list() {
    let mut h = H::new();
    let p1 = h.init("a", -1, -1).producer_id.0;
    h.init("b", -1, -1);
    h.add_code("a", p1, 0, &[tp("t", 1)]);
    let d = h.c.describe(&["a".into(), "zz".into()]);
    assert_eq!(d[0].state, "Ongoing");
    assert_eq!(d[0].partitions, vec![tp("t", 1)]);
    assert_eq!(d[0].transaction_start_time_ms, h.now);
    assert_eq!(d[1].error_code, error_codes::TRANSACTIONAL_ID_NOT_FOUND);
    let all = h.c.list(
        h.now,
        &ListTransactionsRequest {
            duration_filter_ms: -1,
            ..Default::default()
        },
    );
    assert_eq!(all.transactions.len(), 2);
    let ongoing = h.c.list(
        h.now,
        &ListTransactionsRequest {
            state_filters: vec!["Ongoing".into(), "Bogus".into()],
            duration_filter_ms: -1,
            ..Default::default()
        },
    );
    assert_eq!(ongoing.unknown_state_filters, vec!["Bogus".to_string()]);
    assert_eq!(ongoing.transactions.len(), 1);
    assert_eq!(ongoing.transactions[0].transactional_id, "a");
    let by_pid = h.c.list(
        h.now,
        &ListTransactionsRequest {
            producer_id_filters: vec![p1],
            duration_filter_ms: -1,
            ..Default::default()
        },
    );
    assert_eq!(by_pid.transactions.len(), 1);
    let long = h.c.list(
        h.now + 10,
        &ListTransactionsRequest {
            state_filters: vec!["Ongoing".into()],
            duration_filter_ms: 10,
            ..Default::default()
        },
    );
    assert!(long.transactions.is_empty());
    let long = h.c.list(
        h.now + 11,
        &ListTransactionsRequest {
            state_filters: vec!["Ongoing".into()],
            duration_filter_ms: 10,
            ..Default::default()
        },
    );
    assert_eq!(long.transactions.len(), 1);
}

#[test]
fn limits_are_errors() {
    let mut h = H::with(TxnConfig {
        transactional_ids_max: 1,
        partitions_per_transaction_max: 2,
        ..TxnConfig::default()
    });
    let pid = h.init(T, -1, -1).producer_id.0;
    assert_eq!(h.init("other", -1, -1).error_code, IDS_LIMIT_ERROR);
    assert_eq!(
        h.add_code(T, pid, 0, &[tp("a", 0), tp("a", 1), tp("a", 2)]),
        PARTITIONS_LIMIT_ERROR
    );
    assert_eq!(
        h.add_code(T, pid, 0, &[tp("a", 0), tp("a", 1)]),
        error_codes::NONE
    );
    assert_eq!(h.implicit(T, pid, 0, &[tp("a", 2)]), PARTITIONS_LIMIT_ERROR);
    assert_eq!(h.state(T).partitions.len(), 2);
}

#[test]
fn needs_fresh_producer_id_is_conservative() {
    let mut h = H::new();
    let req = h.init_req(T, -1, -1);
    assert!(h.c.needs_fresh_producer_id(&req));
    h.init(T, -1, -1);
    let req = h.init_req(T, -1, -1);
    assert!(!h.c.needs_fresh_producer_id(&req));
    let end = TxnRequest::EndTxn(EndTxnRequest {
        transactional_id: T.into(),
        producer_id: ProducerId(1),
        producer_epoch: ProducerEpoch(0),
        committed: true,
        version: 5,
        fresh_producer_id: None,
    });
    assert!(!h.c.needs_fresh_producer_id(&end));
}

#[test]
fn state_table_matches_kafka() {
    use TransactionState::*;
    for s in TransactionState::ALL {
        assert_eq!(TransactionState::from_id(s.id()), Some(s));
        assert_eq!(TransactionState::from_name(s.name()), Some(s));
    }
    assert!(PrepareAbort.valid_previous().contains(&Empty));
    assert!(!PrepareCommit.valid_previous().contains(&Empty));
    assert!(CompleteCommit.valid_previous() == [PrepareCommit]);
}

// Invariants checked in production (issue 28 point 6). No request can break one (the property
// tests check that), so these make the buggy step through the crate-internal functions every
// call goes through; nothing here is compiled out of release builds.

/// An idle (Empty) transaction for `T`, and its producer id and epoch.
fn idle() -> (H, i64, i16) {
    let mut h = H::new();
    let r = h.init(T, -1, -1);
    assert_eq!(r.error_code, NONE);
    (h, r.producer_id.0, r.producer_epoch.0)
}

/// The coordinator is stopped on `violation`: requests are answered UNKNOWN_SERVER_ERROR
/// without being handled, and nothing else runs.
fn assert_stopped(h: &mut H, violation: &TxnViolation, pid: i64, epoch: i16) {
    let before = h.c.durable_state();
    assert_eq!(h.c.violation(), Some(violation));
    assert!(h.c.check_invariants().is_err());
    let add = TxnRequest::AddPartitions(AddPartitionsRequest {
        transactional_id: T.to_string(),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(epoch),
        partitions: vec![tp("a", 0), tp("b", 1)],
        verify_only: false,
    });
    let init = h.init_req(T, pid, epoch);
    for (i, req) in [add, init].into_iter().enumerate() {
        let token = ReplyToken(100 + i as u64);
        let out = h.c.handle(h.now, token, req);
        assert!(out.records.is_empty() && out.markers.is_empty(), "{out:?}");
        match &out.replies[..] {
            [(t, TxnResponse::AddPartitions(r))] if *t == token => {
                assert_eq!(r.results.len(), 2);
                assert!(r
                    .results
                    .iter()
                    .all(|p| p.error_code == UNKNOWN_SERVER_ERROR));
            }
            [(t, TxnResponse::InitProducerId(r))] if *t == token => {
                assert_eq!(r.error_code, UNKNOWN_SERVER_ERROR);
                assert_eq!(r.producer_id, ProducerId(NO_PRODUCER_ID));
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(h.c.tick(i64::MAX).is_empty());
    assert!(h.c.loaded(h.now).is_empty());
    assert_eq!(h.c.durable_state(), before);
}

#[test]
fn an_invalid_transition_is_not_written_and_stops_the_coordinator() {
    let (mut h, pid, epoch) = idle();
    let before = h.c.durable_state();
    let mut next = h.state(T);
    // Empty -> CompleteCommit: not one of Kafka's valid previous states of CompleteCommit.
    next.state = TransactionState::CompleteCommit;
    let mut out = Output::default();
    h.c.write_value(T, next, &mut out);
    assert!(out.records.is_empty());
    assert_eq!(h.c.durable_state(), before);
    let violation = TxnViolation::Transition {
        transactional_id: T.to_string(),
        from: TransactionState::Empty,
        to: TransactionState::CompleteCommit,
    };
    assert_eq!(violation.invariant(), "valid-transition");
    assert_stopped(&mut h, &violation, pid, epoch);
}

#[test]
fn a_state_that_is_never_stored_is_not_written() {
    let (mut h, pid, epoch) = idle();
    let mut next = h.state(T);
    next.state = TransactionState::PrepareEpochFence;
    let mut out = Output::default();
    h.c.write_value(T, next, &mut out);
    assert!(out.records.is_empty());
    let violation = TxnViolation::Unstorable {
        transactional_id: T.to_string(),
        state: TransactionState::PrepareEpochFence,
    };
    assert_stopped(&mut h, &violation, pid, epoch);
}

#[test]
fn a_step_in_the_wrong_state_emits_nothing_and_fails_the_call() {
    // Markers for a transaction that is not preparing, or completing one: each once a
    // debug_assert or a panic, now a stop.
    for step in ["send markers", "complete"] {
        let (mut h, pid, epoch) = idle();
        assert_eq!(h.add_code(T, pid, epoch, &[tp("a", 0)]), NONE);
        let mut out = Output::default();
        // What the call had produced before the bad step.
        out.reply(
            ReplyToken(7),
            init_reply(NONE, ProducerId(pid), ProducerEpoch(epoch)),
        );
        out.records.push(TxnRecord::Tombstone {
            transactional_id: "other".to_string(),
        });
        match step {
            "send markers" => h.c.send_markers_or_complete(h.now, T, &mut out),
            _ => h.c.complete(h.now, T, &mut out),
        }
        let out = h.c.seal(out);
        assert!(
            out.records.is_empty() && out.markers.is_empty(),
            "{step}: {out:?}"
        );
        assert_eq!(out.replies.len(), 1);
        assert_eq!(
            out.replies[0].1.error_code(),
            UNKNOWN_SERVER_ERROR,
            "{step}"
        );
        let violation = TxnViolation::WrongState {
            transactional_id: T.to_string(),
            step,
            state: Some(TransactionState::Ongoing),
        };
        assert_stopped(&mut h, &violation, pid, epoch);
    }
}

// ---------------------------------------------------------------------------------------------
// KIP-939 two-phase commit
// ---------------------------------------------------------------------------------------------

fn two_phase() -> H {
    H::with(TxnConfig {
        two_phase_commit_enable: true,
        ..TxnConfig::default()
    })
}

#[test]
fn two_phase_commit_needs_the_broker_setting() {
    let mut h = H::new();
    for mode in [TwoPhaseCommit::Enabled, TwoPhaseCommit::KeepPrepared] {
        assert_eq!(
            h.init_2pc(T, mode).error_code,
            error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
    }
    assert!(h.c.transaction(T).is_none(), "nothing written");
}

#[test]
fn two_phase_transactions_never_time_out() {
    let mut h = two_phase();
    let r = h.init_2pc(T, TwoPhaseCommit::Enabled);
    assert_eq!(r.error_code, error_codes::NONE);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch.0);
    assert!(h.state(T).is_two_phase_commit());
    assert_eq!(h.implicit(T, pid, epoch, &[tp("a", 0)]), error_codes::NONE);
    // Far past transaction.max.timeout.ms and the id expiration: nothing happens.
    let out = h.tick(1_000 + 30 * 24 * 3_600_000);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(h.state(T).state, TransactionState::Ongoing);
    assert_eq!(h.c.next_deadline(), None);
    // The same transaction without 2PC is aborted by its timeout.
    let mut h = H::new();
    let pid = h.init(T, -1, -1).producer_id.0;
    assert_eq!(h.implicit(T, pid, 0, &[tp("a", 0)]), error_codes::NONE);
    let out = h.tick(1_000 + i64::from(TIMEOUT) + 1);
    assert_eq!(states(&out), vec![TransactionState::PrepareAbort]);
}

#[test]
fn keep_prepared_hands_the_ongoing_transaction_to_the_new_incarnation() {
    let mut h = two_phase();
    let r = h.init_2pc(T, TwoPhaseCommit::Enabled);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch.0);
    assert_eq!(
        h.implicit(T, pid, epoch, &[tp("a", 0), tp("b", 1)]),
        error_codes::NONE
    );
    // The broker restarts: the prepared transaction comes back from the log.
    let epoch_after = h.c.coordinator_epoch() + 1;
    h.c = h.rebuilt(epoch_after);
    let out = h.c.loaded(h.now);
    assert!(
        out.is_empty(),
        "an Ongoing transaction is not resumed: {out:?}"
    );
    let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!((r.producer_id.0, r.producer_epoch.0), (pid, epoch + 1));
    assert_eq!(
        (r.ongoing_txn_producer_id.0, r.ongoing_txn_producer_epoch.0),
        (pid, epoch)
    );
    let v = h.state(T);
    assert_eq!(v.state, TransactionState::Ongoing);
    assert_eq!(v.partitions.len(), 2, "the partitions are kept");
    // The previous incarnation is fenced.
    assert_eq!(
        h.implicit(T, pid, epoch, &[tp("c", 0)]),
        error_codes::PRODUCER_FENCED
    );
    assert_eq!(
        h.end_resp(T, pid, epoch, true, 5).error_code,
        error_codes::PRODUCER_FENCED
    );
    // The new one commits it; the markers carry an epoch above the data's.
    let out = h.end(T, pid, epoch + 1, true, 5);
    assert_eq!(out.replies[0].1.error_code(), error_codes::NONE);
    assert_eq!(states(&out), vec![TransactionState::PrepareCommit]);
    let m = out.markers[0].clone();
    assert_eq!(m.result, TransactionResult::Commit);
    assert!(m.producer_epoch.0 > epoch);
    assert_eq!(m.partitions.len(), 2);
    let out = h.written(&m);
    assert_eq!(states(&out), vec![TransactionState::CompleteCommit]);
    // Keeping again finds nothing ongoing.
    let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(r.ongoing_txn_producer_id.0, NO_PRODUCER_ID);
    assert_eq!(r.ongoing_txn_producer_epoch.0, NO_PRODUCER_EPOCH);
}

/// Issue 32, decision 0021 point 2: a second KeepPreparedTxn (the first one's answer lost, or
/// its process killed in turn) names the transaction by the epoch its records were written
/// with, the one the application's token was made from, not the epoch the first keep bumped
/// to; each keep fences the incarnation before it, and the last one commits. `restart` rebuilds
/// the coordinator from its log between the steps.
fn repeated_keep_prepared_reports_the_original_epoch(restart: bool) {
    let mut h = two_phase();
    let r = h.init_2pc(T, TwoPhaseCommit::Enabled);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch.0);
    assert_eq!(h.implicit(T, pid, epoch, &[tp("a", 0)]), error_codes::NONE);
    let mut incarnations = vec![epoch];
    for _ in 0..3 {
        if restart {
            let next = h.c.coordinator_epoch() + 1;
            h.c = h.rebuilt(next);
            assert!(h.c.loaded(h.now).is_empty());
        }
        let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
        assert_eq!(r.error_code, error_codes::NONE);
        assert_eq!(
            (r.ongoing_txn_producer_id.0, r.ongoing_txn_producer_epoch.0),
            (pid, epoch),
            "every keep names the transaction by its own epoch"
        );
        let new = r.producer_epoch.0;
        assert_eq!(r.producer_id.0, pid);
        assert!(
            new > *incarnations.last().unwrap(),
            "a fresh, fencing epoch"
        );
        let v = h.state(T);
        assert_eq!(v.state, TransactionState::Ongoing);
        assert_eq!(v.ongoing_producer_epoch.0, epoch);
        // Every earlier incarnation is fenced.
        for &old in &incarnations {
            assert_eq!(
                h.implicit(T, pid, old, &[tp("c", 0)]),
                error_codes::PRODUCER_FENCED
            );
            assert_eq!(
                h.end_resp(T, pid, old, true, 5).error_code,
                error_codes::PRODUCER_FENCED
            );
        }
        incarnations.push(new);
    }
    let last = *incarnations.last().unwrap();
    if restart {
        let next = h.c.coordinator_epoch() + 1;
        h.c = h.rebuilt(next);
    }
    let out = h.end(T, pid, last, true, 5);
    assert_eq!(out.replies[0].1.error_code(), error_codes::NONE);
    assert_eq!(states(&out), vec![TransactionState::PrepareCommit]);
    assert_eq!(
        h.state(T).ongoing_producer_epoch.0,
        NO_PRODUCER_EPOCH,
        "the kept transaction ended"
    );
    let m = out.markers[0].clone();
    assert_eq!(m.result, TransactionResult::Commit);
    assert!(
        m.producer_epoch.0 > last,
        "markers carry the epoch after the end bump"
    );
    let out = h.written(&m);
    assert_eq!(states(&out), vec![TransactionState::CompleteCommit]);
    // The next transaction is named by its own epoch again.
    let next_epoch = h.state(T).producer_epoch.0;
    assert_eq!(
        h.implicit(T, pid, next_epoch, &[tp("a", 0)]),
        error_codes::NONE
    );
    let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
    assert_eq!(
        (r.ongoing_txn_producer_id.0, r.ongoing_txn_producer_epoch.0),
        (pid, next_epoch)
    );
}

#[test]
fn repeated_keep_prepared_reports_the_original_epoch_and_the_last_commits() {
    repeated_keep_prepared_reports_the_original_epoch(false);
}

#[test]
fn repeated_keep_prepared_reports_the_original_epoch_across_restarts() {
    repeated_keep_prepared_reports_the_original_epoch(true);
}

#[test]
fn init_without_keep_prepared_aborts_the_prepared_transaction() {
    let mut h = two_phase();
    let r = h.init_2pc(T, TwoPhaseCommit::Enabled);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch.0);
    assert_eq!(h.implicit(T, pid, epoch, &[tp("a", 0)]), error_codes::NONE);
    let req = {
        let mut req = h.init_req(T, -1, -1);
        if let TxnRequest::InitProducerId(r) = &mut req {
            r.two_phase_commit = TwoPhaseCommit::Enabled;
        }
        req
    };
    let (token, out) = h.send(req);
    assert!(out.replies.is_empty(), "parked until the abort completes");
    assert_eq!(states(&out), vec![TransactionState::PrepareAbort]);
    let m = out.markers[0].clone();
    assert_eq!(m.result, TransactionResult::Abort);
    let out = h.written(&m);
    let r = init_of(&out, token);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(r.ongoing_txn_producer_id.0, NO_PRODUCER_ID);
    assert!(r.producer_epoch.0 > epoch);
}

#[test]
fn keep_prepared_refuses_an_ordinary_ongoing_transaction() {
    let mut h = two_phase();
    let pid = h.init(T, -1, -1).producer_id.0;
    assert_eq!(h.implicit(T, pid, 0, &[tp("a", 0)]), error_codes::NONE);
    assert!(!h.state(T).is_two_phase_commit());
    let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
    assert_eq!(r.error_code, error_codes::INVALID_TXN_STATE);
    assert_eq!(h.state(T).state, TransactionState::Ongoing);
}

#[test]
fn keep_prepared_on_an_exhausted_epoch_is_refused() {
    let mut v = value(
        7,
        EPOCH_EXHAUSTED_AT - 1,
        TransactionState::Ongoing,
        TransactionVersion::Tv2,
    );
    v.txn_timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS;
    let mut h = H::seeded(T, v);
    h.c = TxnCoordinator::new(
        TxnConfig {
            two_phase_commit_enable: true,
            ..TxnConfig::default()
        },
        0,
    );
    for r in &h.records {
        h.c.replay(r);
    }
    let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
    assert_eq!(r.error_code, error_codes::INVALID_TXN_STATE);
}

/// Found by the interleavings property test: the incarnation a KeepPrepared fenced must stay
/// fenced after the kept transaction ends, not be handed the new incarnation's epoch as a
/// "retry" of an InitProducerId it never sent.
#[test]
fn the_incarnation_fenced_by_keep_prepared_cannot_come_back_as_a_retry() {
    let mut h = two_phase();
    let r = h.init_2pc(T, TwoPhaseCommit::Enabled);
    let (pid, old) = (r.producer_id.0, r.producer_epoch.0);
    // A classic (EndTxn v3) client: its abort does not bump the epoch again.
    let out = h.add(T, pid, old, &[tp("a", 0)]);
    assert_eq!(out.replies[0].1.error_code(), error_codes::NONE);
    let r = h.init_2pc(T, TwoPhaseCommit::KeepPrepared);
    assert_eq!(r.error_code, error_codes::NONE);
    let new = r.producer_epoch.0;
    let out = h.end(T, pid, new, false, 3);
    let m = out.markers[0].clone();
    h.written(&m);
    let r = h.init(T, pid, old);
    assert_eq!(r.error_code, error_codes::PRODUCER_FENCED, "{r:?}");
    // The new incarnation itself may retry its own bump.
    let r = h.init(T, pid, h.state(T).producer_epoch.0);
    assert_eq!(r.error_code, error_codes::NONE);
}

#[test]
fn keep_prepared_with_a_stale_expected_epoch_is_fenced() {
    let mut h = two_phase();
    let r = h.init_2pc(T, TwoPhaseCommit::Enabled);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch.0);
    assert_eq!(h.implicit(T, pid, epoch, &[tp("a", 0)]), error_codes::NONE);
    let mut req = h.init_req(T, pid, epoch + 5);
    if let TxnRequest::InitProducerId(r) = &mut req {
        r.two_phase_commit = TwoPhaseCommit::KeepPrepared;
    }
    let (token, out) = h.send(req);
    assert_eq!(
        init_of(&out, token).error_code,
        error_codes::PRODUCER_FENCED
    );
    assert_eq!(h.state(T).producer_epoch.0, epoch, "nothing written");
}
