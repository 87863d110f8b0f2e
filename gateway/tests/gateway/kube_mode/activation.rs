//! Kubernetes mode, activation: the test plays the operator's part against
//! an in-memory API server, counting the gateway's patches in its request
//! log. Fixtures and the "operator" write with `insert`, which the log does
//! not count, so every counted request is the gateway's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flexinfer_gateway::kube::RBAC_RULES;
use flexinfer_testkube::{TestApiServer, Verb};
use serde_json::{json, Value};

use crate::kube_mode::kube_support::{eventually, model, slice, KubeGateway};
use crate::support::pod;

fn object(server: &TestApiServer, api_version: &str, kind: &str, name: &str) -> Value {
    server
        .object(api_version, kind, "default", name)
        .unwrap_or_else(|| panic!("{kind} {name} exists"))
}

fn model_obj(server: &TestApiServer, name: &str) -> Value {
    object(server, "ai.flexinfer/v1alpha2", "Model", name)
}

/// The operator's part once a model has loaded: `Ready`, with `pod` as its
/// one ready endpoint.
fn turn_ready(server: &TestApiServer, name: &str, pod: &crate::support::SimProcess) {
    let mut ready = model_obj(server, name);
    ready["status"]["phase"] = json!("Ready");
    server.insert(&ready).unwrap();
    server
        .insert(&slice(
            "default",
            name,
            &format!("{name}-1"),
            &[(pod.addr(), None)],
        ))
        .unwrap();
}

/// A gateway whose own wait bounds are 1 s, and one request for `model`
/// waiting in its queue.
async fn one_queued_request(
    server: &TestApiServer,
    model: &'static str,
) -> (Arc<KubeGateway>, tokio::task::JoinHandle<u16>) {
    let gw = Arc::new(
        KubeGateway::start(
            server,
            &["--cold-start-timeout", "1s", "--queue-timeout", "1s"],
        )
        .await,
    );
    let request = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat(model).await.status().as_u16() })
    };
    eventually("the request queued", || async {
        (gw.admin(model).await["queueDepth"] == 1).then_some(())
    })
    .await;
    (gw, request)
}

