//! Shared helpers of the operator's integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flexinfer_crds::v1alpha2::{
    CacheSpec, CacheStrategy, GpuSpec, GpuVendor, Model, ModelSpec, ServerlessSpec,
};
use flexinfer_operator::controllers::{Context, ControllerSettings, ManualClock};
use flexinfer_testkube::TestApiServer;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;

/// Start of the test clock.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A test API server, a context on it with a manual clock, and the clock.
pub async fn setup() -> (TestApiServer, Arc<Context>, Arc<ManualClock>) {
    let server = TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::new(t0()));
    let settings = ControllerSettings {
        clock: clock.clone(),
        kv_cache_scrape: false,
        ..Default::default()
    };
    let ctx = Context::new(server.client(), settings).unwrap();
    (server, ctx, clock)
}

/// A GPU node of `vendor` (`nvidia.com/gpu` or `amd.com/gpu` capacity).
pub fn gpu_node(name: &str, resource: &str, labels: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    n.status = Some(NodeStatus {
        capacity: Some([(resource.to_owned(), Quantity("1".into()))].into()),
        ..Default::default()
    });
    n
}

/// A CPU llama.cpp model that always runs one replica.
pub fn cpu_model(name: &str) -> Model {
    Model::new(
        name,
        ModelSpec {
            backend: "llamacpp".into(),
            source: "file:///models/tiny.gguf".into(),
            serverless: Some(ServerlessSpec {
                enabled: false,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

/// A vLLM model on NVIDIA GPUs.
pub fn gpu_model(name: &str, strategy: CacheStrategy, serverless: bool) -> Model {
    Model::new(
        name,
        ModelSpec {
            backend: "vllm".into(),
            source: format!("HF://org/{name}"),
            gpu: Some(GpuSpec {
                vendor: GpuVendor::Auto,
                ..Default::default()
            }),
            serverless: Some(ServerlessSpec {
                enabled: serverless,
                ..Default::default()
            }),
            cache: Some(CacheSpec {
                strategy: Some(strategy),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

/// Creates a model in `default`.
pub async fn create(ctx: &Context, model: &Model) -> Model {
    let api: Api<Model> = Api::default_namespaced(ctx.client.clone());
    api.create(&PostParams::default(), model).await.unwrap()
}

/// Gets a model.
pub async fn get(ctx: &Context, name: &str) -> Model {
    let api: Api<Model> = Api::default_namespaced(ctx.client.clone());
    api.get(name).await.unwrap()
}

/// Reconciles the current version of `name` once.
pub async fn reconcile(ctx: &Arc<Context>, name: &str) -> Action {
    let m = get(ctx, name).await;
    flexinfer_operator::controllers::model::reconcile(Arc::new(m), ctx.clone())
        .await
        .unwrap()
}

/// Reconciles `n` times (finalizer first, then the workload).
pub async fn reconcile_n(ctx: &Arc<Context>, name: &str, n: usize) -> Action {
    let mut last = Action::await_change();
    for _ in 0..n {
        last = reconcile(ctx, name).await;
    }
    last
}

/// Sets `status.lastActiveTime` the way the gateway does (merge patch of
/// the status subresource, field manager `flexinfer-gateway`).
pub async fn touch(ctx: &Context, name: &str, at: SystemTime) {
    let api: Api<Model> = Api::default_namespaced(ctx.client.clone());
    let ts = k8s_openapi::jiff::Timestamp::try_from(at)
        .unwrap()
        .to_string();
    let pp = PatchParams {
        field_manager: Some("flexinfer-gateway".into()),
        ..Default::default()
    };
    api.patch_status(
        name,
        &pp,
        &Patch::Merge(serde_json::json!({"status": {"lastActiveTime": ts}})),
    )
    .await
    .unwrap();
}

/// Polls `check` until it returns `Some`, for at most twenty seconds.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
