//! A Model's own `coldStartTimeout` outlasts the gateway's default.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::Cluster;
use super::lane::Lane;

/// Chart values: the gateway's default cold-start wait is 2 s.
pub fn values() -> Value {
    json!({"gateway": {"activation": {"coldStartTimeout": "2s"}}})
}

/// A Model that loads in 5 s and allows 10 s gets its first request
/// answered, although the gateway's default wait is 2 s.
pub async fn run(lane: &mut impl Cluster) {
    lane.sim_flags("slow-load", &["--startup-delay", "5s"]);
    lane.apply(lane.model(
        "slow-load",
        json!({"backend": "vllm", "source": "hf://org/slow-load",
               "gpu": {"vendor": "nvidia"}, "cache": {"strategy": "None"},
               "serverless": {"enabled": true, "idleTimeout": "5m", "coldStartTimeout": "10s"}}),
    ))
    .await;

    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(20), lane.chat("slow-load")).await;
    let Ok(resp) = answer else {
        panic!("no answer in 20 s: {}", lane.describe("slow-load").await);
    };
    let waited = started.elapsed();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(
        status,
        200,
        "first request after {waited:?}: {body}; {}",
        lane.describe("slow-load").await
    );
    assert!(
        body["choices"][0]["message"]["content"].is_string(),
        "{body}"
    );
    assert!(
        waited >= Duration::from_secs(4),
        "the request waited for the 5 s load ({waited:?})"
    );
    let pods = lane.model_pods("slow-load").await;
    assert_eq!(pods.len(), 1, "one pod serves the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_cold_start_timeout_outlasts_the_gateway_default() {
    let Some(mut lane) = Lane::install("cold-start", values()).await else {
        return;
    };
    run(&mut lane).await;
}
