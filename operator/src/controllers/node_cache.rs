//! The cluster's Nodes as GPU placement reads them, from one watch shared by
//! every reconcile.
//!
//! Placement of a GPU model ([`crate::placement::detect`]) reads each
//! Node's labels, `Ready` condition and GPU capacity. Listing every Node on
//! every reconcile of every GPU model (each 30 s) is a full read of the
//! largest objects of a cluster; a reflector lists them once and follows
//! changes. It starts on the first reconcile that needs it, so a cluster
//! of CPU models never watches Nodes, and keeps only what placement
//! reads: no images, addresses, node info, annotations or managed fields.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

/// How long a reconcile waits for the Node watch's first list.
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

/// Nodes from a lazily started reflector.
pub struct NodeCache {
    client: Client,
    store: OnceCell<(Store<Node>, JoinHandle<()>)>,
}

impl NodeCache {
    /// A cache that will watch Nodes through `client` once first read.
    pub fn new(client: Client) -> Arc<NodeCache> {
        Arc::new(NodeCache {
            client,
            store: OnceCell::new(),
        })
    }

    /// Every Node, as placement reads it; the first call starts the watch
    /// and waits for its first complete list. While the watch has no
    /// complete list after [`SYNC_WAIT`] (Nodes may not be listed, the API
    /// server is away), a plain list answers instead, so its error fails
    /// the reconcile rather than holding it.
    pub async fn nodes(&self) -> Result<Vec<Node>, kube::Error> {
        let (store, _) = self.store.get_or_init(|| async { self.start() }).await;
        match tokio::time::timeout(SYNC_WAIT, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(store.state().iter().map(|node| (**node).clone()).collect()),
            _ => {
                let api: Api<Node> = Api::all(self.client.clone());
                let mut nodes = api.list(&ListParams::default()).await?.items;
                nodes.iter_mut().for_each(keep_placement_fields);
                Ok(nodes)
            }
        }
    }

    fn start(&self) -> (Store<Node>, JoinHandle<()>) {
        let (reader, writer) = reflector::store();
        let api: Api<Node> = Api::all(self.client.clone());
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(keep_placement_fields),
        );
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "Node watch failed; retrying");
                }
            }
        });
        (reader, task)
    }
}

impl Drop for NodeCache {
    fn drop(&mut self) {
        if let Some((_, task)) = self.store.get() {
            task.abort();
        }
    }
}

/// Drops what placement does not read.
pub fn keep_placement_fields(node: &mut Node) {
    node.metadata.annotations = None;
    node.metadata.managed_fields = None;
    node.status = node.status.take().map(|status| NodeStatus {
        allocatable: status.allocatable,
        capacity: status.capacity,
        conditions: status.conditions,
        ..NodeStatus::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_labels_readiness_and_capacity_only() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-1", "labels": {"flexinfer.ai/gpu.vendor": "NVIDIA"},
                         "annotations": {"flexinfer.ai/gpu.util": "12.00"}},
            "spec": {"unschedulable": true},
            "status": {
                "capacity": {"nvidia.com/gpu": "2"},
                "allocatable": {"nvidia.com/gpu": "2"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["vllm/vllm-openai:latest"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            },
        }))
        .unwrap();
        keep_placement_fields(&mut node);
        assert_eq!(
            serde_json::to_value(&node).unwrap(),
            serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "gpu-1", "labels": {"flexinfer.ai/gpu.vendor": "NVIDIA"}},
                "spec": {"unschedulable": true},
                "status": {
                    "capacity": {"nvidia.com/gpu": "2"},
                    "allocatable": {"nvidia.com/gpu": "2"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            })
        );
    }
}
