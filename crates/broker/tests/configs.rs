//! Topic and broker configs over the wire, as Kafka 4.4 answers: internal keys described only
//! when asked for by name, config types, sources of static and dynamic broker values with
//! their synonyms, secrets described as null, and the error codes of broker alterations
//! (INVALID_REQUEST for read-only keys and bad values, INVALID_CONFIG for unknown keys).

mod common;

use common::TestBroker;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
// Kafka's ConfigDef types.
const TYPE_BOOLEAN: i8 = 1;
const TYPE_SHORT: i8 = 4;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;
const TYPE_PASSWORD: i8 = 9;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn describe(
    conn: &mut Connection,
    resource_type: i8,
    name: &str,
    keys: Option<&[&str]>,
) -> DescribeConfigsResult {
    let mut response = conn
        .request(
            4,
            &DescribeConfigsRequest::default()
                .with_include_synonyms(true)
                .with_include_documentation(true)
                .with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(s(name))
                    .with_configuration_keys(
                        keys.map(|k| k.iter().map(|k| s(k)).collect()),
                    )]),
        )
        .await
        .unwrap();
    response.results.remove(0)
}

fn find<'a>(
    result: &'a DescribeConfigsResult,
    key: &str,
) -> Option<&'a DescribeConfigsResourceResult> {
    result.configs.iter().find(|c| c.name.as_str() == key)
}

fn get<'a>(result: &'a DescribeConfigsResult, key: &str) -> &'a DescribeConfigsResourceResult {
    find(result, key).unwrap_or_else(|| panic!("{key} not described"))
}

fn value(entry: &DescribeConfigsResourceResult) -> Option<String> {
    entry.value.as_ref().map(|v| v.to_string())
}

/// `(name, source)` of each synonym of an entry.
fn synonyms(entry: &DescribeConfigsResourceResult) -> Vec<(String, i8)> {
    entry
        .synonyms
        .iter()
        .map(|s| (s.name.to_string(), s.source))
        .collect()
}

async fn alter(
    conn: &mut Connection,
    resource_type: i8,
    name: &str,
    key: &str,
    op: i8,
    v: Option<&str>,
) -> i16 {
    let response = conn
        .request(
            1,
            &IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(s(name))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(s(key))
                        .with_config_operation(op)
                        .with_value(v.map(s))]),
            ]),
        )
        .await
        .unwrap();
    response.responses[0].error_code
}

async fn create(conn: &mut Connection, name: &str, configs: &[(&str, &str)]) -> i16 {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(s(k))
                .with_value(Some(s(v)))
        })
        .collect();
    let response = conn
        .request(
            5,
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s(name)))
                    .with_num_partitions(1)
                    .with_replication_factor(1)
                    .with_configs(configs)]),
        )
        .await
        .unwrap();
    response.topics[0].error_code
}

#[tokio::test]
async fn topic_keys_are_described_with_kafkas_types_and_internal_keys_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let broker =
        TestBroker::start_with(dir.path(), &[("log.cleaner.min.cleanable.ratio", "0.4")]).await;
    let mut conn = broker.connect().await;
    let configs = [
        ("min.cleanable.dirty.ratio", "0.01"),
        ("segment.jitter.ms", "1000"),
        ("internal.segment.bytes", "1000"),
    ];
    assert_eq!(create(&mut conn, "t", &configs).await, 0);
    assert_eq!(
        create(&mut conn, "u", &[("no.such.key", "1")]).await,
        ErrorCode::INVALID_CONFIG.code()
    );
    assert_eq!(
        create(&mut conn, "u", &[("segment.bytes", "1000")]).await,
        ErrorCode::INVALID_CONFIG.code()
    );

    let d = describe(&mut conn, TOPIC, "t", None).await;
    assert_eq!(d.error_code, 0);
    assert_eq!(
        d.configs.len(),
        37,
        "Kafka 4.4's topic keys but the internal one"
    );
    assert!(find(&d, "internal.segment.bytes").is_none());
    let ratio = get(&d, "min.cleanable.dirty.ratio");
    assert_eq!(value(ratio).as_deref(), Some("0.01"));
    assert_eq!(
        (ratio.config_source, ratio.config_type),
        (SOURCE_DYNAMIC_TOPIC, TYPE_DOUBLE)
    );
    assert_eq!(
        synonyms(ratio),
        vec![
            (
                "min.cleanable.dirty.ratio".to_string(),
                SOURCE_DYNAMIC_TOPIC
            ),
            (
                "log.cleaner.min.cleanable.ratio".to_string(),
                SOURCE_STATIC_BROKER
            ),
            (
                "log.cleaner.min.cleanable.ratio".to_string(),
                SOURCE_DEFAULT
            ),
        ]
    );
    assert!(ratio.documentation.is_some());
    let policy = get(&d, "cleanup.policy");
    assert_eq!(
        (value(policy).as_deref(), policy.config_type),
        (Some("delete"), TYPE_LIST)
    );
    assert_eq!(get(&d, "preallocate").config_type, TYPE_BOOLEAN);
    assert_eq!(get(&d, "segment.jitter.ms").config_type, TYPE_LONG);

    // By name, the internal key is described too.
    let d = describe(&mut conn, TOPIC, "t", Some(&["internal.segment.bytes"])).await;
    assert_eq!(d.configs.len(), 1);
    assert_eq!(value(&d.configs[0]).as_deref(), Some("1000"));
    broker.stop().await;
}

