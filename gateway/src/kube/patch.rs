//! The merge patches the gateway sends, with its field manager and a few
//! retries.

use std::time::{Duration, SystemTime};

use flexinfer_crds::v1alpha1::{GPUGroup, ModelDeployment};
use flexinfer_crds::v1alpha2::Model;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::models::{Target, TargetKind};

/// Field manager of every write the gateway makes.
pub const FIELD_MANAGER: &str = "flexinfer-gateway";

/// Attempts per patch (the first plus retries on failure).
const ATTEMPTS: u32 = 3;

/// Now, RFC 3339 in whole seconds (as Kubernetes `Time` fields are).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Runs `call` up to [`ATTEMPTS`] times, 100 ms, then 200 ms apart.
async fn retry<F, Fut>(what: &str, mut call: F) -> Result<(), kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < ATTEMPTS => {
                tracing::debug!(error = %e, attempt, "{what} failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Records activity: `status.lastActiveTime` of a Model, or
/// `status.lastAccessTime` of a ModelDeployment (status subresource).
pub async fn last_active(client: &Client, target: &Target) -> Result<(), kube::Error> {
    let now = now_rfc3339();
    let what = format!("activity patch of {}/{}", target.namespace, target.name);
    match target.kind {
        TargetKind::Model => {
            let api: Api<Model> = Api::namespaced(client.clone(), &target.namespace);
            let body = json!({"status": {"lastActiveTime": now}});
            retry(&what, || async {
                api.patch_status(&target.name, &params(), &Patch::Merge(&body))
                    .await
                    .map(drop)
            })
            .await
        }
        TargetKind::ModelDeployment => {
            let api: Api<ModelDeployment> = Api::namespaced(client.clone(), &target.namespace);
            let body = json!({"status": {"lastAccessTime": now}});
            retry(&what, || async {
                api.patch_status(&target.name, &params(), &Patch::Merge(&body))
                    .await
                    .map(drop)
            })
            .await
        }
    }
}

/// Sets a ModelDeployment's `spec.replicas` to 1.
pub async fn scale_up(client: &Client, target: &Target) -> Result<(), kube::Error> {
    let api: Api<ModelDeployment> = Api::namespaced(client.clone(), &target.namespace);
    let body = json!({"spec": {"replicas": 1}});
    let what = format!("scale-up of {}/{}", target.namespace, target.name);
    retry(&what, || async {
        api.patch(&target.name, &params(), &Patch::Merge(&body))
            .await
            .map(drop)
    })
    .await
}

/// Writes (or, with `None`, clears) the demand annotations of `model` on
/// GPUGroup `group`: `flexinfer.ai/queue.<model>` = depth and
/// `flexinfer.ai/queue-since.<model>` = when queueing began.
pub async fn demand(
    client: &Client,
    namespace: &str,
    group: &str,
    model: &str,
    value: Option<(u32, &str)>,
) -> Result<(), kube::Error> {
    let api: Api<GPUGroup> = Api::namespaced(client.clone(), namespace);
    let (depth, since) = match value {
        Some((d, s)) => (Value::from(d.to_string()), Value::from(s)),
        None => (Value::Null, Value::Null),
    };
    let mut annotations = serde_json::Map::new();
    annotations.insert(flexinfer_crds::labels::queue_annotation(model), depth);
    annotations.insert(flexinfer_crds::labels::queue_since_annotation(model), since);
    let body = json!({"metadata": {"annotations": annotations}});
    let what = format!("demand patch of GPUGroup {namespace}/{group}");
    retry(&what, || async {
        api.patch(group, &params(), &Patch::Merge(&body))
            .await
            .map(drop)
    })
    .await
}
