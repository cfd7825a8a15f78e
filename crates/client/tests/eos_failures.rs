//! The proposal's failure cases (KIP-1289, spec §5 cases 1–7) end to end with our client
//! against the real `shoal` binary, and a rebalance between `share_group_metadata()` and the
//! send: a read-transform-write pipeline (share consumer in explicit mode, transactional
//! producer, the acknowledgements staged in the transaction) fails at each point, and each
//! test checks what a read_committed reader sees, the share group's state (start offset,
//! lag, who gets the records again and with which delivery count), and that a fresh pipeline
//! then finishes every input record exactly once. Test names carry the case (`caseN`).
//!
//! The broker-level versions (raw protocol, cutting logs) are in
//! `crates/broker/tests/txn_share_ack_crash.rs`. Kafka 4.4 has no TxnShareAcknowledge: these
//! tests return at once with `SHOAL_CLIENT_TARGET=kafka`.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::eos::{produce_outputs, share_offsets, transactional, txn_code};
use common::log::{create_topic, fetch_all, fetch_committed};
use common::share::{consumer, poll_until, setup};
use common::{bounded, config, secs, target, Broker, Target};
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::producer::{Producer, ProducerRecord, TxnState};
use shoal_client::share_consumer::{AcknowledgeType, ShareConsumer, ShareRecord};
use shoal_client::{Admin, ErrorClass};
use shoal_protocol::ErrorCode;

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// Short locks may be asked for (1 s), and members heartbeat often, so that a rebalance
/// reaches a member's epoch within a second.
const SETTINGS: &[(&str, &str)] = &[
    ("group.share.min.record.lock.duration.ms", "1000"),
    ("group.share.min.heartbeat.interval.ms", "100"),
    ("group.share.heartbeat.interval.ms", "300"),
];

fn start(dir: &std::path::Path) -> Broker {
    Broker::start_with(dir, SETTINGS)
}

/// Sets group or topic configs.
async fn alter(broker: &Broker, resource: ConfigResource, configs: &[(&str, &str)]) {
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    let ops = configs
        .iter()
        .map(|(name, value)| AlterConfigOp::Set {
            name: (*name).into(),
            value: (*value).into(),
        })
        .collect();
    let set = admin
        .incremental_alter_configs(&[(resource, ops)], Mode::Apply)
        .await
        .unwrap();
    assert!(set[0].1.is_ok(), "{:?}", set[0]);
    admin.close().await;
}

/// `n` numbered records in `input` (one partition), the group reading from the earliest
/// offset with `lock_ms` locks, and an empty `output`.
async fn pipeline_topics(
    broker: &Broker,
    input: &str,
    output: &str,
    group: &str,
    n: usize,
    lock_ms: u32,
) {
    setup(broker, input, 1, n, group).await;
    let lock = lock_ms.to_string();
    alter(
        broker,
        ConfigResource::group(group),
        &[("share.record.lock.duration.ms", lock.as_str())],
    )
    .await;
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    create_topic(admin.cluster(), output, 1).await;
    admin.close().await;
}