/// Every request the gateway made is allowed by `RBAC_RULES`.
fn assert_covered_by_rbac(server: &TestApiServer) {
    for (verb, resource, n) in server.request_counts() {
        if n == 0 {
            continue;
        }
        let verb = match verb {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        };
        assert!(
            RBAC_RULES
                .iter()
                .any(|(_, r, verbs)| *r == resource && verbs.contains(&verb)),
            "the gateway sent {n} {verb} on {resource}, which RBAC_RULES does not grant"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaled_to_zero_model_gets_one_patch_for_100_queued_requests() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    server
        .insert(&model("default", "m", Some("Idle"), json!({})))
        .unwrap();
    let gw = Arc::new(KubeGateway::start(&server, &["--max-queue-size", "200"]).await);
    assert_eq!(gw.admin("m").await["phase"], "Idle");

    let mut requests = Vec::new();
    for _ in 0..100 {
        let gw = gw.clone();
        requests.push(tokio::spawn(
            async move { gw.chat("m").await.status().as_u16() },
        ));
    }
    eventually("100 queued requests", || async {
        (gw.admin("m").await["queueDepth"] == 100).then_some(())
    })
    .await;
    // The operator's part: it sees lastActiveTime and starts a pod.
    let m = eventually("the lastActiveTime patch", || async {
        let m = model_obj(&server, "m");
        m["status"]["lastActiveTime"].is_string().then_some(m)
    })
    .await;
    let t = m["status"]["lastActiveTime"].as_str().unwrap();
    assert!(humantime::parse_rfc3339(t).is_ok(), "RFC 3339: {t}");
    let managers: Vec<&str> = m["metadata"]["managedFields"]
        .as_array()
        .map(|f| f.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    assert!(managers.contains(&"flexinfer-gateway"), "{managers:?}");

    // Ready without a ready endpoint is not ready: nobody is released.
    let mut ready = m.clone();
    ready["status"]["phase"] = json!("Ready");
    server.insert(&ready).unwrap();
    eventually("phase Loading", || async {
        (gw.admin("m").await["phase"] == "Loading").then_some(())
    })
    .await;
    assert!(requests.iter().all(|r| !r.is_finished()));
    assert_eq!(gw.admin("m").await["queueDepth"], 100);

    server
        .insert(&slice("default", "m", "m-1", &[(p.addr(), None)]))
        .unwrap();
    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    assert_eq!(gw.admin("m").await["queueDepth"], 0);
    // Served requests touch the model, but the activation counted as the
    // touch of this minute.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.writes(Verb::Patch, "models/status"), 1);
    assert_eq!(server.total_writes(), 1, "{:?}", server.request_counts());
    assert_covered_by_rbac(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_active_time_is_touched_at_most_once_per_interval() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    server
        .insert(&model("default", "m", Some("Ready"), json!({})))
        .unwrap();
    server
        .insert(&slice("default", "m", "m-1", &[(p.addr(), None)]))
        .unwrap();
    let interval = Duration::from_secs(1);
    let gw = KubeGateway::start(&server, &["--touch-interval", "1s"]).await;
    gw.wait_endpoints("m", 1).await;

    let start = Instant::now();
    for _ in 0..30 {
        assert_eq!(gw.chat("m").await.status(), 200);
    }
    eventually("the first touch", || async {
        (server.writes(Verb::Patch, "models/status") >= 1).then_some(())
    })
    .await;
    let elapsed = start.elapsed();
    let patches = server.writes(Verb::Patch, "models/status");
    // Each patch needs a full interval after the previous one.
    let bound = (elapsed.as_secs_f64() / interval.as_secs_f64()).floor() as u64 + 1;
    assert!(patches <= bound, "{patches} patches in {elapsed:?}");

    // After an interval without touches, the next request touches again.
    tokio::time::sleep(interval + Duration::from_millis(200)).await;
    let before = server.writes(Verb::Patch, "models/status");
    assert_eq!(gw.chat("m").await.status(), 200);
    eventually("a touch after the interval", || async {
        (server.writes(Verb::Patch, "models/status") > before).then_some(())
    })
    .await;
    let t = model_obj(&server, "m")["status"]["lastActiveTime"]
        .as_str()
        .map(String::from)
        .unwrap_or_default();
    assert!(humantime::parse_rfc3339(&t).is_ok(), "lastActiveTime {t:?}");
    assert_eq!(server.writes(Verb::Patch, "models"), 0);
    assert_covered_by_rbac(&server);
}

fn deployment(name: &str, replicas: i32, group: Option<&str>) -> Value {
    let mut spec = json!({"backend": "vllm", "model": "org/m", "replicas": replicas});
    if let Some(g) = group {
        spec["gpuGroupRef"] = json!(g);
    }
    json!({
        "apiVersion": "ai.flexinfer/v1alpha1", "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

/// The operator's part for a ModelDeployment: one replica, Running and Ready.
fn running(mut md: Value) -> Value {
    md["spec"]["replicas"] = json!(1);
    md["status"]["phase"] = json!("Running");
    md["status"]["conditions"] = json!([{
        "type": "Ready", "status": "True", "reason": "Ready", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]);
    md
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_group_members_get_demand_annotations_until_drained() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    server.insert(&deployment("md", 0, Some("g"))).unwrap();
    server
        .insert(&json!({
            "apiVersion": "ai.flexinfer/v1alpha1", "kind": "GPUGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"models": [{"name": "md"}]}
        }))
        .unwrap();
    let gw = Arc::new(KubeGateway::start(&server, &[]).await);
    let mut requests = Vec::new();
    for _ in 0..5 {
        let gw = gw.clone();
        requests.push(tokio::spawn(async move {
            gw.chat("md").await.status().as_u16()
        }));
    }
    let annotations = |server: &TestApiServer| {
        object(server, "ai.flexinfer/v1alpha1", "GPUGroup", "g")["metadata"]["annotations"].clone()
    };
    let a = eventually("queue depth 5 on the GPUGroup", || async {
        let a = annotations(&server);
        (a["flexinfer.ai/queue.md"] == "5").then_some(a)
    })
    .await;
    let since = a["flexinfer.ai/queue-since.md"]
        .as_str()
        .unwrap_or_default();
    assert!(
        humantime::parse_rfc3339(since).is_ok(),
        "queue-since {since:?}"
    );
    // A group member is started by the group, not by the gateway.
    let md = object(&server, "ai.flexinfer/v1alpha1", "ModelDeployment", "md");
    assert_eq!(md["spec"]["replicas"], 0);

    server.insert(&running(md)).unwrap();
    server
        .insert(&slice("default", "md", "md-1", &[(p.addr(), None)]))
        .unwrap();
    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    eventually("demand annotations cleared", || async {
        let a = annotations(&server);
        (a.get("flexinfer.ai/queue.md").is_none() && a.get("flexinfer.ai/queue-since.md").is_none())
            .then_some(())
    })
    .await;
    assert_eq!(server.writes(Verb::Patch, "modeldeployments"), 0);
    assert_covered_by_rbac(&server);
}

/// A GPUGroup member's requests wait for a swap (the running member
/// drained, then this one loaded): at least two minutes, however short the
/// gateway's and the member's own bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_group_member_waits_long_enough_for_a_swap() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    // The shortest cold-start bound a ModelDeployment may set.
    let mut md = deployment("md", 0, Some("g"));
    md["spec"]["coldStartTimeoutSeconds"] = json!(10);
    server.insert(&md).unwrap();
    server
        .insert(&json!({
            "apiVersion": "ai.flexinfer/v1alpha1", "kind": "GPUGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"models": [{"name": "md"}]}
        }))
        .unwrap();
    let (_gw, request) = one_queued_request(&server, "md").await;
    // The swap takes longer than the member's own bound and the gateway's.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(
        !request.is_finished(),
        "answered before the swap could finish"
    );
    let md = object(&server, "ai.flexinfer/v1alpha1", "ModelDeployment", "md");
    server.insert(&running(md)).unwrap();
    server
        .insert(&slice("default", "md", "md-1", &[(p.addr(), None)]))
        .unwrap();
    assert_eq!(request.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_deployment_is_scaled_from_zero_to_one() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    server.insert(&deployment("md", 0, None)).unwrap();
    let gw = Arc::new(KubeGateway::start(&server, &[]).await);
    let request = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat("md").await.status().as_u16() })
    };
    let md = eventually("spec.replicas 1", || async {
        let md = object(&server, "ai.flexinfer/v1alpha1", "ModelDeployment", "md");
        (md["spec"]["replicas"] == 1).then_some(md)
    })
    .await;
    assert!(md["status"]["lastAccessTime"].is_string(), "{md}");
    server.insert(&running(md)).unwrap();
    server
        .insert(&slice("default", "md", "md-1", &[(p.addr(), None)]))
        .unwrap();
    assert_eq!(request.await.unwrap(), 200);
    assert_eq!(server.writes(Verb::Patch, "modeldeployments"), 1);
    assert_eq!(server.writes(Verb::Patch, "modeldeployments/status"), 1);
    assert_covered_by_rbac(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_scale_up_fails_the_waiting_requests() {
    let server = TestApiServer::start().await;
    server
        .insert(&model("default", "m", Some("Idle"), json!({})))
        .unwrap();
    let gw = KubeGateway::start(&server, &[]).await;
    // Every attempt (the first and two retries) is refused.
    server.fail_next(Verb::Patch, "models/status", 3, 500);
    let resp = gw.chat("m").await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "activation_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("scale-up failed"), "{message}");
    assert_eq!(server.requests(Verb::Patch, "models/status"), 3);
    // The next request starts a new activation, which now succeeds.
    let gw = Arc::new(gw);
    let retry = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat("m").await.status().as_u16() })
    };
    let m = eventually("lastActiveTime", || async {
        let m = model_obj(&server, "m");
        m["status"]["lastActiveTime"].is_string().then_some(m)
    })
    .await;
    drop(retry);
    assert_eq!(server.requests(Verb::Patch, "models/status"), 4, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_stays_failed_fails_its_requests_with_its_message() {
    let server = TestApiServer::start().await;
    let mut m = model("default", "m", Some("Failed"), json!({}));
    m["status"]["message"] = json!("no node has a matching GPU");
    server.insert(&m).unwrap();
    let gw = KubeGateway::start(&server, &[]).await;
    let started = Instant::now();
    let resp = gw.chat("m").await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "activation_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("model \"m\" is Failed: no node has a matching GPU"),
        "{message}"
    );
    // Failed after the grace period, well before the 60 s activation timeout.
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.writes(Verb::Patch, "models/status"), 1);
}

/// A Model's own `serverless.coldStartTimeout` bounds the wait of its queued
/// requests when it is longer than the gateway's: a model that loads for
/// longer than `--cold-start-timeout` but within its own bound is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_own_cold_start_timeout_bounds_the_wait() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    server
        .insert(&model(
            "default",
            "m",
            Some("Idle"),
            json!({"serverless": {"coldStartTimeout": "20s"}}),
        ))
        .unwrap();
    let (_gw, request) = one_queued_request(&server, "m").await;
    // The model loads for three times the gateway's bound.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !request.is_finished(),
        "answered before the model's own bound"
    );
    turn_ready(&server, "m", &p);
    assert_eq!(request.await.unwrap(), 200);
}

