//! The proxy service behind the connection caps and the guarded stream.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use tokio::io::AsyncWriteExt;

use super::limits::ConnectionLimits;
use super::stream::GuardedStream;
use super::{ConnectionSettings, ConnectionState, CONNECTION};
use crate::errors::ApiError;
use crate::metrics::Metrics;

/// Longest time spent telling a refused connection why.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Wraps a server application (the proxy) with the connection guards.
pub struct GuardedApp<A> {
    inner: Arc<A>,
    limits: Arc<ConnectionLimits>,
    settings: ConnectionSettings,
    metrics: Metrics,
    /// Whether connections count in the client-connection gauge.
    counted: bool,
}

impl<A> GuardedApp<A> {
    /// Guards `inner` with `settings`.
    pub fn new(inner: A, settings: ConnectionSettings, metrics: Metrics) -> Self {
        Self {
            inner: Arc::new(inner),
            limits: Arc::new(ConnectionLimits::new(
                settings.max_connections,
                settings.max_connections_per_client,
            )),
            settings,
            metrics,
            counted: true,
        }
    }

    /// Leaves this listener's connections out of the client-connection
    /// gauge (the admin and peer listeners: not API clients).
    pub fn uncounted(mut self) -> Self {
        self.counted = false;
        self
    }
}

#[async_trait]
impl<A> ServerApp for GuardedApp<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let permit = match self.limits.admit(client) {
            Ok(permit) => permit,
            Err(refusal) => {
                self.metrics
                    .connections_refused
                    .with_label_values(&[refusal.as_str()])
                    .inc();
                let answer = ApiError::too_many_connections(refusal.as_str())
                    .closing_response("Service Unavailable");
                let _ =
                    tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, stream.write_all(&answer)).await;
                let _ = stream.shutdown().await;
                return None;
            }
        };
        let state = Arc::new(ConnectionState::new());
        let guarded = GuardedStream::new(
            stream,
            state.clone(),
            self.settings.header_timeout,
            self.settings.max_header_bytes,
            self.metrics.header_aborts.clone(),
        );
        if self.counted {
            self.metrics.client_connections.inc();
        }
        let reused = CONNECTION
            .scope(state, self.inner.process_new(Box::new(guarded), shutdown))
            .await;
        if self.counted {
            self.metrics.client_connections.dec();
        }
        drop(permit);
        // An HTTP application serves every request of a connection in one
        // call and hands nothing back.
        reused
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}
