//! Prometheus lane: a real Prometheus (the Debian package, installed by
//! `scripts/setup.sh`) scrapes the gateway, the scheduler extender and the
//! node agent, each running as its own process against an in-memory
//! Kubernetes API; `promtool check metrics` accepts each endpoint, and the
//! chart's alert rules pass `promtool check rules` and our `promtool test
//! rules` unit tests (`helm/tests/rules/`).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flexinfer_testkube::TestApiServer;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
use support::{endpoints, free_port, pod, Gateway};

const SETUP_HINT: &str = "run scripts/setup.sh (it installs Debian's prometheus package)";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `name` from PATH; the lane needs it (no silent skip).
fn tool(name: &str) -> String {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "{name} is not installed: {SETUP_HINT}");
    name.to_owned()
}

/// A workspace binary next to this test's executable (`cargo build --workspace --bins`).
fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found near {exe:?}; run `cargo build --workspace --bins` first")
        })
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(what: &'static str, command: &mut Command) -> Process {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    Process(child)
}

async fn get_text(url: &str) -> Option<String> {
    let resp = support::client().get(url).send().await.ok()?;
    resp.status().is_success().then_some(())?;
    resp.text().await.ok()
}

async fn wait_for_text(url: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(text) = get_text(url).await {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `promtool check metrics` on `text`; returns its complaints.
fn promtool_check_metrics(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new(tool("promtool"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{said}");
    said
}

#[test]
fn chart_alert_rules_are_valid_and_fire_as_tested() {
    let rules = "helm/flexinfer/files/prometheus-rules.yaml";
    let checked = promtool(&["check", "rules", rules]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&[
        "test",
        "rules",
        "helm/tests/rules/prometheus-rules.test.yaml",
    ]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_component_and_promtool_accepts_their_metrics() {
    let prometheus = tool("prometheus");
    let api = TestApiServer::start().await;
    let mut node = Node::default();
    node.metadata.name = Some("node-a".into());
    api.insert(&node).expect("node-a");
    let kubeconfig = api.kubeconfig_path().to_path_buf();

    // The gateway, serving one model on a simulator, with a request served.
    let sim = pod("pod-a", &["m"], &[]);
    let gw = Gateway::start(
        &format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim])),
        &[],
    );
    let gateway_metrics = gw.admin.port();
    let resp = support::post_json(
        &gw.url("/v1/chat/completions"),
        &serde_json::to_vec(&support::chat("m")).expect("body"),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);

    // The scheduler extender and the node agent, against the test API.
    let sched_port = free_port();
    let _sched = spawn(
        "flexinfer-sched",
        Command::new(workspace_binary("flexinfer-sched"))
            .args(["--listen", &format!("127.0.0.1:{sched_port}")])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn"),
    );
    let agent_port = free_port();
    let sysfs = tempfile::tempdir().expect("empty sysfs");
    let _agent = spawn(
        "flexinfer-agent",
        Command::new(workspace_binary("flexinfer-agent"))
            .args([
                "--metrics-port",
                &agent_port.to_string(),
                "--interval",
                "1s",
            ])
            .arg("--sysfs-root")
            .arg(sysfs.path())
            .env("NODE_NAME", "node-a")
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn"),
    );

    // One extender call, so that its request metrics have series.
    wait_for_text(
        &format!("http://127.0.0.1:{sched_port}/healthz"),
        Duration::from_secs(30),
    )
    .await;
    let filtered = support::post_json(
        &format!("http://127.0.0.1:{sched_port}/filter"),
        br#"{"pod":{"metadata":{"name":"p","namespace":"default"}},"nodes":{"items":[]}}"#,
        &[],
    )
    .await;
    assert_eq!(filtered.status(), 200, "extender /filter");

    let targets = [
        ("flexinfer-gateway", gateway_metrics),
        ("flexinfer-sched", sched_port),
        ("flexinfer-agent", agent_port),
    ];
    for (job, port) in targets {
        let text = wait_for_text(
            &format!("http://127.0.0.1:{port}/metrics"),
            Duration::from_secs(30),
        )
        .await;
        assert!(text.contains("# TYPE"), "{job} /metrics has no families");
        let (ok, said) = promtool_check_metrics(&text);
        assert!(ok, "promtool check metrics rejects {job}:\n{said}");
    }

    // A real Prometheus scraping all three every second.
    let dir = tempfile::tempdir().expect("prometheus dir");
    let scrape_configs: String = targets
        .iter()
        .map(|(job, port)| {
            format!(
                "  - job_name: {job}\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
            )
        })
        .collect();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: ['{}']\n\
             scrape_configs:\n{scrape_configs}",
            repo_root()
                .join("helm/flexinfer/files/prometheus-rules.yaml")
                .display()
        ),
    )
    .expect("write prometheus.yml");
    let prom_port = free_port();
    let _prometheus = spawn(
        "prometheus",
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .stderr(Stdio::null()),
    );
    let base = format!("http://127.0.0.1:{prom_port}");

    // Every target up, and the gateway's request visible through PromQL.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let up = query(&base, "up").await;
        let requests = query(&base, "sum(flexinfer_proxy_requests_total{model=\"m\"})").await;
        let all_up = targets.iter().all(|(job, _)| {
            series(&up)
                .iter()
                .any(|s| s["metric"]["job"] == *job && s["value"][1] == "1")
        });
        let counted = series(&requests)
            .first()
            .and_then(|s| s["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if all_up && counted >= 1.0 {
            println!("prometheus sees every target up and {counted} gateway request(s)");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never saw every target up with the request counted: up {up:#}, \
             requests {requests:#}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rules = wait_for_text(&format!("{base}/api/v1/rules"), Duration::from_secs(10)).await;
    assert!(
        rules.contains("FlexInferQueueSaturated"),
        "the chart's rules were not loaded: {rules}"
    );
}

async fn query(base: &str, promql: &str) -> Value {
    let resp = support::client()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", promql)])
        .send()
        .await;
    match resp {
        Ok(resp) => resp.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

fn series(answer: &Value) -> Vec<Value> {
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