/// Without a bound of its own, a Model's requests wait the gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_own_bound_a_model_waits_the_gateways() {
    let server = TestApiServer::start().await;
    server
        .insert(&model("default", "m", Some("Idle"), json!({})))
        .unwrap();
    let gw = KubeGateway::start(
        &server,
        &["--cold-start-timeout", "1s", "--queue-timeout", "1s"],
    )
    .await;
    let started = Instant::now();
    let resp = gw.chat("m").await;
    assert_eq!(resp.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "activation_timeout", "{body}");
}

/// A request counts as activity for as long as it runs: a stream longer
/// than the touch interval keeps refreshing `lastActiveTime`, so the
/// operator does not scale its pod to zero under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_keeps_its_model_active() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &["--tokens-per-second", "10"]);
    server
        .insert(&model("default", "m", Some("Ready"), json!({})))
        .unwrap();
    server
        .insert(&slice("default", "m", "m-1", &[(p.addr(), None)]))
        .unwrap();
    let gw = Arc::new(KubeGateway::start(&server, &["--touch-interval", "1s"]).await);
    gw.wait_endpoints("m", 1).await;

    // About 4 s of tokens.
    let stream = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let body = json!({"model": "m", "stream": true, "max_tokens": 40,
                              "messages": [{"role": "user", "content": "a long answer"}]});
            let resp = crate::support::client()
                .post(gw.url("/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .expect("stream request");
            assert_eq!(resp.status(), 200);
            resp.bytes().await.expect("the whole stream").len()
        })
    };
    eventually("the stream's start touch", || async {
        (server.writes(Verb::Patch, "models/status") >= 1).then_some(())
    })
    .await;
    let first = model_obj(&server, "m")["status"]["lastActiveTime"].clone();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!stream.is_finished(), "the stream ended too early to tell");
    let during = server.writes(Verb::Patch, "models/status");
    assert!(during >= 2, "{during} activity patches during a 4 s stream");
    assert_ne!(
        model_obj(&server, "m")["status"]["lastActiveTime"],
        first,
        "lastActiveTime did not move while the stream ran"
    );
    assert!(stream.await.unwrap() > 0);
    // The end of the request is activity too, recorded within an interval
    // (to the second, as lastActiveTime is written).
    let ended = std::time::SystemTime::now() - Duration::from_secs(1);
    eventually("a touch at the end of the stream", || async {
        let m = model_obj(&server, "m");
        let t = humantime::parse_rfc3339_weak(m["status"]["lastActiveTime"].as_str()?).ok()?;
        (t >= ended).then_some(())
    })
    .await;
    assert_eq!(gw.admin("m").await["inFlight"], 0);
}

