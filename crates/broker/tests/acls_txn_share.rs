//! TxnShareAcknowledge under ACLs, through shoal-client over SASL (spec §3.2 step 4): a
//! producer whose WRITE on its transactional id was revoked gets
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED; one without READ on the group
//! GROUP_AUTHORIZATION_FAILED; with both, the acknowledgements are staged.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::TestBroker;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest};
use kafka_protocol::protocol::StrBytes;
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::config::ClientConfig;
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareConsumer, ShareConsumerConfig, ShareRecord,
};
use shoal_client::{Admin, Error};
use shoal_protocol::ErrorCode;

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" user_alice="alice-pw" user_bob="bob-pw";"#;

// Kafka's codes.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const ALLOW: i8 = 3;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn acl(resource_type: i8, name: &str, principal: &str, operation: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(name))
        .with_resource_pattern_type(LITERAL)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(ALLOW)
}

fn client_config(addr: SocketAddr, user: Option<&str>) -> Vec<(String, String)> {
    let mut props = vec![
        ("bootstrap.servers".to_string(), addr.to_string()),
        ("request.timeout.ms".into(), "5000".into()),
        ("default.api.timeout.ms".into(), "20000".into()),
        ("retry.backoff.ms".into(), "20".into()),
        ("retry.backoff.max.ms".into(), "200".into()),
    ];
    if let Some(user) = user {
        props.extend([
            ("security.protocol".into(), "SASL_PLAINTEXT".into()),
            ("sasl.mechanism".into(), "PLAIN".into()),
            ("sasl.username".into(), user.into()),
            ("sasl.password".into(), format!("{user}-pw")),
        ]);
    }
    props
}

fn config(addr: SocketAddr, user: Option<&str>) -> ClientConfig {
    let props = client_config(addr, user);
    ClientConfig::from_properties(props.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap()
}

async fn transactional(addr: SocketAddr, user: &str, id: &str) -> Producer {
    let mut builder = ProducerConfig::builder(config(addr, Some(user)));
    builder.transactional_id(id);
    let p = Producer::new(builder.build().unwrap()).await.unwrap();
    p.init_transactions().await.unwrap();
    p
}

/// The broker's code in a transaction error (else the error's own code).
fn code(e: &Error) -> ErrorCode {
    match e {
        Error::Transaction(t) => match &t.kind {
            shoal_client::producer::transaction::TxnErrorKind::Broker { code, .. } => *code,
            _ => e.code(),
        },
        other => other.code(),
    }
}

async fn poll_until(c: &mut ShareConsumer, count: usize) -> Vec<ShareRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < count && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(500)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_share_acknowledge_checks_the_transactional_id_then_the_group() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addrs) = TestBroker::start_listeners(
            dir.path(),
            &[
                (
                    "listeners",
                    "ADMIN://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                ),
                (
                    "listener.security.protocol.map",
                    "ADMIN:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
                ),
                ("sasl.enabled.mechanisms", "PLAIN"),
                ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
                (
                    "authorizer.class.name",
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                ),
                ("super.users", "User:ANONYMOUS"),
            ],
        )
        .await;
        let (admin_addr, sasl) = (addrs[0], addrs[1]);
        let n = 5;

        // As the super user: the input, its records, the group's reset policy, the ACLs.
        let mut raw = broker.connect().await;
        common::create_topic(&mut raw, "in", 1).await;
        let admin = Admin::connect(config(admin_addr, None)).await.unwrap();
        let set = admin
            .incremental_alter_configs(
                &[(
                    ConfigResource::group("g"),
                    vec![AlterConfigOp::Set {
                        name: "share.auto.offset.reset".into(),
                        value: "earliest".into(),
                    }],
                )],
                Mode::Apply,
            )
            .await
            .unwrap();
        assert!(set[0].1.is_ok());
        let producer = Producer::new(
            ProducerConfig::builder(config(admin_addr, None))
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        for i in 0..n {
            producer
                .send(ProducerRecord::new("in", format!("v{i}")))
                .await
                .unwrap()
                .await
                .unwrap();
        }
        producer.close().await;
        let created = raw
            .request(
                3,
                &CreateAclsRequest::default().with_creations(vec![
                    // alice consumes.
                    acl(GROUP, "g", "User:alice", READ),
                    acl(TOPIC, "in", "User:alice", READ),
                    // bob produces: his transactional ids, and only DESCRIBE on the group
                    // (enough to find its coordinator, not to acknowledge for it).
                    acl(TRANSACTIONAL_ID, "revoked", "User:bob", WRITE),
                    acl(TRANSACTIONAL_ID, "no-group", "User:bob", WRITE),
                    acl(GROUP, "g", "User:bob", DESCRIBE),
                    acl(TOPIC, "in", "User:bob", READ),
                ]),
            )
            .await
            .unwrap();
        assert!(created.results.iter().all(|r| r.error_code == 0));

        let consumer_config = ShareConsumerConfig::from_properties(
            client_config(sasl, Some("alice"))
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain([
                    ("group.id", "g"),
                    ("share.acknowledgement.mode", "explicit"),
                    ("fetch.max.wait.ms", "200"),
                ]),
        )
        .unwrap();
        let mut consumer = ShareConsumer::new(consumer_config).await.unwrap();
        consumer.subscribe(["in"]);
        let records = poll_until(&mut consumer, n).await;
        assert_eq!(records.len(), n, "{records:?}");
        for r in &records {
            consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        let acks = consumer.acknowledgements_for_transaction().unwrap();
        let metadata = consumer.share_group_metadata();

        // WRITE on "revoked" is taken away after its producer started.
        let revoked = transactional(sasl, "bob", "revoked").await;
        let deleted = raw
            .request(
                3,
                &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
                    .with_resource_type_filter(TRANSACTIONAL_ID)
                    .with_resource_name_filter(Some(s("revoked")))
                    .with_pattern_type_filter(LITERAL)
                    .with_principal_filter(None)
                    .with_host_filter(None)
                    .with_operation(1)
                    .with_permission_type(1)]),
            )
            .await
            .unwrap();
        assert_eq!(deleted.filter_results[0].matching_acls.len(), 1);
        revoked.begin_transaction().unwrap();
        let refused = revoked
            .send_share_acknowledgements_to_transaction(&acks, &metadata)
            .await
            .unwrap_err();
        assert_eq!(
            code(&refused),
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "{refused:?}"
        );

        // WRITE on its id, but no READ on the group.
        let no_group = transactional(sasl, "bob", "no-group").await;
        no_group.begin_transaction().unwrap();
        let refused = no_group
            .send_share_acknowledgements_to_transaction(&acks, &metadata)
            .await
            .unwrap_err();
        assert_eq!(
            code(&refused),
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
            "{refused:?}"
        );
        let _ = no_group.abort_transaction().await;
        no_group.close().await;

        // With READ on the group, the same acknowledgements are staged and commit.
        let created = raw
            .request(
                3,
                &CreateAclsRequest::default()
                    .with_creations(vec![acl(GROUP, "g", "User:bob", READ)]),
            )
            .await
            .unwrap();
        assert_eq!(created.results[0].error_code, 0);
        let allowed = transactional(sasl, "bob", "no-group").await;
        allowed.begin_transaction().unwrap();
        allowed
            .send_share_acknowledgements_to_transaction(&acks, &metadata)
            .await
            .unwrap();
        allowed.commit_transaction().await.unwrap();
        allowed.close().await;
        consumer.close().await;
        admin.close().await;
        broker.stop().await;
    })
    .await
    .unwrap();
}
