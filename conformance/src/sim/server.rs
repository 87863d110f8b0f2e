//! Wiring: the router, the serve loop with graceful shutdown, and an
//! in-process handle for tests.

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{middleware, Router};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::config::SimConfig;
use super::handlers::{
    completions, embeddings, images, lora, messages, ops, prefix_match, recorder_api, responses,
};
use super::intake;
use super::state::SimState;

/// The simulator's routes over an existing state.
pub fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/v1/models", get(ops::models))
        .route("/v1/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::text))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items_list),
        )
        .route("/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/v1/responses/compact", post(responses::compact))
        .route("/v1/messages", post(messages::create))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/images/generations", post(images::generate))
        .route("/v1/images/edits", post(images::edit))
        .route("/v1/load_lora_adapter", post(lora::load))
        .route("/v1/unload_lora_adapter", post(lora::unload))
        .route("/health", get(ops::health))
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .route(
            "/sim/requests",
            get(recorder_api::list).delete(recorder_api::clear),
        )
        .route("/sim/prefix-match", post(prefix_match::prefix_match))
        .fallback(recorder_api::echo)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            intake::intake,
        ))
        // The intake middleware enforces the configured limit itself.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// This machine's name: `$HOSTNAME` (the pod name in Kubernetes), else the kernel's.
pub fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Builds the state for a server on `listener`, naming it `<hostname>:<port>`
/// unless the configuration gives a pod name.
pub fn state_for(config: SimConfig, listener: &TcpListener) -> io::Result<Arc<SimState>> {
    let port = listener.local_addr()?.port();
    let pod_name = config
        .pod_name
        .clone()
        .unwrap_or_else(|| format!("{}:{port}", hostname()));
    SimState::new(config, &pod_name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Serves the simulator on `listener` until `shutdown` completes, then lets
/// in-flight requests finish for at most the configured shutdown grace.
///
/// The startup delay starts counting when this is called.
pub async fn serve<F>(config: SimConfig, listener: TcpListener, shutdown: F) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let state = state_for(config, &listener)?;
    serve_state(state, listener, shutdown).await
}

/// [`serve`] over a state built beforehand (see [`state_for`]).
pub async fn serve_state<F>(
    state: Arc<SimState>,
    listener: TcpListener,
    shutdown: F,
) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let grace = state.config.shutdown_grace;
    let (requested_tx, requested_rx) = oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutdown requested; finishing in-flight requests");
        let _ = requested_tx.send(());
    };
    // Small SSE frames must leave at once, not wait for Nagle's algorithm.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, router(state))
        .with_graceful_shutdown(signal)
        .into_future();
    let grace_expired = async move {
        if requested_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = server => result,
        () = grace_expired => {
            tracing::warn!(?grace, "shutdown grace expired; dropping in-flight requests");
            Ok(())
        }
    }
}

/// A simulator running inside the current Tokio runtime, for tests.
///
/// Dropping it stops the server.
#[derive(Debug)]
pub struct SimServer {
    addr: SocketAddr,
    state: Arc<SimState>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl SimServer {
    /// Starts a simulator on an ephemeral loopback port.
    pub async fn start(config: SimConfig) -> io::Result<Self> {
        Self::bind(config, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts a simulator on `addr`.
    pub async fn bind(config: SimConfig, addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = state_for(config, &listener)?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_state(Arc::clone(&state), listener, async move {
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            state,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The live state: recorder, model registry, metrics.
    pub fn state(&self) -> &Arc<SimState> {
        &self.state
    }

    /// Stops accepting, waits for in-flight requests (up to the shutdown grace).
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
