//! Kubernetes controllers (kube-runtime) that reconcile FlexInfer custom
//! resources into workloads.
//!
//! One module per controller: [`model`] (v1alpha2 Model), [`gpu_group`]
//! (v1alpha1 GPUGroup), [`model_cache`] (v1alpha1 ModelCache),
//! [`model_deployment`] (legacy v1alpha1 ModelDeployment, converted to the
//! Model path) and [`lora`] (v1alpha2 LoRAAdapter); with federation on,
//! [`cluster`] and [`federated_model`] (see [`federation`]). Owned objects are
//! written with server-side apply, one field manager per controller, and
//! only when they differ from what is there ([`apply`]).
//!
//! [`run`] is the library entry point: the `flexinfer-operator` binary
//! calls it, and the gateway can embed the same controllers.

pub mod apply;
pub mod clock;
pub mod cluster;
pub mod conditions;
pub mod drive;
pub mod events;
pub mod federated_model;
pub mod federation;
pub mod gpu_group;
pub mod leader;
pub mod lora;
pub mod member_clients;
pub mod metrics;
pub mod model;
pub mod model_cache;
pub mod model_catalog;
pub mod model_deployment;
pub mod node_cache;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::Client;

pub use clock::{Clock, ManualClock, SystemClock};
pub use leader::LeaderElection;
pub use metrics::Metrics;

use crate::desired::BuildSettings;

/// The watch of the objects a controller owns (Deployments, Services,
/// Jobs): only those the operator labelled `app.kubernetes.io/managed-by:
/// flexinfer`, so that a controller watching all namespaces does not hold
/// every Deployment, Service and Job of the cluster in memory.
pub fn owned_objects() -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().labels(&format!(
        "{}={}",
        flexinfer_crds::labels::APP_MANAGED_BY,
        flexinfer_crds::labels::MANAGED_BY_FLEXINFER
    ))
}

/// Requeue interval of a settled object (spec: 30 s).
pub const REQUEUE: Duration = Duration::from_secs(30);

/// Errors of a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be (de)serialized.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// Adding or removing the finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// An object is not what the controller expects.
    #[error("invalid object: {0}")]
    Invalid(String),
}

impl Error {
    /// Short label for the failures metric.
    pub fn reason(&self) -> String {
        match self {
            Error::Kube(kube::Error::Api(status)) => {
                format!("api_{}", status.code)
            }
            Error::Kube(_) => "client".to_owned(),
            Error::Json(_) => "serialization".to_owned(),
            Error::Finalizer(_) => "finalizer".to_owned(),
            Error::Invalid(_) => "invalid".to_owned(),
        }
    }
}

/// What the embedding process configures. `Default` gives the default
/// builder settings, no leader election, all namespaces and the system clock.
#[derive(Clone)]
pub struct ControllerSettings {
    /// Builder knobs (scheduler name, helper images).
    pub build: BuildSettings,
    /// Namespace to watch; `None` watches all namespaces.
    pub namespace: Option<String>,
    /// Leader election through a `coordination.k8s.io` Lease; `None` runs
    /// the controllers at once (a single replica, or embedded).
    pub leader_election: Option<LeaderElection>,
    /// Fail at start when the FlexInfer CRDs are not installed.
    pub check_crds: bool,
    /// Time source of every decision (tests inject a [`ManualClock`]).
    pub clock: Arc<dyn Clock>,
    /// Registry the controller metrics are registered in.
    pub registry: prometheus::Registry,
    /// Scrape backend `/metrics` of ready vLLM pods for KV-cache pressure.
    pub kv_cache_scrape: bool,
    /// Set to true once the controllers run (for `/readyz`).
    pub ready: Arc<AtomicBool>,
    /// Name of the event reporter (`reportingController`).
    pub reporter: String,
    /// Run the Cluster and FederatedModel controllers (`None`: off).
    pub federation: Option<federation::FederationSettings>,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            build: BuildSettings::default(),
            namespace: None,
            leader_election: None,
            check_crds: true,
            clock: Arc::new(SystemClock),
            registry: prometheus::Registry::new(),
            kv_cache_scrape: true,
            ready: Arc::new(AtomicBool::new(false)),
            reporter: "flexinfer-operator".to_owned(),
            federation: None,
        }
    }
}

