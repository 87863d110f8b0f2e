//! v1alpha1 controllers against the in-memory API server: GPUGroup swaps on
//! the gateway's demand annotations, ModelDeployment through the Model
//! workload path, ModelCache PVC and download Job.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flexinfer_crds::labels;
use flexinfer_crds::v1alpha1::{
    GPUGroup, GPUGroupMember, GPUGroupSpec, MemberState, ModelCache, ModelCachePhase,
    ModelCacheSpec, ModelDeployment, ModelDeploymentPhase, ModelDeploymentSpec,
};
use flexinfer_operator::controllers::{gpu_group, model_cache, model_deployment, Context};
use flexinfer_testkube::Verb;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use serde_json::json;

fn rfc3339(t: std::time::SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .unwrap()
        .to_string()
}

async fn md_replicas(ctx: &Context, name: &str) -> i32 {
    let api: Api<ModelDeployment> = Api::default_namespaced(ctx.client.clone());
    api.get(name).await.unwrap().spec.replicas
}

async fn reconcile_group(ctx: &Arc<Context>) -> Action {
    let api: Api<GPUGroup> = Api::default_namespaced(ctx.client.clone());
    let g = api.get("g").await.unwrap();
    gpu_group::reconcile(Arc::new(g), ctx.clone())
        .await
        .unwrap()
}

async fn annotate(ctx: &Context, model: &str, depth: &str, since: std::time::SystemTime) {
    let api: Api<GPUGroup> = Api::default_namespaced(ctx.client.clone());
    let patch = json!({"metadata": {"annotations": {
        labels::queue_annotation(model): depth,
        labels::queue_since_annotation(model): rfc3339(since),
    }}});
    api.patch("g", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn gpu_group_swaps_on_demand_annotations_with_anti_thrashing() {
    let (server, ctx, clock) = setup().await;
    let mds: Api<ModelDeployment> = Api::default_namespaced(ctx.client.clone());
    for (name, replicas) in [("a", 1), ("b", 0)] {
        let mut spec = ModelDeploymentSpec::new("vllm", format!("org/{name}"));
        spec.replicas = replicas;
        spec.gpu_group_ref = Some("g".into());
        mds.create(&PostParams::default(), &ModelDeployment::new(name, spec))
            .await
            .unwrap();
    }
    let groups: Api<GPUGroup> = Api::default_namespaced(ctx.client.clone());
    let spec = GPUGroupSpec {
        models: vec![GPUGroupMember::new("a"), GPUGroupMember::new("b")],
        ..serde_json::from_value(json!({"models": [{"name": "a"}]})).unwrap()
    };
    groups
        .create(&PostParams::default(), &GPUGroup::new("g", spec))
        .await
        .unwrap();
    groups
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"activeModel": "a"}})),
        )
        .await
        .unwrap();

    // b queues 5 requests for 20 s (threshold 3, hysteresis 10 s): swap.
    annotate(&ctx, "b", "5", t0() - Duration::from_secs(20)).await;
    reconcile_group(&ctx).await;
    assert_eq!(md_replicas(&ctx, "a").await, 0);
    assert_eq!(md_replicas(&ctx, "b").await, 1);
    let st = groups.get("g").await.unwrap().status.unwrap();
    assert_eq!(st.active_model.as_deref(), Some("b"));
    assert_eq!(st.swap_count, Some(1));
    assert_eq!(
        st.last_swap_reason.as_deref(),
        Some("demand: queue=5, priority=100")
    );
    let a = st.model_statuses.iter().find(|s| s.name == "a").unwrap();
    assert_eq!(
        (a.state, a.preempted_by.as_deref()),
        (Some(MemberState::Preempted), Some("b"))
    );

    // a wants it back at once: blocked by the minimum run duration (30 s).
    annotate(&ctx, "a", "5", t0() - Duration::from_secs(20)).await;
    let action = reconcile_group(&ctx).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    assert_eq!(md_replicas(&ctx, "b").await, 1);
    // At +31 s the run duration passed but a is cooling down (60 s).
    clock.advance(Duration::from_secs(31));
    reconcile_group(&ctx).await;
    assert_eq!(
        groups
            .get("g")
            .await
            .unwrap()
            .status
            .unwrap()
            .active_model
            .as_deref(),
        Some("b")
    );
    // At +61 s a takes over.
    clock.advance(Duration::from_secs(30));
    reconcile_group(&ctx).await;
    let st = groups.get("g").await.unwrap().status.unwrap();
    assert_eq!(st.active_model.as_deref(), Some("a"));
    assert_eq!(st.swap_count, Some(2));
    assert_eq!(md_replicas(&ctx, "a").await, 1);
    assert_eq!(md_replicas(&ctx, "b").await, 0);

    // Nothing changed: nothing written.
    server.reset_counters();
    reconcile_group(&ctx).await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
}

