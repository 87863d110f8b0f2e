//! Models the gateway runs itself (`command` in the model file): cold start
//! through the activation queue, its bound and timeouts, crash recovery, idle
//! stop and shared-GPU groups. Every test drives the real gateway binary,
//! which starts real `flexinfer-sim` processes.
//!
//! Needs the simulator binary: `cargo build -p flexinfer-conformance --bin flexinfer-sim`.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use support::{
    accepts, admin_model, assert_openai_error, chat, error_of, free_port, local_sim_model,
    metric_value, process_gone, served_by, Gateway,
};

/// Tests that assert on latency take this exclusively; the others share it,
/// so that a latency figure is never measured next to another test's load.
static TIMING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A model file holding `models` (entries from [`local_sim_model`]).
fn model_file(header: &str, models: &[String]) -> String {
    format!("{header}models:\n{}", models.concat())
}

/// One client for many concurrent requests: every request may hold its own
/// connection while it waits in the activation queue.
fn pool_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

async fn send_chat(client: &reqwest::Client, gw: &Gateway, model: &str) -> reqwest::Response {
    client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat(model))
        .send()
        .await
        .unwrap_or_else(|e| panic!("request for {model}: {e}"))
}

/// Reads a successful chat answer from `model`'s simulator.
async fn expect_chat(resp: reqwest::Response, model: &str) {
    assert_eq!(resp.status(), 200, "chat for {model}");
    assert_eq!(served_by(&resp), model, "X-Served-By");
    let body: Value = resp.json().await.expect("chat JSON");
    assert_eq!(body["object"], "chat.completion", "{body}");
    assert!(body["choices"][0]["message"].is_object(), "{body}");
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn time_field(entry: &Value, field: &str) -> SystemTime {
    let text = entry[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {entry}"));
    humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{field} {text:?}: {e}"))
}

fn counter(entry: &Value, field: &str) -> u64 {
    entry[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {entry}"))
}

async fn queue_waits(gw: &Gateway, model: &str) -> f64 {
    metric_value(
        &gw.metrics().await,
        &format!("flexinfer_proxy_queue_wait_duration_seconds_count{{model=\"{model}\"}}"),
    )
}

/// Stops the gateway (SIGINT) and checks that its children went with it.
async fn stop_and_check_children(mut gw: Gateway, ports: &[u16]) {
    assert!(
        gw.interrupt(Duration::from_secs(15)),
        "the gateway did not exit on SIGINT"
    );
    for &port in ports {
        assert!(
            !accepts(port).await,
            "port {port} still accepts after the gateway stopped"
        );
    }
}

/// What one burst of concurrent cold-start requests measured.
struct Burst {
    /// From sending the requests to the first response.
    first_response: Duration,
    /// From the model turning Ready (its `since`) to the first response.
    ready_to_first: Duration,
    /// Sending → process started, started → Ready, Ready → first request at
    /// the backend, in milliseconds (for the log; `None` when not seen).
    phases: (Option<f64>, Option<f64>, f64),
}

/// Sends `requests` concurrent requests to a fresh gateway whose only model
/// is idle and loads for `startup`, checks that every one is served by one
/// process after waiting in the queue, and returns the timings.
async fn cold_burst(requests: usize, startup: &str) -> Burst {
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file("", &[local_sim_model("cold", port, startup, "")]),
        &["--max-queue-size", &requests.to_string()],
    );
    let idle = gw.admin_models().await;
    let entry = admin_model(&idle, "cold");
    assert_eq!(entry["phase"], "Idle", "{entry}");
    assert!(entry["pid"].is_null(), "{entry}");
    assert_eq!(counter(entry, "starts"), 0);
    assert_eq!(gw.listed_phase("cold").await, "Idle");

    let client = pool_client();
    let sent = Instant::now();
    let sent_wall = SystemTime::now();
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let request = client
                .post(gw.url("/v1/chat/completions"))
                .json(&chat("cold"));
            tokio::spawn(async move {
                let resp = request.send().await.expect("request");
                let arrived = (Instant::now(), SystemTime::now());
                (resp, arrived)
            })
        })
        .collect();
    // While the model loads, its `since` is when its process was started.
    let loading = gw
        .wait_admin(Duration::from_secs(5), "activation", |r| {
            admin_model(r, "cold")["phase"] != "Idle"
        })
        .await;
    let loading = admin_model(&loading, "cold");
    let process_started = (loading["phase"] == "Loading").then(|| time_field(loading, "since"));
    let mut first: Option<(Instant, SystemTime)> = None;
    for task in tasks {
        let (resp, arrived) = task.await.expect("request task");
        if first.is_none_or(|f| arrived.0 < f.0) {
            first = Some(arrived);
        }
        expect_chat(resp, "cold").await;
    }
    let (first_at, first_wall) = first.expect("responses");

    let report = gw.admin_models().await;
    let entry = admin_model(&report, "cold");
    assert_eq!(entry["phase"], "Ready", "{entry}");
    assert_eq!(counter(entry, "starts"), 1, "one process: {entry}");
    assert_eq!(counter(entry, "failures"), 0, "{entry}");
    assert_eq!(counter(entry, "queueDepth"), 0, "{entry}");
    assert_eq!(
        queue_waits(&gw, "cold").await,
        requests as f64,
        "every request waited in the queue"
    );
    let ready = time_field(entry, "since");
    let ready_to_first = first_wall
        .duration_since(ready)
        .expect("the first answer arrived after the model turned Ready");

    let recorded: Vec<Value> = client
        .get(format!("http://127.0.0.1:{port}/sim/requests"))
        .send()
        .await
        .expect("recorder")
        .json()
        .await
        .expect("recorder JSON");
    let arrivals: Vec<u64> = recorded
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .filter_map(|r| r["received_at_ms"].as_u64())
        .collect();
    assert_eq!(
        arrivals.len(),
        requests,
        "each request reached the backend once"
    );
    // The backend stamps arrivals in milliseconds: the first one shows when
    // the queue was released, without the time the gateway then spends on
    // the rest of the burst.
    let at_ms = |t: SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_millis() as f64)
    };
    let first_forwarded = arrivals.iter().min().copied().unwrap_or_default() as f64;
    let gap =
        |later: SystemTime, earlier: SystemTime| later.duration_since(earlier).ok().map(millis);
    stop_and_check_children(gw, &[port]).await;
    Burst {
        first_response: first_at - sent,
        ready_to_first,
        phases: (
            process_started.and_then(|t| gap(t, sent_wall)),
            process_started.and_then(|t| gap(ready, t)),
            first_forwarded - at_ms(ready),
        ),
    }
}

