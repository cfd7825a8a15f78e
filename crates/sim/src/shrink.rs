//! The shortest failing prefix: the fewest fault-phase steps after which the same seed still
//! fails (the run is deterministic, so a prefix of its steps is the same run cut short, followed
//! by the quiet phase).

use crate::world::{run, Outcome, RunConfig};

/// Bisects the number of fault-phase steps of a failing `config`; returns the shortest failing
/// run found (failure is not monotonic in the step count, so this is a local minimum that is
/// verified to fail).
pub fn shortest_failing_prefix(config: &RunConfig, failing: &Outcome) -> Outcome {
    let mut best = failing.clone();
    let mut hi = failing
        .failure
        .as_ref()
        .map_or(config.steps, |f| f.step.min(config.steps));
    // A failure found in the fault phase reproduces with exactly that many steps.
    let at = RunConfig {
        steps: hi,
        ..*config
    };
    let again = run(&at);
    if again.failure.is_some() {
        best = again;
    } else {
        hi = config.steps;
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
    best
}
