//! `shoal-sim`: run one seed (`--seed S --steps N`), or many (`--seeds A..B`), optionally with a
//! known bug switched back on (`--bug NAME`). A failing run prints its seed, the trace that led
//! to the failure and the shortest failing prefix; the exit status is 1.

use std::process::ExitCode;
use std::time::Instant;

use shoal_sim::shrink::{reproduce_flags, shortest_failing_prefix};
use shoal_sim::{run, Bugs, RunConfig};

const USAGE: &str =
    "usage: shoal-sim [--seed S | --seeds A..B] [--steps N] [--bug NAME] [--two-phase] [--trace]
  --seed S      run one seed (default 0)
  --seeds A..B  run seeds A to B-1, stop at the first failure
  --steps N     steps with faults before the quiet phase (default 3000)
  --bug NAME    re-introduce a known bug: exact-epoch-marker, lock-expires-tx-pending,
                stage-before-persist, marker-ignores-producer, reply-before-durable,
                marker-before-append, keep-prepared-aborts, commit-archives-carried
  --trace       print the whole trace of a single run
  --two-phase   make about half the workers two-phase-commit (KIP-939) ones
  --no-dead-letters  never give the share group a dead-letter queue (by default about half
                the seeds have one, and poison inputs)
  --keep-going  with --seeds: run every seed, count the failing ones (no traces)
  --no-replay-check  skip the replay-equals-live comparison (to see what else catches a bug)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seeds = 0..1u64;
    let mut steps = 3000u64;
    let mut bugs = Bugs::default();
    let mut trace = false;
    let mut keep_going = false;
    let mut replay_check = true;
    let mut two_phase = false;
    let mut dead_letters = true;
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--seed" => match value.parse::<u64>() {
                Ok(s) => seeds = s..s + 1,
                Err(_) => return usage(),
            },
            "--seeds" => {
                let Some((a, b)) = value.split_once("..") else {
                    return usage();
                };
                match (a.parse::<u64>(), b.parse::<u64>()) {
                    (Ok(a), Ok(b)) if a < b => seeds = a..b,
                    _ => return usage(),
                }
            }
            "--steps" => match value.parse() {
                Ok(n) => steps = n,
                Err(_) => return usage(),
            },
            "--bug" => match Bugs::named(&value) {
                Some(b) => bugs = b,
                None => return usage(),
            },
            "--trace" => {
                trace = true;
                i += 1;
                continue;
            }
            "--no-replay-check" => {
                replay_check = false;
                i += 1;
                continue;
            }
            "--two-phase" => {
                two_phase = true;
                i += 1;
                continue;
            }
            "--no-dead-letters" => {
                dead_letters = false;
                i += 1;
                continue;
            }
            "--keep-going" => {
                keep_going = true;
                i += 1;
                continue;
            }
            _ => return usage(),
        }
        i += 2;
    }
    let started = Instant::now();
    let mut total_steps = 0u64;
    let count = seeds.end - seeds.start;
    let mut failed: Vec<u64> = Vec::new();
    for seed in seeds {
        let config = RunConfig {
            seed,
            steps,
            bugs,
            trace: trace && count == 1,
            replay_check,
            two_phase,
            dead_letters,
        };
        let outcome = run(&config);
        total_steps += outcome.steps;
        if trace && count == 1 {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        if let (Some(f), true) = (&outcome.failure, keep_going) {
            println!("seed {seed} FAILED at step {}: {}", f.step, f.message);
            failed.push(seed);
            continue;
        }
        if let Some(f) = &outcome.failure {
            println!(
                "seed {seed} FAILED at step {} ({} ms virtual): {}",
                f.step, f.time_ms, f.message
            );
            let traced = run(&RunConfig {
                trace: true,
                ..config
            });
            let (prefix, shortest) = shortest_failing_prefix(
                &RunConfig {
                    trace: true,
                    ..config
                },
                &traced,
            );
            let tail = shortest.trace.len().saturating_sub(200);
            println!(
                "shortest failing prefix: {prefix} fault steps (reproduce: shoal-sim --seed {seed} --steps {prefix}{} --trace); its last {} events:",
                reproduce_flags(&config),
                shortest.trace.len() - tail
            );
            for line in &shortest.trace[tail..] {
                println!("  {line}");
            }
            if let Some(f) = &shortest.failure {
                println!("  => step {}: {}", f.step, f.message);
            }
            return ExitCode::FAILURE;
        }
        if count == 1 {
            println!(
                "seed {seed}: ok, {} steps, {} input records, {} commits, {} aborts, {} broker crashes, dead letters {} after ARCHIVING + {} committed with their transaction",
                outcome.steps,
                outcome.inputs,
                outcome.commits,
                outcome.aborts,
                outcome.crashes,
                outcome.dead_letters.0,
                outcome.dead_letters.1
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = total_steps as f64 / secs.max(1e-9);
    if keep_going && !failed.is_empty() {
        println!(
            "{} of {count} seeds failed (first: {}): {total_steps} steps in {secs:.1} s ({rate:.0} steps/s)",
            failed.len(),
            failed[0]
        );
        return ExitCode::FAILURE;
    }
    println!("{count} seeds ok: {total_steps} steps in {secs:.1} s ({rate:.0} steps/s)");
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}
