//! Active-model choice for a `GPUGroup` (v1alpha1) with anti-thrashing.

use std::cmp::Ordering;
use std::time::Duration;

use super::{since, Timestamp};

/// Spec default `minimumRunDurationSeconds`.
pub const DEFAULT_MINIMUM_RUN_DURATION: Duration = Duration::from_secs(30);
/// Spec default `cooldownAfterPreemptionSeconds`.
pub const DEFAULT_COOLDOWN_AFTER_PREEMPTION: Duration = Duration::from_secs(60);
/// Spec default `requestQueueThreshold`.
pub const DEFAULT_REQUEST_QUEUE_THRESHOLD: u32 = 3;
/// Spec default `hysteresisWindowSeconds`.
pub const DEFAULT_HYSTERESIS_WINDOW: Duration = Duration::from_secs(10);
/// Idle time after which the active model no longer holds the group.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Requeue interval while a swap is blocked.
pub const BLOCKED_REQUEUE: Duration = Duration::from_secs(10);

/// Anti-thrashing settings of a group; defaults are the `DEFAULT_*` constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuGroupPolicy {
    /// Whether the anti-thrashing rules apply.
    pub anti_thrashing: bool,
    /// A new active model runs at least this long.
    pub minimum_run_duration: Duration,
    /// A preempted model waits this long before it may return.
    pub cooldown_after_preemption: Duration,
    /// Queue depth a challenger needs to take over.
    pub request_queue_threshold: u32,
    /// How long a challenger must have been queued.
    pub hysteresis_window: Duration,
    /// Without demand, the active model keeps the group this long after its last request.
    pub idle_timeout: Duration,
}

