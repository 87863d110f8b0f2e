//! Two Models sharing one GPU (`spec.gpu.shared`) take turns.

use std::time::Duration;

use serde_json::{json, Value};

use super::cluster::Cluster;
use super::lane::{eventually, fresh_client, Lane};
use crate::support::served_by;

/// Chart values: the defaults.
pub fn values() -> Value {
    json!({})
}

fn member(lane: &impl Cluster, name: &str, priority: i32) -> Value {
    lane.model(
        name,
        json!({"backend": "vllm", "source": format!("hf://org/{name}"),
               "gpu": {"vendor": "nvidia", "shared": "pair", "priority": priority,
                       "swapCooldown": "1s"},
               "serverless": {"enabled": true, "idleTimeout": "5m", "coldStartTimeout": "20s"}}),
    )
}

/// Runs a chat request for `model` in the background while sampling the
/// kubelet's processes every 10 ms; returns the status, the serving pod
/// and the samples in which both members had a running process.
async fn request_sampling(lane: &impl Cluster, model: &str) -> (u16, String, Vec<String>) {
    let url = lane.gateway_url("/v1/chat/completions");
    let body = crate::support::chat(model);
    let request = tokio::spawn(async move {
        let resp = fresh_client()
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("chat");
        (resp.status().as_u16(), served_by(&resp))
    });
    let mut both = Vec::new();
    while !request.is_finished() {
        let running: Vec<String> = lane
            .pods()
            .into_iter()
            .filter(|p| p.pid.is_some())
            .map(|p| p.name)
            .collect();
        let a = running.iter().any(|n| n.starts_with("pair-a-"));
        let b = running.iter().any(|n| n.starts_with("pair-b-"));
        if a && b {
            both.push(running.join(","));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, pod) = request.await.expect("request task");
    (status, pod, both)
}

/// A request for the higher-priority member swaps it in on demand: the
/// other member is stopped first, so the two never run at once, and both
/// requests are answered by the right model.
pub async fn run(lane: &mut impl Cluster) {
    lane.apply(member(lane, "pair-a", 10)).await;
    lane.apply(member(lane, "pair-b", 20)).await;

    let (status, pod, both) = request_sampling(lane, "pair-a").await;
    assert_eq!(status, 200, "pair-a; logs in {}", lane.logs().display());
    assert!(pod.starts_with("pair-a-"), "served by {pod}");
    assert!(both.is_empty(), "both members ran at once: {both:?}");

    let (status, pod, both) = request_sampling(lane, "pair-b").await;
    assert_eq!(status, 200, "pair-b; logs in {}", lane.logs().display());
    assert!(pod.starts_with("pair-b-"), "served by {pod}");
    assert!(both.is_empty(), "both members ran at once: {both:?}");

    eventually("pair-a stopped", Duration::from_secs(10), || async {
        let stopped =
            lane.replicas("pair-a").await == Some(0) && lane.model_processes("pair-a").is_empty();
        stopped.then_some(())
    })
    .await;
    assert_eq!(lane.model_processes("pair-b").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_gpu_pair_swaps_on_demand_and_never_runs_both() {
    let Some(mut lane) = Lane::install("shared-gpu", values()).await else {
        return;
    };
    run(&mut lane).await;
}
