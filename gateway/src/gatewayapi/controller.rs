//! The controller's loop: watches every kind the Gateway API routes depend
//! on, compiles them ([`super::compile`]) after each change (and on a
//! timer), swaps the data plane's table and backends, and writes what
//! changed: statuses (merge patches of the status subresource, other
//! controllers' entries kept) and the Gateways' Services (server-side
//! apply).

use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::Notify;

use super::compile::{compile, Settings, World, Writes};
use super::types::{Gateway, GatewayClass, HTTPRoute, InferencePool};
use super::DataPlane;
use crate::config::ModelTable;
use crate::kube::reflect::spawn;
use crate::registry::ModelRegistry;

/// Field manager of the gateway's writes.
pub const FIELD_MANAGER: &str = "flexinfer-gateway";

/// The watches' stores.
pub struct Stores {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    routes: Store<HTTPRoute>,
    pools: Option<Store<InferencePool>>,
    pods: Store<Pod>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    namespaces: Store<Namespace>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Stores {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn all<K>(client: &Client) -> Api<K>
where
    K: Resource,
    K::DynamicType: Default,
{
    Api::all(client.clone())
}

async fn ready<K>(store: &Store<K>) -> anyhow::Result<()>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store
        .wait_until_ready()
        .await
        .map_err(|_| anyhow::anyhow!("a Gateway API watch stopped during start-up"))
}

impl Stores {
    /// Starts every watch; `pools` when the InferencePool CRD is served.
    pub fn start(client: &Client, pools: bool, changed: &Arc<Notify>) -> Self {
        let mut tasks = Vec::new();
        let plain = watcher::Config::default;
        let classes = spawn(all(client), plain(), changed, &mut tasks);
        let gateways = spawn(all(client), plain(), changed, &mut tasks);
        let routes = spawn(all(client), plain(), changed, &mut tasks);
        let pools = pools.then(|| spawn(all(client), plain(), changed, &mut tasks));
        let pods = spawn(all(client), plain(), changed, &mut tasks);
        let services = spawn(all(client), plain(), changed, &mut tasks);
        let slices = spawn(
            all(client),
            watcher::Config::default().labels("kubernetes.io/service-name"),
            changed,
            &mut tasks,
        );
        let namespaces = spawn(all(client), plain(), changed, &mut tasks);
        Stores {
            classes,
            gateways,
            routes,
            pools,
            pods,
            services,
            slices,
            namespaces,
            tasks,
        }
    }

    /// Waits for every first list.
    pub async fn ready(&self) -> anyhow::Result<()> {
        ready(&self.classes).await?;
        ready(&self.gateways).await?;
        ready(&self.routes).await?;
        if let Some(p) = &self.pools {
            ready(p).await?;
        }
        ready(&self.pods).await?;
        ready(&self.services).await?;
        ready(&self.slices).await?;
        ready(&self.namespaces).await
    }

    fn world(&self, models: &dyn ModelRegistry) -> World {
        World {
            classes: self.classes.state(),
            gateways: self.gateways.state(),
            routes: self.routes.state(),
            pools: self.pools.as_ref().map(|p| p.state()).unwrap_or_default(),
            pods: self.pods.state(),
            services: self.services.state(),
            slices: self.slices.state(),
            namespaces: self.namespaces.state(),
            models: models
                .list()
                .into_iter()
                .map(|m| m.id)
                .collect::<BTreeSet<_>>(),
        }
    }
}

/// Compiles, swaps the data plane, writes what changed; again after every
/// change and every `resync`.
pub async fn run(
    client: Client,
    stores: Stores,
    settings: Settings,
    plane: Arc<DataPlane>,
    models: Arc<dyn ModelRegistry>,
    changed: Arc<Notify>,
    resync: Duration,
) {
    let mut tick = tokio::time::interval(resync.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let compiled = compile(&stores.world(models.as_ref()), &settings);
        plane.backends.replace(&ModelTable {
            models: compiled.backends,
            ..ModelTable::default()
        });
        let in_use = compiled
            .table
            .pickers
            .values()
            .flat_map(|p| p.addrs.iter().copied())
            .collect();
        plane.pickers.retain(&in_use);
        plane.table.store(Arc::new(compiled.table));
        write(&client, &settings, compiled.writes).await;
        tokio::select! {
            _ = changed.notified() => {
                // A burst of events (a rollout) is compiled once.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ = tick.tick() => {}
        }
    }
}

async fn write(client: &Client, settings: &Settings, writes: Writes) {
    let merge = PatchParams::default();
    for (name, status) in writes.classes {
        let api: Api<GatewayClass> = Api::all(client.clone());
        report(
            "GatewayClass",
            &name,
            api.patch_status(&name, &merge, &Patch::Merge(json!({"status": status})))
                .await,
        );
    }
    for (ns, name, status) in writes.gateways {
        let api: Api<Gateway> = Api::namespaced(client.clone(), &ns);
        report(
            "Gateway",
            &name,
            api.patch_status(&name, &merge, &Patch::Merge(json!({"status": status})))
                .await,
        );
    }
    for (ns, name, status) in writes.routes {
        let api: Api<HTTPRoute> = Api::namespaced(client.clone(), &ns);
        report(
            "HTTPRoute",
            &name,
            api.patch_status(&name, &merge, &Patch::Merge(json!({"status": status})))
                .await,
        );
    }
    for (ns, name, status) in writes.pools {
        let api: Api<InferencePool> = Api::namespaced(client.clone(), &ns);
        report(
            "InferencePool",
            &name,
            api.patch_status(&name, &merge, &Patch::Merge(json!({"status": status})))
                .await,
        );
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &settings.namespace);
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for svc in writes.services {
        let name = svc.metadata.name.clone().unwrap_or_default();
        report(
            "Service",
            &name,
            services.patch(&name, &apply, &Patch::Apply(&svc)).await,
        );
    }
    for name in writes.stale_services {
        match services.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(service = %name, "removed the Service of a Gateway that is gone")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(service = %name, error = %e, "cannot remove a Gateway's Service")
            }
        }
    }
}

fn report<T>(kind: &str, name: &str, result: Result<T, kube::Error>) {
    match result {
        Ok(_) => tracing::debug!(kind, name, "status written"),
        // Deleted since the watch saw it.
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            tracing::warn!(kind, name, error = %e, "cannot write to the cluster; retried on the next change")
        }
    }
}
