//! The v1alpha2 `LoRAAdapter` controller: hot-loads an adapter into every
//! ready pod of its vLLM model (`/v1/load_lora_adapter`), unloads it on
//! deletion (`/v1/unload_lora_adapter`, behind the `flexinfer.ai/lora-cleanup`
//! finalizer), and reports per-pod results in the status.

use super::drive::{drive, retry_after};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flexinfer_crds::labels;
use flexinfer_crds::v1alpha2::{
    LoRAAdapter, LoRAAdapterPhase, LoRAAdapterStatus, Model, VLLM_LOAD_LORA_PATH,
    VLLM_UNLOAD_LORA_PATH,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::conditions::Conditions;
use super::{Context, Error, REQUEUE};

/// Field manager of the LoRAAdapter controller.
pub const MANAGER: &str = "flexinfer-lora-controller";

/// Runs the LoRAAdapter controller until `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let controller = Controller::new(ctx.watched_api::<LoRAAdapter>(), watcher::Config::default());
    let error_policy = retry_after("loraadapter", Duration::from_secs(10));
    drive(
        controller,
        reconcile,
        error_policy,
        ctx,
        shutdown,
        "loraadapter",
    )
    .await;
}

/// Reconciles one LoRAAdapter.
pub async fn reconcile(lora: Arc<LoRAAdapter>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let ns = lora.namespace().unwrap_or_else(|| "default".into());
    let api: Api<LoRAAdapter> = ctx.api(&ns);
    let result = match api.get_opt(&lora.name_any()).await {
        Ok(None) => Ok(Action::await_change()),
        Ok(Some(fresh)) => {
            let c = ctx.clone();
            finalizer(
                &api,
                labels::LORA_FINALIZER,
                Arc::new(fresh),
                |event| async move {
                    match event {
                        FinalizerEvent::Apply(l) => load(l, c).await,
                        FinalizerEvent::Cleanup(l) => unload(l, c).await,
                    }
                },
            )
            .await
            .map_err(|e| Error::Finalizer(e.to_string()))
        }
        Err(e) => Err(e.into()),
    };
    ctx.metrics.observe("lora", start, &result, Error::reason);
    result
}

/// The pod's `http` container port, else `default`.
pub fn pod_port(pod: &Pod, default: i32) -> i32 {
    pod.spec
        .as_ref()
        .and_then(|s| {
            s.containers.iter().find_map(|c| {
                c.ports
                    .as_ref()?
                    .iter()
                    .find(|p| p.name.as_deref() == Some("http"))
                    .map(|p| p.container_port)
            })
        })
        .unwrap_or(default)
}

/// Ready pods of the model as (name, `http://ip:port`).
async fn ready_pods(
    ctx: &Context,
    ns: &str,
    model: &str,
    port: i32,
) -> Result<Vec<(String, String)>, Error> {
    let pods: Api<Pod> = ctx.api(ns);
    let lp = ListParams::default().labels(&labels::model_selector(model));
    Ok(pods
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            Some((p.name_any(), format!("http://{ip}:{}", pod_port(&p, port))))
        })
        .collect())
}

/// Whether the pod's `/v1/models` already lists the adapter.
async fn is_loaded(ctx: &Context, base: &str, adapter: &str) -> bool {
    let Ok(resp) = ctx.http.get(format!("{base}/v1/models")).send().await else {
        return false;
    };
    let Ok(body) = resp.json::<serde_json::Value>().await else {
        return false;
    };
    body["data"]
        .as_array()
        .is_some_and(|d| d.iter().any(|m| m["id"] == adapter))
}

