//! Whether an endpoint is in rotation.
//!
//! Passive outlier ejection, as Envoy's outlier detection and nginx's
//! `max_fails` do it: consecutive connection failures (refused, timed out,
//! closed before any answer) take an endpoint out for an interval that
//! doubles with each ejection in a row, up to a maximum. When the interval
//! is over, exactly one request is let through as a trial: its success puts
//! the endpoint back, its failure ejects it again for longer. Active health
//! checks, where a model has them, add a verdict of their own.
//!
//! Selection never strands a model: when every endpoint is out, it picks
//! among all of them as if none were (see `EndpointSet::select`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// When endpoints are ejected and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlierPolicy {
    /// Consecutive connection failures that eject an endpoint (0: never).
    pub consecutive_failures: u32,
    /// The first ejection's length; each ejection in a row doubles it.
    pub base_ejection: Duration,
    /// The longest ejection.
    pub max_ejection: Duration,
}

impl Default for OutlierPolicy {
    fn default() -> Self {
        Self {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
        }
    }
}

impl OutlierPolicy {
    /// The length of ejection number `n` in a row (1 for the first).
    pub fn ejection(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.base_ejection
            .saturating_mul(factor)
            .min(self.max_ejection)
    }
}

/// Milliseconds since the first call, a clock cheap to store in an atomic.
pub fn now_millis() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    // Never 0: 0 marks "not ejected".
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
}

/// Where an endpoint stands for the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// In rotation.
    In,
    /// Out: ejected, its trial under way, or failing its health checks.
    Out,
    /// Its ejection is over: one request may try it.
    TrialDue,
}

/// What a recorded outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing worth a log line.
    None,
    /// The endpoint was taken out for this long, after this many failures
    /// in a row (the trial's failure counts as one).
    Ejected {
        /// Length of the ejection.
        interval: Duration,
        /// Ejections in a row, this one included.
        ejections: u32,
    },
    /// A trial succeeded: the endpoint is back in rotation.
    Readmitted,
}

/// Health of one endpoint, kept across rebuilds of its endpoint set.
#[derive(Debug, Default)]
pub struct EndpointHealth {
    failures: AtomicU32,
    /// [`now_millis`] until which it is out; 0: not ejected.
    ejected_until: AtomicU64,
    ejections: AtomicU32,
    /// A trial request is under way.
    trial: AtomicBool,
    /// The active health check's verdict.
    failing_checks: AtomicBool,
}

impl EndpointHealth {
    /// Where the endpoint stands now. Costs one atomic load for an
    /// endpoint in rotation.
    pub fn standing(&self) -> Standing {
        let until = self.ejected_until.load(Ordering::Acquire);
        if self.failing_checks.load(Ordering::Relaxed) {
            return Standing::Out;
        }
        if until == 0 {
            return Standing::In;
        }
        if now_millis() < until || self.trial.load(Ordering::Acquire) {
            Standing::Out
        } else {
            Standing::TrialDue
        }
    }

