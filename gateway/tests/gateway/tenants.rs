//! Tenants from an API-key file (`--api-key-file`): keys that name a
//! tenant, models a tenant may not see, token budgets charged by estimate
//! and corrected with the engine's usage, hot reload. Every test drives the
//! real gateway binary in front of real `flexinfer-sim` processes.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::{
    assert_openai_error, client, endpoints, error_of, metric_value, pod, post_json, recorded,
    sha256_hex, Gateway,
};

const ADMIN_KEY: &str = "admin-key";

/// Writes `yaml` as the key file in a fresh folder.
fn key_file(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keys.yaml");
    std::fs::write(&path, yaml).expect("key file");
    (dir, path)
}

/// A gateway serving `llama` and `qwen` from one simulator, with the key
/// file at `keys`.
fn gateway(sim: &support::SimProcess, keys: &Path) -> Gateway {
    let urls = endpoints(&[sim]);
    let yaml =
        format!("models:\n- name: llama\n  endpoints: {urls}\n- name: qwen\n  endpoints: {urls}\n");
    Gateway::start(
        &yaml,
        &[
            "--api-key-file",
            keys.to_str().unwrap(),
            "--admin-auth-token",
            ADMIN_KEY,
        ],
    )
}

fn chat_body(model: &str, max_tokens: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say something long."}],
    }))
    .unwrap()
}

async fn chat_as(gw: &Gateway, key: &str, model: &str, max_tokens: u64) -> reqwest::Response {
    let auth = format!("Bearer {key}");
    post_json(
        &gw.url("/v1/chat/completions"),
        &chat_body(model, max_tokens),
        &[("authorization", &auth)],
    )
    .await
}

async fn get_as(gw: &Gateway, key: &str, path: &str) -> reqwest::Response {
    client()
        .get(gw.url(path))
        .bearer_auth(key)
        .send()
        .await
        .expect("GET")
}

/// `/metrics` of the proxy listener, which needs an admin key when a key
/// file is in force.
async fn admin_metrics(gw: &Gateway) -> String {
    get_as(gw, ADMIN_KEY, "/metrics")
        .await
        .text()
        .await
        .unwrap_or_default()
}

