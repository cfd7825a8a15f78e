//! The `shoal serve` binary: configuration sources, metrics, signals, the directory lock.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;

mod common;
use common::{free_port, terminate, wait_listening};

fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_env_and_flags_apply_and_sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        "# Kafka-style file\nnum.partitions=3\nlog.dirs=/ignored\n",
    )
    .unwrap();
    let port = free_port();
    let metrics_port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "serve",
            "--listen",
            &addr.to_string(),
            "--metrics",
            &metrics.to_string(),
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .args(["--set", "group.initial.rebalance.delay.ms=0"])
        .env("SHOAL_OFFSETS_TOPIC_NUM_PARTITIONS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);

    let mut conn = Connection::connect(addr).await.unwrap();
    let request = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("auto"))))]));
    let response = conn.request(12, &request).await.unwrap();
    assert_eq!(
        response.topics[0].partitions.len(),
        3,
        "num.partitions from the file"
    );
    let all = conn
        .request(12, &MetadataRequest::default().with_topics(None))
        .await
        .unwrap();
    let offsets = all
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("__consumer_offsets"))
        .unwrap();
    assert_eq!(
        offsets.partitions.len(),
        2,
        "from SHOAL_OFFSETS_TOPIC_NUM_PARTITIONS"
    );
    assert!(offsets.is_internal);

    let text = scrape(metrics);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(
        text.contains("shoal_requests_total{request=\"Metadata\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("shoal_log_end_offset{topic=\"auto\",partition=\"2\"} 0"),
        "{text}"
    );
    assert!(text.contains("shoal_connections 1"), "{text}");

    // A second broker on the same directory refuses to start.
    let second = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("in use by another Shoal broker"),
        "{stderr}"
    );

    drop(conn);
    let status = terminate(&mut child);
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    // A clean shutdown leaves every log marked clean.
    assert!(dir.path().join("data/auto-0/clean_shutdown").exists());
}

#[test]
fn invalid_configuration_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--set",
            "num.partitions=0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("num.partitions"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_command_finds_and_aborts_a_hanging_transaction() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, ProducerId};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        // Without the coordinator's check a batch can open a transaction that no marker will
        // close: the hanging transaction `kafka-transactions abort` exists for.
        .args(["--set", "transaction.partition.verification.enable=false"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);
    let mut conn = Connection::connect(addr).await.unwrap();
    let init = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await
        .unwrap();
    let batch = shoal_storage::encode_batch(
        &[(None, Some(&b"stuck"[..]))],
        shoal_storage::BatchOptions {
            producer_id: init.producer_id.0,
            producer_epoch: init.producer_epoch,
            base_sequence: 0,
            transactional: true,
            timestamp_ms: 1,
            ..shoal_storage::BatchOptions::default()
        },
    );
    let produced = conn
        .request(
            9,
            &ProduceRequest::default()
                .with_transactional_id(Some(kafka_protocol::messages::TransactionalId(
                    StrBytes::from_static_str("lost"),
                )))
                .with_acks(-1)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("hang")))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(bytes::Bytes::from(batch)))])]),
        )
        .await
        .unwrap();
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);

    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["transactions", "--bootstrap", &addr.to_string()])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (ok, shown) = cli(&["describe-producers", "--topic", "hang", "--partition", "0"]);
    assert!(ok);
    assert!(
        shown.contains(&format!("{:>12}", init.producer_id.0)),
        "{shown}"
    );
    let (ok, _) = cli(&[
        "abort",
        "--topic",
        "hang",
        "--partition",
        "0",
        "--start-offset",
        "7",
    ]);
    assert!(!ok, "no transaction starts at offset 7");
    let (ok, said) = cli(&[
        "abort",
        "--topic",
        "hang",
        "--partition",
        "0",
        "--start-offset",
        "0",
    ]);
    assert!(ok, "{said}");
    assert!(said.contains("aborted the transaction"), "{said}");
    let (ok, shown) = cli(&["describe-producers", "--topic", "hang", "--partition", "0"]);
    assert!(ok);
    assert!(
        shown.trim_end().ends_with("-1"),
        "no open transaction any more: {shown}"
    );
    let (ok, listed) = cli(&["list"]);
    assert!(ok && listed.starts_with("TransactionalId"), "{listed}");
    drop(conn);
    terminate(&mut child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_groups_command_lists_describes_and_resets() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, GroupId, ShareGroupHeartbeatRequest};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);
    let mut conn = Connection::connect(addr).await.unwrap();
    let created = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("jobs")))
                .with_num_partitions(2)
                .with_replication_factor(-1)]),
        )
        .await
        .unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let heartbeat = |epoch: i32| {
        ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("workers")))
            .with_member_id(StrBytes::from_static_str("member-1"))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(
                (epoch == 0).then(|| vec![TopicName(StrBytes::from_static_str("jobs"))]),
            )
    };
    let joined = conn.request(1, &heartbeat(0)).await.unwrap();
    assert_eq!(joined.error_code, 0);

    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["share-groups", "--bootstrap", &addr.to_string()])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, listed) = cli(&["list"]);
    assert!(
        ok && listed.contains("workers") && listed.contains("Stable"),
        "{listed}"
    );
    let (ok, described) = cli(&["describe", "--group", "workers"]);
    assert!(ok, "{described}");
    assert!(described.contains("member-1"), "{described}");
    assert!(described.contains("jobs:[0, 1]"), "{described}");
    // Resetting needs an empty group.
    let (ok, said) = cli(&[
        "reset",
        "--group",
        "workers",
        "--topic",
        "jobs",
        "--to-latest",
    ]);
    assert!(!ok && said.contains("NON_EMPTY_GROUP"), "{said}");
    let left = conn.request(1, &heartbeat(-1)).await.unwrap();
    assert_eq!(left.error_code, 0);
    let (ok, said) = cli(&[
        "reset",
        "--group",
        "workers",
        "--topic",
        "jobs",
        "--partition",
        "1",
        "--to-offset",
        "0",
    ]);
    assert!(ok, "{said}");
    let (ok, described) = cli(&["describe", "--group", "workers"]);
    assert!(ok, "{described}");
    let row = described
        .lines()
        .find(|l| l.starts_with("jobs"))
        .unwrap_or_else(|| panic!("no share partition row: {described}"));
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields, vec!["jobs", "1", "0", "0"], "{described}");
    drop(conn);
    terminate(&mut child);
}

