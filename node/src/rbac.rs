//! Every Kubernetes API call of the node agent, as RBAC grants (the Helm
//! chart grants exactly these; see `flexinfer_crds::rbac`).
//!
//! The agent reads its own Node and writes its labels ([`crate::publish`]:
//! a GET, then a merge patch for stale keys and a server-side apply) and,
//! with KV-cache reporting, lists the model pods on its node in every
//! namespace ([`crate::kv_cache`], a field selector on `spec.nodeName`).
//! RBAC cannot tell one Node from another; the chart's
//! ValidatingAdmissionPolicy limits the writes to the agent's own Node.

use flexinfer_crds::rbac::{Grant, Scope, When};

/// The agent's grants.
pub const GRANTS: &[Grant] = &[
    Grant::new(Scope::Cluster, ("", "nodes", &["get", "patch"])),
    Grant::new(Scope::Cluster, ("", "pods", &["list"])).when(When::KvCache),
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
