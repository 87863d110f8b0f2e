//! Mid-stream failover: the engine serving a stream is killed (SIGKILL) at
//! a random point of its answer, and the gateway resumes the answer on the
//! other engine in the same client stream. Real gateway, real simulator
//! processes, the official OpenAI SDK reading every stream.

use crate::support;

use std::path::Path;

use flexinfer_conformance::python;
use flexinfer_conformance::sim::process::SimProcess;
use serde_json::{json, Value};
use support::{free_port, metric_value, Gateway};

const SETUP_HINT: &str = "run scripts/setup.sh (it installs the openai SDK into .venv) and set \
                          FLEXINFER_PYTHON=$PWD/.venv/bin/python";

/// The engines, as the driver script starts them, and the model file that
/// puts both behind a model with failover and one without.
fn simulators(ports: &[u16; 2]) -> (Value, String) {
    let bin = SimProcess::binary().expect("flexinfer-sim binary (cargo build --workspace)");
    let engines: Vec<Value> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let name = format!("engine-{i}");
            json!({
                "name": name,
                "port": port,
                "argv": [
                    bin.display().to_string(), "--port", port.to_string(), "--pod-name", name,
                    "--model", "m", "--tokens-per-second", "150", "--default-max-tokens", "24",
                    "--log-format", "json",
                ],
            })
        })
        .collect();
    let yaml = two_models(ports, "m", ("resume-on", "on"), "resume-off");
    (Value::Array(engines), yaml)
}

/// A model file with two models served as `backend` by the engines on
/// `ports`: `on` with `streamFailover` set to `setting`, and `off` without.
pub(crate) fn two_models(
    ports: &[u16; 2],
    backend: &str,
    (on, setting): (&str, &str),
    off: &str,
) -> String {
    let urls = format!(
        "[\"http://127.0.0.1:{}\", \"http://127.0.0.1:{}\"]",
        ports[0], ports[1]
    );
    format!(
        "models:\n\
         - name: {on}\n  backendModel: {backend}\n  endpoints: {urls}\n  streamFailover: {setting}\n\
         - name: {off}\n  backendModel: {backend}\n  endpoints: {urls}\n"
    )
}

/// Runs the driver (`tests/python/stream_failover.py`) with `config` and
/// returns its report with the seconds from each kill to the next text,
/// sorted.
pub(crate) async fn run_driver(config: Value) -> (Value, Vec<f64>) {
    let report = tokio::task::spawn_blocking(move || {
        let python = python::interpreter();
        python::require(&python, "openai", SETUP_HINT);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/stream_failover.py");
        python::run_json(&python, &script, &[&config.to_string()])
    })
    .await
    .expect("driver task");
    let mut resumed: Vec<f64> = report["resumed_after_s"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    resumed.sort_by(f64::total_cmp);
    (report, resumed)
}

/// Acceptance: 100 streams (chat and completions) each lose their engine
/// at a random point; every one completes through the SDK with the
/// uninterrupted answer's text, one id, one role chunk, one finish and one
/// usage chunk counting both engines' prefill. With failover off the
/// stream is cut, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_engine_mid_stream_is_resumed_on_another() {
    let ports = [free_port(), free_port()];
    let (engines, yaml) = simulators(&ports);
    let gw = Gateway::start(&yaml, &[]);
    let config = json!({
        "base": format!("http://{}", gw.addr),
        "on": "resume-on",
        "off": "resume-off",
        "engines": engines,
        "streams": 100,
        "off_streams": 4,
        "seed": 48,
        "max_tokens": 20,
        "compare": true,
    });
    let (report, resumed) = run_driver(config).await;
    let at = |q: f64| resumed[((resumed.len() - 1) as f64 * q) as usize] * 1e3;
    eprintln!(
        "streams {} completed {} identical {} killed {}; first text after the kill: \
         p50 {:.1} ms p99 {:.1} ms; off: {}",
        report["streams"],
        report["completed"],
        report["identical"],
        report["killed"],
        at(0.5),
        at(0.99),
        report["off"]
    );
    assert_eq!(report["problems"], json!([]), "{report}");
    assert_eq!(report["streams"], 100, "{report}");
    assert_eq!(report["completed"], 100, "{report}");
    assert_eq!(report["identical"], 100, "{report}");
    assert_eq!(report["killed"], 100, "{report}");
    assert_eq!(resumed.len(), 100, "{report}");
    for off in report["off"].as_array().unwrap() {
        assert_eq!(
            off["completed"], false,
            "failover off cuts the stream: {report}"
        );
    }

    let metrics = gw.metrics().await;
    let resumes = metric_value(
        &metrics,
        "flexinfer_proxy_stream_resumes_total{model=\"resume-on\",outcome=\"resumed\"}",
    );
    assert_eq!(resumes, 100.0, "{metrics}");
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_stream_resumes_total{model=\"resume-off\",outcome=\"resumed\"}"
        ),
        0.0
    );
}

