//! `shoal verify`: the exactly-once proof a user can run (issue 12, KIP-1289).
//!
//! It starts its own broker (this binary's `serve`, on a free loopback port, in a fresh or
//! given data directory), fills an input topic with N numbered records (`record-<i>`, keyed
//! `k<i>`) over P partitions, and runs W worker processes of the `exactly_once_pipeline`
//! example (same share group, transactional ids `verify-worker-<w>`; or its Python twin,
//! `--worker-bin crates/python/examples/exactly_once_pipeline.py`, with the same flags and
//! output, run by `--worker-python`). Then it SIGKILLs a worker or the broker K times at
//! random moments — a seeded RNG picks the victim and the delay; the seed is printed and
//! `--seed` replays the schedule — restarting each at once
//! (a worker that exits by itself is restarted too, with its transactional id, which fences
//! the old instance). Once every crash is done and the group has acknowledged everything,
//! it stops the workers and checks:
//!
//! * a read_committed fetch of every output partition holds `processed:record-<i>` exactly
//!   once for every i < N and nothing else (no duplicate, no loss, no stray record);
//! * every share partition of the input has its start offset at the partition's end and lag 0
//!   (DescribeShareGroupOffsets): every record is ACKNOWLEDGED (or ARCHIVED), since the start
//!   offset never moves past an AVAILABLE, ACQUIRED or TX_PENDING record;
//! * nothing is TX_PENDING: the broker's `shoal_share_partition_txn_pending_records` gauges
//!   (its metrics endpoint) are all 0.
//!
//! With `--pipeline checkpointed` the workers are the `checkpointed_source` example instead
//! (a prepared KIP-939 transaction per checkpoint, its token in a checkpoint file; the broker
//! gets `transaction.two.phase.commit.enable=true`): every other worker crash then restarts
//! the worker with a crash point armed, so it kills itself at a chosen step (after a poll,
//! after staging, after prepare before the checkpoint is written, after the checkpoint before
//! completion; `--crash-phases` narrows them), and one more check runs: the record counts of
//! the workers' last checkpoints add up to N exactly (`pipeline`).
//!
//! With `--pipeline dead-letter` the workers are the `atomic_dead_letter` example: the inputs
//! are decimal integers, every tenth one poison (`poison-<i>`); a worker doubles the others and
//! REJECTs the poison, and the broker writes each rejected record's dead letter to
//! `dlq.verify` inside the rejection's transaction (KIP-1191 with KIP-1289). Checked besides:
//! every poison input is in `dlq.verify` exactly once (read_committed, by its copied key) and
//! never in the output; no other input is there, unless it reached the delivery-count limit
//! through crashes and so has no output.
//!
//! It prints the counts and the crashes survived, and fails (exit 1) on any violation. The
//! broker's and workers' logs are kept in the run directory, which is printed (and removed
//! after a run without violation unless `SHOAL_VERIFY_KEEP` is set). The broker logs at info
//! (`SHOAL_LOG` overrides): its loads, marker rewrites and reloads date each restart. The
//! header also names both binaries with their age, since a stale `shoal` reports on old code.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pipeline::{Pipeline, CRASH_AT, DEAD_LETTER, PHASES};
use shoal_client::admin::{NewTopic, OffsetSpec};
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::{Admin, ClientConfig, Cluster};

mod pipeline;