/// The tokens left in `tenant`'s tenant-wide token bucket.
async fn tokens_left(gw: &Gateway, tenant: &str) -> f64 {
    let report: Value = get_as(gw, ADMIN_KEY, "/admin/tenants")
        .await
        .json()
        .await
        .unwrap();
    let entry = report["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tenant)
        .unwrap_or_else(|| panic!("{tenant} in {report}"));
    entry["limits"]["tokens"]["remaining"].as_f64().unwrap()
}

#[tokio::test]
async fn keys_name_tenants_and_other_models_do_not_exist_for_them() {
    let sim = pod("p", &["llama", "qwen"], &[]);
    let (_dir, keys) = key_file(&format!(
        "tenants:\n  - name: team-a\n    keys: [ka]\n    models: [llama]\n  - name: team-b\n    keys: [\"sha256:{}\"]\n",
        sha256_hex(b"kb")
    ));
    let gw = gateway(&sim, &keys);

    assert_eq!(chat_as(&gw, "ka", "llama", 4).await.status(), 200);
    // A model the tenant may not use answers exactly as one that does not exist.
    let (status, _, hidden) = error_of(chat_as(&gw, "ka", "qwen", 4).await).await;
    let (_, _, missing) = error_of(chat_as(&gw, "ka", "qwem", 4).await).await;
    assert_eq!(status, 404);
    assert_openai_error(&hidden, "model_not_found");
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .replace("qwen", "X"),
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .replace("qwem", "X")
    );
    let listed = |v: Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let a_models = listed(get_as(&gw, "ka", "/v1/models").await.json().await.unwrap());
    assert_eq!(a_models, ["llama"]);
    assert_eq!(get_as(&gw, "ka", "/v1/models/qwen").await.status(), 404);
    let b_models = listed(get_as(&gw, "kb", "/v1/models").await.json().await.unwrap());
    assert_eq!(b_models.len(), 2, "{b_models:?}");

    // The digest stands for the key; Anthropic clients send x-api-key.
    let resp = post_json(
        &gw.url("/v1/chat/completions"),
        &chat_body("qwen", 4),
        &[("x-api-key", "kb")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let (status, _, _) = error_of(chat_as(&gw, "kc", "llama", 4).await).await;
    assert_eq!(status, 401);
    // The gateway's keys never reach the engine, in either header.
    for request in recorded(&sim).await {
        let headers = &request["headers"];
        assert!(
            headers.get("authorization").is_none() && headers.get("x-api-key").is_none(),
            "{headers}"
        );
    }
    // Tenants are in the metrics and, for admins only, in /admin/tenants.
    let metrics = admin_metrics(&gw).await;
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_tenant_requests_total{model=\"llama\",status=\"200\",tenant=\"team-a\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(get_as(&gw, "ka", "/admin/tenants").await.status(), 403);
    let report: Value = get_as(&gw, ADMIN_KEY, "/admin/tenants")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(report["tenants"][0]["name"], "team-a", "{report}");
    assert_eq!(report["tenants"][0]["models"], json!(["llama"]));
}

#[tokio::test]
async fn a_token_budget_refuses_what_would_exceed_it_and_refills_at_its_rate() {
    let sim = pod("p", &["llama", "qwen"], &[]);
    // 60,000 tokens/min = 1,000 a second, at most 3,000 at once; output tokens count.
    let (_dir, keys) = key_file(
        "tenants:\n  - name: t\n    keys: [k]\n    limits: {tokensPerMinute: 60000, tokenBurst: 3000, countTokens: output}\n",
    );
    let gw = gateway(&sim, &keys);

    let first = chat_as(&gw, "k", "llama", 2500).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ratelimit-limit-tokens"], "3000");
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 2500);

    let (status, headers, err) = error_of(chat_as(&gw, "k", "llama", 2500).await).await;
    assert_eq!(status, 429);
    assert_openai_error(&err, "rate_limit_exceeded");
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(retry_after, 2, "2,000 missing tokens at 1,000/s");
    let remaining: f64 = headers["x-ratelimit-remaining-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((500.0..1500.0).contains(&remaining), "{remaining}");
    assert!(headers.contains_key("x-ratelimit-reset-tokens"));
    // More than the bucket ever holds: refused with a message that says so.
    let (status, _, err) = error_of(chat_as(&gw, "k", "llama", 5000).await).await;
    assert_eq!(status, 429);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Request too large"),
        "{err}"
    );

    // It refills at 1,000 tokens a second.
    let before = tokens_left(&gw, "t").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let gained = tokens_left(&gw, "t").await - before;
    assert!((400.0..700.0).contains(&gained), "gained {gained}");
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(chat_as(&gw, "k", "llama", 2500).await.status(), 200);
    let metrics = admin_metrics(&gw).await;
    assert!(
        metric_value(
            &metrics,
            "flexinfer_proxy_rate_limited_total{model=\"llama\",scope=\"tenant_tokens\"}"
        ) >= 2.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn the_budget_is_corrected_with_the_usage_of_json_and_streamed_answers() {
    let sim = pod("p", &["llama", "qwen"], &[]);
    // A slow refill (10 tokens/s) so that what is left shows the charges.
    let (_dir, keys) = key_file(
        "tenants:\n  - name: t\n    keys: [k]\n    limits: {tokensPerMinute: 600, tokenBurst: 100000}\n",
    );
    let gw = gateway(&sim, &keys);
    let full = 100_000.0;

    // The estimate (prompt bytes ÷ 4 + max_tokens) is replaced by the usage.
    let resp = chat_as(&gw, "k", "llama", 300).await;
    let body: Value = resp.json().await.unwrap();
    let used = body["usage"]["total_tokens"].as_f64().unwrap();
    let left = tokens_left(&gw, "t").await;
    assert!(
        (left - (full - used)).abs() < 20.0,
        "left {left}, used {used}"
    );

    // A stream that asked for usage: the last chunk's usage counts.
    let stream = serde_json::to_vec(&json!({
        "model": "llama",
        "max_tokens": 200,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Stream something."}],
    }))
    .unwrap();
    let text = post_json(
        &gw.url("/v1/chat/completions"),
        &stream,
        &[("authorization", "Bearer k")],
    )
    .await
    .text()
    .await
    .unwrap();
    let usage: Value = text
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("usage").filter(|u| u.is_object()).cloned())
        .expect("a usage chunk");
    let streamed = usage["total_tokens"].as_f64().unwrap();
    assert_eq!(usage["completion_tokens"], 200);
    let left = tokens_left(&gw, "t").await;
    assert!(
        (left - (full - used - streamed)).abs() < 30.0,
        "left {left}, used {used} + {streamed}"
    );

    // Counted per model, tenant and kind.
    let metrics = admin_metrics(&gw).await;
    let completion = metric_value(
        &metrics,
        "flexinfer_proxy_tokens_total{kind=\"completion\",model=\"llama\",tenant=\"t\"}",
    );
    assert_eq!(completion, 500.0, "{metrics}");

    // A failed answer costs nothing: the estimate comes back.
    let before = tokens_left(&gw, "t").await;
    let (status, _, _) = error_of(chat_as(&gw, "k", "llama", 90_000).await).await;
    assert_eq!(status, 400, "beyond the engine's context window");
    let after = tokens_left(&gw, "t").await;
    assert!((after - before).abs() < 30.0, "{before} → {after}");
}

/// The usage an answer of `/v1/messages` or `/v1/responses` reports, JSON
/// or streamed: (prompt tokens, cache included; output tokens).
fn reported_usage(text: &str) -> (f64, f64) {
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .chain(std::iter::once(text))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let mut usage = (0.0, 0.0);
    for e in &events {
        let u = [&e["usage"], &e["message"]["usage"], &e["response"]["usage"]]
            .into_iter()
            .find(|u| u.is_object());
        let Some(u) = u else { continue };
        let n = |k: &str| u[k].as_f64().unwrap_or(0.0);
        if u.get("input_tokens").is_some() {
            usage.0 =
                n("input_tokens") + n("cache_read_input_tokens") + n("cache_creation_input_tokens");
        }
        usage.1 = n("output_tokens");
    }
    usage
}

#[tokio::test]
async fn the_budget_is_charged_with_the_usage_of_messages_and_responses_answers() {
    let sim = pod("p", &["llama", "qwen"], &[]);
    let (_dir, keys) = key_file(
        "tenants:\n  - name: t\n    keys: [k]\n    limits: {tokensPerMinute: 60, tokenBurst: 100000}\n",
    );
    let gw = gateway(&sim, &keys);
    let prompt = "Tell me about token budgets. ".repeat(8);
    let asks = [
        (
            "/v1/messages",
            json!({"model": "llama", "max_tokens": 120, "messages": [{"role": "user", "content": prompt}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "llama", "max_tokens": 130, "stream": true, "messages": [{"role": "user", "content": prompt}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "llama", "max_output_tokens": 140, "input": prompt}),
        ),
        (
            "/v1/responses",
            json!({"model": "llama", "max_output_tokens": 150, "stream": true, "input": prompt}),
        ),
    ];
    let (mut prompt_sum, mut output_sum) = (0.0, 0.0);
    for (path, body) in &asks {
        let resp = post_json(
            &gw.url(path),
            &serde_json::to_vec(body).unwrap(),
            &[("authorization", "Bearer k")],
        )
        .await;
        assert_eq!(resp.status(), 200, "{path}");
        let text = resp.text().await.unwrap();
        let (p, o) = reported_usage(&text);
        assert!(p > 0.0 && o > 0.0, "{path} reported no usage: {text}");
        prompt_sum += p;
        output_sum += o;
    }
    let metrics = admin_metrics(&gw).await;
    let counted = |kind: &str| {
        metric_value(
            &metrics,
            &format!(
                "flexinfer_proxy_tokens_total{{kind=\"{kind}\",model=\"llama\",tenant=\"t\"}}"
            ),
        )
    };
    assert_eq!(counted("completion"), output_sum, "{metrics}");
    assert_eq!(counted("prompt"), prompt_sum, "{metrics}");
    // What is left is the budget less what the answers reported (a token a
    // second refills meanwhile), not the budget with every estimate refunded.
    let left = tokens_left(&gw, "t").await;
    let used = prompt_sum + output_sum;
    assert!(
        (left - (100_000.0 - used)).abs() < 20.0,
        "left {left}, used {used}"
    );
}

#[tokio::test]
async fn a_bad_key_file_names_its_line_and_a_bad_reload_keeps_the_keys() {
    let (_dir, bad) = key_file("tenants:\n  - name: a\n    keys: [x]\n    priority: urgent\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flexinfer-gateway"))
        .args(["--config", "/dev/null", "--api-key-file"])
        .arg(&bad)
        .output()
        .expect("run the gateway");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("keys.yaml") && stderr.contains("line 4"),
        "{stderr}"
    );

    let sim = pod("p", &["llama", "qwen"], &[]);
    let (_dir, keys) = key_file("tenants:\n  - name: a\n    keys: [ka]\n");
    let gw = gateway(&sim, &keys);
    std::fs::write(&keys, "tenants:\n  - name: a\n    keys: [ka\n").unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(chat_as(&gw, "ka", "llama", 4).await.status(), 200);
    assert_eq!(
        metric_value(
            &admin_metrics(&gw).await,
            "flexinfer_proxy_api_key_file_reloads_total{result=\"error\"}"
        ),
        1.0
    );
    std::fs::write(&keys, "tenants:\n  - name: b\n    keys: [kb]\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while chat_as(&gw, "kb", "llama", 4).await.status() != 200 {
        assert!(std::time::Instant::now() < deadline, "kb never accepted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(chat_as(&gw, "ka", "llama", 4).await.status(), 401);
}

#[tokio::test]
async fn output_token_limits_that_are_not_sane_integers_are_refused() {
    let sim = pod("p", &["llama"], &[]);
    let gw = Gateway::start(
        &format!(
            "models:\n- name: llama\n  endpoints: {}\n",
            endpoints(&[&sim])
        ),
        &[],
    );
    for (value, field) in [
        ("-5", "max_tokens"),
        ("2.5", "max_tokens"),
        ("\"100\"", "max_tokens"),
        ("1e40", "max_tokens"),
    ] {
        let body = format!(
            r#"{{"model":"llama","max_tokens":{value},"messages":[{{"role":"user","content":"hi"}}]}}"#
        );
        let (status, _, err) =
            error_of(post_json(&gw.url("/v1/chat/completions"), body.as_bytes(), &[]).await).await;
        assert_eq!(status, 400, "{value}");
        assert_eq!(err["error"]["param"], field, "{value}: {err}");
    }
    let body = br#"{"model":"llama","max_completion_tokens":0,"messages":[]}"#;
    let (status, _, err) =
        error_of(post_json(&gw.url("/v1/chat/completions"), body, &[]).await).await;
    assert_eq!(
        (status, &err["error"]["param"]),
        (400, &json!("max_completion_tokens"))
    );
}

/// A chunk line with its `id` and `created` values blanked (they differ
/// from answer to answer).
fn normalized(line: &str) -> String {
    let mut out = line.to_owned();
    for (key, quoted) in [("\"id\":\"", true), ("\"created\":", false)] {
        if let Some(at) = out.find(key) {
            let start = at + key.len();
            let end = if quoted {
                start + out[start..].find('"').unwrap()
            } else {
                start + out[start..].find([',', '}']).unwrap()
            };
            out.replace_range(start..end, "_");
        }
    }
    out
}

#[tokio::test]
async fn a_stream_that_did_not_ask_for_usage_is_counted_exactly_and_unchanged() {
    let sim = pod("p", &["llama", "qwen"], &[]);
    let (_dir, keys) = key_file(
        "tenants:\n  - name: t\n    keys: [k]\n    limits: {tokensPerMinute: 600, tokenBurst: 100000}\n",
    );
    let gw = gateway(&sim, &keys);
    let request = serde_json::to_vec(&json!({
        "model": "llama",
        "max_tokens": 50,
        "stream": true,
        "messages": [{"role": "user", "content": "Stream without usage."}],
    }))
    .unwrap();
    let through = post_json(
        &gw.url("/v1/chat/completions"),
        &request,
        &[("authorization", "Bearer k")],
    )
    .await
    .text()
    .await
    .unwrap();
    let direct = post_json(
        &format!("{}/v1/chat/completions", sim.base_url()),
        &request,
        &[],
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(!through.contains("usage"), "{through}");
    let lines = |text: &str| text.lines().map(normalized).collect::<Vec<_>>();
    assert_eq!(
        lines(&through),
        lines(&direct),
        "the same stream, byte for byte"
    );
    // The engine was asked for usage, and the budget was charged with it.
    let mut asked = br#"{"stream_options":{"include_usage":true},"#.to_vec();
    asked.extend_from_slice(&request[1..]);
    assert_eq!(recorded(&sim).await[0]["body_sha256"], sha256_hex(&asked));
    let counted = metric_value(
        &admin_metrics(&gw).await,
        "flexinfer_proxy_tokens_total{kind=\"completion\",model=\"llama\",tenant=\"t\"}",
    );
    assert_eq!(counted, 50.0);
    // The gateway timed the stream: one first token, gaps between chunks.
    let metrics = admin_metrics(&gw).await;
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_stream_time_to_first_token_seconds_count{model=\"llama\"}"
        ),
        1.0
    );
    assert!(
        metric_value(
            &metrics,
            "flexinfer_proxy_stream_inter_token_latency_seconds_count{model=\"llama\"}"
        ) >= 1.0
    );
    let prompt = metric_value(
        &admin_metrics(&gw).await,
        "flexinfer_proxy_tokens_total{kind=\"prompt\",model=\"llama\",tenant=\"t\"}",
    );
    let left = tokens_left(&gw, "t").await;
    assert!(
        (left - (100_000.0 - 50.0 - prompt)).abs() < 10.0,
        "left {left}, prompt {prompt}"
    );
}

/// A gateway whose one model takes one request at a time, in front of a
/// simulator that answers after `ttft`.
fn saturated(keys: &Path, ttft: &str) -> (support::SimProcess, Gateway) {
    let sim = pod(
        "p",
        &["llama"],
        &["--ttft", ttft, "--max-concurrency", "64"],
    );
    let yaml = format!(
        "models:\n- name: llama\n  maxConcurrency: 1\n  endpoints: {}\n",
        endpoints(&[&sim])
    );
    let gw = Gateway::start(
        &yaml,
        &[
            "--api-key-file",
            keys.to_str().unwrap(),
            "--admin-auth-token",
            ADMIN_KEY,
        ],
    );
    (sim, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_of_one_class_share_a_saturated_model_in_turns() {
    let (_dir, keys) =
        key_file("tenants:\n  - name: heavy\n    keys: [kh]\n  - name: light\n    keys: [kl]\n");
    let (_sim, gw) = saturated(&keys, "20ms");
    let url = gw.url("/v1/chat/completions");
    let body = chat_body("llama", 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    // The heavy tenant keeps ten requests going, the light one one; each
    // worker sends its next request as soon as the last is answered.
    let workers: Vec<_> = std::iter::repeat_n("kh", 10)
        .chain(["kl"])
        .map(|key| {
            let (url, body) = (url.clone(), body.clone());
            tokio::spawn(async move {
                let client = client();
                let mut served = 0u32;
                while std::time::Instant::now() < deadline {
                    let resp = client
                        .post(&url)
                        .bearer_auth(key)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .expect("request");
                    if resp.status() == 200 && resp.bytes().await.is_ok() {
                        served += 1;
                    }
                }
                (key, served)
            })
        })
        .collect();
    let (mut heavy, mut light) = (0, 0);
    for w in workers {
        match w.await.unwrap() {
            ("kh", n) => heavy += n,
            (_, n) => light += n,
        }
    }
    let share = f64::from(light) / f64::from(heavy + light);
    eprintln!("served: heavy {heavy}, light {light} (light's share {share:.2})");
    // In arrival order the light tenant would get 1 in 11 (0.09).
    assert!(share > 0.35, "heavy {heavy}, light {light}");
    assert!(
        heavy + light > 40,
        "the model was kept busy: {heavy} + {light}"
    );
}

#[tokio::test]
async fn a_high_priority_request_is_served_before_fifty_queued_low_ones() {
    let (_dir, keys) = key_file(
        "tenants:\n  - name: batch\n    priority: low\n    keys: [kb]\n  - name: chat\n    priority: high\n    keys: [kc]\n",
    );
    let (sim, gw) = saturated(&keys, "60ms");
    let gw = std::sync::Arc::new(gw);
    let lows: Vec<_> = (0..51)
        .map(|_| {
            let gw = gw.clone();
            tokio::spawn(async move { chat_as(&gw, "kb", "llama", 1).await.status() })
        })
        .collect();
    // Wait until one is served and fifty wait in the gateway (a bound on
    // the wait only: on a loaded machine, 51 connections take a while).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let report: Value = get_as(&gw, ADMIN_KEY, "/admin/tenants")
            .await
            .json()
            .await
            .unwrap();
        let waiting: u64 = report["queues"][0]["waiting"].as_array().map_or(0, |w| {
            w.iter().map(|e| e["waiting"].as_u64().unwrap()).sum()
        });
        if waiting == 50 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "queue: {report}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let chats = |records: Vec<Value>| -> Vec<bool> {
        records
            .iter()
            .filter(|r| r["path"] == "/v1/chat/completions")
            .map(|r| r["headers"]["x-test"] == "high")
            .collect()
    };
    // Requests the engine has seen: the one it serves now is the last.
    let before = chats(recorded(&sim).await).len();
    let started = std::time::Instant::now();
    let resp = post_json(
        &gw.url("/v1/chat/completions"),
        &chat_body("llama", 1),
        &[("authorization", "Bearer kc"), ("x-test", "high")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let waited = started.elapsed();
    for low in lows {
        assert_eq!(low.await.unwrap(), 200, "every queued request is served");
    }
    // The engine saw it right after the request that was being served.
    let seen = chats(recorded(&sim).await);
    let at = seen
        .iter()
        .position(|high| *high)
        .expect("the high request");
    // Next (or, when the one being served ended just as it arrived, the
    // one after), though 50 low ones waited before it.
    assert!(
        (before..=before + 1).contains(&at),
        "served at position {at} of {}, {before} seen when it was sent",
        seen.len()
    );
    assert!(waited < Duration::from_millis(1500), "waited {waited:?}");
    let metrics = admin_metrics(&gw).await;
    assert!(
        metric_value(
            &metrics,
            "flexinfer_proxy_tenant_queue_wait_seconds_count{model=\"llama\",tenant=\"batch\"}"
        ) >= 50.0,
        "{metrics}"
    );
}
