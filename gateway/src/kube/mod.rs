//! Kubernetes mode: models, endpoints and activation from the cluster.
//!
//! The request path is the same as in file mode; only its two sources
//! change:
//!
//! - routes ([`crate::registry::ModelRegistry`]) are built from reflectors
//!   on `Model` (v1alpha2), `ModelDeployment` (v1alpha1), `LoRAAdapter`,
//!   `GPUGroup`, the models' `EndpointSlice`s and `Service`s, and `Node`s
//!   ([`reflect`], [`models`], [`endpoints`], [`labels`]), rebuilt on every
//!   watch event ([`sync`]);
//! - the lifecycle ([`crate::activation::ModelLifecycle`]) reports readiness
//!   from the same watches and hands activation, demand and activity to
//!   background tasks that patch the cluster ([`lifecycle`], [`actions`],
//!   [`patch`]).
//!
//! Everything that talks to the API server runs on a runtime thread of its
//! own; the request path only reads atomically swapped snapshots and sends
//! on channels.

pub mod actions;
pub mod backoff;
pub mod dns;
pub mod endpoints;
pub mod labels;
pub mod lifecycle;
pub mod models;
pub mod patch;
pub mod rbac;
pub mod reflect;
pub mod scope;
pub mod startup;
pub mod sync;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};

pub use lifecycle::KubeLifecycle;
pub use rbac::{RbacRule, RBAC_RULES};
pub use scope::Scope;

use crate::activation::ModelLifecycle;
use crate::registry::RouteStore;
use crate::runtime_thread::RuntimeThread;

/// Settings of Kubernetes mode.
#[derive(Debug, Clone)]
pub struct KubeSettings {
    /// Kubeconfig file; `None`: in-cluster config, then `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// Namespaces watched.
    pub scope: Scope,
    /// Full rebuild interval, a safety net behind the watches.
    pub resync: Duration,
    /// Least time between two activity patches of one model.
    pub touch_interval: Duration,
    /// Longest an activation holds its single-flight slot while waiting for
    /// the model to turn ready.
    pub activation_wait: Duration,
    /// Longest wait for the start-up checks and the first list of every kind.
    pub startup_timeout: Duration,
    /// How a failed scale-up is tried again, when it is (`--backoff-enabled`).
    pub activation_backoff: Option<backoff::ActivationBackoff>,
    /// The operator's controllers, when they run inside the gateway.
    pub embedded_operator: Option<EmbeddedControllers>,
    /// Notified at SIGTERM: the embedded controllers stop (releasing their
    /// Lease) before the proxy's drain, not after it.
    pub step_down: Arc<Notify>,
}

/// The operator's controllers run in the gateway (`--embedded-operator`).
#[derive(Clone, Debug)]
pub struct EmbeddedControllers {
    /// Their settings, from [`crate::cli::Cli::controller_settings`] with the
    /// gateway's metrics registry (the gateway's `/metrics`).
    pub settings: flexinfer_operator::controllers::ControllerSettings,
}

impl Default for KubeSettings {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            scope: Scope::Namespaces(vec!["default".to_string()]),
            resync: Duration::from_secs(300),
            touch_interval: Duration::from_secs(60),
            activation_wait: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(60),
            activation_backoff: None,
            embedded_operator: None,
            step_down: Arc::new(Notify::new()),
        }
    }
}

/// The running watches and background tasks of Kubernetes mode.
pub struct KubeMode {
    lifecycle: Arc<KubeLifecycle>,
    thread: RuntimeThread,
}

impl KubeMode {
    /// Connects, checks CRDs and RBAC, lists every watched kind into
    /// `registry`, and keeps it current until [`KubeMode::shutdown`].
    pub fn start(settings: KubeSettings, registry: Arc<RouteStore>) -> anyhow::Result<Self> {
        let (thread, lifecycle) = RuntimeThread::start("flexinfer-kube", 2, move |ready, stop| {
            serve(settings, registry, ready, stop)
        })?;
        Ok(Self { lifecycle, thread })
    }

    /// The lifecycle the activation queues use.
    pub fn lifecycle(&self) -> Arc<dyn ModelLifecycle> {
        self.lifecycle.clone()
    }

    /// Stops the watches and background tasks.
    pub fn shutdown(self) {
        self.thread.stop();
    }
}

type Ready = crate::runtime_thread::Ready<Arc<KubeLifecycle>>;

async fn serve(
    settings: KubeSettings,
    registry: Arc<RouteStore>,
    ready: Ready,
    stop: oneshot::Receiver<()>,
) {
    let started = tokio::time::timeout(settings.startup_timeout, async {
        let client = startup::client(settings.kubeconfig.as_deref()).await?;
        let kinds = startup::check(&client, &settings.scope).await?;
        let changed = Arc::new(Notify::new());
        let stores = reflect::Stores::start(&client, &settings.scope, kinds, &changed);
        stores
            .ready()
            .await
            .map_err(|_| anyhow::anyhow!("a Kubernetes watch stopped during start-up"))?;
        anyhow::Ok((client, stores, changed))
    })
    .await;
    let (client, stores, changed) = match started {
        Ok(Ok(parts)) => parts,
        Ok(Err(e)) => {
            let _ = ready.send(Err(e));
            return;
        }
        Err(_) => {
            let _ = ready.send(Err(anyhow::anyhow!(
                "Kubernetes start-up did not finish within {:?} (API server unreachable, or a \
                 watched kind never listed)",
                settings.startup_timeout
            )));
            return;
        }
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let lifecycle = Arc::new(KubeLifecycle::new(tx, settings.touch_interval));
    let sync = sync::Sync {
        stores,
        scope: settings.scope.clone(),
        registry: registry.clone(),
        lifecycle: lifecycle.clone(),
        dns: dns::DnsCache::new(changed.clone()),
    };
    sync.apply();
    let count = registry.snapshot().routes().len();
    tracing::info!(models = count, scope = ?settings.scope, "Kubernetes routes loaded");
    if ready.send(Ok(lifecycle.clone())).is_err() {
        return;
    }
    let (operator_stop, operator_stopped) = tokio::sync::watch::channel(false);
    let operator_stop = Arc::new(operator_stop);
    let stepping_down = {
        let (step_down, operator_stop) = (settings.step_down.clone(), operator_stop.clone());
        tokio::spawn(async move {
            step_down.notified().await;
            tracing::info!("SIGTERM: the embedded controllers hand their leadership over");
            operator_stop.send_replace(true);
        })
    };
    let operator = settings.embedded_operator.clone().map(|embedded| {
        let client = client.clone();
        tokio::spawn(async move {
            tracing::info!(?embedded, "starting the embedded operator");
            let stopped = async move {
                let mut stopped = operator_stopped;
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) =
                flexinfer_operator::controllers::run(client, embedded.settings, stopped).await
            {
                tracing::error!(error = %e, "the embedded operator stopped");
            }
        })
    });
    let keep_active = tokio::spawn(lifecycle.clone().keep_active());
    let actions = tokio::spawn(actions::run(
        client,
        lifecycle.clone(),
        rx,
        settings.activation_wait,
        settings.activation_backoff.clone(),
    ));
    tokio::select! {
        _ = stop => {}
        _ = sync::run(sync, changed, settings.resync) => {}
    }
    actions.abort();
    keep_active.abort();
    stepping_down.abort();
    if let Some(operator) = operator {
        operator_stop.send_replace(true);
        // Reconciles in flight finish; the Lease is released.
        let _ = tokio::time::timeout(Duration::from_secs(10), operator).await;
    }
}
