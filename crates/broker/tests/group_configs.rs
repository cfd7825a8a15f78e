//! Group configs (ConfigResource type GROUP): share-group keys set with IncrementalAlterConfigs
//! before the group exists, described with their sources, refused when unknown or out of the
//! broker's bounds, and persisted across a restart.

mod common;

use common::TestBroker;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as IncrementalResource, AlterableConfig as IncrementalConfig,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;

const GROUP: i8 = 32;
const SET: i8 = 0;
const DELETE: i8 = 1;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn describe(conn: &mut Connection, group: &str) -> DescribeConfigsResult {
    let mut response = conn
        .request(
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(GROUP)
                    .with_resource_name(s(group))
                    .with_configuration_keys(None),
            ]),
        )
        .await
        .unwrap();
    response.results.remove(0)
}

/// `(value, source)` of `key` in a describe result.
fn value(result: &DescribeConfigsResult, key: &str) -> (String, i8) {
    let c = result
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .unwrap_or_else(|| panic!("{key} not described"));
    (
        c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        c.config_source,
    )
}

async fn alter(
    conn: &mut Connection,
    group: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    let configs = ops
        .iter()
        .map(|(k, op, v)| {
            IncrementalConfig::default()
                .with_name(s(k))
                .with_config_operation(*op)
                .with_value(v.map(s))
        })
        .collect();
    let response = conn
        .request(
            1,
            &IncrementalAlterConfigsRequest::default()
                .with_validate_only(validate_only)
                .with_resources(vec![IncrementalResource::default()
                    .with_resource_type(GROUP)
                    .with_resource_name(s(group))
                    .with_configs(configs)]),
        )
        .await
        .unwrap();
    let r = &response.responses[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

#[tokio::test]
async fn share_group_configs_are_validated_described_and_persisted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = TestBroker::start(dir.path()).await;
        let mut conn = broker.connect().await;

        // Defaults before anything is set (the group need not exist).
        let d = describe(&mut conn, "queue").await;
        assert_eq!(d.error_code, 0);
        assert_eq!(
            value(&d, "share.record.lock.duration.ms"),
            ("30000".into(), SOURCE_DEFAULT)
        );
        assert_eq!(
            value(&d, "share.auto.offset.reset"),
            ("latest".into(), SOURCE_DEFAULT)
        );
        // Kafka 4.4's group keys but its internal ones (consumer.*, share.*, streams.*, ...).
        assert_eq!(d.configs.len(), 21);
        assert_eq!(
            value(&d, "consumer.session.timeout.ms"),
            ("45000".into(), SOURCE_DEFAULT)
        );

        assert_eq!(
            alter(
                &mut conn,
                "queue",
                &[
                    ("share.delivery.count.limit", SET, Some("3")),
                    ("share.isolation.level", SET, Some("READ_COMMITTED")),
                    ("share.auto.offset.reset", SET, Some("by_duration:PT1H")),
                    ("share.record.lock.duration.ms", SET, Some("20000")),
                ],
                false,
            )
            .await
            .0,
            0
        );
        let d = describe(&mut conn, "queue").await;
        assert_eq!(
            value(&d, "share.delivery.count.limit"),
            ("3".into(), SOURCE_GROUP)
        );
        assert_eq!(
            value(&d, "share.isolation.level"),
            ("read_committed".into(), SOURCE_GROUP)
        );
        let settings = broker.broker.share_group_settings("queue");
        assert_eq!(settings.delivery_count_limit, 3);
        assert!(settings.read_committed);
        assert_eq!(settings.record_lock_duration_ms, 20_000);

        // Every refusal is INVALID_CONFIG and changes nothing.
        for ops in [
            vec![("consumer.session.timeout.ms", SET, Some("5000"))], // below the broker's min
            vec![("no.such.key", SET, Some("1"))],
            vec![("share.record.lock.duration.ms", SET, Some("1000"))], // below the broker's min
            vec![("share.delivery.count.limit", SET, Some("11"))],
            vec![("share.auto.offset.reset", SET, Some("by_duration:1h"))],
            vec![("share.isolation.level", SET, Some("serializable"))],
            vec![("share.heartbeat.interval.ms", SET, Some("45000"))], // not below the session
            vec![("share.delivery.count.limit", SET, None)],
        ] {
            let (code, message) = alter(&mut conn, "queue", &ops, false).await;
            assert_eq!(
                code,
                ErrorCode::INVALID_CONFIG.code(),
                "{ops:?}: {message:?}"
            );
        }
        assert_eq!(
            alter(
                &mut conn,
                "",
                &[("share.delivery.count.limit", SET, Some("3"))],
                false
            )
            .await
            .0,
            ErrorCode::INVALID_REQUEST.code()
        );
        assert_eq!(
            describe(&mut conn, "").await.error_code,
            ErrorCode::INVALID_REQUEST.code()
        );
        // validate_only checks without storing.
        assert_eq!(
            alter(
                &mut conn,
                "queue",
                &[("share.delivery.count.limit", SET, Some("4"))],
                true
            )
            .await
            .0,
            0
        );
        // Legacy AlterConfigs does not take group resources.
        let legacy = conn
            .request(
                2,
                &AlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(GROUP)
                        .with_resource_name(s("queue"))
                        .with_configs(vec![AlterableConfig::default()
                            .with_name(s("share.delivery.count.limit"))
                            .with_value(Some(s("4")))]),
                ]),
            )
            .await
            .unwrap();
        assert_eq!(
            legacy.responses[0].error_code,
            ErrorCode::INVALID_REQUEST.code()
        );
        // DELETE goes back to the broker's value.
        assert_eq!(
            alter(
                &mut conn,
                "queue",
                &[("share.record.lock.duration.ms", DELETE, None)],
                false
            )
            .await
            .0,
            0
        );
        broker.stop().await;
    }
    let broker = TestBroker::start_with(
        dir.path(),
        &[("group.share.record.lock.duration.ms", "40000")],
    )
    .await;
    let mut conn = broker.connect().await;
    let d = describe(&mut conn, "queue").await;
    assert_eq!(
        value(&d, "share.delivery.count.limit"),
        ("3".into(), SOURCE_GROUP),
        "persisted, and validate_only stored nothing"
    );
    assert_eq!(
        value(&d, "share.auto.offset.reset"),
        ("by_duration:PT1H".into(), SOURCE_GROUP)
    );
    assert_eq!(
        value(&d, "share.record.lock.duration.ms"),
        ("40000".into(), SOURCE_DEFAULT)
    );
    assert_eq!(describe(&mut conn, "other").await.configs.len(), 21);
    broker.stop().await;
}
