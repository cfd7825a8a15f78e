//! The producer against the real `shoal` binary over loopback (or Apache Kafka 4.4 with
//! `SHOAL_CLIENT_TARGET=kafka`, see `common`): keyed records where Java's partitioner puts
//! them, every codec, acks 0/1/all, transactions committed and aborted as a read_committed
//! fetch sees them, zombie fencing, and idempotence through a broker kill -9.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::log::{create_topic, fetch_all, fetch_committed};
use common::{bounded, target, Broker, Target};
use shoal_client::producer::partitioner::partition_for_key;
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::{Error, ErrorClass};
use shoal_protocol::ErrorCode;

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

fn secs(shoal_secs: u64) -> u64 {
    match target() {
        Target::Shoal => shoal_secs,
        Target::Kafka => shoal_secs * 3,
    }
}

fn config(broker: &Broker, extra: &[(&str, &str)]) -> ProducerConfig {
    let bootstrap = broker.addr.to_string();
    let api_timeout = (secs(20) * 1000).to_string();
    let mut props = vec![
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "shoal-producer-test"),
        ("request.timeout.ms", "5000"),
        ("default.api.timeout.ms", api_timeout.as_str()),
        ("retry.backoff.ms", "20"),
        ("retry.backoff.max.ms", "200"),
        ("reconnect.backoff.ms", "20"),
        ("reconnect.backoff.max.ms", "200"),
        ("max.block.ms", "20000"),
    ];
    props.extend_from_slice(extra);
    ProducerConfig::from_properties(props).unwrap()
}