/// A member polling `n` records of `topic` and accepting each (explicit mode: not sent).
async fn take(
    broker: &Broker,
    group: &str,
    topic: &str,
    n: usize,
) -> (ShareConsumer, Vec<ShareRecord>) {
    let mut c = consumer(broker, group, "explicit", topic).await;
    let records = poll_until(&mut c, n, Duration::from_secs(secs(30))).await;
    assert_eq!(records.len(), n, "{records:?}");
    assert!(records.iter().all(|r| r.delivery_count == 1), "{records:?}");
    for r in &records {
        c.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    (c, records)
}

/// The values of `topic`-0 a read_committed reader sees, once at least `count` are visible
/// (or ten seconds passed).
async fn committed(broker: &Broker, topic: &str, count: usize) -> Vec<String> {
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    let fetched = fetch_committed(admin.cluster(), topic, 0, count).await;
    admin.close().await;
    fetched
        .records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect()
}

/// How many data records `topic`-0 holds, committed, aborted or open.
async fn written(broker: &Broker, topic: &str) -> usize {
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    let n = fetch_all(admin.cluster(), topic, 0, false)
        .await
        .records
        .len();
    admin.close().await;
    n
}

/// The state of `tid`'s transaction at its coordinator.
async fn txn_state(broker: &Broker, tid: &str) -> String {
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    let d = admin.describe_transactions(&[tid]).await.unwrap();
    admin.close().await;
    d[0].1.as_ref().unwrap().state.clone()
}

/// Waits until `tid` has no open transaction (the coordinator ended or timed it out).
async fn wait_txn_ended(broker: &Broker, tid: &str) -> String {
    loop {
        let state = txn_state(broker, tid).await;
        if matches!(state.as_str(), "CompleteAbort" | "CompleteCommit" | "Empty") {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every input's output, sorted: what read_committed must show at the end, each once.
fn expected(n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("out:value-{i}")).collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A fresh pipeline's member finishing `input` with `p`: poll, accept, produce the outputs
/// and stage the acknowledgements in one transaction, commit; until the group's start
/// offset reaches `n`. Then checks the end state: read_committed shows every input's
/// output exactly once, the group has acknowledged everything (start offset `n`, lag 0),
/// and no one gets a record again. Returns the records it processed (none delivered twice).
async fn finish(
    broker: &Broker,
    p: &Producer,
    input: &str,
    out: &str,
    group: &str,
    n: usize,
) -> Vec<ShareRecord> {
    let mut c = consumer(broker, group, "explicit", input).await;
    let mut processed: Vec<ShareRecord> = Vec::new();
    while share_offsets(broker, group, input).await.start_offset < n as i64 {
        let records = c.poll(Duration::from_millis(500)).await.unwrap();
        if records.is_empty() {
            continue;
        }
        for r in &records {
            c.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        p.begin_transaction().unwrap();
        produce_outputs(p, out, &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        assert_eq!(acks.len(), records.len());
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        p.commit_transaction().await.unwrap();
        processed.extend(records);
    }
    let offsets_seen: Vec<i64> = processed.iter().map(|r| r.offset).collect();
    let unique: BTreeSet<i64> = offsets_seen.iter().copied().collect();
    assert_eq!(
        unique.len(),
        offsets_seen.len(),
        "delivered twice: {offsets_seen:?}"
    );

    assert_eq!(sorted(committed(broker, out, n).await), expected(n));
    let state = share_offsets(broker, group, input).await;
    assert_eq!((state.start_offset, state.lag), (n as i64, 0), "{state:?}");
    let again = poll_until(&mut c, 1, Duration::from_secs(1)).await;
    assert!(again.is_empty(), "{again:?}");
    c.close().await;
    let mut other = consumer(broker, group, "explicit", input).await;
    let again = poll_until(&mut other, 1, Duration::from_secs(1)).await;
    assert!(again.is_empty(), "{again:?}");
    other.close().await;
    processed
}

fn offsets_of(records: &[ShareRecord]) -> Vec<i64> {
    records.iter().map(|r| r.offset).collect()
}

fn all_redelivered(records: &[ShareRecord], n: usize, count: i16) {
    assert_eq!(offsets_of(records), (0..n as i64).collect::<Vec<_>>());
    assert!(
        records.iter().all(|r| r.delivery_count == count),
        "delivery counts: {:?}",
        records.iter().map(|r| r.delivery_count).collect::<Vec<_>>()
    );
}

/// Case 1: a worker polls records and dies before it begins a transaction (consumer and
/// producer dropped without close, their connections cut). Nothing was staged or written;
/// the records' 1 s locks expire and another member gets each once more (delivery count 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case1_crash_before_begin_locks_expire_and_the_records_come_back() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c1-in", "c1-out", "g1", n, 1000).await;
        let (c, _records) = take(&broker, "g1", "c1-in", n).await;
        let p = transactional(&broker, "tid-c1", &[("transaction.timeout.ms", "60000")]).await;
        // The crash: nothing closed, nothing sent.
        drop(c);
        drop(p);
        let state = share_offsets(&broker, "g1", "c1-in").await;
        assert_eq!((state.start_offset, state.lag), (0, n as i64), "{state:?}");

        let p = transactional(&broker, "tid-c1", &[("transaction.timeout.ms", "60000")]).await;
        let processed = finish(&broker, &p, "c1-in", "c1-out", "g1", n).await;
        all_redelivered(&processed, n, 2);
        assert_eq!(written(&broker, "c1-out").await, n, "one output each, ever");
        p.close().await;
    })
    .await;
}

/// Case 2: the worker produced its outputs in a transaction and died before staging the
/// acknowledgements or committing. The coordinator aborts the transaction when its 1 s
/// timeout passes: the outputs never become visible to read_committed; the records' locks
/// expire and they come back (delivery count 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case2_crash_after_produce_before_commit_times_out_and_aborts() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c2-in", "c2-out", "g2", n, 2000).await;
        let (c, records) = take(&broker, "g2", "c2-in", n).await;
        let p = transactional(&broker, "tid-c2", &[("transaction.timeout.ms", "1000")]).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "c2-out", &records).await;
        drop(c);
        drop(p);
        assert_eq!(
            wait_txn_ended(&broker, "tid-c2").await,
            "CompleteAbort",
            "timed out"
        );
        assert!(committed(&broker, "c2-out", 0).await.is_empty());
        assert_eq!(written(&broker, "c2-out").await, n, "written, then aborted");
        assert_eq!(share_offsets(&broker, "g2", "c2-in").await.start_offset, 0);

        let p = transactional(
            &broker,
            "tid-c2-next",
            &[("transaction.timeout.ms", "60000")],
        )
        .await;
        let processed = finish(&broker, &p, "c2-in", "c2-out", "g2", n).await;
        all_redelivered(&processed, n, 2);
        p.close().await;
    })
    .await;
}

