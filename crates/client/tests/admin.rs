//! The Admin client against the real `shoal` binary (or Apache Kafka 4.4 with
//! `SHOAL_CLIENT_TARGET=kafka`, see `common`): topics, configs, share groups, features and
//! transactions, each checked through the typed results and their per-item errors.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{bounded, config, secs, target, Broker, Target};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, GroupId, InitProducerIdRequest, ProducerId, ShareGroupHeartbeatRequest,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Request, StrBytes};
use shoal_client::admin::topics::Internal;
use shoal_client::admin::ItemResults;
use shoal_client::admin::{
    AlterConfigOp, ConfigResource, ConfigSource, FeatureUpdate, ListTransactionsFilter, Mode,
    NewTopic, OffsetSpec, UpgradeType,
};
use shoal_client::{Admin, Cluster, CoordinatorType, Error};
use shoal_protocol::{ApiKey, ErrorCode};

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Sends `request` to the coordinator of `key` until it answers without a retriable error,
/// and fails the test on any other error.
async fn to_coordinator<R: Request>(
    cluster: &Cluster,
    kind: CoordinatorType,
    key: &str,
    request: &R,
    error_code: impl Fn(&R::Response) -> i16,
) -> R::Response {
    let api = ApiKey::try_from(R::KEY).unwrap();
    cluster
        .retry(|| async {
            let r = cluster.send_to_coordinator(kind, key, request).await?;
            match Error::from_code(api, error_code(&r), None) {
                Some(e) => Err(e),
                None => Ok(r),
            }
        })
        .await
        .unwrap()
}

async fn admin(broker: &Broker) -> Admin {
    Admin::connect(config(broker, &[])).await.unwrap()
}

