//! Authorization with `authorizer.class.name` set: CreateAcls / DescribeAcls / DeleteAcls with
//! Kafka's validation, kept across a crash, and requests checked as Kafka's KafkaApis checks
//! them — Produce, Fetch and Metadata per topic, groups, transactional ids, cluster
//! operations, two-phase commit — for principals authenticated with SASL PLAIN; a super user
//! passes everything.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{create_topic, produce_once, TestBroker};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateAclsRequest, DeleteAclsRequest, DeleteRecordsRequest, DescribeAclsRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest, FindCoordinatorRequest,
    InitProducerIdRequest, JoinGroupRequest, MetadataRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::init_producer_id::InitProducerIdV6;

const TIMEOUT: Duration = Duration::from_secs(60);
const STANDARD: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";"#;

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const INVALID_REQUEST: i16 = 42;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const SECURITY_DISABLED: i16 = 54;

// Kafka's codes.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ANY: i8 = 1;
const ALL: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const TWO_PHASE_COMMIT: i8 = 15;
const ALLOW: i8 = 3;
const DENY: i8 = 2;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A broker with the authorizer, a PLAINTEXT listener (User:ANONYMOUS, a super user here, for
/// administration) and a SASL_PLAINTEXT one with PLAIN users admin, alice and bob.
async fn start(dir: &std::path::Path, extra: &[(&str, &str)]) -> (TestBroker, SocketAddr) {
    let mut settings = vec![
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
        ("authorizer.class.name", STANDARD),
        ("super.users", "User:admin;User:ANONYMOUS"),
    ];
    settings.extend_from_slice(extra);
    let (broker, addrs) = TestBroker::start_listeners(dir, &settings).await;
    (broker, addrs[1])
}

/// A connection authenticated with PLAIN as `user`.
async fn login(addr: SocketAddr, user: &str) -> Connection {
    let mut conn = Connection::connect(addr).await.unwrap();
    let handshake = conn
        .request(
            1,
            &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
        )
        .await
        .unwrap();
    assert_eq!(handshake.error_code, 0);
    let token = format!("\0{user}\0{user}-pw").into_bytes();
    let answer = conn
        .request(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(token.into()),
        )
        .await
        .unwrap();
    assert_eq!(answer.error_code, 0, "{user} failed to authenticate");
    conn
}

fn acl(
    resource_type: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    operation: i8,
    permission: i8,
) -> AclCreation {
    AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

/// Creates the ACLs; every creation's error code.
async fn create_acls(conn: &mut Connection, creations: Vec<AclCreation>) -> Vec<i16> {
    let response = conn
        .request(3, &CreateAclsRequest::default().with_creations(creations))
        .await
        .unwrap();
    response.results.iter().map(|r| r.error_code).collect()
}

fn describe_all() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

/// (error, [(resource type, name, pattern, principal, operation, permission)]).
async fn describe(
    conn: &mut Connection,
    request: DescribeAclsRequest,
) -> (i16, Vec<(i8, String, i8, String, i8, i8)>) {
    let response = conn.request(3, &request).await.unwrap();
    let mut acls = Vec::new();
    for r in &response.resources {
        for a in &r.acls {
            acls.push((
                r.resource_type,
                r.resource_name.to_string(),
                r.pattern_type,
                a.principal.to_string(),
                a.operation,
                a.permission_type,
            ));
        }
    }
    acls.sort();
    (response.error_code, acls)
}

fn records(n: usize) -> bytes::Bytes {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("v{i}").into_bytes()).collect();
    let kvs: Vec<shoal_storage::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    bytes::Bytes::from(shoal_storage::encode_batch(
        &kvs,
        shoal_storage::BatchOptions::default(),
    ))
}

async fn produce(conn: &mut Connection, topic: &str) -> i16 {
    produce_once(conn, 9, None, topic, 0, records(2)).await.0
}

async fn fetch(conn: &mut Connection, topic: &str) -> i16 {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(s(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_partition_max_bytes(1 << 20)])]);
    let response = conn.request(11, &request).await.unwrap();
    let topic = response
        .responses
        .iter()
        .find(|t| t.topic.as_str() == topic)
        .expect("the topic is answered");
    topic.partitions[0].error_code
}

