//! `flexinfer-sim selftest`: how many small chat completions per second the
//! simulator answers on this machine, measured in-process over loopback.

use std::io;

use bytes::Bytes;
use http::{HeaderValue, Method};

use super::cli::SelftestArgs;
use super::config::SimConfig;
use super::server::SimServer;
use crate::loadgen::{self, LoadReport, LoadSpec};

/// Starts an instant-generation simulator, loads it, and returns the report.
pub async fn run(args: &SelftestArgs) -> io::Result<LoadReport> {
    let config = SimConfig {
        recorder_capacity: if args.no_recorder {
            0
        } else {
            SimConfig::default().recorder_capacity
        },
        ..SimConfig::default()
    };
    let server = SimServer::start(config).await?;
    let body = format!(
        r#"{{"model":"{}","messages":[{{"role":"user","content":"Say hello to the benchmark."}}],"max_tokens":{}}}"#,
        crate::sim::config::DEFAULT_MODEL,
        args.max_tokens
    );
    let report = loadgen::run(LoadSpec {
        addr: server.addr(),
        method: Method::POST,
        path: "/v1/chat/completions".into(),
        content_type: Some(HeaderValue::from_static("application/json")),
        body: Bytes::from(body),
        connections: args.connections,
        warmup: args.warmup,
        duration: args.duration,
    })
    .await?;
    server.shutdown().await?;
    Ok(report)
}

/// The human-readable summary printed by the subcommand.
pub fn summary(args: &SelftestArgs, report: &LoadReport) -> String {
    let ms = |q: f64| report.percentile(q).as_secs_f64() * 1000.0;
    format!(
        "flexinfer-sim selftest: POST /v1/chat/completions (max_tokens={}, stream=false), {} keep-alive \
         connections, {:?} measured after {:?} warm-up, recorder {}\n\
         requests: {}  non-2xx: {}  errors: {}\n\
         throughput: {:.0} req/s\n\
         latency: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        args.max_tokens,
        args.connections,
        args.duration,
        args.warmup,
        if args.no_recorder { "off" } else { "on" },
        report.requests,
        report.non_success,
        report.errors,
        report.requests_per_second(),
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(1.0),
    )
}
