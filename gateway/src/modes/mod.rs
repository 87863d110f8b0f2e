//! The gateway's three modes. Each is a module that returns the same
//! [`Mode`]: where routes come from, who runs models on demand, who hears
//! about failed endpoints, and what runs beside the proxy.
//!
//! - [`file`]: the model file, reloaded on change or SIGHUP; models with a
//!   `command` run as local processes under the embedded operator.
//! - [`kubernetes`]: the cluster's Model, ModelDeployment, LoRAAdapter,
//!   GPUGroup and EndpointSlice objects, watched; optionally the operator's
//!   controllers in the same process.
//! - [`global`]: the gateways of member clusters, probed.
//!
//! `server::build` is: command line → mode → gateway → services.

pub mod file;
pub mod global;
pub mod kubernetes;

use std::sync::Arc;

use pingora_core::services::ServiceWithDependents;

use crate::activation::ModelLifecycle;
use crate::cli::Cli;
use crate::metrics::Metrics;
use crate::proxy::{EndpointFailures, ProxySettings};
use crate::ratelimit::LimitSettings;
use crate::registry::{ModelRegistry, RouteStore};

/// What a mode gives the request path.
pub struct Mode {
    /// Where models come from, for the start-up log line.
    pub source: String,
    /// Resolves requested model names to routes.
    pub routes: Arc<dyn ModelRegistry>,
    /// Runs models on demand (cold start, idle stop, shared GPUs), when the
    /// mode manages models.
    pub lifecycle: Option<Arc<dyn ModelLifecycle>>,
    /// Told about endpoints whose connection failed.
    pub failures: Option<Arc<dyn EndpointFailures>>,
    /// What the upstreams are.
    pub upstreams: Upstreams,
    /// Background services that keep the routes current (and read the
    /// engines' load for cache-aware routing: [`load_scraper`]).
    pub services: Vec<Box<dyn ServiceWithDependents>>,
    /// Stops what runs beside the proxy (local model processes, watches);
    /// called once the proxy has stopped.
    pub shutdown: Option<Box<dyn FnOnce() + Send>>,
    /// Notified at SIGTERM, before the drain: controllers running in the
    /// gateway hand their leadership over at once instead of after it.
    pub step_down: Option<Arc<tokio::sync::Notify>>,
    /// The Gateway API's data plane, when it is served (`--gateway-api`).
    pub gateway_api: Option<Arc<crate::gatewayapi::DataPlane>>,
}

/// What the endpoints of the routes are.
pub enum Upstreams {
    /// Model servers.
    ModelServers,
    /// Member clusters' gateways: every available cluster is tried before
    /// a request fails, and the member key replaces the client's.
    MemberGateways {
        /// `Authorization` sent to members instead of the client's.
        authorization: Option<http::HeaderValue>,
    },
}

impl Upstreams {
    /// Adjusts the request path's settings to these upstreams.
    pub fn apply(&self, settings: &mut ProxySettings) {
        if let Upstreams::MemberGateways { authorization } = self {
            settings.max_attempts = usize::MAX;
            settings.cluster_failover = true;
            settings.upstream_authorization = authorization.clone();
        }
    }
}

/// The mode the command line asks for, started.
pub fn start(cli: &Cli, metrics: &Metrics, limits: LimitSettings) -> anyhow::Result<Mode> {
    if cli.global_mode() {
        global::start(cli, metrics, limits)
    } else if let Some(path) = &cli.config {
        file::start(path, cli, metrics, limits)
    } else {
        kubernetes::start(cli, metrics, limits)
    }
}

/// The engine-load scraper of `cache-aware` models over `store`, as a
/// background service (none with routing switched off).
pub(crate) fn load_scraper(
    cli: &Cli,
    store: &Arc<RouteStore>,
    metrics: &Metrics,
) -> Option<Box<dyn ServiceWithDependents>> {
    cli.routing_enabled.then(|| {
        let scraper = crate::load_scraper::LoadScraper {
            store: store.clone(),
            interval: cli.load_scrape_interval,
            timeout: cli.load_scrape_timeout,
            metrics: metrics.clone(),
        };
        Box::new(pingora_core::services::background::background_service(
            "engine load scraper",
            scraper,
        )) as Box<dyn ServiceWithDependents>
    })
}
