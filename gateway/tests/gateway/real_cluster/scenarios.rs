//! The chart scenarios (`chart_scenarios::*::run`) on the real control
//! plane: the same user-visible steps and assertions as on the in-memory
//! API server, with kube-controller-manager making the ReplicaSets, Pods
//! and EndpointSlices and collecting the garbage, and the gateway on the
//! chart's RBAC with no request refused.

use serde_json::json;

use super::lane::RealLane;
use crate::chart_scenarios::cluster::Cluster;
use crate::chart_scenarios::{cold_start, lifecycle, restart, shared_gpu, streaming};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_cold_start_timeout_outlasts_the_gateway_default() {
    let Some(mut lane) = RealLane::install("cold-start", cold_start::values()).await else {
        return;
    };
    cold_start::run(&mut lane).await;
    lane.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_the_idle_timeout_is_not_cut() {
    let Some(mut lane) = RealLane::install("streaming", streaming::values()).await else {
        return;
    };
    streaming::run(&mut lane).await;
    lane.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_gpu_pair_swaps_on_demand_and_never_runs_both() {
    let Some(mut lane) = RealLane::install("shared-gpu", shared_gpu::values()).await else {
        return;
    };
    shared_gpu::run(&mut lane).await;
    lane.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_model_removes_its_deployment_service_pods_and_processes() {
    let Some(mut lane) = RealLane::install("lifecycle", lifecycle::values()).await else {
        return;
    };
    lifecycle::run(&mut lane).await;
    lane.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_restart_under_traffic_loses_only_in_flight_requests() {
    let Some(mut lane) = RealLane::install("restart", restart::values()).await else {
        return;
    };
    restart::run(&mut lane).await;
    lane.finish();
}

/// `kubectl delete model --cascade=foreground` returns only once the
/// Model's Deployment, ReplicaSet and Pods are gone (the garbage
/// collector waits for dependents whose owner reference blocks the
/// owner's deletion) and the pod's process has stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_deletion_of_a_model_waits_for_its_pods() {
    let Some(lane) = RealLane::install("foreground", json!({})).await else {
        return;
    };
    let model = lane.model(
        "held",
        json!({"backend": "llamacpp", "source": "file:///models/held.gguf",
               "gpu": {"vendor": "cpu"}, "serverless": {"enabled": false}}),
    );
    lane.apply(model).await;
    assert_eq!(lane.chat("held").await.status(), 200);
    assert_eq!(lane.model_processes("held").len(), 1);

    let (plane, namespace) = (lane.plane(), lane.namespace().to_owned());
    let deleted = tokio::task::spawn_blocking(move || {
        plane.kubectl(&[
            "delete",
            "models.ai.flexinfer",
            "held",
            "-n",
            &namespace,
            "--cascade=foreground",
            "--timeout=60s",
        ])
    })
    .await
    .expect("kubectl");
    if let Err(e) = deleted {
        let ns = lane.namespace();
        let show = |args: &[&str]| plane.kubectl(args).unwrap_or_else(|e| e);
        panic!(
            "kubectl delete: {e}\nModel: {}\nowned: {}\ngateway log in {}",
            show(&["get", "models.ai.flexinfer", "held", "-n", ns, "-o", "yaml"]),
            show(&[
                "get",
                "deployments,replicasets,pods,services",
                "-n",
                ns,
                "-o",
                "yaml"
            ]),
            lane.logs().display()
        );
    }
    let pods = lane.model_pods("held").await;
    assert!(
        pods.is_empty(),
        "pods left when the foreground deletion returned: {pods:?}"
    );
    assert!(
        lane.replicas("held").await.is_none(),
        "the Deployment is gone"
    );
    assert!(
        lane.model_processes("held").is_empty(),
        "the process stopped"
    );
    lane.finish();
}
