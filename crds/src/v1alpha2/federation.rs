//! Multi-cluster kinds (v1alpha2): `FederatedModel` places a Model on
//! several clusters; `GlobalProxy` routes requests across the clusters'
//! gateways.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{split_url, InvalidSpec, ModelSpec};
use crate::defaults;
use crate::gpu::Vendor;

/// How requests are spread over clusters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum ClusterRoutingStrategy {
    /// Cycle over healthy clusters.
    #[default]
    RoundRobin,
    /// Lowest observed latency.
    Latency,
    /// By explicit weights.
    Weighted,
    /// First healthy cluster in the failover order.
    Failover,
}

/// Desired state of a [`FederatedModel`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha2",
    kind = "FederatedModel",
    plural = "federatedmodels",
    singular = "federatedmodel",
    namespaced,
    status = "FederatedModelStatus",
    shortname = "fmodel",
    category = "flexinfer",
    derive = "PartialEq",
    doc = "FederatedModel places one Model specification on several clusters.",
    printcolumn(
        name = "ReadyClusters",
        type_ = "integer",
        json_path = ".status.readyClusters"
    ),
    printcolumn(
        name = "TotalClusters",
        type_ = "integer",
        json_path = ".status.totalClusters"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedModelSpec {
    /// Model spec created on each selected cluster.
    pub template: ModelSpec,
    /// Which clusters get the model.
    pub placement: FederatedModelPlacement,
    /// How requests are spread over the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<FederatedModelRouting>,
}

/// Cluster selection of a federated model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedModelPlacement {
    /// Clusters selected by their labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Clusters selected by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Replicas on each selected cluster.
    #[serde(default = "default_replicas_per_cluster")]
    #[schemars(range(min = 1))]
    pub replicas_per_cluster: i32,
}

impl Default for FederatedModelPlacement {
    fn default() -> Self {
        FederatedModelPlacement {
            cluster_selector: None,
            clusters: Vec::new(),
            replicas_per_cluster: default_replicas_per_cluster(),
        }
    }
}

/// Cross-cluster routing of a federated model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedModelRouting {
    /// Routing mode.
    #[serde(default)]
    pub strategy: ClusterRoutingStrategy,
    /// Cluster name to weight, for Weighted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, i32>,
    /// Primary first, then backups, for Failover.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover_order: Vec<String>,
}

impl FederatedModelSpec {
    /// Checks that do not need the clusters.
    pub fn validate_basic(&self) -> Result<(), InvalidSpec> {
        if self.placement.clusters.is_empty() && self.placement.cluster_selector.is_none() {
            return Err(InvalidSpec::new(
                "spec.placement requires either clusters or clusterSelector",
            ));
        }
        if self.placement.replicas_per_cluster < 1 {
            return Err(InvalidSpec::new(
                "spec.placement.replicasPerCluster must be >= 1",
            ));
        }
        if let Some(routing) = &self.routing {
            if routing.strategy == ClusterRoutingStrategy::Weighted && routing.weights.is_empty() {
                return Err(InvalidSpec::new(
                    "spec.routing.weights required for Weighted strategy",
                ));
            }
            if routing.strategy == ClusterRoutingStrategy::Failover
                && routing.failover_order.is_empty()
            {
                return Err(InvalidSpec::new(
                    "spec.routing.failoverOrder required for Failover strategy",
                ));
            }
        }
        Ok(())
    }
}

/// Deployment state on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedModelClusterStatus {
    /// Cluster name.
    pub cluster: String,
    /// Phase on that cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Ready replicas there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Desired or observed replicas there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_replicas: Option<i32>,
}

/// Observed state of a [`FederatedModel`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedModelStatus {
    /// Per-cluster state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<FederatedModelClusterStatus>,
    /// Clusters where the model is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<i32>,
    /// Selected clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_clusters: Option<i32>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Desired state of a [`GlobalProxy`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha2",
    kind = "GlobalProxy",
    plural = "globalproxies",
    singular = "globalproxy",
    namespaced,
    status = "GlobalProxyStatus",
    shortname = "gproxy",
    category = "flexinfer",
    derive = "PartialEq",
    doc = "GlobalProxy routes requests across the gateways of several clusters.",
    printcolumn(name = "Strategy", type_ = "string", json_path = ".spec.strategy"),
    printcolumn(
        name = "Healthy",
        type_ = "integer",
        json_path = ".status.healthyClusters"
    ),
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.totalClusters"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalProxySpec {
    /// Externally reachable host name (not a URL).
    #[schemars(length(min = 1))]
    pub external_endpoint: String,
    /// Routing mode.
    #[serde(default)]
    pub strategy: ClusterRoutingStrategy,
    /// TLS of the public endpoint and towards the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<GlobalProxyTls>,
    /// Cluster gateways to route to.
    #[schemars(length(min = 1))]
    pub clusters: Vec<GlobalProxyCluster>,
    /// Primary first, then backups; only with the Failover strategy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover_order: Vec<String>,
}

