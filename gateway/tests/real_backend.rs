//! Real-backend lane: a real llama.cpp server (llama-cpp-python) with a real
//! GGUF model (SmolLM2-135M-Instruct) run by the gateway's embedded operator,
//! driven through the official OpenAI Python SDK.
//!
//! `scripts/real-backend.sh` installs both (once, cached) and prints the two
//! variables this lane reads: `FLEXINFER_LLAMA_PYTHON` (interpreter with
//! `llama_cpp.server`) and `FLEXINFER_LLAMA_MODEL` (the GGUF file). Without
//! them the lane prints why it is skipped, and fails instead when
//! `FLEXINFER_REQUIRE_REAL_BACKEND=1` (as CI sets it).
//!
//! The scenarios run one after another (one real server at a time keeps a
//! 2-core machine usable), with generous time bounds: a real model on a
//! loaded CPU makes 3–60 tokens a second.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{accepts, admin_model, free_port, Gateway};

/// One real server at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The name llama.cpp serves the model under (`--model_alias`).
const SERVED_AS: &str = "smollm2";

struct RealBackend {
    python: String,
    model: PathBuf,
}

/// The installed server and model, or `None` (after saying why) when the lane
/// is not set up; panics instead when the lane is required.
fn real_backend() -> Option<RealBackend> {
    let python = std::env::var("FLEXINFER_LLAMA_PYTHON").ok();
    let model = std::env::var("FLEXINFER_LLAMA_MODEL").ok();
    let why = match (&python, &model) {
        (Some(python), Some(model)) if !Path::new(model).is_file() => {
            format!("FLEXINFER_LLAMA_MODEL={model} is not a file (python {python})")
        }
        (Some(python), Some(model)) => {
            return Some(RealBackend {
                python: python.clone(),
                model: PathBuf::from(model),
            })
        }
        _ => "FLEXINFER_LLAMA_PYTHON and FLEXINFER_LLAMA_MODEL are not set; \
              run `eval \"$(scripts/real-backend.sh)\"` first"
            .to_owned(),
    };
    if std::env::var("FLEXINFER_REQUIRE_REAL_BACKEND").as_deref() == Ok("1") {
        panic!("the real-backend lane is required (FLEXINFER_REQUIRE_REAL_BACKEND=1) but: {why}");
    }
    eprintln!("SKIPPED: real-backend lane: {why}");
    None
}

impl RealBackend {
    /// A model-file entry that runs llama.cpp's server on `port`.
    fn entry(&self, name: &str, port: u16, extra: &str) -> String {
        format!(
            "  - name: {name}\n    backendModel: {SERVED_AS}\n    command: \"{python}\"\n    \
             args: [-m, llama_cpp.server, --model, \"{model}\", --model_alias, {SERVED_AS}, \
             --host, 127.0.0.1, --port, \"{port}\", --n_ctx, \"1024\", --n_threads, \"2\"]\n    \
             port: {port}\n    health: /v1/models\n    startupTimeout: 180s\n{extra}",
            python = self.python,
            model = self.model.display(),
        )
    }
}

