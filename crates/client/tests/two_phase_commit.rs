//! Two-phase commit (KIP-939) carrying share acknowledgements, from the client against the
//! real `shoal` binary: a checkpointing source stages acknowledgements over many polls with
//! its output in the same transaction, prepares, loses the client (and the broker, kill -9),
//! and a new instance keeps the prepared transaction and completes it with the token its
//! checkpoint stored. Apache Kafka 4.4 answers KeepPreparedTxn with UNSUPPORTED_VERSION, so
//! these run against Shoal only.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::eos::share_offsets;
use common::log::{create_topic, fetch_all, fetch_committed};
use common::share::{consumer, poll_until, setup, value};
use common::{bounded, config, secs, target, Broker, Target};
use shoal_client::producer::{
    PreparedOutcome, PreparedTxnState, Producer, ProducerConfig, ProducerRecord,
    TransactionalShareAcknowledger, TxnState,
};
use shoal_client::share_consumer::{AcknowledgeType, ShareConsumer};
use shoal_client::Admin;

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const ENABLED: &[(&str, &str)] = &[("transaction.two.phase.commit.enable", "true")];

async fn acknowledger(broker: &Broker, id: &str) -> TransactionalShareAcknowledger {
    TransactionalShareAcknowledger::new(
        ProducerConfig::builder(config(broker, &[]))
            .transactional_id(id)
            .two_phase_commit(true)
            .build()
            .unwrap(),
    )
    .await
    .unwrap()
}

