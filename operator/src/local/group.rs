//! A shared-GPU group as the supervisor keeps it: its members, the policy
//! state carried between decisions, and the swap history. The decision
//! itself is [`choose_leader`]; this module only applies and records it.

use std::collections::VecDeque;

use crate::policy::shared_gpu::{choose_leader, SharedGroupPolicy, SharedGroupState, SharedMember};
use crate::policy::Timestamp;

use super::report::{GroupReport, SwapRecord, SWAP_HISTORY};

/// One group of models of which at most one runs at a time.
#[derive(Debug, Clone)]
pub(crate) struct SharedGroup {
    /// Group name.
    pub name: String,
    /// Indices of the member models, in spec order.
    pub members: Vec<usize>,
    /// Leader and time of the last swap.
    pub state: SharedGroupState,
    history: VecDeque<SwapRecord>,
}

impl SharedGroup {
    /// A group without leader or history.
    pub fn new(name: String) -> Self {
        Self {
            name,
            members: Vec::new(),
            state: SharedGroupState::default(),
            history: VecDeque::new(),
        }
    }

    /// Asks the policy who may hold the GPU now and, when that changes the
    /// leader, records the swap and returns it.
    pub fn decide(
        &mut self,
        members: &[SharedMember],
        policy: &SharedGroupPolicy,
        now: Timestamp,
    ) -> Option<SwapRecord> {
        let decision = choose_leader(members, &self.state, policy, now);
        if !decision.is_swap(&self.state) {
            return None;
        }
        let to = decision.leader?;
        let record = SwapRecord {
            at: now,
            from: self.state.leader.take(),
            to: to.clone(),
            reason: decision.reason,
        };
        self.state = SharedGroupState {
            leader: Some(to),
            last_swap: Some(now),
        };
        if self.history.len() == SWAP_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(record.clone());
        Some(record)
    }

    /// Whether `name` is the current leader.
    pub fn is_leader(&self, name: &str) -> bool {
        self.state.leader.as_deref() == Some(name)
    }

    /// The report entry, given the member names.
    pub fn report(&self, member_names: Vec<String>) -> GroupReport {
        GroupReport {
            name: self.name.clone(),
            members: member_names,
            leader: self.state.leader.clone(),
            last_swap: self.state.last_swap,
            swaps: self.history.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::shared_gpu::{Demand, LeaderReason};
    use std::time::{Duration, UNIX_EPOCH};

    fn member(name: &str, priority: i32, wants_at: Option<u64>) -> SharedMember {
        SharedMember {
            name: name.into(),
            priority,
            failed: false,
            last_active: None,
            demand: wants_at.map(|s| Demand {
                depth: 1,
                at: UNIX_EPOCH + Duration::from_secs(s),
            }),
        }
    }

    #[test]
    fn records_swaps_only_when_the_leader_changes() {
        let policy = SharedGroupPolicy {
            swap_cooldown: Duration::ZERO,
            ..Default::default()
        };
        let mut group = SharedGroup::new("g".into());
        let t = |s| UNIX_EPOCH + Duration::from_secs(s);
        assert!(group
            .decide(&[member("a", 0, None)], &policy, t(1))
            .is_none());
        let first = group
            .decide(&[member("a", 0, Some(1))], &policy, t(1))
            .unwrap();
        assert_eq!((first.from, first.to.as_str()), (None, "a"));
        assert_eq!(first.reason, LeaderReason::FirstDemand);
        assert!(group
            .decide(&[member("a", 0, Some(2))], &policy, t(2))
            .is_none());
        let swap = group
            .decide(
                &[member("a", 0, None), member("b", 5, Some(3))],
                &policy,
                t(3),
            )
            .unwrap();
        assert_eq!((swap.from.as_deref(), swap.to.as_str()), (Some("a"), "b"));
        assert!(group.is_leader("b"));
        let report = group.report(vec!["a".into(), "b".into()]);
        assert_eq!(report.swaps.len(), 2);
        assert_eq!(report.last_swap, Some(t(3)));
        assert_eq!(report.swaps[1].reason_str(), "DemandPreemption");
    }
}
