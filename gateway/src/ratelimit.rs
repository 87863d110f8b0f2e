//! Token-bucket rate limits (global and per model) on `governor`.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};

use crate::config::RateLimitSpec;

/// Default for the global bucket (`PROXY_RATE_LIMIT_GLOBAL`).
pub const DEFAULT_GLOBAL_RPS: f64 = 1000.0;
/// Default for the global burst (`PROXY_RATE_LIMIT_GLOBAL_BURST`).
pub const DEFAULT_GLOBAL_BURST: u32 = 200;
/// Default per-model rate (`PROXY_RATE_LIMIT_PER_MODEL`).
pub const DEFAULT_PER_MODEL_RPS: f64 = 100.0;
/// Default per-model burst (`PROXY_RATE_LIMIT_BURST`).
pub const DEFAULT_PER_MODEL_BURST: u32 = 50;

/// Rate-limit settings from flags and environment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitSettings {
    /// Whether limits apply at all.
    pub enabled: bool,
    /// Bucket shared by every request; none when rate ≤ 0.
    pub global: Option<RateLimitSpec>,
    /// Default bucket of each model; a model's file entry overrides it.
    pub per_model: Option<RateLimitSpec>,
}

impl LimitSettings {
    /// Settings from rates and bursts; a rate ≤ 0 disables that bucket.
    pub fn new(enabled: bool, global: (f64, u32), per_model: (f64, u32)) -> Self {
        let spec = |(rps, burst): (f64, u32)| {
            (rps > 0.0).then_some(RateLimitSpec {
                requests_per_second: rps,
                burst: Some(burst),
            })
        };
        Self {
            enabled,
            global: spec(global),
            per_model: spec(per_model),
        }
    }
}

/// One token bucket.
#[derive(Debug)]
pub struct RouteLimiter {
    spec: RateLimitSpec,
    limiter: DefaultDirectRateLimiter,
}

impl RouteLimiter {
    /// A bucket for `spec`; `None` when the rate is not positive.
    pub fn new(spec: RateLimitSpec) -> Option<Self> {
        if !(spec.requests_per_second.is_finite() && spec.requests_per_second > 0.0) {
            return None;
        }
        let period = Duration::from_secs_f64(1.0 / spec.requests_per_second);
        let burst = spec
            .burst
            .unwrap_or(spec.requests_per_second.ceil() as u32)
            .max(1);
        let quota = Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst)?);
        Some(Self {
            spec,
            limiter: DefaultDirectRateLimiter::direct(quota),
        })
    }

    /// The settings this bucket was built from.
    pub fn spec(&self) -> RateLimitSpec {
        self.spec
    }

    /// Takes one token, or says how many whole seconds to wait (≥ 1).
    pub fn check(&self) -> Result<(), u64> {
        self.limiter.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            wait.as_secs_f64().ceil().max(1.0) as u64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_reject_with_retry_after() {
        let l = RouteLimiter::new(RateLimitSpec {
            requests_per_second: 0.5,
            burst: Some(2),
        })
        .unwrap();
        assert!(l.check().is_ok());
        assert!(l.check().is_ok());
        let wait = l.check().unwrap_err();
        assert!((1..=2).contains(&wait), "{wait}");
    }

    #[test]
    fn non_positive_rate_disables() {
        let s = LimitSettings::new(true, (0.0, 1), (5.0, 1));
        assert!(s.global.is_none());
        assert_eq!(s.per_model.unwrap().requests_per_second, 5.0);
    }
}
