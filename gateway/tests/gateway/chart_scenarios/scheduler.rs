//! With `scheduler.enabled`, model pods go to the FlexInfer scheduler.

use std::time::Duration;

use serde_json::json;

use crate::chart_scenarios::cluster::Cluster;
use crate::chart_scenarios::lane::{eventually, Lane};

/// The release runs the extender, and the operator it configures creates
/// model pods with `schedulerName: flexinfer-scheduler`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_extender_on_model_pods_name_the_flexinfer_scheduler() {
    let Some(lane) = Lane::install("scheduler", json!({"scheduler": {"enabled": true}})).await
    else {
        return;
    };
    let extender = lane
        .components
        .get("flexinfer-sched")
        .expect("the release runs flexinfer-sched");
    let health = crate::chart_scenarios::lane::fresh_client()
        .get(extender.url("http", "/healthz"))
        .send()
        .await
        .expect("extender /healthz");
    assert_eq!(health.status(), 200);

    lane.apply(lane.model(
        "placed",
        json!({"backend": "vllm", "source": "hf://org/placed",
               "gpu": {"vendor": "nvidia"}, "cache": {"strategy": "None"},
               "serverless": {"enabled": false}}),
    ))
    .await;
    let pod = tokio::time::timeout(
        Duration::from_secs(20),
        eventually("a pod of the model", Duration::from_secs(30), || async {
            lane.model_pods("placed").await.into_iter().next()
        }),
    )
    .await;
    let Ok(pod) = pod else {
        panic!("no pod of the model: {}", lane.describe("placed").await);
    };
    assert_eq!(
        pod["spec"]["schedulerName"], "flexinfer-scheduler",
        "model pods are scheduled by the chart's scheduler: {}",
        pod["spec"]
    );
}