/// With `--backoff-enabled`, a failed scale-up is tried again after a
/// backoff while its requests wait, and they are served once it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_scale_up_is_retried_after_a_backoff() {
    let server = TestApiServer::start().await;
    let p = pod("pod-a", &["org/m"], &[]);
    server
        .insert(&model("default", "m", Some("Idle"), json!({})))
        .unwrap();
    let gw = Arc::new(
        KubeGateway::start(
            &server,
            &[
                "--backoff-enabled",
                "true",
                "--backoff-initial-wait",
                "300ms",
                "--backoff-max-wait",
                "1s",
            ],
        )
        .await,
    );
    // The first activation's three attempts fail, and the retry's first.
    server.fail_next(Verb::Patch, "models/status", 4, 500);
    let started = Instant::now();
    let request = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat("m").await.status().as_u16() })
    };
    eventually("the activity patch of the retry", || async {
        model_obj(&server, "m")["status"]["lastActiveTime"]
            .is_string()
            .then_some(())
    })
    .await;
    // 100 ms + 200 ms between the first attempts, then at least half the
    // initial wait before the retry.
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "retried after {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests(Verb::Patch, "models/status"), 5);
    assert!(
        !request.is_finished(),
        "the request did not wait for the retry"
    );
    turn_ready(&server, "m", &p);
    assert_eq!(request.await.unwrap(), 200);
    let metrics = crate::support::client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("flexinfer_proxy_activation_retries_total{model=\"m\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("activation_retr"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
