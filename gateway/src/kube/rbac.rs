//! The Kubernetes permissions the gateway uses, and nothing more.
//!
//! Every API call of Kubernetes mode is covered by one rule here. The
//! gateway runs one reflector per watched namespace, so the Helm chart
//! grants the namespaced rules through a Role in each watched namespace (a
//! ClusterRole with every namespace watched) and the cluster-scoped ones
//! ([`CLUSTER_SCOPED`], Nodes) through a ClusterRole: exactly these, as
//! `docs/gen/tests/docs/helm_chart.rs` checks ([`grants`]).

use flexinfer_crds::rbac::{Grant, Scope, When};

use crate::peers::secret::{PEER_SECRET_GENERATE_RULE, PEER_SECRET_READ_RULE};

pub use flexinfer_crds::rbac::RbacRule;

/// The resources of [`RBAC_RULES`] that are cluster-scoped.
pub const CLUSTER_SCOPED: &[&str] = &["nodes"];

/// Every rule Kubernetes mode needs:
///
/// - Models and ModelDeployments are listed and watched for routes;
///   activation merge-patches `models/status` (`lastActiveTime`),
///   `modeldeployments/status` (`lastAccessTime`) and a ModelDeployment's
///   `spec.replicas` (0 → 1).
/// - LoRAAdapters are listed and watched (adapter → base model).
/// - GPUGroups are listed and watched, and patched with the demand
///   annotations `flexinfer.ai/queue.<model>` and
///   `flexinfer.ai/queue-since.<model>`.
/// - EndpointSlices give each model's ready endpoints; Nodes tell which
///   of them are on spot nodes about to be reclaimed.
/// - Services of models (labelled `flexinfer.ai/model`) are listed and
///   watched for their service labels (`ai.flexinfer/active-services`,
///   `flexinfer.ai/service-labels`).
pub const RBAC_RULES: &[RbacRule] = &[
    ("ai.flexinfer", "models", &["list", "watch"]),
    ("ai.flexinfer", "models/status", &["patch"]),
    (
        "ai.flexinfer",
        "modeldeployments",
        &["list", "watch", "patch"],
    ),
    ("ai.flexinfer", "modeldeployments/status", &["patch"]),
    ("ai.flexinfer", "loraadapters", &["list", "watch"]),
    ("ai.flexinfer", "gpugroups", &["list", "watch", "patch"]),
    ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
    ("", "nodes", &["list", "watch"]),
    ("", "services", &["list", "watch"]),
];

/// The Gateway API controller's calls ([`crate::gatewayapi`]), granted
/// cluster-wide with `--gateway-api`: the Gateway API kinds, and the Pods,
/// Namespaces, Services and EndpointSlices routes depend on, listed and
/// watched in every namespace; statuses merge-patched.
pub const GATEWAY_API_CLUSTER_RULES: &[RbacRule] = &[
    (
        "gateway.networking.k8s.io",
        "gatewayclasses",
        &["list", "watch"],
    ),
    (
        "gateway.networking.k8s.io",
        "gatewayclasses/status",
        &["patch"],
    ),
    ("gateway.networking.k8s.io", "gateways", &["list", "watch"]),
    ("gateway.networking.k8s.io", "gateways/status", &["patch"]),
    (
        "gateway.networking.k8s.io",
        "httproutes",
        &["list", "watch"],
    ),
    ("gateway.networking.k8s.io", "httproutes/status", &["patch"]),
    (
        "inference.networking.k8s.io",
        "inferencepools",
        &["list", "watch"],
    ),
    (
        "inference.networking.k8s.io",
        "inferencepools/status",
        &["patch"],
    ),
    ("", "pods", &["list", "watch"]),
    ("", "namespaces", &["list", "watch"]),
    ("", "services", &["list", "watch"]),
    ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
];

/// Each Gateway's Service, applied (server-side: create and patch) and
/// deleted in the gateway's own namespace ([`crate::gatewayapi::slots`]).
pub const GATEWAY_API_OWN_RULES: &[RbacRule] = &[("", "services", &["create", "patch", "delete"])];

/// The verbs [`RBAC_RULES`] grants on `resource` of `group`.
pub fn verbs(group: &str, resource: &str) -> &'static [&'static str] {
    RBAC_RULES
        .iter()
        .find(|(g, r, _)| *g == group && *r == resource)
        .map_or(&[], |(_, _, v)| v)
}

/// [`RBAC_RULES`] with where each is granted: cluster-wide for
/// [`CLUSTER_SCOPED`] resources, in the watched namespaces otherwise; and
/// the peer Secret's rules, in the gateway's own namespace on that one
/// Secret ([`crate::peers::secret`]).
pub fn grants() -> Vec<Grant> {
    let mut grants: Vec<Grant> = RBAC_RULES
        .iter()
        .map(|&rule| {
            let scope = if CLUSTER_SCOPED.contains(&rule.1) {
                Scope::Cluster
            } else {
                Scope::Watched
            };
            Grant::new(scope, rule)
        })
        .collect();
    grants.push(
        Grant::new(Scope::Own, PEER_SECRET_READ_RULE)
            .when(When::PeerSecret)
            .by_name(),
    );
    grants.extend(
        GATEWAY_API_CLUSTER_RULES
            .iter()
            .map(|&rule| Grant::new(Scope::Cluster, rule).when(When::GatewayApi)),
    );
    grants.extend(
        GATEWAY_API_OWN_RULES
            .iter()
            .map(|&rule| Grant::new(Scope::Own, rule).when(When::GatewayApi)),
    );
    grants.push(
        Grant::new(Scope::Own, PEER_SECRET_GENERATE_RULE)
            .when(When::PeerSecretGenerate)
            .by_name(),
    );
    grants
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_appears_once_with_sorted_unique_verbs() {
        for (i, (g, r, v)) in RBAC_RULES.iter().enumerate() {
            assert!(
                RBAC_RULES[i + 1..]
                    .iter()
                    .all(|(g2, r2, _)| (g2, r2) != (g, r)),
                "{g}/{r} listed twice"
            );
            assert!(!v.is_empty(), "{g}/{r} has no verbs");
            let mut sorted = v.to_vec();
            sorted.dedup();
            assert_eq!(sorted.len(), v.len(), "{g}/{r} repeats a verb");
        }
        assert_eq!(verbs("ai.flexinfer", "models/status"), ["patch"]);
        assert!(verbs("", "pods").is_empty());
        let cluster = |when: When| -> Vec<_> {
            grants()
                .into_iter()
                .filter(|g| g.scope == Scope::Cluster && g.when == when)
                .map(|g| g.rule.1)
                .collect()
        };
        assert_eq!(cluster(When::Always), ["nodes"]);
        // The Gateway API controller's cluster-wide reads and status
        // writes, only with --gateway-api; it writes nothing else
        // cluster-wide.
        let gateway_api = grants()
            .into_iter()
            .filter(|g| g.when == When::GatewayApi)
            .collect::<Vec<_>>();
        assert_eq!(gateway_api.len(), cluster(When::GatewayApi).len() + 1);
        for g in &gateway_api {
            let writes = g.rule.2.iter().any(|v| *v != "list" && *v != "watch");
            let status = g.rule.1.ends_with("/status");
            assert!(
                !writes || status || g.scope == Scope::Own,
                "{} {:?} writes outside statuses and its own namespace",
                g.rule.1,
                g.rule.2
            );
        }
    }
}
