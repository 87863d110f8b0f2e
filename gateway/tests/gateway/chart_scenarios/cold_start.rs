//! A Model's own `coldStartTimeout` outlasts the gateway's default.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::chart_scenarios::lane::{chat, model, Lane};

/// The chart sets the gateway's default cold-start wait to 2 s; a Model
/// that loads in 5 s and allows 10 s gets its first request answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_cold_start_timeout_outlasts_the_gateway_default() {
    let values = json!({"gateway": {"activation": {"coldStartTimeout": "2s"}}});
    let Some(lane) = Lane::install("cold-start", values).await else {
        return;
    };
    lane.sim_flags("slow-load", &["--startup-delay", "5s"]);
    lane.apply(model(
        "slow-load",
        json!({"backend": "vllm", "source": "hf://org/slow-load",
               "gpu": {"vendor": "nvidia"}, "cache": {"strategy": "None"},
               "serverless": {"enabled": true, "idleTimeout": "5m", "coldStartTimeout": "10s"}}),
    ))
    .await;

    let started = Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(20), chat(&lane, "slow-load"))
        .await
        .unwrap_or_else(|_| panic!("no answer in 20 s: {}", lane.describe("slow-load")));
    let waited = started.elapsed();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(
        status,
        200,
        "first request after {waited:?}: {body}; {}",
        lane.describe("slow-load")
    );
    assert!(
        body["choices"][0]["message"]["content"].is_string(),
        "{body}"
    );
    assert!(
        waited >= Duration::from_secs(4),
        "the request waited for the 5 s load ({waited:?})"
    );
    let pods = lane.model_pods("slow-load");
    assert_eq!(pods.len(), 1, "one pod serves the model");
}