/// TLS settings of a global proxy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalProxyTls {
    /// TLS Secret in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// Skip certificate verification towards the clusters.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
}

/// One cluster gateway behind a global proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalProxyCluster {
    /// Logical cluster name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Gateway URL (http or https).
    #[schemars(regex(pattern = "^https?://"))]
    pub endpoint: String,
    /// Weight for the Weighted strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub weight: Option<i32>,
    /// Main GPU vendor of the cluster, a routing hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_vendor: Option<Vendor>,
}

impl GlobalProxySpec {
    /// Checks that do not need the clusters.
    pub fn validate_basic(&self) -> Result<(), InvalidSpec> {
        let external = self.external_endpoint.trim();
        if external.is_empty() {
            return Err(InvalidSpec::new("spec.externalEndpoint is required"));
        }
        if external.contains("://") {
            return Err(InvalidSpec::new(
                "spec.externalEndpoint must be a hostname, not a URL",
            ));
        }
        if self.clusters.is_empty() {
            return Err(InvalidSpec::new(
                "spec.clusters must include at least one cluster endpoint",
            ));
        }
        let mut names = BTreeSet::new();
        for cluster in &self.clusters {
            let name = cluster.name.trim();
            if name.is_empty() {
                return Err(InvalidSpec::new("spec.clusters[].name is required"));
            }
            if !names.insert(name) {
                return Err(InvalidSpec(format!(
                    "spec.clusters has duplicate name {name:?}"
                )));
            }
            let (scheme, host) = split_url(cluster.endpoint.trim());
            if scheme != "http" && scheme != "https" {
                return Err(InvalidSpec(format!(
                    "spec.clusters[{name:?}].endpoint must use http or https"
                )));
            }
            if host.is_empty() {
                return Err(InvalidSpec(format!(
                    "spec.clusters[{name:?}].endpoint host is required"
                )));
            }
        }
        if self.strategy == ClusterRoutingStrategy::Failover {
            if self.failover_order.is_empty() {
                return Err(InvalidSpec::new(
                    "spec.failoverOrder required when spec.strategy=Failover",
                ));
            }
            let mut seen = BTreeSet::new();
            for entry in &self.failover_order {
                let entry = entry.trim();
                if entry.is_empty() {
                    return Err(InvalidSpec::new(
                        "spec.failoverOrder entries must be non-empty",
                    ));
                }
                if !names.contains(entry) {
                    return Err(InvalidSpec(format!(
                        "spec.failoverOrder references unknown cluster {entry:?}"
                    )));
                }
                if !seen.insert(entry) {
                    return Err(InvalidSpec(format!(
                        "spec.failoverOrder has duplicate cluster {entry:?}"
                    )));
                }
            }
        } else if !self.failover_order.is_empty() {
            return Err(InvalidSpec::new(
                "spec.failoverOrder is only used when spec.strategy=Failover",
            ));
        }
        Ok(())
    }
}

/// Observed state of a [`GlobalProxy`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalProxyStatus {
    /// Current primary under the Failover strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_cluster: Option<String>,
    /// Healthy cluster gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_clusters: Option<i32>,
    /// Configured cluster gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_clusters: Option<i32>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