fn value(i: usize) -> Bytes {
    Bytes::from(format!("value-{i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_records_land_where_javas_partitioner_puts_them_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let producer = Producer::new(config(&broker, &[])).await.unwrap();
        let partitions = 4;
        create_topic(producer.cluster(), "keyed", partitions).await;
        let n = 400;
        let mut futures = Vec::new();
        for i in 0..n {
            let key = format!("key-{}", i % 37);
            let record = ProducerRecord::new("keyed", value(i))
                .with_key(key.clone())
                .with_header("i", i.to_string());
            futures.push((key, producer.send(record).await.unwrap()));
        }
        let mut acked = Vec::new();
        for (key, f) in futures {
            let md = f.await.unwrap();
            assert_eq!(md.partition, partition_for_key(key.as_bytes(), partitions));
            assert!(md.offset >= 0);
            acked.push(md);
        }
        let mut total = 0;
        for p in 0..partitions {
            let log = fetch_all(producer.cluster(), "keyed", p, false).await;
            let mut expected: Vec<usize> = (0..n)
                .filter(|i| {
                    partition_for_key(format!("key-{}", i % 37).as_bytes(), partitions) == p
                })
                .collect();
            let got: Vec<usize> = log
                .records
                .iter()
                .map(|r| {
                    let v = r.value.as_ref().unwrap();
                    std::str::from_utf8(&v[6..]).unwrap().parse().unwrap()
                })
                .collect();
            expected.sort();
            assert_eq!(
                got, expected,
                "partition {p}: every record once, in send order"
            );
            for r in &log.records {
                let key = r.key.as_ref().unwrap();
                assert_eq!(partition_for_key(key, partitions), p);
                assert!(r.producer_id >= 0, "idempotent by default");
                assert_eq!(r.headers.len(), 1);
            }
            total += got.len();
        }
        assert_eq!(total, n);
        producer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
            let producer = Producer::new(config(
                &broker,
                &[("compression.type", codec), ("linger.ms", "20")],
            ))
            .await
            .unwrap();
            let topic = format!("codec-{codec}");
            let n = 300;
            let mut futures = Vec::new();
            for i in 0..n {
                // Compressible values, some of them large enough to span snappy blocks.
                let v = format!("{i:08}-{}", "abc".repeat(i % 50 * 10));
                let record = ProducerRecord::new(topic.clone(), v).with_partition(0);
                futures.push(producer.send(record).await.unwrap());
            }
            for f in futures {
                f.await.unwrap();
            }
            let log = fetch_all(producer.cluster(), &topic, 0, false).await;
            assert_eq!(log.records.len(), n, "{codec}");
            for (i, r) in log.records.iter().enumerate() {
                let v = format!("{i:08}-{}", "abc".repeat(i % 50 * 10));
                assert_eq!(r.value.as_deref(), Some(v.as_bytes()), "{codec} record {i}");
            }
            let name = match codec {
                "none" => "None",
                "gzip" => "Gzip",
                "snappy" => "Snappy",
                "lz4" => "Lz4",
                _ => "Zstd",
            };
            assert_eq!(log.codecs.iter().collect::<Vec<_>>(), [name], "{codec}");
            producer.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_one_and_all_write_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        for acks in ["0", "1", "all"] {
            let producer = Producer::new(config(&broker, &[("acks", acks)]))
                .await
                .unwrap();
            assert_eq!(producer.producer_id_epoch().is_some(), acks == "all");
            let topic = format!("acks-{acks}");
            let n = 100;
            let mut futures = Vec::new();
            for i in 0..n {
                let record = ProducerRecord::new(topic.clone(), value(i)).with_partition(0);
                futures.push(producer.send(record).await.unwrap());
            }
            for (i, f) in futures.into_iter().enumerate() {
                let md = f.await.unwrap();
                if acks == "0" {
                    assert_eq!(md.offset, -1, "acks=0: the broker does not answer");
                } else {
                    assert_eq!(md.offset, i as i64, "acks={acks}");
                }
            }
            producer.flush().await.unwrap();
            // acks=0 has no answer to wait for: the records land shortly after.
            let mut log = fetch_all(producer.cluster(), &topic, 0, false).await;
            for _ in 0..100 {
                if log.records.len() >= n {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                log = fetch_all(producer.cluster(), &topic, 0, false).await;
            }
            let got: Vec<_> = log
                .records
                .iter()
                .map(|r| r.value.clone().unwrap())
                .collect();
            let expected: Vec<_> = (0..n).map(value).collect();
            assert_eq!(got, expected, "acks={acks}");
            producer.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_transactions_are_visible_and_aborted_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let producer = Producer::new(config(&broker, &[("transactional.id", "txn-a")]))
            .await
            .unwrap();
        // Not initialized yet: a send is refused, nothing is buffered.
        let err = producer
            .send(ProducerRecord::new("txn", "early").with_partition(0))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Transaction(_)), "{err:?}");
        producer.init_transactions().await.unwrap();
        let v2 = producer.transaction_v2();
        let epoch_at_init = producer.producer_id_epoch().unwrap();

        let mut expected = Vec::new();
        for (round, commit) in [(0, true), (1, false), (2, true), (3, false), (4, true)] {
            producer.begin_transaction().unwrap();
            let mut futures = Vec::new();
            for i in 0..20 {
                let v = format!("r{round}-{i}");
                let record = ProducerRecord::new("txn", v.clone()).with_partition(0);
                futures.push(producer.send(record).await.unwrap());
                if commit {
                    expected.push(v);
                }
            }
            if commit {
                producer.commit_transaction().await.unwrap();
                for f in futures {
                    f.await.unwrap();
                }
            } else {
                producer.flush().await.unwrap();
                producer.abort_transaction().await.unwrap();
            }
        }
        // Records buffered and never sent fail when the transaction aborts.
        producer.begin_transaction().unwrap();
        let f = producer
            .send(ProducerRecord::new("txn", "never").with_partition(0))
            .await
            .unwrap();
        producer.abort_transaction().await.unwrap();
        if let Err(e) = f.await {
            assert_eq!(e.code(), ErrorCode::TRANSACTION_ABORTABLE);
        } else {
            // It had been sent before the abort: aborted, invisible all the same.
        }

        let committed = fetch_committed(producer.cluster(), "txn", 0, expected.len()).await;
        let got: Vec<String> = committed
            .records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(
            got, expected,
            "read_committed sees the committed rounds only"
        );
        let uncommitted = fetch_all(producer.cluster(), "txn", 0, false).await;
        assert!(
            uncommitted.records.len() >= 100,
            "aborted records are in the log"
        );
        assert!(uncommitted.records.iter().all(|r| r.transactional));
        if v2 {
            // Transaction version 2: every EndTxn bumped the epoch.
            let (id, epoch) = producer.producer_id_epoch().unwrap();
            assert_eq!(id, epoch_at_init.0);
            assert_eq!(epoch, epoch_at_init.1 + 6);
        }
        println!("transaction version 2: {v2}");
        producer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let first = Producer::new(config(&broker, &[("transactional.id", "zombie")]))
            .await
            .unwrap();
        first.init_transactions().await.unwrap();
        first.begin_transaction().unwrap();
        first
            .send(ProducerRecord::new("fenced", "from-the-zombie").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();

        let second = Producer::new(config(&broker, &[("transactional.id", "zombie")]))
            .await
            .unwrap();
        second.init_transactions().await.unwrap();
        second.begin_transaction().unwrap();
        second
            .send(ProducerRecord::new("fenced", "from-the-new-one").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        second.commit_transaction().await.unwrap();

        let err = first.commit_transaction().await.unwrap_err();
        assert_eq!(err.class(), ErrorClass::Fatal, "{err:?}");
        assert!(
            [
                ErrorCode::PRODUCER_FENCED,
                ErrorCode::INVALID_PRODUCER_EPOCH
            ]
            .contains(&err.code()),
            "{err:?}"
        );
        println!("the zombie's commit failed with {err}");
        // Fatal for good: every later operation fails the same way.
        let again = first.begin_transaction().unwrap_err();
        assert!(again.is_fatal(), "{again:?}");
        let again = first
            .send(ProducerRecord::new("fenced", "x").with_partition(0))
            .await
            .unwrap_err();
        assert!(again.is_fatal(), "{again:?}");

        let log = fetch_committed(second.cluster(), "fenced", 0, 1).await;
        let got: Vec<_> = log
            .records
            .iter()
            .map(|r| r.value.clone().unwrap())
            .collect();
        assert_eq!(got, [Bytes::from("from-the-new-one")]);
        first.close().await;
        second.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_records_survive_a_broker_kill_exactly_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let broker = Arc::new(std::sync::Mutex::new(broker));
    let cfg = config(
        &broker.lock().unwrap(),
        &[("linger.ms", "2"), ("batch.size", "2000")],
    );
    bounded(secs(120), async {
        let producer = Producer::new(cfg).await.unwrap();
        let opened = producer.cluster().stats().connections_opened;
        let n = 3000;
        let restarter = {
            let broker = broker.clone();
            tokio::task::spawn_blocking(move || {
                std::thread::sleep(Duration::from_millis(300));
                broker.lock().unwrap().kill();
                std::thread::sleep(Duration::from_millis(500));
                broker.lock().unwrap().restart();
            })
        };
        let mut futures = Vec::new();
        for i in 0..n {
            let record = ProducerRecord::new("crash", value(i)).with_partition(0);
            futures.push(producer.send(record).await.unwrap());
            if i % 100 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        restarter.await.unwrap();
        let mut acknowledged = Vec::new();
        let mut failed = 0;
        for (i, f) in futures.into_iter().enumerate() {
            match f.await {
                Ok(_) => acknowledged.push(i),
                Err(e) => {
                    failed += 1;
                    assert!(
                        e.is_retriable() || e.code() == ErrorCode::REQUEST_TIMED_OUT,
                        "{e:?}"
                    );
                }
            }
        }
        assert!(
            producer.cluster().stats().connections_opened > opened,
            "the producer reconnected after the kill"
        );
        let log = fetch_all(producer.cluster(), "crash", 0, false).await;
        let got: Vec<usize> = log
            .records
            .iter()
            .map(|r| {
                std::str::from_utf8(&r.value.as_ref().unwrap()[6..])
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for v in &got {
            assert!(seen.insert(*v), "record {v} written twice");
        }
        assert!(got.windows(2).all(|w| w[0] < w[1]), "records out of order");
        for i in &acknowledged {
            assert!(seen.contains(i), "acknowledged record {i} lost");
        }
        println!(
            "{} acknowledged, {failed} failed, {} in the log after kill -9 and restart",
            acknowledged.len(),
            got.len()
        );
        producer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_waits_for_buffer_memory_up_to_max_block_ms() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let producer = Producer::new(config(
            &broker,
            &[
                ("buffer.memory", "2000"),
                ("max.block.ms", "300"),
                ("linger.ms", "0"),
            ],
        ))
        .await
        .unwrap();
        producer
            .send(ProducerRecord::new("blocked", "warm").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        // With the broker gone nothing completes, so the buffer fills and stays full.
        broker.kill();
        let mut sent = 0;
        let err = loop {
            let record = ProducerRecord::new("blocked", vec![b'x'; 100]).with_partition(0);
            match producer.send(record).await {
                Ok(_) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 100, "buffer.memory is not enforced");
        };
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        assert!(sent >= 10, "{sent}");
        broker.restart();
        producer.flush().await.unwrap();
        producer.close().await;
    })
    .await;
}

/// The group's committed offset of `topic`-0 (OffsetFetch, require_stable), -1 for none.
async fn committed_offset(cluster: &shoal_client::Cluster, group: &str, topic: &str) -> i64 {
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let request = OffsetFetchRequest::default()
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_member_epoch(-1)
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_partition_indexes(vec![0])]))])
        .with_require_stable(true);
    let response = cluster
        .retry(|| {
            cluster.send_to_coordinator_at_most(
                shoal_client::CoordinatorType::Group,
                group,
                Some(9),
                &request,
            )
        })
        .await
        .unwrap();
    let g = &response.groups[0];
    assert_eq!(g.error_code, 0);
    g.topics
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == 0)
        .map_or(-1, |p| p.committed_offset)
}

/// Commit and abort with records and consumer offsets, as the consume-transform-produce
/// loop does.
async fn records_and_offsets_commit_and_abort_together(broker: &Broker, tid: &str) -> bool {
    use shoal_client::producer::{ConsumerGroupMetadata, TopicPartition};
    let producer = Producer::new(config(broker, &[("transactional.id", tid)]))
        .await
        .unwrap();
    producer.init_transactions().await.unwrap();
    let group = ConsumerGroupMetadata::new(format!("{tid}-group"));
    let out = format!("{tid}-out");
    let src = TopicPartition::new(format!("{tid}-src"), 0);
    // Offsets are committed only for partitions that exist.
    create_topic(producer.cluster(), &src.topic, 1).await;
    for (round, commit) in [(0i64, true), (1, false), (2, true), (3, false)] {
        producer.begin_transaction().unwrap();
        let record = ProducerRecord::new(out.clone(), format!("r{round}")).with_partition(0);
        let delivered = producer.send(record).await.unwrap();
        producer
            .send_offsets_to_transaction(&[(src.clone(), 10 * (round + 1))], &group)
            .await
            .unwrap();
        if commit {
            producer.commit_transaction().await.unwrap();
            delivered.await.unwrap();
        } else {
            producer.abort_transaction().await.unwrap();
        }
        let expected = if commit { 10 * (round + 1) } else { 10 * round };
        let mut got = committed_offset(producer.cluster(), &group.group_id, &src.topic).await;
        for _ in 0..20 {
            if got == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            got = committed_offset(producer.cluster(), &group.group_id, &src.topic).await;
        }
        assert_eq!(got, expected, "round {round} (commit {commit})");
    }
    let log = fetch_committed(producer.cluster(), &out, 0, 2).await;
    let got: Vec<_> = log
        .records
        .iter()
        .map(|r| r.value.clone().unwrap())
        .collect();
    assert_eq!(got, [Bytes::from("r0"), Bytes::from("r2")]);
    let v2 = producer.transaction_v2();
    producer.close().await;
    v2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_commit_with_the_transaction_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let v2 = records_and_offsets_commit_and_abort_together(&broker, "offsets-v2").await;
        assert!(v2, "transaction.version 2 is finalized by default");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_version_1_adds_partitions_and_offsets_explicitly() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::messages::UpdateFeaturesRequest;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let admin = shoal_client::Cluster::connect(config(&broker, &[]).client().clone())
            .await
            .unwrap();
        let request = UpdateFeaturesRequest::default()
            .with_timeout_ms(10_000)
            .with_feature_updates(vec![FeatureUpdateKey::default()
                .with_feature(StrBytes::from_static_str("transaction.version"))
                .with_max_version_level(1)
                .with_upgrade_type(2)]);
        let response = admin.send_any(&request).await;
        let response = match response {
            Ok(r) => r,
            Err(e) => panic!("UpdateFeatures: {e:?}"),
        };
        assert_eq!(response.error_code, 0, "{response:?}");
        for r in &response.results {
            assert_eq!(r.error_code, 0, "{r:?}");
        }
        admin.close().await;
        let v2 = records_and_offsets_commit_and_abort_together(&broker, "offsets-v1").await;
        assert!(!v2, "transaction.version 1 after the downgrade");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_with_a_failed_send_cannot_commit_and_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let producer = Producer::new(config(&broker, &[("transactional.id", "failing")]))
            .await
            .unwrap();
        producer.init_transactions().await.unwrap();
        producer.begin_transaction().unwrap();
        let fine = producer
            .send(ProducerRecord::new("failing", "fine").with_partition(0))
            .await
            .unwrap();
        // Above the broker's message.max.bytes (1 MiB by default): the broker refuses it.
        let huge = producer
            .send(ProducerRecord::new("failing", vec![b'x'; 2 << 20]).with_partition(0))
            .await
            .unwrap();
        let err = huge.await.unwrap_err();
        println!("the oversized record failed with {err}");
        let err = producer.commit_transaction().await.unwrap_err();
        assert_eq!(err.class(), ErrorClass::Abortable, "{err:?}");
        // The producer lives on: sends are refused until the abort.
        assert!(producer
            .send(ProducerRecord::new("failing", "refused").with_partition(0))
            .await
            .is_err());
        producer.abort_transaction().await.unwrap();
        let _ = fine.await;
        producer.begin_transaction().unwrap();
        producer
            .send(ProducerRecord::new("failing", "after").with_partition(0))
            .await
            .unwrap();
        producer.commit_transaction().await.unwrap();
        let log = fetch_committed(producer.cluster(), "failing", 0, 1).await;
        let got: Vec<_> = log
            .records
            .iter()
            .map(|r| r.value.clone().unwrap())
            .collect();
        assert_eq!(got, [Bytes::from("after")]);
        producer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_fail_with_request_timed_out_after_delivery_timeout_ms() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let producer = Producer::new(config(
            &broker,
            &[
                ("request.timeout.ms", "500"),
                ("delivery.timeout.ms", "1500"),
            ],
        ))
        .await
        .unwrap();
        producer
            .send(ProducerRecord::new("expiring", "warm").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        broker.kill();
        let mut futures = Vec::new();
        for i in 0..10 {
            let record = ProducerRecord::new("expiring", value(i)).with_partition(0);
            futures.push(producer.send(record).await.unwrap());
        }
        for f in futures {
            let err = f.await.unwrap_err();
            assert_eq!(err.code(), ErrorCode::REQUEST_TIMED_OUT, "{err:?}");
        }
        producer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_goes_on_after_a_failed_batch() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let producer = Producer::new(config(
            &broker,
            &[
                ("request.timeout.ms", "1000"),
                ("delivery.timeout.ms", "5000"),
            ],
        ))
        .await
        .unwrap();
        let before = producer.producer_id_epoch().unwrap();
        producer
            .send(ProducerRecord::new("gap", "first").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        // Refused by the broker (message.max.bytes): its sequence was never written, so
        // the partition's next sequence would leave a gap the broker refuses.
        let err = producer
            .send(ProducerRecord::new("gap", vec![b'x'; 2 << 20]).with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::MESSAGE_TOO_LARGE, "{err:?}");
        let md = producer
            .send(ProducerRecord::new("gap", "after").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(md.offset, 1);
        // InitProducerId without a transactional id answers a new producer id (Kafka's
        // coordinator always does) or a bumped epoch: either restarts the sequences.
        let after = producer.producer_id_epoch().unwrap();
        assert_ne!(after, before);
        let log = fetch_all(producer.cluster(), "gap", 0, false).await;
        let got: Vec<_> = log
            .records
            .iter()
            .map(|r| r.value.clone().unwrap())
            .collect();
        assert_eq!(got, [Bytes::from("first"), Bytes::from("after")]);
        producer.close().await;
    })
    .await;
}
