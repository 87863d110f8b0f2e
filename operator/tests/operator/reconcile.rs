//! Model reconciler scenarios against the in-memory API server, with an
//! injected clock.

use crate::common;

use std::time::Duration;

use common::*;
use flexinfer_crds::labels;
use flexinfer_crds::v1alpha2::{CacheStrategy, Model, ModelPhase, SharedGroupState};
use flexinfer_testkube::Verb;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use serde_json::json;

fn cond<'a>(
    m: &'a Model,
    t: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    m.status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no condition {t}"))
}

async fn replicas(ctx: &flexinfer_operator::controllers::Context, name: &str) -> i32 {
    let api: Api<Deployment> = Api::default_namespaced(ctx.client.clone());
    api.get(name).await.unwrap().spec.unwrap().replicas.unwrap()
}

#[tokio::test]
async fn finalizer_added_then_cleanup_on_delete() {
    let (server, ctx, _clock) = setup().await;
    create(&ctx, &cpu_model("tiny")).await;
    assert_eq!(reconcile(&ctx, "tiny").await, Action::await_change());
    assert_eq!(
        get(&ctx, "tiny").await.finalizers(),
        [labels::MODEL_FINALIZER]
    );
    reconcile(&ctx, "tiny").await;
    let deployments: Api<Deployment> = Api::default_namespaced(ctx.client.clone());
    let services: Api<Service> = Api::default_namespaced(ctx.client.clone());
    assert!(deployments.get_opt("tiny").await.unwrap().is_some());
    let svc = services.get("tiny").await.unwrap();
    assert_eq!(
        svc.spec.unwrap().ports.unwrap()[0].name.as_deref(),
        Some("http")
    );

    let models: Api<Model> = Api::default_namespaced(ctx.client.clone());
    models
        .delete("tiny", &DeleteParams::default())
        .await
        .unwrap();
    // The finalizer holds the Model until cleanup ran.
    assert!(get(&ctx, "tiny")
        .await
        .metadata
        .deletion_timestamp
        .is_some());
    reconcile(&ctx, "tiny").await;
    assert_eq!(server.writes(Verb::Delete, "deployments"), 1);
    assert_eq!(server.writes(Verb::Delete, "services"), 1);
    assert!(models.get_opt("tiny").await.unwrap().is_none());
    assert!(deployments.get_opt("tiny").await.unwrap().is_none());
    assert!(services.get_opt("tiny").await.unwrap().is_none());
}

#[tokio::test]
async fn unknown_backend_fails_with_a_reason() {
    let (server, ctx, _clock) = setup().await;
    let mut m = cpu_model("bad");
    m.spec.backend = "tgi".into();
    create(&ctx, &m).await;
    reconcile_n(&ctx, "bad", 2).await;
    let m = get(&ctx, "bad").await;
    assert_eq!(m.phase(), Some(ModelPhase::Failed));
    let c = cond(&m, "ConfigValid");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ValidationFailed")
    );
    assert_eq!(
        m.status.unwrap().message.as_deref(),
        Some("unknown backend: tgi")
    );
    assert!(server.writes(Verb::Create, "events") >= 1);
    // No Deployment for an invalid model, and a repeat emits nothing new.
    let deployments: Api<Deployment> = Api::default_namespaced(ctx.client.clone());
    assert!(deployments.get_opt("bad").await.unwrap().is_none());
    server.reset_counters();
    reconcile(&ctx, "bad").await;
    assert_eq!(server.total_writes(), 0);
}

#[tokio::test]
async fn ambiguous_gpu_vendor_requeues_in_30s() {
    let (server, ctx, _clock) = setup().await;
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    server.insert(&gpu_node("a1", "amd.com/gpu", &[])).unwrap();
    create(&ctx, &gpu_model("amb", CacheStrategy::None, false)).await;
    reconcile(&ctx, "amb").await;
    let action = reconcile(&ctx, "amb").await;
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    let m = get(&ctx, "amb").await;
    let c = cond(&m, "Schedulable");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AmbiguousGPUVendor")
    );
    assert!(
        c.message.contains("set spec.gpu.vendor explicitly"),
        "{}",
        c.message
    );
}

/// GPU placement reads Nodes from one shared watch: repeated reconciles
/// of GPU models list Nodes once at most, and a Node added later is seen
/// through the watch.
#[tokio::test]
async fn gpu_reconciles_read_nodes_from_a_watch_not_a_list_each() {
    let (server, ctx, _clock) = setup().await;
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    create(&ctx, &gpu_model("one", CacheStrategy::None, false)).await;
    create(&ctx, &gpu_model("two", CacheStrategy::None, false)).await;
    server.reset_counters();
    for _ in 0..3 {
        reconcile(&ctx, "one").await;
        reconcile(&ctx, "two").await;
    }
    assert!(
        server.requests(Verb::List, "nodes") <= 1,
        "{} Node lists for six reconciles",
        server.requests(Verb::List, "nodes")
    );
    assert_eq!(server.requests(Verb::Watch, "nodes"), 1);
    assert_eq!(cond(&get(&ctx, "one").await, "Schedulable").status, "True");

    // An AMD node joins: the watch brings it to the next reconcile.
    server.insert(&gpu_node("a1", "amd.com/gpu", &[])).unwrap();
    eventually("the new Node seen", || async {
        reconcile(&ctx, "one").await;
        let m = get(&ctx, "one").await;
        (cond(&m, "Schedulable").reason == "AmbiguousGPUVendor").then_some(())
    })
    .await;
    assert!(server.requests(Verb::List, "nodes") <= 1);
}

