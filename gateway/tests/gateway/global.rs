//! Global mode: a global gateway (`--global`) in front of two member
//! clusters' gateways, each with a simulator behind it, all real processes
//! on loopback. Locality first, failover without client-visible errors when
//! a member gateway stops or answers 5xx, the cold-start policy, weights,
//! and the OpenAI-shaped 503 when no cluster is left.
//!
//! Run with `-- --nocapture` to see the measured failover figures.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    assert_openai_error, error_of, free_port, local_sim_model, median, metric_value, pod,
    post_json, served_by, Gateway, SimProcess,
};

/// The header naming the member cluster that answered.
const CLUSTER: &str = "x-flexinfer-cluster";

/// Probe timing of the global gateways under test.
const PROBE_FLAGS: [&str; 4] = [
    "--global-probe-interval",
    "500ms",
    "--global-probe-timeout",
    "500ms",
];

/// One member cluster: its gateway and what serves behind it.
struct Member {
    gateway: Gateway,
    _sim: Option<SimProcess>,
}

/// A member gateway serving `models` from one simulator that names itself
/// `name` in `X-Served-By`.
fn member(name: &str, models: &[&str]) -> Member {
    // Large request bodies (prompts of millions of 4-byte tokens) must fit.
    let sim = pod(name, models, &["--max-model-len", "100000000"]);
    let mut yaml = String::from("models:\n");
    for model in models {
        yaml.push_str(&format!(
            "- name: {model}\n  endpoints: [\"{}\"]\n",
            sim.base_url()
        ));
    }
    Member {
        gateway: Gateway::start(&yaml, &[]),
        _sim: Some(sim),
    }
}

/// A member gateway from a whole model file (e.g. a model run on demand).
fn member_with(yaml: &str) -> Member {
    Member {
        gateway: Gateway::start_local(yaml, &[]),
        _sim: None,
    }
}

/// A GlobalProxy manifest over `(name, base URL, weight)` clusters.
/// Members `east` and `west` serving model `m`, and a Failover global
/// object preferring `east`.
fn east_west_failover() -> (Member, Member, String) {
    let east = member("east", &["m"]);
    let west = member("west", &["m"]);
    let yaml = global_yaml(
        "Failover",
        &[
            ("east", base_url(&east.gateway), 1),
            ("west", base_url(&west.gateway), 1),
        ],
        &["east", "west"],
    );
    (east, west, yaml)
}

fn global_yaml(strategy: &str, clusters: &[(&str, String, u32)], order: &[&str]) -> String {
    let mut yaml = format!(
        "apiVersion: ai.flexinfer/v1alpha2\nkind: GlobalProxy\nmetadata:\n  name: global\n\
         spec:\n  externalEndpoint: llm.example.com\n  strategy: {strategy}\n"
    );
    if !order.is_empty() {
        yaml.push_str(&format!("  failoverOrder: [{}]\n", order.join(", ")));
    }
    yaml.push_str("  clusters:\n");
    for (name, url, weight) in clusters {
        yaml.push_str(&format!(
            "  - name: {name}\n    endpoint: {url}\n    weight: {weight}\n"
        ));
    }
    yaml
}

fn base_url(gw: &Gateway) -> String {
    format!("http://{}", gw.addr)
}

fn chat_body(model: &str) -> Vec<u8> {
    serde_json::to_vec(&support::chat(model)).unwrap()
}