/// Case 3: the worker staged the acknowledgements too and died before committing. The
/// records are TX_PENDING: their 30 s locks no longer run and no one gets them; the
/// transaction's 4 s timeout aborts it, which makes them AVAILABLE at once (long before the
/// locks would have ended), and the outputs stay invisible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case3_crash_after_staging_before_commit_times_out_and_the_records_are_available() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c3-in", "c3-out", "g3", n, 30_000).await;
        let (mut c, records) = take(&broker, "g3", "c3-in", n).await;
        let p = transactional(&broker, "tid-c3", &[("transaction.timeout.ms", "4000")]).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "c3-out", &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        let started = Instant::now();
        drop(c);
        drop(p);
        // TX_PENDING: the transaction owns them, no member gets them while it is open.
        let mut other = consumer(&broker, "g3", "explicit", "c3-in").await;
        let early = poll_until(&mut other, 1, Duration::from_secs(1)).await;
        assert!(early.is_empty(), "{early:?}");
        other.close().await;
        assert_eq!(txn_state(&broker, "tid-c3").await, "Ongoing");
        assert_eq!(wait_txn_ended(&broker, "tid-c3").await, "CompleteAbort");
        assert!(committed(&broker, "c3-out", 0).await.is_empty());
        assert_eq!(written(&broker, "c3-out").await, n);
        let state = share_offsets(&broker, "g3", "c3-in").await;
        assert_eq!((state.start_offset, state.lag), (0, n as i64), "{state:?}");

        let p = transactional(
            &broker,
            "tid-c3-next",
            &[("transaction.timeout.ms", "60000")],
        )
        .await;
        let processed = finish(&broker, &p, "c3-in", "c3-out", "g3", n).await;
        all_redelivered(&processed, n, 2);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "came back by the abort, not by a 30 s lock: {:?}",
            started.elapsed()
        );
        p.close().await;
    })
    .await;
}

