//! The legacy v1alpha1 `ModelDeployment` controller.
//!
//! Legacy: new installations use the v1alpha2 `Model`. A ModelDeployment is
//! served by converting it to a `ModelSpec` ([`to_model_spec`]) and running
//! the same workload code as the Model controller
//! ([`super::model::ensure_workload`]): one code path for the Deployment,
//! Service and cache objects. Replicas follow `spec.replicas` (the gateway
//! sets 0 → 1 on a cold request); after `idleTimeoutSeconds` without
//! traffic (`status.lastAccessTime`) the controller sets `spec.replicas`
//! back to `minReplicas`. Members of a GPUGroup are scaled by the group.

use super::drive::{drive, retry_after};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flexinfer_crds::backend;
use flexinfer_crds::v1alpha1::{
    model_deployment::condition as md_condition, Endpoints, ModelDeployment, ModelDeploymentPhase,
    ModelDeploymentStatus,
};
use flexinfer_crds::v1alpha2::{
    CacheSpec, CacheStrategy, GpuSpec, Model, ModelSpec, ServerlessSpec,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::conditions::{from_time, Conditions};
use super::model::{ensure_workload, phase_of};
use super::{owned_objects, Context, Error, REQUEUE};
use crate::desired::{service::endpoint, ModelPlan};
use crate::placement;

/// Field manager of the ModelDeployment controller.
pub const MANAGER: &str = "flexinfer-modeldeployment-controller";

/// Runs the ModelDeployment controller until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let controller = Controller::new(
        ctx.watched_api::<ModelDeployment>(),
        watcher::Config::default(),
    )
    .owns(ctx.watched_api::<Deployment>(), owned_objects())
    .owns(ctx.watched_api::<Service>(), owned_objects());
    let error_policy = retry_after("modeldeployment", Duration::from_secs(5));
    drive(
        controller,
        reconcile,
        error_policy,
        ctx,
        shutdown,
        "modeldeployment",
    )
    .await;
}

/// The v1alpha2 spec equivalent to a ModelDeployment. `model` without a
/// scheme is an ollama model name for ollama and a Hugging Face repo
/// otherwise; the legacy kind has no cache strategy, so the source is
/// served directly (strategy None) unless `modelCacheRef` names a
/// ModelCache PVC.
pub fn to_model_spec(md: &ModelDeployment) -> ModelSpec {
    let s = &md.spec;
    let source = if s.model.contains("://") {
        s.model.clone()
    } else if backend::canonical_name(&s.backend) == Some("ollama") {
        format!("ollama://{}", s.model)
    } else {
        format!("HF://{}", s.model)
    };
    let cache = match &s.model_cache_ref {
        Some(pvc) if !pvc.is_empty() => CacheSpec {
            strategy: Some(CacheStrategy::SharedPvc),
            pvc_name: Some(pvc.clone()),
            ..Default::default()
        },
        _ => CacheSpec {
            strategy: Some(CacheStrategy::None),
            ..Default::default()
        },
    };
    let mut config = serde_json::Map::new();
    if let Some(v) = &s.vllm {
        if let Some(len) = v.max_model_len {
            config.insert("maxModelLen".into(), len.into());
        }
        if let Some(u) = &v.gpu_memory_utilization {
            config.insert("gpuMemoryUtilization".into(), u.clone().into());
        }
    }
    ModelSpec {
        backend: s.backend.clone(),
        source,
        gpu: Some(GpuSpec {
            priority: s.priority,
            vram_estimate_mb: s.vram_estimate_mb,
            ..Default::default()
        }),
        serverless: Some(ServerlessSpec {
            enabled: true,
            min_replicas: s.min_replicas,
            idle_timeout: Some(kube::core::Duration::from(s.idle_timeout())),
            ..Default::default()
        }),
        cache: Some(cache),
        config: (!config.is_empty()).then_some(config),
        resources: s.resources.clone(),
        node_selector: s.node_selector.clone(),
        litellm: s.litellm.clone(),
        service_labels: s.service_labels.clone(),
        ..Default::default()
    }
}

/// Reconciles one ModelDeployment.
pub async fn reconcile(md: Arc<ModelDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(md, ctx.clone()).await;
    ctx.metrics
        .observe("modeldeployment", start, &result, Error::reason);
    result
}