#[tokio::test]
async fn broker_keys_follow_kafkas_sources_modes_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), &[("log.retention.hours", "1")]).await;
    let mut conn = broker.connect().await;

    let d = describe(&mut conn, BROKER, "1", None).await;
    assert_eq!(d.error_code, 0);
    assert_eq!(
        d.configs.len(),
        350,
        "Kafka 4.4's broker keys but its internal ones"
    );
    assert!(find(&d, "share.coordinator.state.topic.prune.interval.ms").is_none());
    let hours = get(&d, "log.retention.hours");
    assert_eq!(
        (value(hours).as_deref(), hours.config_source),
        (Some("1"), SOURCE_STATIC_BROKER)
    );
    assert!(hours.read_only);
    // Derived from log.retention.hours, as in Kafka; dynamic (not read-only).
    let ms = get(&d, "log.retention.ms");
    assert_eq!(
        (value(ms).as_deref(), ms.config_source, ms.read_only),
        (Some("3600000"), SOURCE_DEFAULT, false)
    );
    let secret = get(&d, "ssl.keystore.password");
    assert_eq!(
        (value(secret), secret.is_sensitive, secret.config_type),
        (None, true, TYPE_PASSWORD)
    );
    assert_eq!(
        get(&d, "offsets.topic.replication.factor").config_type,
        TYPE_SHORT
    );
    let d = describe(
        &mut conn,
        BROKER,
        "1",
        Some(&["share.coordinator.state.topic.prune.interval.ms"]),
    )
    .await;
    assert_eq!(d.configs.len(), 1);

    // Kafka's answers for what cannot be altered.
    for (name, key, v) in [
        ("1", "num.partitions", "3"),                  // read-only
        ("1", "log.segment.bytes", "100"),             // below Kafka's range
        ("1", "log.cleaner.min.cleanable.ratio", "2"), // above it
        ("", "listeners", "PLAINTEXT://:9093"),        // per-broker key on the cluster default
    ] {
        assert_eq!(
            alter(&mut conn, BROKER, name, key, SET, Some(v)).await,
            ErrorCode::INVALID_REQUEST.code(),
            "{key}"
        );
    }
    assert_eq!(
        alter(&mut conn, BROKER, "1", "no.such.key", SET, Some("1")).await,
        ErrorCode::INVALID_CONFIG.code()
    );

    // A dynamic value is the default of topics without their own, with its synonyms.
    assert_eq!(
        alter(
            &mut conn,
            BROKER,
            "",
            "log.cleaner.delete.retention.ms",
            SET,
            Some("1000")
        )
        .await,
        0
    );
    let d = describe(
        &mut conn,
        BROKER,
        "1",
        Some(&["log.cleaner.delete.retention.ms"]),
    )
    .await;
    assert_eq!(d.configs[0].config_source, SOURCE_DYNAMIC_DEFAULT_BROKER);
    assert_eq!(
        synonyms(&d.configs[0]),
        vec![
            (
                "log.cleaner.delete.retention.ms".to_string(),
                SOURCE_DYNAMIC_DEFAULT_BROKER
            ),
            (
                "log.cleaner.delete.retention.ms".to_string(),
                SOURCE_DEFAULT
            ),
        ]
    );
    // The cluster default ("") describes only what was set there.
    let d = describe(&mut conn, BROKER, "", None).await;
    let names: Vec<&str> = d.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["log.cleaner.delete.retention.ms"]);
    // APPEND and SUBTRACT apply to lists only.
    assert_eq!(
        alter(
            &mut conn,
            BROKER,
            "",
            "log.cleaner.threads",
            APPEND,
            Some("2")
        )
        .await,
        ErrorCode::INVALID_CONFIG.code()
    );
    common::create_topic(&mut conn, "t", 1).await;
    let d = describe(&mut conn, TOPIC, "t", Some(&["delete.retention.ms"])).await;
    assert_eq!(value(&d.configs[0]).as_deref(), Some("1000"));
    assert_eq!(d.configs[0].config_source, SOURCE_DYNAMIC_DEFAULT_BROKER);
    assert_eq!(
        alter(
            &mut conn,
            BROKER,
            "",
            "log.cleaner.delete.retention.ms",
            DELETE,
            None
        )
        .await,
        0
    );
    let d = describe(&mut conn, TOPIC, "t", Some(&["delete.retention.ms"])).await;
    assert_eq!(value(&d.configs[0]).as_deref(), Some("86400000"));
    assert_eq!(d.configs[0].config_source, SOURCE_DEFAULT);
    broker.stop().await;
}
