//! The v1alpha2 `Model` reconciler.
//!
//! Flow (`ARCHITECTURE.md`, "Model reconcile"): fetch (NotFound → done)
//! → finalizer (cleanup on deletion) → validate backend → shared-GPU
//! leader choice → desired replicas (serverless idle timeout) → GPU
//! detection → compatibility → Service → cache (PVC, prefetch,
//! quantization; gating) → Deployment → status from the Deployment →
//! KV-cache pressure, failed-pod pruning → requeue. Owned objects and the status are written with server-side
//! apply under [`MANAGER`], and only when they change.

use super::drive::drive;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flexinfer_crds::backend::{self, Backend};
use flexinfer_crds::labels;
use flexinfer_crds::v1alpha2::model::{condition, reason};
use flexinfer_crds::v1alpha2::{
    CacheStatus, KvCacheStatus, Model, ModelPhase, ModelStatus, SharedGroupState as MemberState,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use super::apply::{apply_owned, apply_status};
use super::conditions::{from_time, sort_conditions, to_time, Conditions};
use super::{owned_objects, Context, Error, REQUEUE};
use crate::desired::{self, service::endpoint, ModelPlan};
use crate::placement::{self, Placement};
use crate::policy::replicas::{desired_replicas, idle_at, ServerlessPolicy};
use crate::policy::shared_role::{shared_role, SharedRole};

/// Field manager of everything the Model controller writes.
pub const MANAGER: &str = "flexinfer-model-controller";
/// Failed pods older than this are deleted.
pub const FAILED_POD_CUTOFF: Duration = Duration::from_secs(300);
/// Condition type raised when the backend's KV cache is under pressure.
pub const KV_CACHE_PRESSURE: &str = "KVCachePressure";

/// Runs the Model controller until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let models = ctx.watched_api::<Model>();
    let controller = Controller::new(models.clone(), watcher::Config::default());
    let store = controller.store();
    let controller = controller
        .owns(ctx.watched_api::<Deployment>(), owned_objects())
        .owns(ctx.watched_api::<Service>(), owned_objects())
        .owns(ctx.watched_api::<Job>(), owned_objects())
        // A change of one shared-group member re-decides its siblings.
        .watches(models, watcher::Config::default(), move |m: Model| {
            let group = m.spec.shared_group().map(str::to_owned);
            let ns = m.namespace();
            let name = m.name_any();
            store
                .state()
                .into_iter()
                .filter(|o| group.is_some() && o.spec.shared_group() == group.as_deref())
                .filter(|o| o.namespace() == ns && o.name_any() != name)
                .map(|o| ObjectRef::from_obj(&*o))
                .collect::<Vec<_>>()
        });
    drive(controller, reconcile, error_policy, ctx, shutdown, "model").await;
}

