//! `flexinfer-bench` against the simulated model server with known timing:
//! the measured figures must match what the simulator was told to do.

use std::process::Output;
use std::time::Duration;

use flexinfer_conformance::sim::{SimConfig, SimServer};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BIN: &str = env!("CARGO_BIN_EXE_flexinfer-bench");

const TOKENS_PER_SECOND: f64 = 50.0;
const TTFT_MS: f64 = 200.0;

async fn sim(config: SimConfig) -> SimServer {
    SimServer::start(config).await.expect("simulator starts")
}

fn timed_config() -> SimConfig {
    SimConfig {
        models: vec!["bench-model".into()],
        ttft: Duration::from_millis(TTFT_MS as u64),
        tokens_per_second: TOKENS_PER_SECOND,
        recorder_capacity: 0,
        ..SimConfig::default()
    }
}

async fn bench(args: &[&str]) -> Output {
    tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("BENCHMARK_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .await
        .expect("flexinfer-bench runs")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn within(measured: f64, configured: f64, tolerance: f64) -> bool {
    (measured - configured).abs() <= configured * tolerance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_tokens_per_second_and_ttft_match_the_simulator() {
    let server = sim(timed_config()).await;
    let url = server.base_url();
    let out = bench(&[
        "load",
        "--url",
        &url,
        "--model",
        "bench-model",
        "-c",
        "1,4",
        "-n",
        "8",
        "--max-tokens",
        "32",
        "--prompt-tokens",
        "16..64",
        "--json",
    ])
    .await;
    let report = json(&out);
    assert_eq!(report["schema"], "flexinfer-bench/load/v1");
    for level in report["levels"].as_array().unwrap() {
        assert_eq!(level["succeeded"], 8, "{level}");
        assert_eq!(level["output_tokens"], 8 * 32);
        assert_eq!(level["token_source"], "usage");
        let tps = level["request_tokens_per_second"]["p50"].as_f64().unwrap();
        assert!(within(tps, TOKENS_PER_SECOND, 0.10), "tokens/s {tps}");
        let ttft = level["ttft_ms"]["p50"].as_f64().unwrap();
        assert!(within(ttft, TTFT_MS, 0.10), "TTFT {ttft} ms");
        let itl = level["itl_ms"]["p50"].as_f64().unwrap();
        assert!(
            within(itl, 1000.0 / TOKENS_PER_SECOND, 0.10),
            "ITL {itl} ms"
        );
        let prompt = level["prompt_tokens"].as_u64().unwrap();
        assert!((8 * 16..=8 * 64).contains(&prompt), "{prompt}");
    }
    // Four at a time: about four times the throughput of one.
    let levels = report["levels"].as_array().unwrap();
    let ratio = levels[1]["output_tokens_per_second"].as_f64().unwrap()
        / levels[0]["output_tokens_per_second"].as_f64().unwrap();
    assert!((3.0..=4.5).contains(&ratio), "throughput ratio {ratio}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tps_mode_reports_the_configured_decode_speed() {
    let server = sim(SimConfig {
        recorder_capacity: 100,
        ..timed_config()
    })
    .await;
    let out = bench(&[
        "tps",
        "--url",
        &server.base_url(),
        "--model",
        "bench-model",
        "--backend",
        "vllm",
        "--min-duration",
        "0s",
        "--warmup-iterations",
        "1",
        "--max-tokens",
        "32",
        "--json",
    ])
    .await;
    let result = json(&out);
    assert_eq!(result["schema"], "flexinfer-bench/tps/v1");
    assert_eq!(result["samples"].as_array().unwrap().len(), 5);
    let tps = result["tokens_per_second"].as_f64().unwrap();
    assert!(within(tps, TOKENS_PER_SECOND, 0.10), "tokens/s {tps}");
    let ttft = result["ttft_ms"].as_f64().unwrap();
    assert!(within(ttft, TTFT_MS, 0.10), "TTFT {ttft}");
    assert_eq!(result["completion_tokens"], 5 * 32);
    // The readiness probe, one warm-up and five samples, all marked as
    // background work so a gateway never cold-starts a model for them.
    let records = server.state().recorder.snapshot();
    assert_eq!(records[0].path, "/health");
    let completions: Vec<_> = records
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .collect();
    assert_eq!(completions.len(), 6);
    assert!(records
        .iter()
        .all(|r| r.headers["x-flexinfer-internal-workload-class"] == "background"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_schema_is_stable() {
    let server = sim(SimConfig {
        models: vec!["bench-model".into()],
        ..SimConfig::default()
    })
    .await;
    let out = bench(&[
        "load",
        "--url",
        &server.base_url(),
        "--model",
        "bench-model",
        "-n",
        "20",
        "-c",
        "2",
        "--max-tokens",
        "8",
        "--json",
    ])
    .await;
    let report = json(&out);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&report),
        [
            "api",
            "levels",
            "max_tokens",
            "model",
            "prompt_tokens",
            "schema",
            "stream",
            "url"
        ]
    );
    let level = &report["levels"][0];
    assert_eq!(
        keys(level),
        [
            "concurrency",
            "duration_s",
            "errors",
            "failed",
            "itl_ms",
            "latency_ms",
            "output_tokens",
            "output_tokens_per_second",
            "prompt_tokens",
            "request_tokens_per_second",
            "requests",
            "requests_per_second",
            "succeeded",
            "token_source",
            "ttft_ms",
        ]
    );
    for summary in [
        "itl_ms",
        "latency_ms",
        "request_tokens_per_second",
        "ttft_ms",
    ] {
        assert_eq!(
            keys(&level[summary]),
            ["count", "max", "mean", "min", "p50", "p90", "p99"],
            "{summary}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_classified_and_a_total_failure_exits_non_zero() {
    let server = sim(SimConfig {
        models: vec!["bench-model".into()],
        fail_rate: 1.0,
        ..SimConfig::default()
    })
    .await;
    let out = bench(&[
        "load",
        "--url",
        &server.base_url(),
        "--model",
        "bench-model",
        "-n",
        "6",
        "--max-tokens",
        "4",
    ])
    .await;
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("errors at concurrency 1: http_500=6"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "flexinfer-bench: error: no request succeeded (http_500=6)"
    );

    let out = bench(&[
        "load",
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "-n",
        "2",
    ])
    .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connect=2"));

    let out = bench(&[
        "load",
        "--url",
        "https://api.example.com/v1",
        "--model",
        "m",
    ])
    .await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("https is not supported"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_png_chart_is_written() {
    let server = sim(SimConfig {
        models: vec!["bench-model".into()],
        ..SimConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("chart.png");
    let out = bench(&[
        "load",
        "--url",
        &server.base_url(),
        "--model",
        "bench-model",
        "-n",
        "10",
        "-c",
        "1,2,4",
        "--max-tokens",
        "4",
        "--plot",
        png.to_str().unwrap(),
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 5_000);
}

/// A server without `usage` in its stream: tokens are counted from chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_counted_from_chunks_without_usage() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Read headers and the JSON body (it ends with '}').
                while !request.ends_with(b"}") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let mut body = String::from("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
                for word in ["one", " two", " three", " four", " five"] {
                    body.push_str(&format!(
                        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{word}\"}}}}]}}\n\n"
                    ));
                }
                body.push_str("data: [DONE]\n\n");
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    let out = bench(&[
        "load",
        "--url",
        &format!("http://{addr}"),
        "--model",
        "m",
        "-n",
        "3",
        "--json",
    ])
    .await;
    let report = json(&out);
    let level = &report["levels"][0];
    assert_eq!(level["token_source"], "counted");
    assert_eq!(level["output_tokens"], 15);
    assert_eq!(level["succeeded"], 3);
}