#[tokio::test]
async fn model_deployment_is_served_through_the_model_path() {
    let (server, ctx, _clock) = setup().await;
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    let mds: Api<ModelDeployment> = Api::default_namespaced(ctx.client.clone());
    let mut spec = ModelDeploymentSpec::new("vllm", "org/legacy");
    spec.service_labels = vec!["chat".into()];
    mds.create(
        &PostParams::default(),
        &ModelDeployment::new("legacy", spec),
    )
    .await
    .unwrap();
    let reconcile = || async {
        let md = mds.get("legacy").await.unwrap();
        model_deployment::reconcile(Arc::new(md), ctx.clone())
            .await
            .unwrap()
    };
    reconcile().await;
    let deployments: Api<Deployment> = Api::default_namespaced(ctx.client.clone());
    let d = deployments.get("legacy").await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(1));
    let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ModelDeployment", "legacy")
    );
    let services: Api<Service> = Api::default_namespaced(ctx.client.clone());
    let svc = services.get("legacy").await.unwrap();
    assert_eq!(
        svc.metadata.annotations.unwrap()[labels::SERVICE_LABELS],
        "chat"
    );
    let st = mds.get("legacy").await.unwrap().status.unwrap();
    assert_eq!(st.phase, Some(ModelDeploymentPhase::Pending));
    assert_eq!(
        st.endpoints.unwrap().internal.as_deref(),
        Some("http://legacy.default.svc:8000")
    );
    // The gateway's lastAccessTime, older than the idle timeout: scaled down.
    let old = rfc3339(t0() - Duration::from_secs(301));
    mds.patch_status(
        "legacy",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"lastAccessTime": old}})),
    )
    .await
    .unwrap();
    reconcile().await;
    assert_eq!(mds.get("legacy").await.unwrap().spec.replicas, 0);
    reconcile().await;
    assert_eq!(
        deployments
            .get("legacy")
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(0)
    );
    assert_eq!(
        mds.get("legacy").await.unwrap().status.unwrap().phase,
        Some(ModelDeploymentPhase::Idle)
    );
    server.reset_counters();
    reconcile().await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
}

#[tokio::test]
async fn model_cache_pvc_and_download_job_lifecycle() {
    let (server, ctx, _clock) = setup().await;
    let caches: Api<ModelCache> = Api::default_namespaced(ctx.client.clone());
    caches
        .create(
            &PostParams::default(),
            &ModelCache::new("qwen", ModelCacheSpec::new("HF://Qwen/Qwen3-8B")),
        )
        .await
        .unwrap();
    let reconcile = || async {
        let c = caches.get("qwen").await.unwrap();
        model_cache::reconcile(Arc::new(c), ctx.clone())
            .await
            .unwrap()
    };
    reconcile().await;
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(ctx.client.clone());
    let pvc = pvcs.get("qwen").await.unwrap();
    assert_eq!(pvc.spec.unwrap().access_modes.unwrap(), ["ReadWriteMany"]);
    let jobs: Api<Job> = Api::default_namespaced(ctx.client.clone());
    assert!(jobs.get_opt("qwen-downloader").await.unwrap().is_some());
    assert_eq!(
        caches.get("qwen").await.unwrap().status.unwrap().phase,
        Some(ModelCachePhase::Provisioning)
    );
    jobs.patch_status(
        "qwen-downloader",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"succeeded": 1}})),
    )
    .await
    .unwrap();
    reconcile().await;
    let st = caches.get("qwen").await.unwrap().status.unwrap();
    assert_eq!(st.phase, Some(ModelCachePhase::Ready));
    assert_eq!(st.path.as_deref(), Some("qwen:qwen"));
    server.reset_counters();
    reconcile().await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
    assert_eq!(server.writes(Verb::Create, "events"), 0);
}