/// Acceptance 1 and 8: 200 concurrent requests to an idle model all succeed
/// with exactly one process started, the first answer arrives within the
/// startup delay + 200 ms of sending, and the queue is released by the
/// readiness notification (first answer ≤ 150 ms after the model turned
/// Ready; the target is 50 ms). Timing is taken on a CPU shared with other
/// work (two cores run the simulator, the gateway and 200 clients), so a
/// burst that misses a bound is measured again, up to four bursts, before
/// the test fails; every burst must pass the functional checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cold_start_runs_one_process_and_releases_on_readiness() {
    const REQUESTS: usize = 200;
    const STARTUP: Duration = Duration::from_secs(2);
    const FIRST_RESPONSE: Duration = Duration::from_millis(2200);
    const RELEASE: Duration = Duration::from_millis(150);
    let _exclusive = TIMING.write().await;
    let mut missed = Vec::new();
    for attempt in 1..=4 {
        let burst = cold_burst(REQUESTS, "2s").await;
        let show = |v: Option<f64>| v.map_or("?".to_owned(), |ms| format!("{ms:.0}"));
        println!(
            "burst {attempt}: {REQUESTS} concurrent cold-start requests, first response {:.1} ms \
             after sending (startup delay {} ms); model Ready → first response {:.1} ms \
             [process started {} ms after sending, Ready {} ms later, first request at the \
             backend {:.0} ms after Ready]",
            millis(burst.first_response),
            STARTUP.as_millis(),
            millis(burst.ready_to_first),
            show(burst.phases.0),
            show(burst.phases.1),
            burst.phases.2,
        );
        assert!(
            burst.first_response >= STARTUP,
            "answered before the backend could be ready"
        );
        if burst.first_response <= FIRST_RESPONSE && burst.ready_to_first <= RELEASE {
            return;
        }
        missed.push((burst.first_response, burst.ready_to_first));
    }
    panic!(
        "(first response after sending, after Ready) = {missed:?}; \
         bounds {FIRST_RESPONSE:?} and {RELEASE:?}"
    );
}