impl std::fmt::Debug for ControllerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerSettings")
            .field("build", &self.build)
            .field("namespace", &self.namespace)
            .field("leader_election", &self.leader_election)
            .field("check_crds", &self.check_crds)
            .field("kv_cache_scrape", &self.kv_cache_scrape)
            .field("reporter", &self.reporter)
            .field("federation", &self.federation)
            .finish_non_exhaustive()
    }
}

/// Shared state of every reconcile.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Settings given to [`run`].
    pub settings: ControllerSettings,
    /// Metrics.
    pub metrics: Metrics,
    /// Event publisher.
    pub events: events::EventPublisher,
    /// HTTP client for backend pods (metrics, LoRA endpoints).
    pub http: reqwest::Client,
    /// The cluster's Nodes for GPU placement, from one shared watch.
    pub nodes: Arc<node_cache::NodeCache>,
}

impl Context {
    /// A context for `client` with `settings`.
    pub fn new(client: Client, settings: ControllerSettings) -> anyhow::Result<Arc<Context>> {
        let metrics = Metrics::register(&settings.registry)?;
        let events = events::EventPublisher::new(client.clone(), &settings.reporter);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        Ok(Arc::new(Context {
            nodes: node_cache::NodeCache::new(client.clone()),
            client,
            settings,
            metrics,
            events,
            http,
        }))
    }

    /// Current time from the injected clock.
    pub fn now(&self) -> std::time::SystemTime {
        self.settings.clock.now()
    }

    /// An API for a namespaced kind in `ns`.
    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    /// An API for a namespaced kind over the watched scope.
    pub fn watched_api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.settings.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }
}

/// CRDs the controllers need.
pub const REQUIRED_CRDS: [&str; 5] = [
    "models.ai.flexinfer",
    "gpugroups.ai.flexinfer",
    "modelcaches.ai.flexinfer",
    "modeldeployments.ai.flexinfer",
    "loraadapters.ai.flexinfer",
];

/// Fails with a clear message when a FlexInfer CRD is missing.
pub async fn check_crds(client: &Client) -> anyhow::Result<()> {
    check_crds_named(client, &REQUIRED_CRDS).await
}

