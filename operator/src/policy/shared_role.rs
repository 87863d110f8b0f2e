//! A Model's role in its shared GPU group, decided from the Model objects
//! of the group (their priorities, phases and `status.sharedGroup`) by the
//! leader choice of [`super::shared_gpu`]. Pure: the controller lists the
//! members and passes the time.

use std::time::{Duration, SystemTime};

use flexinfer_crds::v1alpha2::{
    Model, ModelPhase, SharedGroupState as MemberState, SharedGroupStatus,
};
use kube::{Resource, ResourceExt};

use super::shared_gpu::{choose_leader, Demand, SharedGroupPolicy, SharedGroupState, SharedMember};
use super::{from_time, to_time};

/// How soon to look again while a swap settles.
pub const SETTLE_RECHECK: Duration = Duration::from_secs(3);

/// A model's role in its shared GPU group.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedRole {
    /// Whether it may run now.
    pub active: bool,
    /// Status to write.
    pub status: SharedGroupStatus,
    /// Whether it was just preempted (event).
    pub newly_preempted: bool,
    /// Requeue sooner while the swap settles.
    pub requeue: Option<Duration>,
}

/// Decides a shared model's role from the group's members (pure).
pub fn shared_role(model: &Model, members: &[Model], now: SystemTime) -> Option<SharedRole> {
    let group = model.spec.shared_group()?.to_owned();
    let me = model.name_any();
    let mut siblings: Vec<&Model> = members
        .iter()
        .filter(|m| {
            m.spec.shared_group() == Some(group.as_str()) && m.meta().deletion_timestamp.is_none()
        })
        .collect();
    if !siblings.iter().any(|m| m.name_any() == me) {
        siblings.push(model);
    }
    let policy = SharedGroupPolicy {
        swap_cooldown: siblings
            .iter()
            .filter_map(|m| m.spec.gpu.as_ref().map(|g| g.swap_cooldown()))
            .max()
            .unwrap_or(flexinfer_crds::defaults::SHARED_SWAP_COOLDOWN),
        ..Default::default()
    };
    let shared_of = |m: &Model| m.status.as_ref().and_then(|s| s.shared_group.clone());
    let last_active = |m: &Model| {
        m.status
            .as_ref()
            .and_then(|s| s.last_active_time.as_ref())
            .map(from_time)
    };
    let members_in: Vec<SharedMember> = siblings
        .iter()
        .map(|m| SharedMember {
            name: m.name_any(),
            priority: m.spec.priority(),
            failed: m.phase() == Some(ModelPhase::Failed),
            last_active: last_active(m),
            demand: last_active(m).map(|at| Demand { depth: 1, at }),
        })
        .collect();
    let mut active: Vec<&Model> = siblings
        .iter()
        .copied()
        .filter(|m| shared_of(m).and_then(|s| s.state) == Some(MemberState::Active))
        .collect();
    active.sort_by(|a, b| {
        b.spec
            .priority()
            .cmp(&a.spec.priority())
            .then(a.name_any().cmp(&b.name_any()))
    });
    let state = SharedGroupState {
        leader: active.first().map(|m| m.name_any()),
        last_swap: siblings
            .iter()
            .filter_map(|m| {
                shared_of(m)
                    .and_then(|s| s.preempted_at)
                    .map(|t| from_time(&t))
            })
            .max(),
    };
    let decision = choose_leader(&members_in, &state, &policy, now);
    let mine = shared_of(model).unwrap_or_default();
    let leader = decision.leader.clone();
    let mut status = SharedGroupStatus {
        group_name: Some(group.clone()),
        active_model: leader.clone(),
        ..Default::default()
    };
    if leader.as_deref() == Some(me.as_str()) {
        let other_active = state.leader.as_deref().is_some_and(|l| l != me);
        if other_active {
            // The previous leader has not stepped down yet.
            status.state = Some(MemberState::Queued);
            status.queue_position = Some(1);
            status.preempted_by = mine.preempted_by.clone();
            status.preempted_at = mine.preempted_at.clone();
            return Some(SharedRole {
                active: false,
                status,
                newly_preempted: false,
                requeue: Some(SETTLE_RECHECK),
            });
        }
        status.state = Some(MemberState::Active);
        status.queue_position = Some(0);
        return Some(SharedRole {
            active: true,
            status,
            newly_preempted: false,
            requeue: None,
        });
    }
    let was_active = mine.state == Some(MemberState::Active);
    let mut others: Vec<&Model> = siblings
        .iter()
        .copied()
        .filter(|m| Some(m.name_any()) != leader)
        .collect();
    others.sort_by(|a, b| {
        b.spec
            .priority()
            .cmp(&a.spec.priority())
            .then(a.name_any().cmp(&b.name_any()))
    });
    let position = others.iter().position(|m| m.name_any() == me).unwrap_or(0) as i32 + 1;
    if was_active || mine.state == Some(MemberState::Preempted) {
        status.state = Some(MemberState::Preempted);
        status.preempted_by = if was_active {
            leader.clone()
        } else {
            mine.preempted_by.clone()
        };
        status.preempted_at = if was_active {
            Some(to_time(now))
        } else {
            mine.preempted_at.clone()
        };
    } else {
        status.state = Some(MemberState::Queued);
        status.preempted_by = leader.clone();
    }
    status.queue_position = Some(position);
    Some(SharedRole {
        active: false,
        status,
        newly_preempted: was_active,
        requeue: was_active.then_some(SETTLE_RECHECK),
    })
}
