//! Desired replica count of a serverless model.

use std::time::Duration;

use super::{since, Timestamp};

/// Spec default for `spec.serverless.idleTimeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The scale-to-zero settings of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerlessPolicy {
    /// Whether the model scales with demand at all.
    pub enabled: bool,
    /// Time without requests after which the model scales to `min_replicas`.
    pub idle_timeout: Duration,
    /// Replicas kept while idle.
    pub min_replicas: u32,
    /// Replicas while active (and always, when not serverless).
    pub active_replicas: u32,
}

impl Default for ServerlessPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            min_replicas: 0,
            active_replicas: 1,
        }
    }
}

/// Replicas the model should run now.
///
/// A model that was active within `idle_timeout` (or has an activation
/// pending) runs `active_replicas`; one idle for `idle_timeout` or longer, or
/// never used, drops to `min_replicas`.
pub fn desired_replicas(
    policy: &ServerlessPolicy,
    last_active: Option<Timestamp>,
    activation_pending: bool,
    now: Timestamp,
) -> u32 {
    let active = policy.active_replicas.max(policy.min_replicas).max(1);
    if !policy.enabled || activation_pending {
        return active;
    }
    match last_active {
        Some(t) if since(now, t) < policy.idle_timeout => active,
        _ => policy.min_replicas,
    }
}

/// When an active model becomes idle, so a caller can schedule the next check.
pub fn idle_at(policy: &ServerlessPolicy, last_active: Option<Timestamp>) -> Option<Timestamp> {
    if !policy.enabled {
        return None;
    }
    last_active.map(|t| t + policy.idle_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> Timestamp {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    #[test]
    fn scales_down_exactly_at_the_idle_timeout() {
        let p = ServerlessPolicy::default();
        assert_eq!(p.idle_timeout, Duration::from_secs(300));
        assert_eq!(desired_replicas(&p, Some(at(0)), false, at(299)), 1);
        assert_eq!(desired_replicas(&p, Some(at(0)), false, at(300)), 0);
        assert_eq!(desired_replicas(&p, Some(at(0)), false, at(10_000)), 0);
        assert_eq!(idle_at(&p, Some(at(0))), Some(at(300)));
    }

    #[test]
    fn never_used_model_stays_at_min_and_activation_wakes_it() {
        let p = ServerlessPolicy {
            min_replicas: 0,
            ..Default::default()
        };
        assert_eq!(desired_replicas(&p, None, false, at(5)), 0);
        assert_eq!(desired_replicas(&p, None, true, at(5)), 1);
    }

    #[test]
    fn min_replicas_and_non_serverless() {
        let warm = ServerlessPolicy {
            min_replicas: 2,
            ..Default::default()
        };
        assert_eq!(desired_replicas(&warm, None, false, at(0)), 2);
        let fixed = ServerlessPolicy {
            enabled: false,
            active_replicas: 3,
            ..Default::default()
        };
        assert_eq!(desired_replicas(&fixed, None, false, at(0)), 3);
        assert_eq!(idle_at(&fixed, Some(at(0))), None);
    }

    #[test]
    fn clock_skew_counts_as_active() {
        let p = ServerlessPolicy::default();
        assert_eq!(desired_replicas(&p, Some(at(50)), false, at(0)), 1);
    }
}
