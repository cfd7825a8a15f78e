//! Transactional share acknowledgements (KIP-1289) from the client against the real `shoal`
//! binary: a share consumer's ACCEPTs staged in a producer's transaction commit with its
//! output and are undone with an abort; the acknowledger commits them alone; misuse and a
//! stale member epoch are errors that stage nothing. Against Apache Kafka 4.4
//! (`SHOAL_CLIENT_TARGET=kafka`), which has no TxnShareAcknowledge, the client fails fast
//! with an unsupported-version error and the transaction goes on without it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::eos::{produce_outputs, share_offsets, transactional, txn_code};
use common::log::{create_topic, fetch_all, fetch_committed};
use common::share::{consumer, poll_until, setup};
use common::{bounded, config, secs, target, Broker, Target};
use shoal_client::admin::{FeatureUpdate, Mode, UpgradeType};
use shoal_client::producer::{
    Producer, ProducerConfig, ProducerRecord, TransactionalShareAcknowledger, TxnState,
};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareAcknowledgements, ShareConsumer, ShareGroupMetadata, ShareRecord,
};
use shoal_client::{Admin, Error, ErrorClass};
use shoal_protocol::ErrorCode;

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// Polls `n` records of `topic` in explicit mode and accepts each (not yet sent).
async fn accept_all(
    broker: &Broker,
    topic: &str,
    group: &str,
    n: usize,
) -> (ShareConsumer, Vec<ShareRecord>) {
    let mut c = consumer(broker, group, "explicit", topic).await;
    let records = poll_until(&mut c, n, Duration::from_secs(secs(30))).await;
    assert_eq!(records.len(), n, "{records:?}");
    for r in &records {
        c.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    (c, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_records_commit_with_the_output() {
    if target() == Target::Kafka {
        return; // no TxnShareAcknowledge: see the unsupported-version test
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 20;
        setup(&broker, "eos-in", 1, n, "g-commit").await;
        let p = transactional(&broker, "tid-commit", &[]).await;
        create_topic(p.cluster(), "eos-out", 1).await;
        let (mut c, records) = accept_all(&broker, "eos-in", "g-commit", n).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "eos-out", &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        assert_eq!(acks.len(), n);
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        // Staged, not yet committed: the group's start offset has not moved.
        assert_eq!(
            share_offsets(&broker, "g-commit", "eos-in")
                .await
                .start_offset,
            0
        );
        p.commit_transaction().await.unwrap();

        let out = fetch_committed(p.cluster(), "eos-out", 0, n).await;
        assert_eq!(out.records.len(), n);
        assert_eq!(
            share_offsets(&broker, "g-commit", "eos-in")
                .await
                .start_offset,
            n as i64
        );
        // The consumer sent nothing itself: closing releases nothing, and no one gets them.
        c.close().await;
        let mut other = consumer(&broker, "g-commit", "explicit", "eos-in").await;
        let again = poll_until(&mut other, 1, Duration::from_secs(2)).await;
        assert!(again.is_empty(), "{again:?}");
        other.close().await;
        p.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_undoes_the_acknowledgements_and_hides_the_output() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 10;
        setup(&broker, "abort-in", 1, n, "g-abort").await;
        let p = transactional(&broker, "tid-abort", &[]).await;
        create_topic(p.cluster(), "abort-out", 1).await;
        let (mut c, records) = accept_all(&broker, "abort-in", "g-abort", n).await;
        p.begin_transaction().unwrap();
        produce_outputs(&p, "abort-out", &records).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        p.send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap();
        p.abort_transaction().await.unwrap();

        assert!(fetch_all(p.cluster(), "abort-out", 0, true)
            .await
            .records
            .is_empty());
        assert_eq!(
            fetch_all(p.cluster(), "abort-out", 0, false)
                .await
                .records
                .len(),
            n,
            "written, then aborted"
        );
        // The abort made them available again, well within their 30 s lock.
        let again = poll_until(&mut c, n, Duration::from_secs(secs(15))).await;
        assert_eq!(again.len(), n, "{again:?}");
        assert!(again.iter().all(|r| r.delivery_count == 2), "{again:?}");
        assert_eq!(
            share_offsets(&broker, "g-abort", "abort-in")
                .await
                .start_offset,
            0
        );
        c.close().await;
        p.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_a_transaction_nothing_is_sent_and_nothing_changes() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 3;
        setup(&broker, "misuse-in", 1, n, "g-misuse").await;
        let (mut c, records) = accept_all(&broker, "misuse-in", "g-misuse", n).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        let meta = c.share_group_metadata();

        let p = transactional(&broker, "tid-misuse", &[]).await;
        let err = p
            .send_share_acknowledgements_to_transaction(&acks, &meta)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Transaction(_)), "{err:?}");
        assert_eq!(p.transaction_state(), TxnState::Ready, "nothing changed");
        let plain = Producer::new(
            ProducerConfig::builder(config(&broker, &[]))
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        let err = plain
            .send_share_acknowledgements_to_transaction(&acks, &meta)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Transaction(_)), "{err:?}");
        plain.close().await;

        // Nothing was staged: a transaction can still take them.
        p.begin_transaction().unwrap();
        p.send_share_acknowledgements_to_transaction(&acks, &meta)
            .await
            .unwrap();
        p.commit_transaction().await.unwrap();
        assert_eq!(
            share_offsets(&broker, "g-misuse", "misuse-in")
                .await
                .start_offset,
            n as i64
        );
        drop(records);
        c.close().await;
        p.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acknowledger_commits_acknowledgements_alone_and_a_stale_epoch_stages_nothing() {
    if target() == Target::Kafka {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 8;
        setup(&broker, "ack-in", 1, n, "g-ack").await;
        let mut c = consumer(&broker, "g-ack", "explicit", "ack-in").await;
        let records = poll_until(&mut c, n, Duration::from_secs(secs(30))).await;
        assert_eq!(records.len(), n);
        // Built from the records themselves; the consumer is told nothing.
        let mut acks =
            ShareAcknowledgements::from_records(&records[..n - 1], AcknowledgeType::Accept)
                .unwrap();
        acks.add(&records[n - 1], AcknowledgeType::Reject).unwrap();
        let acker = TransactionalShareAcknowledger::new(
            ProducerConfig::builder(config(&broker, &[]))
                .transactional_id("tid-acker")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        acker.init_transactions().await.unwrap();

        let meta = c.share_group_metadata();
        let stale = ShareGroupMetadata {
            member_epoch: meta.member_epoch - 1,
            ..meta.clone()
        };
        let err = acker
            .commit_acknowledgements(&acks, &stale)
            .await
            .unwrap_err();
        assert_eq!(txn_code(&err), ErrorCode::STALE_MEMBER_EPOCH, "{err:?}");
        assert_eq!(err.class(), ErrorClass::Abortable);
        assert_eq!(
            acker.producer().transaction_state(),
            TxnState::Ready,
            "aborted before returning"
        );
        assert_eq!(
            share_offsets(&broker, "g-ack", "ack-in").await.start_offset,
            0
        );

        acker.commit_acknowledgements(&acks, &meta).await.unwrap();
        assert_eq!(
            share_offsets(&broker, "g-ack", "ack-in").await.start_offset,
            n as i64
        );
        acker.abort_acknowledgements().await.unwrap(); // none open: a no-op
        acker.close().await;
        c.close().await;
        let mut other = consumer(&broker, "g-ack", "explicit", "ack-in").await;
        let again = poll_until(&mut other, 1, Duration::from_secs(2)).await;
        assert!(again.is_empty(), "rejected and accepted: {again:?}");
        other.close().await;
    })
    .await;
}

/// Kafka 4.4 has no TxnShareAcknowledge; Shoal below `share.version` 3 does not advertise
/// it. Either way the call fails before sending, and the transaction goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_txn_share_acknowledge_fails_fast_and_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(120), async {
        let n = 2;
        setup(&broker, "old-in", 1, n, "g-old").await;
        if target() == Target::Shoal {
            let admin = Admin::connect(config(&broker, &[])).await.unwrap();
            let down = BTreeMap::from([(
                "share.version".to_string(),
                FeatureUpdate {
                    level: 2,
                    upgrade_type: UpgradeType::SafeDowngrade,
                },
            )]);
            let done = admin.update_features(&down, Mode::Apply).await.unwrap();
            assert!(done[0].1.is_ok(), "{done:?}");
            admin.close().await;
        }
        let (mut c, _) = accept_all(&broker, "old-in", "g-old", n).await;
        let acks = c.acknowledgements_for_transaction().unwrap();
        let p = transactional(&broker, "tid-old", &[]).await;
        create_topic(p.cluster(), "old-out", 1).await;
        p.begin_transaction().unwrap();
        let err = p
            .send_share_acknowledgements_to_transaction(&acks, &c.share_group_metadata())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
        assert_eq!(p.transaction_state(), TxnState::InTransaction);
        p.send(ProducerRecord::new("old-out", "still fine"))
            .await
            .unwrap()
            .await
            .unwrap();
        p.commit_transaction().await.unwrap();
        assert_eq!(
            fetch_committed(p.cluster(), "old-out", 0, 1)
                .await
                .records
                .len(),
            1
        );
        c.close().await;
        p.close().await;
    })
    .await;
}