/// Acceptance 2: once the model is Ready, a request is not queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_model_serves_without_queueing() {
    let _shared = TIMING.read().await;
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file("", &[local_sim_model("warm", port, "1s", "")]),
        &[],
    );
    let client = pool_client();
    let started = Instant::now();
    expect_chat(send_chat(&client, &gw, "warm").await, "warm").await;
    let cold = started.elapsed();
    assert!(cold >= Duration::from_secs(1), "cold start took {cold:?}");
    assert_eq!(queue_waits(&gw, "warm").await, 1.0);

    let mut warm = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        expect_chat(send_chat(&client, &gw, "warm").await, "warm").await;
        warm.push(started.elapsed());
    }
    let slowest = warm.iter().max().copied().unwrap_or_default();
    println!(
        "cold request {:.1} ms; requests to the Ready model: median {:.1} ms, slowest {:.1} ms",
        millis(cold),
        millis(support::median(&warm)),
        millis(slowest)
    );
    assert_eq!(
        queue_waits(&gw, "warm").await,
        1.0,
        "a request to a Ready model went through the queue"
    );
    assert!(
        slowest < Duration::from_millis(500),
        "requests to a Ready model took up to {slowest:?}"
    );
    let report = gw.admin_models().await;
    assert_eq!(counter(admin_model(&report, "warm"), "starts"), 1);
    stop_and_check_children(gw, &[port]).await;
}

/// Acceptance 3: with `--max-queue-size 5`, of 12 concurrent requests to an
/// idle model the first 5 wait and are all served; the 7 others get 503
/// `queue_full` with `Retry-After` at once, before the model is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_refuses_at_once_and_serves_every_queued_request() {
    const REQUESTS: usize = 12;
    const QUEUE: usize = 5;
    let _shared = TIMING.read().await;
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file("", &[local_sim_model("small-queue", port, "2s", "")]),
        &["--max-queue-size", &QUEUE.to_string()],
    );
    let client = pool_client();
    let sent = Instant::now();
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let request = client
                .post(gw.url("/v1/chat/completions"))
                .json(&chat("small-queue"));
            tokio::spawn(async move {
                let resp = request.send().await.expect("request");
                let waited = sent.elapsed();
                if resp.status() == 200 {
                    expect_chat(resp, "small-queue").await;
                    return (true, waited);
                }
                let (status, headers, body) = error_of(resp).await;
                assert_eq!(status, 503, "{body}");
                assert_openai_error(&body, "queue_full");
                let retry_after = headers
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                assert_eq!(retry_after, Some(5), "Retry-After: {headers:?}");
                (false, waited)
            })
        })
        .collect();
    let mut served = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        let (ok, waited) = task.await.expect("request task");
        if ok { &mut served } else { &mut refused }.push(waited);
    }
    println!(
        "{} served (slowest {:.0} ms), {} refused (slowest {:.0} ms)",
        served.len(),
        millis(served.iter().max().copied().unwrap_or_default()),
        refused.len(),
        millis(refused.iter().max().copied().unwrap_or_default())
    );
    assert_eq!(served.len(), QUEUE, "requests served");
    assert_eq!(refused.len(), REQUESTS - QUEUE, "requests refused");
    for waited in &refused {
        assert!(
            *waited < Duration::from_secs(1),
            "a refusal took {waited:?}: it waited for the model"
        );
    }
    for waited in &served {
        assert!(*waited >= Duration::from_secs(2), "served before ready");
    }
    let metrics = gw.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_queue_rejected_total{model=\"small-queue\",reason=\"queue_full\"}"
        ),
        (REQUESTS - QUEUE) as f64
    );
    let report = gw.admin_models().await;
    let entry = admin_model(&report, "small-queue");
    assert_eq!(counter(entry, "starts"), 1, "{entry}");
    assert_eq!(counter(entry, "queueDepth"), 0, "{entry}");
    stop_and_check_children(gw, &[port]).await;
}

