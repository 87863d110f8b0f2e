//! Cluster state, watched and cached.
//!
//! Each source is a kube reflector: a LIST, then a WATCH that keeps an
//! in-memory store current. Requests read the stores and never call the
//! API server.
//!
//! - [`benchmark_config_maps`]: ConfigMaps named like the global benchmark
//!   ConfigMap or `*-benchmark-results` (others are dropped before they
//!   reach the store); implements [`TpsSource`].
//! - [`nodes`]: Nodes, reduced to their metadata; implements
//!   [`NodeSource`]. Needed only for `nodeCacheCapable` extenders.
//! - [`pods`]: Pods, reduced to what fair share reads; implements
//!   [`TenantUsage`]. Needed only with fair share enabled.

use std::future::Future;
use std::sync::Arc;

use futures::{future, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Node, Pod, PodSpec, PodStatus};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};

use crate::extender::NodeSource;
use crate::facts::gpu_count;
use crate::tenant::{FairShare, TenantUsage};
use crate::tps::{TpsSource, DEPLOYMENT_CONFIG_MAP_SUFFIX};

/// Watched benchmark ConfigMaps.
#[derive(Clone)]
pub struct ConfigMapCache(Store<ConfigMap>);

impl ConfigMapCache {
    /// The underlying store (for readiness checks).
    pub fn store(&self) -> &Store<ConfigMap> {
        &self.0
    }
}

impl TpsSource for ConfigMapCache {
    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.0.get(&ObjectRef::new(name).within(namespace))
    }
}

/// Whether a ConfigMap holds benchmark results.
pub fn is_benchmark_config_map(config_map: &ConfigMap, global_name: &str) -> bool {
    config_map
        .metadata
        .name
        .as_deref()
        .is_some_and(|name| name == global_name || name.ends_with(DEPLOYMENT_CONFIG_MAP_SUFFIX))
}

/// Watches benchmark ConfigMaps in `namespace` (every namespace when
/// empty). Returns the cache and the future that keeps it current; the
/// future runs until the process stops, retrying with backoff.
pub fn benchmark_config_maps(
    client: Client,
    namespace: &str,
    global_name: String,
) -> (ConfigMapCache, impl Future<Output = ()> + Send + 'static) {
    let api: Api<ConfigMap> = scoped(client, namespace);
    let (store, writer) = reflector::store();
    let task = watcher(api, watcher::Config::default())
        .default_backoff()
        .try_filter(move |event| {
            future::ready(keep_event(event, |cm| {
                is_benchmark_config_map(cm, &global_name)
            }))
        })
        .modify(|cm: &mut ConfigMap| cm.meta_mut().managed_fields = None)
        .reflect(writer)
        .for_each(|event| {
            if let Err(err) = event {
                tracing::warn!(error = %err, "ConfigMap watch failed; retrying");
            }
            future::ready(())
        });
    (ConfigMapCache(store), task)
}

/// Watched Nodes (metadata only).
#[derive(Clone)]
pub struct NodeCache(Store<Node>);

impl NodeSource for NodeCache {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.0.get(&ObjectRef::new(name))
    }
}

/// Watches Nodes, keeping only their metadata.
pub fn nodes(client: Client) -> (NodeCache, impl Future<Output = ()> + Send + 'static) {
    let api: Api<Node> = Api::all(client);
    let (store, writer) = reflector::store();
    let task = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|node: &mut Node| {
            node.metadata.managed_fields = None;
            node.spec = None;
            node.status = None;
        })
        .reflect(writer)
        .for_each(|event| {
            if let Err(err) = event {
                tracing::warn!(error = %err, "Node watch failed; retrying");
            }
            future::ready(())
        });
    (NodeCache(store), task)
}

/// Watched Pods, reduced to namespace, UID, labels, GPU requests and phase.
#[derive(Clone)]
pub struct PodCache(Store<Pod>);

