//! Runs `flexinfer-conformance load` against a real `flexinfer-sim`: the
//! open loop sends exactly rate × duration requests, the closed loop keeps
//! its connections busy, streams get a TTFT, failures are counted by kind,
//! and the JSON, Markdown and PNG reports are written.

use std::process::{Command, Output};

use flexinfer_conformance::sim::process::SimProcess;
use serde_json::Value;

const CONFORMANCE: &str = env!("CARGO_BIN_EXE_flexinfer-conformance");

fn sim(args: &[&str]) -> SimProcess {
    SimProcess::spawn(env!("CARGO_BIN_EXE_flexinfer-sim"), args).expect("start flexinfer-sim")
}

fn load(args: &[&str]) -> Output {
    let output = Command::new(CONFORMANCE)
        .arg("load")
        .args(args)
        .env_remove("FLEXINFER_API_KEY")
        .output()
        .expect("run flexinfer-conformance load");
    eprintln!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("conformance-load-{}-{name}", std::process::id()))
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("JSON report")
}

#[test]
fn open_loop_sends_on_schedule_and_writes_every_report() {
    let sim = sim(&["--model", "m"]);
    let (json, md, png) = (temp("open.json"), temp("open.md"), temp("open.png"));
    let output = load(&[
        "--gateway",
        &sim.base_url(),
        "--rate",
        "200",
        "--duration",
        "2s",
        "--connections",
        "8",
        "--json",
        json.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
        "--png",
        png.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "exit status {}", output.status);
    let report = read_json(&json);
    assert_eq!(report["mode"], "open");
    assert_eq!(report["model"], "m", "the model comes from GET /v1/models");
    // Due times k/200 s for k = 0..400 fall inside the 2 s run.
    assert_eq!(report["requests"], 400);
    assert_eq!(report["succeeded"], 400);
    assert_eq!(report["errors"], serde_json::json!({}));
    assert!(report["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(report["ttft_ms"].is_null(), "no TTFT without --stream");
    assert_eq!(report["timeline"].as_array().unwrap().len(), 2);
    assert_eq!(report["timeline"][0]["requests"], 200);
    let markdown = std::fs::read_to_string(&md).unwrap();
    assert!(markdown.contains("| mode | open loop, 200 req/s over 8 connections |"));
    assert!(markdown.contains("| 400 | 400 | 0 |"));
    let image = std::fs::read(&png).unwrap();
    assert_eq!(&image[1..4], b"PNG");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.lines().any(|l| l.starts_with("[   1s]")),
        "a progress line each second"
    );
    for path in [json, md, png] {
        let _ = std::fs::remove_file(path);
    }
    sim.terminate(std::time::Duration::from_secs(5)).unwrap();
}

#[test]
fn closed_loop_streams_and_measures_ttft() {
    // 8 tokens at 100 tokens/s: each stream lasts about 70 ms after its first token.
    let sim = sim(&["--model", "m", "--tokens-per-second", "100"]);
    let json = temp("closed.json");
    let output = load(&[
        "--gateway",
        &sim.base_url(),
        "--concurrency",
        "4",
        "--duration",
        "1s",
        "--stream",
        "--max-tokens",
        "8",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "exit status {}", output.status);
    let report = read_json(&json);
    assert_eq!(report["mode"], "closed");
    assert_eq!(report["connections"], 4);
    let requests = report["requests"].as_u64().unwrap();
    // 4 connections × at most 1 s / 70 ms each.
    assert!((4..=64).contains(&requests), "{requests} requests");
    assert_eq!(report["succeeded"], requests);
    let ttft = report["ttft_ms"]["p50"].as_f64().expect("TTFT");
    let latency = report["latency_ms"]["p50"].as_f64().unwrap();
    assert!(
        latency >= 70.0,
        "a stream of 8 tokens at 100/s took {latency} ms"
    );
    assert!(ttft < latency, "TTFT {ttft} ms, latency {latency} ms");
    let _ = std::fs::remove_file(&json);
    sim.terminate(std::time::Duration::from_secs(5)).unwrap();
}

#[test]
fn failures_are_counted_by_kind() {
    let sim = sim(&["--model", "m", "--fail-rate", "1"]);
    let json = temp("fail.json");
    let output = load(&[
        "--gateway",
        &sim.base_url(),
        "--model",
        "m",
        "--rate",
        "50",
        "--duration",
        "1s",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "exit status {}", output.status);
    let report = read_json(&json);
    assert_eq!(report["requests"], 50);
    assert_eq!(report["succeeded"], 0);
    assert_eq!(report["errors"], serde_json::json!({"status_500": 50}));
    assert!(report["latency_ms"].is_null());
    let _ = std::fs::remove_file(&json);
    sim.terminate(std::time::Duration::from_secs(5)).unwrap();
}

#[test]
fn load_needs_a_pace_and_a_reachable_target() {
    let output = load(&["--gateway", "http://127.0.0.1:9", "--duration", "1s"]);
    assert_eq!(output.status.code(), Some(2), "no --rate or --concurrency");
    let output = load(&[
        "--gateway",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--concurrency",
        "1",
        "--duration",
        "1s",
    ]);
    assert_eq!(output.status.code(), Some(2), "nothing listens on port 9");
}
