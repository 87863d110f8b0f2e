//! Upstream failures: refused connections (502, or a retry on another
//! endpoint), slow backends (504) and models without endpoints (503).

use crate::support;

use std::time::{Duration, Instant};

use support::{
    assert_openai_error, endpoints, error_of, metric_value, pod, post_json, served_by, Gateway,
};

fn chat_body(model: &str) -> Vec<u8> {
    serde_json::to_vec(&support::chat(model)).unwrap()
}

/// An address nothing listens on, quoted for YAML.
fn dead_endpoint() -> String {
    format!("\"{}\"", support::dead_endpoint(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_is_502() {
    let yaml = format!("models:\n- name: m\n  endpoints: [{}]\n", dead_endpoint());
    let gw = Gateway::start(&yaml, &[]);

    // Buffered (JSON) and streamed-through requests alike.
    let started = Instant::now();
    let buffered = post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    let streamed = support::client()
        .get(gw.url("/model/m/v1/models"))
        .send()
        .await
        .unwrap();
    for resp in [buffered, streamed] {
        assert!(resp.headers().contains_key("x-request-id"));
        let (status, _, body) = error_of(resp).await;
        assert_eq!(status, 502);
        let err = assert_openai_error(&body, "bad_gateway");
        assert_eq!(err["type"], "upstream_error");
    }
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_is_retried_on_a_live_one() {
    let live = pod("pod-live", &["m"], &[]);
    for routing in ["default", "least-loaded", "session-affinity"] {
        let yaml = format!(
            "models:\n- name: m\n  routing: {routing}\n  endpoints: [{}, \"{}\"]\n",
            dead_endpoint(),
            live.base_url()
        );
        let gw = Gateway::start(&yaml, &[]);
        let url = gw.url("/v1/chat/completions");
        for i in 0..20 {
            let session = format!("session-{i}");
            let resp = post_json(&url, &chat_body("m"), &[("x-session-id", &session)]).await;
            assert_eq!(resp.status(), 200, "{routing}: request {i}");
            assert_eq!(served_by(&resp), "pod-live");
            let resp = support::client()
                .get(gw.url("/model/m/v1/models"))
                .header("x-session-id", &session)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{routing}: streamed request {i}");
        }
        // The dead endpoint was really tried (and skipped), not avoided.
        let retries = metric_value(
            &gw.metrics().await,
            "flexinfer_proxy_upstream_retries_total{model=\"m\",reason=\"conn_refused\"}",
        );
        assert!(
            retries > 0.0,
            "{routing}: the dead endpoint was never tried"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_dead_is_502_after_trying_each() {
    let yaml = format!(
        "models:\n- name: m\n  endpoints: [{}, {}, {}]\n",
        dead_endpoint(),
        dead_endpoint(),
        dead_endpoint()
    );
    let gw = Gateway::start(&yaml, &["--upstream-max-attempts", "3"]);
    let resp = post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 502);
    assert_openai_error(&body, "bad_gateway");
    let retries = metric_value(
        &gw.metrics().await,
        "flexinfer_proxy_upstream_retries_total{model=\"m\"",
    );
    assert_eq!(retries, 2.0, "three attempts, two of them retries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_upstream_is_504() {
    let sim = pod("pod-slow", &["m"], &["--ttft", "5s"]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(&yaml, &["--upstream-read-timeout", "300ms"]);

    let started = Instant::now();
    let resp = post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    let took = started.elapsed();
    let (status, headers, body) = error_of(resp).await;
    assert_eq!(status, 504);
    assert!(headers.contains_key("x-request-id"));
    let err = assert_openai_error(&body, "timeout");
    assert_eq!(err["type"], "timeout_error");
    assert!(
        (Duration::from_millis(300)..Duration::from_secs(3)).contains(&took),
        "504 after {took:?}"
    );
    // The request did reach the backend: this was not a connect failure.
    assert_eq!(support::recorded(&sim).await.len(), 1);

    // After a timeout the answer is whole and says the connection closes
    // (the request went upstream; the client opens a new connection).
    let request = support::raw_post("/v1/chat/completions", &chat_body("m"), "");
    for _ in 0..2 {
        let (status, body) = support::answered_then_closed(gw.addr, &request).await;
        assert_eq!(status, 504, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_openai_error(&body, "timeout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_without_endpoints_is_503() {
    let gw = Gateway::start("models:\n- name: m\n  endpoints: []\n", &[]);
    for resp in [
        post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await,
        support::client()
            .get(gw.url("/model/m/v1/models"))
            .send()
            .await
            .unwrap(),
    ] {
        let (status, _, body) = error_of(resp).await;
        assert_eq!(status, 503);
        assert_openai_error(&body, "service_unavailable");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_are_answered_in_full_on_a_kept_alive_connection() {
    let yaml = format!(
        "models:\n- name: empty\n  endpoints: []\n- name: dead\n  endpoints: [{}]\n",
        dead_endpoint()
    );
    let gw = Gateway::start(&yaml, &[]);
    // Answers decided before any upstream is tried, many in a row on one
    // connection: each complete, with its own status and OpenAI body, and
    // the connection still open for the next.
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for i in 0..30 {
        let (model, status, code) = match i % 2 {
            0 => ("empty", 503, "service_unavailable"),
            _ => ("nope", 404, "model_not_found"),
        };
        requests.push(support::raw_post(
            "/v1/chat/completions",
            &chat_body(model),
            &format!("X-Request-ID: req-{i}\r\n"),
        ));
        expected.push((status, code, format!("req-{i}")));
    }
    let answers = support::keepalive_exchange(gw.addr, &requests).await;
    for (i, (answer, (status, code, id))) in answers.iter().zip(&expected).enumerate() {
        assert_eq!(answer.status, *status, "request {i}: {answer:?}");
        let body: serde_json::Value = serde_json::from_str(&answer.body)
            .unwrap_or_else(|e| panic!("request {i}: {e}: {answer:?}"));
        assert_openai_error(&body, code);
        assert!(
            answer
                .head
                .to_ascii_lowercase()
                .contains(&format!("x-request-id: {id}")),
            "request {i}: {answer:?}"
        );
    }
    // After the upstream failed, the answer is whole and announces that
    // the connection closes; the next connection is served.
    let request = support::raw_post("/v1/chat/completions", &chat_body("dead"), "");
    for _ in 0..3 {
        let (status, body) = support::answered_then_closed(gw.addr, &request).await;
        assert_eq!(status, 502, "{body}");
        assert_openai_error(&serde_json::from_str(&body).unwrap(), "bad_gateway");
    }
}
