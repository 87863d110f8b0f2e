//! Leader choice for models sharing one GPU (`spec.gpu.shared`, v1alpha2).
//!
//! One member of a group runs at a time. Demand from a stopped member takes
//! the GPU over only when the priority gate allows it and the swap cooldown
//! has passed, so alternating demand cannot make the group thrash.

use std::cmp::Ordering;
use std::time::Duration;

use super::{since, Timestamp};

/// How recent demand must be to count (`sharedDemandWindow`).
pub const DEFAULT_DEMAND_WINDOW: Duration = Duration::from_secs(120);
/// Protection of a new leader after a swap (`sharedSwapCooldown`).
pub const DEFAULT_SWAP_COOLDOWN: Duration = Duration::from_secs(300);
/// Queued requests needed before demand counts.
pub const DEFAULT_QUEUE_THRESHOLD: u32 = 1;

/// Tunables of a shared group; defaults are the `DEFAULT_*` constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedGroupPolicy {
    /// Demand older than this is ignored.
    pub demand_window: Duration,
    /// No swap within this time of the previous one.
    pub swap_cooldown: Duration,
    /// Minimum queue depth for demand to count.
    pub queue_threshold: u32,
}

impl Default for SharedGroupPolicy {
    fn default() -> Self {
        Self {
            demand_window: DEFAULT_DEMAND_WINDOW,
            swap_cooldown: DEFAULT_SWAP_COOLDOWN,
            queue_threshold: DEFAULT_QUEUE_THRESHOLD,
        }
    }
}

/// Requests waiting for a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Requests queued now.
    pub depth: u32,
    /// When the latest of them arrived.
    pub at: Timestamp,
}

/// What the policy needs to know about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedMember {
    /// Model name (unique in the group).
    pub name: String,
    /// Higher wins.
    pub priority: i32,
    /// Whether the member failed and cannot run.
    pub failed: bool,
    /// Last request served.
    pub last_active: Option<Timestamp>,
    /// Requests waiting for it.
    pub demand: Option<Demand>,
}

/// Group state carried between decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedGroupState {
    /// The member allowed to run.
    pub leader: Option<String>,
    /// When the leader last changed.
    pub last_swap: Option<Timestamp>,
}

/// Why the leader is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderReason {
    /// No member is wanted.
    NoDemand,
    /// The group had no leader and a member has demand.
    FirstDemand,
    /// The current leader keeps the GPU.
    KeepLeader,
    /// A swap would come too soon after the previous one.
    Cooldown,
    /// A member with demand took over under the priority gate.
    DemandPreemption,
    /// The previous leader failed; the best member with demand takes over.
    LeaderFailed,
}

/// The policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderDecision {
    /// Who may run.
    pub leader: Option<String>,
    /// Why.
    pub reason: LeaderReason,
}

impl LeaderDecision {
    /// Whether following this decision changes the leader.
    pub fn is_swap(&self, state: &SharedGroupState) -> bool {
        self.leader.is_some() && self.leader != state.leader
    }
}

/// Orders members: higher priority, then more recent activity or demand,
/// then the smaller name (so decisions are deterministic).
fn better(a: &SharedMember, b: &SharedMember) -> Ordering {
    let recent = |m: &SharedMember| m.demand.map(|d| d.at).max(m.last_active);
    b.priority
        .cmp(&a.priority)
        .then_with(|| recent(b).cmp(&recent(a)))
        .then_with(|| a.name.cmp(&b.name))
}

