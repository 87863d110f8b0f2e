//! File mode: models from a YAML file, reloaded when it changes or on
//! SIGHUP; models with a `command` run as local processes under the
//! embedded operator.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::{background_service, BackgroundService};
use pingora_core::services::ServiceWithDependents;

use super::{Mode, Upstreams};
use crate::cli::Cli;
use crate::config::ModelTable;
use crate::health_checks::HealthChecker;
use crate::local::EmbeddedOperator;
use crate::metrics::Metrics;
use crate::ratelimit::LimitSettings;
use crate::registry::RouteStore;

/// Loads the model file and starts its local models' operator.
pub fn start(
    path: &Path,
    cli: &Cli,
    metrics: &Metrics,
    limits: LimitSettings,
) -> anyhow::Result<Mode> {
    let table = ModelTable::load(path)?;
    let store = Arc::new(RouteStore::with_table(path, &table, limits));
    let operator = EmbeddedOperator::start(&table)?;
    let checker = HealthChecker {
        store: store.clone(),
        interval: cli.health_check_interval,
        timeout: cli.health_check_timeout,
        metrics: metrics.clone(),
    };
    let reloader = Reloader {
        store: store.clone(),
        metrics: metrics.clone(),
        interval: cli.reload_interval,
    };
    Ok(Mode {
        source: path.display().to_string(),
        routes: store.clone(),
        lifecycle: operator.as_ref().map(EmbeddedOperator::lifecycle),
        failures: None,
        upstreams: Upstreams::ModelServers,
        services: [
            Box::new(background_service("model-file reloader", reloader))
                as Box<dyn ServiceWithDependents>,
            Box::new(background_service("endpoint health checks", checker)),
        ]
        .into_iter()
        .chain(super::load_scraper(cli, &store, metrics))
        .collect(),
        shutdown: operator.map(|op| {
            Box::new(move || {
                tracing::info!("stopping local model processes");
                op.shutdown();
            }) as Box<dyn FnOnce() + Send>
        }),
    })
}

/// Reloads the model file when its modification time changes or on SIGHUP.
struct Reloader {
    store: Arc<RouteStore>,
    metrics: Metrics,
    interval: Duration,
}

impl Reloader {
    fn modified(&self) -> Option<SystemTime> {
        let path = self.store.path()?;
        std::fs::metadata(path).and_then(|m| m.modified()).ok()
    }

    fn reload(&self, why: &str) {
        match self.store.reload() {
            Ok(n) => {
                self.metrics.reloads.with_label_values(&["success"]).inc();
                tracing::info!(models = n, trigger = why, "model file reloaded");
            }
            Err(e) => {
                self.metrics.reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %e, trigger = why, "model file reload failed; keeping the previous models");
            }
        }
    }
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).ok();
        let mut last = self.modified();
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(100)));
        loop {
            let hup_recv = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = hup_recv => self.reload("SIGHUP"),
                _ = tick.tick() => {
                    let now = self.modified();
                    if now != last {
                        last = now;
                        self.reload("file change");
                    }
                }
            }
        }
    }
}