fn cluster_of(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(CLUSTER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// `flexinfer_proxy_global_cluster_up{cluster=...}` of the global gateway.
async fn cluster_up(global: &Gateway, cluster: &str) -> Option<f64> {
    let text = global.metrics().await;
    let series = format!("flexinfer_proxy_global_cluster_up{{cluster=\"{cluster}\"}}");
    text.lines()
        .any(|l| l.starts_with(&series))
        .then(|| metric_value(&text, &series))
}

/// Waits until the global gateway counts each cluster as up (or down).
async fn wait_health(global: &Gateway, clusters: &[&str], up: bool, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut all = true;
        for cluster in clusters {
            let value = cluster_up(global, cluster).await;
            all &= value == Some(if up { 1.0 } else { 0.0 });
        }
        if all {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "clusters {clusters:?} not {} within {limit:?}:\n{}",
            if up { "up" } else { "down" },
            global.metrics().await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One chat completion through the global gateway: status, answering
/// cluster, simulator, latency.
async fn chat(global: &Gateway, model: &str) -> (u16, String, String, Duration) {
    let started = Instant::now();
    let resp = post_json(&global.url("/v1/chat/completions"), &chat_body(model), &[]).await;
    let status = resp.status().as_u16();
    let (cluster, pod) = (cluster_of(&resp), served_by(&resp));
    let body: Value = resp.json().await.expect("JSON answer");
    if status == 200 {
        assert!(body["choices"][0]["message"].is_object(), "{body}");
    }
    (status, cluster, pod, started.elapsed())
}

/// Retries of `model` after a failed connection (any reason but a 5xx).
fn connection_retries(metrics: &str, model: &str) -> f64 {
    let all = metric_value(
        metrics,
        &format!("flexinfer_proxy_upstream_retries_total{{model=\"{model}\""),
    );
    all - retries(metrics, model, "server_error")
}

fn retries(metrics: &str, model: &str, reason: &str) -> f64 {
    metric_value(
        metrics,
        &format!("flexinfer_proxy_upstream_retries_total{{model=\"{model}\",reason=\"{reason}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_then_failover_when_its_gateway_stops() {
    let (mut east, _west, yaml) = east_west_failover();
    let global = Gateway::start_global(&yaml, &PROBE_FLAGS);
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;

    // Locality first: every request goes to east, buffered or streamed
    // through (the model in the path prefix reaches the member intact).
    let mut baseline = Vec::new();
    for i in 0..20 {
        let (status, cluster, pod, took) = chat(&global, "m").await;
        assert_eq!(
            (status, cluster.as_str(), pod.as_str()),
            (200, "east", "east"),
            "request {i}"
        );
        baseline.push(took);
    }
    let resp = support::client()
        .get(global.url("/model/m/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (resp.status().as_u16(), cluster_of(&resp)),
        (200, "east".into())
    );
    let listed: Value = support::client()
        .get(global.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["data"][0]["id"], "m", "{listed}");

    // Stop east's gateway: requests keep succeeding, via west.
    east.gateway.kill();
    let stopped = Instant::now();
    let mut first: Option<(Duration, Duration)> = None;
    let mut during = Vec::new();
    let mut after = Vec::new();
    let mut detected = None;
    let mut sent = 0;
    while detected.is_none() || after.len() < 20 {
        let (status, cluster, pod, took) = chat(&global, "m").await;
        sent += 1;
        assert_eq!(status, 200, "request {sent} after the stop failed");
        assert_eq!((cluster.as_str(), pod.as_str()), ("west", "west"));
        if first.is_none() {
            first = Some((stopped.elapsed(), took));
        }
        if detected.is_some() {
            after.push(took);
        } else {
            during.push(took);
        }
        if detected.is_none() && cluster_up(&global, "east").await == Some(0.0) {
            detected = Some(stopped.elapsed());
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "the probe never took east out"
        );
    }
    let streamed = support::client()
        .get(global.url("/model/m/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (streamed.status().as_u16(), cluster_of(&streamed)),
        (200, "west".into())
    );

    let (failover, first_latency) = first.expect("a request after the stop");
    let detected = detected.expect("east detected down");
    let base = median(&baseline);
    let settled = median(&after);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "global failover: stop -> first success via west {:.1} ms; first failed-over request \
         {:.2} ms vs median {:.2} ms before the stop; probe took east out after {:.0} ms; \
         {} requests until then, all 200, median {:.2} ms (trying east first) vs {:.2} ms after",
        ms(failover),
        ms(first_latency),
        ms(base),
        ms(detected),
        during.len(),
        ms(median(&during)),
        ms(settled),
    );
    // Loopback: a refused connection costs well under a millisecond; the
    // bound is generous for a loaded CI machine.
    assert!(
        failover < Duration::from_secs(5),
        "failover took {failover:?}"
    );
    let metrics = global.metrics().await;
    let tried_east = connection_retries(&metrics, "m");
    assert!(
        tried_east > 0.0,
        "east was never tried after the stop:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_answering_5xx_is_failed_over() {
    // East's gateway is up, but the model's only pod there is gone: east
    // answers 502 for it.
    let dead = support::dead_endpoint(1);
    let east = member_with(&format!("models:\n- name: m\n  endpoints: [\"{dead}\"]\n"));
    let west = member("west", &["m"]);
    let yaml = global_yaml(
        "Failover",
        &[
            ("east", base_url(&east.gateway), 1),
            ("west", base_url(&west.gateway), 1),
        ],
        &["east", "west"],
    );
    let global = Gateway::start_global(&yaml, &PROBE_FLAGS);
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;

    for i in 0..5 {
        let (status, cluster, pod, _) = chat(&global, "m").await;
        assert_eq!(
            (status, cluster.as_str(), pod.as_str()),
            (200, "west", "west"),
            "request {i}"
        );
        let resp = support::client()
            .get(global.url("/model/m/v1/models"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            (resp.status().as_u16(), cluster_of(&resp)),
            (200, "west".into())
        );
    }
    // A body beyond Pingora's 64 KiB retry buffer fails over too.
    let long = "x".repeat(300 * 1024);
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": long}],
        "max_tokens": 4
    });
    for i in 0..3 {
        let resp = post_json(
            &global.url("/v1/chat/completions"),
            &serde_json::to_vec(&body).unwrap(),
            &[],
        )
        .await;
        assert_eq!(
            (resp.status().as_u16(), cluster_of(&resp)),
            (200, "west".into()),
            "large request {i}"
        );
    }
    let recorded = support::last_recorded(west._sim.as_ref().unwrap()).await;
    assert_eq!(
        recorded["body_sha256"],
        support::sha256_hex(&serde_json::to_vec(&body).unwrap())
    );
    let metrics = global.metrics().await;
    assert!(
        retries(&metrics, "m", "server_error") >= 13.0,
        "east's 502s were not retried:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cluster_available_is_an_openai_503() {
    // Members that never answered: any model may exist there, so 503.
    let nowhere = global_yaml(
        "RoundRobin",
        &[
            ("east", support::dead_endpoint(1), 1),
            ("west", support::dead_endpoint(2), 1),
        ],
        &[],
    );
    let global = Gateway::start_global(&nowhere, &PROBE_FLAGS);
    let resp = post_json(&global.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 503);
    let err = assert_openai_error(&body, "service_unavailable");
    assert_eq!(err["message"], "no cluster available for model 'm'");
    drop(global);

    // Members that answered, then both stopped: their models stay known
    // (503), a model none of them listed is unknown (404).
    let mut east = member("east", &["m"]);
    let mut west = member("west", &["m"]);
    let yaml = global_yaml(
        "RoundRobin",
        &[
            ("east", base_url(&east.gateway), 1),
            ("west", base_url(&west.gateway), 1),
        ],
        &[],
    );
    let global = Gateway::start_global(&yaml, &PROBE_FLAGS);
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;
    assert_eq!(chat(&global, "m").await.0, 200);
    east.gateway.kill();
    west.gateway.kill();
    // Before the probes notice, requests still get a clean error (the last
    // refused connection), never a hang.
    let resp = post_json(&global.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    let (status, _, body) = error_of(resp).await;
    assert!(status == 502 || status == 503, "{status}: {body}");
    wait_health(&global, &["east", "west"], false, Duration::from_secs(20)).await;

    let resp = post_json(&global.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    let (status, headers, body) = error_of(resp).await;
    assert_eq!(status, 503, "{body}");
    assert!(headers.contains_key("x-request-id"));
    let err = assert_openai_error(&body, "service_unavailable");
    assert_eq!(err["message"], "no cluster available for model 'm'");
    assert_eq!(global.listed_phase("m").await, "Unavailable");
    let resp = post_json(&global.url("/v1/chat/completions"), &chat_body("nope"), &[]).await;
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 404, "{body}");
    assert_openai_error(&body, "model_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_strategy_splits_by_weight() {
    let east = member("east", &["m"]);
    let west = member("west", &["m"]);
    let yaml = global_yaml(
        "Weighted",
        &[
            ("east", base_url(&east.gateway), 3),
            ("west", base_url(&west.gateway), 1),
        ],
        &[],
    );
    let global = Gateway::start_global(&yaml, &PROBE_FLAGS);
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;
    let mut east_hits = 0;
    for _ in 0..40 {
        let (status, cluster, _, _) = chat(&global, "m").await;
        assert_eq!(status, 200);
        if cluster == "east" {
            east_hits += 1;
        } else {
            assert_eq!(cluster, "west");
        }
    }
    // 3:1 is 30 of 40; the rotation is exact for sequential requests.
    assert!(
        (26..=34).contains(&east_hits),
        "east served {east_hits} of 40"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_far_cluster_beats_a_cold_start_nearby() {
    // East, the nearest, runs the model on demand: listed as Idle (cold).
    // West has it warm.
    let port = free_port();
    let mut east = member_with(&format!(
        "models:\n{}",
        local_sim_model("m", port, "0s", "")
    ));
    assert_eq!(east.gateway.listed_phase("m").await, "Idle");
    let mut west = member("west", &["m"]);
    let yaml = global_yaml(
        "Failover",
        &[
            ("east", base_url(&east.gateway), 1),
            ("west", base_url(&west.gateway), 1),
        ],
        &["east", "west"],
    );
    let global = Gateway::start_global(&yaml, &PROBE_FLAGS);
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;

    assert_eq!(global.listed_phase("m").await, "Ready");
    for i in 0..5 {
        let (status, cluster, _, _) = chat(&global, "m").await;
        assert_eq!((status, cluster.as_str()), (200, "west"), "request {i}");
    }
    assert_eq!(
        east.gateway.listed_phase("m").await,
        "Idle",
        "the nearest cluster was cold-started although a warm one served"
    );

    // Nobody warm any more: the nearest healthy cluster cold-starts it.
    west.gateway.kill();
    let (status, cluster, _, _) = chat(&global, "m").await;
    assert_eq!((status, cluster.as_str()), (200, "east"));
    assert_eq!(east.gateway.listed_phase("m").await, "Ready");
    east.gateway.interrupt(Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_takes_a_dead_cluster_out_before_its_next_probe() {
    let (mut east, _west, yaml) = east_west_failover();
    // Probes every 60 s: only the first round runs within this test.
    let global = Gateway::start_global(
        &yaml,
        &[
            "--global-probe-interval",
            "60s",
            "--global-probe-timeout",
            "1s",
        ],
    );
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;
    assert_eq!(chat(&global, "m").await.1, "east");

    east.gateway.kill();
    let stopped = Instant::now();
    let (status, cluster, _, _) = chat(&global, "m").await;
    assert_eq!((status, cluster.as_str()), (200, "west"));
    // The failed connection had east probed at once, not a minute later.
    wait_health(&global, &["east"], false, Duration::from_secs(10)).await;
    eprintln!(
        "global failover: east taken out {:.0} ms after the stop (probe interval 60 s)",
        stopped.elapsed().as_secs_f64() * 1e3
    );
    let metrics = global.metrics().await;
    assert_eq!(connection_retries(&metrics, "m"), 1.0, "{metrics}");
    for _ in 0..5 {
        let (status, cluster, _, _) = chat(&global, "m").await;
        assert_eq!((status, cluster.as_str()), (200, "west"));
    }
    // East is no longer tried.
    let metrics = global.metrics().await;
    assert_eq!(connection_retries(&metrics, "m"), 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_token_reaches_members_that_require_a_key() {
    let sim = pod("east", &["m"], &[]);
    let east = Gateway::start(
        &format!(
            "models:\n- name: m\n  endpoints: [\"{}\"]\n",
            sim.base_url()
        ),
        &["--auth-enabled", "true", "--auth-token", "member-key"],
    );
    let yaml = global_yaml("Failover", &[("east", base_url(&east), 1)], &["east"]);

    // Without the key the member's model list is refused: never up.
    let keyless = Gateway::start_global(&yaml, &PROBE_FLAGS);
    let failed = "flexinfer_proxy_global_probes_total{cluster=\"east\",result=\"failure\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric_value(&keyless.metrics().await, failed) < 2.0 {
        assert!(Instant::now() < deadline, "no failed probes of east");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cluster_up(&keyless, "east").await, Some(0.0));
    drop(keyless);

    // With it, probes and requests get in: the member accepts only its own
    // key, so a 200 shows it got that key instead of the client's (which
    // the global gateway checks itself).
    let mut flags = PROBE_FLAGS.to_vec();
    flags.extend([
        "--global-member-token",
        "member-key",
        "--auth-enabled",
        "true",
        "--auth-token",
        "client-key",
    ]);
    let global = Gateway::start_global(&yaml, &flags);
    wait_health(&global, &["east"], true, Duration::from_secs(20)).await;
    let resp = post_json(
        &global.url("/v1/chat/completions"),
        &chat_body("m"),
        &[("authorization", "Bearer client-key")],
    )
    .await;
    assert_eq!(
        (resp.status().as_u16(), cluster_of(&resp)),
        (200, "east".into())
    );
    let resp = post_json(&global.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
    assert_eq!(resp.status(), 401, "the global gateway checks its own keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_proxy_object_is_watched_in_kubernetes() {
    use flexinfer_crds::v1alpha2::GlobalProxy;
    use kube::api::{Api, Patch, PatchParams, PostParams};

    let server = flexinfer_testkube::TestApiServer::builder()
        .start()
        .await
        .expect("in-memory API server");
    let (_east, _west, yaml) = east_west_failover();
    let proxies: Api<GlobalProxy> = Api::namespaced(server.client(), "default");
    let object: GlobalProxy = serde_yaml::from_str(&yaml).unwrap();
    proxies
        .create(&PostParams::default(), &object)
        .await
        .expect("create the GlobalProxy");

    let kubeconfig = server.kubeconfig_path().to_str().unwrap().to_string();
    let mut args = vec![
        "--global-object",
        "default/global",
        "--kubeconfig",
        kubeconfig.as_str(),
    ];
    args.extend(PROBE_FLAGS);
    let global = Gateway::start_args(&args);
    wait_health(&global, &["east", "west"], true, Duration::from_secs(20)).await;
    assert_eq!(chat(&global, "m").await.1, "east");
    // The gateway writes what it sees into the object's status.
    let status = |active: &'static str| {
        let proxies = proxies.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let object = proxies.get_status("global").await.expect("read the status");
                let status = object.status.unwrap_or_default();
                let holds = |kind: &str| {
                    status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == kind && c.status == "True")
                };
                if status.active_cluster.as_deref() == Some(active)
                    && status.healthy_clusters == Some(2)
                    && status.total_clusters == Some(2)
                    && holds("Ready")
                    && holds("Accepted")
                {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "status never showed {active}: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    status("east").await;

    // Reorder in the cluster: the gateway follows without a restart.
    let patch = serde_json::json!({"spec": {"failoverOrder": ["west", "east"]}});
    proxies
        .patch("global", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the GlobalProxy");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, cluster, _, _) = chat(&global, "m").await;
        assert_eq!(status, 200);
        if cluster == "west" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new failoverOrder was not applied"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    status("west").await;

    // An invalid version is refused; the previous clusters stay in force.
    let patch = serde_json::json!({"spec": {"failoverOrder": ["nowhere"]}});
    proxies
        .patch("global", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the GlobalProxy");
    // The refusal is reported on the object, for the generation refused.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let object = proxies.get_status("global").await.expect("read the status");
        let generation = object.metadata.generation;
        let status = object.status.unwrap_or_default();
        let accepted = status.conditions.iter().find(|c| c.type_ == "Accepted");
        if let Some(c) = accepted.filter(|c| c.status == "False") {
            assert_eq!(c.reason, "InvalidSpec");
            assert!(c.message.contains("nowhere"), "{}", c.message);
            assert_eq!(c.observed_generation, generation);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the refusal was not reported: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..3 {
        assert_eq!(chat(&global, "m").await.1, "west");
    }
}
