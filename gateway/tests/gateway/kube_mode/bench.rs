//! Gateway overhead in Kubernetes mode versus file mode: the same binary,
//! the same `flexinfer-sim` upstream, the same `wrk` load
//! (`benchmark/proxy/chat.lua`). Ignored by default; run with
//!
//! ```sh
//! cargo test -p flexinfer-gateway --test gateway kube_mode::bench -- --ignored --nocapture
//! ```
//!
//! `FLEXINFER_BENCH_DURATION` (default `5s`), `FLEXINFER_BENCH_CONNECTIONS`
//! (default 32) and `FLEXINFER_BENCH_ROUNDS` (default 3, alternating the two
//! modes) tune the load; medians are printed last. `wrk` must be installed.

use std::process::Command;

use flexinfer_testkube::TestApiServer;
use serde_json::json;

use crate::kube_mode::kube_support::{model, slice, KubeGateway};

fn wrk(addr: std::net::SocketAddr, duration: &str, connections: &str) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../benchmark/proxy/chat.lua");
    let out = Command::new("wrk")
        .args([
            "-t2",
            "-c",
            connections,
            "-d",
            duration,
            "--latency",
            "-s",
            script,
        ])
        .arg(format!("http://{addr}"))
        .output()
        .expect("wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("RESULT"))
        .unwrap_or_else(|| panic!("no RESULT line from wrk: {text}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn kubernetes_mode_adds_no_overhead_over_file_mode() {
    let duration = std::env::var("FLEXINFER_BENCH_DURATION").unwrap_or_else(|_| "5s".into());
    let conns = std::env::var("FLEXINFER_BENCH_CONNECTIONS").unwrap_or_else(|_| "32".into());
    let rounds: usize = std::env::var("FLEXINFER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    // An upstream that answers at once, so that the gateway's own time shows.
    let sim = crate::support::sim(&[
        "--model",
        "bench-backend",
        "--recorder-capacity",
        "0",
        "--ttft",
        "0s",
        "--tokens-per-second",
        "0",
    ]);

    let yaml = format!(
        "models:\n  - name: bench\n    backendModel: bench-backend\n    endpoints: [\"{}\"]\n",
        sim.base_url()
    );
    let file = crate::support::Gateway::start(&yaml, &[]);

    let server = TestApiServer::start().await;
    server
        .insert(&model(
            "default",
            "bench",
            Some("Ready"),
            json!({"config": {"servedModelName": "bench-backend"}}),
        ))
        .unwrap();
    server
        .insert(&slice("default", "bench", "bench-1", &[(sim.addr(), None)]))
        .unwrap();
    let kube = KubeGateway::start(&server, &[]).await;
    kube.wait_endpoints("bench", 1).await;
    assert_eq!(kube.chat("bench").await.status(), 200);

    let (file_addr, kube_addr) = (file.addr, kube.addr);
    let results = tokio::task::spawn_blocking(move || {
        // Warm both, then alternate so that machine load hits both alike.
        wrk(file_addr, "2s", &conns);
        wrk(kube_addr, "2s", &conns);
        let mut out = Vec::new();
        for _ in 0..rounds {
            out.push(("file", wrk(file_addr, &duration, &conns)));
            out.push(("kubernetes", wrk(kube_addr, &duration, &conns)));
        }
        out
    })
    .await
    .unwrap();
    for (mode, line) in &results {
        println!("{mode:<11} {line}");
        assert!(line.contains("status_errors=0"), "{mode}: {line}");
    }
    for mode in ["file", "kubernetes"] {
        let runs: Vec<&str> = results
            .iter()
            .filter(|(m, _)| *m == mode)
            .map(|(_, l)| l.as_str())
            .collect();
        println!(
            "{mode:<11} median rps={:.0} p50_ms={:.3} p99_ms={:.3}",
            median(&runs, "rps"),
            median(&runs, "p50_ms"),
            median(&runs, "p99_ms")
        );
    }
}

/// The median of `field=<number>` over wrk RESULT lines.
fn median(lines: &[&str], field: &str) -> f64 {
    let key = format!("{field}=");
    let mut values: Vec<f64> = lines
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(key.as_str()))
                .and_then(|v| v.parse().ok())
        })
        .collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
