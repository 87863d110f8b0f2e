//! Routing strategies over real pods: session affinity, prefix affinity,
//! least-loaded, and what a pod leaving the model file moves.

mod support;

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
