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