/// Backoff after a failed reconcile.
pub fn error_policy(_model: Arc<Model>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "model reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Reconciles one Model (the function `Controller::run` calls; tests call
/// it directly).
pub async fn reconcile(model: Arc<Model>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(model, ctx.clone()).await;
    ctx.metrics.observe("model", start, &result, Error::reason);
    result
}

async fn reconcile_inner(model: Arc<Model>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = model.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Model> = ctx.api(&ns);
    // Fetch: the cached copy may be stale; a vanished Model is done.
    let Some(fresh) = api.get_opt(&model.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let ctx2 = ctx.clone();
    finalizer(
        &api,
        labels::MODEL_FINALIZER,
        Arc::new(fresh),
        |event| async move {
            match event {
                FinalizerEvent::Apply(m) => apply(m, ctx2).await,
                FinalizerEvent::Cleanup(m) => cleanup(m, ctx2).await,
            }
        },
    )
    .await
    .map_err(|e| Error::Finalizer(e.to_string()))
}

/// Deletes the Deployment and Service and, for shared models pinned to a
/// node, starts the tmpfs cleanup Job.
async fn cleanup(model: Arc<Model>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = model.namespace().unwrap_or_else(|| "default".into());
    let name = model.name_any();
    let dp = DeleteParams::background();
    let deployments: Api<Deployment> = ctx.api(&ns);
    let services: Api<Service> = ctx.api(&ns);
    let child = flexinfer_crds::names::service_name(&name);
    ignore_not_found(deployments.delete(&child, &dp).await.map(|_| ()))?;
    ignore_not_found(services.delete(&child, &dp).await.map(|_| ()))?;
    if let Ok(backend) = backend::get(&model.spec.backend) {
        let plan = ModelPlan::for_model(&model, backend, &ctx.settings.build);
        if let Some(job) = desired::cache::tmpfs_cleanup_job(&plan) {
            let jobs: Api<Job> = ctx.api(&ns);
            apply_owned(&jobs, MANAGER, &job).await?;
        }
    }
    ctx.events
        .normal(
            &model.object_ref(&()),
            "Deleted",
            format!("Cleaned up workload of model {name}"),
        )
        .await;
    Ok(Action::await_change())
}

fn ignore_not_found(r: Result<(), kube::Error>) -> Result<(), Error> {
    match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The serverless policy of a model. Replicas while active: the
/// `flexinfer.ai/replicas` annotation (a federated model's share on this
/// cluster), else 1.
pub fn serverless_policy(model: &Model) -> ServerlessPolicy {
    let spec = &model.spec;
    ServerlessPolicy {
        enabled: spec.is_serverless(),
        idle_timeout: spec.idle_timeout(),
        min_replicas: u32::try_from(spec.min_replicas()).unwrap_or(0),
        active_replicas: crate::federation::annotated_replicas(model.metadata.annotations.as_ref())
            .unwrap_or(1),
    }
}

/// Readiness of a model's cache.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CacheOutcome {
    /// Whether the backend may start.
    pub ready: bool,
    /// `Cached` condition reason.
    pub reason: String,
    /// `Cached` condition message.
    pub message: String,
    /// Status to report.
    pub status: CacheStatus,
}

/// State of a cache Job.
fn job_state(job: &Job) -> (&'static str, bool, bool) {
    let st = job.status.clone().unwrap_or_default();
    let backoff = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
    let cond = |t: &str| {
        st.conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    if st.succeeded.unwrap_or(0) > 0 || cond("Complete") {
        ("Succeeded", true, false)
    } else if cond("Failed") || st.failed.unwrap_or(0) > backoff {
        ("Failed", false, true)
    } else if st.active.unwrap_or(0) > 0 {
        ("Running", false, false)
    } else {
        ("Pending", false, false)
    }
}

/// Applies a cache Job. A Job's pod template cannot change: one whose
/// work changed (source, revision, patterns, quantization settings:
/// [`job_work`]) is deleted and created anew; one whose work is the same
/// but whose template differs otherwise (a new helper image after an
/// upgrade) is kept as it is, so finished downloads are not repeated.
/// `None` while a deleted Job is still going away.
async fn ensure_job(jobs: &Api<Job>, manager: &str, job: &Job) -> Result<Option<Job>, Error> {
    let name = job.name_any();
    let mut job = job.clone();
    let work = job_work(&job);
    job.annotations_mut()
        .insert(labels::CACHE_WORK.to_owned(), work.clone());
    if let Some(existing) = jobs.get_opt(&name).await? {
        if existing.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let same_template = super::apply::is_subset(
            &serde_json::to_value(job.spec.as_ref().map(|s| &s.template))?,
            &serde_json::to_value(existing.spec.as_ref().map(|s| &s.template))?,
        );
        if !same_template {
            if existing.annotations().get(labels::CACHE_WORK) == Some(&work) {
                return Ok(Some(existing));
            }
            let dp = DeleteParams::background();
            if jobs.delete(&name, &dp).await?.is_left() {
                return Ok(None);
            }
        }
    }
    Ok(Some(apply_owned(jobs, manager, &job).await?.object))
}

/// Digest of what a cache Job does: its pod template without images.
pub fn job_work(job: &Job) -> String {
    let mut template =
        serde_json::to_value(job.spec.as_ref().map(|s| &s.template)).unwrap_or_default();
    if let Some(spec) = template.get_mut("spec") {
        for list in ["containers", "initContainers"] {
            for c in spec
                .get_mut(list)
                .and_then(|v| v.as_array_mut())
                .into_iter()
                .flatten()
            {
                if let Some(c) = c.as_object_mut() {
                    c.remove("image");
                }
            }
        }
    }
    super::apply::digest(&template)
}

/// The cache PVC to apply: `desired`, with the fields a PVC cannot change
/// (class, access modes, volume) taken from `existing` and a smaller size
/// kept at the existing one. Returns what differs, for the status.
pub fn pvc_to_apply(
    desired: &PersistentVolumeClaim,
    existing: Option<&PersistentVolumeClaim>,
) -> (PersistentVolumeClaim, Vec<String>) {
    let mut out = desired.clone();
    let mut kept = Vec::new();
    let (Some(want), Some(have)) = (out.spec.as_mut(), existing.and_then(|e| e.spec.as_ref()))
    else {
        return (out, kept);
    };
    if want.storage_class_name.is_some() && want.storage_class_name != have.storage_class_name {
        kept.push(format!(
            "storageClass {} (asked: {})",
            have.storage_class_name.as_deref().unwrap_or("none"),
            want.storage_class_name.as_deref().unwrap_or_default()
        ));
    }
    want.storage_class_name = have.storage_class_name.clone();
    if want.access_modes != have.access_modes {
        kept.push(format!(
            "accessModes {} (asked: {})",
            have.access_modes.clone().unwrap_or_default().join(","),
            want.access_modes.clone().unwrap_or_default().join(",")
        ));
    }
    want.access_modes = have.access_modes.clone();
    want.volume_name = have.volume_name.clone();
    want.volume_mode = have.volume_mode.clone();
    let size = |s: &k8s_openapi::api::core::v1::PersistentVolumeClaimSpec| {
        s.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .cloned()
    };
    if let (Some(w), Some(h)) = (size(want), size(have)) {
        let smaller = match (
            flexinfer_crds::quantity::parse(&w.0),
            flexinfer_crds::quantity::parse(&h.0),
        ) {
            (Some(w), Some(h)) => w < h,
            _ => false,
        };
        if smaller {
            kept.push(format!(
                "size {} (asked: {}; a PVC cannot shrink)",
                h.0, w.0
            ));
            if let Some(r) = want.resources.as_mut().and_then(|r| r.requests.as_mut()) {
                r.insert("storage".to_owned(), h);
            }
        }
    }
    (out, kept)
}

/// Ensures the cache PVC and Jobs and reports readiness.
pub async fn ensure_cache(
    ctx: &Context,
    plan: &ModelPlan<'_>,
    manager: &str,
) -> Result<CacheOutcome, Error> {
    let ns = &plan.namespace;
    let mut out = CacheOutcome {
        ready: true,
        reason: "NoCacheJob".into(),
        message: "no cache job required".into(),
        status: CacheStatus {
            strategy: Some(plan.cache_strategy()),
            ..Default::default()
        },
    };
    let mut unchangeable = Vec::new();
    let mut unbindable = None;
    if let Some(pvc) = desired::cache::cache_pvc(plan) {
        let pvcs: Api<PersistentVolumeClaim> = ctx.api(ns);
        let existing = pvcs.get_opt(&pvc.name_any()).await?;
        let (pvc, kept) = pvc_to_apply(&pvc, existing.as_ref());
        unchangeable = kept;
        let applied = apply_owned(&pvcs, manager, &pvc).await?.object;
        out.status.pvc_name = Some(pvc.name_any());
        (out.reason, out.message) = pvc_state(&applied);
        if out.reason == "PVCNoStorageClass" {
            unbindable = Some((out.reason.clone(), out.message.clone()));
        }
    }
    let jobs: Api<Job> = ctx.api(ns);
    if let Some(job) = desired::cache::prefetch_job(plan) {
        let Some(job) = ensure_job(&jobs, manager, &job).await? else {
            return Ok(replacing(out, &job));
        };
        let (phase, done, failed) = job_state(&job);
        out.status.job_name = Some(job.name_any());
        out.status.job_phase = Some(phase.to_owned());
        out.ready = done;
        (out.reason, out.message) = match (done, failed, phase) {
            (true, _, _) => ("PrefetchSucceeded".into(), "artifact prefetched".into()),
            (_, true, _) => ("PrefetchFailed".into(), "prefetch job failed".into()),
            (_, _, "Running") => ("PrefetchRunning".into(), "prefetch job running".into()),
            _ => ("PrefetchPending".into(), "prefetch job pending".into()),
        };
    }
    if out.ready {
        if let Some(job) = desired::cache::quantize_job(plan) {
            let Some(job) = ensure_job(&jobs, manager, &job).await? else {
                return Ok(replacing(out, &job));
            };
            let (phase, done, failed) = job_state(&job);
            out.status.job_name = Some(job.name_any());
            out.status.job_phase = Some(phase.to_owned());
            out.ready = done;
            (out.reason, out.message) = match (done, failed) {
                (true, _) => (
                    "PrefetchSucceeded".into(),
                    "artifact prefetched and quantized".into(),
                ),
                (_, true) => (
                    "QuantizationFailed".into(),
                    "quantization job failed".into(),
                ),
                _ => (
                    "QuantizationRunning".into(),
                    format!(
                        "quantization job started (format={})",
                        serde_json::to_value(plan.spec.quantize.as_ref().map(|q| q.format))
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                ),
            };
        }
    }
    if let Some((reason, message)) = unbindable.filter(|_| !out.ready) {
        // The Jobs cannot start without their volume: say why.
        (out.reason, out.message) = (reason, message);
    }
    if !unchangeable.is_empty() {
        out.message = format!(
            "{}; the cache PVC keeps {}: these cannot change on an existing claim (delete the PVC to recreate it)",
            out.message,
            unchangeable.join(", ")
        );
    }
    out.status.ready = out.ready;
    out.status.message = Some(out.message.clone());
    Ok(out)
}

/// A cache Job being replaced: not ready until its successor is done.
fn replacing(mut out: CacheOutcome, job: &Job) -> CacheOutcome {
    out.ready = false;
    out.reason = "PrefetchPending".into();
    out.message = format!("cache job {} changed and is being replaced", job.name_any());
    out.status.job_name = Some(job.name_any());
    out.status.job_phase = Some("Pending".into());
    out.status.ready = false;
    out.status.message = Some(out.message.clone());
    out
}

/// `Cached` reason and message of the cache PVC as stored. A claim left
/// without a StorageClass (none asked for and no default class in the
/// cluster) binds only to a matching pre-provisioned volume: it says so.
fn pvc_state(pvc: &PersistentVolumeClaim) -> (String, String) {
    let name = pvc.name_any();
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase == Some("Bound") {
        return ("PVCBound".into(), "cache PVC is bound".into());
    }
    let class = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .filter(|c| !c.is_empty());
    if class.is_none() {
        return (
            "PVCNoStorageClass".into(),
            format!(
                "cache PVC {name} has no StorageClass: the cluster has no default StorageClass and \
                 neither spec.cache.storageClass nor the operator's --cache-storage-class names one, \
                 so it binds only to a matching PersistentVolume"
            ),
        );
    }
    (
        "PVCProvisioning".into(),
        format!(
            "cache PVC {name} (StorageClass {}) is {}; it binds when provisioned or on first use",
            class.unwrap_or_default(),
            phase.unwrap_or("Pending")
        ),
    )
}

/// What the workload looks like after applying it.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The Deployment as stored.
    pub deployment: Deployment,
    /// Cache readiness.
    pub cache: CacheOutcome,
    /// Replicas asked for (0 while the cache is not ready).
    pub replicas: i32,
    /// Whether the Deployment is being deleted to be created anew (its
    /// selector had to change).
    pub replacing: bool,
}

/// Applies Service, cache objects and Deployment of a plan (shared by
/// Model and ModelDeployment). Cache gating: replicas 0 until ready.
pub async fn ensure_workload(
    ctx: &Context,
    plan: &mut ModelPlan<'_>,
    manager: &str,
) -> Result<Workload, Error> {
    let ns = plan.namespace.clone();
    let services: Api<Service> = ctx.api(&ns);
    apply_owned(&services, manager, &desired::service::service(plan)).await?;
    let cache = ensure_cache(ctx, plan, manager).await?;
    if !cache.ready {
        plan.replicas = 0;
    }
    let deployments: Api<Deployment> = ctx.api(&ns);
    let mut desired = desired::deployment::deployment(plan);
    let existing = deployments.get_opt(&desired.name_any()).await?;
    if let Some(existing) = existing {
        if existing.metadata.deletion_timestamp.is_some() {
            return Ok(Workload {
                deployment: existing,
                cache,
                replicas: plan.replicas,
                replacing: true,
            });
        }
        match keep_selector(&desired, &existing) {
            Some(selector) => {
                if let Some(spec) = desired.spec.as_mut() {
                    spec.selector = selector;
                }
            }
            None => {
                // The selector cannot change: the old pods (another
                // backend) go first, then the Deployment is created anew.
                let name = existing.name_any();
                deployments
                    .delete(&name, &DeleteParams::foreground())
                    .await?;
                return Ok(Workload {
                    deployment: existing,
                    cache,
                    replicas: plan.replicas,
                    replacing: true,
                });
            }
        }
    }
    let deployment = apply_owned(&deployments, manager, &desired).await?.object;
    Ok(Workload {
        deployment,
        cache,
        replicas: plan.replicas,
        replacing: false,
    })
}

/// The selector to keep on an existing Deployment: its own when it still
/// selects the desired pod template (older Deployments also select the
/// backend label, and need not be replaced for that), `None` when it does
/// not and the Deployment must be replaced (a selector cannot change).
pub fn keep_selector(desired: &Deployment, existing: &Deployment) -> Option<LabelSelector> {
    let want = desired.spec.as_ref()?;
    let have = existing.spec.as_ref()?;
    if have.selector == want.selector {
        return Some(have.selector.clone());
    }
    let template = want
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let selects =
        have.selector.match_expressions.is_none()
            && have.selector.match_labels.as_ref().is_some_and(|l| {
                !l.is_empty() && l.iter().all(|(k, v)| template.get(k) == Some(v))
            });
    selects.then(|| have.selector.clone())
}

/// Phase, `Ready` reason and message from the observed workload (pure).
/// Pods the API server refuses to create (a missing RuntimeClass, Pod
/// Security admission, a quota: the Deployment's `ReplicaFailure`
/// condition) fail the model with the server's own message.
pub fn phase_of(workload: &Workload, preempted: bool) -> (ModelPhase, &'static str, String) {
    let st = workload.deployment.status.clone().unwrap_or_default();
    let (phase, reason, message) = if preempted {
        (
            ModelPhase::Preempted,
            reason::PREEMPTED,
            "Model was preempted by higher priority model",
        )
    } else if !workload.cache.ready {
        (
            ModelPhase::Pending,
            reason::CACHE_NOT_READY,
            "Waiting for cache to be ready",
        )
    } else if workload.replacing {
        (
            ModelPhase::Pending,
            reason::STARTING_BACKEND,
            "Replacing the Deployment (its pod selector changed with spec.backend)",
        )
    } else if let Some(failure) = replica_failure(&workload.deployment) {
        return (ModelPhase::Failed, reason::FAILED_CREATE, failure);
    } else if st.ready_replicas.unwrap_or(0) > 0 {
        (
            ModelPhase::Ready,
            reason::BACKEND_READY,
            "Backend is ready to serve requests",
        )
    } else if workload.replicas == 0 {
        (
            ModelPhase::Idle,
            reason::WAITING_FOR_ACTIVATION,
            "Model is idle, waiting for traffic",
        )
    } else if st.unavailable_replicas.unwrap_or(0) > 0 || st.replicas.unwrap_or(0) > 0 {
        (
            ModelPhase::Loading,
            reason::STARTING_BACKEND,
            "Backend container is starting",
        )
    } else {
        (
            ModelPhase::Pending,
            reason::STARTING_BACKEND,
            "Waiting for deployment to be ready",
        )
    };
    (phase, reason, message.to_owned())
}

/// The message of a Deployment's `ReplicaFailure` condition (the
/// ReplicaSet could not create pods), when it holds and no pod is ready.
pub fn replica_failure(deployment: &Deployment) -> Option<String> {
    let st = deployment.status.as_ref()?;
    if st.ready_replicas.unwrap_or(0) > 0 {
        return None;
    }
    st.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| {
            format!(
                "pods cannot be created ({}): {}",
                c.reason.as_deref().unwrap_or("FailedCreate"),
                c.message.as_deref().unwrap_or_default()
            )
        })
}

/// Writes `status` with server-side apply unless it equals the stored
/// one (ignoring `lastActiveTime`, which only the gateway writes).
pub async fn write_status(
    api: &Api<Model>,
    model: &Model,
    status: &ModelStatus,
) -> Result<bool, Error> {
    let mut desired = status.clone();
    desired.last_active_time = None;
    let mut current = model.status.clone().unwrap_or_default();
    current.last_active_time = None;
    sort_conditions(&mut current.conditions);
    apply_status(api, MANAGER, model, &current, &desired).await
}

/// Status being assembled in one reconcile.
struct Draft {
    status: ModelStatus,
    conds: Conditions,
}

impl Draft {
    fn new(model: &Model, now: SystemTime) -> Draft {
        let prev = model.status.clone().unwrap_or_default();
        let conds = Conditions::new(&prev.conditions, now, model.meta().generation);
        let status = ModelStatus {
            observed_generation: model.meta().generation,
            endpoint: prev.endpoint.clone(),
            kv_cache: prev.kv_cache.clone(),
            ..Default::default()
        };
        Draft { status, conds }
    }

    fn finish(mut self, phase: ModelPhase, message: Option<String>) -> ModelStatus {
        self.status.phase = Some(phase);
        self.status.message = message;
        self.status.conditions = self.conds.into_vec();
        self.status
    }
}

/// Writes a Failed status and emits a Warning event when the failure is new.
async fn fail(
    ctx: &Context,
    api: &Api<Model>,
    model: &Model,
    mut draft: Draft,
    cond_type: &str,
    why: &str,
    message: String,
) -> Result<Action, Error> {
    draft.conds.set(cond_type, false, why, message.clone());
    let status = draft.finish(ModelPhase::Failed, Some(message.clone()));
    let prev = model.status.as_ref();
    let is_new = prev.and_then(|s| s.phase) != Some(ModelPhase::Failed)
        || prev.and_then(|s| s.message.clone()) != Some(message.clone());
    write_status(api, model, &status).await?;
    if is_new {
        ctx.events
            .warning(&model.object_ref(&()), why, message)
            .await;
    }
    Ok(Action::requeue(REQUEUE))
}

async fn apply(model: Arc<Model>, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = ctx.now();
    let ns = model.namespace().unwrap_or_else(|| "default".into());
    let name = model.name_any();
    let api: Api<Model> = ctx.api(&ns);
    let mut draft = Draft::new(&model, now);

    // Backend.
    let backend: &'static Backend = match backend::get(&model.spec.backend) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("unknown backend: {}", e.name);
            return fail(
                &ctx,
                &api,
                &model,
                draft,
                condition::CONFIG_VALID,
                reason::VALIDATION_FAILED,
                msg,
            )
            .await;
        }
    };
    draft.conds.set(
        condition::CONFIG_VALID,
        true,
        reason::CONFIG_VALID,
        format!("backend {} is valid", backend.name),
    );

    // Shared GPU group.
    let role = if model.spec.is_shared() {
        let all = api.list(&ListParams::default()).await?;
        shared_role(&model, &all.items, now)
    } else {
        None
    };

    // Desired replicas.
    let policy = serverless_policy(&model);
    let last_active = model
        .status
        .as_ref()
        .and_then(|s| s.last_active_time.as_ref())
        .map(from_time);
    let loading = model.phase() == Some(ModelPhase::Loading);
    let mut replicas = desired_replicas(&policy, last_active, loading, now) as i32;
    if role.as_ref().is_some_and(|r| !r.active) {
        replicas = 0;
    }

    // GPU detection and compatibility.
    let placement = match place(&ctx, &model, backend).await? {
        Ok(placement) => placement,
        Err(e) => {
            return fail(
                &ctx,
                &api,
                &model,
                draft,
                condition::SCHEDULABLE,
                e.reason,
                e.message,
            )
            .await
        }
    };
    draft.conds.set(
        condition::SCHEDULABLE,
        true,
        reason::SCHEDULABLE,
        "Model can be scheduled on available nodes",
    );

    // Workload.
    let mut plan = ModelPlan::for_model(&model, backend, &ctx.settings.build);
    plan.vendor = placement.vendor;
    plan.arch = placement.arch.clone();
    plan.replicas = replicas;
    plan.shared_active = role.as_ref().map(|r| r.active);
    let workload = ensure_workload(&ctx, &mut plan, MANAGER).await?;

    // Status.
    let preempted = role
        .as_ref()
        .is_some_and(|r| r.status.state == Some(MemberState::Preempted));
    let (phase, ready_reason, ready_message) = phase_of(&workload, preempted);
    record_workload(&mut draft, &workload, phase, (ready_reason, &ready_message));
    draft.status.endpoint = Some(endpoint(&name, &ns, backend.port));
    draft.status.shared_group = role.as_ref().map(|r| r.status.clone());
    record_placement(&mut draft, &placement);
    if phase == ModelPhase::Ready && ctx.settings.kv_cache_scrape {
        kv_cache_check(&ctx, &model, &ns, backend, now, &mut draft).await;
    }
    let status = draft.finish(phase, None);
    let old_phase = model.phase();
    write_status(&api, &model, &status).await?;
    if old_phase != Some(phase) {
        announce_phase(
            &ctx,
            &model,
            old_phase,
            phase,
            role.as_ref(),
            &ready_message,
        )
        .await;
    }

    prune_failed_pods(&ctx, &ns, &name, now).await?;

    let settling = role.as_ref().and_then(|r| r.requeue);
    let next = next_reconcile(&policy, last_active, replicas > 0, settling, now);
    Ok(Action::requeue(next))
}

