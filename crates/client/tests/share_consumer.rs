//! The share consumer against the real `shoal` binary over loopback (or Apache Kafka 4.4 with
//! `SHOAL_CLIENT_TARGET=kafka`, see `common`): records written by our producer, consumed in
//! implicit mode once each; explicit ACCEPT / RELEASE / REJECT with delivery counts; two
//! consumers of one group sharing a partition; close releasing what a consumer held;
//! `share.acquire.mode` record_limit against batch_optimized.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::share::{consumer, consumer_with, poll_until, setup, value};
use common::{bounded, secs, Broker};
use shoal_client::share_consumer::{AcknowledgeType, ShareRecord};
use shoal_client::Error;

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implicit_mode_delivers_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 60;
        setup(&broker, "implicit", 2, n, "g-implicit").await;
        let mut c = consumer(&broker, "g-implicit", "implicit", "implicit").await;
        let records = poll_until(&mut c, n, Duration::from_secs(secs(30))).await;
        let values: BTreeSet<String> = records.iter().map(value).collect();
        assert_eq!(records.len(), n, "{values:?}");
        assert_eq!(values.len(), n);
        for r in &records {
            assert_eq!(r.delivery_count, 1, "{r:?}");
            assert_eq!(r.topic, "implicit");
            assert!(r.acquisition_lock_timeout > Duration::ZERO);
            assert!(r.key.is_some());
        }
        let md = c.share_group_metadata();
        assert_eq!(md.group_id, "g-implicit");
        assert_eq!(md.member_id.len(), 22);
        assert!(md.member_epoch > 0);
        // Accepted by the next polls: nothing comes again.
        let again = poll_until(&mut c, 1, Duration::from_secs(2)).await;
        assert!(again.is_empty(), "{again:?}");
        c.commit_sync().await.unwrap();
        c.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_accept_release_reject_with_delivery_counts() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        setup(&broker, "explicit", 1, 3, "g-explicit").await;
        let mut c = consumer(&broker, "g-explicit", "explicit", "explicit").await;
        let records = poll_until(&mut c, 3, Duration::from_secs(secs(30))).await;
        assert_eq!(records.len(), 3, "{records:?}");
        // A poll with records unacknowledged is refused, and changes nothing.
        let refused = c.poll(Duration::ZERO).await.unwrap_err();
        assert!(
            matches!(refused, Error::ShareAcknowledgement(_)),
            "{refused}"
        );
        let by_value: BTreeMap<String, &ShareRecord> =
            records.iter().map(|r| (value(r), r)).collect();
        c.acknowledge(by_value["value-0"], AcknowledgeType::Accept)
            .unwrap();
        c.acknowledge(by_value["value-1"], AcknowledgeType::Release)
            .unwrap();
        c.acknowledge(by_value["value-2"], AcknowledgeType::Reject)
            .unwrap();
        // A record is acknowledged once.
        assert!(c
            .acknowledge(by_value["value-0"], AcknowledgeType::Reject)
            .is_err());
        let again = poll_until(&mut c, 1, Duration::from_secs(secs(10))).await;
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(value(&again[0]), "value-1");
        assert_eq!(again[0].delivery_count, 2);
        assert_eq!(again[0].offset, by_value["value-1"].offset);
        c.acknowledge(&again[0], AcknowledgeType::Accept).unwrap();
        c.commit_sync().await.unwrap();
        // Accepted and rejected records never come back.
        let none = poll_until(&mut c, 1, Duration::from_secs(2)).await;
        assert!(none.is_empty(), "{none:?}");
        c.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_share_one_partition_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(120), async {
        let n = 300;
        setup(&broker, "shared", 1, n, "g-shared").await;
        // Small fetches, so that neither consumer takes the whole partition at once.
        let small = [("max.poll.records", "10")];
        let mut a = consumer_with(&broker, "g-shared", "explicit", "shared", &small).await;
        let mut b = consumer_with(&broker, "g-shared", "explicit", "shared", &small).await;
        let mut accepted: BTreeMap<i64, usize> = BTreeMap::new();
        let mut per_consumer = [0usize; 2];
        let deadline = Instant::now() + Duration::from_secs(secs(60));
        while accepted.len() < n && Instant::now() < deadline {
            for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
                for r in c.poll(Duration::from_millis(200)).await.unwrap() {
                    c.acknowledge(&r, AcknowledgeType::Accept).unwrap();
                    *accepted.entry(r.offset).or_default() += 1;
                    per_consumer[i] += 1;
                }
                if i == 0 {
                    c.commit_async().await;
                } else {
                    c.commit_sync().await.unwrap();
                }
            }
        }
        assert_eq!(accepted.len(), n, "consumers got {per_consumer:?}");
        let twice: Vec<_> = accepted.iter().filter(|(_, k)| **k > 1).collect();
        assert!(twice.is_empty(), "accepted twice: {twice:?}");
        assert!(per_consumer.iter().all(|n| *n > 0), "{per_consumer:?}");
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_unacknowledged_records_to_another_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 5;
        setup(&broker, "closing", 1, n, "g-closing").await;
        let mut a = consumer(&broker, "g-closing", "explicit", "closing").await;
        let held = poll_until(&mut a, n, Duration::from_secs(secs(30))).await;
        assert_eq!(held.len(), n, "{held:?}");
        let txn = a.acknowledgements_for_transaction().unwrap();
        assert!(txn.is_empty(), "nothing acknowledged yet");
        a.close().await;
        // Well within the acquisition lock (30 s by default): only the release explains it.
        let started = Instant::now();
        let mut b = consumer(&broker, "g-closing", "explicit", "closing").await;
        let again = poll_until(&mut b, n, Duration::from_secs(secs(15))).await;
        assert_eq!(again.len(), n, "{again:?}");
        assert!(again.iter().all(|r| r.delivery_count == 2), "{again:?}");
        assert!(started.elapsed() < again[0].acquisition_lock_timeout);
        for r in &again {
            b.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        let txn = b.acknowledgements_for_transaction().unwrap();
        let partitions: Vec<_> = txn.partitions().map(|(_, key)| key).collect();
        assert_eq!(partitions.len(), 1, "{partitions:?}");
        let batches = txn.batches(&partitions[0]);
        assert_eq!(batches.len(), 1, "{batches:?}");
        assert_eq!(
            batches[0].last_offset - batches[0].first_offset + 1,
            n as i64
        );
        b.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_keeps_a_record_for_a_later_accept() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        setup(&broker, "renewing", 1, 1, "g-renewing").await;
        let mut c = consumer(&broker, "g-renewing", "explicit", "renewing").await;
        let held = poll_until(&mut c, 1, Duration::from_secs(secs(30))).await;
        assert_eq!(held.len(), 1, "{held:?}");
        c.acknowledge(&held[0], AcknowledgeType::Renew).unwrap();
        // The renewal goes with this poll's fetch; the record is not delivered again.
        let none = poll_until(&mut c, 1, Duration::from_secs(1)).await;
        assert!(none.is_empty(), "{none:?}");
        c.acknowledge(&held[0], AcknowledgeType::Accept).unwrap();
        c.commit_sync().await.unwrap();
        c.close().await;
        let mut other = consumer(&broker, "g-renewing", "explicit", "renewing").await;
        let none = poll_until(&mut other, 1, Duration::from_secs(2)).await;
        assert!(none.is_empty(), "accepted after a renewal: {none:?}");
        other.close().await;
    })
    .await;
}