async fn load(lora: Arc<LoRAAdapter>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = lora.namespace().unwrap_or_else(|| "default".into());
    let models: Api<Model> = ctx.api(&ns);
    let adapter = lora.spec.adapter_name.clone();
    let (phase, loaded, total, message) = match models.get_opt(&lora.spec.model_ref).await? {
        None => (
            LoRAAdapterPhase::Pending,
            0,
            0,
            format!("model {} not found", lora.spec.model_ref),
        ),
        Some(model) => {
            let backend = flexinfer_crds::backend::get(&model.spec.backend).ok();
            if !backend.is_some_and(|b| b.supports_lora) {
                (
                    LoRAAdapterPhase::Failed,
                    0,
                    0,
                    format!(
                        "backend {} of model {} does not support LoRA adapters",
                        model.spec.backend,
                        model.name_any()
                    ),
                )
            } else {
                let port = backend.map_or(8000, |b| b.port);
                let pods = ready_pods(&ctx, &ns, &model.name_any(), port).await?;
                let mut results = Vec::new();
                let mut loaded = 0;
                for (pod, base) in &pods {
                    if is_loaded(&ctx, base, &adapter).await {
                        loaded += 1;
                        results.push(format!("{pod}: loaded"));
                        continue;
                    }
                    let body = json!({"lora_name": adapter, "lora_path": lora.spec.source.uri});
                    match ctx
                        .http
                        .post(format!("{base}{VLLM_LOAD_LORA_PATH}"))
                        .json(&body)
                        .send()
                        .await
                    {
                        Ok(r) if r.status().is_success() => {
                            loaded += 1;
                            results.push(format!("{pod}: loaded"));
                        }
                        Ok(r) => results.push(format!(
                            "{pod}: load failed with HTTP {}",
                            r.status().as_u16()
                        )),
                        Err(e) => results.push(format!("{pod}: {e}")),
                    }
                }
                let total = pods.len() as i32;
                let phase = if total > 0 && loaded == total {
                    LoRAAdapterPhase::Loaded
                } else {
                    LoRAAdapterPhase::Pending
                };
                let msg = if pods.is_empty() {
                    format!("no ready replicas of model {}", model.name_any())
                } else {
                    results.join("; ")
                };
                (phase, loaded, total, msg)
            }
        }
    };
    let mut prev = lora.status.clone().unwrap_or_default();
    super::conditions::sort_conditions(&mut prev.conditions);
    let mut conds = Conditions::new(&prev.conditions, ctx.now(), lora.meta().generation);
    conds.set(
        "Ready",
        phase == LoRAAdapterPhase::Loaded,
        &format!("{phase:?}"),
        message.clone(),
    );
    let status = LoRAAdapterStatus {
        phase: Some(phase),
        conditions: conds.into_vec(),
        loaded_replicas: Some(loaded),
        total_replicas: Some(total),
        message: Some(message.clone()),
    };
    let api: Api<LoRAAdapter> = ctx.api(&ns);
    let written = super::apply::apply_status(&api, MANAGER, &lora, &prev, &status).await?;
    if written && prev.phase != Some(phase) {
        let obj = lora.object_ref(&());
        match phase {
            LoRAAdapterPhase::Failed => ctx.events.warning(&obj, "LoRAFailed", message).await,
            LoRAAdapterPhase::Loaded => ctx.events.normal(&obj, "LoRALoaded", message).await,
            _ => {}
        }
    }
    Ok(Action::requeue(REQUEUE))
}

async fn unload(lora: Arc<LoRAAdapter>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = lora.namespace().unwrap_or_else(|| "default".into());
    let models: Api<Model> = ctx.api(&ns);
    if let Some(model) = models.get_opt(&lora.spec.model_ref).await? {
        let port = flexinfer_crds::backend::port(&model.spec.backend);
        for (pod, base) in ready_pods(&ctx, &ns, &model.name_any(), port).await? {
            let body = json!({"lora_name": lora.spec.adapter_name});
            let url = format!("{base}{VLLM_UNLOAD_LORA_PATH}");
            if let Err(e) = ctx.http.post(url).json(&body).send().await {
                tracing::warn!(pod, error = %e, "unloading LoRA adapter failed");
            }
        }
    }
    Ok(Action::await_change())
}
