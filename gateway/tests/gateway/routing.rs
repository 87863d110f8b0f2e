//! Routing strategies over real pods: session affinity, prefix affinity,
//! least-loaded, and what a pod leaving the model file moves.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use serde_json::json;
use support::{endpoints, pod, post_json, served_by, Gateway, SimProcess};

const PODS: [&str; 4] = ["pod-a", "pod-b", "pod-c", "pod-d"];

fn pods() -> Vec<SimProcess> {
    PODS.iter().map(|p| pod(p, &["m"], &[])).collect()
}

fn model_yaml(routing: &str, sims: &[&SimProcess]) -> String {
    format!(
        "models:\n- name: m\n  routing: {routing}\n  endpoints: {}\n",
        endpoints(sims)
    )
}

/// A request body and its extra headers.
type Request = (Vec<u8>, Vec<(String, String)>);

/// Sends `requests` (bodies with their headers) concurrently, a few at a time, and
/// returns which pod served each, in order.
async fn serve_all(gw: &Gateway, requests: Vec<Request>) -> Vec<String> {
    let url = gw.url("/v1/chat/completions");
    let mut out: Vec<(usize, String)> = stream::iter(requests.into_iter().enumerate())
        .map(|(i, (body, headers))| {
            let url = url.clone();
            async move {
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let resp = post_json(&url, &body, &headers).await;
                assert_eq!(resp.status(), 200);
                (i, served_by(&resp))
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    out.sort();
    out.into_iter().map(|(_, pod)| pod).collect()
}

fn session_requests(sessions: impl Iterator<Item = String>) -> Vec<Request> {
    let body = serde_json::to_vec(&support::chat("m")).unwrap();
    sessions
        .map(|s| (body.clone(), vec![("x-session-id".to_owned(), s)]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_affinity_pins_a_session_and_spreads_sessions() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let gw = Gateway::start(&model_yaml("session-affinity", &refs), &[]);

    // 200 requests of one session: one pod.
    let served = serve_all(
        &gw,
        session_requests((0..200).map(|_| "session-one".to_owned())),
    )
    .await;
    let first = served[0].clone();
    assert!(PODS.contains(&first.as_str()), "{first}");
    assert!(
        served.iter().all(|p| *p == first),
        "one session moved: {served:?}"
    );

    // 200 sessions: every pod within ±50% of an even share (50).
    let served = serve_all(&gw, session_requests((0..200).map(|i| format!("user-{i}")))).await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for p in &served {
        *counts.entry(p.clone()).or_default() += 1;
    }
    println!("200 sessions over 4 pods: {counts:?}");
    for p in PODS {
        let n = counts.get(p).copied().unwrap_or(0);
        assert!(
            (25..=75).contains(&n),
            "{p} got {n} of 200 sessions: {counts:?}"
        );
    }

    // The conversation itself keys a client that sends no session id: its
    // first five messages, so once it has them it stays on one pod as it
    // grows.
    let turn = |n: usize| {
        let mut messages = vec![
            json!({"role": "system", "content": "You are terse."}),
            json!({"role": "user", "content": "Plan a trip to Lisbon."}),
        ];
        for i in 0..n {
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
            messages.push(json!({"role": "user", "content": format!("follow-up {i}")}));
        }
        let body = json!({"model": "m", "messages": messages, "max_tokens": 1});
        (serde_json::to_vec(&body).unwrap(), vec![])
    };
    let served = serve_all(&gw, (2..8).map(turn).collect()).await;
    assert!(served.iter().all(|p| *p == served[0]), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_routing_keeps_a_prefix_on_one_pod() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let gw = Gateway::start(&model_yaml("prefix", &refs), &[]);

    let request = |system: &str, user: &str| {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": 1,
        });
        (serde_json::to_vec(&body).unwrap(), vec![])
    };
    // One long shared system prompt, many different questions: one pod.
    let system =
        "You are the support assistant of Example Corp. Answer from the manual. ".repeat(4);
    let served = serve_all(
        &gw,
        (0..40)
            .map(|i| request(&system, &format!("question number {i}?")))
            .collect(),
    )
    .await;
    assert!(
        served.iter().all(|p| *p == served[0]),
        "one prefix moved: {served:?}"
    );

    // Different prefixes do use different pods.
    let served = serve_all(
        &gw,
        (0..40)
            .map(|i| request(&format!("You are assistant number {i}."), "hello"))
            .collect(),
    )
    .await;
    let distinct: std::collections::HashSet<_> = served.iter().collect();
    assert!(distinct.len() >= 3, "40 prefixes on {distinct:?}");

    // An explicit cache key beats the text: different prompts, same key.
    let keyed: Vec<_> = (0..20)
        .map(|i| {
            let (body, _) = request(&format!("system {i}"), "x");
            (
                body,
                vec![("x-flexinfer-cache-key".to_owned(), "tenant-42".to_owned())],
            )
        })
        .collect();
    let served = serve_all(&gw, keyed).await;
    assert!(served.iter().all(|p| *p == served[0]), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_pod_moves_only_its_sessions() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let gw = Gateway::start(&model_yaml("session-affinity", &refs), &[]);
    let sessions = || (0..100).map(|i| format!("conversation-{i}"));

    let before = serve_all(&gw, session_requests(sessions())).await;
    let on_d = before.iter().filter(|p| *p == "pod-d").count();
    assert!(on_d > 0, "no session on pod-d: {before:?}");

    gw.reload(&model_yaml("session-affinity", &refs[..3])).await;
    let after = serve_all(&gw, session_requests(sessions())).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        if b == "pod-d" {
            assert_ne!(a, "pod-d", "session {i} still on the removed pod");
        } else {
            assert_eq!(a, b, "session {i} moved from {b} to {a}");
        }
    }
    // pod-d's sessions spread over the others rather than piling on one.
    let moved: std::collections::HashSet<_> = before
        .iter()
        .zip(&after)
        .filter(|(b, _)| *b == "pod-d")
        .map(|(_, a)| a)
        .collect();
    assert!(
        on_d < 4 || moved.len() >= 2,
        "pod-d's {on_d} sessions all went to {moved:?}"
    );
    assert_eq!(support::recorded(&sims[3]).await.len(), on_d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_loaded_sends_new_requests_to_the_idle_pod() {
    // Slow pod A: each stream takes many seconds.
    let a = pod("pod-a", &["m"], &["--tokens-per-second", "2"]);
    let b = pod("pod-b", &["m"], &[]);
    let gw = Gateway::start(&model_yaml("least-loaded", &[&a]), &[]);

    // 10 streams held open on A (headers received: each is in flight).
    let url = gw.url("/v1/chat/completions");
    let stream_body = serde_json::to_vec(&json!({
        "model": "m",
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": 200,
        "stream": true,
    }))
    .unwrap();
    let mut streams = Vec::new();
    for _ in 0..10 {
        let resp = post_json(&url, &stream_body, &[]).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(served_by(&resp), "pod-a");
        streams.push(resp);
    }
    let metrics = gw.metrics().await;
    assert_eq!(
        support::metric_value(&metrics, "flexinfer_proxy_active_connections{model=\"m\"}"),
        10.0,
        "{metrics}"
    );

    // B joins; A's in-flight count survives the reload, so new requests
    // (streams included) all go to the idle pod while A stays busy.
    gw.reload(&model_yaml("least-loaded", &[&a, &b])).await;
    let chat = serde_json::to_vec(&support::chat("m")).unwrap();
    for i in 0..12 {
        let body = if i % 3 == 0 { &stream_body } else { &chat };
        let resp = post_json(&url, body, &[]).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            served_by(&resp),
            "pod-b",
            "request {i} went to the busy pod"
        );
        let _ = resp.bytes().await;
    }

    // Once A's streams end (the gateway notices at A's next token), A is a
    // candidate again: of two requests in a row, one goes to each idle pod.
    let a_gauge = format!(
        "flexinfer_proxy_endpoint_active_connections{{endpoint=\"{}\",model=\"m\"}}",
        a.addr()
    );
    assert_eq!(metric_value_now(&gw, &a_gauge).await, 10.0);
    drop(streams);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_value_now(&gw, &a_gauge).await > 0.0 {
        assert!(Instant::now() < deadline, "A's streams never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut served = Vec::new();
    for _ in 0..2 {
        let resp = post_json(&url, &chat, &[]).await;
        served.push(served_by(&resp));
    }
    served.sort();
    assert_eq!(served, ["pod-a", "pod-b"]);
}

async fn metric_value_now(gw: &Gateway, series: &str) -> f64 {
    support::metric_value(&gw.metrics().await, series)
}

/// A tenant's long system prompt (about 1,000 tokens by the 4-bytes rule),
/// distinct per tenant from the first byte.
fn system_prompt(tenant: usize) -> String {
    (0..700)
        .map(|w| format!("t{tenant}w{}", (w * 7919 + tenant * 104_729) % 10_007))
        .collect::<Vec<_>>()
        .join(" ")
}

fn tenant_turn(tenant: usize, turn: usize) -> Vec<u8> {
    let mut messages = vec![json!({"role": "system", "content": system_prompt(tenant)})];
    for t in 0..=turn {
        messages
            .push(json!({"role": "user", "content": format!("question {t} of tenant {tenant}")}));
        if t < turn {
            messages.push(json!({"role": "assistant", "content": format!("answer {t}")}));
        }
    }
    serde_json::to_vec(&json!({"model": "m", "messages": messages, "max_tokens": 2})).unwrap()
}

/// Sum of one metric over the simulators' /metrics.
async fn sims_metric(sims: &[&SimProcess], name: &str) -> f64 {
    let mut total = 0.0;
    for sim in sims {
        let text = support::client()
            .get(format!("{}/metrics", sim.base_url()))
            .send()
            .await
            .expect("sim metrics")
            .text()
            .await
            .unwrap_or_default();
        total += text
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_aware_routing_sends_each_prefix_where_it_is_cached() {
    // Each pod's cache holds about three tenants' prompts (3 × 62 blocks).
    let cache = ["--prefix-cache-blocks", "200"];
    let sims: Vec<SimProcess> = PODS.iter().map(|p| pod(p, &["m"], &cache)).collect();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let gw = Gateway::start(
        &model_yaml("cache-aware", &refs),
        &["--route-debug-header", "true"],
    );
    let url = gw.url("/v1/chat/completions");

    // Eight tenants, four turns each, interleaved: every turn resends the
    // tenant's history.
    let mut home: HashMap<usize, String> = HashMap::new();
    let mut reasons: HashMap<String, usize> = HashMap::new();
    for turn in 0..4 {
        for tenant in 0..8 {
            let resp = post_json(&url, &tenant_turn(tenant, turn), &[]).await;
            assert_eq!(resp.status(), 200);
            let route = resp
                .headers()
                .get("x-flexinfer-route")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert!(route.contains("strategy=cache-aware"), "{route}");
            let reason = route
                .rsplit("reason=")
                .next()
                .unwrap_or_default()
                .to_owned();
            *reasons.entry(reason).or_default() += 1;
            let pod = served_by(&resp);
            let first = home.entry(tenant).or_insert_with(|| pod.clone());
            assert_eq!(*first, pod, "tenant {tenant} moved at turn {turn}");
        }
    }
    // Two tenants per pod: the first turns were spread by load.
    let mut per_pod: HashMap<&String, usize> = HashMap::new();
    for pod in home.values() {
        *per_pod.entry(pod).or_default() += 1;
    }
    assert!(per_pod.values().all(|&n| n == 2), "{per_pod:?}");
    assert_eq!(reasons.get("prefix_hit"), Some(&24), "{reasons:?}");
    assert_eq!(reasons.get("load"), Some(&8), "{reasons:?}");

    // The engines agree: every repeated system prompt was a cache hit.
    let queries = sims_metric(&refs, "vllm:prefix_cache_queries_total").await;
    let hits = sims_metric(&refs, "vllm:prefix_cache_hits_total").await;
    assert!(hits / queries > 0.7, "hit rate {hits}/{queries}");
    let metrics = gw.metrics().await;
    assert_eq!(
        support::metric_value(
            &metrics,
            "flexinfer_proxy_cache_aware_picks_total{model=\"m\",reason=\"prefix_hit\"}"
        ),
        24.0
    );

    // A pod that leaves the model is forgotten: its tenants move, and
    // nothing is sent to it again.
    let gone = home[&0].clone();
    let kept: Vec<&SimProcess> = sims
        .iter()
        .zip(PODS)
        .filter(|(_, name)| **name != gone)
        .map(|(s, _)| s)
        .collect();
    gw.reload(&model_yaml("cache-aware", &kept)).await;
    for tenant in 0..8 {
        let resp = post_json(&url, &tenant_turn(tenant, 4), &[]).await;
        assert_eq!(resp.status(), 200);
        assert_ne!(served_by(&resp), gone);
    }
}

/// A model server whose inference API is a simulator's but whose
/// `/metrics` is broken in the way `metrics` says: `garbage`, `slow`
/// (never answers) or `missing` (404).
async fn broken_metrics_pod(sim: &SimProcess, metrics: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let upstream = sim.base_url();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                // Read the head and (by Content-Length) the body.
                let (head_end, length) = loop {
                    let Ok(n) = conn.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (end + 4, length);
                    }
                };
                while buf.len() < head_end + length {
                    let Ok(n) = conn.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, body) = if path == "/metrics" {
                    match metrics {
                        "slow" => {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            return;
                        }
                        "missing" => (404, b"not found".to_vec()),
                        _ => (
                            200,
                            b"<html>vllm:num_requests_waiting{ oops\n\x00\xff".to_vec(),
                        ),
                    }
                } else {
                    let resp = support::client()
                        .post(format!("{upstream}{path}"))
                        .header("content-type", "application/json")
                        .body(buf[head_end..head_end + length].to_vec())
                        .send()
                        .await
                        .expect("sim answers");
                    let status = resp.status().as_u16();
                    (status, resp.bytes().await.unwrap_or_default().to_vec())
                };
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    format!("\"http://{addr}\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_aware_routing_never_fails_a_request_over_broken_engine_metrics() {
    let sims: Vec<SimProcess> = ["pod-a", "pod-b", "pod-c"]
        .iter()
        .map(|p| pod(p, &["m"], &[]))
        .collect();
    let mut urls = Vec::new();
    for (sim, kind) in sims.iter().zip(["garbage", "slow", "missing"]) {
        urls.push(broken_metrics_pod(sim, kind).await);
    }
    let yaml = format!(
        "models:\n- name: m\n  routing: cache-aware\n  endpoints: [{}]\n",
        urls.join(", ")
    );
    let gw = Gateway::start(
        &yaml,
        &[
            "--load-scrape-interval",
            "100ms",
            "--load-scrape-timeout",
            "200ms",
            "--route-debug-header",
            "true",
        ],
    );
    let url = gw.url("/v1/chat/completions");
    let started = Instant::now();
    let mut served: HashMap<String, usize> = HashMap::new();
    while started.elapsed() < Duration::from_secs(2) {
        for tenant in 0..6 {
            let resp = post_json(&url, &tenant_turn(tenant, 0), &[]).await;
            assert_eq!(resp.status(), 200);
            let route = resp
                .headers()
                .get("x-flexinfer-route")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let endpoint = route.split(';').next().unwrap_or_default().to_owned();
            *served.entry(endpoint).or_default() += 1;
        }
    }
    // Every pod keeps serving: none is dropped for its metrics.
    assert_eq!(served.len(), 3, "{served:?}");
    let metrics = gw.metrics().await;
    for result in ["error", "unrecognised"] {
        let series =
            format!("flexinfer_proxy_load_scrapes_total{{model=\"m\",result=\"{result}\"}}");
        assert!(
            support::metric_value(&metrics, &series) >= 2.0,
            "{series} in {metrics}"
        );
    }
}

/// POSTs a Responses API create request for `m`; returns the new id and the pod that served it.
async fn create_response(gw: &Gateway, input: &str, stream: bool) -> (String, String) {
    let body = json!({"model": "m", "input": input, "stream": stream});
    let resp = post_json(&gw.url("/v1/responses"), body.to_string().as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200);
    let pod = served_by(&resp);
    let text = resp.text().await.expect("body");
    let id = if stream {
        let created = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<serde_json::Value>(d).expect("event json"))
            .find(|e| e["type"] == "response.created")
            .expect("a response.created event");
        assert!(text.contains("event: response.completed"), "{text}");
        created["response"]["id"].as_str().expect("id").to_owned()
    } else {
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["id"].as_str().expect("id").to_owned()
    };
    (id, pod)
}

#[tokio::test]
async fn response_follow_ups_reach_the_pod_that_created_them() {
    // A context window that fits a prompt beyond 64 KiB.
    let window = ["--max-model-len", "100000"];
    let sims = [pod("pod-a", &["m"], &window), pod("pod-b", &["m"], &window)];
    let gw = Gateway::start(&model_yaml("default", &[&sims[0], &sims[1]]), &[]);
    let client = support::client();

    // An id the gateway never saw created: its own 404, no pod asked.
    for (method, path) in [
        (reqwest::Method::GET, "/v1/responses/resp_unknown"),
        (reqwest::Method::POST, "/v1/responses/resp_unknown/cancel"),
        (
            reqwest::Method::GET,
            "/v1/responses/resp_unknown/input_items",
        ),
    ] {
        let resp = client
            .request(method, gw.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(served_by(&resp), "");
        let (status, _, body) = support::error_of(resp).await;
        assert_eq!(status, 404, "{path}: {body}");
        let err = support::assert_openai_error(&body, "response_not_found");
        assert!(err["message"]
            .as_str()
            .unwrap_or("")
            .contains("resp_unknown"));
    }

    // Round-robin spreads the creations over both pods.
    let created = [
        create_response(&gw, "first question", false).await,
        create_response(&gw, "second question", false).await,
        create_response(&gw, "third question", true).await,
        create_response(&gw, "fourth question", true).await,
    ];
    let pods: std::collections::HashSet<&str> = created.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(pods.len(), 2, "{created:?}");
    // A body beyond Pingora's 64 KiB retry buffer takes the subrequest path.
    let long_input = format!("{} question", "word ".repeat(20_000));
    let long = create_response(&gw, &long_input, false).await;
    let created = [created.as_slice(), std::slice::from_ref(&long)].concat();

    for (id, pod) in &created {
        // Round-robin alone would send every other follow-up to the other pod.
        for _ in 0..2 {
            let resp = client
                .get(gw.url(&format!("/v1/responses/{id}")))
                .send()
                .await
                .expect("retrieve");
            assert_eq!(resp.status(), 200);
            assert_eq!(&served_by(&resp), pod);
            let v: serde_json::Value = resp.json().await.expect("json");
            assert_eq!(v["id"], id.as_str());
            assert_eq!(v["status"], "completed");
        }
        let resp = client
            .get(gw.url(&format!("/v1/responses/{id}/input_items?order=asc")))
            .send()
            .await
            .expect("input items");
        assert_eq!(resp.status(), 200);
        assert_eq!(&served_by(&resp), pod);
        let items: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(items["object"], "list");
        assert!(items["data"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("question")));
        // The SDK sends a JSON content type with an empty body.
        let resp = post_json(&gw.url(&format!("/v1/responses/{id}/cancel")), b"", &[]).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(&served_by(&resp), pod);
    }

    // A deleted response is forgotten: the next follow-up is the gateway's 404.
    let (id, pod) = &created[0];
    let resp = client
        .delete(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status(), 200);
    assert_eq!(&served_by(&resp), pod);
    let v: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(v["deleted"], true);
    let resp = client
        .get(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("retrieve");
    assert_eq!(served_by(&resp), "");
    let (status, _, body) = support::error_of(resp).await;
    assert_eq!(status, 404);
    support::assert_openai_error(&body, "response_not_found");

    // A follow-up whose head names the model goes through even when unknown:
    // the pod answers for itself.
    let resp = client
        .get(gw.url("/v1/responses/resp_elsewhere"))
        .header("x-model-id", "m")
        .send()
        .await
        .expect("retrieve");
    assert_eq!(resp.status(), 404);
    assert!(!served_by(&resp).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_engine_seen_saturated_gets_no_more_than_its_slots_and_the_rest_wait_in_the_gateway() {
    // Two slots, about half a second per answer.
    let sim = pod(
        "pod-a",
        &["m"],
        &["--max-concurrency", "2", "--tokens-per-second", "20"],
    );
    let gw = Gateway::start(
        &model_yaml("cache-aware", &[&sim]),
        &["--load-scrape-interval", "100ms"],
    );
    let url = gw.url("/v1/chat/completions");
    let wave = |n: usize, tag: &'static str| {
        let url = url.clone();
        async move {
            let answers = futures::future::join_all((0..n).map(|i| {
                let body = json!({"model": "m", "max_tokens": 10,
                    "messages": [{"role": "user", "content": format!("{tag} {i}")}]});
                let url = url.clone();
                async move {
                    post_json(&url, body.to_string().as_bytes(), &[])
                        .await
                        .status()
                }
            }))
            .await;
            assert!(answers.iter().all(|s| *s == 200), "{answers:?}");
        }
    };
    // Nothing known yet: the engine takes six and queues four (the
    // scraper sees it saturated).
    wave(6, "first").await;

    // Now eight at once: the engine holds at most one waiting request
    // (its two slots plus one); the others wait in the gateway, in order.
    let second = tokio::spawn(wave(8, "second"));
    let mut most_waiting: f64 = 0.0;
    while !second.is_finished() {
        most_waiting = most_waiting.max(sims_metric(&[&sim], "vllm:num_requests_waiting").await);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    second.await.unwrap();
    assert!(most_waiting <= 1.0, "the engine queued {most_waiting}");
    let waited = support::metric_value(
        &gw.metrics().await,
        "flexinfer_proxy_queue_wait_duration_seconds_count{model=\"m\"}",
    );
    assert!(waited >= 4.0, "{waited} requests waited in the gateway");
}