/// Polls until `n` records arrived, over as many polls as it takes, staging each poll's
/// ACCEPTs and sending its outputs (`processed:<value>`) in the acknowledger's transaction.
/// Returns how many polls it took.
async fn stage_polls(
    acker: &TransactionalShareAcknowledger,
    c: &mut ShareConsumer,
    out: &str,
    n: usize,
) -> usize {
    let mut polls = 0;
    let mut seen = 0;
    while seen < n {
        // Small polls: the transaction spans many of them.
        let records = poll_until(c, 1, Duration::from_secs(secs(20))).await;
        assert!(!records.is_empty(), "no records after {seen}");
        polls += 1;
        seen += records.len();
        for r in &records {
            c.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        let acks = c.acknowledgements_for_transaction().unwrap();
        acker
            .stage_acknowledgements(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        for r in &records {
            let record = ProducerRecord::new(out, format!("processed:{}", value(r)));
            acker.producer().send(record).await.unwrap();
        }
    }
    polls
}

fn counts(values: impl IntoIterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for v in values {
        *m.entry(v).or_insert(0) += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_transaction_outlives_client_and_broker_and_commits_exactly_once() {
    if target() == Target::Kafka {
        return; // Kafka 4.4: KeepPreparedTxn is UNSUPPORTED_VERSION
    }
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_with(dir.path(), ENABLED);
    bounded(secs(120), async {
        let n = 30;
        setup(&broker, "src-in", 1, n, "g-src").await;
        let acker = acknowledger(&broker, "src").await;
        acker.init_transactions().await.unwrap();
        create_topic(acker.producer().cluster(), "src-out", 1).await;
        let mut c = consumer(&broker, "g-src", "explicit", "src-in").await;
        let polls = stage_polls(&acker, &mut c, "src-out", n).await;
        assert!(polls >= 1);
        let token = acker.prepare().await.unwrap();
        assert_eq!(
            acker.producer().transaction_state(),
            TxnState::PreparedTransaction
        );
        // The checkpoint stores the token as a string.
        let stored = token.to_string();
        // The client goes away without completing, then the broker crashes.
        c.close().await;
        acker.close().await;
        broker.kill();
        broker.restart();

        // Nothing is visible or acknowledged yet, and the records are delivered to nobody.
        let mut other = consumer(&broker, "g-src", "explicit", "src-in").await;
        assert!(poll_until(&mut other, 1, Duration::from_secs(2))
            .await
            .is_empty());
        other.close().await;
        assert_eq!(
            share_offsets(&broker, "g-src", "src-in").await.start_offset,
            0
        );

        let acker = acknowledger(&broker, "src").await;
        acker.init_transactions_keep_prepared().await.unwrap();
        assert!(fetch_all(acker.producer().cluster(), "src-out", 0, true)
            .await
            .records
            .is_empty());
        let token: PreparedTxnState = stored.parse().unwrap();
        assert_eq!(acker.producer().prepared_transaction(), Some(token));
        assert_eq!(
            acker.complete(&token).await.unwrap(),
            PreparedOutcome::Commit
        );
        // Completing again (a crash between completion and its record) is harmless.
        assert_eq!(
            acker.complete(&token).await.unwrap(),
            PreparedOutcome::NothingPrepared
        );

        let out = fetch_committed(acker.producer().cluster(), "src-out", 0, n).await;
        let values = out
            .records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap());
        let got = counts(values);
        let want = counts((0..n).map(|i| format!("processed:{}", input_value(i))));
        assert_eq!(got, want, "every output exactly once");
        assert_eq!(
            share_offsets(&broker, "g-src", "src-in").await.start_offset,
            n as i64,
            "every acknowledgement committed"
        );
        let mut late = consumer(&broker, "g-src", "explicit", "src-in").await;
        assert!(poll_until(&mut late, 1, Duration::from_secs(2))
            .await
            .is_empty());
        late.close().await;
        acker.close().await;
    })
    .await;
}

/// The checkpoint did not record the prepared transaction (the crash came after prepare,
/// before the checkpoint was written): its older token aborts it, the outputs stay
/// invisible and the records are delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_transaction_the_checkpoint_missed_is_aborted_and_replayed() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(dir.path(), ENABLED);
    bounded(secs(120), async {
        let n = 10;
        setup(&broker, "miss-in", 1, n, "g-miss").await;
        let acker = acknowledger(&broker, "miss").await;
        acker.init_transactions().await.unwrap();
        create_topic(acker.producer().cluster(), "miss-out", 1).await;
        // The last completed checkpoint's token: an empty prepared transaction.
        let older = acker.prepare().await.unwrap();
        assert_eq!(
            acker.complete(&older).await.unwrap(),
            PreparedOutcome::Commit
        );
        let mut c = consumer(&broker, "g-miss", "explicit", "miss-in").await;
        stage_polls(&acker, &mut c, "miss-out", n).await;
        let lost = acker.prepare().await.unwrap();
        assert_ne!(lost, older);
        c.close().await;
        acker.close().await;

        let acker = acknowledger(&broker, "miss").await;
        acker.init_transactions_keep_prepared().await.unwrap();
        assert_eq!(
            acker.complete(&older).await.unwrap(),
            PreparedOutcome::Abort
        );
        assert!(fetch_all(acker.producer().cluster(), "miss-out", 0, true)
            .await
            .records
            .is_empty());
        let mut again = consumer(&broker, "g-miss", "explicit", "miss-in").await;
        let replayed = poll_until(&mut again, n, Duration::from_secs(secs(15))).await;
        assert_eq!(replayed.len(), n, "{replayed:?}");
        again.close().await;
        acker.close().await;
    })
    .await;
}

/// A prepared transaction nobody will complete is aborted by the operator
/// (`shoal transactions force-terminate`): the outputs stay invisible, the records come back,
/// and the producer that prepared it is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_terminate_aborts_a_prepared_transaction() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(dir.path(), ENABLED);
    bounded(secs(120), async {
        let n = 10;
        setup(&broker, "ft-in", 1, n, "g-ft").await;
        let acker = acknowledger(&broker, "ft").await;
        acker.init_transactions().await.unwrap();
        create_topic(acker.producer().cluster(), "ft-out", 1).await;
        let mut c = consumer(&broker, "g-ft", "explicit", "ft-in").await;
        stage_polls(&acker, &mut c, "ft-out", n).await;
        let token = acker.prepare().await.unwrap();
        c.close().await;

        let admin = Admin::connect(config(&broker, &[])).await.unwrap();
        admin.force_terminate_transaction("ft").await.unwrap();
        let described = admin.describe_transactions(&["ft"]).await.unwrap();
        let state = described[0].1.as_ref().unwrap().state.clone();
        assert_ne!(state, "Ongoing");
        admin.close().await;
        assert!(acker.complete(&token).await.is_err(), "fenced");
        let mut again = consumer(&broker, "g-ft", "explicit", "ft-in").await;
        let replayed = poll_until(&mut again, n, Duration::from_secs(secs(15))).await;
        assert_eq!(replayed.len(), n, "{replayed:?}");
        again.close().await;
        acker.close().await;
    })
    .await;
}

async fn two_phase_producer(broker: &Broker, id: &str) -> Producer {
    Producer::new(
        ProducerConfig::builder(config(broker, &[]))
            .transactional_id(id)
            .two_phase_commit(true)
            .build()
            .unwrap(),
    )
    .await
    .unwrap()
}

/// Issue 32: the process that prepared dies, and so does the first process that recovered
/// the transaction (its answer lost, or killed before completing). Each recovery keeps the
/// prepared transaction and fences the one before; the second still finds it named by the
/// checkpoint's token, so completing with that token commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_transaction_recovered_twice_commits_with_the_original_token() {
    if target() == Target::Kafka {
        return; // Kafka 4.4: KeepPreparedTxn is UNSUPPORTED_VERSION
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(dir.path(), ENABLED);
    bounded(secs(120), async {
        let n = 5;
        let first = two_phase_producer(&broker, "twice").await;
        first.init_transactions().await.unwrap();
        create_topic(first.cluster(), "twice-out", 1).await;
        first.begin_transaction().unwrap();
        for i in 0..n {
            let record = ProducerRecord::new("twice-out", format!("v{i}")).with_partition(0);
            first.send(record).await.unwrap();
        }
        // The checkpoint stores the token; then the process dies.
        let stored = first.prepare_transaction().await.unwrap().to_string();
        first.close().await;

        // The first recovery keeps the transaction, then dies before completing it.
        let second = two_phase_producer(&broker, "twice").await;
        second.init_transactions_keep_prepared().await.unwrap();
        let token: PreparedTxnState = stored.parse().unwrap();
        assert_eq!(second.prepared_transaction(), Some(token));

        // The second recovery keeps it again: the same transaction, the same token.
        let third = two_phase_producer(&broker, "twice").await;
        third.init_transactions_keep_prepared().await.unwrap();
        assert_eq!(
            third.prepared_transaction(),
            Some(token),
            "a second keep names the transaction by the token's epoch"
        );
        // The first recovery is fenced: it cannot end what the second one now holds.
        assert!(second.complete_transaction(&token).await.is_err(), "fenced");
        second.close().await;
        assert!(fetch_all(third.cluster(), "twice-out", 0, true)
            .await
            .records
            .is_empty());

        assert_eq!(
            third.complete_transaction(&token).await.unwrap(),
            PreparedOutcome::Commit
        );
        let out = fetch_committed(third.cluster(), "twice-out", 0, n).await;
        let values: Vec<String> = out
            .records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap())
            .collect();
        assert_eq!(
            values,
            (0..n).map(|i| format!("v{i}")).collect::<Vec<_>>(),
            "every record committed once"
        );
        third.close().await;
    })
    .await;
}

/// The values `setup` writes.
fn input_value(i: usize) -> String {
    format!("value-{i}")
}
