//! Global mode: one gateway in front of the gateways of several clusters
//! (`flexinfer-gateway --global globalproxy.yaml`).
//!
//! The request path is the ordinary one ([`crate::proxy::Gateway`]): the
//! member gateways are the endpoints of each model's route, selected by the
//! same [`EndpointSet`](crate::routing::EndpointSet) code, with the retry and
//! failover of [`ProxySettings::cluster_failover`](crate::proxy::ProxySettings).
//! This module only decides what those routes are:
//!
//! - [`config`]: the `GlobalProxy` object (or its spec) read from YAML, its
//!   clusters in locality order; [`watch`]: the same from a Kubernetes
//!   object, watched;
//! - [`probe`]: `GET /v1/models` on a member gateway, telling health and
//!   which models are warm there;
//! - [`policy`]: the pure function from what the probes know to the model
//!   table (warm first, then nearest; unhealthy clusters left out);
//! - [`monitor`]: the background loop that probes and swaps routes in;
//! - [`registry`]: the [`ModelRegistry`](crate::registry::ModelRegistry) the
//!   proxy reads.
//!
//! See `docs/global-gateway.md` for the policy and the failover figures.

pub mod config;
pub mod monitor;
pub mod policy;
pub mod probe;
pub mod registry;
pub mod status;
pub mod watch;

use std::path::Path;
use std::sync::Arc;

pub use config::{GlobalConfig, GlobalConfigError, MemberCluster};
pub use monitor::{ClusterMetrics, ClusterMonitor, ProbeSettings, UNHEALTHY_AFTER};
pub use policy::{listed_phases, model_table, ClusterView, Warmth, UNAVAILABLE_PHASE};
pub use registry::GlobalRegistry;
pub use watch::{GlobalObject, GLOBAL_RBAC_RULES};

use crate::metrics::Metrics;
use crate::ratelimit::LimitSettings;

/// A loaded global mode: the registry for the proxy and the monitor that
/// keeps it current.
pub struct GlobalMode {
    registry: Arc<GlobalRegistry>,
    monitor: ClusterMonitor,
}

impl GlobalMode {
    /// Loads the GlobalProxy file; no probe runs until the monitor is
    /// started.
    pub fn load(
        path: &Path,
        settings: ProbeSettings,
        limits: LimitSettings,
        metrics: &Metrics,
    ) -> anyhow::Result<Self> {
        let config = GlobalConfig::load(path)?;
        let registry = Arc::new(GlobalRegistry::new(limits));
        let monitor = ClusterMonitor {
            path: Some(path.to_path_buf()),
            object: None,
            config,
            registry: registry.clone(),
            settings,
            metrics: ClusterMetrics(metrics.clone()),
        };
        Ok(GlobalMode { registry, monitor })
    }

    /// The GlobalProxy from a Kubernetes object, watched: no cluster (every
    /// model 503) until the object is read.
    pub fn from_object(
        object: GlobalObject,
        settings: ProbeSettings,
        limits: LimitSettings,
        metrics: &Metrics,
    ) -> Self {
        let registry = Arc::new(GlobalRegistry::new(limits));
        let monitor = ClusterMonitor {
            path: None,
            object: Some(object),
            config: GlobalConfig::default(),
            registry: registry.clone(),
            settings,
            metrics: ClusterMetrics(metrics.clone()),
        };
        GlobalMode { registry, monitor }
    }

    /// The registry the proxy routes on.
    pub fn registry(&self) -> Arc<GlobalRegistry> {
        self.registry.clone()
    }

    /// Member clusters configured at start.
    pub fn clusters(&self) -> &[MemberCluster] {
        &self.monitor.config.clusters
    }

    /// The probe loop, to run as a background service.
    pub fn into_monitor(self) -> ClusterMonitor {
        self.monitor
    }
}
