//! `shoal verify` from the test suite: the CI-sized exactly-once proofs pass (20 000 records,
//! 10 SIGKILLs of workers and the broker, exactly_once_pipeline workers; and the checkpointed
//! pipeline of prepared transactions, with crashes at chosen steps; and the dead-letter
//! pipeline, poison inputs dead-lettered in their transactions), and deliberately broken
//! workers (one that never acknowledges; one that aborts what its checkpoint recorded) and a
//! broker that writes no dead letter make it report violations and fail. The crash schedule's seed is random unless `SHOAL_VERIFY_SEED` sets it; verify
//! prints it, so a failure is replayed with `SHOAL_VERIFY_SEED=<seed>`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Builds the worker examples (beside the shoal binary, where verify looks by default).
fn build_workers() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let examples = [
        "exactly_once_pipeline",
        "checkpointed_source",
        "atomic_dead_letter",
    ];
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "shoal-client"])
        .args(examples.iter().flat_map(|e| ["--example", e]))
        .status()
        .expect("run cargo build for the workers");
    assert!(status.success(), "building the worker examples failed");
    let shoal = PathBuf::from(env!("CARGO_BIN_EXE_shoal"));
    for example in examples {
        let worker = shoal.parent().unwrap().join("examples").join(example);
        assert!(worker.exists(), "{} missing", worker.display());
    }
}

/// Runs `shoal verify ARGS`, killing it after `limit`.
fn verify(args: &[&str], limit: Duration) -> (bool, String) {
    build_workers();
    let mut command = Command::new(env!("CARGO_BIN_EXE_shoal"));
    command.arg("verify").args(args);
    if let Ok(seed) = std::env::var("SHOAL_VERIFY_SEED") {
        command.args(["--seed", &seed]);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let Output { stdout, .. } = child.wait_with_output().unwrap();
            panic!(
                "shoal verify took more than {limit:?}:\n{}",
                String::from_utf8_lossy(&stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn verify_proves_exactly_once_through_ten_crashes() {
    let (ok, out) = verify(
        &["--records", "20000", "--crashes", "10", "--workers", "3"],
        Duration::from_secs(240),
    );
    println!("{out}");
    assert!(ok, "shoal verify failed:\n{out}");
    assert!(
        out.contains("20000 distinct inputs, 0 duplicated, 0 missing, 0 stray"),
        "{out}"
    );
    assert!(out.contains("crashes survived: 10 "), "{out}");
    assert!(
        out.contains("TX_PENDING records (broker metrics): 0"),
        "{out}"
    );
    assert!(out.contains("OK: "), "{out}");
}

#[test]
fn verify_proves_checkpointed_exactly_once_through_crashes_at_chosen_steps() {
    let (ok, out) = verify(
        &[
            "--pipeline",
            "checkpointed",
            "--records",
            "60000",
            "--crashes",
            "12",
            "--workers",
            "2",
        ],
        Duration::from_secs(420),
    );
    println!("{out}");
    assert!(ok, "shoal verify failed:\n{out}");
    assert!(
        out.contains("60000 distinct inputs, 0 duplicated, 0 missing, 0 stray"),
        "{out}"
    );
    assert!(
        out.contains("TX_PENDING records (broker metrics): 0"),
        "{out}"
    );
    assert!(
        out.contains("checkpointed state: 60000 records counted"),
        "{out}"
    );
    assert!(out.contains(" at chosen steps: polled "), "{out}");
    assert!(out.contains("OK: "), "{out}");
}

#[test]
fn verify_proves_dead_letters_exactly_once_through_ten_crashes() {
    let (ok, out) = verify(
        &[
            "--pipeline",
            "dead-letter",
            "--records",
            "20000",
            "--crashes",
            "10",
            "--workers",
            "3",
        ],
        Duration::from_secs(300),
    );
    println!("{out}");
    assert!(ok, "shoal verify failed:\n{out}");
    assert!(out.contains(" 0 duplicated, 0 missing, 0 stray"), "{out}");
    assert!(
        out.contains("2000 of 2000 poison inputs, 0 duplicated, "),
        "{out}"
    );
    assert!(
        out.contains(" other inputs at the delivery-count limit, 0 stray"),
        "{out}"
    );
    assert!(out.contains("crashes survived: 10 "), "{out}");
    assert!(
        out.contains("TX_PENDING records (broker metrics): 0"),
        "{out}"
    );
    assert!(out.contains("OK: "), "{out}");
}

/// Removes the run directory a failed run keeps (logs, data) for a user; the test needs none.
fn remove_run_dir(out: &str) {
    if let Some(dir) = out
        .split("(run directory ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn verify_fails_on_a_checkpointed_worker_that_aborts_what_its_checkpoint_recorded() {
    let (ok, out) = verify(
        &[
            "--pipeline",
            "checkpointed",
            "--records",
            "60000",
            "--crashes",
            "4",
            "--workers",
            "1",
            "--seed",
            "3",
            "--crash-phases",
            "checkpointed",
            "--worker-arg",
            "--broken-abort-on-recover",
        ],
        Duration::from_secs(300),
    );
    println!("{out}");
    assert!(!ok, "verify accepted a broken recovery:\n{out}");
    assert!(out.contains("checkpointed 1"), "{out}");
    assert!(
        out.contains("a checkpoint and its transaction disagree"),
        "{out}"
    );
    assert!(!out.contains("OK: "), "{out}");
    remove_run_dir(&out);
}

#[test]
fn verify_fails_when_the_broker_writes_no_dead_letters() {
    // The broker's prefix refuses `dlq.verify`: the poison records are archived without a
    // dead letter (as Kafka does), which the dead-letter checks must catch.
    let (ok, out) = verify(
        &[
            "--pipeline",
            "dead-letter",
            "--records",
            "2000",
            "--crashes",
            "1",
            "--workers",
            "2",
            "--settle-secs",
            "20",
            "--broker-set",
            "errors.deadletterqueue.topic.name.prefix=other.",
        ],
        Duration::from_secs(120),
    );
    println!("{out}");
    assert!(!ok, "verify accepted missing dead letters:\n{out}");
    assert!(
        out.contains("VIOLATION: 200 poison inputs have no committed dead letter"),
        "{out}"
    );
    assert!(!out.contains("OK: "), "{out}");
    remove_run_dir(&out);
}

#[test]
fn verify_fails_on_a_worker_that_never_acknowledges() {
    let (ok, out) = verify(
        &[
            "--records",
            "600",
            "--crashes",
            "1",
            "--workers",
            "2",
            "--settle-secs",
            "15",
            "--worker-arg",
            "--broken-skip-acknowledgements",
        ],
        Duration::from_secs(120),
    );
    println!("{out}");
    assert!(!ok, "verify accepted a broken pipeline:\n{out}");
    assert!(out.contains("VIOLATION: "), "{out}");
    assert!(out.contains("not fully acknowledged"), "{out}");
    assert!(!out.contains("OK: "), "{out}");
    remove_run_dir(&out);
}