/// Metadata for `topics` (None: all): (name, error) of each topic answered, sorted.
async fn metadata(
    conn: &mut Connection,
    topics: Option<&[&str]>,
    auto_create: bool,
) -> Vec<(String, i16)> {
    let request = MetadataRequest::default()
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(TopicName(s(n)))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    let response = conn.request(12, &request).await.unwrap();
    let mut out: Vec<(String, i16)> = response
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .filter(|(n, _)| !n.starts_with("__"))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn topic_acls_decide_produce_fetch_and_metadata() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, sasl) = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        for topic in ["orders", "order-audit", "secret"] {
            create_topic(&mut admin, topic, 1).await;
        }
        let codes = create_acls(
            &mut admin,
            vec![
                acl(TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW),
                acl(TOPIC, "order", PREFIXED, "User:alice", READ, ALLOW),
                acl(TOPIC, "order-audit", LITERAL, "User:alice", READ, DENY),
            ],
        )
        .await;
        assert_eq!(codes, [0, 0, 0]);

        let mut alice = login(sasl, "alice").await;
        assert_eq!(produce(&mut alice, "orders").await, 0);
        assert_eq!(
            produce(&mut alice, "secret").await,
            TOPIC_AUTHORIZATION_FAILED
        );
        assert_eq!(fetch(&mut alice, "orders").await, 0);
        // The prefixed READ, but the DENY wins.
        assert_eq!(
            fetch(&mut alice, "order-audit").await,
            TOPIC_AUTHORIZATION_FAILED
        );
        assert_eq!(
            fetch(&mut alice, "secret").await,
            TOPIC_AUTHORIZATION_FAILED
        );
        // All topics: only those alice may describe (READ and WRITE imply DESCRIBE; a DENY
        // READ does not deny DESCRIBE).
        assert_eq!(
            metadata(&mut alice, None, false).await,
            [("order-audit".to_string(), 0), ("orders".to_string(), 0)]
        );
        assert_eq!(
            metadata(&mut alice, Some(&["orders", "secret"]), false).await,
            [
                ("orders".to_string(), 0),
                ("secret".to_string(), TOPIC_AUTHORIZATION_FAILED)
            ]
        );
        // Auto-creation needs CREATE; alice may describe "order-new" (prefixed READ) but not
        // create it, so it is not created.
        assert_eq!(
            metadata(&mut alice, Some(&["order-new"]), true).await,
            [("order-new".to_string(), TOPIC_AUTHORIZATION_FAILED)]
        );
        assert!(broker.broker.topic("order-new").is_none());

        // Bob has no ACL at all.
        let mut bob = login(sasl, "bob").await;
        assert_eq!(
            produce(&mut bob, "orders").await,
            TOPIC_AUTHORIZATION_FAILED
        );
        assert!(metadata(&mut bob, None, false).await.is_empty());
        // Nor may he manage ACLs.
        let codes = create_acls(
            &mut bob,
            vec![acl(TOPIC, "orders", LITERAL, "User:bob", WRITE, ALLOW)],
        )
        .await;
        assert_eq!(codes, [CLUSTER_AUTHORIZATION_FAILED]);
        assert_eq!(
            describe(&mut bob, describe_all()).await.0,
            CLUSTER_AUTHORIZATION_FAILED
        );

        // A super user passes every check, with no ACL naming it.
        let mut superuser = login(sasl, "admin").await;
        assert_eq!(produce(&mut superuser, "secret").await, 0);
        assert_eq!(fetch(&mut superuser, "secret").await, 0);
        assert_eq!(metadata(&mut superuser, None, false).await.len(), 3);
        broker.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn groups_transactional_ids_and_the_cluster_are_checked() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, sasl) = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        create_topic(&mut admin, "t", 1).await;
        let codes = create_acls(
            &mut admin,
            vec![
                acl(GROUP, "mine", LITERAL, "User:alice", READ, ALLOW),
                acl(
                    TRANSACTIONAL_ID,
                    "tx-",
                    PREFIXED,
                    "User:alice",
                    WRITE,
                    ALLOW,
                ),
            ],
        )
        .await;
        assert_eq!(codes, [0, 0]);
        let mut alice = login(sasl, "alice").await;

        let find = |key: &str, key_type: i8| {
            FindCoordinatorRequest::default()
                .with_key(s(key))
                .with_key_type(key_type)
        };
        let found = alice.request(3, &find("mine", 0)).await.unwrap();
        assert_eq!(found.error_code, 0);
        let found = alice.request(3, &find("theirs", 0)).await.unwrap();
        assert_eq!(found.error_code, GROUP_AUTHORIZATION_FAILED);
        let found = alice.request(3, &find("tx-1", 1)).await.unwrap();
        assert_eq!(found.error_code, 0);
        let found = alice.request(3, &find("other-tx", 1)).await.unwrap();
        assert_eq!(found.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);

        let join = JoinGroupRequest::default()
            .with_group_id(kafka_protocol::messages::GroupId(s("theirs")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"));
        let joined = alice.request(5, &join).await.unwrap();
        assert_eq!(joined.error_code, GROUP_AUTHORIZATION_FAILED);

        let init = |id: Option<&str>| {
            InitProducerIdRequest::default()
                .with_transactional_id(id.map(|i| TransactionalId(s(i))))
                .with_transaction_timeout_ms(60_000)
        };
        let answer = alice.request(4, &init(Some("other-tx"))).await.unwrap();
        assert_eq!(answer.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        let answer = alice.request(4, &init(Some("tx-1"))).await.unwrap();
        assert_eq!(answer.error_code, 0);
        // Idempotent: IDEMPOTENT_WRITE on the cluster or WRITE on some topic; alice has
        // neither.
        let answer = alice.request(4, &init(None)).await.unwrap();
        assert_eq!(answer.error_code, CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(
            create_acls(
                &mut admin,
                vec![acl(TOPIC, "t", LITERAL, "User:alice", WRITE, ALLOW)]
            )
            .await,
            [0]
        );
        let answer = alice.request(4, &init(None)).await.unwrap();
        assert_eq!(answer.error_code, 0);
        // Configs: the broker's need DESCRIBE_CONFIGS on the cluster, a topic's on the topic
        // (WRITE does not imply it); each refused resource is answered, the rest served.
        let describe = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1")),
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t")),
        ]);
        let described = alice.request(4, &describe).await.unwrap();
        let mut codes: Vec<(i8, i16)> = described
            .results
            .iter()
            .map(|r| (r.resource_type, r.error_code))
            .collect();
        codes.sort();
        assert_eq!(
            codes,
            [
                (2, TOPIC_AUTHORIZATION_FAILED),
                (4, CLUSTER_AUTHORIZATION_FAILED)
            ]
        );
        let described = admin.request(4, &describe).await.unwrap();
        assert!(described.results.iter().all(|r| r.error_code == 0));
        // Groups: described only with DESCRIBE; listed only those.
        let groups = alice
            .request(
                5,
                &DescribeGroupsRequest::default().with_groups(vec![
                    kafka_protocol::messages::GroupId(s("mine")),
                    kafka_protocol::messages::GroupId(s("theirs")),
                ]),
            )
            .await
            .unwrap();
        let mut codes: Vec<(String, i16)> = groups
            .groups
            .iter()
            .map(|g| (g.group_id.to_string(), g.error_code))
            .collect();
        codes.sort();
        assert_eq!(
            codes,
            [
                ("mine".to_string(), 0),
                ("theirs".to_string(), GROUP_AUTHORIZATION_FAILED)
            ]
        );

        // DeleteRecords needs DELETE on the topic; WRITE is not enough.
        let delete_records =
            DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(0)])]);
        let deleted = alice.request(2, &delete_records).await.unwrap();
        assert_eq!(
            deleted.topics[0].partitions[0].error_code,
            TOPIC_AUTHORIZATION_FAILED
        );
        let deleted = admin.request(2, &delete_records).await.unwrap();
        assert_eq!(deleted.topics[0].partitions[0].error_code, 0);

        // CLUSTER resources are named kafka-cluster.
        assert_eq!(
            create_acls(
                &mut admin,
                vec![acl(CLUSTER, "other", LITERAL, "User:alice", WRITE, ALLOW)]
            )
            .await,
            [INVALID_REQUEST]
        );
        broker.stop().await;
    })
    .await
    .unwrap();
}

