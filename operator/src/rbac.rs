//! Every Kubernetes API call the controllers make, as RBAC grants.
//!
//! The Helm chart grants the component running the controllers (the
//! standalone operator, or the gateway with `--embedded-operator`) exactly
//! [`CONTROLLER_GRANTS`] for the settings it renders:
//! `docs/gen/tests/docs/helm_chart.rs` fails on a grant missing from the
//! chart and on one the chart gives but no code path uses. Change this
//! table with the code that calls the API.
//!
//! How calls map to verbs: a reflector (a `Controller`'s watched, owned or
//! related kind) needs `list` and `watch`; `get_opt` needs `get`;
//! server-side apply needs `patch`, and `create` as well where the apply
//! may create the object (the API server checks both); a finalizer is added
//! and removed with a JSON patch (`patch`); events go through kube's
//! `Recorder` (`events.k8s.io` Events: `create`, then `patch` for a series).
//! Owned objects carry an owner reference with `blockOwnerDeletion`, which
//! API servers with the `OwnerReferencesPermissionEnforcement` admission
//! plugin allow only with `update` on the owner's `finalizers` subresource.
//!
//! The member clusters of federation are called through each Cluster's
//! kubeconfig, with the permissions of [`MEMBER_GRANTS`], not through the
//! chart's roles.

pub use flexinfer_crds::rbac::{Grant, RbacRule, Scope, When};

const G: &str = "ai.flexinfer";
const LIST_WATCH: &[&str] = &["list", "watch"];

/// The controllers' grants:
///
/// - Reflectors ([`Scope::Reflected`]: the controllers watch one namespace
///   or all): the reconciled kinds (Models, ModelDeployments, GPUGroups,
///   ModelCaches, LoRAAdapters, ModelCatalogs) and the owned Deployments,
///   Services and Jobs. The Model controller's sibling lookup lists Models
///   in one namespace, which the reflector's `list` covers.
/// - Each reconcile re-reads its object (`get`); Models and LoRAAdapters
///   carry a finalizer (`patch`); ModelDeployments are scaled with a merge
///   patch (idle scale-down, GPUGroup arbitration); every status is written
///   with server-side apply (`*/status` `patch`).
/// - Services, Deployments, cache Jobs and cache PVCs are read and applied
///   (`get`, `create`, `patch`); Deployments and Services are deleted with
///   their Model, a Job is deleted when its source changes; PVCs are never
///   deleted (the cache outlives its Model).
/// - A Model's pods are listed (readiness, KV-cache scraping, failed pods)
///   and its failed pods deleted.
/// - Nodes are watched for GPU detection (one Node cache shared by the
///   Model and ModelDeployment reconciles; a list when it has not synced);
///   the CRDs are read by name at
///   start-up; the Lease (leader election) is read, created and renewed
///   with `replace` (`update`), in the controllers' own namespace.
/// - Federation: Clusters and FederatedModels are watched and re-read,
///   Clusters listed per namespace for placement, FederatedModels carry a
///   finalizer; both statuses are applied. A Cluster's kubeconfig Secret
///   and a registry's credentials Secret are read by name.
pub const CONTROLLER_GRANTS: &[Grant] = &[
    Grant::new(Scope::Reflected, (G, "models", LIST_WATCH)),
    Grant::new(Scope::Reflected, (G, "modeldeployments", LIST_WATCH)),
    Grant::new(Scope::Reflected, (G, "gpugroups", LIST_WATCH)),
    Grant::new(Scope::Reflected, (G, "modelcaches", LIST_WATCH)),
    Grant::new(Scope::Reflected, (G, "loraadapters", LIST_WATCH)),
    Grant::new(Scope::Reflected, (G, "modelcatalogs", LIST_WATCH)),
    Grant::new(Scope::Reflected, ("apps", "deployments", LIST_WATCH)),
    Grant::new(Scope::Reflected, ("", "services", LIST_WATCH)),
    Grant::new(Scope::Reflected, ("batch", "jobs", LIST_WATCH)),
    Grant::new(Scope::Watched, (G, "models", &["get", "patch"])),
    Grant::new(Scope::Watched, (G, "models/status", &["patch"])),
    Grant::new(Scope::Watched, (G, "models/finalizers", &["update"])),
    Grant::new(Scope::Watched, (G, "modeldeployments", &["get", "patch"])),
    Grant::new(Scope::Watched, (G, "modeldeployments/status", &["patch"])),
    Grant::new(
        Scope::Watched,
        (G, "modeldeployments/finalizers", &["update"]),
    ),
    Grant::new(Scope::Watched, (G, "gpugroups", &["get"])),
    Grant::new(Scope::Watched, (G, "gpugroups/status", &["patch"])),
    Grant::new(Scope::Watched, (G, "modelcaches", &["get"])),
    Grant::new(Scope::Watched, (G, "modelcaches/status", &["patch"])),
    Grant::new(Scope::Watched, (G, "modelcaches/finalizers", &["update"])),
    Grant::new(Scope::Watched, (G, "loraadapters", &["get", "patch"])),
    Grant::new(Scope::Watched, (G, "loraadapters/status", &["patch"])),
    Grant::new(Scope::Watched, (G, "modelcatalogs", &["get"])),
    Grant::new(Scope::Watched, (G, "modelcatalogs/status", &["patch"])),
    Grant::new(
        Scope::Watched,
        ("apps", "deployments", &["get", "create", "patch", "delete"]),
    ),
    Grant::new(
        Scope::Watched,
        ("", "services", &["get", "create", "patch", "delete"]),
    ),
    Grant::new(
        Scope::Watched,
        ("batch", "jobs", &["get", "create", "patch", "delete"]),
    ),
    Grant::new(
        Scope::Watched,
        ("", "persistentvolumeclaims", &["get", "create", "patch"]),
    ),
    Grant::new(Scope::Watched, ("", "pods", &["list", "delete"])),
    Grant::new(
        Scope::Watched,
        ("events.k8s.io", "events", &["create", "patch"]),
    ),
    Grant::new(Scope::Cluster, ("", "nodes", LIST_WATCH)),
    Grant::new(
        Scope::Cluster,
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["get"],
        ),
    )
    .by_name(),
    Grant::new(Scope::Own, ("coordination.k8s.io", "leases", &["create"]))
        .when(When::LeaderElection),
    Grant::new(
        Scope::Own,
        ("coordination.k8s.io", "leases", &["get", "update"]),
    )
    .when(When::LeaderElection)
    .by_name(),
    Grant::new(Scope::Reflected, (G, "clusters", LIST_WATCH)).when(When::Federation),
    Grant::new(Scope::Reflected, (G, "federatedmodels", LIST_WATCH)).when(When::Federation),
    Grant::new(Scope::Watched, (G, "clusters", &["get"])).when(When::Federation),
    Grant::new(Scope::Watched, (G, "clusters/status", &["patch"])).when(When::Federation),
    Grant::new(Scope::Watched, (G, "federatedmodels", &["get", "patch"])).when(When::Federation),
    Grant::new(Scope::Watched, (G, "federatedmodels/status", &["patch"])).when(When::Federation),
    Grant::new(Scope::Watched, ("", "secrets", &["get"])).when(When::ReadsSecrets),
];

