//! Retrying an activation whose scale-up failed (`--backoff-enabled`):
//! exponential backoff with jitter, while the queued requests wait (each
//! bounded by its own timeout).

use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec};

/// How a failed activation is tried again.
#[derive(Clone, Debug)]
pub struct ActivationBackoff {
    /// Retries after the first attempt (`--backoff-max-retries`).
    pub retries: u32,
    /// Wait before the first retry (`--backoff-initial-wait`).
    pub initial: Duration,
    /// Longest wait before the random factor (`--backoff-max-wait`).
    pub max: Duration,
    /// Retries made, by model.
    pub retried: IntCounterVec,
    /// Waits before them, by model.
    pub waited: HistogramVec,
}

impl ActivationBackoff {
    /// The wait before retry `attempt` (0 for the first):
    /// min(initial · 2^attempt, max) × `jitter`, the jitter held to
    /// [0.5, 1.5].
    pub fn wait(&self, attempt: u32, jitter: f64) -> Duration {
        let doubled = 1u32
            .checked_shl(attempt)
            .and_then(|factor| self.initial.checked_mul(factor))
            .unwrap_or(self.max);
        doubled.min(self.max).mul_f64(jitter.clamp(0.5, 1.5))
    }

    /// A random jitter factor in [0.5, 1.5].
    pub fn jitter() -> f64 {
        rand::random_range(0.5..=1.5)
    }

    /// Counts a retry of `model` after waiting `wait`.
    pub fn record(&self, model: &str, wait: Duration) {
        self.retried.with_label_values(&[model]).inc();
        self.waited
            .with_label_values(&[model])
            .observe(wait.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{HistogramOpts, Opts};

    fn backoff(retries: u32, initial_ms: u64, max_ms: u64) -> ActivationBackoff {
        ActivationBackoff {
            retries,
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
            retried: IntCounterVec::new(Opts::new("r", "r"), &["model"]).unwrap(),
            waited: HistogramVec::new(HistogramOpts::new("w", "w"), &["model"]).unwrap(),
        }
    }

    #[test]
    fn waits_double_up_to_the_cap_within_the_jitter_bounds() {
        let b = backoff(3, 5_000, 30_000);
        let secs = |attempt, jitter| b.wait(attempt, jitter).as_secs_f64();
        // min(5 s · 2^n, 30 s): 5, 10, 20, 30, 30.
        for (attempt, base) in [(0, 5.0), (1, 10.0), (2, 20.0), (3, 30.0), (9, 30.0)] {
            assert_eq!(secs(attempt, 1.0), base, "attempt {attempt}");
            assert_eq!(secs(attempt, 0.5), base * 0.5);
            assert_eq!(secs(attempt, 1.5), base * 1.5);
            // Out-of-range factors are held to the bounds.
            assert_eq!(secs(attempt, 0.0), base * 0.5);
            assert_eq!(secs(attempt, 7.0), base * 1.5);
        }
        // Huge attempts neither overflow nor pass the cap.
        assert_eq!(secs(200, 1.0), 30.0);
        for _ in 0..1000 {
            let jitter = ActivationBackoff::jitter();
            assert!((0.5..=1.5).contains(&jitter), "{jitter}");
        }
    }

    #[test]
    fn retries_are_counted_per_model() {
        let b = backoff(3, 100, 1_000);
        b.record("m", Duration::from_millis(150));
        b.record("m", Duration::from_millis(300));
        assert_eq!(b.retried.with_label_values(&["m"]).get(), 2);
        let waited = b.waited.with_label_values(&["m"]);
        assert_eq!(waited.get_sample_count(), 2);
        assert!((waited.get_sample_sum() - 0.45).abs() < 1e-9);
    }
}
