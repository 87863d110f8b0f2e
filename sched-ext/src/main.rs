//! `flexinfer-sched`: kube-scheduler extender that places model pods on the GPU node that serves them best

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use flexinfer_sched::cli::Cli;
use flexinfer_sched::extender::Settings;
use flexinfer_sched::{server, watch, Extender};
use flexinfer_service::{init_logging, shutdown_signal, LogStyle};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(LogStyle::named(&cli.log_format), "info");
    let config = cli.config;

    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;

    let (config_maps, watch_config_maps) = watch::benchmark_config_maps(
        client.clone(),
        &config.watch_namespace,
        config.benchmark_results_configmap.clone(),
    );
    tokio::spawn(watch_config_maps);

    let settings = Settings {
        weights: config.weights(),
        fair_share: config.fair_share(),
        benchmark_config_map: config.benchmark_results_configmap.clone(),
    };
    let mut extender =
        Extender::new(settings, Arc::new(config_maps)).with_known_nodes(config.known_nodes);
    if config.node_cache {
        let (nodes, watch_nodes) = watch::nodes(client.clone());
        tokio::spawn(watch_nodes);
        extender = extender.with_nodes(Arc::new(nodes));
    }
    if config.tenant_fairshare_enabled {
        let (pods, watch_pods) = watch::pods(client.clone(), &config.watch_namespace);
        tokio::spawn(watch_pods);
        extender = extender.with_tenants(Arc::new(pods));
    }

    let app = server::router(Arc::new(extender), config.max_body_bytes);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(
        listen = %config.listen,
        weights = ?config.weights(),
        fair_share = config.tenant_fairshare_enabled,
        node_cache = config.node_cache,
        "flexinfer-sched serving"
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving HTTP")?;
    tracing::info!("flexinfer-sched stopped");
    Ok(())
}
