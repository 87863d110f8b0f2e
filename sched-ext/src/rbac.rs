//! Every Kubernetes API call of the extender, as RBAC grants (the Helm
//! chart grants exactly these; see `flexinfer_crds::rbac`).
//!
//! The extender only runs reflectors ([`crate::watch`]): the benchmark
//! ConfigMaps and, when enabled, Pods in the watched namespace (every
//! namespace when the chart watches several or all), and Nodes.

use flexinfer_crds::rbac::{Grant, Scope, When};

const LIST_WATCH: &[&str] = &["list", "watch"];

/// The extender's grants: ConfigMaps always (measured tokens/s), Nodes
/// with the Node cache, Pods with tenant fair share.
pub const GRANTS: &[Grant] = &[
    Grant::new(Scope::Reflected, ("", "configmaps", LIST_WATCH)),
    Grant::new(Scope::Cluster, ("", "nodes", LIST_WATCH)).when(When::NodeCache),
    Grant::new(Scope::Reflected, ("", "pods", LIST_WATCH)).when(When::FairShare),
];

#[cfg(test)]
mod tests {
    #[test]
    fn table_is_well_formed() {
        assert_eq!(
            flexinfer_crds::rbac::problems(super::GRANTS),
            Vec::<String>::new()
        );
    }
}