/// Acceptance 4: a cold start longer than the wait bound answers 503
/// `activation_timeout` after the bound, the model keeps loading, and a
/// later request is served by the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_start_timeout_answers_503_and_the_model_still_comes_up() {
    let _shared = TIMING.read().await;
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file("", &[local_sim_model("slow", port, "5s", "")]),
        &["--cold-start-timeout", "1s", "--queue-timeout", "1s"],
    );
    let client = pool_client();
    let started = Instant::now();
    let resp = send_chat(&client, &gw, "slow").await;
    let waited = started.elapsed();
    let (status, _, body) = error_of(resp).await;
    println!("activation_timeout after {:.0} ms", millis(waited));
    assert_eq!(status, 503, "{body}");
    assert_openai_error(&body, "activation_timeout");
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_millis(2500),
        "timed out after {waited:?}"
    );
    let entry = admin_model(&gw.admin_models().await, "slow").clone();
    assert_eq!(
        entry["phase"], "Loading",
        "the model stopped loading: {entry}"
    );
    assert_eq!(counter(&entry, "queueDepth"), 0, "{entry}");
    let loading_pid = entry["pid"].as_u64().expect("pid of the loading model");

    gw.wait_admin(Duration::from_secs(10), "Ready model", |r| {
        admin_model(r, "slow")["phase"] == "Ready"
    })
    .await;
    let started = Instant::now();
    expect_chat(send_chat(&client, &gw, "slow").await, "slow").await;
    assert!(started.elapsed() < Duration::from_secs(1));
    let report = gw.admin_models().await;
    let after = admin_model(&report, "slow");
    assert_eq!(counter(after, "starts"), 1, "{after}");
    assert_eq!(after["pid"].as_u64(), Some(loading_pid), "{after}");
    stop_and_check_children(gw, &[port]).await;
}

/// Acceptance 5: a backend killed with SIGKILL is reported `Failed` (admin
/// API and `/v1/models`), and the next request restarts it after the retry
/// backoff and is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_backend_is_reported_failed_and_restarts_on_the_next_request() {
    let _shared = TIMING.read().await;
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file("", &[local_sim_model("crashy", port, "300ms", "")]),
        &[],
    );
    let client = pool_client();
    expect_chat(send_chat(&client, &gw, "crashy").await, "crashy").await;
    let report = gw.admin_models().await;
    let pid = admin_model(&report, "crashy")["pid"]
        .as_u64()
        .expect("pid of the Ready model");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());

    let report = gw
        .wait_admin(Duration::from_secs(5), "Failed model", |r| {
            admin_model(r, "crashy")["phase"] == "Failed"
        })
        .await;
    let entry = admin_model(&report, "crashy");
    let message = entry["message"].as_str().unwrap_or_default();
    println!("Failed: {message}");
    assert!(
        message.contains("exited") && message.contains("signal: 9"),
        "message: {entry}"
    );
    assert!(entry["pid"].is_null(), "{entry}");
    assert_eq!(counter(entry, "failures"), 1, "{entry}");
    assert_eq!(gw.listed_phase("crashy").await, "Failed");
    assert!(process_gone(pid));

    let started = Instant::now();
    expect_chat(send_chat(&client, &gw, "crashy").await, "crashy").await;
    println!(
        "request after the crash served in {:.0} ms",
        millis(started.elapsed())
    );
    let report = gw.admin_models().await;
    let entry = admin_model(&report, "crashy");
    assert_eq!(entry["phase"], "Ready", "{entry}");
    assert_eq!(counter(entry, "starts"), 2, "{entry}");
    assert_ne!(entry["pid"].as_u64(), Some(pid), "{entry}");
    assert_eq!(gw.listed_phase("crashy").await, "Ready");
    stop_and_check_children(gw, &[port]).await;
}

