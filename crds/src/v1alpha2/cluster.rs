//! `Cluster` (v1alpha2): a remote Kubernetes cluster registered for
//! federation.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{split_url, InvalidSpec};
use crate::defaults;

/// Desired state of a [`Cluster`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha2",
    kind = "Cluster",
    plural = "clusters",
    singular = "cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "ficl",
    category = "flexinfer",
    derive = "PartialEq",
    doc = "Cluster registers a remote Kubernetes cluster that federated models can be placed on.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".spec.apiEndpoint"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// API server URL of the remote cluster (https only).
    #[schemars(regex(pattern = "^https://"))]
    pub api_endpoint: String,
    /// Secret in the same namespace holding the kubeconfig.
    pub secret_ref: LocalObjectReference,
    /// Cluster metadata used by placement and routing (region, gpu-vendor,
    /// environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Time between health probes.
    #[serde(default = "default_probe_interval")]
    #[schemars(extend("default" = defaults::CLUSTER_PROBE_INTERVAL_LITERAL))]
    pub probe_interval: kube::core::Duration,
}

impl ClusterSpec {
    /// The endpoint without surrounding blanks and trailing slashes, for
    /// comparisons.
    pub fn normalized_api_endpoint(&self) -> &str {
        self.api_endpoint.trim().trim_end_matches('/')
    }

    /// Time between health probes.
    pub fn probe_interval(&self) -> Duration {
        self.probe_interval.into()
    }

    /// Checks that do not need the cluster: endpoint present, https, with a
    /// host; secret named.
    pub fn validate_basic(&self) -> Result<(), InvalidSpec> {
        let endpoint = self.normalized_api_endpoint();
        if endpoint.is_empty() {
            return Err(InvalidSpec::new("spec.apiEndpoint is required"));
        }
        if self.secret_ref.name.is_empty() {
            return Err(InvalidSpec::new("spec.secretRef.name is required"));
        }
        let (scheme, host) = split_url(endpoint);
        if scheme != "https" {
            return Err(InvalidSpec::new("spec.apiEndpoint must use https"));
        }
        if host.is_empty() {
            return Err(InvalidSpec::new("spec.apiEndpoint host is required"));
        }
        Ok(())
    }
}

/// Health of a registered cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum ClusterPhase {
    /// Not probed yet.
    Pending,
    /// Probes succeed.
    Ready,
    /// Probes fail.
    NotReady,
    /// Health cannot be determined.
    Unknown,
}

/// A model running in the remote cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterModelStatus {
    /// Model name.
    pub name: String,
    /// Model namespace in the remote cluster.
    pub namespace: String,
    /// Remote phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// Observed state of a [`Cluster`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Total discovered capacity (e.g. GPUs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Currently available capacity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub available: BTreeMap<String, Quantity>,
    /// Models in the remote cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ClusterModelStatus>,
    /// When the last probe ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    /// Human-readable summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

fn default_probe_interval() -> kube::core::Duration {
    defaults::CLUSTER_PROBE_INTERVAL.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(endpoint: &str, secret: &str) -> ClusterSpec {
        ClusterSpec {
            api_endpoint: endpoint.to_owned(),
            secret_ref: LocalObjectReference {
                name: secret.to_owned(),
            },
            labels: BTreeMap::new(),
            probe_interval: default_probe_interval(),
        }
    }

    #[test]
    fn validate_basic_messages() {
        let cases = [
            ("", "kc", Some("spec.apiEndpoint is required")),
            (
                "https://k8s.example.com",
                "",
                Some("spec.secretRef.name is required"),
            ),
            (
                "http://k8s.example.com",
                "kc",
                Some("spec.apiEndpoint must use https"),
            ),
            (
                "k8s.example.com",
                "kc",
                Some("spec.apiEndpoint must use https"),
            ),
            ("https://", "kc", Some("spec.apiEndpoint host is required")),
            ("https://k8s.example.com:6443/", "kc", None),
        ];
        for (endpoint, secret, expected) in cases {
            let result = spec(endpoint, secret).validate_basic();
            assert_eq!(
                result.err().map(|e| e.to_string()).as_deref(),
                expected,
                "{endpoint}"
            );
        }
        assert_eq!(
            spec(" https://k8s.example.com/ ", "kc").normalized_api_endpoint(),
            "https://k8s.example.com"
        );
        assert_eq!(
            spec("https://x", "kc").probe_interval(),
            Duration::from_secs(30)
        );
    }
}
