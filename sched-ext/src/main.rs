//! `flexinfer-sched`: kube-scheduler extender that places model pods on the GPU node that serves them best

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use flexinfer_sched::config::ExtenderConfig;
use flexinfer_sched::extender::Settings;
use flexinfer_sched::{server, watch, Extender};

/// kube-scheduler extender that places model pods on the GPU node that serves them best
#[derive(Parser, Debug)]
#[command(name = "flexinfer-sched", version, about, long_about = LONG_ABOUT)]
struct Cli {
    #[command(flatten)]
    config: ExtenderConfig,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    log_format: String,
}

const LONG_ABOUT: &str = "Serves the kube-scheduler extender v1 API: /filter rejects nodes without a GPU vendor label, without enough free VRAM, or with an architecture the backend does not support; /prioritize (alias /score) scores the remaining nodes by measured tokens/s, utilisation, cost, KV-cache pressure and free VRAM (weights from SCHED_* env vars), normalised to 0-10. Benchmark ConfigMaps (and, when enabled, Nodes and Pods) are watched and cached. Also serves /healthz and /metrics.";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
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
    let mut extender = Extender::new(settings, Arc::new(config_maps));
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

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
