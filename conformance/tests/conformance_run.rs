//! Runs the real `flexinfer-conformance` binary: green against a local
//! simulator-behind-gateway stack, red against a bare simulator (which is not
//! a gateway, so the gateway-specific checks must fail).

use std::path::PathBuf;
use std::process::{Command, Output};

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

fn outcome_of<'a>(text: &'a str, id: &str) -> Option<&'a str> {
    text.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(id))
        .and_then(|l| l.split_whitespace().next())
}

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
    assert_eq!(summary, "9 passed, 0 failed, 0 skipped");
    for id in [
        "proto.models.list",
        "proto.chat.shape",
        "proto.chat.stream.framing",
        "proto.embeddings.shape",
        "errors.bad_json",
        "errors.missing_model",
        "errors.unknown_model",
        "extract.header_over_json",
        "extract.path_prefix_stripped",
    ] {
        assert_eq!(outcome_of(&text, id), Some("PASS"), "{id}");
    }

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["summary"]["passed"], 9);
    assert_eq!(report["summary"]["failed"], 0);
    assert_eq!(report["model"], "conformance-model");
    assert_eq!(report["checks"].as_array().unwrap().len(), 9);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.starts_with("<?xml"));
    assert!(xml.contains("tests=\"9\" failures=\"0\""));
    assert!(xml.contains("name=\"extract.path_prefix_stripped\""));
    let _ = std::fs::remove_dir_all(&dir);
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
    // The simulator answers the OpenAI protocol itself...
    for id in [
        "proto.models.list",
        "proto.chat.shape",
        "proto.chat.stream.framing",
        "proto.embeddings.shape",
        "errors.bad_json",
    ] {
        assert_eq!(outcome_of(&text, id), Some("PASS"), "{id}");
    }
    // ...but does none of the gateway's work: it defaults a missing model,
    // answers vLLM's numeric error code, ignores X-Model-ID and echoes
    // /model/<name>/... instead of stripping the prefix.
    for id in [
        "errors.missing_model",
        "errors.unknown_model",
        "extract.header_over_json",
        "extract.path_prefix_stripped",
    ] {
        assert_eq!(outcome_of(&text, id), Some("FAIL"), "{id}");
    }
    assert!(text.contains("\"path\":\"/model/bare-sim/v1/chat/completions\""));
    assert_eq!(text.lines().last(), Some("5 passed, 4 failed, 0 skipped"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("failures=\"4\""));
    assert!(xml.contains("<failure message="));
    let _ = std::fs::remove_file(&junit);
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
