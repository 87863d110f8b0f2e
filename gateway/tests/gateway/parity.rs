//! The original gateway's behaviours that came last: the caller in the
//! forward-failure log, opt-in request validation, the prefix-cache
//! hit-rate header, `/debug/config`, the routing key lengths, the session
//! fallback of prefix routing and the activation backoff of local models.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    client, dead_endpoint, endpoints, error_of, free_port, pod, post_json, recorded, served_by,
    Gateway, SimProcess,
};

fn model(name: &str, routing: &str, sims: &[&SimProcess]) -> String {
    format!(
        "models:\n- name: {name}\n  routing: {routing}\n  endpoints: {}\n",
        endpoints(sims)
    )
}

/// Polls the gateway's log until `found` holds for it, for up to 5 s.
async fn log_line(gw: &Gateway, found: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = gw.log();
        if let Some(line) = log.lines().find(|l| found(l)) {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "no such log line in:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_failure_log_names_the_caller() {
    let yaml = format!(
        "models:\n- name: m\n  endpoints: [\"{}\"]\n",
        dead_endpoint(1)
    );
    let gw = Gateway::start_logged(&yaml, &[], &[("RUST_LOG", "warn")]);
    let resp = post_json(
        &gw.url("/v1/chat/completions"),
        &serde_json::to_vec(&support::chat("m")).unwrap(),
        &[
            ("x-request-id", "req-caller-7"),
            ("user-agent", "parity-client/1.2"),
            ("x-forwarded-for", "203.0.113.9, 10.0.0.1"),
        ],
    )
    .await;
    assert_eq!(resp.status(), 502);
    let line = log_line(&gw, |l| l.contains("forward to upstream failed")).await;
    for expected in [
        "req-caller-7",
        "parity-client/1.2",
        "203.0.113.9, 10.0.0.1",
        "remote_addr=\"127.0.0.1:",
    ] {
        assert!(line.contains(expected), "{expected} missing: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_milliseconds_are_readable() {
    let sim = pod("pod-a", &["m"], &[]);
    let gw = Gateway::start_logged(
        &model("m", "default", &[&sim]),
        &[],
        &[("RUST_LOG", "info")],
    );
    for _ in 0..3 {
        let body = serde_json::to_vec(&support::chat("m")).unwrap();
        let resp = post_json(&gw.url("/v1/chat/completions"), &body, &[]).await;
        assert_eq!(resp.status(), 200);
    }
    let line = log_line(&gw, |l| l.contains("elapsed_ms=")).await;
    let value = line
        .split("elapsed_ms=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default();
    let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
    assert!(
        value.parse::<f64>().is_ok() && decimals <= 1,
        "elapsed_ms={value}: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_validation_refuses_malformed_chats_before_the_engine() {
    let sim = pod("pod-a", &["m"], &[]);
    let yaml = model("m", "default", &[&sim]);
    let gw = Gateway::start(&yaml, &["--validate-requests", "true"]);
    let url = gw.url("/v1/chat/completions");
    let cases = [
        (
            json!({"model": "m"}),
            "messages is required and must not be empty",
            "messages",
        ),
        (
            json!({"model": "m", "messages": []}),
            "messages is required and must not be empty",
            "messages",
        ),
        (
            json!({"model": "m", "messages": "hello"}),
            "messages must be an array",
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": 3, "content": "x"}]}),
            "messages[0].role must be a string",
            "messages[0].role",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
            "temperature must be a number",
            "temperature",
        ),
    ];
    for (body, message, param) in cases {
        let resp = post_json(&url, &serde_json::to_vec(&body).unwrap(), &[]).await;
        let (status, _, err) = error_of(resp).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{err}");
        assert_eq!(err["error"]["code"], "validation_error", "{err}");
        assert_eq!(err["error"]["message"], message, "{err}");
        assert_eq!(err["error"]["param"], param, "{err}");
    }
    assert!(
        recorded(&sim).await.is_empty(),
        "an invalid request reached the engine"
    );
    // A valid request, and a streamed one, pass.
    let ok = post_json(&url, &serde_json::to_vec(&support::chat("m")).unwrap(), &[]).await;
    assert_eq!(ok.status(), 200);
    let mut streamed = support::chat("m");
    streamed["stream"] = json!(true);
    let resp = post_json(&url, &serde_json::to_vec(&streamed).unwrap(), &[]).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("[DONE]"));

    // Off (the default): the engine answers for itself.
    let plain = Gateway::start(&yaml, &[]);
    let body = serde_json::to_vec(&json!({"model": "m", "messages": []})).unwrap();
    let resp = post_json(&plain.url("/v1/chat/completions"), &body, &[]).await;
    let text = resp.text().await.unwrap();
    assert!(!text.contains("validation_error"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_hit_rate_header_when_asked() {
    let sim = pod("pod-a", &["m"], &[]);
    let gw = Gateway::start(
        &model("m", "default", &[&sim]),
        &["--load-scrape-interval", "100ms"],
    );
    let url = gw.url("/v1/chat/completions");
    let body = serde_json::to_vec(&json!({
        "model": "m",
        "messages": [{"role": "system", "content": "You answer questions about a long shared document. ".repeat(20)},
                     {"role": "user", "content": "hello"}],
        "max_tokens": 2
    }))
    .unwrap();
    let resp = post_json(&url, &body, &[]).await;
    assert_eq!(resp.status(), 200);
    assert!(resp
        .headers()
        .get("x-flexinfer-prefix-cache-hit-rate")
        .is_none());
    let deadline = Instant::now() + Duration::from_secs(10);
    let rate = loop {
        let resp = post_json(&url, &body, &[("x-flexinfer-want-prefix-hit", " TRUE ")]).await;
        assert_eq!(resp.status(), 200);
        if let Some(v) = resp.headers().get("x-flexinfer-prefix-cache-hit-rate") {
            break v.to_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no hit-rate header");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (whole, decimals) = rate.split_once('.').expect("a decimal rate");
    assert_eq!((whole.len(), decimals.len()), (1, 4), "{rate}");
    let value: f64 = rate.parse().unwrap();
    assert!(
        value > 0.0 && value <= 1.0,
        "the repeated prompt hits: {rate}"
    );
    // Not asked: no header, even now that a reading exists.
    let resp = post_json(&url, &body, &[]).await;
    assert!(resp
        .headers()
        .get("x-flexinfer-prefix-cache-hit-rate")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_config_redacts_every_secret() {
    let sim = pod("pod-a", &["m"], &[]);
    let gw = Gateway::start(
        &model("m", "default", &[&sim]),
        &[
            "--auth-enabled",
            "true",
            "--auth-token",
            "sk-client-secret-1,sk-client-secret-2",
            "--admin-auth-token",
            "sk-admin-secret-3",
            "--validate-requests",
            "true",
        ],
    );
    let resp = client()
        .get(format!("http://{}/debug/config", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    for secret in [
        "sk-client-secret-1",
        "sk-client-secret-2",
        "sk-admin-secret-3",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let config: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(config["authToken"], "***redacted***");
    assert_eq!(config["adminAuthToken"], "***redacted***");
    assert_eq!(config["authEnabled"], true);
    assert_eq!(config["validateRequests"], true);
    assert_eq!(config["maxQueueSize"], 100);
    assert_eq!(config["routingExplicitKeyMaxLength"], 128);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_key_lengths_are_honoured() {
    let pods: Vec<SimProcess> = ["pod-a", "pod-b", "pod-c", "pod-d"]
        .iter()
        .map(|p| pod(p, &["m"], &[]))
        .collect();
    let refs: Vec<&SimProcess> = pods.iter().collect();
    let gw = Gateway::start_logged(
        &model("m", "prefix", &refs),
        &[],
        &[
            ("PROXY_ROUTING_EXPLICIT_KEY_MAX_LENGTH", "64"),
            ("PROXY_ROUTING_SYSTEM_SEGMENT_MAX_LENGTH", "24"),
        ],
    );
    let url = gw.url("/v1/chat/completions");
    // System prompts equal in their first 24 characters share a key, hence a pod.
    let mut served = Vec::new();
    for i in 0..8 {
        let body = json!({
            "model": "m",
            "messages": [{"role": "system", "content": format!("You are a helpful model, variant {i} of many")},
                         {"role": "user", "content": "hi"}],
            "max_tokens": 2
        });
        let resp = post_json(&url, &serde_json::to_vec(&body).unwrap(), &[]).await;
        assert_eq!(resp.status(), 200);
        served.push(served_by(&resp));
    }
    assert!(served.iter().all(|p| *p == served[0]), "{served:?}");
    // An explicit key longer than 64 characters is ignored (key source
    // `canonical`, not `explicit-header`).
    let long_key = "k".repeat(100);
    let body = serde_json::to_vec(&support::chat("m")).unwrap();
    let resp = post_json(&url, &body, &[("x-flexinfer-cache-key", &long_key)]).await;
    assert_eq!(resp.status(), 200);
    let short = post_json(&url, &body, &[("x-flexinfer-cache-key", "short-key")]).await;
    assert_eq!(short.status(), 200);
    let metrics = gw.metrics().await;
    let explicit: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("flexinfer_proxy_routing_decisions_total")
                && l.contains("key_source=\"explicit-header\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(explicit, 1.0, "only the short key counts:\n{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_routing_falls_back_to_the_session_without_a_system_prompt() {
    let pods: Vec<SimProcess> = ["pod-a", "pod-b", "pod-c", "pod-d"]
        .iter()
        .map(|p| pod(p, &["m"], &[]))
        .collect();
    let refs: Vec<&SimProcess> = pods.iter().collect();
    let gw = Gateway::start(&model("m", "prefix", &refs), &[]);
    let url = gw.url("/v1/chat/completions");
    let mut served = Vec::new();
    for i in 0..8 {
        let body = json!({
            "model": "m",
            "messages": [{"role": "user", "content": format!("question number {i}: why?")}],
            "max_tokens": 2
        });
        let resp = post_json(
            &url,
            &serde_json::to_vec(&body).unwrap(),
            &[("x-session-id", "conversation-42")],
        )
        .await;
        assert_eq!(resp.status(), 200);
        served.push(served_by(&resp));
    }
    assert!(
        served.iter().all(|p| *p == served[0]),
        "one session, one pod: {served:?}"
    );
}

/// A local model whose process fails its first start: with the backoff
/// enabled the activation is tried again and the waiting request served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activation_backoff_applies_to_local_models() {
    let bin = SimProcess::binary().expect("flexinfer-sim binary");
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started-once");
    let port = free_port();
    let script = format!(
        "if [ -e '{marker}' ]; then exec '{bin}' --port {port} --model flaky --pod-name flaky; fi; \
         touch '{marker}'; exit 3",
        marker = marker.display(),
        bin = bin.display()
    );
    let yaml = format!(
        "models:\n  - name: flaky\n    command: /bin/sh\n    args: [\"-c\", {script:?}]\n    port: {port}\n"
    );
    let gw = Gateway::start_local(
        &yaml,
        &[
            "--backoff-enabled",
            "true",
            "--backoff-initial-wait",
            "200ms",
            "--backoff-max-wait",
            "400ms",
        ],
    );
    let body = serde_json::to_vec(&support::chat("flaky")).unwrap();
    let resp = post_json(&gw.url("/v1/chat/completions"), &body, &[]).await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(marker.exists());
    let metrics = gw.metrics().await;
    assert!(
        support::metric_value(
            &metrics,
            "flexinfer_proxy_activation_retries_total{model=\"flaky\"}"
        ) >= 1.0,
        "{metrics}"
    );
}
