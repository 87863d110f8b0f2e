//! Ready endpoints of each model from its Service's EndpointSlices.
//!
//! A slice belongs to the Service named in its `kubernetes.io/service-name`
//! label; the operator names a model's Service after the model. An endpoint
//! counts when it is ready (an unset `ready` condition means ready, as the
//! API defines), not terminating, and not on a node that is about to be
//! reclaimed ([`node_is_terminating`]). The port is the slice port named
//! `http`, else the slice's first port.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::routing::Upstream;

/// Label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Name of the Service port the gateway sends requests to.
pub const HTTP_PORT_NAME: &str = "http";

/// Node taints (keys) that announce the node's imminent reclamation, after
/// common cloud conventions: FlexInfer's own termination detector, the AWS
/// Node Termination Handler's spot interruption taint, GKE's impending node
/// termination taint, and Karpenter's disruption taint.
pub const TERMINATING_TAINTS: &[&str] = &[
    flexinfer_crds::labels::NODE_SPOT_TERMINATING,
    "aws-node-termination-handler/spot-itn",
    "cloud.google.com/impending-node-termination",
    "karpenter.sh/disruption",
];

/// Whether no new requests should go to pods on `node`: it carries one of
/// [`TERMINATING_TAINTS`], or the `flexinfer.ai/spot-terminating` label or
/// annotation with value `true`.
pub fn node_is_terminating(node: &Node) -> bool {
    let key = flexinfer_crds::labels::NODE_SPOT_TERMINATING;
    let marked = |map: &Option<std::collections::BTreeMap<String, String>>| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    };
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| TERMINATING_TAINTS.contains(&t.key.as_str()))
        });
    tainted || marked(&node.metadata.labels) || marked(&node.metadata.annotations)
}

/// Names of nodes whose pods get no new requests.
pub fn terminating_nodes<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> HashSet<String> {
    nodes
        .into_iter()
        .filter(|n| node_is_terminating(n))
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// Ready endpoints per `(namespace, service)`, sorted by address.
#[derive(Debug, Default)]
pub struct ReadyEndpoints {
    by_service: HashMap<(String, String), BTreeSet<SocketAddr>>,
    ports: HashMap<(String, String), u16>,
}

impl ReadyEndpoints {
    /// Collects the ready endpoints of every slice, skipping pods on
    /// `excluded_nodes`.
    pub fn collect<'a>(
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
        excluded_nodes: &HashSet<String>,
    ) -> Self {
        let mut out = ReadyEndpoints::default();
        for slice in slices {
            let (Some(ns), Some(service)) = (
                slice.metadata.namespace.as_deref(),
                slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL)),
            ) else {
                continue;
            };
            if slice.address_type == "FQDN" {
                continue;
            }
            let Some(port) = slice_port(slice) else {
                continue;
            };
            let key = (ns.to_string(), service.clone());
            out.ports.insert(key.clone(), port);
            let set = out.by_service.entry(key).or_default();
            for ep in &slice.endpoints {
                let conditions = ep.conditions.as_ref();
                let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
                let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
                let on_excluded = ep
                    .node_name
                    .as_ref()
                    .is_some_and(|n| excluded_nodes.contains(n));
                if !ready || terminating || on_excluded {
                    continue;
                }
                // Consumers use the first address of an endpoint.
                if let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) {
                    set.insert(SocketAddr::new(ip, port));
                }
            }
        }
        out
    }

    /// The ready endpoints of Service `name` in `namespace`.
    pub fn upstreams(&self, namespace: &str, name: &str) -> Vec<Upstream> {
        self.by_service
            .get(&(namespace.to_string(), name.to_string()))
            .map(|set| set.iter().copied().map(Upstream::from).collect())
            .unwrap_or_default()
    }

    /// The port the Service's slices give, ready endpoints or not.
    pub fn port(&self, namespace: &str, name: &str) -> Option<u16> {
        self.ports
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }
}

fn slice_port(slice: &EndpointSlice) -> Option<u16> {
    let ports = slice.ports.as_ref()?;
    let named = ports
        .iter()
        .find(|p| p.name.as_deref() == Some(HTTP_PORT_NAME));
    named
        .or_else(|| ports.first())
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn keeps_ready_endpoints_off_terminating_nodes() {
        let s = slice(json!({
            "metadata": {"name": "m-1", "namespace": "ns", "labels": {SERVICE_NAME_LABEL: "m"}},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}],
            "endpoints": [
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}, "nodeName": "a"},
                {"addresses": ["10.0.0.1"]},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.4"], "conditions": {"ready": true, "terminating": true}},
                {"addresses": ["10.0.0.5"], "conditions": {"ready": true}, "nodeName": "spot"}
            ]
        }));
        let excluded = HashSet::from(["spot".to_string()]);
        let ready = ReadyEndpoints::collect([&s], &excluded);
        let addrs: Vec<String> = ready
            .upstreams("ns", "m")
            .iter()
            .map(|u| u.addr.to_string())
            .collect();
        assert_eq!(addrs, ["10.0.0.1:8000", "10.0.0.2:8000"]);
        assert_eq!(ready.port("ns", "m"), Some(8000));
        assert!(ready.upstreams("other", "m").is_empty());
    }

    #[test]
    fn spot_termination_marks() {
        let node = |v: serde_json::Value| -> Node { serde_json::from_value(v).unwrap() };
        assert!(!node_is_terminating(&node(
            json!({"metadata": {"name": "n"}})
        )));
        assert!(node_is_terminating(&node(json!({
            "metadata": {"name": "n", "annotations": {"flexinfer.ai/spot-terminating": "true"}}
        }))));
        assert!(node_is_terminating(&node(json!({
            "metadata": {"name": "n", "labels": {"flexinfer.ai/spot-terminating": "True"}}
        }))));
        assert!(!node_is_terminating(&node(json!({
            "metadata": {"name": "n", "labels": {"flexinfer.ai/spot-terminating": "false"}}
        }))));
        assert!(node_is_terminating(&node(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]}
        }))));
    }
}