/// Case 4: the broker is killed (SIGKILL) right after `commit_transaction` returned: the
/// commit was decided, its markers may not have landed. On restart the commit is whole:
/// the outputs visible and the acknowledgements applied, and no one gets the records again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case4_broker_crash_after_the_commit_decision_finishes_the_commit() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path());
    bounded(secs(90), async {
        let n = 10;
        pipeline_topics(&broker, "c4-in", "c4-out", "g4", n, 30_000).await;
        let (mut c, records) = take(&broker, "g4", "c4-in", n).await;
        let p = transactional(&broker, "tid-c4", &[("transaction.timeout.ms", "60000")]).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "c4-out", &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        p.commit_transaction().await.unwrap();
        broker.kill();
        drop(c);
        drop(p);
        broker.restart();

        assert_eq!(sorted(committed(&broker, "c4-out", n).await), expected(n));
        // The share-state partition's marker is applied on restart, maybe a moment later.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut state = share_offsets(&broker, "g4", "c4-in").await;
        while state.start_offset != n as i64 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            state = share_offsets(&broker, "g4", "c4-in").await;
        }
        assert_eq!((state.start_offset, state.lag), (n as i64, 0), "{state:?}");
        assert_eq!(txn_state(&broker, "tid-c4").await, "CompleteCommit");

        let p = transactional(&broker, "tid-c4", &[("transaction.timeout.ms", "60000")]).await;
        let processed = finish(&broker, &p, "c4-in", "c4-out", "g4", n).await;
        assert!(processed.is_empty(), "{processed:?}");
        assert_eq!(written(&broker, "c4-out").await, n);
        p.close().await;
    })
    .await;
}

/// One round of the in-flight crash: `n` records of `{round}-in` taken, produced and staged,
/// the commit started and the broker killed `delay` later, restarted. Returns the outcome.
async fn commit_then_kill(broker: &mut Broker, round: &str, n: usize, delay: Duration) -> String {
    let (input, output, group, tid) = (
        format!("{round}-in"),
        format!("{round}-out"),
        format!("g-{round}"),
        format!("tid-{round}"),
    );
    pipeline_topics(broker, &input, &output, &group, n, 30_000).await;
    let (mut c, records) = take(broker, &group, &input, n).await;
    let p = transactional(broker, &tid, &[("transaction.timeout.ms", "3000")]).await;
    p.begin_transaction().unwrap();
    produce_outputs(&p, &output, &records).await;
    let acks = c.acknowledgements_for_transaction().unwrap();
    p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
        .await
        .unwrap();
    let committing = {
        let p = p.clone();
        tokio::spawn(async move { p.commit_transaction().await })
    };
    if delay.is_zero() {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(delay).await;
    }
    broker.kill();
    drop(c);
    broker.restart();
    let result = committing.await.unwrap();
    drop(p);

    let ended = wait_txn_ended(broker, &tid).await;
    let visible = committed(broker, &output, 0).await;
    let state = share_offsets(broker, &group, &input).await;
    eprintln!("{round}: killed {delay:?} into the commit, which returned {result:?}; coordinator {ended}; {state:?}");
    if result.is_ok() {
        assert_eq!(ended, "CompleteCommit");
    }
    let p = transactional(broker, &tid, &[("transaction.timeout.ms", "60000")]).await;
    match ended.as_str() {
        "CompleteCommit" => {
            assert_eq!(sorted(committed(broker, &output, n).await), expected(n));
            let processed = finish(broker, &p, &input, &output, &group, n).await;
            assert!(
                processed.is_empty(),
                "committed and redelivered: {processed:?}"
            );
        }
        "CompleteAbort" => {
            assert!(visible.is_empty(), "aborted and visible: {visible:?}");
            assert_eq!(state.start_offset, 0, "aborted and acknowledged: {state:?}");
            let processed = finish(broker, &p, &input, &output, &group, n).await;
            all_redelivered(&processed, n, 2);
        }
        other => panic!("transaction ended as {other}"),
    }
    assert_eq!(
        written(broker, &output).await,
        n + usize::from(ended == "CompleteAbort") * n
    );
    p.close().await;
    ended
}