    /// Takes the trial of an endpoint whose ejection is over; `false` when
    /// another request took it first.
    pub fn claim_trial(&self) -> bool {
        self.trial
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Gives a trial back without an outcome (the request ended before it
    /// learnt anything about the endpoint).
    pub fn release_trial(&self) {
        self.trial.store(false, Ordering::Release);
    }

    /// A connection to the endpoint failed. Failures of requests that were
    /// under way when it was ejected change nothing; a trial's failure
    /// ejects it again, for longer.
    pub fn record_failure(&self, policy: &OutlierPolicy, trial: bool) -> Change {
        if policy.consecutive_failures == 0 {
            return Change::None;
        }
        let ejected = self.ejected_until.load(Ordering::Acquire) != 0;
        if ejected && !trial {
            return Change::None;
        }
        if !ejected {
            let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
            if failures < policy.consecutive_failures {
                return Change::None;
            }
        }
        self.eject(policy)
    }

    fn eject(&self, policy: &OutlierPolicy) -> Change {
        let ejections = self.ejections.fetch_add(1, Ordering::AcqRel) + 1;
        let interval = policy.ejection(ejections);
        let until = now_millis().saturating_add(interval.as_millis() as u64);
        self.ejected_until.store(until, Ordering::Release);
        self.failures.store(0, Ordering::Release);
        self.trial.store(false, Ordering::Release);
        Change::Ejected {
            interval,
            ejections,
        }
    }

    /// The endpoint answered. A trial's success puts it back in rotation;
    /// any success ends a run of failures.
    pub fn record_success(&self, trial: bool) -> Change {
        self.failures.store(0, Ordering::Release);
        if trial && self.ejected_until.load(Ordering::Acquire) != 0 {
            self.ejected_until.store(0, Ordering::Release);
            self.ejections.store(0, Ordering::Release);
            self.trial.store(false, Ordering::Release);
            return Change::Readmitted;
        }
        Change::None
    }

    /// Records an active health check's verdict; `true` when it changed.
    pub fn set_failing_checks(&self, failing: bool) -> bool {
        self.failing_checks.swap(failing, Ordering::AcqRel) != failing
    }

    /// Whether the endpoint is out of rotation for any reason now.
    pub fn is_out(&self) -> bool {
        self.standing() != Standing::In
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(failures: u32) -> OutlierPolicy {
        OutlierPolicy {
            consecutive_failures: failures,
            base_ejection: Duration::from_millis(40),
            max_ejection: Duration::from_millis(100),
        }
    }

    #[test]
    fn consecutive_failures_eject_and_a_success_in_between_resets() {
        let p = policy(3);
        let h = EndpointHealth::default();
        assert_eq!(h.record_failure(&p, false), Change::None);
        assert_eq!(h.record_failure(&p, false), Change::None);
        assert_eq!(h.record_success(false), Change::None);
        assert_eq!(h.record_failure(&p, false), Change::None);
        assert_eq!(h.record_failure(&p, false), Change::None);
        assert_eq!(h.standing(), Standing::In);
        let change = h.record_failure(&p, false);
        assert_eq!(
            change,
            Change::Ejected {
                interval: Duration::from_millis(40),
                ejections: 1
            }
        );
        assert_eq!(h.standing(), Standing::Out);
        // Failures of requests sent before the ejection change nothing.
        assert_eq!(h.record_failure(&p, false), Change::None);
    }

    #[test]
    fn one_trial_after_the_interval_decides() {
        let p = policy(1);
        let h = EndpointHealth::default();
        h.record_failure(&p, false);
        assert_eq!(h.standing(), Standing::Out);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.standing(), Standing::TrialDue);
        assert!(h.claim_trial());
        assert!(!h.claim_trial(), "one trial at a time");
        assert_eq!(h.standing(), Standing::Out, "out while its trial runs");
        // The trial fails: out again, for twice as long.
        assert_eq!(
            h.record_failure(&p, true),
            Change::Ejected {
                interval: Duration::from_millis(80),
                ejections: 2
            }
        );
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.standing(), Standing::Out, "the second interval is longer");
        std::thread::sleep(Duration::from_millis(40));
        assert!(h.claim_trial());
        assert_eq!(h.record_success(true), Change::Readmitted);
        assert_eq!(h.standing(), Standing::In);
        // The run of ejections starts over.
        assert_eq!(
            h.record_failure(&p, false),
            Change::Ejected {
                interval: Duration::from_millis(40),
                ejections: 1
            }
        );
    }

    #[test]
    fn a_released_trial_can_be_taken_again() {
        let p = policy(1);
        let h = EndpointHealth::default();
        h.record_failure(&p, false);
        std::thread::sleep(Duration::from_millis(50));
        assert!(h.claim_trial());
        h.release_trial();
        assert_eq!(h.standing(), Standing::TrialDue);
    }

    #[test]
    fn ejections_grow_to_the_maximum_and_zero_disables() {
        let p = OutlierPolicy::default();
        assert_eq!(p.ejection(1), Duration::from_secs(10));
        assert_eq!(p.ejection(2), Duration::from_secs(20));
        assert_eq!(p.ejection(6), Duration::from_secs(300));
        assert_eq!(p.ejection(200), Duration::from_secs(300));
        let h = EndpointHealth::default();
        for _ in 0..10 {
            assert_eq!(h.record_failure(&policy(0), false), Change::None);
        }
        assert_eq!(h.standing(), Standing::In);
    }

    #[test]
    fn failing_health_checks_take_it_out_until_they_pass() {
        let h = EndpointHealth::default();
        assert!(h.set_failing_checks(true));
        assert!(!h.set_failing_checks(true));
        assert_eq!(h.standing(), Standing::Out);
        assert!(h.set_failing_checks(false));
        assert_eq!(h.standing(), Standing::In);
    }
}
