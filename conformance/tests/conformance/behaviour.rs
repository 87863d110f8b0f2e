//! Timing and fault behaviour: startup delay, pacing, concurrency queueing
//! in the metrics, injected failures, and graceful shutdown.

use crate::support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use support::{eventually, get, metric, post_json, sim};

fn chat(max_tokens: u32, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
}

#[tokio::test]
async fn startup_delay_holds_health_at_503_then_200() {
    let sim = sim(&["--startup-delay", "2s"]);
    let started = Instant::now();
    let base = sim.base_url();
    assert_eq!(get(&base, "/health").await.status(), 503);
    let response = post_json(&base, "/v1/chat/completions", &chat(1, false)).await;
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["code"], 503);
    assert_eq!(
        get(&base, "/healthz").await.status(),
        200,
        "liveness is immediate"
    );

    let ready = eventually(Duration::from_secs(4), || async {
        get(&base, "/health").await.status() == 200
    })
    .await;
    assert!(ready, "/health never turned 200");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "ready too early: {waited:?}"
    );
    assert_eq!(
        post_json(&base, "/v1/chat/completions", &chat(1, false))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn non_streaming_answers_after_ttft_plus_token_time() {
    let sim = sim(&["--ttft", "200ms", "--tokens-per-second", "20"]);
    let started = Instant::now();
    let response = post_json(&sim.base_url(), "/v1/chat/completions", &chat(5, false)).await;
    assert_eq!(response.status(), 200);
    let took = started.elapsed();
    // 200 ms to the first token, then 4 more at 50 ms each.
    assert!(took >= Duration::from_millis(390), "too fast: {took:?}");
    assert!(took < Duration::from_secs(3), "too slow: {took:?}");
}

#[tokio::test]
async fn metrics_show_running_and_waiting_under_concurrency() {
    let sim = sim(&["--max-concurrency", "2", "--tokens-per-second", "20"]);
    let base = sim.base_url();
    // Each request takes about one second (20 tokens at 20/s).
    let requests: Vec<_> = (0..5)
        .map(|_| {
            let base = base.clone();
            tokio::spawn(async move {
                post_json(&base, "/v1/chat/completions", &chat(20, false))
                    .await
                    .status()
            })
        })
        .collect();
    let saw_queue = eventually(Duration::from_millis(900), || async {
        let text = get(&base, "/metrics")
            .await
            .text()
            .await
            .unwrap_or_default();
        metric(&text, "vllm:num_requests_running") == Some(2.0)
            && metric(&text, "vllm:num_requests_waiting") == Some(3.0)
    })
    .await;
    assert!(saw_queue, "never saw running=2 waiting=3");
    let text = get(&base, "/metrics").await.text().await.expect("metrics");
    assert!(
        metric(&text, "vllm:gpu_cache_usage_perc").is_some_and(|u| u > 0.0),
        "{text}"
    );
    for request in requests {
        assert_eq!(request.await.expect("task"), 200);
    }
    let text = get(&base, "/metrics").await.text().await.expect("metrics");
    assert_eq!(metric(&text, "vllm:num_requests_running"), Some(0.0));
    assert_eq!(metric(&text, "vllm:num_requests_waiting"), Some(0.0));
    assert_eq!(metric(&text, "vllm:gpu_cache_usage_perc"), Some(0.0));
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), Some(100.0));
}

#[tokio::test]
async fn fail_after_tokens_cuts_the_stream() {
    let sim = sim(&["--fail-after-tokens", "3", "--tokens-per-second", "100"]);
    let base = sim.base_url();
    let response = post_json(&base, "/v1/chat/completions", &chat(10, true)).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    let mut failed = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the stream ended cleanly");
    let text = String::from_utf8(received).expect("utf8");
    assert!(!text.contains("[DONE]"), "{text}");
    let content_chunks = text.matches("\"content\":\"").count() - 1; // minus the role chunk
    assert_eq!(content_chunks, 3, "{text}");

    // A non-streaming request longer than the limit gets no complete answer; a shorter one does.
    let cut = support::client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat(10, false))
        .send()
        .await;
    match cut {
        Ok(response) => assert!(
            response.bytes().await.is_err(),
            "a cut response has no complete body"
        ),
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    assert_eq!(
        post_json(&base, "/v1/chat/completions", &chat(3, false))
            .await
            .status(),
        200
    );
    let text = get(&base, "/metrics").await.text().await.expect("metrics");
    assert_eq!(
        metric(&text, "flexinfer_sim_aborted_responses_total"),
        Some(2.0)
    );
}

#[tokio::test]
async fn fail_rate_answers_500() {
    let sim = sim(&["--fail-rate", "1"]);
    let response = post_json(&sim.base_url(), "/v1/chat/completions", &chat(1, false)).await;
    assert_eq!(response.status(), 500);
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["code"], 500);
    assert_eq!(
        get(&sim.base_url(), "/health").await.status(),
        200,
        "health is not failed"
    );
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_stream_finish() {
    let sim = sim(&["--tokens-per-second", "20"]);
    let response = post_json(&sim.base_url(), "/v1/chat/completions", &chat(10, true)).await;
    assert_eq!(response.status(), 200);
    let exit = tokio::task::spawn_blocking(move || sim.terminate(Duration::from_secs(10)));
    let text = response.text().await.expect("the stream completes");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let status = exit.await.expect("task").expect("terminate");
    assert!(status.success(), "{status}");
}