/// Fails with a clear message when one of the CRDs `names` is missing.
pub async fn check_crds_named(client: &Client, names: &[&str]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut missing = Vec::new();
    for &name in names {
        match api.get_opt(name).await {
            Ok(Some(_)) => {}
            Ok(None) => missing.push(name),
            Err(e) => anyhow::bail!(
                "cannot read CustomResourceDefinition {name}: {e} (does the operator's service account may get customresourcedefinitions?)"
            ),
        }
    }
    if !missing.is_empty() {
        anyhow::bail!(
            "FlexInfer CRDs are not installed: {}. Install them first (`flexinfer-crdgen | kubectl apply -f -` or the Helm chart's crds/)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Runs every FlexInfer controller until `shutdown` completes (graceful:
/// reconciles in flight finish).
///
/// With `settings.leader_election`, the controllers run only while this
/// process holds the Lease: they start once it is acquired, stop at once
/// when it is lost (another replica took it, or renewal failed for a
/// whole lease duration), and start again when it is regained, in the same
/// process; on shutdown the Lease is released so that another replica
/// takes over without waiting for it to expire. `settings.check_crds`
/// fails early, with a message saying which CRDs are missing.
pub async fn run(
    client: Client,
    settings: ControllerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shutdown: Shutdown = shutdown.boxed().shared();
    if settings.check_crds {
        check_crds(&client).await?;
        if settings.federation.is_some() {
            check_crds_named(&client, &federation::REQUIRED_CRDS).await?;
        }
    }
    let ctx = Context::new(client.clone(), settings)?;
    let Some(le) = ctx.settings.leader_election.clone() else {
        ctx.settings.ready.store(true, Ordering::SeqCst);
        run_controllers(ctx.clone(), shutdown).await;
        ctx.settings.ready.store(false, Ordering::SeqCst);
        return Ok(());
    };
    loop {
        let held = tokio::select! {
            held = le.clone().acquire(client.clone(), ctx.settings.clock.clone()) => held?,
            () = shutdown.clone() => return Ok(()),
        };
        ctx.settings.ready.store(true, Ordering::SeqCst);
        let term = lead(ctx.clone(), held, shutdown.clone()).await;
        ctx.settings.ready.store(false, Ordering::SeqCst);
        match term {
            Term::ShutDown(released) => return released,
            Term::Lost(why) => tracing::warn!(
                error = %why,
                lease = %le.lease_name,
                "controllers stopped: leadership lost; waiting to lead again"
            ),
        }
    }
}

/// The shutdown trigger, shared by every controller.
type Shutdown = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

/// How one term as leader ended.
enum Term {
    /// Shutdown: the controllers finished; the Lease release's outcome.
    ShutDown(anyhow::Result<()>),
    /// The Lease was lost; the controllers were stopped.
    Lost(anyhow::Error),
}

/// Runs the controllers while `held` is renewed. Losing the Lease drops
/// them at once (a reconcile in flight is cancelled, its watches closed):
/// another replica now leads, and two writers would fight.
async fn lead(ctx: Arc<Context>, held: leader::HeldLease, shutdown: Shutdown) -> Term {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let renew = held.keep_renewing(stop_rx);
    let controllers = run_controllers(ctx, shutdown);
    tokio::pin!(renew);
    tokio::pin!(controllers);
    tokio::select! {
        () = &mut controllers => {
            // Release the lease so another replica takes over at once.
            let _ = stop_tx.send(());
            Term::ShutDown(renew.await)
        }
        lost = &mut renew => Term::Lost(lost.unwrap_err_or("leadership lost")),
    }
}

/// Every controller of `ctx`, until `shutdown` completes.
async fn run_controllers(ctx: Arc<Context>, shutdown: Shutdown) {
    let controllers = futures::future::join5(
        model::run(ctx.clone(), shutdown.clone()),
        model_deployment::run(ctx.clone(), shutdown.clone()),
        gpu_group::run(ctx.clone(), shutdown.clone()),
        model_cache::run(ctx.clone(), shutdown.clone()),
        lora::run(ctx.clone(), shutdown.clone()),
    );
    let federation = {
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        async move {
            if let Some(settings) = ctx.settings.federation.clone() {
                federation::run(ctx, settings, shutdown).await;
            }
        }
    };
    futures::future::join3(
        controllers,
        federation,
        model_catalog::run(ctx.clone(), shutdown),
    )
    .await;
}

trait LostExt {
    fn unwrap_err_or(self, msg: &str) -> anyhow::Error;
}

impl LostExt for anyhow::Result<()> {
    fn unwrap_err_or(self, msg: &str) -> anyhow::Error {
        match self {
            Err(e) => e,
            Ok(()) => anyhow::anyhow!("{msg}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The owned-object watches select exactly the label every object the
    /// operator builds for a model carries (`ModelPlan::meta` and the
    /// Deployment's pod template use these labels), so no owned object
    /// falls outside them.
    #[test]
    fn owned_object_watches_select_the_operators_label() {
        let selector = owned_objects().label_selector.expect("a label selector");
        let (key, value) = selector.split_once('=').expect("key=value");
        let labels = flexinfer_crds::labels::selector_labels("m", "vllm");
        assert_eq!(labels.get(key).map(String::as_str), Some(value));
    }
}
