//! The Gateway API and its Inference Extension: FlexInfer as the
//! implementation of a `GatewayClass` (`--gateway-api`).
//!
//! - [`types`]: the resources as far as they are read and written;
//! - [`attach`], [`table`], [`slots`], [`compile`]: from the watched
//!   objects to the routing table, the backends (InferencePools, Services)
//!   with their endpoints, each Gateway's Service, and every status;
//! - [`controller`]: the watches, the loop, the writes.
//!
//! Traffic for a Gateway arrives on a data-plane port of its own (a slot,
//! mapped from the Gateway's listener ports by its Service), matches the
//! routes attached to that Gateway, and goes to a backend: an
//! InferencePool's pods picked by FlexInfer's own strategies (cache-aware
//! by default), a Service's endpoints, or a FlexInfer `Model`.

pub mod attach;
pub mod compile;
pub mod conditions;
pub mod controller;
pub mod slots;
pub mod table;
pub mod types;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{oneshot, Notify};

use crate::config::ModelTable;
use crate::ratelimit::LimitSettings;
use crate::registry::{ModelRegistry, RouteStore};
use crate::runtime_thread::RuntimeThread;

pub use compile::Settings;
pub use table::{RoutingTable, Target};

/// The GatewayClass `controllerName` FlexInfer answers to by default.
pub const CONTROLLER_NAME: &str = "flexinfer.ai/gateway-controller";

/// What the request path reads: the routing table and the backends.
pub struct DataPlane {
    /// The Gateways' routes, by data-plane port.
    pub table: ArcSwap<RoutingTable>,
    /// InferencePools and Services as routes (endpoints, strategy).
    pub backends: Arc<RouteStore>,
    /// The data-plane ports, to listen on.
    pub ports: Vec<u16>,
    /// Connections to the pools' endpoint pickers.
    pub pickers: crate::epp::Pickers,
}

impl DataPlane {
    /// An empty data plane on `ports`, asking pickers as `pickers` says.
    pub fn new(ports: Vec<u16>, pickers: crate::epp::PickerSettings) -> Self {
        DataPlane {
            table: ArcSwap::from_pointee(RoutingTable::default()),
            backends: Arc::new(RouteStore::from_table(
                &ModelTable::default(),
                LimitSettings::default(),
            )),
            ports,
            pickers: crate::epp::Pickers::new(pickers),
        }
    }
}

/// The running controller.
pub struct GatewayApi {
    thread: RuntimeThread,
}

impl GatewayApi {
    /// Connects, checks that the Gateway API CRDs are installed, lists
    /// every watched kind, compiles once, and keeps `plane` current until
    /// [`GatewayApi::shutdown`]. `models` names the `Model`s a route may use.
    pub fn start(
        kubeconfig: Option<std::path::PathBuf>,
        settings: Settings,
        plane: Arc<DataPlane>,
        models: Arc<dyn ModelRegistry>,
        startup_timeout: Duration,
        resync: Duration,
    ) -> anyhow::Result<Self> {
        let (thread, ()) = RuntimeThread::start("flexinfer-gateway-api", 1, move |ready, stop| {
            serve(
                kubeconfig,
                settings,
                plane,
                models,
                (startup_timeout, resync),
                ready,
                stop,
            )
        })?;
        Ok(GatewayApi { thread })
    }

    /// Stops the controller.
    pub fn shutdown(self) {
        self.thread.stop();
    }
}

async fn serve(
    kubeconfig: Option<std::path::PathBuf>,
    settings: Settings,
    plane: Arc<DataPlane>,
    models: Arc<dyn ModelRegistry>,
    (startup_timeout, resync): (Duration, Duration),
    ready: crate::runtime_thread::Ready<()>,
    stop: oneshot::Receiver<()>,
) {
    let changed = Arc::new(Notify::new());
    let started = tokio::time::timeout(startup_timeout, async {
        let client = crate::kube::startup::client(kubeconfig.as_deref()).await?;
        let served = |gv: &'static str, plural: &'static str| {
            let client = client.clone();
            async move { crate::kube::startup::served(&client, gv, plural).await }
        };
        for plural in ["gatewayclasses", "gateways", "httproutes"] {
            if !served("gateway.networking.k8s.io/v1", plural).await? {
                anyhow::bail!(
                    "--gateway-api is on, but the Gateway API CRDs ({plural}.gateway.networking.k8s.io, v1) \
                     are not installed: install the Gateway API's standard channel first"
                );
            }
        }
        let pools = served("inference.networking.k8s.io/v1", "inferencepools").await?;
        if !pools {
            tracing::warn!(
                "the InferencePool CRD (inferencepools.inference.networking.k8s.io, v1) is not installed: \
                 routes can use Services and Models only"
            );
        }
        let stores = controller::Stores::start(&client, pools, &changed);
        stores.ready().await?;
        anyhow::Ok((client, stores))
    })
    .await;
    let (client, stores) = match started {
        Ok(Ok(parts)) => parts,
        Ok(Err(e)) => {
            let _ = ready.send(Err(e));
            return;
        }
        Err(_) => {
            let _ = ready.send(Err(anyhow::anyhow!(
                "the Gateway API watches did not list within {startup_timeout:?}"
            )));
            return;
        }
    };
    tracing::info!(
        controller = %settings.controller_name,
        ports = ?settings.slots,
        "serving the Gateway API"
    );
    if ready.send(Ok(())).is_err() {
        return;
    }
    tokio::select! {
        _ = stop => {}
        _ = controller::run(client, stores, settings, plane, models, changed, resync) => {}
    }
}