/// Acceptance 6: a model idle past its `idleTimeout` is stopped (no process,
/// port closed), and the next request cold-starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_model_is_stopped_and_cold_starts_again() {
    let _shared = TIMING.read().await;
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file(
            "",
            &[local_sim_model(
                "sleepy",
                port,
                "300ms",
                "    serverless: {idleTimeout: 1s}\n",
            )],
        ),
        &[],
    );
    let client = pool_client();
    expect_chat(send_chat(&client, &gw, "sleepy").await, "sleepy").await;
    let last_request = Instant::now();
    let report = gw.admin_models().await;
    let pid = admin_model(&report, "sleepy")["pid"]
        .as_u64()
        .expect("pid of the Ready model");

    let report = gw
        .wait_admin(Duration::from_secs(6), "idle stop", |r| {
            let m = admin_model(r, "sleepy");
            m["phase"] == "Idle" && m["pid"].is_null()
        })
        .await;
    let idle_after = last_request.elapsed();
    let entry = admin_model(&report, "sleepy");
    println!(
        "stopped {:.0} ms after the last request: {}",
        millis(idle_after),
        entry["message"]
    );
    assert!(
        idle_after >= Duration::from_secs(1),
        "stopped after {idle_after:?}, before the idle timeout"
    );
    assert!(
        entry["message"]
            .as_str()
            .is_some_and(|m| m.contains("without requests")),
        "{entry}"
    );
    assert_eq!(counter(entry, "failures"), 0, "{entry}");
    assert!(!accepts(port).await, "port {port} still accepts");
    assert!(process_gone(pid), "process {pid} still runs");
    assert_eq!(gw.listed_phase("sleepy").await, "Idle");

    let started = Instant::now();
    expect_chat(send_chat(&client, &gw, "sleepy").await, "sleepy").await;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "no cold start"
    );
    let report = gw.admin_models().await;
    let entry = admin_model(&report, "sleepy");
    assert_eq!(counter(entry, "starts"), 2, "{entry}");
    assert_eq!(queue_waits(&gw, "sleepy").await, 2.0);
    stop_and_check_children(gw, &[port]).await;
}

/// A request that runs longer than the idle timeout keeps its model: the
/// idle clock starts when the request ends, not when it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_longer_than_the_idle_timeout_is_not_cut() {
    let _shared = TIMING.read().await;
    let port = free_port();
    let bin = flexinfer_conformance::sim::process::SimProcess::binary().expect("flexinfer-sim");
    let entry = format!(
        "  - name: slow-talker\n    command: \"{bin}\"\n    args: [--port, \"{port}\", --model, \
         slow-talker, --pod-name, slow-talker, --startup-delay, 100ms, --ttft, 0s, \
         --tokens-per-second, \"5\"]\n    port: {port}\n    serverless: {{idleTimeout: 1s}}\n",
        bin = bin.display()
    );
    let gw = Gateway::start_local(&model_file("", &[entry]), &[]);
    let client = pool_client();
    // 15 tokens at 5 a second: three seconds, three idle timeouts.
    let started = Instant::now();
    let resp = client
        .post(gw.url("/v1/chat/completions"))
        .json(&json!({
            "model": "slow-talker",
            "messages": [{"role": "user", "content": "talk slowly"}],
            "max_tokens": 15,
        }))
        .send()
        .await
        .expect("long request");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("complete answer");
    let took = started.elapsed();
    assert_eq!(body["usage"]["completion_tokens"], 15, "{body}");
    let entry = admin_model(&gw.admin_models().await, "slow-talker").clone();
    println!(
        "a {:.1} s request with a 1 s idle timeout: {entry}",
        took.as_secs_f64()
    );
    assert!(
        took >= Duration::from_secs(2),
        "the request was not long: {took:?}"
    );
    assert_eq!(
        entry["phase"], "Ready",
        "stopped under the request: {entry}"
    );
    assert_eq!(counter(&entry, "starts"), 1, "{entry}");
    gw.wait_admin(
        Duration::from_secs(10),
        "idle stop after the request",
        |r| admin_model(r, "slow-talker")["phase"] == "Idle",
    )
    .await;
    stop_and_check_children(gw, &[port]).await;
}