/// `share-groups describe --metrics` reads TX_PENDING and the transactional-acknowledgement
/// series from the broker's metrics endpoint. Nothing can be staged over the wire yet, so this
/// checks the zero case on both of the broker's sources: a share partition with a live machine
/// (after a ShareFetch) and one with only persisted state (after a reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_groups_describe_shows_tx_pending_from_the_metrics_endpoint() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, GroupId, ShareGroupHeartbeatRequest};
    use shoal_protocol::share::share_fetch::{FetchPartition, FetchTopic, ShareFetchRequest};
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", &addr.to_string()])
        .args(["--metrics", &metrics.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);
    wait_listening(metrics, &mut child);
    let mut conn = Connection::connect(addr).await.unwrap();
    let created = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("jobs")))
                .with_num_partitions(2)
                .with_replication_factor(-1)]),
        )
        .await
        .unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let topic_id = created.topics[0].topic_id;
    let heartbeat = |epoch: i32| {
        ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("workers")))
            .with_member_id(StrBytes::from_static_str("member-1"))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(
                (epoch == 0).then(|| vec![TopicName(StrBytes::from_static_str("jobs"))]),
            )
    };
    assert_eq!(conn.request(1, &heartbeat(0)).await.unwrap().error_code, 0);
    // A ShareFetch builds partition 0's live machine (the topic is empty: nothing acquired).
    let fetched = conn
        .request(
            1,
            &ShareFetchRequest {
                group_id: Some(GroupId(StrBytes::from_static_str("workers"))),
                member_id: Some(StrBytes::from_static_str("member-1")),
                share_session_epoch: 0,
                max_wait_ms: 0,
                min_bytes: 1,
                max_bytes: 1 << 20,
                max_records: 500,
                batch_size: 500,
                topics: vec![FetchTopic {
                    topic_id,
                    partitions: vec![FetchPartition {
                        partition_index: 0,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(fetched.error_code, 0);
    assert_eq!(fetched.responses[0].partitions[0].error_code, 0);
    assert_eq!(conn.request(1, &heartbeat(-1)).await.unwrap().error_code, 0);

    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["share-groups", "--bootstrap", &addr.to_string()])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    // Partition 1 gets persisted state only: the reset writes it, no machine is built.
    let (ok, said) = cli(&[
        "reset",
        "--group",
        "workers",
        "--topic",
        "jobs",
        "--partition",
        "1",
        "--to-offset",
        "0",
    ]);
    assert!(ok, "{said}");

    let (ok, described) = cli(&[
        "describe",
        "--group",
        "workers",
        "--metrics",
        &metrics.to_string(),
    ]);
    assert!(ok, "{described}");
    let header = described
        .lines()
        .find(|l| l.starts_with("Topic"))
        .unwrap_or_else(|| panic!("no header: {described}"));
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        vec![
            "Topic",
            "Partition",
            "StartOffset",
            "Lag",
            "InFlight",
            "Acquired",
            "Available",
            "TX_PENDING",
            "TxnStaged",
            "TxnCommitted",
            "TxnAborted"
        ],
        "{described}"
    );
    let row = |partition: &str| {
        described
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 1 && f[0] == "jobs" && f[1] == partition)
            .unwrap_or_else(|| panic!("no row for jobs-{partition}: {described}"))
    };
    // Live machine: every series present, all zero.
    assert_eq!(
        row("0"),
        vec!["jobs", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0"],
        "{described}"
    );
    // Persisted state only: its TX_PENDING count, and no window or counters.
    assert_eq!(
        row("1"),
        vec!["jobs", "1", "0", "0", "-", "-", "-", "0", "-", "-", "-"],
        "{described}"
    );
    assert!(
        described.contains("Time in TX_PENDING (broker-wide): no staged record resolved yet"),
        "{described}"
    );

    // Without --metrics: Kafka's columns, and where the rest is.
    let (ok, plain) = cli(&["describe", "--group", "workers"]);
    assert!(ok, "{plain}");
    let header = plain
        .lines()
        .find(|l| l.starts_with("Topic"))
        .unwrap_or_else(|| panic!("no header: {plain}"));
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        vec!["Topic", "Partition", "StartOffset", "Lag"],
        "{plain}"
    );
    assert!(plain.contains("add --metrics HOST:PORT"), "{plain}");
    drop(conn);
    terminate(&mut child);
}

/// Whether ApiVersions lists TxnShareAcknowledge (api key 95).
async fn advertises_txn_share_ack(conn: &mut Connection) -> bool {
    conn.request(3, &kafka_protocol::messages::ApiVersionsRequest::default())
        .await
        .unwrap()
        .api_keys
        .iter()
        .any(|k| k.api_key == 95)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn features_command_describes_upgrades_and_downgrades_share_version() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["features", "--bootstrap", &addr.to_string()])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let share_line = |described: &str| {
        described
            .lines()
            .find(|l| l.starts_with("Feature: share.version\t"))
            .unwrap_or_else(|| panic!("no share.version line: {described}"))
            .to_string()
    };
    let mut conn = Connection::connect(addr).await.unwrap();

    // A new data directory: share.version 3 of 0-3, TxnShareAcknowledge advertised.
    let (ok, described) = cli(&["describe"]);
    assert!(ok, "{described}");
    let line = share_line(&described);
    assert!(
        line.starts_with(
            "Feature: share.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 3\t\
             FinalizedVersionLevel: 3\tEpoch: "
        ),
        "{line}"
    );
    assert!(
        described.contains(
            "Feature: metadata.version\tSupportedMinVersion: 4.4-IV2\tSupportedMaxVersion: \
             4.4-IV2\tFinalizedVersionLevel: 4.4-IV2\t"
        ),
        "{described}"
    );
    assert!(
        described.contains("Feature: transaction.version\tSupportedMinVersion: 0\t")
            && described.contains("FinalizedVersionLevel: 2\t"),
        "{described}"
    );
    assert!(advertises_txn_share_ack(&mut conn).await);

    let (ok, said) = cli(&["downgrade", "--feature", "share.version=1"]);
    assert!(ok, "{said}");
    assert_eq!(said.trim(), "share.version was downgraded to 1.");
    assert!(share_line(&cli(&["describe"]).1).contains("FinalizedVersionLevel: 1\t"));
    assert!(!advertises_txn_share_ack(&mut conn).await);

    // Refusals exit non-zero with the broker's reason; nothing changes.
    let (ok, said) = cli(&["downgrade", "--feature", "share.version=3"]);
    assert!(!ok, "{said}");
    assert!(
        said.contains("Could not downgrade share.version to 3. INVALID_UPDATE_VERSION(95): "),
        "{said}"
    );
    let (ok, said) = cli(&["upgrade", "--feature", "share.version=99"]);
    assert!(!ok && said.contains("INVALID_UPDATE_VERSION"), "{said}");
    let (ok, said) = cli(&["upgrade", "--feature", "share.version=3", "--dry-run"]);
    assert!(ok, "{said}");
    assert_eq!(said.trim(), "share.version can be upgraded to 3.");
    assert!(share_line(&cli(&["describe"]).1).contains("FinalizedVersionLevel: 1\t"));

    let (ok, said) = cli(&["upgrade", "--feature", "share.version=3"]);
    assert!(ok, "{said}");
    assert_eq!(said.trim(), "share.version was upgraded to 3.");
    assert!(share_line(&cli(&["describe"]).1).contains("FinalizedVersionLevel: 3\t"));
    assert!(advertises_txn_share_ack(&mut conn).await);

    let (ok, said) = cli(&["disable", "--feature", "share.version", "--dry-run"]);
    assert!(ok, "{said}");
    assert_eq!(said.trim(), "share.version can be disabled.");
    let (ok, said) = cli(&["downgrade", "--unsafe", "--feature", "share.version=0"]);
    assert!(ok, "{said}");
    assert_eq!(said.trim(), "share.version was downgraded to 0.");
    assert!(share_line(&cli(&["describe"]).1).contains("FinalizedVersionLevel: 0\t"));
    assert!(!advertises_txn_share_ack(&mut conn).await);
    terminate(&mut child);
}

/// `shoal perf txn-acks` with tiny counts. While this build's `share.version` does not reach
/// level 3 (TxnShareAcknowledge, api key 95, is then not advertised), the harness must refuse
/// with a clear UNSUPPORTED message; once level 3 is the default, it must run both kinds of
/// transaction and pass its own final check. The branch follows the broker's feature table, so
/// the test needs no switch when level 3 lands, and a broker that stops advertising the key
/// then fails it.
#[test]
fn perf_txn_acks_runs_both_kinds_or_says_unsupported() {
    let level3 = shoal_broker::feature_levels::spec(shoal_broker::feature_levels::SHARE_VERSION)
        .is_some_and(|f| f.default_level >= 3);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);
    let perf = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["perf", "--bootstrap", &addr.to_string(), "txn-acks"])
            .args([
                "--transactions",
                "5",
                "--records",
                "3",
                "--warmup",
                "1",
                "--block",
                "2",
                "--timeout-secs",
                "120",
            ])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, stdout, stderr) = perf(&[]);
    if level3 {
        assert!(ok, "{stdout}{stderr}");
        for row in ["commit", "txn", "produce", "stage", "acquire"] {
            assert!(
                stdout.lines().any(|l| l.starts_with(row)),
                "no {row} row: {stdout}"
            );
        }
        for kind in [" A ", " B ", " B/A "] {
            assert!(stdout.contains(kind), "no kind{kind}: {stdout}");
        }
        // 6 transactions of each kind (1 warm-up) of 3 records.
        assert!(
            stdout.contains("verified: 36 committed output records"),
            "{stdout}"
        );
        assert!(
            stdout.contains("18 of 18 input records acknowledged"),
            "{stdout}"
        );
        assert!(
            stdout.contains("(share group lag 0, persisted start offset 18)"),
            "{stdout}"
        );
        let (ok, json, stderr) = perf(&["--json"]);
        assert!(ok, "{json}{stderr}");
        assert!(json.trim_start().starts_with('{'), "{json}");
        for key in [
            "\"A\":{\"commit\"",
            "\"B\":{\"commit\"",
            "\"B/A\":{\"commit\"",
        ] {
            assert!(json.contains(key), "no {key}: {json}");
        }
    } else {
        assert!(!ok, "the harness ran without TxnShareAcknowledge: {stdout}");
        assert!(
            stderr.contains("UNSUPPORTED") && stderr.contains("api key 95"),
            "{stderr}"
        );
    }
    terminate(&mut child);
}
