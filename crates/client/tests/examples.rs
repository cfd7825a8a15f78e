//! The `produce`, `transactional_produce` and `share_consume` examples with tiny counts against a started
//! broker: they run, exit 0 and print their one summary line.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Broker;

fn example(name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "shoal-client", "--example", name])
        .status()
        .expect("run cargo build for the example");
    assert!(status.success(), "building example {name} failed");
    // target/debug/deps/<test> → target/debug/examples/<name>
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(|d| d.parent()).unwrap();
    debug.join("examples").join(name)
}

fn run(name: &str, args: &[&str]) -> String {
    let output = Command::new(example(name)).args(args).output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{name}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    stdout
}

#[test]
fn the_produce_examples_print_one_summary_line() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let addr = broker.addr.to_string();
    let line = run("produce", &[&addr, "example", "500"]);
    assert!(line.starts_with("produced 500 records"), "{line}");
    assert!(line.contains("records/s"), "{line}");
    let line = run(
        "transactional_produce",
        &[&addr, "example-txn", "example-tid", "2500"],
    );
    assert!(
        line.starts_with("committed 2500 records to example-txn in 3 transactions"),
        "{line}"
    );
}

#[test]
fn the_share_consume_example_accepts_what_produce_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let addr = broker.addr.to_string();
    run("produce", &[&addr, "example-share", "300"]);
    let line = run(
        "share_consume",
        &[&addr, "example-share", "example-group", "300"],
    );
    assert!(
        line.starts_with("consumed 300 records from example-share in share group example-group"),
        "{line}"
    );
}

/// A running example, SIGKILLed on drop (the exactly-once examples run until killed); its
/// stderr goes to a file.
struct Running {
    child: std::process::Child,
    stderr: PathBuf,
}

impl Running {
    fn start(name: &str, args: &[&str], dir: &std::path::Path) -> Running {
        let stderr = dir.join(format!("{name}.stderr"));
        let child = Command::new(example(name))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Running { child, stderr }
    }

    /// Kills it and returns what it printed to stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.stderr).unwrap()
    }

    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "exited with {status}: {}",
                std::fs::read_to_string(&self.stderr).unwrap()
            );
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PARTITIONS: i32 = 3;