async fn reconcile_inner(md: Arc<ModelDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = md.namespace().unwrap_or_else(|| "default".into());
    let api: Api<ModelDeployment> = ctx.api(&ns);
    let Some(md) = api.get_opt(&md.name_any()).await? else {
        return Ok(Action::await_change());
    };
    if md.meta().deletion_timestamp.is_some() {
        // Owned objects are garbage-collected through owner references.
        return Ok(Action::await_change());
    }
    let now = ctx.now();
    let name = md.name_any();
    let prev = md.status.clone().unwrap_or_default();
    let mut conds = Conditions::new(&prev.conditions, now, md.meta().generation);
    let mut status = ModelDeploymentStatus {
        allocated_gpu: prev.allocated_gpu.clone(),
        gpu_group_state: prev.gpu_group_state.clone(),
        metrics: prev.metrics.clone(),
        tokens_per_second: prev.tokens_per_second.clone(),
        ..Default::default()
    };

    // Idle scale-down (not for GPUGroup members: the group decides).
    let in_group = md
        .spec
        .gpu_group_ref
        .as_ref()
        .is_some_and(|g| !g.is_empty());
    let last = prev.last_access_time.as_ref().map(from_time);
    if !in_group && md.spec.replicas > md.spec.min_replicas {
        if let Some(last) = last {
            if crate::policy::since(now, last) >= md.spec.idle_timeout() {
                api.patch(
                    &name,
                    &PatchParams {
                        field_manager: Some(MANAGER.to_owned()),
                        ..Default::default()
                    },
                    &Patch::Merge(json!({"spec": {"replicas": md.spec.min_replicas}})),
                )
                .await?;
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
        }
    }

    let spec = to_model_spec(&md);
    let backend = match backend::get(&spec.backend) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("unknown backend: {}", e.name);
            return finish_failed(&ctx, &api, &md, status, conds, msg).await;
        }
    };
    let nodes = ctx.nodes.nodes().await?;
    let placement = match placement::place(&name, backend, &spec, &nodes) {
        Ok((p, _)) => p,
        Err(e) => return finish_failed(&ctx, &api, &md, status, conds, e.message).await,
    };
    let model_view = Model {
        metadata: md.metadata.clone(),
        spec: spec.clone(),
        status: None,
    };
    let mut plan = ModelPlan::for_model(&model_view, backend, &ctx.settings.build);
    plan.owner = crate::desired::controller_owner(&md);
    plan.vendor = placement.vendor;
    plan.arch = placement.arch;
    plan.replicas = md.spec.replicas;
    let workload = ensure_workload(&ctx, &mut plan, MANAGER).await?;
    let (phase, reason, message) = phase_of(&workload, false);
    use flexinfer_crds::v1alpha2::ModelPhase as P;
    let md_phase = match phase {
        P::Ready => ModelDeploymentPhase::Running,
        P::Idle => ModelDeploymentPhase::Idle,
        P::Failed => ModelDeploymentPhase::Failed,
        _ => ModelDeploymentPhase::Pending,
    };
    conds.set(
        md_condition::READY,
        phase == P::Ready,
        reason,
        message.clone(),
    );
    status.phase = Some(md_phase);
    status.endpoints = Some(Endpoints {
        internal: Some(endpoint(&name, &ns, backend.port)),
        external: None,
    });
    status.conditions = conds.into_vec();
    let old_phase = prev.phase;
    write_status(&api, &md, &status).await?;
    if old_phase != Some(md_phase) {
        ctx.events
            .normal(
                &md.object_ref(&()),
                &format!("Phase{md_phase:?}"),
                format!("Phase is now {md_phase:?}: {message}"),
            )
            .await;
    }
    Ok(Action::requeue(REQUEUE))
}

async fn finish_failed(
    ctx: &Context,
    api: &Api<ModelDeployment>,
    md: &ModelDeployment,
    mut status: ModelDeploymentStatus,
    mut conds: Conditions,
    message: String,
) -> Result<Action, Error> {
    conds.set(
        md_condition::READY,
        false,
        "ValidationFailed",
        message.clone(),
    );
    status.phase = Some(ModelDeploymentPhase::Failed);
    status.conditions = conds.into_vec();
    if write_status(api, md, &status).await? {
        ctx.events
            .warning(&md.object_ref(&()), "ValidationFailed", message)
            .await;
    }
    Ok(Action::requeue(REQUEUE))
}

/// Applies the status unless unchanged; never writes `lastAccessTime`
/// (the gateway's field).
async fn write_status(
    api: &Api<ModelDeployment>,
    md: &ModelDeployment,
    status: &ModelDeploymentStatus,
) -> Result<bool, Error> {
    let mut desired = status.clone();
    desired.last_access_time = None;
    let mut current = md.status.clone().unwrap_or_default();
    current.last_access_time = None;
    super::conditions::sort_conditions(&mut current.conditions);
    super::apply::apply_status(api, MANAGER, md, &current, &desired).await
}