/// Chooses the member that may hold the GPU now.
pub fn choose_leader(
    members: &[SharedMember],
    state: &SharedGroupState,
    policy: &SharedGroupPolicy,
    now: Timestamp,
) -> LeaderDecision {
    let live_demand = |m: &SharedMember| {
        !m.failed
            && m.demand.is_some_and(|d| {
                d.depth >= policy.queue_threshold.max(1) && since(now, d.at) <= policy.demand_window
            })
    };
    let current = state
        .leader
        .as_deref()
        .and_then(|name| members.iter().find(|m| m.name == name));
    let best_with_demand = |filter: &dyn Fn(&SharedMember) -> bool| {
        members
            .iter()
            .filter(|m| live_demand(m) && filter(m))
            .min_by(|a, b| better(a, b))
            .map(|m| m.name.clone())
    };

    let Some(leader) = current.filter(|c| !c.failed) else {
        let reason = if current.is_some() {
            LeaderReason::LeaderFailed
        } else {
            LeaderReason::FirstDemand
        };
        return match best_with_demand(&|_| true) {
            Some(name) => LeaderDecision {
                leader: Some(name),
                reason,
            },
            None => LeaderDecision {
                leader: None,
                reason: LeaderReason::NoDemand,
            },
        };
    };

    let keep = |reason| LeaderDecision {
        leader: Some(leader.name.clone()),
        reason,
    };
    let leader_idle = leader
        .last_active
        .is_none_or(|t| since(now, t) > policy.demand_window)
        && !live_demand(leader);
    let challenger = best_with_demand(&|m| {
        m.name != leader.name
            && (m.priority > leader.priority || (leader_idle && m.priority >= leader.priority))
    });
    match challenger {
        None => keep(LeaderReason::KeepLeader),
        Some(_)
            if state
                .last_swap
                .is_some_and(|t| since(now, t) < policy.swap_cooldown) =>
        {
            keep(LeaderReason::Cooldown)
        }
        Some(name) => LeaderDecision {
            leader: Some(name),
            reason: LeaderReason::DemandPreemption,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> Timestamp {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn member(name: &str, priority: i32) -> SharedMember {
        SharedMember {
            name: name.into(),
            priority,
            failed: false,
            last_active: None,
            demand: None,
        }
    }

    fn wants(mut m: SharedMember, depth: u32, when: u64) -> SharedMember {
        m.demand = Some(Demand {
            depth,
            at: at(when),
        });
        m
    }

    fn active(mut m: SharedMember, when: u64) -> SharedMember {
        m.last_active = Some(at(when));
        m
    }

    fn led_by(name: &str, swapped: u64) -> SharedGroupState {
        SharedGroupState {
            leader: Some(name.into()),
            last_swap: Some(at(swapped)),
        }
    }

    #[test]
    fn spec_defaults() {
        let p = SharedGroupPolicy::default();
        assert_eq!(p.demand_window, Duration::from_secs(120));
        assert_eq!(p.swap_cooldown, Duration::from_secs(300));
        assert_eq!(p.queue_threshold, 1);
    }

    #[test]
    fn first_demand_takes_an_empty_group() {
        let p = SharedGroupPolicy::default();
        let ms = [member("a", 0), wants(member("b", 0), 1, 10)];
        let d = choose_leader(&ms, &SharedGroupState::default(), &p, at(10));
        assert_eq!(d.leader.as_deref(), Some("b"));
        assert_eq!(d.reason, LeaderReason::FirstDemand);
        let none = choose_leader(&[member("a", 0)], &SharedGroupState::default(), &p, at(10));
        assert_eq!((none.leader, none.reason), (None, LeaderReason::NoDemand));
    }

    #[test]
    fn swap_blocked_by_cooldown_then_allowed() {
        let p = SharedGroupPolicy::default();
        let ms = [active(member("a", 0), 0), wants(member("b", 0), 1, 299)];
        let state = led_by("a", 0);
        // Leader idle since t=0 (> demand window at t=299) but the swap at t=0 protects it for 300 s.
        let d = choose_leader(&ms, &state, &p, at(299));
        assert_eq!(
            (d.leader.as_deref(), d.reason),
            (Some("a"), LeaderReason::Cooldown)
        );
        let ms = [active(member("a", 0), 0), wants(member("b", 0), 1, 300)];
        let d = choose_leader(&ms, &state, &p, at(300));
        assert_eq!(
            (d.leader.as_deref(), d.reason),
            (Some("b"), LeaderReason::DemandPreemption)
        );
        assert!(d.is_swap(&state));
    }

    #[test]
    fn priority_gate() {
        let p = SharedGroupPolicy::default();
        let state = led_by("high", 0);
        // Busy leader of higher priority: a lower one never preempts.
        let ms = [
            active(member("high", 5), 999),
            wants(member("low", 1), 4, 999),
        ];
        assert_eq!(
            choose_leader(&ms, &state, &p, at(1000)).leader.as_deref(),
            Some("high")
        );
        // Even when the leader is idle, lower priority cannot take over.
        let ms = [
            active(member("high", 5), 0),
            wants(member("low", 1), 4, 999),
        ];
        assert_eq!(
            choose_leader(&ms, &state, &p, at(1000)).leader.as_deref(),
            Some("high")
        );
        // Higher priority preempts a busy leader.
        let state = led_by("low", 0);
        let ms = [
            active(member("low", 1), 999),
            wants(member("high", 5), 1, 999),
        ];
        assert_eq!(
            choose_leader(&ms, &state, &p, at(1000)).leader.as_deref(),
            Some("high")
        );
        // Equal priority preempts only an idle leader.
        let ms = [active(member("a", 1), 950), wants(member("b", 1), 1, 999)];
        let state = led_by("a", 0);
        assert_eq!(
            choose_leader(&ms, &state, &p, at(1000)).leader.as_deref(),
            Some("a")
        );
        let ms = [active(member("a", 1), 800), wants(member("b", 1), 1, 999)];
        assert_eq!(
            choose_leader(&ms, &state, &p, at(1000)).leader.as_deref(),
            Some("b")
        );
    }

    #[test]
    fn demand_window_and_threshold() {
        let p = SharedGroupPolicy {
            queue_threshold: 2,
            ..Default::default()
        };
        let state = SharedGroupState::default();
        // Stale demand (older than 2 min) does not count.
        let ms = [wants(member("a", 0), 5, 0)];
        assert_eq!(choose_leader(&ms, &state, &p, at(121)).leader, None);
        assert_eq!(
            choose_leader(&ms, &state, &p, at(120)).leader.as_deref(),
            Some("a")
        );
        // Below the queue threshold.
        let ms = [wants(member("a", 0), 1, 0)];
        assert_eq!(choose_leader(&ms, &state, &p, at(1)).leader, None);
    }

    #[test]
    fn failed_leader_is_replaced_and_ties_are_deterministic() {
        let p = SharedGroupPolicy::default();
        let mut a = active(member("a", 9), 999);
        a.failed = true;
        let ms = [
            a,
            wants(member("c", 1), 1, 990),
            wants(member("b", 1), 1, 990),
        ];
        let d = choose_leader(&ms, &led_by("a", 999), &p, at(1000));
        assert_eq!(
            (d.leader.as_deref(), d.reason),
            (Some("b"), LeaderReason::LeaderFailed)
        );
    }

    #[test]
    fn alternating_demand_swaps_at_most_once_per_cooldown() {
        let p = SharedGroupPolicy::default();
        let mut state = SharedGroupState::default();
        let mut swaps = 0;
        // Every 10 s the other model asks; both idle otherwise.
        for step in 0..120u64 {
            let t = step * 10;
            let (asker, other) = if step % 2 == 0 {
                ("a", "b")
            } else {
                ("b", "a")
            };
            let ms = [wants(member(asker, 0), 1, t), member(other, 0)];
            let d = choose_leader(&ms, &state, &p, at(t));
            if d.is_swap(&state) {
                swaps += 1;
                state = SharedGroupState {
                    leader: d.leader,
                    last_swap: Some(at(t)),
                };
            }
        }
        // 1200 s of alternating demand: the first activation plus at most one swap per 300 s.
        assert!(swaps <= 1 + 1200 / 300, "{swaps} swaps");
        assert!(swaps >= 2);
    }
}
