//! Retry timing, sans-IO: exponential backoff with jitter ([`Backoff`], Kafka's KIP-580
//! `retry.backoff.ms` / `retry.backoff.max.ms`), and the decision whether one more attempt
//! fits ([`RetryBudget`]: `retries` and a deadline from `default.api.timeout.ms`).
//!
//! Time and randomness come in as arguments, so the tests and the property test state exact
//! bounds; the async cluster shell reads the clock and sleeps.

use std::time::{Duration, Instant};

/// Kafka's jitter: each delay is the exponential term times a factor in `[0.8, 1.2]`.
pub const JITTER: f64 = 0.2;

/// Exponential backoff: `initial * 2^attempt`, jittered by ±[`JITTER`], never above `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// `max` below `initial` is raised to `initial` (Kafka does the same with
    /// `retry.backoff.max.ms` < `retry.backoff.ms`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
        }
    }

    /// The delay before retry number `attempt` (0 for the first retry). `unit_random` is a
    /// uniform sample in `[0, 1)`; values outside are clamped.
    pub fn delay(&self, attempt: u32, unit_random: f64) -> Duration {
        // 2^attempt saturates long before 64: cap the exponent, then the term.
        let exponent = attempt.min(32);
        let term = self
            .initial
            .checked_mul(1u32 << exponent.min(31))
            .unwrap_or(self.max)
            .min(self.max);
        let r = if unit_random.is_finite() {
            unit_random.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let factor = 1.0 - JITTER + 2.0 * JITTER * r;
        term.mul_f64(factor).min(self.max)
    }
}

/// Whether another attempt is allowed: at most `retries` retries, and never past `deadline`.
#[derive(Debug, Clone, Copy)]
pub struct RetryBudget {
    retries: u32,
    deadline: Instant,
    attempts_made: u32,
}

/// What to do after a retriable failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Sleep this long, then attempt again.
    RetryAfter(Duration),
    /// Return the error: retries used up, or the deadline would pass while waiting.
    GiveUp,
}

impl RetryBudget {
    pub fn new(retries: u32, deadline: Instant) -> Self {
        Self {
            retries,
            deadline,
            attempts_made: 0,
        }
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Attempts made so far (the first one included).
    pub fn attempts(&self) -> u32 {
        self.attempts_made
    }

    /// Records one failed attempt at `now` and decides on the next.
    pub fn after_failure(&mut self, now: Instant, backoff: &Backoff, unit_random: f64) -> Decision {
        let retry_index = self.attempts_made;
        self.attempts_made = self.attempts_made.saturating_add(1);
        if retry_index >= self.retries {
            return Decision::GiveUp;
        }
        let delay = backoff.delay(retry_index, unit_random);
        match now.checked_add(delay) {
            Some(wake) if wake < self.deadline => Decision::RetryAfter(delay),
            _ => Decision::GiveUp,
        }
    }
}

/// A small non-cryptographic generator for jitter (xorshift64*), seeded per client so that
/// clients restarted together do not retry in step.
#[derive(Debug, Clone)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed | 1, // xorshift must not start at zero
        }
    }

    /// Seeded from the standard library's per-process random hasher keys.
    pub fn from_entropy() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        Self::new(h.finish())
    }

    /// A uniform sample in `[0, 1)`.
    pub fn next_unit(&mut self) -> f64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        let out = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (out >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grows_exponentially_up_to_the_max() {
        let b = Backoff::new(100 * MS, 1000 * MS);
        assert_eq!(b.delay(0, 0.5), 100 * MS);
        assert_eq!(b.delay(1, 0.5), 200 * MS);
        assert_eq!(b.delay(3, 0.5), 800 * MS);
        assert_eq!(b.delay(4, 0.5), 1000 * MS);
        assert_eq!(b.delay(u32::MAX, 0.99), 1000 * MS);
        assert_eq!(b.delay(0, 0.0), 80 * MS);
        assert_eq!(b.delay(4, 0.0), 800 * MS);
        assert_eq!(Backoff::new(50 * MS, MS).delay(9, 0.5), 50 * MS);
    }

    #[test]
    fn budget_stops_at_retries_and_deadline() {
        let now = Instant::now();
        let b = Backoff::new(100 * MS, 1000 * MS);
        let mut budget = RetryBudget::new(2, now + Duration::from_secs(60));
        assert_eq!(
            budget.after_failure(now, &b, 0.5),
            Decision::RetryAfter(100 * MS)
        );
        assert_eq!(
            budget.after_failure(now, &b, 0.5),
            Decision::RetryAfter(200 * MS)
        );
        assert_eq!(budget.after_failure(now, &b, 0.5), Decision::GiveUp);
        assert_eq!(budget.attempts(), 3);
        let mut short = RetryBudget::new(10, now + 150 * MS);
        assert_eq!(
            short.after_failure(now, &b, 0.5),
            Decision::RetryAfter(100 * MS)
        );
        assert_eq!(
            short.after_failure(now + 100 * MS, &b, 0.5),
            Decision::GiveUp
        );
    }

    #[test]
    fn jitter_samples_are_in_the_unit_interval_and_vary() {
        let mut j = Jitter::new(42);
        let samples: Vec<f64> = (0..1000).map(|_| j.next_unit()).collect();
        assert!(samples.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        assert!((0.4..0.6).contains(&mean), "{mean}");
    }

    proptest! {
        /// Every delay is within ±20% of the capped exponential term and never above max.
        #[test]
        fn delays_are_bounded(
            initial_ms in 1u64..10_000,
            max_ms in 1u64..100_000,
            attempt in 0u32..200,
            r in 0.0f64..1.0,
        ) {
            let b = Backoff::new(Duration::from_millis(initial_ms), Duration::from_millis(max_ms));
            let max = Duration::from_millis(max_ms.max(initial_ms));
            let d = b.delay(attempt, r);
            prop_assert!(d <= max);
            let term = (initial_ms as f64 * 2f64.powi(attempt.min(40) as i32)).min(max.as_millis() as f64);
            let ms = d.as_secs_f64() * 1000.0;
            prop_assert!(ms >= term * (1.0 - JITTER) - 0.001, "{ms} < {term}");
            prop_assert!(ms <= term * (1.0 + JITTER) + 0.001, "{ms} > {term}");
        }

        /// A budget never allows more than `retries` retries, and never a wake-up past the
        /// deadline.
        #[test]
        fn budget_respects_retries_and_deadline(
            retries in 0u32..20,
            deadline_ms in 0u64..20_000,
            samples in proptest::collection::vec(0.0f64..1.0, 1..40),
        ) {
            let start = Instant::now();
            let b = Backoff::new(100 * MS, 1000 * MS);
            let mut budget = RetryBudget::new(retries, start + Duration::from_millis(deadline_ms));
            let mut now = start;
            let mut retried = 0;
            for r in samples {
                match budget.after_failure(now, &b, r) {
                    Decision::RetryAfter(d) => {
                        now += d;
                        retried += 1;
                        prop_assert!(now < budget.deadline());
                    }
                    Decision::GiveUp => break,
                }
            }
            prop_assert!(retried <= retries);
        }
    }
}