/// Writes `values` to `topic` (created with [`PARTITIONS`] partitions), record `i` keyed `ki`
/// with a header `n` = `i`, in batches of ten so that polls take parts of partitions.
async fn produce_input(broker: &Broker, topic: &str, values: &[String]) {
    use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
    let producer = Producer::new(
        ProducerConfig::builder(common::config(broker, &[]))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    common::log::create_topic(producer.cluster(), topic, PARTITIONS).await;
    for chunk in values.iter().enumerate().collect::<Vec<_>>().chunks(10) {
        let mut deliveries = Vec::new();
        for (i, v) in chunk {
            let record = ProducerRecord::new(topic, v.to_string())
                .with_key(format!("k{i}"))
                .with_header("n", i.to_string());
            deliveries.push(producer.send(record).await.unwrap());
        }
        for d in deliveries {
            d.await.unwrap();
        }
    }
    producer.close().await;
}

/// Waits until `group` has acknowledged every record of `topic` (each partition's share
/// start offset at its end offset, lag 0) and returns the start offsets, or panics after
/// `secs` seconds, or when `worker` exits.
async fn fully_acknowledged(
    broker: &Broker,
    group: &str,
    topic: &str,
    worker: &mut Running,
    secs: u64,
) -> Vec<i64> {
    use shoal_client::admin::OffsetSpec;
    let admin = shoal_client::Admin::connect(common::config(broker, &[]))
        .await
        .unwrap();
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    let ends: Vec<i64> = admin
        .list_offsets(topic, &partitions, OffsetSpec::Latest)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, end)| end.unwrap())
        .collect();
    let asked: Vec<(String, i32)> = partitions.iter().map(|p| (topic.into(), *p)).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        worker.assert_running();
        let offsets = admin
            .describe_share_group_offsets(group, Some(&asked))
            .await;
        if let Ok(offsets) = offsets {
            let state: Vec<(i64, i64)> = offsets
                .iter()
                .map(|(_, o)| o.as_ref().map_or((-1, -1), |o| (o.start_offset, o.lag)))
                .collect();
            if state
                .iter()
                .zip(&ends)
                .all(|((s, lag), e)| s == e && *lag == 0)
            {
                admin.close().await;
                return state.into_iter().map(|(s, _)| s).collect();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not acknowledged: {state:?}, ends {ends:?}"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Every committed record of `topic`-0 as (key, value, headers), read_committed.
async fn committed(broker: &Broker, topic: &str, at_least: usize) -> Vec<(String, String, String)> {
    let cluster = shoal_client::Cluster::connect(common::config(broker, &[]))
        .await
        .unwrap();
    let text = |b: &Option<bytes::Bytes>| {
        String::from_utf8(b.clone().unwrap_or_default().to_vec()).unwrap()
    };
    let fetched = common::log::fetch_committed(&cluster, topic, 0, at_least).await;
    cluster.close().await;
    fetched
        .records
        .iter()
        .map(|r| {
            let headers: Vec<String> = r
                .headers
                .iter()
                .map(|(k, v)| format!("{}={}", k.as_str(), text(v)))
                .collect();
            (text(&r.key), text(&r.value), headers.join(","))
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_exactly_once_pipeline_writes_each_output_once_and_acknowledges_each_input() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let addr = broker.addr.to_string();
    let n = 1_000;
    let rt = runtime();
    let values: Vec<String> = (0..n).map(|i| format!("value-{i}")).collect();
    rt.block_on(produce_input(&broker, "eos-in", &values));
    let args = [
        "--bootstrap",
        &addr,
        "--input",
        "eos-in",
        "--output",
        "eos-out",
        "--group",
        "eos-g",
        "--transactional-id",
        "eos-tid",
        "--records-per-txn",
        "64",
    ];
    let mut worker = Running::start("exactly_once_pipeline", &args, dir.path());
    rt.block_on(fully_acknowledged(
        &broker,
        "eos-g",
        "eos-in",
        &mut worker,
        90,
    ));
    let stderr = worker.stop();
    let mut out = rt.block_on(committed(&broker, "eos-out", n));
    out.sort();
    let mut expected: Vec<(String, String, String)> = (0..n)
        .map(|i| {
            (
                format!("k{i}"),
                format!("processed:value-{i}"),
                format!("n={i}"),
            )
        })
        .collect();
    expected.sort();
    assert_eq!(out, expected, "exactly once, key and headers kept");
    let commits: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("committed "))
        .collect();
    assert!(commits.len() >= n / 64, "{stderr}");
    let total: usize = commits
        .iter()
        .map(|l| {
            let records: usize = l.split(' ').nth(1).unwrap().parse().unwrap();
            assert!(records <= 64, "{l}");
            records
        })
        .sum();
    assert_eq!(total, n, "{stderr}");
    assert!(
        commits
            .last()
            .unwrap()
            .contains(&format!("(total {n}) in ")),
        "{stderr}"
    );
}

#[test]
fn the_dead_letter_example_rejects_exactly_the_bad_records_with_their_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let addr = broker.addr.to_string();
    let n = 600;
    let bad = |i: usize| i % 7 == 3;
    let rt = runtime();
    let values: Vec<String> = (0..n)
        .map(|i| {
            if bad(i) {
                format!("not a number {i}")
            } else {
                i.to_string()
            }
        })
        .collect();
    rt.block_on(produce_input(&broker, "dl-in", &values));
    let args = [
        "--bootstrap",
        &addr,
        "--input",
        "dl-in",
        "--output",
        "dl-out",
        "--dead-letter",
        "dlq.dl",
        "--group",
        "dl-g",
        "--transactional-id",
        "dl-tid",
    ];
    let mut worker = Running::start("atomic_dead_letter", &args, dir.path());
    rt.block_on(fully_acknowledged(
        &broker,
        "dl-g",
        "dl-in",
        &mut worker,
        90,
    ));
    let stderr = worker.stop();
    let bad_count = (0..n).filter(|i| bad(*i)).count();
    let mut out = rt.block_on(committed(&broker, "dl-out", n - bad_count));
    out.sort();
    let mut expected: Vec<_> = (0..n)
        .filter(|i| !bad(*i))
        .map(|i| (format!("k{i}"), (2 * i).to_string(), format!("n={i}")))
        .collect();
    expected.sort();
    assert_eq!(out, expected);
    // Written by the broker in each rejection's transaction: the original key and value, and
    // Kafka's headers naming the source record (the original headers are not copied).
    let mut dead = rt.block_on(committed(&broker, "dlq.dl", bad_count));
    dead.sort();
    let dead_keys: Vec<(String, String)> = dead
        .iter()
        .map(|(k, v, _)| (k.clone(), v.clone()))
        .collect();
    let mut expected: Vec<_> = (0..n)
        .filter(|i| bad(*i))
        .map(|i| (format!("k{i}"), format!("not a number {i}")))
        .collect();
    expected.sort();
    assert_eq!(dead_keys, expected, "exactly the bad records, once each");
    for (_, _, headers) in &dead {
        for expected in [
            "__dlq.errors.topic=dl-in,",
            "__dlq.errors.partition=",
            "__dlq.errors.offset=",
            "__dlq.errors.group=dl-g,",
            "__dlq.errors.delivery.count=",
            "__dlq.errors.message=",
        ] {
            assert!(headers.contains(expected), "{expected} in {headers}");
        }
        assert!(
            !headers.split(',').any(|h| h.starts_with("n=")),
            "original headers are not copied: {headers}"
        );
    }
    let (accepted, rejected) =
        stderr
            .lines()
            .filter(|l| l.starts_with("committed "))
            .fold((0, 0), |(a, r), l| {
                let words: Vec<&str> = l.split(' ').collect();
                let num = |w: &str| w.trim_start_matches('(').parse::<usize>().unwrap();
                (a + num(words[3]), r + num(words[5]))
            });
    assert_eq!((accepted, rejected), (n - bad_count, bad_count), "{stderr}");
    // Rejected records are archived, not redelivered: a new member gets nothing.
    let again = rt.block_on(async {
        let mut c = common::share::consumer(&broker, "dl-g", "explicit", "dl-in").await;
        let r = common::share::poll_until(&mut c, 1, std::time::Duration::from_secs(2)).await;
        c.close().await;
        r
    });
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn the_checkpointed_source_acknowledges_everything_it_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let addr = broker.addr.to_string();
    let n = 800;
    let rt = runtime();
    let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    rt.block_on(produce_input(&broker, "cp-in", &values));
    let args = [
        "--bootstrap",
        &addr,
        "--input",
        "cp-in",
        "--group",
        "cp-g",
        "--transactional-id",
        "cp-tid",
        "--checkpoint-ms",
        "300",
    ];
    let mut worker = Running::start("checkpointed_source", &args, dir.path());
    rt.block_on(fully_acknowledged(
        &broker,
        "cp-g",
        "cp-in",
        &mut worker,
        90,
    ));
    let stderr = worker.stop();
    let checkpoints: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("checkpoint "))
        .collect();
    let acknowledged: usize = checkpoints
        .iter()
        .map(|l| l.split(' ').nth(2).unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(acknowledged, n, "{stderr}");
    let sum: usize = (0..n).sum();
    assert!(
        checkpoints
            .last()
            .unwrap()
            .ends_with(&format!("(total {n}, sum {sum})")),
        "{stderr}"
    );
}

/// The checkpointed source with a checkpoint file (KIP-939): killed while a transaction
/// holds staged acknowledgements and outputs the last checkpoint did not record, and
/// restarted, it aborts that transaction (its inputs come back) and in the end every input's
/// output is visible exactly once, every input is acknowledged, and the state counts each
/// input once. Committing the kept transaction regardless of the checkpoint's token makes
/// this fail (duplicates).
#[test]
fn the_two_phase_checkpointed_source_survives_a_kill_with_every_output_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(
        dir.path(),
        &[("transaction.two.phase.commit.enable", "true")],
    );
    let addr = broker.addr.to_string();
    let half = 300;
    let rt = runtime();
    let first: Vec<String> = (0..half).map(|i| i.to_string()).collect();
    let second: Vec<String> = (half..2 * half).map(|i| i.to_string()).collect();
    rt.block_on(produce_input(&broker, "cp2-in", &first));
    let file = dir.path().join("cp2.checkpoint");
    let args = [
        "--bootstrap",
        &addr,
        "--input",
        "cp2-in",
        "--output",
        "cp2-out",
        "--group",
        "cp2-g",
        "--transactional-id",
        "cp2-tid",
        "--checkpoint-ms",
        "2000",
        "--checkpoint-file",
        file.to_str().unwrap(),
    ];
    let stderr = dir.path().join("checkpointed_source.stderr");
    let wait_for = |worker: &mut Running, text: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !std::fs::read_to_string(&stderr).unwrap().contains(text) {
            worker.assert_running();
            assert!(
                std::time::Instant::now() < deadline,
                "never printed {text:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let mut worker = Running::start("checkpointed_source", &args, dir.path());
    let sum_first: usize = (0..half).sum();
    wait_for(&mut worker, &format!("(total {half}, sum {sum_first})"));
    // The second half is polled and staged in a transaction the next checkpoint (2 s away)
    // would record; the kill comes first.
    rt.block_on(produce_input(&broker, "cp2-in", &second));
    std::thread::sleep(std::time::Duration::from_millis(600));
    let before = worker.stop();
    let mut worker = Running::start("checkpointed_source", &args, dir.path());
    let n = 2 * half;
    let sum: usize = (0..n).sum();
    wait_for(&mut worker, &format!("(total {n}, sum {sum})"));
    rt.block_on(fully_acknowledged(
        &broker,
        "cp2-g",
        "cp2-in",
        &mut worker,
        90,
    ));
    let after = worker.stop();
    assert!(after.starts_with("recovered: "), "{after}");
    let mut out = rt.block_on(committed(&broker, "cp2-out", n));
    out.sort();
    let mut expected: Vec<(String, String, String)> = (0..n)
        .map(|i| {
            let j = i % half;
            (format!("k{j}"), format!("processed:{i}"), format!("n={j}"))
        })
        .collect();
    expected.sort();
    assert_eq!(
        out, expected,
        "every output exactly once\n{before}\n{after}"
    );
}
