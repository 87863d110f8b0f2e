//! The v1alpha1 `GPUGroup` controller: one active ModelDeployment per group,
//! chosen from the gateway's demand annotations
//! (`flexinfer.ai/queue.<model>`, `flexinfer.ai/queue-since.<model>`) by the
//! anti-thrashing policy in [`crate::policy::gpu_group`].

use super::drive::{drive, retry_after};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flexinfer_crds::labels;
use flexinfer_crds::v1alpha1::{
    GPUGroup, GPUGroupModelStatus, GPUGroupPhase, GPUGroupStatus, MemberState, ModelDeployment,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::conditions::{from_time, parse_rfc3339, to_time};
use super::{Context, Error};
use crate::policy::gpu_group::{decide, GpuGroupPolicy, GroupDecision, GroupMember};

/// Field manager of the GPUGroup controller.
pub const MANAGER: &str = "flexinfer-gpugroup-controller";
/// Requeue of a settled group.
pub const REQUEUE: Duration = Duration::from_secs(5);

/// Runs the GPUGroup controller until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let controller = Controller::new(ctx.watched_api::<GPUGroup>(), watcher::Config::default());
    // A member's change (it turned Running, it was scaled) reconciles its
    // groups at once rather than at the next requeue.
    let groups = controller.store();
    let controller = controller.watches(
        ctx.watched_api::<ModelDeployment>(),
        watcher::Config::default(),
        move |md: ModelDeployment| {
            let md_ns = md.namespace().unwrap_or_default();
            let md_name = md.name_any();
            let named = md.spec.gpu_group_ref.clone().filter(|g| !g.is_empty());
            groups
                .state()
                .into_iter()
                .filter(|g| {
                    let g_ns = g.namespace().unwrap_or_default();
                    (g_ns == md_ns && named.as_deref() == Some(g.name_any().as_str()))
                        || g.spec.models.iter().any(|m| {
                            m.name == md_name && m.namespace.as_deref().unwrap_or(&g_ns) == md_ns
                        })
                })
                .map(|g| ObjectRef::from_obj(&*g))
                .collect::<Vec<_>>()
        },
    );
    let error_policy = retry_after("gpugroup", Duration::from_secs(5));
    drive(
        controller,
        reconcile,
        error_policy,
        ctx,
        shutdown,
        "gpugroup",
    )
    .await;
}

/// The anti-thrashing policy of a group.
pub fn policy_of(group: &GPUGroup) -> GpuGroupPolicy {
    let at = &group.spec.anti_thrashing;
    GpuGroupPolicy {
        anti_thrashing: at.enabled,
        minimum_run_duration: at.minimum_run_duration(),
        cooldown_after_preemption: at.cooldown_after_preemption(),
        request_queue_threshold: u32::try_from(at.request_queue_threshold).unwrap_or(1),
        hysteresis_window: at.hysteresis_window(),
        ..Default::default()
    }
}

/// Demand of `model` read from the group's annotations.
pub fn demand(group: &GPUGroup, model: &str) -> (u32, Option<SystemTime>) {
    let ann = group.annotations();
    let queued = ann
        .get(&labels::queue_annotation(model))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let since = ann
        .get(&labels::queue_since_annotation(model))
        .and_then(|v| parse_rfc3339(v));
    (queued, since)
}

/// Reconciles one GPUGroup.
pub async fn reconcile(group: Arc<GPUGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(group, ctx.clone()).await;
    ctx.metrics
        .observe("gpugroup", start, &result, Error::reason);
    result
}

async fn scale(api: &Api<ModelDeployment>, name: &str, replicas: i32) -> Result<(), Error> {
    api.patch(
        name,
        &PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..Default::default()
        },
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    Ok(())
}