/// The events of a streamed chat of `body` through `gw`, read whole.
async fn stream_of(gw: &Gateway, body: Value) -> Vec<Value> {
    let resp = support::client()
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("answer");
    if resp.status() != 200 {
        panic!("{}: {:?}", resp.status(), resp.text().await);
    }
    let events = support::read_events(resp, std::time::Instant::now()).await;
    events
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap_or(Value::String(e.data.clone())))
        .collect()
}

/// A stream that cannot be continued (several choices; no attempt left)
/// ends with an error event that says why, in OpenAI's error shape, after
/// the text it had: never cut silently, never half an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_cannot_be_resumed_ends_with_an_error_event_saying_why() {
    // Every answer breaks after three tokens, the continuation's too.
    let engines = [
        support::pod(
            "a",
            &["m"],
            &["--fail-after-tokens", "3", "--tokens-per-second", "100"],
        ),
        support::pod(
            "b",
            &["m"],
            &["--fail-after-tokens", "3", "--tokens-per-second", "100"],
        ),
    ];
    let yaml = format!(
        "models:\n- name: m\n  endpoints: {}\n  streamFailover: chat\n",
        support::endpoints(&[&engines[0], &engines[1]])
    );
    let gw = Gateway::start(&yaml, &[]);
    let chat = |n: u32| {
        json!({"model": "m", "stream": true, "n": n, "max_tokens": 12,
               "messages": [{"role": "user", "content": "hello"}]})
    };
    for (n, why) in [
        (2, "the answer has several choices"),
        (1, "no attempt is left to resume it"),
    ] {
        let events = stream_of(&gw, chat(n)).await;
        let last = events.last().expect("events");
        let message = last["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("cannot be resumed") && message.contains(why),
            "n={n}: {events:?}"
        );
        assert_eq!(last["error"]["type"], "upstream_error", "{last}");
        let text: usize = events
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .filter(|t| !t.is_empty())
            .count();
        // n=1: three tokens, then three more from the second engine.
        if n == 1 {
            assert_eq!(text, 6, "{events:?}");
        } else {
            assert!(text >= 2, "{events:?}");
        }
    }
    // The endpoint that would take the continuation refuses connections:
    // the stream still ends with its error event, never cut.
    let yaml = format!(
        "models:\n- name: m\n  endpoints: [\"{}\", \"{}\"]\n  streamFailover: chat\n",
        engines[0].base_url(),
        support::dead_endpoint(1)
    );
    let lone = Gateway::start(&yaml, &[]);
    for _ in 0..4 {
        let events = stream_of(&lone, chat(1)).await;
        let last = events.last().expect("events");
        let message = last["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("cannot be resumed"), "{events:?}");
    }
    let metrics = gw.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_stream_resumes_total{model=\"m\",outcome=\"failed\"}"
        ),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_stream_resumes_total{model=\"m\",outcome=\"resumed\"}"
        ),
        1.0,
        "{metrics}"
    );
}