/// The error code of an item, or of the call when it failed as a whole.
fn code_of<T: std::fmt::Debug>(result: Result<ItemResults<String, T>, Error>) -> ErrorCode {
    match result {
        Ok(items) => items[0].1.as_ref().unwrap_err().code(),
        Err(e) => e.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_listed_described_grown_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let admin = admin(&broker).await;
        let topics = [
            NewTopic::new("orders").partitions(2).replication_factor(1),
            NewTopic::new("compacted")
                .partitions(1)
                .config("cleanup.policy", "compact"),
        ];
        let checked = admin
            .create_topics(&topics[..1], Mode::ValidateOnly)
            .await
            .unwrap();
        assert_eq!(checked[0].1.as_ref().unwrap().partitions, 2);
        let described = admin.describe_topics(&["orders"]).await.unwrap();
        assert_eq!(
            described[0].1.as_ref().unwrap_err().code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            "validate only creates nothing"
        );

        let created = admin.create_topics(&topics, Mode::Apply).await.unwrap();
        let names: Vec<&str> = created.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["orders", "compacted"]);
        let orders = created[0].1.as_ref().unwrap();
        assert!(!orders.topic_id.is_nil());
        assert_eq!((orders.partitions, orders.replication_factor), (2, 1));
        assert!(created[1].1.is_ok(), "{:?}", created[1]);

        let again = admin
            .create_topics(
                &[NewTopic::new("orders"), NewTopic::new("fresh")],
                Mode::Apply,
            )
            .await
            .unwrap();
        match &again[0].1 {
            Err(Error::Kafka { code, message, .. }) => {
                assert_eq!(*code, ErrorCode::TOPIC_ALREADY_EXISTS);
                assert!(message.is_some(), "the broker's message is kept");
            }
            other => panic!("{other:?}"),
        }
        assert!(again[1].1.is_ok(), "one failure does not hide the others");

        // Created topics reach every broker's metadata soon after, not at once (Kafka).
        let mut listed = Vec::new();
        for _ in 0..100 {
            listed = admin.list_topics(Internal::Exclude).await.unwrap();
            let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
            if ["compacted", "fresh", "orders"]
                .iter()
                .all(|n| names.contains(n))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let listed_names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
        for name in ["compacted", "fresh", "orders"] {
            assert!(listed_names.contains(&name), "{listed_names:?}");
        }
        assert!(listed.iter().all(|t| !t.is_internal));
        assert_eq!(
            listed.iter().find(|t| t.name == "orders").unwrap().topic_id,
            orders.topic_id
        );

        let described = admin.describe_topics(&["orders", "missing"]).await.unwrap();
        let d = described[0].1.as_ref().unwrap();
        assert_eq!(d.topic_id, orders.topic_id);
        assert_eq!(d.partitions.len(), 2);
        let node = admin.cluster().metadata().brokers().next().unwrap().node_id;
        for (i, p) in d.partitions.iter().enumerate() {
            assert_eq!(p.partition, i as i32);
            assert_eq!(p.leader, Some(node));
            assert_eq!(p.replicas, vec![node]);
        }
        assert_eq!(
            described[1].1.as_ref().unwrap_err().code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );

        let grown = admin
            .create_partitions(&[("orders", 3), ("compacted", 1)], Mode::Apply)
            .await
            .unwrap();
        assert!(grown[0].1.is_ok(), "{:?}", grown[0]);
        assert_eq!(
            grown[1].1.as_ref().unwrap_err().code(),
            ErrorCode::INVALID_PARTITIONS,
            "a count that does not grow"
        );
        // The new partition shows once the broker's metadata has it.
        let mut partitions = 0;
        for _ in 0..100 {
            let d = admin.describe_topics(&["orders"]).await.unwrap();
            partitions = d[0].1.as_ref().unwrap().partitions.len();
            if partitions == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(partitions, 3);
        let offsets = admin
            .list_offsets("orders", &[0, 2], OffsetSpec::Latest)
            .await
            .unwrap();
        assert_eq!(offsets.len(), 2);
        assert!(offsets.iter().all(|(_, o)| o.as_ref().unwrap() == &0));

        let deleted = admin.delete_topics(&["fresh", "missing"]).await.unwrap();
        assert!(deleted[0].1.is_ok(), "{:?}", deleted[0]);
        assert_eq!(
            deleted[1].1.as_ref().unwrap_err().code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
        let mut gone = false;
        for _ in 0..100 {
            let d = admin.describe_topics(&["fresh"]).await.unwrap();
            if d[0].1.is_err() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "a deleted topic is no longer described");
        admin.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_are_described_with_sources_and_altered_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let admin = admin(&broker).await;
        let created = admin
            .create_topics(
                &[NewTopic::new("t")
                    .partitions(1)
                    .config("retention.ms", "3600000")],
                Mode::Apply,
            )
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{:?}", created[0]);
        let topic = ConfigResource::topic("t");
        let node = admin.cluster().metadata().brokers().next().unwrap().node_id;
        let broker_resource = ConfigResource::broker(node);
        let described = admin
            .describe_configs(&[
                topic.clone(),
                broker_resource.clone(),
                ConfigResource::topic("nope"),
            ])
            .await
            .unwrap();
        let entries = described[0].1.as_ref().unwrap();
        let retention = entries.iter().find(|e| e.name == "retention.ms").unwrap();
        assert_eq!(retention.value.as_deref(), Some("3600000"));
        assert_eq!(retention.source, ConfigSource::DynamicTopic);
        assert_eq!(
            retention.synonyms.first().map(|y| y.source),
            Some(ConfigSource::DynamicTopic),
            "synonyms start with the effective value: {:?}",
            retention.synonyms
        );
        let cleanup = entries.iter().find(|e| e.name == "cleanup.policy").unwrap();
        assert_eq!(cleanup.value.as_deref(), Some("delete"));
        assert_ne!(cleanup.source, ConfigSource::DynamicTopic);
        let broker_entries = described[1].1.as_ref().unwrap();
        assert!(broker_entries.iter().any(|e| e.name == "num.partitions"));
        assert_eq!(
            described[2].1.as_ref().unwrap_err().code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );

        let altered = admin
            .incremental_alter_configs(
                &[(
                    topic.clone(),
                    vec![
                        AlterConfigOp::Set {
                            name: "cleanup.policy".into(),
                            value: "compact".into(),
                        },
                        AlterConfigOp::Delete {
                            name: "retention.ms".into(),
                        },
                    ],
                )],
                Mode::Apply,
            )
            .await
            .unwrap();
        assert!(altered[0].1.is_ok(), "{:?}", altered[0]);
        let invalid = admin
            .incremental_alter_configs(
                &[(
                    topic.clone(),
                    vec![AlterConfigOp::Set {
                        name: "retention.ms".into(),
                        value: "soon".into(),
                    }],
                )],
                Mode::ValidateOnly,
            )
            .await
            .unwrap();
        assert_eq!(
            invalid[0].1.as_ref().unwrap_err().code(),
            ErrorCode::INVALID_CONFIG
        );
        let entries = admin
            .describe_configs(std::slice::from_ref(&topic))
            .await
            .unwrap()[0]
            .1
            .as_ref()
            .unwrap()
            .clone();
        let value = |name: &str| {
            let e = entries.iter().find(|e| e.name == name).unwrap();
            (e.value.clone(), e.source)
        };
        assert_eq!(
            value("cleanup.policy"),
            (Some("compact".into()), ConfigSource::DynamicTopic)
        );
        assert_ne!(value("retention.ms").1, ConfigSource::DynamicTopic);

        // The legacy AlterConfigs replaces the whole set: cleanup.policy falls back.
        let replaced = admin
            .alter_configs(
                &[(topic.clone(), vec![("retention.ms".into(), "60000".into())])],
                Mode::Apply,
            )
            .await
            .unwrap();
        assert!(replaced[0].1.is_ok(), "{:?}", replaced[0]);
        let entries = admin.describe_configs(&[topic]).await.unwrap()[0]
            .1
            .as_ref()
            .unwrap()
            .clone();
        let find = |name: &str| entries.iter().find(|e| e.name == name).unwrap().clone();
        assert_eq!(find("retention.ms").value.as_deref(), Some("60000"));
        assert_eq!(find("cleanup.policy").value.as_deref(), Some("delete"));

        // GROUP resources (KIP-848): a share group's lock duration.
        let group = ConfigResource::group("workers");
        let set = admin
            .incremental_alter_configs(
                &[(
                    group.clone(),
                    vec![AlterConfigOp::Set {
                        name: "share.record.lock.duration.ms".into(),
                        value: "20000".into(),
                    }],
                )],
                Mode::Apply,
            )
            .await
            .unwrap();
        assert!(set[0].1.is_ok(), "{:?}", set[0]);
        let described = admin.describe_configs(&[group]).await.unwrap();
        let lock = described[0]
            .1
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == "share.record.lock.duration.ms")
            .cloned()
            .unwrap();
        assert_eq!(lock.value.as_deref(), Some("20000"));
        assert_eq!(lock.source, ConfigSource::DynamicGroup);
        admin.close().await;
    })
    .await;
}

