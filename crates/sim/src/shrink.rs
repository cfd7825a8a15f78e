//! The shortest failing prefix: the fewest fault-phase steps after which the same seed still
//! fails (the run is deterministic, so a prefix of its fault steps is the same run cut short,
//! followed by the quiet phase), and the flags that reproduce a run.

use crate::world::{run, Bugs, Outcome, RunConfig};

/// Bisects the number of fault-phase steps of a failing `config`; returns that number and its
/// failing run. A failure at step k of the fault phase fails again with k + 1 fault steps (the
/// same run up to it), so the search starts there. Failing is not monotonic in the step
/// count, so the result is a local minimum, verified to fail.
pub fn shortest_failing_prefix(config: &RunConfig, failing: &Outcome) -> (u64, Outcome) {
    let mut hi = config.steps;
    let mut best = failing.clone();
    if let Some(f) = failing.failure.as_ref().filter(|f| f.step < config.steps) {
        let again = run(&RunConfig {
            steps: f.step + 1,
            ..*config
        });
        if again.failure.is_some() {
            hi = f.step + 1;
            best = again;
        }
    }
    let mut lo = 0u64;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let attempt = run(&RunConfig {
            steps: mid,
            ..*config
        });
        if attempt.failure.is_some() {
            hi = mid;
            best = attempt;
        } else {
            lo = mid + 1;
        }
    }
    (hi, best)
}

/// The `shoal-sim` flags, besides `--seed` and `--steps`, that make a run of `config` the same
/// run again: the bug, and every switch that changes what the seed draws or checks.
pub fn reproduce_flags(config: &RunConfig) -> String {
    let mut flags = Bugs::NAMES
        .iter()
        .find(|n| Bugs::named(n) == Some(config.bugs))
        .map(|n| format!(" --bug {n}"))
        .unwrap_or_default();
    for (on, flag) in [
        (config.two_phase, " --two-phase"),
        (!config.dead_letters, " --no-dead-letters"),
        (!config.replay_check, " --no-replay-check"),
    ] {
        if on {
            flags.push_str(flag);
        }
    }
    flags
}