/// Where the model runs: the CPU, or the GPU vendor and architecture
/// detected on the nodes, checked against the backend (warnings become an
/// event on a new model). `Ok(Err(_))` is a placement the model cannot
/// have.
async fn place(
    ctx: &Context,
    model: &Model,
    backend: &'static Backend,
) -> Result<Result<Placement, placement::PlacementError>, Error> {
    let nodes = if model.spec.gpu_count() == 0 {
        Vec::new()
    } else {
        ctx.nodes.nodes().await?
    };
    match placement::place(&model.name_any(), backend, &model.spec, &nodes) {
        Ok((placement, warnings)) => {
            if model.phase().is_none() {
                for w in warnings {
                    ctx.events
                        .warning(&model.object_ref(&()), "ExperimentalGPUSupport", w)
                        .await;
                }
            }
            Ok(Ok(placement))
        }
        Err(e) => Ok(Err(e)),
    }
}

/// The Cached, Ready and Loaded conditions and the replica and cache
/// status of the applied workload.
fn record_workload(
    draft: &mut Draft,
    workload: &Workload,
    phase: ModelPhase,
    (ready_reason, ready_message): (&str, &str),
) {
    let c = &workload.cache;
    draft.conds.set(
        condition::CACHED,
        c.ready,
        if c.ready || c.reason.starts_with("Prefetch") || c.reason.starts_with("Quant") {
            c.reason.as_str()
        } else {
            reason::CACHE_NOT_READY
        },
        c.message.clone(),
    );
    let ready = phase == ModelPhase::Ready;
    draft
        .conds
        .set(condition::READY, ready, ready_reason, ready_message);
    draft
        .conds
        .set(condition::LOADED, ready, ready_reason, ready_message);
    let dst = workload.deployment.status.clone().unwrap_or_default();
    draft.status.replicas = Some(workload.replicas);
    draft.status.ready_replicas = Some(dst.ready_replicas.unwrap_or(0));
    draft.status.cache = Some(c.status.clone());
}