/// Counts moments when both ports accept connections.
struct PortSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(usize, usize, bool, bool)>,
}

impl PortSampler {
    /// Checks every 15 ms whether `a`, then `b`, then `a` again accept: a
    /// process that accepts before and after the other one does ran at the
    /// same time as it.
    fn start(a: u16, b: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut samples, mut both, mut seen_a, mut seen_b) = (0, 0, false, false);
            while !flag.load(Ordering::SeqCst) {
                let first_a = accepts(a).await;
                let on_b = accepts(b).await;
                let then_a = accepts(a).await;
                let on_a = first_a && then_a;
                if on_a && on_b {
                    both += 1;
                }
                seen_a |= on_a;
                seen_b |= on_b;
                samples += 1;
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            (samples, both, seen_a, seen_b)
        });
        Self { stop, task }
    }

    async fn finish(self) -> (usize, usize, bool, bool) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("sampler")
    }
}

/// Acceptance 7: two members of one shared group never run at once, and
/// demand alternating faster than the swap cooldown swaps no more often than
/// the cooldown allows; no request is lost and both members serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_group_runs_one_member_at_a_time_within_the_cooldown() {
    const COOLDOWN: Duration = Duration::from_secs(2);
    const DRIVE: Duration = Duration::from_secs(6);
    let _shared = TIMING.read().await;
    let (port_a, port_b) = (free_port(), free_port());
    let gpu = "    gpu: {shared: gpu0, priority: 1}\n";
    let gw = Gateway::start_local(
        &model_file(
            "sharing: {swapCooldown: 2s, demandWindow: 500ms}\n",
            &[
                local_sim_model("model-a", port_a, "300ms", gpu),
                local_sim_model("model-b", port_b, "300ms", gpu),
            ],
        ),
        &["--queue-timeout", "5s", "--cold-start-timeout", "5s"],
    );
    let client = pool_client();
    let sampler = PortSampler::start(port_a, port_b);
    let served = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let mut refused = Vec::new();
    let models = ["model-a", "model-b"];
    let began = SystemTime::now();
    let driving = Instant::now();
    let mut turn = 0;
    while driving.elapsed() < DRIVE {
        let model = models[turn % 2];
        let started = Instant::now();
        let resp = send_chat(&client, &gw, model).await;
        if resp.status() == 200 {
            expect_chat(resp, model).await;
            served[turn % 2].fetch_add(1, Ordering::Relaxed);
        } else {
            let (status, _, body) = error_of(resp).await;
            assert_eq!(status, 503, "{model}: {body}");
            let code = body["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                ["activation_timeout", "queue_full", "activation_failed"].contains(&code.as_str()),
                "{model}: {body}"
            );
            assert_openai_error(&body, &code);
            refused.push(format!("{model}: {code}"));
        }
        println!("{model}: answered in {:.0} ms", millis(started.elapsed()));
        turn += 1;
    }
    let elapsed = SystemTime::now().duration_since(began).unwrap_or_default();
    let (samples, both, seen_a, seen_b) = sampler.finish().await;
    let report = gw.admin_models().await;
    let group = report["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "gpu0"))
        .unwrap_or_else(|| panic!("no group gpu0: {report}"))
        .clone();
    let swaps = group["swaps"].as_array().cloned().unwrap_or_default();
    println!(
        "{turn} requests in {:.1} s: served a={} b={}, refused {refused:?}; {} swaps; \
         {samples} port samples",
        elapsed.as_secs_f64(),
        served[0].load(Ordering::Relaxed),
        served[1].load(Ordering::Relaxed),
        swaps.len()
    );
    for swap in &swaps {
        println!("  swap {swap}");
    }
    assert_eq!(both, 0, "both members accepted connections at once");
    assert!(
        served.iter().all(|n| n.load(Ordering::Relaxed) >= 1),
        "a member was never served: {refused:?}"
    );
    assert!(
        seen_a && seen_b,
        "the sampler never saw a member listening (a: {seen_a}, b: {seen_b})"
    );
    let times: Vec<SystemTime> = swaps.iter().map(|s| time_field(s, "at")).collect();
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]).unwrap_or_default();
        assert!(gap >= COOLDOWN, "swaps {gap:?} apart: {group:#}");
    }
    let allowed = 1 + (elapsed.as_secs_f64() / COOLDOWN.as_secs_f64()).floor() as usize;
    assert!(
        swaps.len() <= allowed,
        "{} swaps in {elapsed:?}, at most {allowed} allowed",
        swaps.len()
    );
    let starts: u64 = report["models"]
        .as_array()
        .map(|m| m.iter().map(|m| counter(m, "starts")).sum())
        .unwrap_or_default();
    assert!(
        starts <= swaps.len() as u64,
        "{starts} starts for {} swaps",
        swaps.len()
    );
    stop_and_check_children(gw, &[port_a, port_b]).await;
}