const INPUT: &str = "verify-input";
const OUTPUT: &str = "verify-output";
const GROUP: &str = "verify-group";
/// The delivery-count limit the broker is given: room for redeliveries after crashes.
const DELIVERY_COUNT_LIMIT: u32 = 10;

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Input records.
    #[arg(long, default_value_t = 20_000)]
    pub records: u64,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// SIGKILLs of a worker or the broker, at random moments.
    #[arg(long, default_value_t = 10)]
    pub crashes: u32,
    /// Seed of the crash schedule (random when absent; printed either way).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Largest pause before a crash, in milliseconds (the pause is uniform from a tenth of it).
    #[arg(long, default_value_t = 1_500)]
    pub crash_interval_ms_max: u64,
    /// The pipeline the workers run: `per-poll` (`exactly_once_pipeline`), `checkpointed`
    /// (`checkpointed_source`: a prepared transaction per checkpoint, KIP-939; half the worker
    /// crashes at chosen steps, and the checkpointed state checked) or `dead-letter`
    /// (`atomic_dead_letter`: every tenth input poison, dead-lettered in the transaction).
    #[arg(long, value_enum, default_value_t = Pipeline::PerPoll)]
    pub pipeline: Pipeline,
    /// Records per transaction of the per-poll workers.
    #[arg(long, default_value_t = 100)]
    pub records_per_txn: u64,
    /// Checkpoint interval of the checkpointed workers, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub checkpoint_ms: u64,
    /// The steps a checkpointed worker is made to crash at, in turn (comma-separated; default
    /// all of polled, staged, prepared, checkpointed).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(PHASES))]
    pub crash_phases: Vec<String>,
    /// The worker program (default: the pipeline's example beside this binary, as
    /// `cargo build -p shoal-client --example exactly_once_pipeline` leaves it). A path
    /// ending in `.py` is a Python script taking the same flags, such as the Python package's
    /// `crates/python/examples/exactly_once_pipeline.py`, run by `--worker-python`.
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
    /// The interpreter that runs a `.py` worker (one with the Python package installed).
    #[arg(long, default_value = "python3")]
    pub worker_python: PathBuf,
    /// One more argument for every worker (repeatable; e.g. a deliberately broken mode).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    pub worker_args: Vec<String>,
    /// One more broker configuration key for the broker verify starts (repeatable).
    #[arg(long = "broker-set", value_name = "KEY=VALUE")]
    pub broker_set: Vec<String>,
    /// Data directory of the broker (default: a fresh one under the run directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// After the last crash, give up (a violation) when the group has acknowledged nothing
    /// more for this many seconds before it acknowledged everything. Progress, not a fixed
    /// deadline: the members of killed workers hold their partitions until their session
    /// times out (45 s after the last broker restart, which re-arms every session), and the
    /// work left then takes as long as it takes.
    #[arg(long, default_value_t = 120)]
    pub settle_secs: u64,
}

/// splitmix64: a small seeded generator, so that a seed replays the same schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn sigkill(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid, which we have not waited for yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

/// `path` and how long ago it was built (its modification time).
fn binary_age(path: &std::path::Path) -> String {
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok());
    match age {
        Some(age) => format!("{} (built {} s ago)", path.display(), age.as_secs()),
        None => format!("{} (build time unknown)", path.display()),
    }
}

/// The broker's log filter: `SHOAL_LOG` when set, else info.
fn broker_log_filter() -> String {
    std::env::var("SHOAL_LOG").unwrap_or_else(|_| "info".to_string())
}

