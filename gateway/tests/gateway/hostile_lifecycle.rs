//! Lifecycle and leaks a hostile or careless environment provokes: ports
//! already taken, SIGTERM with and without an explicit drain delay, an
//! engine that prints secrets as it fails, and an API-key file that names
//! a tenant after the one plain `--auth-token` keys belong to. Every test
//! drives the real gateway binary.

use crate::support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{admin_model, client, endpoints, error_of, free_port, metric_value, pod, Gateway};

/// A fake secret shaped like a Hugging Face token.
const HF_SECRET: &str = "hf_FakeSecretToken0123456789abcdefGHIJ";
/// A fake secret sent as a bearer credential.
const BEARER_SECRET: &str = "fake-bearer-credential-0123456789";

/// A gateway process started directly, for starts that may fail: its
/// stderr goes to a file.
struct Launch {
    child: Child,
    dir: tempfile::TempDir,
}

impl Launch {
    /// Starts the gateway with `args` and `env`; a model file
    /// (`models.yaml` in the launch's folder, holding `models`) comes
    /// first.
    fn start(models: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("models.yaml");
        std::fs::write(&config, models).expect("model file");
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let child = Command::new(env!("CARGO_BIN_EXE_flexinfer-gateway"))
            .arg("--config")
            .arg(&config)
            .args(["--threads", "2", "--reload-interval", "200ms"])
            .args(args)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start flexinfer-gateway");
        Self { child, dir }
    }

    /// The exit status, if the process exits within `limit`.
    fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What it wrote to stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Sends SIGTERM.
    fn terminate(&self) {
        send_term(self.child.id());
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn send_term(pid: u32) {
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
}

/// A model file whose one model answers on `sim`.
fn model_file(sim: &support::SimProcess) -> String {
    format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[sim]))
}

/// A loopback address something else listens on, held by the listener.
fn taken_address() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

fn free_address() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// Starts a gateway whose `role` address (`--listen` or `--metrics-listen`)
/// is taken, and checks that it exits promptly, with an error, naming the
/// address and its role.
fn refuses_a_taken_address(flag: &str, role: &str) {
    let sim = pod("p", &["m"], &[]);
    let (_holder, taken) = taken_address();
    let free = free_address();
    let (listen, metrics) = match flag {
        "--listen" => (taken.as_str(), free.as_str()),
        _ => (free.as_str(), taken.as_str()),
    };
    let mut gw = Launch::start(
        &model_file(&sim),
        &["--listen", listen, "--metrics-listen", metrics],
        &[],
    );
    let status = gw.exit_within(Duration::from_secs(5));
    let stderr = gw.stderr();
    let status = status.unwrap_or_else(|| panic!("still running 5 s after start; {stderr}"));
    assert!(!status.success(), "exited with {status}; {stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {taken} ({role}): ")),
        "{stderr}"
    );
    assert!(stderr.contains("in use"), "{stderr}");
}

#[test]
fn a_taken_proxy_port_stops_the_start_naming_the_address() {
    refuses_a_taken_address("--listen", "proxy");
}

#[test]
fn a_taken_metrics_port_stops_the_start_naming_the_address() {
    refuses_a_taken_address("--metrics-listen", "metrics");
}