/// Runs one SDK operation (`tests/python/real_backend.py`) and returns its JSON.
async fn sdk(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/real_backend.py");
    let output = tokio::process::Command::new(support::python())
        .arg(&script)
        .args(args)
        .output()
        .await
        .expect("run the SDK script");
    assert!(
        output.status.success(),
        "SDK {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "SDK {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn counter(entry: &Value, field: &str) -> u64 {
    entry[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {entry}"))
}

fn base(gw: &Gateway) -> String {
    format!("http://{}", gw.addr)
}

/// Cold start from zero, chat and streamed chat with real tokens, a server
/// killed mid-stream (the client gets an error, the next request starts it
/// again) and the idle stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_starts_on_demand_streams_recovers_and_stops_when_idle() {
    let Some(real) = real_backend() else { return };
    let _serial = SERIAL.lock().await;
    let port = free_port();
    let yaml = format!(
        "models:\n{}",
        real.entry(
            "smol",
            port,
            "    aliases: [gpt-4o-mini]\n    serverless: {idleTimeout: 4s}\n"
        )
    );
    let mut gw = Gateway::start_local(&yaml, &["--cold-start-timeout", "180s"]);
    let url = base(&gw);
    assert_eq!(
        admin_model(&gw.admin_models().await, "smol")["phase"],
        "Idle"
    );

    // Cold start: the first request waits for the real load and is served.
    let started = Instant::now();
    let answer = sdk(&["chat", &url, "gpt-4o-mini", "12"]).await;
    let cold = started.elapsed();
    let content = answer["content"].as_str().unwrap_or_default();
    assert!(!content.trim().is_empty(), "empty answer: {answer}");
    assert!(
        answer["completion_tokens"].as_u64().unwrap_or(0) >= 1,
        "{answer}"
    );
    let report = gw.admin_models().await;
    let entry = admin_model(&report, "smol").clone();
    assert_eq!(entry["phase"], "Ready", "{entry}");
    assert_eq!(counter(&entry, "starts"), 1, "{entry}");

    // Warm chat and a streamed chat with several real chunks.
    let warm = Instant::now();
    sdk(&["chat", &url, "smol", "8"]).await;
    let warm = warm.elapsed();
    let streamed = sdk(&["stream", &url, "smol", "24"]).await;
    assert!(
        streamed["chunks"].as_u64().unwrap_or(0) >= 2,
        "a stream of one chunk: {streamed}"
    );
    assert!(streamed["finish_reason"].is_string(), "{streamed}");
    println!(
        "cold request {:.1} s, warm request {:.2} s, stream {streamed}",
        cold.as_secs_f64(),
        warm.as_secs_f64()
    );

    // The server is killed while it streams: the SDK raises, nothing hangs.
    let pid = entry["pid"].as_u64().expect("pid of the running server");
    let signal = tempfile::tempdir().expect("temp dir");
    let signal_file = signal.path().join("first-chunk");
    let signal_arg = signal_file.display().to_string();
    let url_for_stream = url.clone();
    let stream = tokio::spawn(async move {
        sdk(&[
            "stream-until-error",
            &url_for_stream,
            "smol",
            "400",
            &signal_arg,
        ])
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while !signal_file.exists() {
        assert!(Instant::now() < deadline, "no first chunk within 120 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "kill {pid}");
    let cut = tokio::time::timeout(Duration::from_secs(60), stream)
        .await
        .expect("the cut stream hung")
        .expect("stream task");
    println!("stream cut by the backend's death: {cut}");
    assert!(
        cut["error"].is_string(),
        "the client saw a complete stream although the server died: {cut}"
    );

    gw.wait_admin(Duration::from_secs(30), "Failed after the kill", |r| {
        admin_model(r, "smol")["phase"] != "Ready"
    })
    .await;
    let again = sdk(&["chat", &url, "smol", "8"]).await;
    assert!(again["content"].is_string(), "{again}");
    let entry = admin_model(&gw.admin_models().await, "smol").clone();
    assert_eq!(counter(&entry, "starts"), 2, "not started again: {entry}");

    // Idle for longer than 4 s: stopped, port closed.
    gw.wait_admin(Duration::from_secs(60), "idle stop", |r| {
        admin_model(r, "smol")["phase"] == "Idle"
    })
    .await;
    assert!(
        !accepts(port).await,
        "port {port} still open after the idle stop"
    );
    assert!(
        gw.interrupt(Duration::from_secs(30)),
        "gateway did not exit"
    );
}

/// Two names for the same real model in one shared group take turns: every
/// request of an interleaved sequence is served, the two servers never
/// listen at once, and the group records its swaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_real_servers_in_one_shared_group_swap_without_losing_requests() {
    let Some(real) = real_backend() else { return };
    let _serial = SERIAL.lock().await;
    let (port_a, port_b) = (free_port(), free_port());
    let gpu = "    gpu: {shared: cpu0, priority: 1}\n";
    let yaml = format!(
        "sharing: {{swapCooldown: 1s, demandWindow: 1s}}\nmodels:\n{}{}",
        real.entry("smol-a", port_a, gpu),
        real.entry("smol-b", port_b, gpu)
    );
    let mut gw = Gateway::start_local(&yaml, &["--cold-start-timeout", "180s"]);
    let url = base(&gw);

    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut both = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                if accepts(port_a).await && accepts(port_b).await {
                    both += 1;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            both
        })
    };

    let started = Instant::now();
    for model in ["smol-a", "smol-b", "smol-a"] {
        let answer = sdk(&["chat", &url, model, "6"]).await;
        assert!(answer["content"].is_string(), "{model}: {answer}");
        println!(
            "{model} served after {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    // Both at once: one waits for the other's turn, neither is lost.
    let (args_a, args_b) = (
        ["chat", url.as_str(), "smol-a", "6"],
        ["chat", url.as_str(), "smol-b", "6"],
    );
    let (a, b) = tokio::join!(sdk(&args_a), sdk(&args_b));
    assert!(
        a["content"].is_string() && b["content"].is_string(),
        "{a} {b}"
    );
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let both = sampler.await.expect("sampler");

    let report = gw.admin_models().await;
    let group = report["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "cpu0"))
        .unwrap_or_else(|| panic!("no group cpu0: {report}"))
        .clone();
    let swaps = group["swaps"].as_array().cloned().unwrap_or_default();
    println!(
        "5 requests in {:.1} s, {} swaps",
        started.elapsed().as_secs_f64(),
        swaps.len()
    );
    assert_eq!(both, 0, "both servers listened at once");
    assert!(swaps.len() >= 2, "expected a → b → a swaps: {group:#}");
    assert!(
        gw.interrupt(Duration::from_secs(30)),
        "gateway did not exit"
    );
    assert!(!accepts(port_a).await && !accepts(port_b).await);
}

/// The conformance suite's quick profile passes against the real server
/// behind the gateway: checks that need the simulator's request recorder
/// skip with their reason, and embeddings are left out (llama-cpp-python
/// answers them only with `--embedding true`, and then per token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_quick_profile_passes_against_the_real_server() {
    let Some(real) = real_backend() else { return };
    let _serial = SERIAL.lock().await;
    let port = free_port();
    let yaml = format!("models:\n{}", real.entry("smol", port, ""));
    let mut gw = Gateway::start_local(&yaml, &["--cold-start-timeout", "180s"]);
    // Started before the suite runs: its checks have their own short timeouts.
    sdk(&["chat", &base(&gw), "smol", "4"]).await;

    let suite = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .take(3)
                .map(|dir| dir.join("flexinfer-conformance"))
                .find(|p| p.is_file())
        })
        .expect("flexinfer-conformance next to the tests (cargo build --workspace --bins)");
    let report_dir = tempfile::tempdir().expect("report dir");
    let report = report_dir.path().join("report.json");
    let run = tokio::process::Command::new(&suite)
        .args([
            "run",
            "--gateway",
            &base(&gw),
            "--model",
            "smol",
            "--profile",
            "quick",
        ])
        .args(["--skip", "proto.embeddings.shape", "--json"])
        .arg(&report)
        .output()
        .await
        .expect("run flexinfer-conformance");
    let printed = String::from_utf8_lossy(&run.stdout);
    println!("{printed}");
    assert!(run.status.success(), "the quick profile failed:\n{printed}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("report JSON");
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    let passed = checks.iter().filter(|c| c["outcome"] == "pass").count();
    assert!(passed >= 8, "only {passed} checks passed: {report:#}");
    for check in checks.iter().filter(|c| c["outcome"] == "skip") {
        assert!(
            check["evidence"]
                .as_str()
                .is_some_and(|why| !why.is_empty()),
            "a skip without its reason: {check}"
        );
    }
    assert!(
        gw.interrupt(Duration::from_secs(30)),
        "gateway did not exit"
    );
}