/// `share.acquire.mode=record_limit` (ShareFetch v2): the broker acquires at most
/// `max.poll.records` records per fetch, splitting a batch; `batch_optimized` acquires whole
/// batches, so a poll may return more. Either way every record is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_limit_acquires_at_most_max_poll_records() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let n = 25;
        setup(&broker, "limited", 1, n, "g-limited").await;
        let extra = [
            ("share.acquire.mode", "record_limit"),
            ("max.poll.records", "4"),
        ];
        let mut c = consumer_with(&broker, "g-limited", "explicit", "limited", &extra).await;
        let deadline = Instant::now() + Duration::from_secs(secs(30));
        let mut seen = BTreeSet::new();
        let mut polls = 0;
        while seen.len() < n && Instant::now() < deadline {
            let records = c.poll(Duration::from_millis(500)).await.unwrap();
            assert!(records.len() <= 4, "{} records in one poll", records.len());
            polls += usize::from(!records.is_empty());
            for r in &records {
                assert!(seen.insert(r.offset), "offset {} twice", r.offset);
                c.acknowledge(r, AcknowledgeType::Accept).unwrap();
            }
        }
        assert_eq!(seen.len(), n);
        assert!(polls >= n.div_ceil(4), "{polls} polls");
        c.close().await;

        // The same group setting with whole batches (10 records each): more than 4 at once.
        setup(&broker, "whole", 1, n, "g-whole").await;
        let extra = [("max.poll.records", "4")];
        let mut c = consumer_with(&broker, "g-whole", "implicit", "whole", &extra).await;
        let first = poll_until(&mut c, 1, Duration::from_secs(secs(30))).await;
        assert!(
            first.len() >= 10,
            "batch_optimized returned {}",
            first.len()
        );
        c.close().await;
    })
    .await;
}

/// kill -9 of the broker under a consumer: the consumer reconnects, heartbeats (rejoining if
/// the restarted coordinator no longer knows it) and goes on: every record is delivered, the
/// ones accepted before the crash never again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_rejoins_and_goes_on_after_a_broker_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path());
    bounded(secs(120), async {
        let n = 30;
        setup(&broker, "restarted", 1, n, "g-restarted").await;
        let mut c = consumer(&broker, "g-restarted", "explicit", "restarted").await;
        let first = poll_until(&mut c, 10, Duration::from_secs(secs(30))).await;
        assert!(!first.is_empty());
        for r in &first {
            c.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        c.commit_sync().await.unwrap();
        let before = c.share_group_metadata();
        let accepted_before: BTreeSet<i64> = first.iter().map(|r| r.offset).collect();

        broker.restart();
        let deadline = Instant::now() + Duration::from_secs(secs(60));
        let mut seen = accepted_before.clone();
        while seen.len() < n && Instant::now() < deadline {
            // Errors while the broker is down are retried inside; a poll that gives up
            // (the coordinator still loading) is simply polled again.
            let Ok(records) = c.poll(Duration::from_millis(500)).await else {
                continue;
            };
            for r in &records {
                assert!(
                    !accepted_before.contains(&r.offset),
                    "offset {} accepted before the crash came back",
                    r.offset
                );
                seen.insert(r.offset);
                c.acknowledge(r, AcknowledgeType::Accept).unwrap();
            }
        }
        assert_eq!(seen.len(), n, "{seen:?}");
        // A member id is the client's own (KIP-1082): the same one across the rejoin.
        let after = c.share_group_metadata();
        assert_eq!(after.member_id, before.member_id);
        assert!(after.member_epoch >= 1, "{after:?}");
        c.commit_sync().await.unwrap();
        c.close().await;
    })
    .await;
}