/// What the user of a member cluster's kubeconfig needs (docs/federation.md,
/// "Permissions"): the probe lists Nodes, unfinished Pods and Models in
/// every namespace ([`crate::controllers::cluster::probe`]); placement reads
/// and applies the member's Model in the FederatedModel's namespace (an
/// apply that creates the Model is authorised as `create` too), creates
/// that namespace when it is missing, and the sweep lists the placed
/// Models by label and deletes them. `Watched` here means the namespaces of
/// the FederatedModels.
pub const MEMBER_GRANTS: &[Grant] = &[
    Grant::new(Scope::Cluster, ("", "nodes", &["list"])),
    Grant::new(Scope::Cluster, ("", "pods", &["list"])),
    Grant::new(Scope::Cluster, (G, "models", &["list"])),
    Grant::new(Scope::Cluster, ("", "namespaces", &["create"])),
    Grant::new(
        Scope::Watched,
        (G, "models", &["get", "list", "create", "patch", "delete"]),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_well_formed() {
        assert_eq!(
            flexinfer_crds::rbac::problems(CONTROLLER_GRANTS),
            Vec::<String>::new()
        );
        assert_eq!(
            flexinfer_crds::rbac::problems(MEMBER_GRANTS),
            Vec::<String>::new()
        );
    }

    /// The verbs the issue of least privilege named as unused stay out:
    /// ConfigMaps, core-group Events, `update` on objects that are only
    /// patched, Pod `get`/`watch`, PVC `list`/`watch`/`update`/`delete`,
    /// Lease `patch`.
    #[test]
    fn no_grant_for_calls_the_controllers_do_not_make() {
        let granted = |group: &str, resource: &str, verb: &str| {
            CONTROLLER_GRANTS
                .iter()
                .any(|g| g.rule.0 == group && g.rule.1 == resource && g.rule.2.contains(&verb))
        };
        assert!(!CONTROLLER_GRANTS.iter().any(|g| g.rule.1 == "configmaps"));
        assert!(!granted("", "events", "create"));
        for (group, resource) in [
            (G, "models"),
            (G, "modeldeployments"),
            ("apps", "deployments"),
        ] {
            assert!(!granted(group, resource, "update"), "{resource}");
        }
        for verb in ["get", "watch"] {
            assert!(!granted("", "pods", verb), "pods {verb}");
        }
        for verb in ["list", "watch", "update", "delete"] {
            assert!(!granted("", "persistentvolumeclaims", verb), "pvc {verb}");
        }
        assert!(!granted("coordination.k8s.io", "leases", "patch"));
        assert!(!CONTROLLER_GRANTS
            .iter()
            .any(|g| g.rule.1.ends_with("/status") && g.rule.2 != ["patch"]));
    }
}