/// InitProducerId v6 for `id` with `Enable2Pc` / `KeepPreparedTxn` as given: its error code.
async fn init_v6(conn: &mut Connection, id: &str, enable_2pc: bool, keep_prepared: bool) -> i16 {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_transaction_timeout_ms(60_000)
        .with_enable_2_pc(enable_2pc)
        .with_keep_prepared_txn(keep_prepared);
    conn.request(6, &InitProducerIdV6(request))
        .await
        .unwrap()
        .error_code
}

/// KIP-939: an InitProducerId that enables two-phase commit needs TWO_PHASE_COMMIT on the
/// transactional id as well as WRITE, and is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
/// otherwise; ALL implies the operation, WRITE does not, and a DENY of it refuses only
/// two-phase commit. CreateAcls and DescribeAcls take the operation's code, 15.
#[tokio::test]
async fn enabling_two_phase_commit_needs_the_two_phase_commit_operation() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, sasl) = start(
            dir.path(),
            &[("transaction.two.phase.commit.enable", "true")],
        )
        .await;
        let mut admin = broker.connect().await;
        let two_phase = |name: &str, principal: &str, permission: i8| {
            acl(
                TRANSACTIONAL_ID,
                name,
                LITERAL,
                principal,
                TWO_PHASE_COMMIT,
                permission,
            )
        };
        let codes = create_acls(
            &mut admin,
            vec![
                acl(
                    TRANSACTIONAL_ID,
                    "tx-",
                    PREFIXED,
                    "User:alice",
                    WRITE,
                    ALLOW,
                ),
                two_phase("tx-2pc", "User:alice", ALLOW),
                two_phase("only-2pc", "User:alice", ALLOW),
                acl(TRANSACTIONAL_ID, "bob-", PREFIXED, "User:bob", ALL, ALLOW),
                two_phase("bob-denied", "User:bob", DENY),
            ],
        )
        .await;
        assert_eq!(codes, [0; 5]);
        let (error, described) =
            describe(&mut admin, describe_all().with_operation(TWO_PHASE_COMMIT)).await;
        assert_eq!(error, 0);
        let row = |name: &str, principal: &str, permission: i8| {
            let name = name.to_string();
            let principal = principal.to_string();
            (
                TRANSACTIONAL_ID,
                name,
                LITERAL,
                principal,
                TWO_PHASE_COMMIT,
                permission,
            )
        };
        assert_eq!(
            described,
            [
                row("bob-denied", "User:bob", DENY),
                row("only-2pc", "User:alice", ALLOW),
                row("tx-2pc", "User:alice", ALLOW),
            ]
        );

        let mut alice = login(sasl, "alice").await;
        // WRITE alone serves an ordinary transactional producer at v6…
        assert_eq!(init_v6(&mut alice, "tx-plain", false, false).await, 0);
        // …but not one enabling two-phase commit, keeping a prepared transaction or not.
        for keep in [false, true] {
            assert_eq!(
                init_v6(&mut alice, "tx-plain", true, keep).await,
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            );
        }
        for keep in [false, true] {
            assert_eq!(init_v6(&mut alice, "tx-2pc", true, keep).await, 0);
        }
        // TWO_PHASE_COMMIT does not stand in for WRITE.
        assert_eq!(
            init_v6(&mut alice, "only-2pc", true, false).await,
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );

        let mut bob = login(sasl, "bob").await;
        assert_eq!(init_v6(&mut bob, "bob-1", true, false).await, 0);
        assert_eq!(
            init_v6(&mut bob, "bob-denied", true, false).await,
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
        assert_eq!(init_v6(&mut bob, "bob-denied", false, false).await, 0);
        broker.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn acl_requests_are_validated_filtered_and_survive_a_crash() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _) = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        let mut bad_principal = acl(TOPIC, "t", LITERAL, "alice", READ, ALLOW);
        bad_principal.host = s("*");
        let codes = create_acls(
            &mut admin,
            vec![
                acl(TOPIC, "t", LITERAL, "User:alice", READ, ALLOW),
                acl(TOPIC, "", LITERAL, "User:alice", READ, ALLOW),
                bad_principal,
                acl(TOPIC, "t", 2, "User:alice", READ, ALLOW),
                acl(TOPIC, "t", LITERAL, "User:alice", ANY, ALLOW),
                acl(GROUP, "g", PREFIXED, "User:*", READ, DENY),
                // Again: a no-op, not an error.
                acl(TOPIC, "t", LITERAL, "User:alice", READ, ALLOW),
            ],
        )
        .await;
        assert_eq!(
            codes,
            [
                0,
                INVALID_REQUEST,
                INVALID_REQUEST,
                INVALID_REQUEST,
                INVALID_REQUEST,
                0,
                0
            ]
        );
        let expected = vec![
            (
                TOPIC,
                "t".to_string(),
                LITERAL,
                "User:alice".to_string(),
                READ,
                ALLOW,
            ),
            (
                GROUP,
                "g".to_string(),
                PREFIXED,
                "User:*".to_string(),
                READ,
                DENY,
            ),
        ];
        let mut sorted = expected.clone();
        sorted.sort();
        assert_eq!(
            describe(&mut admin, describe_all()).await,
            (0, sorted.clone())
        );
        // A MATCH filter finds the patterns that apply to a name.
        let matching = describe_all()
            .with_resource_type_filter(GROUP)
            .with_resource_name_filter(Some(s("gx")))
            .with_pattern_type_filter(2);
        assert_eq!(
            describe(&mut admin, matching).await.1,
            [expected[1].clone()]
        );
        let unknown = describe_all().with_operation(0);
        assert_eq!(describe(&mut admin, unknown).await.0, INVALID_REQUEST);
        drop(admin);

        broker.crash().await;
        let (broker, _) = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        assert_eq!(describe(&mut admin, describe_all()).await, (0, sorted));
        let delete = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(TOPIC)
            .with_pattern_type_filter(ANY)
            .with_operation(ANY)
            .with_permission_type(ANY)]);
        let deleted = admin.request(3, &delete).await.unwrap();
        assert_eq!(deleted.filter_results[0].error_code, 0);
        assert_eq!(deleted.filter_results[0].matching_acls.len(), 1);
        drop(admin);

        broker.crash().await;
        let (broker, _) = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        assert_eq!(
            describe(&mut admin, describe_all()).await,
            (0, vec![expected[1].clone()])
        );
        broker.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn without_an_authorizer_acl_requests_are_security_disabled() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let broker = TestBroker::start(dir.path()).await;
        let mut conn = broker.connect().await;
        assert_eq!(
            describe(&mut conn, describe_all()).await.0,
            SECURITY_DISABLED
        );
        let codes = create_acls(
            &mut conn,
            vec![acl(TOPIC, "t", LITERAL, "User:alice", READ, ALLOW)],
        )
        .await;
        assert_eq!(codes, [SECURITY_DISABLED]);
        // And nothing is checked.
        create_topic(&mut conn, "t", 1).await;
        assert_eq!(produce(&mut conn, "t").await, 0);
        broker.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn allow_everyone_if_no_acl_found_opens_resources_without_acls() {
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, sasl) = start(dir.path(), &[("allow.everyone.if.no.acl.found", "true")]).await;
        let mut admin = broker.connect().await;
        create_topic(&mut admin, "open", 1).await;
        create_topic(&mut admin, "closed", 1).await;
        let codes = create_acls(
            &mut admin,
            vec![acl(TOPIC, "closed", LITERAL, "User:bob", WRITE, ALLOW)],
        )
        .await;
        assert_eq!(codes, [0]);
        let mut alice = login(sasl, "alice").await;
        assert_eq!(produce(&mut alice, "open").await, 0);
        assert_eq!(
            produce(&mut alice, "closed").await,
            TOPIC_AUTHORIZATION_FAILED
        );
        broker.stop().await;
    })
    .await
    .unwrap();
}