/// The broker process under test.
struct BrokerProcess {
    addr: SocketAddr,
    set: Vec<String>,
    metrics: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl BrokerProcess {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("serve")
            .args(["--listen", &self.addr.to_string()])
            .args(["--metrics", &self.metrics.to_string()])
            .arg("--data-dir")
            .arg(&self.data_dir)
            // Faster redelivery of a killed worker's records, and room for redeliveries.
            .args(["--set", "group.share.min.record.lock.duration.ms=1000"])
            .args(["--set", "group.share.record.lock.duration.ms=10000"])
            .args([
                "--set".to_owned(),
                format!("group.share.delivery.count.limit={DELIVERY_COUNT_LIMIT}"),
            ])
            .args(["--set", "group.initial.rebalance.delay.ms=0"])
            .args(self.set.iter().flat_map(|kv| ["--set", kv.as_str()]))
            // The broker's loads, marker rewrites and reloads are info: a failed run's
            // broker.log must tell its restarts apart (SHOAL_LOG overrides).
            .env("SHOAL_LOG", broker_log_filter())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start the broker")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(self.addr).is_err() {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the broker exited at start: {status} (log {})",
                    self.log.display()
                );
            }
            if Instant::now() > deadline {
                sigkill(&mut child);
                bail!("the broker did not listen within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            sigkill(&mut child);
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One worker slot: its process and how it ended before.
struct Worker {
    command: Command,
    log: PathBuf,
    child: Option<Child>,
    exits: u32,
    /// The crash point armed in the running incarnation: (phase, nth time reached).
    armed: Option<(&'static str, u64)>,
    /// Incarnations that SIGKILLed themselves at their crash point, per phase.
    phase_crashes: BTreeMap<&'static str, u32>,
}

impl Worker {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        match self.armed {
            Some((phase, nth)) => self.command.env(CRASH_AT, format!("{phase}:{nth}")),
            None => self.command.env_remove(CRASH_AT),
        };
        self.child = Some(
            self.command
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("start a worker")?,
        );
        Ok(())
    }

    /// Restarts it if it exited by itself (a fatal error, the broker gone too long).
    /// A worker killed at its crash point counts as a crash at that phase, not as an exit.
    fn revive(&mut self) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        let status = match &mut self.child {
            Some(c) => match c.try_wait()? {
                Some(status) => Some(status),
                None => return Ok(()),
            },
            None => None,
        };
        match (self.armed.take(), status.and_then(|s| s.signal())) {
            (Some((phase, _)), Some(libc::SIGKILL)) => {
                *self.phase_crashes.entry(phase).or_default() += 1;
            }
            _ => self.exits += 1,
        }
        self.spawn()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            sigkill(&mut child);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn client_config(addr: SocketAddr) -> anyhow::Result<ClientConfig> {
    Ok(ClientConfig::from_properties([
        ("bootstrap.servers", addr.to_string().as_str()),
        ("client.id", "shoal-verify"),
        ("request.timeout.ms", "5000"),
        ("retry.backoff.ms", "50"),
        ("reconnect.backoff.max.ms", "500"),
    ])?)
}

/// Runs `shoal verify`, printing its report to stdout.
///
/// # Errors
/// A violation of exactly-once (with what was found), or a failure to run the experiment.
pub fn run(args: VerifyArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    if args.records == 0 || args.partitions < 1 || args.workers == 0 {
        bail!("--records, --partitions and --workers must be at least 1");
    }
    let seed = args.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    let worker_bin = match &args.worker_bin {
        Some(p) => p.clone(),
        None => default_worker_bin(args.pipeline)?,
    };
    if !worker_bin.exists() {
        bail!(
            "worker {} missing: build it with `cargo build -p shoal-client --example {}` (add \
             --release for a release shoal) or pass --worker-bin",
            worker_bin.display(),
            args.pipeline.example()
        );
    }
    let run_dir = std::env::temp_dir().join(format!("shoal-verify-{}-{seed}", std::process::id()));
    std::fs::create_dir_all(&run_dir)?;
    println!(
        "shoal verify: seed {seed}, {} records over {} partitions, {} {} workers, {} crashes \
         (run directory {})",
        args.records,
        args.partitions,
        args.workers,
        args.pipeline.example(),
        args.crashes,
        run_dir.display()
    );
    // Which builds run: a binary older than the sources under test reports on old code.
    let python = is_python(&worker_bin).then_some(&args.worker_python);
    println!(
        "broker binary {}; worker {}{}",
        binary_age(&std::env::current_exe()?),
        python.map_or(String::new(), |p| format!("{} ", p.display())),
        binary_age(&worker_bin)
    );
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let mut broker = BrokerProcess {
        addr,
        set: (args.pipeline.broker_settings().iter())
            .map(|kv| kv.to_string())
            .chain(args.broker_set.iter().cloned())
            .collect(),
        metrics: format!("127.0.0.1:{}", free_port()?).parse()?,
        data_dir: args
            .data_dir
            .clone()
            .unwrap_or_else(|| run_dir.join("data")),
        log: run_dir.join("broker.log"),
        child: None,
    };
    broker.spawn()?;
    runtime.block_on(fill(addr, &args))?;
    let mut workers: Vec<Worker> = (0..args.workers)
        .map(|w| {
            let mut command = match python {
                Some(python) => {
                    let mut c = Command::new(python);
                    c.arg(&worker_bin);
                    c
                }
                None => Command::new(&worker_bin),
            };
            command
                .args(["--bootstrap", &addr.to_string()])
                .args(["--input", INPUT, "--output", OUTPUT, "--group", GROUP]);
            args.pipeline.worker_args(
                &mut command,
                w,
                args.records_per_txn,
                args.checkpoint_ms,
                &run_dir,
            );
            command.args(&args.worker_args);
            Worker {
                command,
                log: run_dir.join(format!("worker-{w}.log")),
                child: None,
                exits: 0,
                armed: None,
                phase_crashes: BTreeMap::new(),
            }
        })
        .collect();
    for w in &mut workers {
        w.spawn()?;
    }
    let started = Instant::now();
    let crashes = crash(&args, seed, &mut broker, &mut workers, runtime)?;
    // How far the work had got: crashes after the end would prove little.
    if let Ok(state) = runtime.block_on(group_state(addr, args.partitions)) {
        let acknowledged: i64 = state.iter().map(|(_, _, start, _)| (*start).max(0)).sum();
        println!(
            "at the last crash ({:.1} s): {acknowledged} of {} input records acknowledged",
            started.elapsed().as_secs_f64(),
            args.records
        );
    }
    let settled = runtime.block_on(settle(
        addr,
        &args,
        &mut workers,
        Duration::from_secs(args.settle_secs),
    ))?;
    for w in &mut workers {
        w.kill();
    }
    let exits: u32 = workers.iter().map(|w| w.exits).sum();
    let mut at_phases: BTreeMap<&str, u32> = BTreeMap::new();
    for (phase, n) in workers.iter().flat_map(|w| &w.phase_crashes) {
        *at_phases.entry(phase).or_default() += n;
    }
    let phased: u32 = at_phases.values().sum();
    let phases = if args.pipeline == Pipeline::Checkpointed {
        let each: Vec<String> = PHASES
            .iter()
            .map(|p| format!("{p} {}", at_phases.get(p).copied().unwrap_or(0)))
            .collect();
        format!(", {phased} at chosen steps: {}", each.join(", "))
    } else {
        String::new()
    };
    println!(
        "crashes survived: {} ({} of the broker, {} of workers at random moments{phases}); \
         {exits} worker exits restarted; {:.1} s",
        crashes.broker + crashes.workers + phased,
        crashes.broker,
        crashes.workers,
        started.elapsed().as_secs_f64()
    );
    let mut violations = runtime.block_on(check(&broker, &args, settled))?;
    if args.pipeline == Pipeline::Checkpointed {
        violations.extend(check_checkpoints(&run_dir, &args)?);
    }
    broker.kill();
    if violations.is_empty() {
        println!("OK: every input record's output committed exactly once and acknowledged");
        if std::env::var_os("SHOAL_VERIFY_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&run_dir);
        }
        Ok(())
    } else {
        for v in &violations {
            println!("VIOLATION: {v}");
        }
        bail!(
            "{} violations (seed {seed}; logs in {})",
            violations.len(),
            run_dir.display()
        )
    }
}

/// Whether the worker is a Python script (run by the interpreter, with the same flags).
fn is_python(worker: &std::path::Path) -> bool {
    worker.extension().is_some_and(|e| e == "py")
}

/// The pipeline's example beside this binary (target/<profile>/examples/).
fn default_worker_bin(pipeline: Pipeline) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("the binary's directory")?;
    Ok(dir.join("examples").join(pipeline.example()))
}

/// The checkpointed state: the workers' last checkpoints count every input record once.
fn check_checkpoints(run_dir: &std::path::Path, args: &VerifyArgs) -> anyhow::Result<Vec<String>> {
    let mut counted = 0u64;
    for w in 0..args.workers {
        counted += pipeline::checkpointed_records(&pipeline::checkpoint_file(run_dir, w))?;
    }
    println!("checkpointed state: {counted} records counted");
    Ok(if counted == args.records {
        Vec::new()
    } else {
        vec![format!(
            "the workers' checkpoints count {counted} records, not {}: a checkpoint and its \
             transaction disagree",
            args.records
        )]
    })
}

/// Creates the topics and writes the numbered input records.
async fn fill(addr: SocketAddr, args: &VerifyArgs) -> anyhow::Result<()> {
    let admin = Admin::connect(client_config(addr)?).await?;
    let mut topics = vec![
        NewTopic::new(INPUT).partitions(args.partitions),
        NewTopic::new(OUTPUT).partitions(args.partitions),
    ];
    if args.pipeline == Pipeline::DeadLetter {
        topics.push(
            NewTopic::new(DEAD_LETTER)
                .partitions(args.partitions)
                .config("errors.deadletterqueue.group.enable", "true"),
        );
    }
    for (topic, result) in admin
        .create_topics(&topics, shoal_client::admin::Mode::Apply)
        .await?
    {
        result.with_context(|| format!("create {topic}"))?;
    }
    admin.close().await;
    let producer = Producer::new(
        ProducerConfig::builder(client_config(addr)?)
            .build()
            .context("producer config")?,
    )
    .await?;
    let mut deliveries = Vec::new();
    for i in 0..args.records {
        let record =
            ProducerRecord::new(INPUT, args.pipeline.input_value(i)).with_key(format!("k{i}"));
        deliveries.push(producer.send(record).await?);
        if deliveries.len() >= 1_000 {
            for d in deliveries.drain(..) {
                d.await?;
            }
        }
    }
    for d in deliveries {
        d.await?;
    }
    producer.close().await;
    Ok(())
}

#[derive(Default)]
struct Crashes {
    broker: u32,
    workers: u32,
}

/// The crash schedule: K pauses and victims from the seed.
fn crash(
    args: &VerifyArgs,
    seed: u64,
    broker: &mut BrokerProcess,
    workers: &mut [Worker],
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Crashes> {
    let mut rng = Rng(seed);
    let mut done = Crashes::default();
    let max = args.crash_interval_ms_max.max(10);
    let started = Instant::now();
    for crash in 1..=args.crashes {
        let pause = Duration::from_millis(rng.between(max / 10, max));
        let until = Instant::now() + pause;
        while Instant::now() < until {
            for w in workers.iter_mut() {
                w.revive()?;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The broker is one victim among the workers: W picks a worker, W the broker.
        let victim = rng.between(0, workers.len() as u64) as usize;
        let acknowledged = match runtime.block_on(group_state(broker.addr, args.partitions)) {
            Ok(state) => state
                .iter()
                .map(|(_, _, s, _)| (*s).max(0))
                .sum::<i64>()
                .to_string(),
            Err(_) => "?".into(),
        };
        let who = if victim == workers.len() {
            "the broker".to_string()
        } else {
            format!("worker {victim}")
        };
        println!(
            "crash {crash}/{} at {:.1} s: SIGKILL {who} ({acknowledged} of {} acknowledged)",
            args.crashes,
            started.elapsed().as_secs_f64(),
            args.records
        );
        if victim == workers.len() {
            broker.kill();
            broker.spawn()?;
            done.broker += 1;
        } else {
            let w = &mut workers[victim];
            w.kill();
            // Every other worker crash of a checkpointed run (the first, third, …) arms a crash
            // point in the new incarnation, the phases in turn, at its 1st to 3rd time there.
            w.armed =
                (args.pipeline == Pipeline::Checkpointed && done.workers % 2 == 0).then(|| {
                    let phases = crash_phases(args);
                    (
                        phases[(done.workers / 2) as usize % phases.len()],
                        rng.between(1, 3),
                    )
                });
            w.spawn()?;
            done.workers += 1;
            if let Some((phase, nth)) = workers[victim].armed {
                // Waits for it, so that every phase is surely hit (unless the work runs out).
                let crashed = wait_for_crash_point(workers, victim)?;
                println!(
                    "  worker {victim} restarted to crash at {phase} (time {nth}): {}",
                    if crashed {
                        "crashed there"
                    } else {
                        "not reached"
                    }
                );
            }
        }
    }
    Ok(done)
}

/// The phases `--crash-phases` names (all by default), in their order.
fn crash_phases(args: &VerifyArgs) -> Vec<&'static str> {
    PHASES
        .into_iter()
        .filter(|p| args.crash_phases.is_empty() || args.crash_phases.iter().any(|c| c == p))
        .collect()
}

/// Waits (reviving the others) until worker `armed` crashed at its crash point, for at most
/// 20 s; whether it did.
fn wait_for_crash_point(workers: &mut [Worker], armed: usize) -> anyhow::Result<bool> {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        for w in workers.iter_mut() {
            w.revive()?;
        }
        if workers[armed].armed.is_none() {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(false)
}

/// The input's end offsets and the group's start offsets and lags, per partition.
async fn group_state(
    addr: SocketAddr,
    partitions: i32,
) -> anyhow::Result<Vec<(i32, i64, i64, i64)>> {
    let admin = Admin::connect(client_config(addr)?).await?;
    let result = async {
        let ids: Vec<i32> = (0..partitions).collect();
        let ends = admin.list_offsets(INPUT, &ids, OffsetSpec::Latest).await?;
        let asked: Vec<(String, i32)> = ids.iter().map(|p| (INPUT.to_owned(), *p)).collect();
        let offsets = admin
            .describe_share_group_offsets(GROUP, Some(&asked))
            .await?;
        let mut out = Vec::new();
        for ((p, end), (_, offset)) in ends.into_iter().zip(offsets) {
            let end = end?;
            let (start, lag) = match offset {
                Ok(o) => (o.start_offset, o.lag),
                Err(_) => (-1, -1),
            };
            out.push((p, end, start, lag));
        }
        anyhow::Ok(out)
    }
    .await;
    admin.close().await;
    result
}

/// Waits (reviving exited workers) until the group acknowledged every input record, or
/// acknowledged nothing more for `stalled`; whether it did.
async fn settle(
    addr: SocketAddr,
    args: &VerifyArgs,
    workers: &mut [Worker],
    stalled: Duration,
) -> anyhow::Result<bool> {
    let mut progress = (Instant::now(), i64::MIN);
    while progress.0.elapsed() < stalled {
        for w in workers.iter_mut() {
            w.revive()?;
        }
        if let Ok(state) = group_state(addr, args.partitions).await {
            if state
                .iter()
                .all(|(_, end, start, lag)| start == end && *lag == 0)
            {
                return Ok(true);
            }
            let acknowledged: i64 = state.iter().map(|(_, _, start, _)| (*start).max(0)).sum();
            if acknowledged > progress.1 {
                progress = (Instant::now(), acknowledged);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(false)
}

/// The checks of the module docs; the violations found.
async fn check(
    broker: &BrokerProcess,
    args: &VerifyArgs,
    settled: bool,
) -> anyhow::Result<Vec<String>> {
    let mut violations = Vec::new();
    if !settled {
        violations.push(format!(
            "the group acknowledged nothing more for {} s before every input record was",
            args.settle_secs
        ));
    }
    // Dead letters (the dead-letter pipeline): read_committed, every partition.
    let dead = if args.pipeline == Pipeline::DeadLetter {
        Some(dead_letters(broker.addr, args).await?)
    } else {
        None
    };
    // Output: read_committed, every partition.
    let cluster = Cluster::connect(client_config(broker.addr)?).await?;
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    let (mut committed, mut stray) = (0u64, Vec::new());
    for p in 0..args.partitions {
        let read = shoal_client::log_reader::read_partition(&cluster, OUTPUT, p, true).await?;
        for r in read.records {
            committed += 1;
            let value = r.value.as_deref().unwrap_or_default();
            match args.pipeline.output_of(value).filter(|i| *i < args.records) {
                Some(i) => *seen.entry(i).or_default() += 1,
                None => stray.push(format!("{OUTPUT}-{p}@{}", r.offset)),
            }
        }
    }
    cluster.close().await;
    let duplicated: Vec<u64> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(i, _)| *i)
        .collect();
    // An input with no output is missing unless it is poison or was dead-lettered at the
    // delivery-count limit (checked below).
    let dead_lettered = |i: &u64| dead.as_ref().is_some_and(|d| d.contains_key(i));
    let missing: Vec<u64> = (0..args.records)
        .filter(|i| !seen.contains_key(i) && !args.pipeline.poison(*i) && !dead_lettered(i))
        .collect();
    let poisoned: Vec<u64> = seen
        .keys()
        .copied()
        .filter(|i| args.pipeline.poison(*i))
        .collect();
    println!(
        "output (read_committed): {committed} committed records, {} distinct inputs, {} \
         duplicated, {} missing, {} stray",
        seen.len(),
        duplicated.len(),
        missing.len(),
        stray.len()
    );
    if !duplicated.is_empty() {
        violations.push(format!(
            "{} inputs have more than one committed output, e.g. input {:?}",
            duplicated.len(),
            &duplicated[..duplicated.len().min(5)]
        ));
    }
    if !missing.is_empty() {
        violations.push(format!(
            "{} inputs have no committed output, e.g. input {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    if !poisoned.is_empty() {
        violations.push(format!(
            "{} poison inputs have a committed output, e.g. input {:?}",
            poisoned.len(),
            &poisoned[..poisoned.len().min(5)]
        ));
    }
    if !stray.is_empty() {
        violations.push(format!(
            "{} committed output records match no input, e.g. {:?}",
            stray.len(),
            &stray[..stray.len().min(5)]
        ));
    }
    if let Some(dead) = &dead {
        violations.extend(check_dead_letters(dead, &seen, args));
    }
    // The share group: every record terminal.
    let state = group_state(broker.addr, args.partitions).await?;
    let shown: Vec<String> = state
        .iter()
        .map(|(p, end, start, lag)| format!("{p}: start {start} end {end} lag {lag}"))
        .collect();
    println!("share group {GROUP} on {INPUT}: {}", shown.join("; "));
    for (p, end, start, lag) in &state {
        if start != end || *lag != 0 {
            violations.push(format!(
                "{INPUT}-{p} not fully acknowledged: start offset {start}, end {end}, lag {lag}"
            ));
        }
    }
    // TX_PENDING, from the broker's gauges.
    let pending = txn_pending(broker.metrics)?;
    println!("TX_PENDING records (broker metrics): {pending}");
    if pending != 0 {
        violations.push(format!("{pending} records still TX_PENDING"));
    }
    Ok(violations)
}

/// One input's committed dead letters: how many, and the highest delivery count among them
/// (`__dlq.errors.delivery.count`).
#[derive(Debug, Default, Clone, Copy)]
struct DeadLetters {
    count: u32,
    delivery_count: u32,
}

/// The committed dead letters in `dlq.verify`, by input (the copied key `k<i>`), and those
/// that name no input (as `u64::MAX`).
async fn dead_letters(
    addr: SocketAddr,
    args: &VerifyArgs,
) -> anyhow::Result<BTreeMap<u64, DeadLetters>> {
    let cluster = Cluster::connect(client_config(addr)?).await?;
    let mut out: BTreeMap<u64, DeadLetters> = BTreeMap::new();
    let mut read = Ok(());
    for p in 0..args.partitions {
        match shoal_client::log_reader::read_partition(&cluster, DEAD_LETTER, p, true).await {
            Ok(records) => {
                for r in records.records {
                    let input = (r.key.as_deref())
                        .and_then(|k| std::str::from_utf8(k).ok())
                        .and_then(|k| k.strip_prefix('k'))
                        .and_then(|i| i.parse::<u64>().ok())
                        .filter(|i| *i < args.records)
                        .unwrap_or(u64::MAX);
                    let delivery_count = r
                        .headers
                        .get(&b"__dlq.errors.delivery.count"[..])
                        .and_then(|v| v.as_deref())
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|v| v.parse::<u32>().ok())
                        .unwrap_or(0);
                    let entry = out.entry(input).or_default();
                    entry.count += 1;
                    entry.delivery_count = entry.delivery_count.max(delivery_count);
                }
            }
            Err(e) => {
                read = Err(e);
                break;
            }
        }
    }
    cluster.close().await;
    read?;
    Ok(out)
}

/// The dead-letter checks of the module docs.
fn check_dead_letters(
    dead: &BTreeMap<u64, DeadLetters>,
    outputs: &BTreeMap<u64, u32>,
    args: &VerifyArgs,
) -> Vec<String> {
    let mut violations = Vec::new();
    let poison: Vec<u64> = (0..args.records)
        .filter(|i| args.pipeline.poison(*i))
        .collect();
    let missing: Vec<u64> = poison
        .iter()
        .copied()
        .filter(|i| !dead.contains_key(i))
        .collect();
    let duplicated: Vec<u64> = (dead.iter())
        .filter(|(i, d)| **i != u64::MAX && d.count > 1)
        .map(|(i, _)| *i)
        .collect();
    // A good input is dead-lettered only at the limit, and then has no output.
    let wrongly: Vec<u64> = (dead.iter())
        .filter(|(i, d)| {
            **i != u64::MAX
                && !args.pipeline.poison(**i)
                && (d.delivery_count < DELIVERY_COUNT_LIMIT || outputs.contains_key(i))
        })
        .map(|(i, _)| *i)
        .collect();
    let at_limit = (dead.iter())
        .filter(|(i, _)| **i != u64::MAX && !args.pipeline.poison(**i))
        .count();
    let stray = dead.get(&u64::MAX).map_or(0, |d| d.count);
    println!(
        "dead letters ({DEAD_LETTER}, read_committed): {} of {} poison inputs, {} duplicated, \
         {at_limit} other inputs at the delivery-count limit, {stray} stray",
        poison.len() - missing.len(),
        poison.len(),
        duplicated.len()
    );
    for (what, inputs) in [
        ("poison inputs have no committed dead letter", &missing),
        (
            "inputs have more than one committed dead letter",
            &duplicated,
        ),
        (
            "good inputs were dead-lettered below the delivery-count limit or also output",
            &wrongly,
        ),
    ] {
        if !inputs.is_empty() {
            violations.push(format!(
                "{} {what}, e.g. input {:?}",
                inputs.len(),
                &inputs[..inputs.len().min(5)]
            ));
        }
    }
    if stray != 0 {
        violations.push(format!("{stray} committed dead letters name no input"));
    }
    violations
}

/// The sum of the broker's `shoal_share_partition_txn_pending_records` gauges.
fn txn_pending(metrics: SocketAddr) -> anyhow::Result<i64> {
    let mut conn = TcpStream::connect(metrics).context("the metrics endpoint")?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: shoal\r\n\r\n")?;
    let mut body = String::new();
    conn.read_to_string(&mut body)?;
    let mut total = 0i64;
    let mut found = false;
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("shoal_share_partition_txn_pending_records") else {
            continue;
        };
        if rest.starts_with('{') || rest.starts_with(' ') {
            if let Some(v) = rest.rsplit(' ').next() {
                total += v.trim().parse::<f64>().unwrap_or(0.0) as i64;
                found = true;
            }
        }
    }
    if !found && !body.contains("shoal_") {
        bail!("the metrics endpoint answered no metrics");
    }
    Ok(total)
}