/// `GET path` on `addr`: status and body; `None` when nothing answers.
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().await.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_drain_delay_is_served_through_when_idle() {
    let sim = pod("p", &["m"], &[]);
    let delay = Duration::from_secs(2);
    let mut gw = Gateway::start(&model_file(&sim), &["--shutdown-drain-delay", "2s"]);
    let admin = gw.admin.to_string();
    let chat = serde_json::to_vec(&support::chat("m")).unwrap();
    let url = gw.url("/v1/chat/completions");
    assert_eq!(get(&admin, "/readyz").await, Some((200, "ok".into())));
    let before = support::post_json(&url, &chat, &[]).await;
    let connection = |r: &reqwest::Response| {
        r.headers()
            .get("connection")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    assert_ne!(connection(&before), "close", "keep-alive before SIGTERM");

    let sent = Instant::now();
    send_term(gw.pid());
    // Readiness says draining at once, on both listeners.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        get(&admin, "/readyz").await,
        Some((503, "draining".into())),
        "/readyz on the metrics listener after SIGTERM"
    );
    let proxy = gw.addr.to_string();
    assert_eq!(
        get(&proxy, "/readyz").await.map(|(s, _)| s),
        Some(503),
        "/readyz on the proxy listener after SIGTERM"
    );
    // The proxy keeps serving through the delay.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let resp = support::post_json(&url, &chat, &[]).await;
    assert_eq!(resp.status(), 200, "a request during the drain delay");
    // Each connection ends after its answer, so a keep-alive client's next
    // request opens one to another replica instead of racing the close.
    assert_eq!(
        connection(&resp),
        "close",
        "Connection: close while draining"
    );
    assert!(
        sent.elapsed() < delay,
        "the request was sent too late to tell"
    );
    assert_eq!(get(&admin, "/readyz").await.map(|(s, _)| s), Some(503));
    // Then it exits, no sooner than the delay.
    let exited = gw.terminate(Duration::from_secs(5));
    let took = sent.elapsed();
    assert!(exited, "still running 5 s after the drain delay");
    assert!(
        took >= delay,
        "exited {took:?} after SIGTERM, before the delay"
    );
    println!("exited {took:?} after SIGTERM with a {delay:?} drain delay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_drain_delay_an_idle_gateway_exits_at_once() {
    let sim = pod("p", &["m"], &[]);
    let (listen, metrics) = (free_address(), free_address());
    let mut gw = Launch::start(
        &model_file(&sim),
        &["--listen", &listen, "--metrics-listen", &metrics],
        &[("PROXY_SHUTDOWN_DRAIN_DELAY", "")],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&listen, "/healthz").await.is_none() {
        assert!(Instant::now() < deadline, "not ready; {}", gw.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config: Value = client()
        .get(format!("http://{metrics}/debug/config"))
        .send()
        .await
        .expect("/debug/config")
        .json()
        .await
        .expect("/debug/config JSON");
    assert_eq!(
        config["shutdownDrainDelay"],
        Value::Null,
        "no drain delay is set: {config}"
    );
    let sent = Instant::now();
    gw.terminate();
    let status = gw.exit_within(Duration::from_secs(1));
    assert!(
        status.is_some(),
        "still running 1 s after SIGTERM; {}",
        gw.stderr()
    );
    println!("exited {:?} after SIGTERM", sent.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_engine_s_secrets_reach_neither_the_client_nor_the_logs() {
    let port = free_port();
    let script = format!(
        "echo 'loading weights' >&2; echo 'env: HF_TOKEN={HF_SECRET} PORT={port}' >&2; \
         echo 'GET /api/whoami Authorization: Bearer {BEARER_SECRET}' >&2; \
         echo 'fatal: cannot load the model' >&2; exit 3"
    );
    let yaml = format!(
        "models:\n  - name: leaky\n    command: /bin/sh\n    args: [\"-c\", \"{script}\"]\n    \
         port: {port}\n"
    );
    let gw = Gateway::start_logged(
        &yaml,
        &[
            "--auth-enabled",
            "true",
            "--auth-token",
            "client-key",
            "--admin-auth-token",
            "admin-key",
        ],
        &[("RUST_LOG", "info")],
    );
    let body = serde_json::to_vec(&support::chat("leaky")).unwrap();
    let resp = support::post_json(
        &gw.url("/v1/chat/completions"),
        &body,
        &[("authorization", "Bearer client-key")],
    )
    .await;
    let (status, _, err) = error_of(resp).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "activation_failed", "{err}");
    let text = err.to_string();
    for leak in [
        HF_SECRET,
        BEARER_SECRET,
        "HF_TOKEN",
        "stderr",
        "loading weights",
    ] {
        assert!(!text.contains(leak), "the client got {leak:?}: {text}");
    }
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("failed to start") && message.contains("operator"),
        "{message}"
    );

    // The operator sees the engine's lines, the secrets redacted.
    let report: Value = client()
        .get(gw.url("/admin/models"))
        .bearer_auth("admin-key")
        .send()
        .await
        .expect("/admin/models")
        .json()
        .await
        .expect("/admin/models JSON");
    let entry = admin_model(&report, "leaky");
    let shown = entry["message"].as_str().unwrap_or_default();
    assert!(
        shown.contains("fatal: cannot load the model"),
        "the engine's lines are kept: {entry}"
    );
    assert!(
        shown.contains("HF_TOKEN=[REDACTED]") && shown.contains("Bearer [REDACTED]"),
        "{entry}"
    );
    // The log is written by a background thread: wait for the line.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut log = gw.log();
    while !log.contains("HF_TOKEN=[REDACTED]") {
        assert!(Instant::now() < deadline, "no redacted line logged: {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = gw.log();
    }
    for secret in [HF_SECRET, BEARER_SECRET] {
        assert!(!shown.contains(secret), "/admin/models shows {secret}");
        assert!(!log.contains(secret), "the log shows {secret}: {log}");
    }
}

/// Writes `yaml` as `keys.yaml` in `dir`.
fn write_keys(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("keys.yaml");
    let tmp = dir.join("keys.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("key file");
    std::fs::rename(&tmp, &path).expect("replace key file");
    path
}

const ANONYMOUS_TENANT: &str =
    "tenants:\n  - name: team-a\n    keys: [key-a]\n  - name: anonymous\n    keys: [key-b]\n";

#[test]
fn a_key_file_naming_the_anonymous_tenant_stops_the_start() {
    let sim = pod("p", &["m"], &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = write_keys(dir.path(), ANONYMOUS_TENANT);
    let (listen, metrics) = (free_address(), free_address());
    let mut gw = Launch::start(
        &model_file(&sim),
        &[
            "--listen",
            &listen,
            "--metrics-listen",
            &metrics,
            "--api-key-file",
            keys.to_str().unwrap(),
            "--auth-token",
            "plain-key",
        ],
        &[],
    );
    let status = gw.exit_within(Duration::from_secs(5));
    let stderr = gw.stderr();
    let status = status.unwrap_or_else(|| panic!("still running 5 s after start; {stderr}"));
    assert!(!status.success(), "exited with {status}; {stderr}");
    assert!(
        stderr.contains(&format!("{}: line 4: ", keys.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("tenant name \"anonymous\" is reserved"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_naming_the_anonymous_tenant_keeps_the_keys_in_force() {
    let sim = pod("p", &["m"], &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = write_keys(
        dir.path(),
        "tenants:\n  - name: team-a\n    keys: [key-a]\n",
    );
    let gw = Gateway::start(
        &model_file(&sim),
        &[
            "--api-key-file",
            keys.to_str().unwrap(),
            "--auth-token",
            "plain-key",
        ],
    );
    let models_as = |key: &'static str| {
        let url = gw.url("/v1/models");
        async move {
            client()
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .expect("/v1/models")
                .status()
                .as_u16()
        }
    };
    assert_eq!(models_as("key-a").await, 200);
    assert_eq!(models_as("plain-key").await, 200);
    assert_eq!(models_as("key-b").await, 401);

    write_keys(dir.path(), ANONYMOUS_TENANT);
    let errors = "flexinfer_proxy_api_key_file_reloads_total{result=\"error\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = client()
            .get(format!("http://{}/metrics", gw.admin))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        if metric_value(&text, errors) >= 1.0 {
            break;
        }
        assert!(
            models_as("key-b").await == 401,
            "the reload naming the anonymous tenant was accepted"
        );
        assert!(Instant::now() < deadline, "no failed reload counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(models_as("key-a").await, 200, "the keys in force stay");
    assert_eq!(models_as("plain-key").await, 200);
    assert_eq!(models_as("key-b").await, 401, "the refused file's keys");
}
