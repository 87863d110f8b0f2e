//! The Kubernetes permissions the gateway uses, and nothing more.
//!
//! Every API call of Kubernetes mode is covered by one rule here; the Helm
//! chart's ClusterRole (or Role, per watched namespace, plus a ClusterRole
//! for nodes) must grant exactly these.

/// One RBAC rule: API group (empty for the core group), resource (with
/// `/status` for the status subresource) and verbs.
pub type RbacRule = (&'static str, &'static str, &'static [&'static str]);

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

/// The verbs [`RBAC_RULES`] grants on `resource` of `group`.
pub fn verbs(group: &str, resource: &str) -> &'static [&'static str] {
    RBAC_RULES
        .iter()
        .find(|(g, r, _)| *g == group && *r == resource)
        .map_or(&[], |(_, _, v)| v)
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
    }
}