async fn reconcile_inner(group: Arc<GPUGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = group.namespace().unwrap_or_else(|| "default".into());
    let groups: Api<GPUGroup> = ctx.api(&ns);
    let Some(group) = groups.get_opt(&group.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let now = ctx.now();
    let mut prev = group.status.clone().unwrap_or_default();
    super::conditions::sort_conditions(&mut prev.conditions);
    // Members that exist.
    let mut mds: Vec<Member> = Vec::new();
    for m in &group.spec.models {
        let api: Api<ModelDeployment> = ctx.api(m.namespace.as_deref().unwrap_or(&ns));
        if let Some(md) = api.get_opt(&m.name).await? {
            mds.push((api, md, m.priority));
        }
    }
    let members = group_members(&group, &mds, &prev);
    let policy = policy_of(&group);
    let current = prev.active_model.clone().filter(|a| !a.is_empty());
    let last_swap = prev.last_swap_time.as_ref().map(from_time);
    let decision = decide(&members, current.as_deref(), last_swap, &policy, now);

    let mut status = GPUGroupStatus {
        active_model: current.clone(),
        last_swap_time: prev.last_swap_time.clone(),
        last_swap_reason: prev.last_swap_reason.clone(),
        swap_count: prev.swap_count,
        allocated_gpu: prev.allocated_gpu.clone(),
        conditions: prev.conditions.clone(),
        ..Default::default()
    };
    let obj = group.object_ref(&());
    let (requeue, preempted_now) = enact(
        &ctx,
        &obj,
        &decision,
        current.as_deref(),
        &mds,
        &mut status,
        now,
    )
    .await?;
    // One active member: every other member runs no replicas.
    if let Some(active) = status.active_model.clone() {
        for (api, md, _) in &mds {
            let name = md.name_any();
            if name != active && md.spec.replicas > 0 {
                scale(api, &name, 0).await?;
            }
        }
    }

    status.model_statuses = member_statuses(
        &members,
        &mds,
        &prev,
        status.active_model.as_deref(),
        preempted_now.as_ref(),
        now,
    );
    status.phase = Some(group_phase(status.active_model.as_deref(), &mds));

    super::apply::apply_status(&groups, MANAGER, &group, &prev, &status).await?;
    Ok(Action::requeue(requeue))
}

/// A member ModelDeployment that exists: its API, the object and its
/// priority in the group.
type Member = (Api<ModelDeployment>, ModelDeployment, i32);

/// The policy's view of each member: priority, demand, last activity and
/// when it was last preempted.
fn group_members(group: &GPUGroup, mds: &[Member], prev: &GPUGroupStatus) -> Vec<GroupMember> {
    let prev_member = |name: &str| prev.model_statuses.iter().find(|s| s.name == name).cloned();
    mds.iter()
        .map(|(_, md, priority)| {
            let name = md.name_any();
            let (queued, queued_since) = demand(group, &name);
            GroupMember {
                name: name.clone(),
                priority: *priority,
                queued,
                queued_since,
                last_active: md
                    .status
                    .as_ref()
                    .and_then(|s| s.last_access_time.as_ref())
                    .map(from_time),
                preempted_at: prev_member(&name)
                    .and_then(|s| s.preempted_at)
                    .map(|t| from_time(&t)),
            }
        })
        .collect()
}

/// Carries out the policy's decision: scales the members, records a swap
/// in `status` and sends the events. Returns when to look again and, for
/// a swap, the member that lost the GPU and to whom.
async fn enact(
    ctx: &Context,
    obj: &ObjectReference,
    decision: &GroupDecision,
    current: Option<&str>,
    mds: &[Member],
    status: &mut GPUGroupStatus,
    now: SystemTime,
) -> Result<(Duration, Option<(String, String)>), Error> {
    let mut requeue = REQUEUE;
    let mut preempted_now: Option<(String, String)> = None;
    match decision {
        GroupDecision::Swap { to, reason } => {
            if let Some(old) = current.filter(|o| *o != to) {
                if let Some((api, md, _)) = mds.iter().find(|(_, md, _)| md.name_any() == old) {
                    if md.spec.replicas != 0 {
                        scale(api, old, 0).await?;
                    }
                    ctx.events
                        .normal(
                            obj,
                            "ModelScaledDown",
                            format!("Scaled down model {old} for swap to {to}"),
                        )
                        .await;
                    preempted_now = Some((old.to_owned(), to.clone()));
                }
            }
            if let Some((api, md, _)) = mds.iter().find(|(_, md, _)| md.name_any() == *to) {
                if md.spec.replicas < 1 {
                    scale(api, to, md.spec.min_replicas.max(1)).await?;
                }
            }
            ctx.events
                .normal(
                    obj,
                    "ModelScaledUp",
                    format!("Scaled up model {to} (reason: {reason})"),
                )
                .await;
            status.active_model = Some(to.clone());
            status.last_swap_time = Some(to_time(now));
            status.last_swap_reason = Some(reason.clone());
            status.swap_count = Some(status.swap_count.unwrap_or(0) + 1);
        }
        GroupDecision::Keep { model, .. } => {
            status.active_model = model.clone();
            if let Some(active) = model {
                if let Some((api, md, _)) = mds.iter().find(|(_, md, _)| md.name_any() == *active) {
                    if md.spec.replicas < 1 {
                        scale(api, active, md.spec.min_replicas.max(1)).await?;
                        ctx.events
                            .normal(
                                obj,
                                "ModelScaledUp",
                                format!("Ensured model {active} is scaled up"),
                            )
                            .await;
                    }
                }
            }
        }
        GroupDecision::Blocked { requeue_after, .. } => requeue = *requeue_after,
    }
    Ok((requeue, preempted_now))
}

/// Each member's status: Active, Preempted (now, or still), Queued or
/// Idle.
fn member_statuses(
    members: &[GroupMember],
    mds: &[Member],
    prev: &GPUGroupStatus,
    active: Option<&str>,
    preempted_now: Option<&(String, String)>,
    now: SystemTime,
) -> Vec<GPUGroupModelStatus> {
    let mut out = Vec::with_capacity(members.len());
    for (m, (_, md, _)) in members.iter().zip(mds) {
        let old = prev
            .model_statuses
            .iter()
            .find(|s| s.name == m.name)
            .cloned()
            .unwrap_or_default();
        let mut s = GPUGroupModelStatus {
            name: m.name.clone(),
            queued_requests: (m.queued > 0).then_some(m.queued as i32),
            queued_since: m.queued_since.map(to_time),
            last_active_time: md.status.as_ref().and_then(|s| s.last_access_time.clone()),
            ..Default::default()
        };
        if active == Some(m.name.as_str()) {
            s.state = Some(MemberState::Active);
        } else if let Some((_, by)) = preempted_now.filter(|(o, _)| *o == m.name) {
            s.state = Some(MemberState::Preempted);
            s.preempted_at = Some(to_time(now));
            s.preempted_by = Some(by.clone());
        } else {
            s.preempted_at = old.preempted_at.clone();
            s.preempted_by = old.preempted_by.clone();
            s.state = Some(if old.state == Some(MemberState::Preempted) {
                MemberState::Preempted
            } else if m.queued > 0 {
                MemberState::Queued
            } else {
                MemberState::Idle
            });
        }
        out.push(s);
    }
    out
}

/// Idle without an active member, Active once it is ready, Swapping
/// until then.
fn group_phase(active: Option<&str>, mds: &[Member]) -> GPUGroupPhase {
    match active {
        None => GPUGroupPhase::Idle,
        Some(active) => {
            let ready = mds
                .iter()
                .find(|(_, md, _)| md.name_any() == active)
                .is_some_and(|(_, md, _)| md.is_ready());
            if ready {
                GPUGroupPhase::Active
            } else {
                GPUGroupPhase::Swapping
            }
        }
    }
}
