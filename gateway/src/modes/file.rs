//! File mode: models from a YAML file, reloaded when it changes or on
//! SIGHUP; models with a `command` run as local processes under the
//! embedded operator.

use std::path::Path;
use std::sync::Arc;

use pingora_core::services::background::background_service;
use pingora_core::services::ServiceWithDependents;

use super::{Mode, Upstreams};
use crate::cli::Cli;
use crate::config::ModelTable;
use crate::file_reloader::FileReloader;
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
    let reloader = FileReloader {
        what: "model file",
        path: path.to_path_buf(),
        interval: cli.reload_interval,
        reload: {
            let store = store.clone();
            Box::new(move || Ok(store.reload()?))
        },
        reloads: metrics.reloads.clone(),
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
        step_down: None,
        gateway_api: None,
    })
}