/// Case 4, the window before EndTxn's answer: the broker is killed while the commit is in
/// flight (at a few delays into it, one round each), then restarted. Whatever the client's
/// commit returns, the outcome is whole — committed (outputs visible, acknowledgements
/// applied) or aborted (outputs invisible, every record back with delivery count 2) — never
/// one side without the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case4_broker_crash_while_the_commit_is_in_flight_is_all_or_nothing() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path());
    bounded(secs(120), async {
        for (round, delay_ms) in [0u64, 1, 2, 5].into_iter().enumerate() {
            let delay = Duration::from_millis(delay_ms);
            commit_then_kill(&mut broker, &format!("c4f{round}"), 10, delay).await;
        }
    })
    .await;
}

/// Case 5: a second instance with the same transactional.id fences the first (a zombie that
/// produced and staged): its open transaction is aborted, so the staged records are
/// AVAILABLE again; the zombie's commit fails fatally with PRODUCER_FENCED; the second
/// instance processes every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case5_zombie_is_fenced_and_the_new_instance_processes_the_records_once() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c5-in", "c5-out", "g5", n, 30_000).await;
        let (mut c, records) = take(&broker, "g5", "c5-in", n).await;
        let zombie = transactional(&broker, "tid-c5", &[("transaction.timeout.ms", "60000")]).await;
        zombie.begin_transaction().unwrap();
        produce_outputs(&zombie, "c5-out", &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        zombie
            .send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();

        let second = transactional(&broker, "tid-c5", &[("transaction.timeout.ms", "60000")]).await;
        let err = zombie.commit_transaction().await.unwrap_err();
        assert_eq!(txn_code(&err), ErrorCode::PRODUCER_FENCED, "{err:?}");
        assert_eq!(err.class(), ErrorClass::Fatal, "{err:?}");
        assert!(committed(&broker, "c5-out", 0).await.is_empty());
        assert_eq!(written(&broker, "c5-out").await, n);
        let state = share_offsets(&broker, "g5", "c5-in").await;
        assert_eq!((state.start_offset, state.lag), (0, n as i64), "{state:?}");
        zombie.close().await;

        let processed = finish(&broker, &second, "c5-in", "c5-out", "g5", n).await;
        all_redelivered(&processed, n, 2);
        c.close().await;
        second.close().await;
    })
    .await;
}

/// Case 6: the worker aborts its transaction itself: outputs invisible, the staged records
/// AVAILABLE at once and redelivered (delivery count 2), to another member too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case6_explicit_abort_hides_the_output_and_redelivers_the_records() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c6-in", "c6-out", "g6", n, 30_000).await;
        let (mut c, records) = take(&broker, "g6", "c6-in", n).await;
        let p = transactional(&broker, "tid-c6", &[("transaction.timeout.ms", "60000")]).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "c6-out", &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        p.abort_transaction().await.unwrap();
        assert_eq!(p.transaction_state(), TxnState::Ready);

        assert!(committed(&broker, "c6-out", 0).await.is_empty());
        assert_eq!(written(&broker, "c6-out").await, n);
        let state = share_offsets(&broker, "g6", "c6-in").await;
        assert_eq!((state.start_offset, state.lag), (0, n as i64), "{state:?}");
        let processed = finish(&broker, &p, "c6-in", "c6-out", "g6", n).await;
        all_redelivered(&processed, n, 2);
        c.close().await;
        p.close().await;
    })
    .await;
}

