//! `flexinfer-operator`: Kubernetes controllers that reconcile FlexInfer CRDs into workloads

use flexinfer_service::{init_logging, LogStyle};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use clap::Parser;
use flexinfer_operator::cli::{image_overrides_from_env, Cli};
use flexinfer_operator::controllers;
use prometheus::{Encoder, TextEncoder};

#[derive(Clone)]
struct Probe {
    ready: Arc<std::sync::atomic::AtomicBool>,
    registry: prometheus::Registry,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(p): State<Probe>) -> (StatusCode, &'static str) {
    if p.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(p): State<Probe>) -> (StatusCode, String) {
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&p.registry.gather(), &mut buf) {
        Ok(()) => (StatusCode::OK, String::from_utf8_lossy(&buf).into_owned()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn serve(addr: SocketAddr, router: Router) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    axum::serve(listener, router).await?;
    Ok(())
}

async fn shutdown_signal() {
    flexinfer_service::shutdown_signal().await;
    tracing::info!("shutdown requested; finishing reconciles in flight");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(LogStyle::named(&cli.log_format), "info");
    let client = cli.kube_client().await?;
    let settings = cli.controller_settings(&cli.identity(), image_overrides_from_env());
    let probe = Probe {
        ready: settings.ready.clone(),
        registry: settings.registry.clone(),
    };
    let health = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probe.clone());
    let metrics_router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(probe);
    let servers = async {
        if cli.health_probe_bind_address == cli.metrics_bind_address {
            serve(cli.health_probe_bind_address, health.merge(metrics_router)).await
        } else {
            tokio::try_join!(
                serve(cli.health_probe_bind_address, health),
                serve(cli.metrics_bind_address, metrics_router)
            )
            .map(|_| ())
        }
    };
    tracing::info!(namespace = ?cli.namespace, leader_elect = cli.leader_elect, "starting controllers");
    tokio::select! {
        res = controllers::run(client, settings, shutdown_signal()) => res,
        res = servers => res,
    }
}
