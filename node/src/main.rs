//! `flexinfer-agent`: Node agent that discovers GPUs and labels the node

use std::net::SocketAddr;

use anyhow::Context;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use clap::Parser;
use flexinfer_node::agent::{dry_run, Agent, Discovery};
use flexinfer_node::cli::Cli;
use flexinfer_node::kv_cache::{KvCacheProbe, DEFAULT_PORTS};
use flexinfer_node::labels::LabelKeys;
use flexinfer_node::metrics::Metrics;
use flexinfer_node::publish::NodePublisher;
use flexinfer_service::{init_logging, shutdown_signal, LogStyle};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(LogStyle::named(&cli.log_format), "info");
    let config = cli.config;
    let keys = LabelKeys::new(config.label_prefix.clone());
    let mut discovery = Discovery::from_config(&config);

    if config.dry_run {
        let (inventory, desired) =
            tokio::task::spawn_blocking(move || dry_run(&mut discovery, &keys)).await?;
        let gpus: Vec<_> = inventory
            .gpus
            .iter()
            .map(|gpu| {
                serde_json::json!({
                    "vendor": gpu.vendor.label(), "index": gpu.index, "model": gpu.model,
                    "arch": gpu.arch, "vramTotalBytes": gpu.vram_total_bytes,
                    "vramFreeBytes": gpu.vram_free_bytes, "utilizationPercent": gpu.utilization_percent,
                    "temperatureCelsius": gpu.temperature_celsius,
                })
            })
            .collect();
        let report = serde_json::json!({
            "gpus": gpus,
            "cpu": {"avx512": inventory.cpu.avx512, "avx2": inventory.cpu.avx2,
                    "cores": inventory.cpu.cores, "memoryBytes": inventory.cpu.memory_bytes},
            "labels": desired.labels,
            "annotations": desired.annotations,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }

    let node_name = config
        .node_name
        .clone()
        .filter(|name| !name.is_empty())
        .context("NODE_NAME environment variable not set")?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let metrics = Metrics::new();

    let addr = SocketAddr::from(([0, 0, 0, 0], config.metrics_port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let served = metrics.clone();
    let app = Router::new()
        .route("/healthz", get(|| async { StatusCode::OK }))
        .route(
            "/metrics",
            get(move || {
                let metrics = served.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        metrics.render(),
                    )
                        .into_response()
                }
            }),
        );
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown_signal())
            .await
    });

    tracing::info!(
        node = %node_name,
        interval = ?config.interval,
        prefix = %config.label_prefix,
        metrics = %addr,
        "flexinfer-agent started"
    );
    let publisher = NodePublisher::new(client.clone(), node_name.clone(), keys.clone());
    let mut agent = Agent::new(node_name.clone(), keys, discovery, publisher, metrics);
    if config.kv_cache {
        agent = agent.with_kv_cache(KvCacheProbe::new(client, node_name, DEFAULT_PORTS.to_vec()));
    }
    agent.run(config.interval, shutdown_signal()).await;
    server.await?.context("serving metrics")?;
    tracing::info!("flexinfer-agent stopped");
    Ok(())
}
