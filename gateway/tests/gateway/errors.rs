//! Answers the gateway gives itself: 401, 429, 404 and 400, each with an
//! OpenAI-shaped body and the headers clients act on, and none of them
//! reaching a backend.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{assert_openai_error, endpoints, error_of, pod, post_json, Gateway};

fn chat_body(model: &str) -> Vec<u8> {
    serde_json::to_vec(&support::chat(model)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_api_key_is_401() {
    let sim = pod("pod-a", &["m"], &[]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(
        &yaml,
        &["--auth-enabled", "true", "--auth-token", "key-one,key-two"],
    );
    let url = gw.url("/v1/chat/completions");
    let body = chat_body("m");

    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer key-one-and-more"),
        Some("Basic a2V5LW9uZQ=="),
        Some("key-one"),
        Some("Bearer "),
    ] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let resp = post_json(&url, &body, &headers).await;
        let (status, headers, body) = error_of(resp).await;
        assert_eq!(status, 401, "{auth:?}");
        let challenge = headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no WWW-Authenticate for {auth:?}"));
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        let err = assert_openai_error(&body, "invalid_api_key");
        assert_eq!(err["type"], "invalid_request_error");
    }
    // The model listing is not public either.
    let resp = support::client()
        .get(gw.url("/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(resp.headers().contains_key("www-authenticate"));
    assert!(
        support::recorded(&sim).await.is_empty(),
        "a rejected request reached the backend"
    );

    // Probes and metrics need no key.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let resp = support::client().get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }

    // Either key works; the gateway's key is not passed to the backend.
    for key in ["key-one", "key-two"] {
        let bearer = format!("Bearer {key}");
        let resp = post_json(&url, &body, &[("authorization", &bearer)]).await;
        assert_eq!(resp.status(), 200, "{key}");
        let seen = support::last_recorded(&sim).await;
        assert!(
            seen["headers"].get("authorization").is_none(),
            "authorization forwarded: {seen}"
        );
        let resp = support::client()
            .get(gw.url("/v1/models"))
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_model_rate_limit_is_429_with_retry_after() {
    let sim = pod("pod-a", &["limited", "free"], &[]);
    // One request per 10 s after a burst of 2: the third request in a row
    // is refused, and a client must wait at least a few seconds.
    let yaml = format!(
        "models:\n\
         - name: limited\n  endpoints: {e}\n  rateLimit: {{requestsPerSecond: 0.1, burst: 2}}\n\
         - name: free\n  endpoints: {e}\n",
        e = endpoints(&[&sim])
    );
    let gw = Gateway::start(&yaml, &["--rate-limit-enabled", "true"]);
    let url = gw.url("/v1/chat/completions");

    for _ in 0..2 {
        let resp = post_json(&url, &chat_body("limited"), &[]).await;
        assert_eq!(resp.status(), 200);
    }
    let resp = post_json(&url, &chat_body("limited"), &[]).await;
    let (status, headers, body) = error_of(resp).await;
    assert_eq!(status, 429);
    let retry_after: u64 = headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((5..=10).contains(&retry_after), "Retry-After {retry_after}");
    let err = assert_openai_error(&body, "rate_limit_exceeded");
    assert_eq!(err["type"], "rate_limit_error");
    assert_eq!(support::recorded(&sim).await.len(), 2);

    // Another model has its own bucket (the gateway default, 100/s).
    for _ in 0..5 {
        let resp = post_json(&url, &chat_body("free"), &[]).await;
        assert_eq!(resp.status(), 200);
    }
    let metrics = gw.metrics().await;
    assert_eq!(
        support::metric_value(
            &metrics,
            "flexinfer_proxy_rate_limited_total{model=\"limited\",scope=\"per_model\"}"
        ),
        1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limit_covers_every_model() {
    let sim = pod("pod-a", &["a", "b"], &[]);
    let yaml = format!(
        "models:\n- name: a\n  endpoints: {e}\n- name: b\n  endpoints: {e}\n",
        e = endpoints(&[&sim])
    );
    let gw = Gateway::start(
        &yaml,
        &[
            "--rate-limit-enabled",
            "true",
            "--rate-limit-global",
            "0.5",
            "--rate-limit-global-burst",
            "3",
        ],
    );
    let url = gw.url("/v1/chat/completions");
    for model in ["a", "b", "a"] {
        let resp = post_json(&url, &chat_body(model), &[]).await;
        assert_eq!(resp.status(), 200, "{model}");
    }
    let resp = post_json(&url, &chat_body("b"), &[]).await;
    let (status, headers, body) = error_of(resp).await;
    assert_eq!(status, 429);
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    assert_openai_error(&body, "rate_limit_exceeded");
    assert_eq!(support::recorded(&sim).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_model_is_404_from_every_source() {
    let sim = pod("pod-a", &["m"], &[]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(&yaml, &[]);

    let requests = [
        post_json(&gw.url("/v1/chat/completions"), &chat_body("gpt-5"), &[]).await,
        post_json(
            &gw.url("/v1/chat/completions"),
            &chat_body("m"),
            &[("x-model-id", "gpt-5")],
        )
        .await,
        post_json(
            &gw.url("/model/gpt-5/v1/chat/completions"),
            &chat_body("m"),
            &[],
        )
        .await,
        support::client()
            .get(gw.url("/model/gpt-5/v1/models"))
            .send()
            .await
            .unwrap(),
    ];
    for resp in requests {
        let (status, _, body) = error_of(resp).await;
        assert_eq!(status, 404);
        let err = assert_openai_error(&body, "model_not_found");
        assert_eq!(err["param"], "model");
        assert!(err["message"].as_str().unwrap().contains("gpt-5"), "{body}");
    }
    assert!(support::recorded(&sim).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_usable_model_are_400() {
    let sim = pod("pod-a", &["m"], &[]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(&yaml, &[]);
    let url = gw.url("/v1/chat/completions");

    // (what, body, expected error code)
    let cases: Vec<(&str, &[u8], &str)> = vec![
        (
            "no model anywhere",
            br#"{"messages":[{"role":"user","content":"hi"}]}"#,
            "missing_required_field",
        ),
        (
            "broken JSON",
            br#"{"model":"m","messages":["#,
            "invalid_request_error",
        ),
        (
            "model is not a string",
            br#"{"model":42,"messages":[]}"#,
            "invalid_field_value",
        ),
        (
            "model that walks up a path",
            br#"{"model":"../etc/passwd","messages":[]}"#,
            "invalid_field_value",
        ),
        (
            "model key twice",
            br#"{"model":"m","model":"m","messages":[]}"#,
            "invalid_field_value",
        ),
    ];
    for (what, body, code) in cases {
        let resp = post_json(&url, body, &[]).await;
        let (status, _, body) = error_of(resp).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_openai_error(&body, code);
    }

    // A bad name in the path prefix: a control character...
    let resp = support::client()
        .get(gw.url("/model/a%00b/v1/models"))
        .send()
        .await
        .unwrap();
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 400);
    assert_openai_error(&body, "invalid_field_value");
    // ...or an encoded `..` (sent raw: HTTP clients would resolve it away).
    let answer = support::raw_exchange(
        gw.addr,
        b"GET /model/%2e%2e/v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "}",
        Duration::from_secs(5),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("\"code\":\"invalid_field_value\""),
        "{answer}"
    );

    // A multipart form without a model field.
    let form = support::multipart(
        "b0undary",
        &[support::Part {
            name: "prompt",
            filename: None,
            data: b"no model here",
        }],
    );
    let resp = support::client()
        .post(gw.url("/v1/images/edits"))
        .header("content-type", "multipart/form-data; boundary=b0undary")
        .body(form)
        .send()
        .await
        .unwrap();
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 400);
    let err = assert_openai_error(&body, "missing_required_field");
    assert_eq!(err["param"], "model");

    assert!(support::recorded(&sim).await.is_empty());

    // The connection stays usable after a 400 on a fully read body.
    let client = support::client();
    for _ in 0..3 {
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .body("{}")
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let _: Value = resp.json().await.unwrap();
    }
}
