//! Kubernetes mode: models, endpoints and activation from the cluster's
//! objects (see [`crate::kube`]), optionally with the operator's
//! controllers in the same process (`--embedded-operator`).

use std::sync::Arc;

use super::{Mode, Upstreams};
use crate::cli::Cli;
use crate::config::ModelTable;
use crate::gatewayapi::{DataPlane, GatewayApi};
use crate::kube::backoff::ActivationBackoff;
use crate::kube::{EmbeddedControllers, KubeMode, KubeSettings, Scope};
use crate::metrics::Metrics;
use crate::ratelimit::LimitSettings;
use crate::registry::RouteStore;

/// Connects to the cluster and lists every watched kind before returning.
pub fn start(cli: &Cli, metrics: &Metrics, limits: LimitSettings) -> anyhow::Result<Mode> {
    let store = Arc::new(RouteStore::from_table(&ModelTable::default(), limits));
    let settings = KubeSettings {
        kubeconfig: cli.kubeconfig.clone(),
        scope: Scope::from_flags(&cli.pod_namespace, &cli.namespaces, cli.all_namespaces),
        resync: cli.kube_resync,
        touch_interval: cli.touch_interval,
        activation_wait: cli.queue_timeout.max(cli.cold_start_timeout),
        activation_backoff: cli.backoff_enabled.then(|| ActivationBackoff {
            retries: cli.backoff_max_retries,
            initial: cli.backoff_initial_wait,
            max: cli.backoff_max_wait,
            retried: metrics.activation_retries.clone(),
            waited: metrics.activation_retry_wait.clone(),
        }),
        embedded_operator: cli
            .embedded_operator
            .then(|| embedded_controllers(cli, metrics)),
        ..KubeSettings::default()
    };
    let step_down = settings
        .embedded_operator
        .is_some()
        .then(|| settings.step_down.clone());
    let kubeconfig = settings.kubeconfig.clone();
    let (startup_timeout, resync) = (settings.startup_timeout, settings.resync);
    let kube = KubeMode::start(settings, store.clone())?;
    let gateway_api = if cli.gateway_api.enabled {
        let plane = Arc::new(DataPlane::new(
            cli.gateway_api.ports.0.clone(),
            cli.gateway_api.picker_settings(),
        ));
        let settings = crate::gatewayapi::Settings {
            controller_name: cli.gateway_api.controller_name.clone(),
            slots: cli.gateway_api.ports.0.clone(),
            namespace: cli.pod_namespace.clone(),
            pod_selector: cli.gateway_api.selector().map_err(anyhow::Error::msg)?,
        };
        let started = GatewayApi::start(
            kubeconfig,
            settings,
            plane.clone(),
            store.clone(),
            startup_timeout,
            resync.min(std::time::Duration::from_secs(30)),
        );
        match started {
            Ok(controller) => Some((plane, controller)),
            Err(e) => {
                kube.shutdown();
                return Err(e);
            }
        }
    } else {
        None
    };
    let (plane, controller) = match gateway_api {
        Some((plane, controller)) => (Some(plane), Some(controller)),
        None => (None, None),
    };
    Ok(Mode {
        source: "kubernetes".to_string(),
        routes: store.clone(),
        lifecycle: Some(kube.lifecycle()),
        failures: None,
        upstreams: Upstreams::ModelServers,
        // The engines' load for cache-aware routing: the Models' pods,
        // and the Gateway API's pools.
        services: super::load_scraper(cli, &store, metrics)
            .into_iter()
            .chain(
                plane
                    .as_ref()
                    .and_then(|p| super::load_scraper(cli, &p.backends, metrics)),
            )
            .collect(),
        shutdown: Some(Box::new(move || {
            if let Some(controller) = controller {
                controller.shutdown();
            }
            kube.shutdown();
        })),
        step_down,
        gateway_api: plane,
    })
}

/// Settings of the operator controllers run inside the gateway: those of
/// flexinfer-operator with the same options (see
/// [`Cli::controller_settings`]), the backend catalog's image overrides from
/// the environment, and the gateway's metrics registry.
fn embedded_controllers(cli: &Cli, metrics: &Metrics) -> EmbeddedControllers {
    let mut settings = cli.controller_settings(
        &cli.identity(),
        flexinfer_operator::cli::image_overrides_from_env(),
    );
    settings.registry = metrics.registry().clone();
    EmbeddedControllers { settings }
}