/// `status.gpu` of a model placed on a GPU.
fn record_placement(draft: &mut Draft, placement: &Placement) {
    if placement.vendor != flexinfer_crds::gpu::Vendor::Cpu {
        draft.status.gpu = Some(flexinfer_crds::v1alpha2::GpuStatus {
            vendor: Some(placement.vendor.as_str().to_owned()),
            architecture: (!placement.arch.is_empty()).then(|| placement.arch.clone()),
            memory_mb: placement.vram_mb,
            ..Default::default()
        });
    }
}

/// The event of a phase change: `Preempted` (by whom) for a model that
/// just lost its shared GPU, `Phase<phase>` otherwise.
async fn announce_phase(
    ctx: &Context,
    model: &Model,
    old_phase: Option<ModelPhase>,
    phase: ModelPhase,
    role: Option<&SharedRole>,
    message: &str,
) {
    let obj = model.object_ref(&());
    match (phase, role) {
        (ModelPhase::Preempted, Some(r)) if r.newly_preempted => {
            let by = r.status.preempted_by.clone().unwrap_or_default();
            ctx.events
                .normal(&obj, "Preempted", format!("Preempted by {by}"))
                .await
        }
        _ => {
            let from = old_phase.map_or("None".to_owned(), |p| p.to_string());
            ctx.events
                .normal(
                    &obj,
                    &format!("Phase{phase}"),
                    format!("Phase changed from {from} to {phase}: {message}"),
                )
                .await
        }
    }
}