fn heartbeat(group: &str, member: &str, epoch: i32, topic: &str) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s(topic))]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_groups_are_listed_described_reset_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(120), async {
        let admin = admin(&broker).await;
        let cluster = admin.cluster().clone();
        let created = admin
            .create_topics(&[NewTopic::new("jobs").partitions(2)], Mode::Apply)
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{:?}", created[0]);
        let member = "Ys7ZKMhwRuyF0wM8EbZWWg";
        let joined = to_coordinator(
            &cluster,
            CoordinatorType::Group,
            "workers",
            &heartbeat("workers", member, 0, "jobs"),
            |r| r.error_code,
        )
        .await;
        let epoch = joined.member_epoch;

        let listed = admin.list_share_groups().await.unwrap();
        let workers = listed.iter().find(|g| g.group_id == "workers").unwrap();
        assert_eq!(workers.group_type, "share");

        let described = admin
            .describe_share_groups(&["workers", "nobody"])
            .await
            .unwrap();
        let d = described[0].1.as_ref().unwrap();
        assert_eq!(d.members.len(), 1);
        assert_eq!(d.members[0].member_id, member);
        assert_eq!(d.members[0].subscribed_topics, vec!["jobs".to_string()]);
        assert_eq!(
            described[1].1.as_ref().unwrap_err().code(),
            ErrorCode::GROUP_ID_NOT_FOUND
        );

        let jobs = |p: i32| ("jobs".to_string(), p);
        let refused = admin
            .alter_share_group_offsets("workers", &[(jobs(0), 0)])
            .await;
        let code = match refused {
            Err(e) => e.code(),
            Ok(items) => items[0].1.as_ref().unwrap_err().code(),
        };
        assert_eq!(code, ErrorCode::NON_EMPTY_GROUP);

        let left = cluster
            .send_to_coordinator(
                CoordinatorType::Group,
                "workers",
                &heartbeat("workers", member, -1, "jobs"),
            )
            .await
            .unwrap();
        assert_eq!(left.error_code, 0, "leave at epoch {epoch}");

        let altered = admin
            .alter_share_group_offsets("workers", &[(jobs(0), 0), (jobs(1), 0)])
            .await
            .unwrap();
        assert!(altered.iter().all(|(_, r)| r.is_ok()), "{altered:?}");
        let offsets = admin
            .describe_share_group_offsets("workers", Some(&[jobs(1)]))
            .await
            .unwrap();
        assert_eq!(offsets.len(), 1);
        assert_eq!(offsets[0].1.as_ref().unwrap().start_offset, 0);
        let all = admin
            .describe_share_group_offsets("workers", None)
            .await
            .unwrap();
        assert_eq!(all.len(), 2, "{all:?}");

        let deleted = admin
            .delete_share_group_offsets("workers", &["jobs"])
            .await
            .unwrap();
        assert!(deleted[0].1.is_ok(), "{deleted:?}");
        let deleted = admin.delete_groups(&["workers", "nobody"]).await.unwrap();
        assert!(deleted[0].1.is_ok(), "{deleted:?}");
        assert_eq!(
            deleted[1].1.as_ref().unwrap_err().code(),
            ErrorCode::GROUP_ID_NOT_FOUND
        );
        let listed = admin.list_share_groups().await.unwrap();
        assert!(listed.iter().all(|g| g.group_id != "workers"), "{listed:?}");
        admin.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn features_are_described_and_updated() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(60), async {
        let admin = admin(&broker).await;
        let features = admin.describe_features().await.unwrap();
        assert!(
            features.finalized.contains_key("metadata.version"),
            "{features:?}"
        );
        assert!(features.finalized_epoch.is_some());
        let (min, max) = features.supported["transaction.version"];
        assert!(min <= 2 && max >= 2, "{features:?}");
        let level = features.finalized["transaction.version"];
        assert_eq!(level, 2, "{features:?}");

        let update = |level: i16, upgrade_type: UpgradeType| {
            BTreeMap::from([(
                "transaction.version".to_string(),
                FeatureUpdate {
                    level,
                    upgrade_type,
                },
            )])
        };
        let beyond = admin
            .update_features(&update(max + 1, UpgradeType::Upgrade), Mode::Apply)
            .await;
        assert_eq!(code_of(beyond), ErrorCode::INVALID_UPDATE_VERSION);

        let checked = admin
            .update_features(&update(1, UpgradeType::SafeDowngrade), Mode::ValidateOnly)
            .await
            .unwrap();
        if target() == Target::Shoal {
            assert!(checked[0].1.is_ok(), "{checked:?}");
            let done = admin
                .update_features(&update(1, UpgradeType::SafeDowngrade), Mode::Apply)
                .await
                .unwrap();
            assert!(done[0].1.is_ok(), "{done:?}");
            let now = admin.describe_features().await.unwrap();
            assert_eq!(now.finalized["transaction.version"], 1);
            let back = admin
                .update_features(&update(2, UpgradeType::Upgrade), Mode::Apply)
                .await
                .unwrap();
            assert!(back[0].1.is_ok(), "{back:?}");
        }
        assert_eq!(
            admin.describe_features().await.unwrap().finalized["transaction.version"],
            2
        );
        admin.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_are_listed_and_described() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    bounded(secs(90), async {
        let admin = admin(&broker).await;
        let cluster = admin.cluster().clone();
        let id = "admin-txn";
        // Through v6, which the cluster negotiates with Shoal (KIP-939).
        let init = shoal_protocol::init_producer_id::InitProducerIdV6(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(id))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        );
        let init = to_coordinator(&cluster, CoordinatorType::Transaction, id, &init, |r| {
            r.error_code
        })
        .await;
        let add = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s(id)))
            .with_producer_id(init.producer_id)
            .with_producer_epoch(init.producer_epoch)
            .with_group_id(GroupId(s("copier")));
        to_coordinator(&cluster, CoordinatorType::Transaction, id, &add, |r| {
            r.error_code
        })
        .await;

        let listed = admin
            .list_transactions(&ListTransactionsFilter::default())
            .await
            .unwrap();
        let t = listed.iter().find(|t| t.transactional_id == id).unwrap();
        assert_eq!(t.producer_id, init.producer_id.0);
        assert_eq!(t.state, "Ongoing");
        let filtered = admin
            .list_transactions(&ListTransactionsFilter {
                states: vec!["CompleteCommit".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(
            filtered.iter().all(|t| t.transactional_id != id),
            "{filtered:?}"
        );
        let by_pid = admin
            .list_transactions(&ListTransactionsFilter {
                producer_ids: vec![init.producer_id.0],
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_pid.len(), 1, "{by_pid:?}");

        let described = admin
            .describe_transactions(&[id, "never-used"])
            .await
            .unwrap();
        let d = described[0].1.as_ref().unwrap();
        assert_eq!(d.state, "Ongoing");
        assert_eq!(d.producer_id, init.producer_id.0);
        assert_eq!(d.timeout, Duration::from_secs(60));
        assert!(d.start_time_ms.is_some());
        assert_eq!(d.partitions.len(), 1, "{d:?}");
        assert_eq!(d.partitions[0].0, "__consumer_offsets");
        assert_eq!(
            described[1].1.as_ref().unwrap_err().code(),
            ErrorCode::TRANSACTIONAL_ID_NOT_FOUND
        );

        // No record was produced: the partition knows no producer (the CLI's tests abort a
        // real hanging transaction through describe_producers and abort_transaction).
        let created = admin
            .create_topics(&[NewTopic::new("quiet").partitions(1)], Mode::Apply)
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{created:?}");
        let producers = admin.describe_producers("quiet", &[0]).await.unwrap();
        assert_eq!(producers.len(), 1);
        assert_eq!(producers[0].1.as_ref().unwrap(), &Vec::new());
        admin.close().await;
    })
    .await;
}