impl TenantUsage for PodCache {
    fn used_gpus(
        &self,
        settings: &FairShare,
        namespace: &str,
        tenant: &str,
        exclude_uid: &str,
    ) -> f64 {
        self.0
            .state()
            .iter()
            .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
            .filter(|pod| pod.metadata.uid.as_deref() != Some(exclude_uid))
            .filter(|pod| !is_terminal(pod))
            .filter(|pod| settings.tenant_from(pod.metadata.labels.as_ref(), namespace) == tenant)
            .map(|pod| pod.spec.as_ref().map_or(0.0, gpu_count))
            .sum()
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Watches Pods in `namespace` (every namespace when empty), keeping what
/// fair share needs.
pub fn pods(
    client: Client,
    namespace: &str,
) -> (PodCache, impl Future<Output = ()> + Send + 'static) {
    let api: Api<Pod> = scoped(client, namespace);
    let (store, writer) = reflector::store();
    let task = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(strip_pod)
        .reflect(writer)
        .for_each(|event| {
            if let Err(err) = event {
                tracing::warn!(error = %err, "Pod watch failed; retrying");
            }
            future::ready(())
        });
    (PodCache(store), task)
}

fn strip_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    pod.metadata.owner_references = None;
    let strip = |c: &Container| Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        ..Default::default()
    };
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        containers: spec.containers.iter().map(strip).collect(),
        init_containers: spec
            .init_containers
            .map(|init| init.iter().map(strip).collect()),
        ..Default::default()
    });
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        ..Default::default()
    });
}

fn scoped<K>(client: Client, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if namespace.is_empty() {
        Api::all(client)
    } else {
        Api::namespaced(client, namespace)
    }
}

fn keep_event<K>(event: &watcher::Event<K>, keep: impl Fn(&K) -> bool) -> bool {
    match event {
        watcher::Event::Apply(obj)
        | watcher::Event::Delete(obj)
        | watcher::Event::InitApply(obj) => keep(obj),
        watcher::Event::Init | watcher::Event::InitDone => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // The ConfigMap reflector is tested against the in-memory API server
    // in `tests/sched/watch.rs`.

    #[test]
    fn pod_usage_counts_non_terminal_pods_of_the_tenant() {
        let (store, mut writer) = reflector::store::<Pod>();
        let pod = |name: &str, ns: &str, tenant: &str, gpus: &str, phase: &str| -> Pod {
            let mut pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns, "uid": name, "labels": {"team": tenant}},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
                "status": {"phase": phase, "podIP": "10.0.0.1"}
            }))
            .unwrap();
            strip_pod(&mut pod);
            pod
        };
        for p in [
            pod("a", "ml", "blue", "1", "Running"),
            pod("b", "ml", "blue", "2", "Pending"),
            pod("c", "ml", "blue", "4", "Succeeded"),
            pod("d", "ml", "red", "8", "Running"),
            pod("e", "other", "blue", "16", "Running"),
            pod("self", "ml", "blue", "32", "Pending"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let cache = PodCache(store);
        let by_label = FairShare {
            enabled: true,
            budget_gpus: 1.0,
            tenant_label_key: "team".into(),
        };
        assert_eq!(cache.used_gpus(&by_label, "ml", "blue", "self"), 3.0);
        assert_eq!(cache.used_gpus(&by_label, "ml", "red", "self"), 8.0);
        let by_namespace = FairShare {
            tenant_label_key: String::new(),
            ..by_label
        };
        assert_eq!(cache.used_gpus(&by_namespace, "ml", "ml", "self"), 11.0);
    }

    #[test]
    fn stripped_pods_keep_what_fair_share_reads() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": {"big": "x"}, "labels": {"team": "t"}},
            "spec": {"containers": [{"name": "c", "image": "img", "env": [{"name": "A", "value": "1"}],
                     "resources": {"limits": {"amd.com/gpu": "2"}}}], "nodeName": "n"},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        }))
        .unwrap();
        strip_pod(&mut pod);
        assert!(pod.metadata.annotations.is_none());
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["team"], "t");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(gpu_count(spec), 2.0);
        assert!(spec.containers[0].env.is_none());
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(pod.status.as_ref().unwrap().pod_ip.is_none());
    }
}