/// When to reconcile again: at the latest after [`REQUEUE`], a second
/// after a running model turns idle, and sooner while a shared-group swap
/// settles.
fn next_reconcile(
    policy: &ServerlessPolicy,
    last_active: Option<SystemTime>,
    running: bool,
    settling: Option<Duration>,
    now: SystemTime,
) -> Duration {
    let mut next = REQUEUE;
    if let Some(wait) = idle_at(policy, last_active).and_then(|idle| idle.duration_since(now).ok())
    {
        if running && wait > Duration::ZERO {
            next = next.min(wait + Duration::from_secs(1));
        }
    }
    if let Some(r) = settling {
        next = next.min(r);
    }
    next
}

/// Deletes the model's pods that failed more than five minutes ago.
async fn prune_failed_pods(
    ctx: &Context,
    ns: &str,
    name: &str,
    now: SystemTime,
) -> Result<(), Error> {
    let pods: Api<Pod> = ctx.api(ns);
    let lp = ListParams::default()
        .labels(&labels::model_selector(name))
        .fields("status.phase=Failed");
    for pod in pods.list(&lp).await?.items {
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(from_time)
            .unwrap_or(now);
        if crate::policy::since(now, created) >= FAILED_POD_CUTOFF {
            ignore_not_found(
                pods.delete(&pod.name_any(), &DeleteParams::default())
                    .await
                    .map(|_| ()),
            )?;
        }
    }
    Ok(())
}

