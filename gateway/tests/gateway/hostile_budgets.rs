//! A hostile tenant against its token budget (`docs/tenants.md`, "Budgets
//! that hold"): 40-way concurrent bursts at a 1,000-token budget on chat,
//! Responses and Messages, streamed and not, with and without output
//! limits, with `n`, large `system` and `instructions`, `include_usage:
//! false` and streams dropped early. The tokens served (counted from what
//! the client received) stay within the documented bound: the budget's
//! burst plus its refill over the run. Real gateway binary, real
//! `flexinfer-sim` engine (generating 400 tokens when a request sets no
//! limit, streaming 400 tokens a second).

use crate::support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use support::{client, endpoints, pod, Gateway};

const ADMIN_KEY: &str = "admin-key";
const BURST: u64 = 1_000;
/// Refill: one token a second.
const PER_MINUTE: u64 = 60;
const TENANTS: usize = 12;

fn key_file() -> (tempfile::TempDir, PathBuf) {
    let mut yaml = String::from("tenants:\n");
    for i in 0..TENANTS {
        yaml.push_str(&format!(
            "  - name: t{i}\n    keys: [k{i}]\n    limits: {{tokensPerMinute: {PER_MINUTE}, tokenBurst: {BURST}}}\n"
        ));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keys.yaml");
    std::fs::write(&path, yaml).expect("key file");
    (dir, path)
}

/// One way of spending a budget.
struct Scenario {
    name: &'static str,
    path: &'static str,
    body: Value,
    /// Events read before the client hangs up (streams only).
    drop_after: Option<usize>,
    /// Bursts one after the other (refunds of the first let the second in).
    rounds: usize,
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "m",
        "messages": [{"role": "user", "content": "Tell me a long story."}]});
    merge(&mut body, extra);
    body
}

fn merge(body: &mut Value, extra: Value) {
    if let (Value::Object(b), Value::Object(e)) = (body, extra) {
        b.extend(e);
    }
}

fn scenarios() -> Vec<Scenario> {
    let big = "You are a careful assistant. ".repeat(70);
    let s = |name, path, body, drop_after, rounds| Scenario {
        name,
        path,
        body,
        drop_after,
        rounds,
    };
    vec![
        s(
            "chat, no max_tokens",
            "/v1/chat/completions",
            chat(json!({})),
            None,
            1,
        ),
        s(
            "chat stream, no max_tokens",
            "/v1/chat/completions",
            chat(json!({"stream": true})),
            None,
            1,
        ),
        s(
            "chat stream, include_usage false",
            "/v1/chat/completions",
            chat(json!({"stream": true, "stream_options": {"include_usage": false}})),
            None,
            1,
        ),
        s(
            "chat, n = 8",
            "/v1/chat/completions",
            chat(json!({"n": 8, "max_tokens": 100})),
            None,
            1,
        ),
        s(
            "chat, large system message",
            "/v1/chat/completions",
            json!({"model": "m", "max_tokens": 10, "messages": [
              {"role": "system", "content": big}, {"role": "user", "content": "hi"}]}),
            None,
            1,
        ),
        s(
            "completions, n = 4",
            "/v1/completions",
            json!({"model": "m", "prompt": "Once", "n": 4, "max_tokens": 100}),
            None,
            1,
        ),
        s(
            "responses, no limit",
            "/v1/responses",
            json!({"model": "m", "input": "Tell me a story."}),
            None,
            1,
        ),
        s(
            "responses, large instructions",
            "/v1/responses",
            json!({"model": "m", "input": "hi", "instructions": big, "max_output_tokens": 10}),
            None,
            1,
        ),
        s(
            "responses stream, dropped",
            "/v1/responses",
            json!({"model": "m", "input": "Tell me a story.", "stream": true, "max_output_tokens": 200}),
            Some(150),
            3,
        ),
        s(
            "messages, large system",
            "/v1/messages",
            json!({"model": "m", "max_tokens": 10, "system": big,
                 "messages": [{"role": "user", "content": "hi"}]}),
            None,
            1,
        ),
        s(
            "messages stream, dropped",
            "/v1/messages",
            json!({"model": "m", "max_tokens": 200, "stream": true,
                 "messages": [{"role": "user", "content": "Tell me a story."}]}),
            Some(150),
            3,
        ),
        s(
            "chat stream, dropped",
            "/v1/chat/completions",
            chat(json!({"stream": true, "max_tokens": 200})),
            Some(150),
            3,
        ),
    ]
}