impl Default for GpuGroupPolicy {
    fn default() -> Self {
        Self {
            anti_thrashing: true,
            minimum_run_duration: DEFAULT_MINIMUM_RUN_DURATION,
            cooldown_after_preemption: DEFAULT_COOLDOWN_AFTER_PREEMPTION,
            request_queue_threshold: DEFAULT_REQUEST_QUEUE_THRESHOLD,
            hysteresis_window: DEFAULT_HYSTERESIS_WINDOW,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// What the policy needs to know about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Model name.
    pub name: String,
    /// Higher wins.
    pub priority: i32,
    /// Requests queued for it (`flexinfer.ai/queue.<model>`).
    pub queued: u32,
    /// Since when (`flexinfer.ai/queue-since.<model>`).
    pub queued_since: Option<Timestamp>,
    /// Last request served.
    pub last_active: Option<Timestamp>,
    /// When it was last preempted.
    pub preempted_at: Option<Timestamp>,
}

/// The group's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupDecision {
    /// Keep (or start) this model active; `None` = nothing active.
    Keep {
        /// Active model.
        model: Option<String>,
        /// Why.
        reason: &'static str,
    },
    /// Swap to another model.
    Swap {
        /// New active model.
        to: String,
        /// Why.
        reason: String,
    },
    /// A swap is wanted but anti-thrashing blocks it for now.
    Blocked {
        /// Model that wants the group.
        wanted: String,
        /// Which rule blocked it.
        reason: &'static str,
        /// When to look again.
        requeue_after: Duration,
    },
}

fn order(a: &GroupMember, b: &GroupMember) -> Ordering {
    (b.queued > 0)
        .cmp(&(a.queued > 0))
        .then_with(|| b.priority.cmp(&a.priority))
        .then_with(|| a.queued_since.cmp(&b.queued_since))
        .then_with(|| a.name.cmp(&b.name))
}

/// Decides which member should be active.
///
/// With no active model, any demand activates the best member at once (the
/// queue threshold protects a running model from preemption; it does not keep
/// an empty group empty). An active model that is idle (nothing queued and
/// no activity for the hysteresis window) is not protected by the threshold
/// either: one request waiting that long takes the group.
pub fn decide(
    members: &[GroupMember],
    active: Option<&str>,
    last_swap: Option<Timestamp>,
    policy: &GpuGroupPolicy,
    now: Timestamp,
) -> GroupDecision {
    let current = active.and_then(|n| members.iter().find(|m| m.name == n));
    let Some(winner) = members
        .iter()
        .filter(|m| m.queued > 0)
        .min_by(|a, b| order(a, b))
    else {
        return match current {
            Some(c)
                if c.last_active
                    .is_some_and(|t| since(now, t) < policy.idle_timeout) =>
            {
                GroupDecision::Keep {
                    model: Some(c.name.clone()),
                    reason: "still active",
                }
            }
            _ => GroupDecision::Keep {
                model: None,
                reason: "no demand",
            },
        };
    };
    let Some(current) = current else {
        return GroupDecision::Swap {
            to: winner.name.clone(),
            reason: format!(
                "demand: queue={}, priority={}",
                winner.queued, winner.priority
            ),
        };
    };
    if winner.name == current.name {
        return GroupDecision::Keep {
            model: Some(current.name.clone()),
            reason: "active model has demand",
        };
    }
    if policy.anti_thrashing {
        // The threshold protects a model in use; one that is idle (nothing
        // queued, no activity for the hysteresis window) yields to a single
        // waiting request, which would otherwise wait for ever.
        let current_idle = current.queued == 0
            && current
                .last_active
                .is_none_or(|t| since(now, t) >= policy.hysteresis_window);
        if winner.queued < policy.request_queue_threshold && !current_idle {
            return GroupDecision::Keep {
                model: Some(current.name.clone()),
                reason: "queue threshold not met",
            };
        }
        if winner
            .queued_since
            .is_none_or(|t| since(now, t) < policy.hysteresis_window)
        {
            return GroupDecision::Keep {
                model: Some(current.name.clone()),
                reason: "hysteresis window",
            };
        }
        if last_swap.is_some_and(|t| since(now, t) < policy.minimum_run_duration) {
            return GroupDecision::Blocked {
                wanted: winner.name.clone(),
                reason: "minimum run duration",
                requeue_after: BLOCKED_REQUEUE,
            };
        }
        if winner
            .preempted_at
            .is_some_and(|t| since(now, t) < policy.cooldown_after_preemption)
        {
            return GroupDecision::Blocked {
                wanted: winner.name.clone(),
                reason: "cooldown after preemption",
                requeue_after: BLOCKED_REQUEUE,
            };
        }
    }
    GroupDecision::Swap {
        to: winner.name.clone(),
        reason: format!(
            "demand: queue={}, priority={}",
            winner.queued, winner.priority
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> Timestamp {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn m(name: &str, priority: i32, queued: u32, since_s: Option<u64>) -> GroupMember {
        GroupMember {
            name: name.into(),
            priority,
            queued,
            queued_since: since_s.map(at),
            last_active: None,
            preempted_at: None,
        }
    }

    fn swapped_to(d: &GroupDecision) -> Option<&str> {
        match d {
            GroupDecision::Swap { to, .. } => Some(to),
            _ => None,
        }
    }

    #[test]
    fn spec_defaults() {
        let p = GpuGroupPolicy::default();
        assert_eq!(p.minimum_run_duration, Duration::from_secs(30));
        assert_eq!(p.cooldown_after_preemption, Duration::from_secs(60));
        assert_eq!(p.request_queue_threshold, 3);
        assert_eq!(p.hysteresis_window, Duration::from_secs(10));
    }

    #[test]
    fn empty_group_activates_on_first_demand() {
        let p = GpuGroupPolicy::default();
        let d = decide(&[m("a", 0, 1, Some(0))], None, None, &p, at(0));
        assert_eq!(swapped_to(&d), Some("a"));
    }

    #[test]
    fn threshold_hysteresis_min_run_and_cooldown() {
        let p = GpuGroupPolicy::default();
        let mut cur = m("a", 0, 0, None);
        cur.last_active = Some(at(100));
        // Below the queue threshold.
        let ms = [cur.clone(), m("b", 0, 2, Some(0))];
        assert!(matches!(
            decide(&ms, Some("a"), None, &p, at(100)),
            GroupDecision::Keep {
                reason: "queue threshold not met",
                ..
            }
        ));
        // Queued for less than the hysteresis window.
        let ms = [cur.clone(), m("b", 0, 3, Some(95))];
        assert!(matches!(
            decide(&ms, Some("a"), None, &p, at(100)),
            GroupDecision::Keep {
                reason: "hysteresis window",
                ..
            }
        ));
        // Minimum run duration since the last swap.
        let ms = [cur.clone(), m("b", 0, 3, Some(80))];
        assert!(matches!(
            decide(&ms, Some("a"), Some(at(75)), &p, at(100)),
            GroupDecision::Blocked {
                reason: "minimum run duration",
                ..
            }
        ));
        assert_eq!(
            swapped_to(&decide(&ms, Some("a"), Some(at(70)), &p, at(100))),
            Some("b")
        );
        // Cooldown after the challenger was preempted.
        let mut b = m("b", 0, 3, Some(80));
        b.preempted_at = Some(at(50));
        let ms = [cur.clone(), b];
        assert!(matches!(
            decide(&ms, Some("a"), None, &p, at(100)),
            GroupDecision::Blocked {
                reason: "cooldown after preemption",
                ..
            }
        ));
        assert_eq!(
            swapped_to(&decide(&ms, Some("a"), None, &p, at(110))),
            Some("b")
        );
    }

    #[test]
    fn ordering_prefers_queue_then_priority_then_age() {
        let p = GpuGroupPolicy {
            anti_thrashing: false,
            ..Default::default()
        };
        let ms = [
            m("a", 9, 0, None),
            m("b", 1, 1, Some(5)),
            m("c", 1, 1, Some(1)),
            m("d", 2, 1, Some(9)),
        ];
        assert_eq!(swapped_to(&decide(&ms, None, None, &p, at(10))), Some("d"));
        let ms = [m("b", 1, 1, Some(5)), m("c", 1, 1, Some(1))];
        assert_eq!(swapped_to(&decide(&ms, None, None, &p, at(10))), Some("c"));
    }

    #[test]
    fn no_demand_keeps_recent_model_until_idle() {
        let p = GpuGroupPolicy::default();
        let mut a = m("a", 0, 0, None);
        a.last_active = Some(at(0));
        let ms = [a];
        assert!(matches!(
            decide(&ms, Some("a"), None, &p, at(299)),
            GroupDecision::Keep { model: Some(_), .. }
        ));
        assert!(matches!(
            decide(&ms, Some("a"), None, &p, at(300)),
            GroupDecision::Keep { model: None, .. }
        ));
    }

    #[test]
    fn an_idle_active_model_yields_to_one_waiting_request() {
        let policy = GpuGroupPolicy::default();
        let mut active = m("a", 0, 0, None);
        let challenger = m("b", 0, 1, Some(0));
        let now = at(11);
        // Active 2 s ago: the threshold (3) protects it.
        active.last_active = Some(at(9));
        let busy = decide(
            &[active.clone(), challenger.clone()],
            Some("a"),
            None,
            &policy,
            now,
        );
        assert_eq!(
            busy,
            GroupDecision::Keep {
                model: Some("a".into()),
                reason: "queue threshold not met"
            }
        );
        // Idle for the hysteresis window: one request takes the group.
        active.last_active = Some(at(1));
        let idle = decide(
            &[active.clone(), challenger.clone()],
            Some("a"),
            None,
            &policy,
            now,
        );
        assert_eq!(swapped_to(&idle), Some("b"), "{idle:?}");
        // Still subject to the challenger's hysteresis window.
        let early = decide(
            &[active, m("b", 0, 1, Some(5))],
            Some("a"),
            None,
            &policy,
            now,
        );
        assert_eq!(swapped_to(&early), None, "{early:?}");
    }
}
