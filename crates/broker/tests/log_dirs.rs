//! DescribeLogDirs and AlterReplicaLogDirs as a Kafka broker with one log directory answers
//! them; metadata.version among the feature levels.

mod common;

use bytes::Bytes;
use common::{create_topic, TestBroker};
use kafka_protocol::messages::alter_replica_log_dirs_request::{
    AlterReplicaLogDir, AlterReplicaLogDirTopic,
};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, ApiVersionsRequest, DescribeLogDirsRequest, ProduceRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::ErrorCode;
use shoal_storage::{encode_batch, BatchOptions};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

async fn produce_one(conn: &mut shoal_client::Connection, topic: &str) {
    let records = Bytes::from(encode_batch(
        &[(None, Some(b"value".as_slice()))],
        BatchOptions {
            timestamp_ms: common::now_ms(),
            ..BatchOptions::default()
        },
    ));
    let response = conn
        .request(
            9,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name(topic))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records))])]),
        )
        .await
        .unwrap();
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
}

#[tokio::test]
async fn describe_log_dirs_reports_the_data_directory_and_partition_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, "sized", 2).await;
    create_topic(&mut conn, "other", 1).await;
    produce_one(&mut conn, "sized").await;
    let expected_dir = std::path::absolute(dir.path()).unwrap();

    for version in 1..=4 {
        let request = DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(name("sized"))
                .with_partitions(vec![0, 1, 7]),
            DescribableLogDirTopic::default()
                .with_topic(name("missing"))
                .with_partitions(vec![0]),
        ]));
        let response = conn.request(version, &request).await.unwrap();
        assert_eq!(response.error_code, 0);
        assert_eq!(response.results.len(), 1, "one log directory");
        let result = &response.results[0];
        assert_eq!(result.error_code, 0);
        assert_eq!(result.log_dir.as_str(), expected_dir.to_str().unwrap());
        // Unknown topics and partitions are left out, as Kafka does.
        assert_eq!(result.topics.len(), 1);
        assert_eq!(result.topics[0].name.as_str(), "sized");
        let partitions = &result.topics[0].partitions;
        assert_eq!(
            partitions
                .iter()
                .map(|p| p.partition_index)
                .collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert!(partitions[0].partition_size > 0);
        assert_eq!(partitions[1].partition_size, 0);
        assert!(partitions
            .iter()
            .all(|p| p.offset_lag == 0 && !p.is_future_key));
        if version >= 4 {
            assert!(result.total_bytes > 0);
            assert!(result.usable_bytes > 0 && result.usable_bytes <= result.total_bytes);
        }
    }

    // A null topic list describes every partition, internal topics included.
    let response = conn
        .request(4, &DescribeLogDirsRequest::default().with_topics(None))
        .await
        .unwrap();
    let names: Vec<_> = response.results[0]
        .topics
        .iter()
        .map(|t| t.name.as_str().to_string())
        .collect();
    assert!(names.contains(&"sized".to_string()));
    assert!(names.contains(&"other".to_string()));
    assert!(names.contains(&"__consumer_offsets".to_string()));
    broker.stop().await;
}

#[tokio::test]
async fn alter_replica_log_dirs_answers_as_a_single_log_dir_broker() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, "moved", 2).await;
    let ours = std::path::absolute(dir.path())
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let request = |path: &str, topic: &str, partitions: Vec<i32>| {
        AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
            .with_path(StrBytes::from_string(path.to_string()))
            .with_topics(vec![AlterReplicaLogDirTopic::default()
                .with_name(name(topic))
                .with_partitions(partitions)])])
    };
    let codes = |response: kafka_protocol::messages::AlterReplicaLogDirsResponse| {
        response
            .results
            .iter()
            .flat_map(|t| {
                let topic = t.topic_name.as_str().to_string();
                t.partitions
                    .iter()
                    .map(move |p| (topic.clone(), p.partition_index, p.error_code))
            })
            .collect::<Vec<_>>()
    };
    for version in 1..=2 {
        // The directory it is in: nothing to move.
        let answer = conn
            .request(version, &request(&ours, "moved", vec![0, 1, 5]))
            .await
            .unwrap();
        let unknown = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code();
        assert_eq!(
            codes(answer),
            vec![
                ("moved".into(), 0, 0),
                ("moved".into(), 1, 0),
                ("moved".into(), 5, unknown)
            ]
        );
        let answer = conn
            .request(version, &request(&ours, "nope", vec![0]))
            .await
            .unwrap();
        assert_eq!(codes(answer), vec![("nope".into(), 0, unknown)]);
        // Any other path is no log directory of this broker, known partition or not.
        let not_found = ErrorCode::LOG_DIR_NOT_FOUND.code();
        for path in ["/elsewhere", &format!("{ours}/")] {
            let answer = conn
                .request(version, &request(path, "moved", vec![0]))
                .await
                .unwrap();
            assert_eq!(codes(answer), vec![("moved".into(), 0, not_found)]);
            let answer = conn
                .request(version, &request(path, "nope", vec![0]))
                .await
                .unwrap();
            assert_eq!(codes(answer), vec![("nope".into(), 0, not_found)]);
        }
    }
    broker.stop().await;
}

#[tokio::test]
async fn metadata_version_is_finalized_and_old_clients_see_no_zero_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    for version in [3, 4] {
        let response = conn
            .request(version, &ApiVersionsRequest::default())
            .await
            .unwrap();
        let finalized: Vec<_> = response
            .finalized_features
            .iter()
            .map(|f| (f.name.as_str().to_string(), f.max_version_level))
            .collect();
        assert!(finalized.contains(&("metadata.version".to_string(), 33)));
        assert!(finalized.contains(&("transaction.version".to_string(), 2)));
        let supported: Vec<_> = response
            .supported_features
            .iter()
            .map(|f| (f.name.as_str().to_string(), f.min_version, f.max_version))
            .collect();
        assert!(supported.contains(&("metadata.version".to_string(), 33, 33)));
        // Kafka leaves out supported ranges that start at 0 below v4.
        let with_zero = supported.iter().any(|(_, min, _)| *min == 0);
        assert_eq!(with_zero, version >= 4, "{supported:?}");
    }
    broker.stop().await;
}

/// UpdateFeatures v2 has no per-feature results: a refused update must be the request's error,
/// or kafka-features reports "share.version was upgraded to 99." as Kafka never does.
#[tokio::test]
async fn update_features_v2_reports_a_refused_update_at_the_top() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::messages::UpdateFeaturesRequest;
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let update = |level: i16| {
        UpdateFeaturesRequest::default().with_feature_updates(vec![FeatureUpdateKey::default()
            .with_feature(StrBytes::from_static_str("share.version"))
            .with_max_version_level(level)
            .with_upgrade_type(1)])
    };
    let refused = ErrorCode::INVALID_UPDATE_VERSION.code();
    let answer = conn.request(2, &update(99)).await.unwrap();
    assert_eq!(answer.error_code, refused);
    assert!(answer.error_message.is_some());
    let answer = conn.request(1, &update(99)).await.unwrap();
    assert_eq!(answer.results[0].error_code, refused);
    // The level a new directory starts at: an upgrade to the current level is accepted.
    let answer = conn.request(2, &update(3)).await.unwrap();
    assert_eq!(answer.error_code, 0);
    broker.stop().await;
}
