//! The v1alpha1 `ModelCache` controller: PVC and downloader Job lifecycle
//! (SharedPVC strategy; `Auto` means SharedPVC) and the cache's status.

use super::drive::{drive, retry_after};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flexinfer_crds::v1alpha1::{ModelCache, ModelCachePhase, ModelCacheStatus, StorageStrategy};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use super::apply::apply_owned;
use super::conditions::Conditions;
use super::{owned_objects, Context, Error, REQUEUE};
use crate::desired::model_cache as builders;

/// Field manager of the ModelCache controller.
pub const MANAGER: &str = "flexinfer-modelcache-controller";

/// Runs the ModelCache controller until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let controller = Controller::new(ctx.watched_api::<ModelCache>(), watcher::Config::default())
        .owns(ctx.watched_api::<Job>(), owned_objects());
    let error_policy = retry_after("modelcache", Duration::from_secs(5));
    drive(
        controller,
        reconcile,
        error_policy,
        ctx,
        shutdown,
        "modelcache",
    )
    .await;
}

/// Reconciles one ModelCache.
pub async fn reconcile(cache: Arc<ModelCache>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(cache, ctx.clone()).await;
    ctx.metrics
        .observe("modelcache", start, &result, Error::reason);
    result
}

async fn reconcile_inner(cache: Arc<ModelCache>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cache.namespace().unwrap_or_else(|| "default".into());
    let api: Api<ModelCache> = ctx.api(&ns);
    let Some(cache) = api.get_opt(&cache.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let mut prev = cache.status.clone().unwrap_or_default();
    super::conditions::sort_conditions(&mut prev.conditions);
    let mut conds = Conditions::new(&prev.conditions, ctx.now(), cache.meta().generation);
    let mut status = ModelCacheStatus {
        last_access_time: prev.last_access_time.clone(),
        ..prev.clone()
    };
    let obj = cache.object_ref(&());
    let (phase, message) = match cache.spec.storage_strategy {
        StorageStrategy::Auto | StorageStrategy::SharedPvc => {
            if let Some(pvc) = builders::pvc(&cache) {
                let pvcs: Api<PersistentVolumeClaim> = ctx.api(&ns);
                apply_owned(&pvcs, MANAGER, &pvc).await?;
            }
            let jobs: Api<Job> = ctx.api(&ns);
            let job = apply_owned(
                &jobs,
                MANAGER,
                &builders::download_job(&cache, &ctx.settings.build),
            )
            .await?
            .object;
            let st = job.status.clone().unwrap_or_default();
            let backoff = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
            if st.succeeded.unwrap_or(0) > 0 {
                let path = format!(
                    "{}:{}",
                    builders::pvc_name(&cache),
                    builders::model_path(&cache)
                );
                status.path = Some(path.clone());
                if cache.spec.is_oci_source() {
                    status.oci_registry = flexinfer_oci::Reference::parse(&cache.spec.source)
                        .ok()
                        .map(|r| r.registry);
                    status.oci_pulled_at =
                        st.completion_time.clone().or(prev.oci_pulled_at.clone());
                }
                (
                    ModelCachePhase::Ready,
                    format!("Model cached successfully at {path}"),
                )
            } else if st.failed.unwrap_or(0) > backoff {
                (
                    ModelCachePhase::Failed,
                    "Model download job failed - check job logs for details".to_owned(),
                )
            } else {
                (
                    ModelCachePhase::Provisioning,
                    "download job running".to_owned(),
                )
            }
        }
        other => {
            let name = serde_json::to_value(other)?
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (
                ModelCachePhase::Failed,
                format!("storage strategy {name:?} not implemented"),
            )
        }
    };
    conds.set(
        "Ready",
        phase == ModelCachePhase::Ready,
        &format!("{phase:?}"),
        message.clone(),
    );
    status.phase = Some(phase);
    status.conditions = conds.into_vec();
    let mut desired = status.clone();
    desired.last_access_time = None;
    let mut current = prev.clone();
    current.last_access_time = None;
    let written = super::apply::apply_status(&api, MANAGER, &cache, &current, &desired).await?;
    if written && prev.phase != Some(phase) {
        match phase {
            ModelCachePhase::Ready => ctx.events.normal(&obj, "CacheReady", message).await,
            ModelCachePhase::Failed => ctx.events.warning(&obj, "CacheFailed", message).await,
            _ => {}
        }
    }
    Ok(match phase {
        ModelCachePhase::Ready | ModelCachePhase::Failed => Action::requeue(REQUEUE * 10),
        _ => Action::requeue(REQUEUE),
    })
}
