//! The cluster layer against the real `shoal` binary over loopback (or Apache Kafka 4.4 with
//! `SHOAL_CLIENT_TARGET=kafka`, see `common`): bootstrap, metadata with topic ids, negotiated
//! versions, coordinators, a broker restart, and an unknown topic.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bounded, config, secs, Broker, Target};
use kafka_protocol::messages::MetadataRequest;
use shoal_client::versions::{client_range, highest_common, CLIENT_APIS};
use shoal_client::{Cluster, CoordinatorType, Error};
use shoal_protocol::{ApiKey, ErrorCode};

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_fetches_metadata_with_topic_ids_and_negotiates_versions() {
    let dir = tempfile::tempdir().unwrap();
    let shoal = Broker::start(dir.path());
    bounded(secs(60), async {
        let started = Instant::now();
        let cluster = Cluster::connect(config(&shoal, &[])).await.unwrap();
        let bootstrap_time = started.elapsed();

        let metadata = cluster.metadata();
        let brokers: Vec<_> = metadata.brokers().cloned().collect();
        assert_eq!(brokers.len(), 1, "{brokers:?}");
        assert_eq!(brokers[0].port, shoal.addr.port());
        let node = brokers[0].node_id;
        assert!(metadata.cluster_id().is_some());

        // Auto-created on first use (allow.auto.create.topics defaults to true).
        let topic = cluster.topic("orders").await.unwrap();
        assert!(!topic.topic_id.is_nil(), "Metadata v10+ carries topic ids");
        assert!(!topic.partitions.is_empty());
        assert_eq!(cluster.leader("orders", 0).await.unwrap(), node);
        assert_eq!(
            cluster.metadata().topic_name(topic.topic_id),
            Some("orders")
        );

        let versions = cluster.api_versions(node).await.unwrap();
        let mut negotiated = 0;
        for (api, _) in CLIENT_APIS {
            let ours = client_range(*api).unwrap();
            match (versions.broker_range(*api), versions.version(*api)) {
                (Some(theirs), Ok(v)) => {
                    assert_eq!(Some(v), highest_common(ours, theirs), "{api:?}");
                    negotiated += 1;
                }
                (theirs, Err(Error::UnsupportedVersion { broker_range, .. })) => {
                    assert_eq!(broker_range, theirs, "{api:?}");
                    assert!(theirs.is_none_or(|t| highest_common(ours, t).is_none()));
                }
                (_, other) => panic!("{api:?}: {other:?}"),
            }
        }
        match shoal.target {
            // Shoal serves every api the client knows, KIP-1289's TxnShareAcknowledge included.
            Target::Shoal => {
                assert_eq!(negotiated, CLIENT_APIS.len());
                assert!(versions.version(ApiKey::TxnShareAcknowledge).is_ok());
                assert_eq!(versions.finalized_feature("share.version"), Some(3));
            }
            // Kafka 4.4 lacks only TxnShareAcknowledge: a typed error, nothing sent.
            Target::Kafka => {
                assert_eq!(negotiated, CLIENT_APIS.len() - 1);
                assert!(matches!(
                    versions.version(ApiKey::TxnShareAcknowledge),
                    Err(Error::UnsupportedVersion {
                        broker_range: None,
                        ..
                    })
                ));
                assert!(versions.finalized_feature("share.version").is_some());
            }
        }
        assert_eq!(versions.finalized_feature("transaction.version"), Some(2));

        let coordinator = cluster
            .coordinator(CoordinatorType::Group, "g1")
            .await
            .unwrap();
        assert_eq!(coordinator, node);
        let txn = cluster
            .coordinator(CoordinatorType::Transaction, "tx-1")
            .await
            .unwrap();
        assert_eq!(txn, node);
        // Requests to the coordinator go over its own connection.
        let before = cluster.stats().connections_opened;
        cluster
            .send_to_coordinator(
                CoordinatorType::Group,
                "g1",
                &MetadataRequest::default().with_topics(Some(vec![])),
            )
            .await
            .unwrap();
        assert_eq!(cluster.stats().connections_opened, before + 1);

        let started = Instant::now();
        let second = Cluster::connect(config(&shoal, &[])).await.unwrap();
        let warm_bootstrap_time = started.elapsed();
        second.close().await;
        println!(
            "{:?}: bootstrap (connect, ApiVersions, Metadata) took {bootstrap_time:?} against a \
             fresh broker, {warm_bootstrap_time:?} warm; stats {:?}",
            shoal.target,
            cluster.stats()
        );
        cluster.close().await;
        assert!(matches!(cluster.topic("orders").await, Err(Error::Closed)));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_a_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut shoal = Broker::start(dir.path());
    bounded(secs(90), async {
        let cluster = Cluster::connect(config(&shoal, &[])).await.unwrap();
        let topic = cluster.topic("restarted").await.unwrap();
        let node = cluster.leader("restarted", 0).await.unwrap();
        let opened = cluster.stats().connections_opened;

        shoal.kill();
        // The broker is down: a single attempt fails with a retriable error.
        let request = MetadataRequest::default().with_topics(Some(vec![]));
        let err = cluster.send(node, &request).await.unwrap_err();
        assert!(err.is_retriable(), "{err:?}");

        // Restart it in the background while the client keeps retrying.
        let down_for = Duration::from_millis(500);
        let shoal = Arc::new(std::sync::Mutex::new(shoal));
        let restarter = {
            let shoal = shoal.clone();
            tokio::task::spawn_blocking(move || {
                std::thread::sleep(down_for);
                shoal.lock().unwrap().restart();
                Instant::now()
            })
        };
        let retried_from = Instant::now();
        cluster
            .retry(|| cluster.send(node, &request))
            .await
            .unwrap();
        let back_at = Instant::now();
        let listening_at = restarter.await.unwrap();
        assert!(back_at >= listening_at - Duration::from_millis(50));
        assert!(cluster.stats().connections_opened > opened);

        // Same data directory: the topic survived with its id.
        cluster.invalidate_metadata();
        let again = cluster.topic("restarted").await.unwrap();
        assert_eq!(again.topic_id, topic.topic_id);
        println!(
            "retried for {:?} ({:?} after the broker listened again); stats {:?}",
            back_at - retried_from,
            back_at.saturating_duration_since(listening_at),
            cluster.stats()
        );
        cluster.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_topic_refreshes_metadata_and_fails_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let shoal = Broker::start(dir.path());
    bounded(secs(60), async {
        let cluster = Cluster::connect(config(
            &shoal,
            &[("allow.auto.create.topics", "false"), ("retries", "3")],
        ))
        .await
        .unwrap();
        let before = cluster.stats();
        let started = Instant::now();
        let err = cluster.leader("does-not-exist", 0).await.unwrap_err();
        let elapsed = started.elapsed();
        match &err {
            Error::Kafka { code, .. } => assert_eq!(*code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            other => panic!("{other:?}"),
        }
        assert!(err.is_retriable() && err.requires_metadata_refresh());
        let after = cluster.stats();
        // One lookup plus three retries, each after a metadata refresh.
        assert_eq!(after.retries - before.retries, 3);
        assert_eq!(after.metadata_requests - before.metadata_requests, 4);
        assert_eq!(
            cluster.metadata().topic_error("does-not-exist"),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );

        // Created elsewhere meanwhile: the next lookup finds it.
        let creator = Cluster::connect(config(&shoal, &[])).await.unwrap();
        creator.topic("does-not-exist").await.unwrap();
        assert!(cluster.leader("does-not-exist", 0).await.is_ok());
        // A partition the topic lacks is the same typed error.
        let err = cluster.leader("does-not-exist", 99).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        println!("unknown topic: gave up after {elapsed:?}, stats {after:?}");
        creator.close().await;
        cluster.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_and_unknown_topic_id_refresh_metadata_before_the_retry() {
    let dir = tempfile::tempdir().unwrap();
    let shoal = Broker::start(dir.path());
    bounded(secs(60), async {
        let cluster = Cluster::connect(config(&shoal, &[])).await.unwrap();
        cluster.topic("moved").await.unwrap();
        for code in [
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::UNKNOWN_TOPIC_ID,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ] {
            let before = cluster.stats().metadata_requests;
            let attempts = std::sync::atomic::AtomicU32::new(0);
            // What a producer's send does: look the leader up, send, report the partition's
            // error code. The first answer says the metadata was stale.
            let leader = cluster
                .retry(|| async {
                    let leader = cluster.try_leader("moved", 0).await?;
                    if attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                        return Err(Error::from_code(ApiKey::Produce, code.0, None).unwrap());
                    }
                    Ok(leader)
                })
                .await
                .unwrap();
            assert_eq!(attempts.into_inner(), 2);
            assert_eq!(
                cluster.stats().metadata_requests,
                before + 1,
                "{code}: one refresh before the retry, none before the first attempt"
            );
            assert_eq!(cluster.metadata().leader("moved", 0), Some(leader));
        }
        cluster.close().await;
    })
    .await;
}