/// Prompt tokens the engine counts for `body` (asked with an admin key,
/// which no budget applies to).
async fn prompt_tokens(gw: &Gateway, path: &str, body: &Value) -> u64 {
    let mut body = body.clone();
    if let Value::Object(map) = &mut body {
        map.remove("stream");
        map.remove("stream_options");
    }
    let v: Value = client()
        .post(gw.url(path))
        .bearer_auth(ADMIN_KEY)
        .json(&body)
        .send()
        .await
        .expect("calibration")
        .json()
        .await
        .expect("calibration json");
    let usage = &v["usage"];
    let input = usage["prompt_tokens"]
        .as_u64()
        .or(usage["input_tokens"].as_u64())
        .unwrap_or_else(|| panic!("no usage: {v}"));
    input + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
}

/// Tokens one request served its client (0 when refused).
async fn served(resp: reqwest::Response, drop_after: Option<usize>, prompt: u64) -> u64 {
    if resp.status() == 429 {
        return 0;
    }
    assert_eq!(resp.status(), 200, "{:?}", resp.headers());
    let events = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !events {
        let v: Value = resp.json().await.expect("json");
        let u = &v["usage"];
        let input = u["prompt_tokens"].as_u64().or(u["input_tokens"].as_u64());
        let output = u["completion_tokens"]
            .as_u64()
            .or(u["output_tokens"].as_u64());
        return input.unwrap_or(0) + output.unwrap_or(0);
    }
    // A streamed answer: a token per content event, the prompt once.
    let (mut tokens, mut seen) = (0u64, 0usize);
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    'read: while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            seen += 1;
            let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            let content = v["choices"].as_array().map_or(0, |c| {
                c.iter()
                    .filter(|c| c["delta"]["content"].is_string() || c["text"].is_string())
                    .count() as u64
            });
            let delta = matches!(
                v["type"].as_str(),
                Some("response.output_text.delta" | "content_block_delta")
            );
            tokens += content + u64::from(delta);
            if drop_after.is_some_and(|n| seen >= n) {
                break 'read;
            }
        }
    }
    prompt + tokens
}

#[tokio::test]
async fn bursts_stay_within_the_budget_bound() {
    let sim = pod(
        "p",
        &["m"],
        &["--default-max-tokens", "400", "--tokens-per-second", "400"],
    );
    let (_dir, keys) = key_file();
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(
        &yaml,
        &[
            "--api-key-file",
            keys.to_str().unwrap(),
            "--admin-auth-token",
            ADMIN_KEY,
        ],
    );
    let mut report = Vec::new();
    for (i, sc) in scenarios().into_iter().enumerate() {
        let prompt = prompt_tokens(&gw, sc.path, &sc.body).await;
        let key = format!("k{i}");
        let start = Instant::now();
        let mut total = 0;
        for round in 0..sc.rounds {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let burst = (0..40).map(|_| {
                let req = client()
                    .post(gw.url(sc.path))
                    .bearer_auth(&key)
                    .json(&sc.body)
                    .send();
                async move { served(req.await.expect("request"), sc.drop_after, prompt).await }
            });
            total += futures::future::join_all(burst).await.iter().sum::<u64>();
        }
        let refill = start.elapsed().as_secs_f64() * PER_MINUTE as f64 / 60.0;
        let bound = BURST as f64 + refill.ceil();
        report.push(format!("{}: {total} served, bound {bound}", sc.name));
        assert!(total > 0, "{}: nothing served", sc.name);
        assert!(
            total as f64 <= bound,
            "{}: {total} tokens served against a bound of {bound}\n{}",
            sc.name,
            report.join("\n")
        );
    }
    println!("{}", report.join("\n"));
}
