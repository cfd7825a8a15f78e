//! Connection limits as Kafka enforces them: at `max.connections` the listener answers no
//! newcomer until a connection closes; an address over `max.connections.per.ip` (or its
//! override) is closed on arrival; all three keys change at run time.

mod common;

use std::time::Duration;

use common::TestBroker;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{ApiVersionsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;

const BROKER_RESOURCE: i8 = 4;

/// Whether a connection made now is served: ApiVersions answered within `wait`.
async fn served(broker: &TestBroker, wait: Duration) -> bool {
    let Ok(mut conn) = Connection::connect(broker.addr).await else {
        return false;
    };
    matches!(
        tokio::time::timeout(wait, conn.request(3, &ApiVersionsRequest::default())).await,
        Ok(Ok(r)) if r.error_code == 0
    )
}

async fn api_versions(conn: &mut Connection) {
    let r = conn
        .request(3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
}

/// Sets cluster-wide broker keys; the error code of the one resource.
async fn alter_broker(conn: &mut Connection, key: &str, value: &str) -> i16 {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(BROKER_RESOURCE)
            .with_resource_name(StrBytes::from_static_str(""))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_string(value.to_string())))]),
    ]);
    conn.request(1, &request).await.unwrap().responses[0].error_code
}

/// Waits (bounded) until the broker has seen `n` connections close and serves again.
async fn until_served(broker: &TestBroker) {
    for _ in 0..100 {
        if served(broker, Duration::from_millis(500)).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no connection served after a close freed a place");
}

#[tokio::test]
async fn per_ip_limit_closes_the_connection_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), &[("max.connections.per.ip", "2")]).await;
    let mut c1 = broker.connect().await;
    let mut c2 = broker.connect().await;
    api_versions(&mut c1).await;
    api_versions(&mut c2).await;
    assert!(
        !served(&broker, Duration::from_secs(5)).await,
        "a third connection from 127.0.0.1 was served"
    );
    api_versions(&mut c1).await;
    drop(c1);
    until_served(&broker).await;
    api_versions(&mut c2).await;
    broker.stop().await;
}

#[tokio::test]
async fn at_max_connections_a_newcomer_waits_for_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), &[("max.connections", "2")]).await;
    let mut c1 = broker.connect().await;
    let mut c2 = broker.connect().await;
    api_versions(&mut c1).await;
    api_versions(&mut c2).await;
    // The third is accepted by the kernel but not answered...
    let mut c3 = Connection::connect(broker.addr).await.unwrap();
    let waiting = tokio::spawn(async move {
        let r = c3.request(3, &ApiVersionsRequest::default()).await;
        (r.map(|r| r.error_code), c3)
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!waiting.is_finished(), "served beyond max.connections");
    // ...until one closes: then it is served, not refused.
    drop(c1);
    let (code, _c3) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting connection was served after a close")
        .unwrap();
    assert_eq!(code.unwrap(), 0);
    api_versions(&mut c2).await;
    broker.stop().await;
}

#[tokio::test]
async fn limits_change_at_run_time_and_bad_overrides_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut admin = broker.connect().await;
    assert!(served(&broker, Duration::from_secs(5)).await);

    // A bad broker value is INVALID_REQUEST (42) in Kafka; nothing changes.
    for bad in ["127.0.0.1", "127.0.0.1:x", "127.0.0.1:-3"] {
        assert_eq!(
            alter_broker(&mut admin, "max.connections.per.ip.overrides", bad).await,
            42,
            "{bad}"
        );
    }
    // Kafka refuses a per-address default of 0 with no override to let anyone in.
    assert_eq!(
        alter_broker(&mut admin, "max.connections.per.ip", "0").await,
        42
    );
    assert!(served(&broker, Duration::from_secs(5)).await);

    // An override for this address below what it holds: the next one is closed.
    assert_eq!(
        alter_broker(
            &mut admin,
            "max.connections.per.ip.overrides",
            "127.0.0.1:1"
        )
        .await,
        0
    );
    assert!(!served(&broker, Duration::from_secs(5)).await);
    api_versions(&mut admin).await;

    // Raised again: served.
    assert_eq!(
        alter_broker(
            &mut admin,
            "max.connections.per.ip.overrides",
            "127.0.0.1:3"
        )
        .await,
        0
    );
    until_served(&broker).await;

    // The default for every address, overridden above for this one, cannot refuse it...
    assert_eq!(
        alter_broker(&mut admin, "max.connections.per.ip", "0").await,
        0
    );
    until_served(&broker).await;
    // ...another address's override in its place, it does.
    assert_eq!(
        alter_broker(&mut admin, "max.connections.per.ip.overrides", "10.9.9.9:5").await,
        0
    );
    assert!(!served(&broker, Duration::from_secs(5)).await);
    api_versions(&mut admin).await;
    broker.stop().await;
}
