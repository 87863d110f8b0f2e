//! `flexinfer-bench routing` end to end: `--local` starts real
//! `flexinfer-sim` pods (and a `flexinfer-gateway`) per strategy, and
//! `--url` measures one endpoint whose /metrics it scrapes.
//!
//! `--local` needs the simulator and gateway binaries in this target
//! directory (`cargo build -p flexinfer-conformance --bin flexinfer-sim -p
//! flexinfer-gateway`), or `FLEXINFER_SIM_BIN` / `FLEXINFER_GATEWAY_BIN`.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use flexinfer_conformance::sim::{SimConfig, SimServer};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_flexinfer-bench");

/// `name` from `env`, else next to this crate's binary; fails the test with
/// instructions when it is missing.
fn binary(env: &str, name: &str, build: &str) -> PathBuf {
    let path = match std::env::var_os(env) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(BIN)
            .parent()
            .expect("target dir")
            .join(format!("{name}{}", std::env::consts::EXE_SUFFIX)),
    };
    assert!(
        path.is_file(),
        "{} is missing: this test runs the real {name}. Build it first with `{build}` \
         (or run `cargo test --workspace`), or set {env}",
        path.display()
    );
    path
}

fn bench(args: &[&str], envs: &[(&str, &PathBuf)]) -> Output {
    let mut command = std::process::Command::new(BIN);
    command
        .args(args)
        .env_remove("BENCHMARK_URL")
        .env_remove("MODEL_NAME")
        .env_remove("OPENAI_API_KEY");
    for (k, v) in envs {
        command.env(k, v);
    }
    command.output().expect("flexinfer-bench runs")
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

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn local_run_compares_round_robin_with_the_oracle() {
    let sim = binary(
        "FLEXINFER_SIM_BIN",
        "flexinfer-sim",
        "cargo build -p flexinfer-conformance --bin flexinfer-sim",
    );
    let gateway = binary(
        "FLEXINFER_GATEWAY_BIN",
        "flexinfer-gateway",
        "cargo build -p flexinfer-gateway",
    );
    let help = std::process::Command::new(&sim)
        .arg("--help")
        .output()
        .expect("flexinfer-sim --help");
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("--prefill-tokens-per-second"),
        "{} has no prefix cache: rebuild it with \
         `cargo build -p flexinfer-conformance --bin flexinfer-sim`",
        sim.display()
    );
    let dir = std::env::temp_dir().join(format!(
        "flexinfer-bench-routing-test-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("routing.png");
    let out = bench(
        &[
            "routing",
            "--local",
            "--pods",
            "2",
            "--strategies",
            "round-robin,cache-aware,oracle",
            "--tenants",
            "6",
            "--system-tokens",
            "1000",
            "--requests",
            "60",
            "--concurrency",
            "4",
            "--json",
            "--plot",
            chart.to_str().unwrap(),
        ],
        &[
            ("FLEXINFER_SIM_BIN", &sim),
            ("FLEXINFER_GATEWAY_BIN", &gateway),
        ],
    );
    let report = json(&out);
    assert_eq!(report["schema"], "flexinfer-bench/routing/v1");
    let settings = &report["settings"];
    assert_eq!(settings["mode"], "local");
    assert_eq!(settings["workload"], "shared");
    assert_eq!(settings["requests"], 60);
    assert_eq!(settings["local"]["pods"], 2);
    // 3⅓ 1,000-token system prompts of 16-token blocks: ⌈10 × 63 ÷ 3⌉ =
    // 210, rounded up to 224.
    assert_eq!(settings["local"]["sim"]["prefix_cache_blocks"], 224);
    assert_eq!(settings["local"]["sim"]["max_num_seqs"], 8);
    let strategies = report["strategies"].as_array().unwrap();
    let names: Vec<&str> = strategies
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["round-robin", "cache-aware", "oracle"]);
    assert_eq!(strategies[0]["gateway_routing"], "default");
    assert_eq!(strategies[1]["gateway_routing"], "cache-aware");
    assert!(strategies[2]["gateway_routing"].is_null());
    for s in strategies {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["succeeded"], 60, "{s}");
        assert_eq!(s["oracle_errors"], 0, "{s}");
        assert_eq!(s["hit_rate_source"], "metrics", "{s}");
        // Fresh pods: the counters cover exactly this strategy's requests.
        let pods = s["pods"].as_array().unwrap();
        assert_eq!(pods.len(), 2);
        let finished: f64 = pods.iter().map(|p| f(&p["requests"])).sum();
        assert_eq!(finished, 60.0, "{s}");
        let hit = f(&s["hit_rate"]);
        assert!(hit > 0.0 && hit < 1.0, "{s}");
        // The pods' counters and the answers' usage agree.
        assert!((hit - f(&s["client_hit_rate"])).abs() < 0.01, "{s}");
        assert!(f(&s["ttft_ms"]["p50"]) >= 20.0, "{s}");
        assert!(f(&s["imbalance"]) >= 1.0, "{s}");
        assert_eq!(f(&s["output_tokens"]), 60.0 * 16.0, "{s}");
    }
    // Round-robin sends every tenant to both pods, whose caches hold only
    // three or four prompts each, and every other turn of a conversation
    // to the pod that lacks its history; cache-aware routing keeps three
    // tenants on each pod, as the oracle does.
    let hit = |i: usize| f(&strategies[i]["hit_rate"]);
    let (rr, cache_aware, oracle) = (hit(0), hit(1), hit(2));
    println!("hit rates: round-robin {rr:.3}, cache-aware {cache_aware:.3}, oracle {oracle:.3}");
    assert!(oracle > rr, "oracle {oracle} vs round-robin {rr}");
    assert!(
        cache_aware > rr && cache_aware >= 0.9 * oracle,
        "cache-aware {cache_aware} vs round-robin {rr} and oracle {oracle}"
    );
    assert!(report["ratios"].is_null());
    let png = std::fs::read(&chart).expect("chart written");
    assert!(png.starts_with(b"\x89PNG"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_mode_reads_the_pods_metrics() {
    let server = SimServer::start(SimConfig {
        models: vec!["routing-model".into()],
        ttft: Duration::from_millis(5),
        recorder_capacity: 0,
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts");
    let url = server.base_url();
    let out = tokio::process::Command::new(BIN)
        .args([
            "routing",
            "--url",
            &url,
            "--model",
            "routing-model",
            "--pod-metrics",
            &format!("{url}/metrics"),
            "--label",
            "direct",
            "--tenants",
            "2",
            "--system-tokens",
            "100",
            "--turns",
            "3",
            "--requests",
            "12",
            "--concurrency",
            "2",
            "--json",
        ])
        .env_remove("BENCHMARK_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .await
        .expect("flexinfer-bench runs");
    let report = json(&out);
    assert_eq!(report["settings"]["mode"], "url");
    assert!(report["settings"]["local"].is_null());
    assert_eq!(
        report["settings"]["pod_metrics"][0],
        format!("{url}/metrics")
    );
    let s = &report["strategies"][0];
    assert_eq!(s["strategy"], "direct");
    assert_eq!(s["succeeded"], 12, "{s}");
    assert_eq!(s["pods"][0]["requests"], 12.0, "{s}");
    // One pod is perfectly balanced.
    assert_eq!(s["imbalance"], 1.0, "{s}");
    // Later turns and the second conversation of a tenant find their prefix cached.
    assert_eq!(s["hit_rate_source"], "metrics", "{s}");
    assert!(f(&s["hit_rate"]) > 0.3, "{s}");
}