#[tokio::test]
async fn cache_gating_keeps_zero_replicas_until_prefetch_succeeds() {
    let (server, ctx, _clock) = setup().await;
    server
        .insert(&gpu_node(
            "n1",
            "nvidia.com/gpu",
            &[("nvidia.com/gpu.compute.major", "8")],
        ))
        .unwrap();
    create(&ctx, &gpu_model("cached", CacheStrategy::SharedPvc, false)).await;
    reconcile_n(&ctx, "cached", 2).await;
    assert_eq!(replicas(&ctx, "cached").await, 0);
    let m = get(&ctx, "cached").await;
    assert_eq!(m.phase(), Some(ModelPhase::Pending));
    assert_eq!(cond(&m, "Cached").status, "False");
    let jobs: Api<Job> = Api::default_namespaced(ctx.client.clone());
    let job = jobs.get("cached-cache-prefetch").await.unwrap();
    assert_eq!(job.metadata.owner_references.unwrap()[0].name, "cached");
    // Still running: still gated.
    reconcile(&ctx, "cached").await;
    assert_eq!(replicas(&ctx, "cached").await, 0);

    jobs.patch_status(
        "cached-cache-prefetch",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"succeeded": 1}})),
    )
    .await
    .unwrap();
    reconcile(&ctx, "cached").await;
    assert_eq!(replicas(&ctx, "cached").await, 1);
    let m = get(&ctx, "cached").await;
    let c = cond(&m, "Cached");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "PrefetchSucceeded")
    );
    assert_eq!(
        m.status
            .as_ref()
            .unwrap()
            .gpu
            .as_ref()
            .unwrap()
            .architecture
            .as_deref(),
        Some("sm_8")
    );
    assert_ne!(cond(&m, "Ready").reason, "CacheNotReady");
}

#[tokio::test]
async fn idle_model_scales_to_min_replicas_after_idle_timeout() {
    let (_server, ctx, clock) = setup().await;
    let mut m = cpu_model("idle");
    m.spec.serverless.as_mut().unwrap().enabled = true;
    create(&ctx, &m).await;
    reconcile_n(&ctx, "idle", 2).await;
    // Never used: min replicas (0), phase Idle.
    assert_eq!(replicas(&ctx, "idle").await, 0);
    assert_eq!(get(&ctx, "idle").await.phase(), Some(ModelPhase::Idle));

    // The gateway marks activity: the model wakes.
    touch(&ctx, "idle", t0()).await;
    let action = reconcile(&ctx, "idle").await;
    assert_eq!(replicas(&ctx, "idle").await, 1);
    // The next check is no later than the 30 s requeue.
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    clock.advance(Duration::from_secs(299));
    reconcile(&ctx, "idle").await;
    assert_eq!(replicas(&ctx, "idle").await, 1);
    clock.advance(Duration::from_secs(1));
    reconcile(&ctx, "idle").await;
    assert_eq!(replicas(&ctx, "idle").await, 0);
    let m = get(&ctx, "idle").await;
    assert_eq!(m.phase(), Some(ModelPhase::Idle));
    // The operator never writes or clears the gateway's lastActiveTime.
    let last = m.status.unwrap().last_active_time.unwrap();
    assert_eq!(std::time::SystemTime::from(last.0), t0());
}

#[tokio::test]
async fn second_reconcile_of_an_unchanged_model_makes_no_write() {
    let (server, ctx, _clock) = setup().await;
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    create(&ctx, &cpu_model("steady")).await;
    create(
        &ctx,
        &gpu_model("steady-gpu", CacheStrategy::SharedPvc, false),
    )
    .await;
    reconcile_n(&ctx, "steady", 3).await;
    reconcile_n(&ctx, "steady-gpu", 3).await;
    server.reset_counters();
    reconcile(&ctx, "steady").await;
    reconcile(&ctx, "steady-gpu").await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
    // A spec change is written, then the model is steady again.
    let models: Api<Model> = Api::default_namespaced(ctx.client.clone());
    models
        .patch(
            "steady",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"args": ["--threads", "2"]}})),
        )
        .await
        .unwrap();
    server.reset_counters();
    reconcile(&ctx, "steady").await;
    assert_eq!(server.writes(Verb::Patch, "deployments"), 1);
    assert_eq!(server.writes(Verb::Patch, "services"), 0);
    server.reset_counters();
    reconcile(&ctx, "steady").await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
}

fn shared_state(m: &Model) -> Option<SharedGroupState> {
    m.status.as_ref()?.shared_group.as_ref()?.state
}

