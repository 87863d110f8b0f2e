//! Latency of `/filter` + `/prioritize` for 1,000 full Node objects.
//!
//! ```sh
//! cargo run --release -p flexinfer-sched --example extender_bench [-- ITERATIONS [NODES [PARTS]]]
//! ```
//!
//! PARTS is a comma-separated choice of `floor`, `in-process`, `http` and
//! `node-cache` (default: all).
//!
//! Measures each call in-process (request bytes → response: decoding,
//! decisions, encoding; the filter answer leaves passing nodes in the
//! request, as the HTTP layer sends them, and is also timed copied into
//! one buffer), once with unchanged nodes known from earlier calls and
//! once reading every node; then over loopback HTTP (axum server, reqwest
//! client), with full Node objects in the request; then in-process with
//! node names only (`nodeCacheCapable`). Prints the median and p99 of
//! filter, prioritize and the two together.

#[path = "../tests/sched/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use axum::Router;
use flexinfer_sched::extender::{Settings, StaticNodeSource};
use flexinfer_sched::tps::{benchmark_key, StaticTpsSource};
use flexinfer_sched::{server, Extender};
use k8s_openapi::api::core::v1::Node;

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let node_count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let parts = args
        .next()
        .unwrap_or_else(|| "floor,in-process,http,node-cache".into());
    let run = |part: &str| parts.split(',').any(|p| p == part);

    let nodes = support::nodes(node_count);
    let body = support::extender_args(&support::pod(), &nodes);
    println!(
        "{node_count} nodes, request body {:.1} MiB, {iterations} iterations",
        body.len() as f64 / (1024.0 * 1024.0)
    );

    let extender = Arc::new(new_extender());

    if run("floor") {
        floor(&body, iterations);
    }
    if run("in-process") {
        // Unchanged nodes are known after the first call.
        in_process("in-process, nodes known", &extender, &body, iterations);
        let cold = new_extender().with_known_nodes(0);
        in_process("in-process, every node read", &cold, &body, iterations);
    }
    if run("http") {
        http(&extender, &body, iterations);
    }
    if run("node-cache") {
        node_cache(&nodes, iterations);
    }
}

/// One serde_json pass over the body, decoding nothing.
fn floor(body: &[u8], iterations: usize) {
    let mut scan = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let _: serde::de::IgnoredAny = serde_json::from_slice(body).expect("valid JSON");
        scan.push(start.elapsed());
    }
    let (median, p99) = percentiles(&scan);
    println!(
        "one JSON pass over the body (floor): median {:.3} ms   p99 {:.3} ms",
        ms(median),
        ms(p99)
    );
}

/// Request bytes to response, in this process.
fn in_process(label: &str, extender: &Extender, body: &[u8], iterations: usize) {
    let mut filter = Vec::with_capacity(iterations);
    let mut prioritize = Vec::with_capacity(iterations);
    for _ in 0..iterations.min(20) {
        extender.filter_response(body);
        extender.prioritize(body).expect("prioritize");
    }
    let mut joined = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        // What the HTTP layer does: passing nodes stay in the request.
        let start = Instant::now();
        let out = extender.filter_response(body);
        filter.push(start.elapsed());
        assert!(!out.is_empty());
        // The same answer copied into one buffer, for comparison.
        let start = Instant::now();
        let out = extender.filter(body);
        joined.push(start.elapsed());
        assert!(!out.is_empty());
        let start = Instant::now();
        let out = extender.prioritize(body).expect("prioritize");
        prioritize.push(start.elapsed());
        assert!(!out.is_empty());
    }
    report(label, &filter, &prioritize);
    let (median, p99) = percentiles(&joined);
    println!(
        "  filter, copied into one buffer: median {:>7.3} ms   p99 {:>7.3} ms",
        ms(median),
        ms(p99)
    );
}