/// A background request (`X-FlexInfer-Internal-Workload-Class: background`,
/// as `flexinfer-bench tps` sends) never starts a model and does not keep
/// one alive; once the model is Ready it is served, and the header never
/// reaches the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_request_never_starts_a_model() {
    let _shared = TIMING.read().await;
    let port = free_port();
    let gw = Gateway::start_local(
        &model_file(
            "",
            &[local_sim_model(
                "bg",
                port,
                "200ms",
                "    serverless: {idleTimeout: 1s}\n",
            )],
        ),
        &[],
    );
    let client = pool_client();
    let background = |value: &'static str| {
        client
            .post(gw.url("/v1/chat/completions"))
            .header("x-flexinfer-internal-workload-class", value)
            .json(&chat("bg"))
            .send()
    };
    let (status, _, body) = error_of(background(" Background ").await.unwrap()).await;
    assert_eq!(status, 503);
    let err = assert_openai_error(&body, "service_unavailable");
    assert_eq!(
        err["message"],
        "background request requires model \"bg\" to already be Ready"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let report = gw.admin_models().await;
    let entry = admin_model(&report, "bg");
    assert_eq!(entry["phase"], "Idle", "{entry}");
    assert_eq!(counter(entry, "starts"), 0, "{entry}");
    assert!(
        !accepts(port).await,
        "a background request started the model"
    );
    let metrics = gw.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_queue_rejected_total{model=\"bg\",reason=\"background_not_ready\"}"
        ),
        1.0
    );

    // Any other value is foreground: it starts the model.
    expect_chat(background("interactive").await.unwrap(), "bg").await;
    let resp = background("background").await.unwrap();
    expect_chat(resp, "bg").await;
    let recorded: Vec<Value> = client
        .get(format!("http://127.0.0.1:{port}/sim/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seen = recorded.last().cloned().unwrap_or_default();
    assert!(
        seen["headers"]
            .as_object()
            .is_some_and(|h| !h.contains_key("x-flexinfer-internal-workload-class")),
        "{seen}"
    );

    // Background traffic is not activity: the model stops on time under it.
    let until = Instant::now() + Duration::from_secs(6);
    let mut stopped = false;
    while Instant::now() < until {
        let resp = background("background").await.unwrap();
        if resp.status() == 503 {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(stopped, "background requests kept the model running");
    stop_and_check_children(gw, &[port]).await;
}