#[tokio::test]
async fn shared_group_swap_honours_the_cooldown() {
    let (server, ctx, clock) = setup().await;
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    for name in ["a", "b"] {
        let mut m = gpu_model(name, CacheStrategy::None, true);
        m.spec.gpu.as_mut().unwrap().shared = Some("g".into());
        create(&ctx, &m).await;
        reconcile(&ctx, name).await; // finalizer
    }
    // t=0: a has demand and takes the empty group.
    touch(&ctx, "a", t0()).await;
    reconcile(&ctx, "a").await;
    reconcile(&ctx, "b").await;
    assert_eq!(
        shared_state(&get(&ctx, "a").await),
        Some(SharedGroupState::Active)
    );
    assert_eq!(
        shared_state(&get(&ctx, "b").await),
        Some(SharedGroupState::Queued)
    );
    assert_eq!(replicas(&ctx, "a").await, 1);
    assert_eq!(replicas(&ctx, "b").await, 0);

    // t=130: a idle for more than the demand window; b asks: first swap.
    clock.advance(Duration::from_secs(130));
    touch(&ctx, "b", t0() + Duration::from_secs(130)).await;
    reconcile(&ctx, "a").await;
    reconcile(&ctx, "b").await;
    let a = get(&ctx, "a").await;
    assert_eq!(shared_state(&a), Some(SharedGroupState::Preempted));
    assert_eq!(a.phase(), Some(ModelPhase::Preempted));
    assert_eq!(
        shared_state(&get(&ctx, "b").await),
        Some(SharedGroupState::Active)
    );
    assert_eq!(replicas(&ctx, "a").await, 0);
    assert_eq!(replicas(&ctx, "b").await, 1);

    // t=400: b idle, a asks again, but the swap at t=130 is only 270 s ago.
    clock.advance(Duration::from_secs(270));
    touch(&ctx, "a", t0() + Duration::from_secs(400)).await;
    reconcile(&ctx, "b").await;
    reconcile(&ctx, "a").await;
    assert_eq!(
        shared_state(&get(&ctx, "b").await),
        Some(SharedGroupState::Active)
    );
    assert_ne!(
        shared_state(&get(&ctx, "a").await),
        Some(SharedGroupState::Active)
    );
    assert_eq!(replicas(&ctx, "a").await, 0);

    // t=431: the 300 s cooldown has passed: a takes the GPU back.
    clock.advance(Duration::from_secs(31));
    touch(&ctx, "a", t0() + Duration::from_secs(431)).await;
    reconcile(&ctx, "b").await;
    reconcile(&ctx, "a").await;
    assert_eq!(
        shared_state(&get(&ctx, "b").await),
        Some(SharedGroupState::Preempted)
    );
    assert_eq!(
        shared_state(&get(&ctx, "a").await),
        Some(SharedGroupState::Active)
    );
    assert_eq!(replicas(&ctx, "a").await, 1);
    assert_eq!(replicas(&ctx, "b").await, 0);
}

#[tokio::test]
async fn idle_model_keeps_min_replicas() {
    let (_server, ctx, clock) = setup().await;
    let mut m = cpu_model("warm");
    let serverless = m.spec.serverless.as_mut().unwrap();
    serverless.enabled = true;
    serverless.min_replicas = 1;
    serverless.idle_timeout = Some(kube::core::Duration::from(Duration::from_secs(60)));
    create(&ctx, &m).await;
    touch(&ctx, "warm", t0()).await;
    reconcile_n(&ctx, "warm", 2).await;
    assert_eq!(replicas(&ctx, "warm").await, 1);
    clock.advance(Duration::from_secs(61));
    reconcile(&ctx, "warm").await;
    // Idle, but minReplicas keeps one replica warm.
    assert_eq!(replicas(&ctx, "warm").await, 1);
}

#[tokio::test]
async fn defaults_from_others_cause_no_write_but_drift_is_repaired() {
    let (server, ctx, _clock) = setup().await;
    create(&ctx, &cpu_model("drift")).await;
    reconcile_n(&ctx, "drift", 3).await;
    let deployments: Api<Deployment> = Api::default_namespaced(ctx.client.clone());
    let d = deployments.get("drift").await.unwrap();
    let managers: Vec<(String, String)> = d
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("flexinfer-model-controller".into(), "Apply".into())),
        "{managers:?}"
    );
    // Fields the API server would default, written by someone else.
    let pp = PatchParams {
        field_manager: Some("kube-apiserver-defaults".into()),
        ..Default::default()
    };
    deployments
        .patch(
            "drift",
            &pp,
            &Patch::Merge(json!({"spec": {"revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                "template": {"spec": {"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}}}})),
        )
        .await
        .unwrap();
    server.reset_counters();
    reconcile(&ctx, "drift").await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
    // A managed field changed by hand is set back.
    deployments
        .patch(
            "drift",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    reconcile(&ctx, "drift").await;
    assert_eq!(replicas(&ctx, "drift").await, 1);
}