/// Through the server's router over loopback.
fn http(extender: &Arc<Extender>, body: &[u8], iterations: usize) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // The transport alone: the same request bytes, and for filter an answer
    // as long as the extender's, without the extender.
    let answer_len = extender.filter_response(body).len();
    let transport = Router::new()
        .route(
            "/filter",
            post(move |body: Bytes| async move { body.slice(..answer_len.min(body.len())) }),
        )
        .route("/prioritize", post(|_: Bytes| async { "[]" }))
        .layer(DefaultBodyLimit::disable());
    let app = server::router(extender.clone(), 256 * 1024 * 1024);
    for (label, app) in [
        ("loopback HTTP", app),
        ("loopback HTTP, transport only", transport),
    ] {
        let (filter, prioritize) = runtime.block_on(calls(app, body, iterations));
        report(label, &filter, &prioritize);
    }
}

/// Times filter and prioritize calls to `app` over loopback.
async fn calls(app: Router, body: &[u8], iterations: usize) -> (Vec<Duration>, Vec<Duration>) {
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        let body = Bytes::copy_from_slice(body);
        let call = |path: &'static str| {
            let client = client.clone();
            let body = body.clone();
            async move {
                let start = Instant::now();
                let response = client
                    .post(format!("http://{addr}/{path}"))
                    .body(body)
                    .send()
                    .await
                    .expect("send");
                assert!(response.status().is_success());
                let out = response.bytes().await.expect("body");
                assert!(!out.is_empty());
                start.elapsed()
            }
        };
        for _ in 0..iterations.min(20) {
            call("filter").await;
            call("prioritize").await;
        }
        let mut filter = Vec::with_capacity(iterations);
        let mut prioritize = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            filter.push(call("filter").await);
            prioritize.push(call("prioritize").await);
        }
        (filter, prioritize)
    }
}

/// `nodeCacheCapable`: only names travel; nodes come from the cache.
fn node_cache(nodes: &[serde_json::Value], iterations: usize) {
    let cache = StaticNodeSource::new(
        nodes
            .iter()
            .map(|node| serde_json::from_value::<Node>(node.clone()).expect("node")),
    );
    let extender = new_extender().with_nodes(Arc::new(cache));
    let names: Vec<&str> = nodes
        .iter()
        .map(|node| node["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({
        "Pod": support::pod(), "Nodes": null, "NodeNames": names
    }))
    .expect("encodable");
    let mut filter = Vec::with_capacity(iterations);
    let mut prioritize = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        extender.filter(&body);
        filter.push(start.elapsed());
        let start = Instant::now();
        extender.prioritize(&body).expect("prioritize");
        prioritize.push(start.elapsed());
    }
    report("in-process, NodeNames + node cache", &filter, &prioritize);
}

fn new_extender() -> Extender {
    let mut tps = StaticTpsSource::default();
    tps.insert(
        "ml",
        "flexinfer-benchmark-results",
        [(
            benchmark_key(
                "vllm",
                "qwen3-8b",
                "vendor=AMD,arch=gfx1100,vram=24Gi,count=1,int4=true",
            ),
            "48.0",
        )],
    );
    tps.insert(
        "ml",
        "qwen3-8b-benchmark-results",
        [("tokensPerSecond", "30")],
    );
    Extender::new(
        Settings {
            benchmark_config_map: "flexinfer-benchmark-results".into(),
            ..Default::default()
        },
        Arc::new(tps),
    )
}

fn report(label: &str, filter: &[Duration], prioritize: &[Duration]) {
    let together: Vec<Duration> = filter
        .iter()
        .zip(prioritize)
        .map(|(a, b)| *a + *b)
        .collect();
    println!("{label}:");
    for (name, samples) in [
        ("filter", filter),
        ("prioritize", prioritize),
        ("filter+prioritize", &together[..]),
    ] {
        let (median, p99) = percentiles(samples);
        println!(
            "  {name:<18} median {:>7.3} ms   p99 {:>7.3} ms",
            ms(median),
            ms(p99)
        );
    }
}

fn percentiles(samples: &[Duration]) -> (Duration, Duration) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
