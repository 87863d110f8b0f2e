//! Helpers shared by the integration tests: start the real `flexinfer-sim`
//! binary, talk HTTP to it, and read its SSE streams and metrics.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use flexinfer_conformance::sim::process::SimProcess;
use serde_json::Value;

/// Starts the binary built for these tests with extra `args`.
pub fn sim(args: &[&str]) -> SimProcess {
    SimProcess::spawn(env!("CARGO_BIN_EXE_flexinfer-sim"), args).expect("start flexinfer-sim")
}

/// An HTTP client without connection reuse surprises: every test builds its own.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// POSTs JSON and returns the response.
pub async fn post_json(base: &str, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .expect("request")
}

/// GETs a path and returns the response.
pub async fn get(base: &str, path: &str) -> reqwest::Response {
    client()
        .get(format!("{base}{path}"))
        .send()
        .await
        .expect("request")
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event without data prefix: {event:?}"))
                .to_owned()
        })
        .collect()
}

/// The value of an unlabelled-or-labelled sample whose line starts with `name`.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}
