//! Active health checks of fixed endpoints. A model with fixed `endpoints`
//! and a `health` path has each endpoint probed with `GET <health>` every
//! interval; one that does not answer 2xx within the timeout is out of
//! rotation until a check passes. (Passive ejection after failed requests
//! works for every model without this; checks find a dead endpoint before
//! a request does.)

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use pingora_core::connectors::http::Connector;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use crate::http_get::get;
use crate::metrics::Metrics;
use crate::registry::{ModelRoute, RouteStore};

/// Probes the endpoints of models with a health path.
pub struct HealthChecker {
    /// The routes whose endpoints are checked.
    pub store: Arc<RouteStore>,
    /// Time between two rounds.
    pub interval: Duration,
    /// Longest a check may take.
    pub timeout: Duration,
    /// Where verdict changes are counted.
    pub metrics: Metrics,
}

impl HealthChecker {
    /// Checks every endpoint of every route with a health path once.
    pub async fn round(&self, connector: &Connector) {
        let table = self.store.snapshot();
        let checks = table
            .routes()
            .iter()
            .filter_map(|route| route.health_check.as_deref().map(|path| (route, path)))
            .flat_map(|(route, path)| {
                (0..route.endpoints.len()).map(move |idx| self.check(connector, route, path, idx))
            });
        join_all(checks).await;
    }

    async fn check(&self, connector: &Connector, route: &Arc<ModelRoute>, path: &str, idx: usize) {
        let upstream = route.endpoints.upstream(idx);
        let host = upstream.addr.to_string();
        let answer = tokio::time::timeout(
            self.timeout,
            get(connector, upstream.addr, &host, path, None, self.timeout, 0),
        )
        .await;
        let failure = match answer {
            Ok(Ok((status, _))) if (200..300).contains(&status) => None,
            Ok(Ok((status, _))) => Some(format!("{path} answered {status}")),
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {:?}", self.timeout)),
        };
        let health = route.endpoints.health(idx);
        if !health.set_failing_checks(failure.is_some()) {
            return;
        }
        let labels = [&*route.name, upstream.name.as_str()];
        match failure {
            Some(reason) => {
                self.metrics.ejections.with_label_values(&labels).inc();
                self.metrics
                    .endpoint_ejected
                    .with_label_values(&labels)
                    .set(1);
                tracing::warn!(model = %route.name, endpoint = %upstream.name, %reason,
                    "endpoint out of rotation: its health check failed");
            }
            None => {
                let out = i64::from(health.is_out());
                self.metrics
                    .endpoint_ejected
                    .with_label_values(&labels)
                    .set(out);
                tracing::info!(model = %route.name, endpoint = %upstream.name,
                    "endpoint health check passes again");
            }
        }
    }
}

#[async_trait]
impl BackgroundService for HealthChecker {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => self.round(&connector).await,
            }
        }
    }
}
