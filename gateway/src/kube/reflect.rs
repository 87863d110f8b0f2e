//! Reflectors: one watch per kind (and per namespace when a list of
//! namespaces is watched), each keeping an in-memory store and signalling
//! every change.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use flexinfer_crds::labels::MODEL as MODEL_LABEL;
use flexinfer_crds::v1alpha1::{GPUGroup, ModelDeployment};
use flexinfer_crds::v1alpha2::{LoRAAdapter, Model};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::endpoints::SERVICE_NAME_LABEL;
use super::models::Snapshot;
use super::scope::Scope;

/// Which optional kinds are served by the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kinds {
    /// v1alpha1 ModelDeployments.
    pub deployments: bool,
    /// LoRAAdapters.
    pub adapters: bool,
    /// GPUGroups.
    pub groups: bool,
}

/// The stores of every reflector.
pub struct Stores {
    models: Vec<Store<Model>>,
    deployments: Vec<Store<ModelDeployment>>,
    adapters: Vec<Store<LoRAAdapter>>,
    groups: Vec<Store<GPUGroup>>,
    slices: Vec<Store<EndpointSlice>>,
    nodes: Vec<Store<Node>>,
    services: Vec<Store<Service>>,
    tasks: Vec<JoinHandle<()>>,
}

fn state<K: Resource + Clone>(stores: &[Store<K>]) -> Vec<Arc<K>>
where
    K::DynamicType: Eq + Hash + Clone,
{
    stores.iter().flat_map(|s| s.state()).collect()
}

impl Stores {
    /// Starts the reflectors; `changed` is notified after every event.
    pub fn start(client: &Client, scope: &Scope, kinds: Kinds, changed: &Arc<Notify>) -> Self {
        let mut s = Stores {
            models: Vec::new(),
            deployments: Vec::new(),
            adapters: Vec::new(),
            groups: Vec::new(),
            slices: Vec::new(),
            nodes: Vec::new(),
            services: Vec::new(),
            tasks: Vec::new(),
        };
        let plain = watcher::Config::default;
        let slices = || watcher::Config::default().labels(SERVICE_NAME_LABEL);
        for api in apis::<Model>(client, scope) {
            s.models.push(spawn(api, plain(), changed, &mut s.tasks));
        }
        if kinds.deployments {
            for api in apis::<ModelDeployment>(client, scope) {
                s.deployments
                    .push(spawn(api, plain(), changed, &mut s.tasks));
            }
        }
        if kinds.adapters {
            for api in apis::<LoRAAdapter>(client, scope) {
                s.adapters.push(spawn(api, plain(), changed, &mut s.tasks));
            }
        }
        if kinds.groups {
            for api in apis::<GPUGroup>(client, scope) {
                s.groups.push(spawn(api, plain(), changed, &mut s.tasks));
            }
        }
        for api in apis::<EndpointSlice>(client, scope) {
            s.slices.push(spawn(api, slices(), changed, &mut s.tasks));
        }
        // Model Services, for their service-label annotations.
        let services = || watcher::Config::default().labels(MODEL_LABEL);
        for api in apis::<Service>(client, scope) {
            s.services
                .push(spawn(api, services(), changed, &mut s.tasks));
        }
        let nodes: Api<Node> = Api::all(client.clone());
        s.nodes.push(spawn(nodes, plain(), changed, &mut s.tasks));
        s
    }

    /// Waits until every store holds its first complete list.
    pub async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        for st in &self.models {
            st.wait_until_ready().await?;
        }
        for st in &self.deployments {
            st.wait_until_ready().await?;
        }
        for st in &self.adapters {
            st.wait_until_ready().await?;
        }
        for st in &self.groups {
            st.wait_until_ready().await?;
        }
        for st in &self.slices {
            st.wait_until_ready().await?;
        }
        for st in &self.nodes {
            st.wait_until_ready().await?;
        }
        for st in &self.services {
            st.wait_until_ready().await?;
        }
        Ok(())
    }

    /// Everything the stores hold now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            models: state(&self.models),
            deployments: state(&self.deployments),
            adapters: state(&self.adapters),
            groups: state(&self.groups),
            slices: state(&self.slices),
            nodes: state(&self.nodes),
            services: state(&self.services),
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One `Api` per watched namespace, or one for all namespaces.
fn apis<K>(client: &Client, scope: &Scope) -> Vec<Api<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match scope.namespaces() {
        Some(list) => list
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
        None => vec![Api::all(client.clone())],
    }
}

pub(crate) fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let (reader, writer) = reflector::store();
    let changed = changed.clone();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::warn!(kind, error = %e, "watch failed; retrying"),
            }
        }
    }));
    reader
}
