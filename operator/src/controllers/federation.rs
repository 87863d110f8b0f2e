//! Federation controllers: [`super::cluster`] probes the member clusters
//! registered as `Cluster` objects, [`super::federated_model`] places
//! `FederatedModel`s on them. Both run in the hub cluster and only when
//! [`super::ControllerSettings::federation`] is set (the operator's
//! `--federation` flag): they read kubeconfig Secrets and open connections
//! to other clusters, which a single-cluster install should not do.

use std::sync::Arc;
use std::time::Duration;

use super::cluster::ProbeBook;
use super::member_clients::MemberClients;
use super::Context;
use crate::federation::kubeconfig::MemberTimeouts;

/// Consecutive failed probes after which a Ready cluster turns NotReady.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 1;
/// Longest one health probe (version, Nodes, Pods, Models) may take.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval at which a FederatedModel re-reads its member Models' status
/// when nothing in the hub changes.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(30);

/// Knobs of the federation controllers.
#[derive(Debug, Clone, PartialEq)]
pub struct FederationSettings {
    /// Consecutive failed probes before a cluster is NotReady (at least 1).
    pub failure_threshold: u32,
    /// Timeout of one probe.
    pub probe_timeout: Duration,
    /// Timeouts of member clients.
    pub member_timeouts: MemberTimeouts,
    /// Status refresh interval of FederatedModels.
    pub resync: Duration,
}

impl Default for FederationSettings {
    fn default() -> Self {
        FederationSettings {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            member_timeouts: MemberTimeouts::default(),
            resync: DEFAULT_RESYNC,
        }
    }
}

/// Shared state of the federation controllers.
pub struct FederationContext {
    /// The hub context (client, metrics, events, clock).
    pub ctx: Arc<Context>,
    /// Settings.
    pub settings: FederationSettings,
    /// Member-cluster clients.
    pub clients: MemberClients,
    /// Probe bookkeeping of the Cluster controller.
    pub probes: ProbeBook,
}

impl FederationContext {
    /// A federation context on top of `ctx`.
    pub fn new(ctx: Arc<Context>, settings: FederationSettings) -> Arc<FederationContext> {
        Arc::new(FederationContext {
            clients: MemberClients::new(settings.member_timeouts),
            probes: ProbeBook::default(),
            ctx,
            settings,
        })
    }
}

/// CRDs the federation controllers need.
pub const REQUIRED_CRDS: [&str; 2] = ["clusters.ai.flexinfer", "federatedmodels.ai.flexinfer"];

/// Runs the Cluster and FederatedModel controllers until `shutdown`
/// completes.
pub async fn run(
    ctx: Arc<Context>,
    settings: FederationSettings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let fctx = FederationContext::new(ctx, settings);
    futures::future::join(
        super::cluster::run(fctx.clone(), shutdown.clone()),
        super::federated_model::run(fctx, shutdown),
    )
    .await;
}