/// Parses the KV-cache usage ratio from a vLLM Prometheus exposition.
pub fn parse_kv_usage(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("vllm:gpu_cache_usage_perc") || l.starts_with("vllm:kv_cache_usage_perc")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

/// Scrapes the ready pods' KV-cache usage; above the high watermark the
/// model gets a `KVCachePressure` condition and a Warning event, below the
/// low watermark the pressure clears. Values in between change nothing, so
/// a steady model is not rewritten on every scrape.
async fn kv_cache_check(
    ctx: &Context,
    model: &Model,
    ns: &str,
    backend: &Backend,
    now: SystemTime,
    draft: &mut Draft,
) {
    if !matches!(backend.name, "vllm" | "vllm-omni") {
        return;
    }
    let pods: Api<Pod> = ctx.api(ns);
    let lp = ListParams::default().labels(&labels::model_selector(&model.name_any()));
    let Ok(list) = pods.list(&lp).await else {
        return;
    };
    let mut usage: Option<f64> = None;
    for pod in list.items {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let port = super::lora::pod_port(&pod, backend.port);
        let url = format!("http://{ip}:{port}/metrics");
        if let Ok(resp) = ctx.http.get(&url).send().await {
            if let Ok(body) = resp.text().await {
                if let Some(u) = parse_kv_usage(&body) {
                    usage = Some(usage.map_or(u, |m: f64| m.max(u)));
                }
            }
        }
    }
    let Some(u) = usage else { return };
    let spec = model.spec.kv_cache.clone().unwrap_or_default();
    let (high, low) = (spec.high_watermark(), spec.low_watermark());
    let was = draft.status.kv_cache.as_ref().is_some_and(|k| k.pressure);
    if u >= high && !was {
        draft.status.kv_cache = Some(KvCacheStatus {
            utilization: Some(format!("{u:.4}")),
            pressure: true,
            last_pressure_time: Some(to_time(now)),
            last_action: Some("Observed".into()),
            ..Default::default()
        });
        let msg = format!("KV-cache utilization {u:.2} is at or above {high:.2}");
        draft
            .conds
            .set(KV_CACHE_PRESSURE, true, "HighUtilization", msg.clone());
        ctx.events
            .warning(&model.object_ref(&()), "KVCachePressure", msg)
            .await;
    } else if u < low && was {
        let mut kv = draft.status.kv_cache.clone().unwrap_or_default();
        kv.pressure = false;
        kv.utilization = Some(format!("{u:.4}"));
        draft.status.kv_cache = Some(kv);
        draft.conds.set(
            KV_CACHE_PRESSURE,
            false,
            "Normal",
            format!("KV-cache utilization {u:.2} is below {low:.2}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(v: serde_json::Value) -> Deployment {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_older_selector_is_kept_while_it_selects_the_pods() {
        let desired = deployment(json!({"metadata": {"name": "m"}, "spec": {
            "selector": {"matchLabels": {"flexinfer.ai/model": "m"}},
            "template": {"metadata": {"labels": {"flexinfer.ai/model": "m", "flexinfer.ai/backend": "vllm"}}}}}));
        let old = |backend: &str| {
            deployment(json!({"metadata": {"name": "m"}, "spec": {
                "selector": {"matchLabels": {"flexinfer.ai/model": "m", "flexinfer.ai/backend": backend}},
                "template": {}}}))
        };
        // Same backend: the old selector still selects the template.
        let kept = keep_selector(&desired, &old("vllm")).unwrap();
        assert_eq!(kept.match_labels.unwrap()["flexinfer.ai/backend"], "vllm");
        // Another backend: the Deployment must be replaced.
        assert!(keep_selector(&desired, &old("llamacpp")).is_none());
    }

    #[test]
    fn immutable_pvc_fields_are_kept_and_reported() {
        let pvc = |class: Option<&str>, mode: &str, size: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "m-cache"}, "spec": {
                "storageClassName": class, "accessModes": [mode],
                "resources": {"requests": {"storage": size}}}}))
            .unwrap()
        };
        // No class asked for: the one the cluster defaulted is kept quietly.
        let (out, kept) = pvc_to_apply(
            &pvc(None, "ReadWriteOnce", "50Gi"),
            Some(&pvc(Some("standard"), "ReadWriteOnce", "50Gi")),
        );
        assert!(kept.is_empty(), "{kept:?}");
        assert_eq!(
            out.spec.unwrap().storage_class_name.as_deref(),
            Some("standard")
        );
        // A different class, mode and a smaller size cannot be applied.
        let (out, kept) = pvc_to_apply(
            &pvc(Some("fast"), "ReadWriteMany", "10Gi"),
            Some(&pvc(Some("standard"), "ReadWriteOnce", "50Gi")),
        );
        assert_eq!(kept.len(), 3, "{kept:?}");
        let spec = out.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"].0,
            "50Gi"
        );
        // A larger size is applied (expansion).
        let (out, kept) = pvc_to_apply(
            &pvc(None, "ReadWriteOnce", "100Gi"),
            Some(&pvc(Some("standard"), "ReadWriteOnce", "50Gi")),
        );
        assert!(kept.is_empty());
        assert_eq!(
            out.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
            "100Gi"
        );
    }

    #[test]
    fn a_job_s_work_ignores_its_images() {
        let job = |image: &str, repo: &str| -> Job {
            serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
                "containers": [{"name": "c", "image": image, "env": [{"name": "HF_REPO", "value": repo}]}]}}}}))
            .unwrap()
        };
        assert_eq!(
            job_work(&job("a:1", "org/m")),
            job_work(&job("a:2", "org/m"))
        );
        assert_ne!(
            job_work(&job("a:1", "org/m")),
            job_work(&job("a:1", "org/n"))
        );
    }

    #[test]
    fn refused_pods_fail_the_model_with_the_server_s_message() {
        let d = deployment(json!({"metadata": {"name": "m"}, "status": {"conditions": [
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "message": "pods \"m-1\" is forbidden: RuntimeClass \"nvidia\" not found"}]}}));
        let workload = Workload {
            deployment: d,
            cache: CacheOutcome {
                ready: true,
                ..Default::default()
            },
            replicas: 1,
            replacing: false,
        };
        let (phase, why, message) = phase_of(&workload, false);
        assert_eq!((phase, why), (ModelPhase::Failed, reason::FAILED_CREATE));
        assert!(
            message.contains("RuntimeClass \"nvidia\" not found"),
            "{message}"
        );
    }
}
