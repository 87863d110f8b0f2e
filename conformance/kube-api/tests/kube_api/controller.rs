use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flexinfer_crds::v1alpha2::{Model, ModelSpec};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use flexinfer_testkube::{TestApiServer, Verb};

use crate::eventually;

const MANAGER: &str = "test-model-controller";

struct Ctx {
    client: Client,
    reconciles: AtomicUsize,
}

#[derive(Debug)]
struct ReconcileError(kube::Error);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for ReconcileError {}

/// Applies an owned ConfigMap and the Model's status, both with
/// server-side apply: an unchanged Model must cause no write.
async fn reconcile(model: Arc<Model>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let ns = model.namespace().unwrap_or_default();
    let name = model.name_any();
    let owner = model.controller_owner_ref(&()).expect("model has a uid");
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-config"), "ownerReferences": [owner]},
        "data": {"backend": model.spec.backend, "source": model.spec.source},
    });
    let pp = PatchParams::apply(MANAGER).force();
    cms.patch(&format!("{name}-config"), &pp, &Patch::Apply(cm))
        .await
        .map_err(ReconcileError)?;
    let models: Api<Model> = Api::namespaced(ctx.client.clone(), &ns);
    let status = json!({
        "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
        "metadata": {"name": name},
        "status": {"phase": "Ready", "observedGeneration": model.metadata.generation},
    });
    models
        .patch_status(&name, &pp, &Patch::Apply(status))
        .await
        .map_err(ReconcileError)?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_: Arc<Model>, _: &ReconcileError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test]
async fn controller_reconciles_a_model() {
    let server = TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = server.client();
    let models: Api<Model> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    models
        .create(
            &PostParams::default(),
            &Model::new(
                "qwen",
                ModelSpec {
                    backend: "vllm".into(),
                    source: "HF://Qwen/Qwen3-8B".into(),
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    // The first status write fails: the error policy retries.
    server.fail_next(Verb::Patch, "models/status", 1, 500);

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicUsize::new(0),
    });
    let controller = Controller::new(models.clone(), watcher::Config::default())
        .owns(cms.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    let ready = eventually("model ready", || async {
        let m = models.get("qwen").await.unwrap();
        let phase = m.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str());
        (phase == Some("Ready")).then_some(m)
    })
    .await;
    assert_eq!(ready.status.unwrap().observed_generation, Some(1));
    let cm = cms.get("qwen-config").await.unwrap();
    assert_eq!(cm.data.unwrap()["backend"], "vllm");
    assert_eq!(cm.metadata.owner_references.unwrap()[0].name, "qwen");

    // Let the controller settle: its own status write triggers one more
    // reconcile, which must write nothing.
    let settled_rv = eventually("controller settles", || async {
        let before = server.resource_version();
        tokio::time::sleep(Duration::from_millis(300)).await;
        (server.resource_version() == before).then_some(before)
    })
    .await;
    assert!(ctx.reconciles.load(Ordering::SeqCst) >= 2);

    // A spec change is reconciled into the owned object.
    models
        .patch(
            "qwen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"source": "HF://Qwen/Qwen3-14B"}})),
        )
        .await
        .unwrap();
    eventually("config follows spec", || async {
        let cm = cms.get("qwen-config").await.unwrap();
        (cm.data.unwrap()["source"] == "HF://Qwen/Qwen3-14B").then_some(())
    })
    .await;
    eventually("status observes generation 2", || async {
        let m = models.get("qwen").await.unwrap();
        (m.status.and_then(|s| s.observed_generation) == Some(2)).then_some(())
    })
    .await;
    assert!(server.resource_version() > settled_rv);

    // Deleting the Model garbage-collects the owned ConfigMap.
    models
        .delete("qwen", &DeleteParams::default())
        .await
        .unwrap();
    eventually("owned config collected", || async {
        cms.get_opt("qwen-config")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    task.abort();
}
