//! A long stream keeps its model running past the idle timeout.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use super::cluster::Cluster;
use super::lane::{fresh_client, Lane};

/// Chart values: the defaults.
pub fn values() -> Value {
    json!({})
}

/// A 20 s stream of a model with a 5 s `idleTimeout` runs to its end: the
/// model keeps its pod (and the pod its process) while the stream runs.
pub async fn run(lane: &mut impl Cluster) {
    // 2 tokens/s: 40 tokens take about 20 s.
    lane.sim_flags(
        "talker",
        &["--startup-delay", "1s", "--tokens-per-second", "2"],
    );
    lane.apply(lane.model(
        "talker",
        json!({"backend": "llamacpp", "source": "file:///models/talker.gguf",
               "gpu": {"vendor": "cpu"},
               "serverless": {"enabled": true, "idleTimeout": "5s"}}),
    ))
    .await;

    let started = Instant::now();
    let resp = fresh_client()
        .post(lane.gateway_url("/v1/chat/completions"))
        .json(&json!({"model": "talker", "stream": true, "max_tokens": 40,
                      "messages": [{"role": "user", "content": "tell me a story"}]}))
        .send()
        .await
        .expect("stream request");
    assert_eq!(resp.status(), 200, "logs in {}", lane.logs().display());

    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut seen = Vec::new();
    let mut next_sample = Instant::now();
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => panic!(
                "the stream broke after {:?} ({} tokens): {e}; Deployment replicas now {:?}, \
                 pods seen {seen:?}; logs in {}",
                started.elapsed(),
                text.matches("\"content\"").count(),
                lane.replicas("talker").await,
                lane.logs().display()
            ),
        };
        text.push_str(&String::from_utf8_lossy(&chunk));
        if Instant::now() >= next_sample {
            seen.push(lane.model_processes("talker"));
            next_sample = Instant::now() + Duration::from_millis(500);
        }
    }
    let took = started.elapsed();
    let tokens = text
        .lines()
        .filter(|l| l.starts_with("data: {") && l.contains("\"content\""))
        .count();
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the stream ended without [DONE] after {took:?} and {tokens} tokens; logs in {}",
        lane.logs().display()
    );
    assert!(tokens >= 40, "{tokens} content chunks");
    assert!(took >= Duration::from_secs(18), "the stream ran {took:?}");
    let first = seen.first().cloned().unwrap_or_default();
    assert_eq!(first.len(), 1, "one pod while streaming: {first:?}");
    assert!(
        seen.iter().all(|s| *s == first),
        "the pod and its process stayed while streaming: {seen:?}"
    );
    assert_eq!(lane.replicas("talker").await, Some(1), "still scaled up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_the_idle_timeout_is_not_cut() {
    let Some(mut lane) = Lane::install("streaming", values()).await else {
        return;
    };
    run(&mut lane).await;
}
