//! Several listeners at once (`listeners`, `advertised.listeners`,
//! `listener.security.protocol.map`): each accepts connections, and each connection's clients
//! are told the address of the listener they came in on, as Kafka answers per listener.

mod common;

use std::time::Duration;

use common::TestBroker;
use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;

const TIMEOUT: Duration = Duration::from_secs(20);

async fn brokers_seen(conn: &mut Connection) -> Vec<(String, i32)> {
    let response = conn
        .request(12, &MetadataRequest::default().with_topics(Some(vec![])))
        .await
        .unwrap();
    response
        .brokers
        .iter()
        .map(|b| (b.host.to_string(), b.port))
        .collect()
}

#[tokio::test]
async fn each_listener_tells_its_clients_its_own_address() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addrs) = TestBroker::start_listeners(
            dir.path(),
            &[
                ("listeners", "INSIDE://127.0.0.1:0,OUTSIDE://127.0.0.1:0"),
                (
                    "listener.security.protocol.map",
                    "INSIDE:PLAINTEXT,OUTSIDE:PLAINTEXT",
                ),
                ("advertised.listeners", "OUTSIDE://outside.example:19093"),
            ],
        )
        .await;
        assert_eq!(addrs.len(), 2);
        assert_ne!(addrs[0].port(), addrs[1].port());

        let mut inside = Connection::connect(addrs[0]).await.unwrap();
        let mut outside = Connection::connect(addrs[1]).await.unwrap();
        assert_eq!(
            brokers_seen(&mut inside).await,
            vec![("127.0.0.1".to_string(), i32::from(addrs[0].port()))]
        );
        assert_eq!(
            brokers_seen(&mut outside).await,
            vec![("outside.example".to_string(), 19093)]
        );
        // The group coordinator is this node, reached through the caller's listener.
        let found = outside
            .request(
                3,
                &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g")),
            )
            .await
            .unwrap();
        assert_eq!(found.error_code, 0);
        assert_eq!(
            (found.host.as_str(), found.port),
            ("outside.example", 19093)
        );
        broker.stop().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn a_port_already_taken_is_a_start_up_error_naming_the_listener() {
    tokio::time::timeout(TIMEOUT, async {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let mut config = shoal_broker::BrokerConfig::default();
        config
            .set("listeners", &format!("PLAINTEXT://127.0.0.1:{port}"))
            .unwrap();
        let listeners = shoal_broker::config::listeners::parse_listeners(&config).unwrap();
        let error = shoal_broker::server::bind_listeners(&config, &listeners)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("listener PLAINTEXT"), "{error}");
        assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
    })
    .await
    .expect("test timed out");
}
