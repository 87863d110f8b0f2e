//! Runs the real `flexinfer-conformance` binary: green against the local
//! stacks of both profiles, red against a bare simulator (which is not a
//! gateway, so the gateway-specific checks must fail) and against local
//! stacks started deliberately misconfigured, each time with exactly the
//! check ids that must fail.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Instant;

use flexinfer_conformance::sim::process::SimProcess;
use serde_json::Value;

const CONFORMANCE: &str = env!("CARGO_BIN_EXE_flexinfer-conformance");

/// The gateway binary `--local` will use; fails the test with instructions when it is missing.
fn gateway_binary() -> PathBuf {
    let path = match std::env::var_os("FLEXINFER_GATEWAY_BIN") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(CONFORMANCE)
            .parent()
            .expect("target dir")
            .join(format!("flexinfer-gateway{}", std::env::consts::EXE_SUFFIX)),
    };
    assert!(
        path.is_file(),
        "{} is missing: these tests run the real gateway. Build it first with \
         `cargo build -p flexinfer-gateway` (or run `cargo test --workspace`), or set \
         FLEXINFER_GATEWAY_BIN",
        path.display()
    );
    path
}

/// Runs the binary; with `local`, it is given the simulator and gateway binaries.
fn conformance(args: &[&str], local: bool) -> Output {
    let mut command = Command::new(CONFORMANCE);
    command.args(args).env_remove("FLEXINFER_API_KEY");
    if local {
        command
            .env("FLEXINFER_SIM_BIN", env!("CARGO_BIN_EXE_flexinfer-sim"))
            .env("FLEXINFER_GATEWAY_BIN", gateway_binary());
    }
    let output = command.output().expect("run flexinfer-conformance");
    eprintln!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The ids reported with `outcome` (`PASS`, `FAIL`, `SKIP`).
fn ids_with(text: &str, outcome: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.split_whitespace().next() == Some(outcome))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(str::to_owned)
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

/// Every id of the quick profile, in order.
const QUICK: [&str; 12] = [
    "proto.models.list",
    "proto.chat.shape",
    "proto.completions.shape",
    "proto.chat.stream.framing",
    "proto.embeddings.shape",
    "errors.bad_json",
    "errors.missing_model",
    "errors.unknown_model",
    "extract.header_over_json",
    "extract.path_over_json",
    "extract.path_prefix_stripped",
    "extract.multipart_field",
];

/// The ids the full profile adds, in order.
const FULL_ONLY: [&str; 12] = [
    "proto.chat.stream.unbuffered",
    "errors.oversize_body",
    "routing.session.sticky",
    "routing.prefix.sticky",
    "routing.least_loaded",
    "routing.spread",
    "coldstart.burst",
    "coldstart.queue_full",
    "coldstart.timeout",
    "auth.missing_key",
    "auth.wrong_key",
    "limits.rate_limit",
];

#[test]
fn local_quick_profile_is_green() {
    let dir = std::env::temp_dir().join(format!("conformance-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let junit = dir.join("report.xml");
    let output = conformance(
        &[
            "run",
            "--local",
            "--profile",
            "quick",
            "--json",
            json.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
        true,
    );
    let text = stdout(&output);
    assert!(output.status.success(), "exit status {}", output.status);
    let summary = text.lines().last().expect("summary line");
    assert_eq!(summary, "12 passed, 0 failed, 0 skipped");
    assert_eq!(ids_with(&text, "PASS"), set(&QUICK));

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["summary"]["passed"], 12);
    assert_eq!(report["summary"]["failed"], 0);
    assert_eq!(report["model"], "conformance-model");
    let ids: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, QUICK, "the checks run in order");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.starts_with("<?xml"));
    assert!(xml.contains("tests=\"12\" failures=\"0\""));
    assert!(xml.contains("name=\"extract.path_prefix_stripped\""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn local_full_profile_is_green() {
    let json = std::env::temp_dir().join(format!("conformance-full-{}.json", std::process::id()));
    let started = Instant::now();
    let output = conformance(
        &[
            "run",
            "--local",
            "--profile",
            "full",
            "--json",
            json.to_str().unwrap(),
        ],
        true,
    );
    eprintln!("full profile: {:.1} s", started.elapsed().as_secs_f64());
    let text = stdout(&output);
    assert!(output.status.success(), "exit status {}", output.status);
    assert_eq!(text.lines().last(), Some("24 passed, 0 failed, 0 skipped"));
    let all: BTreeSet<String> = set(&QUICK).union(&set(&FULL_ONLY)).cloned().collect();
    assert_eq!(ids_with(&text, "PASS"), all);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["profile"], "full");
    assert_eq!(report["checks"].as_array().unwrap().len(), 24);
    let _ = std::fs::remove_file(&json);
}

/// Negative control: the routing models without their strategy (round-robin
/// instead) break exactly the stickiness and least-loaded checks.
#[test]
fn routing_without_strategies_fails_the_routing_checks() {
    let output = conformance(
        &[
            "run",
            "--local",
            "--profile",
            "full",
            "--local-break",
            "routing",
        ],
        true,
    );
    let text = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "exit status {}",
        output.status
    );
    assert_eq!(
        ids_with(&text, "FAIL"),
        set(&[
            "routing.session.sticky",
            "routing.prefix.sticky",
            "routing.least_loaded"
        ])
    );
    assert!(
        text.contains("went to [\"conformance-pod-"),
        "evidence names the pods"
    );
    assert_eq!(text.lines().last(), Some("21 passed, 3 failed, 0 skipped"));
}

/// Negative control: auth and rate limiting off, while the suite expects
/// them, break exactly the auth and rate-limit checks.
#[test]
fn auth_and_limits_off_fail_their_checks() {
    let output = conformance(
        &[
            "run",
            "--local",
            "--profile",
            "full",
            "--local-break",
            "auth,limits",
        ],
        true,
    );
    let text = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "exit status {}",
        output.status
    );
    assert_eq!(
        ids_with(&text, "FAIL"),
        set(&["auth.missing_key", "auth.wrong_key", "limits.rate_limit"])
    );
    assert!(text.contains("no rate limit applied"));
    assert_eq!(text.lines().last(), Some("21 passed, 3 failed, 0 skipped"));
}

#[test]
fn a_bare_simulator_is_not_a_gateway() {
    let sim = SimProcess::spawn(env!("CARGO_BIN_EXE_flexinfer-sim"), ["--model", "bare-sim"])
        .expect("start flexinfer-sim");
    let url = sim.base_url();
    let junit = std::env::temp_dir().join(format!("conformance-bare-{}.xml", std::process::id()));
    let output = conformance(
        &[
            "run",
            "--gateway",
            &url,
            "--model",
            "bare-sim",
            "--sim-url",
            &url,
            "--junit",
            junit.to_str().unwrap(),
        ],
        false,
    );
    let text = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "exit status {}",
        output.status
    );
    // The simulator answers the OpenAI protocol itself, and a multipart
    // form reaches it unchanged because nothing is in between...
    // ...but it does none of the gateway's work: it defaults a missing
    // model, answers vLLM's numeric error code, ignores X-Model-ID and
    // echoes /model/<name>/... instead of routing by it and stripping it.
    let failed = set(&[
        "errors.missing_model",
        "errors.unknown_model",
        "extract.header_over_json",
        "extract.path_over_json",
        "extract.path_prefix_stripped",
    ]);
    assert_eq!(ids_with(&text, "FAIL"), failed);
    let passed: BTreeSet<String> = set(&QUICK).difference(&failed).cloned().collect();
    assert_eq!(ids_with(&text, "PASS"), passed);
    assert!(text.contains("\"path\":\"/model/bare-sim/v1/chat/completions\""));
    assert_eq!(text.lines().last(), Some("7 passed, 5 failed, 0 skipped"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("failures=\"5\""));
    assert!(xml.contains("<failure message="));
    let _ = std::fs::remove_file(&junit);
    sim.terminate(std::time::Duration::from_secs(5)).unwrap();
}

/// Without their models (or a key), the full profile's role checks are
/// skipped with the reason, not failed.
#[test]
fn role_checks_skip_without_their_models() {
    let sim = SimProcess::spawn(env!("CARGO_BIN_EXE_flexinfer-sim"), ["--model", "bare-sim"])
        .expect("start flexinfer-sim");
    let url = sim.base_url();
    let output = conformance(&["run", "--gateway", &url, "--profile", "full"], false);
    let text = stdout(&output);
    assert_eq!(
        ids_with(&text, "SKIP"),
        set(&FULL_ONLY[2..]),
        "routing, cold start, auth and limits skip"
    );
    assert!(text.contains("no model for role session: serve one named conformance-session"));
    assert!(text.contains("no --api-key given"));
    // The simulator reads the whole oversize body (its own limit is 64 MiB)
    // and refuses it as bad JSON: not the gateway's 413.
    assert!(ids_with(&text, "FAIL").contains("errors.oversize_body"));
    assert!(text.contains("expected status 413, got status 400"));
    sim.terminate(std::time::Duration::from_secs(5)).unwrap();
}

#[test]
fn gateway_and_local_are_exclusive() {
    let output = Command::new(CONFORMANCE)
        .args(["run", "--local", "--gateway", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let output = Command::new(CONFORMANCE).args(["run"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}