/// The share-state RPCs are for brokers only: CLUSTER_ACTION on the cluster, as Kafka asks.
#[tokio::test]
async fn share_state_rpcs_need_cluster_action() {
    use shoal_broker::share_state::wire;
    use shoal_core::share_coordinator::{SharePartitionKey, TopicId};
    const CLUSTER_ACTION: i8 = 9;
    tokio::time::timeout(TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, sasl) = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        create_topic(&mut admin, "t", 1).await;
        let topic_id = broker.broker.topic("t").unwrap().id;
        let key = SharePartitionKey::new("g", TopicId(topic_id.into_bytes()), 0);
        let read = wire::read_request(&key, 0);
        let mut alice = login(sasl, "alice").await;
        let answer = alice.request(0, &read).await.unwrap();
        assert_eq!(
            wire::read_result(&answer, &key).map(|(code, _)| code),
            Some(CLUSTER_AUTHORIZATION_FAILED)
        );
        let answer = alice.request(0, &wire::delete_request(&key)).await.unwrap();
        assert_eq!(
            wire::delete_code(&answer, &key),
            Some(CLUSTER_AUTHORIZATION_FAILED)
        );
        let codes = create_acls(
            &mut admin,
            vec![acl(
                CLUSTER,
                "kafka-cluster",
                LITERAL,
                "User:alice",
                CLUSTER_ACTION,
                ALLOW,
            )],
        )
        .await;
        assert_eq!(codes, vec![0]);
        let answer = alice.request(0, &read).await.unwrap();
        assert_eq!(wire::read_result(&answer, &key), Some((0, None)));
    })
    .await
    .unwrap();
}