/// Case 7: one produce of the transaction fails (a record larger than the output topic's
/// `max.message.bytes`: MESSAGE_TOO_LARGE); the commit is refused, the transaction aborted,
/// and everything rolled back: the other outputs invisible, the staged acknowledgements
/// undone, the records redelivered (delivery count 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case7_partial_produce_failure_refuses_the_commit_and_rolls_everything_back() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c7-in", "c7-out", "g7", n, 30_000).await;
        alter(
            &broker,
            ConfigResource::topic("c7-out"),
            &[("max.message.bytes", "1024")],
        )
        .await;
        let (mut c, records) = take(&broker, "g7", "c7-in", n).await;
        let p = transactional(&broker, "tid-c7", &[("transaction.timeout.ms", "60000")]).await;
        p.begin_transaction().unwrap();
        let acks = c.acknowledgements_for_transaction().unwrap();
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        produce_outputs(&p, "c7-out", &records[..n - 1]).await;
        let big = ProducerRecord::new("c7-out", vec![b'x'; 4096]);
        let failed = p.send(big).await.unwrap().await.unwrap_err();
        assert_eq!(failed.code(), ErrorCode::MESSAGE_TOO_LARGE, "{failed:?}");
        let refused = p.commit_transaction().await.unwrap_err();
        assert_eq!(refused.class(), ErrorClass::Abortable, "{refused:?}");
        p.abort_transaction().await.unwrap();

        assert!(committed(&broker, "c7-out", 0).await.is_empty());
        assert_eq!(written(&broker, "c7-out").await, n - 1);
        let state = share_offsets(&broker, "g7", "c7-in").await;
        assert_eq!((state.start_offset, state.lag), (0, n as i64), "{state:?}");
        let processed = finish(&broker, &p, "c7-in", "c7-out", "g7", n).await;
        all_redelivered(&processed, n, 2);
        c.close().await;
        p.close().await;
    })
    .await;
}

/// A rebalance between `share_group_metadata()` and the send: a second member joins, the
/// first member's epoch moves on, and the acknowledgements sent with the old epoch are
/// refused with STALE_MEMBER_EPOCH (abortable) and stage nothing. The worker aborts and
/// retries with fresh metadata: every record committed once, none lost, none redelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case8_rebalance_before_the_send_is_stale_and_a_retry_commits_once() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    bounded(secs(60), async {
        let n = 10;
        pipeline_topics(&broker, "c8-in", "c8-out", "g8", n, 30_000).await;
        let (mut c, records) = take(&broker, "g8", "c8-in", n).await;
        let meta = c.share_group_metadata();
        let acks = c.acknowledgements_for_transaction().unwrap();

        let mut joiner = consumer(&broker, "g8", "explicit", "c8-in").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.share_group_metadata().member_epoch == meta.member_epoch {
            assert!(Instant::now() < deadline, "the member's epoch never moved");
            // The joiner's heartbeats run in its background task; nothing to deliver to it.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let fresh = c.share_group_metadata();
        assert!(fresh.member_epoch > meta.member_epoch, "{meta:?} {fresh:?}");

        let p = transactional(&broker, "tid-c8", &[("transaction.timeout.ms", "60000")]).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "c8-out", &records).await;
        let err = p
            .send_share_acknowledgements_to_transaction(&acks, &meta)
            .await
            .unwrap_err();
        assert_eq!(txn_code(&err), ErrorCode::STALE_MEMBER_EPOCH, "{err:?}");
        assert_eq!(err.class(), ErrorClass::Abortable, "{err:?}");
        p.abort_transaction().await.unwrap();
        assert_eq!(share_offsets(&broker, "g8", "c8-in").await.start_offset, 0);

        // Nothing was staged: the member still holds the records; retry with fresh metadata.
        p.begin_transaction().unwrap();
        produce_outputs(&p, "c8-out", &records).await;
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        p.commit_transaction().await.unwrap();

        assert_eq!(sorted(committed(&broker, "c8-out", n).await), expected(n));
        assert_eq!(
            written(&broker, "c8-out").await,
            2 * n,
            "one aborted try, one commit"
        );
        let processed = finish(&broker, &p, "c8-in", "c8-out", "g8", n).await;
        assert!(processed.is_empty(), "{processed:?}");
        let again = poll_until(&mut joiner, 1, Duration::from_secs(1)).await;
        assert!(again.is_empty(), "{again:?}");
        joiner.close().await;
        c.close().await;
        p.close().await;
    })
    .await;
}