fn default_replicas_per_cluster() -> i32 {
    defaults::REPLICAS_PER_CLUSTER
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str, endpoint: &str) -> GlobalProxyCluster {
        GlobalProxyCluster {
            name: name.to_owned(),
            endpoint: endpoint.to_owned(),
            weight: None,
            gpu_vendor: None,
        }
    }

    fn proxy(
        strategy: ClusterRoutingStrategy,
        clusters: Vec<GlobalProxyCluster>,
        order: &[&str],
    ) -> GlobalProxySpec {
        GlobalProxySpec {
            external_endpoint: "llm.example.com".to_owned(),
            strategy,
            tls: None,
            clusters,
            failover_order: order.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn error(spec: &GlobalProxySpec) -> Option<String> {
        spec.validate_basic().err().map(|e| e.to_string())
    }

    #[test]
    fn global_proxy_validation_messages() {
        use ClusterRoutingStrategy::*;
        let a = || cluster("a", "https://a.example.com");
        let b = || cluster("b", "http://b.example.com:8080");
        assert_eq!(error(&proxy(RoundRobin, vec![a(), b()], &[])), None);
        assert_eq!(error(&proxy(Failover, vec![a(), b()], &["b", "a"])), None);

        let mut url = proxy(RoundRobin, vec![a()], &[]);
        url.external_endpoint = "https://llm.example.com".into();
        assert_eq!(
            error(&url).as_deref(),
            Some("spec.externalEndpoint must be a hostname, not a URL")
        );
        let mut blank = proxy(RoundRobin, vec![a()], &[]);
        blank.external_endpoint = " ".into();
        assert_eq!(
            error(&blank).as_deref(),
            Some("spec.externalEndpoint is required")
        );

        let cases = [
            (
                proxy(RoundRobin, vec![], &[]),
                "spec.clusters must include at least one cluster endpoint",
            ),
            (
                proxy(RoundRobin, vec![cluster(" ", "https://x")], &[]),
                "spec.clusters[].name is required",
            ),
            (
                proxy(RoundRobin, vec![a(), a()], &[]),
                "spec.clusters has duplicate name \"a\"",
            ),
            (
                proxy(RoundRobin, vec![cluster("a", "ftp://x")], &[]),
                "spec.clusters[\"a\"].endpoint must use http or https",
            ),
            (
                proxy(RoundRobin, vec![cluster("a", "https://")], &[]),
                "spec.clusters[\"a\"].endpoint host is required",
            ),
            (
                proxy(Failover, vec![a()], &[]),
                "spec.failoverOrder required when spec.strategy=Failover",
            ),
            (
                proxy(Failover, vec![a()], &[" "]),
                "spec.failoverOrder entries must be non-empty",
            ),
            (
                proxy(Failover, vec![a()], &["c"]),
                "spec.failoverOrder references unknown cluster \"c\"",
            ),
            (
                proxy(Failover, vec![a(), b()], &["a", "a"]),
                "spec.failoverOrder has duplicate cluster \"a\"",
            ),
            (
                proxy(Weighted, vec![a()], &["a"]),
                "spec.failoverOrder is only used when spec.strategy=Failover",
            ),
        ];
        for (spec, message) in cases {
            assert_eq!(error(&spec).as_deref(), Some(message));
        }
    }

    #[test]
    fn federated_model_validation_messages() {
        let mut spec = FederatedModelSpec {
            template: ModelSpec {
                backend: "vllm".into(),
                source: "HF://org/m".into(),
                ..ModelSpec::default()
            },
            placement: FederatedModelPlacement::default(),
            routing: None,
        };
        let message =
            |spec: &FederatedModelSpec| spec.validate_basic().err().map(|e| e.to_string());
        assert_eq!(
            message(&spec).as_deref(),
            Some("spec.placement requires either clusters or clusterSelector")
        );
        spec.placement.clusters = vec!["east".into()];
        assert_eq!(message(&spec), None);
        spec.placement.replicas_per_cluster = 0;
        assert_eq!(
            message(&spec).as_deref(),
            Some("spec.placement.replicasPerCluster must be >= 1")
        );
        spec.placement.replicas_per_cluster = 1;
        spec.routing = Some(FederatedModelRouting {
            strategy: ClusterRoutingStrategy::Weighted,
            ..FederatedModelRouting::default()
        });
        assert_eq!(
            message(&spec).as_deref(),
            Some("spec.routing.weights required for Weighted strategy")
        );
        spec.routing = Some(FederatedModelRouting {
            strategy: ClusterRoutingStrategy::Failover,
            ..FederatedModelRouting::default()
        });
        assert_eq!(
            message(&spec).as_deref(),
            Some("spec.routing.failoverOrder required for Failover strategy")
        );
    }
}
