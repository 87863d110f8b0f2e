//! The resource types a server answers for.
//!
//! Every request names a group, a version and a resource (plural); the
//! registry turns that into a [`ResourceType`] that says how objects of the
//! type behave: namespaced or cluster-scoped, with or without a `/status`
//! subresource, built in or custom (custom resources carry their OpenAPI
//! schema, which drives list merging in apply and, where declared,
//! defaulting and pruning).

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// One served group/version/resource.
///
/// Objects are stored per group and resource, not per version: when a
/// custom resource serves several versions, every version sees the same
/// objects (no conversion; only `apiVersion` is rewritten).
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `deployments`.
    pub plural: String,
    /// Singular resource name, e.g. `deployment`.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names advertised by discovery.
    pub short_names: Vec<String>,
    /// Categories advertised by discovery.
    pub categories: Vec<String>,
    /// Whether the type has a `/status` subresource: writes to the main
    /// resource ignore `status`, writes to `/status` ignore everything else.
    pub status_subresource: bool,
    /// Whether this is a custom resource (no strategic merge patch, lists
    /// atomic unless the schema declares otherwise).
    pub custom: bool,
    /// The `openAPIV3Schema` of a custom resource version.
    pub schema: Option<Arc<Value>>,
}

impl ResourceType {
    /// A built-in type; `group` is empty for the core group.
    pub fn builtin(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status_subresource: bool,
    ) -> Self {
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: kind.to_ascii_lowercase(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource,
            custom: false,
            schema: None,
        }
    }

    fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// One type per served version of a CustomResourceDefinition.
    pub fn from_crd(crd: &CustomResourceDefinition) -> Vec<Self> {
        let spec = &crd.spec;
        let names = &spec.names;
        spec.versions
            .iter()
            .filter(|v| v.served)
            .map(|v| ResourceType {
                group: spec.group.clone(),
                version: v.name.clone(),
                kind: names.kind.clone(),
                plural: names.plural.clone(),
                singular: names
                    .singular
                    .clone()
                    .unwrap_or_else(|| names.kind.to_ascii_lowercase()),
                namespaced: spec.scope == "Namespaced",
                short_names: names.short_names.clone().unwrap_or_default(),
                categories: names.categories.clone().unwrap_or_default(),
                status_subresource: v.subresources.as_ref().is_some_and(|s| s.status.is_some()),
                custom: true,
                schema: v
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok())
                    .map(Arc::new),
            })
            .collect()
    }

    /// `apiVersion` of objects of this type (`v1`, `apps/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key shared by every version of the type.
    pub(crate) fn group_resource(&self) -> GroupResource {
        GroupResource {
            group: self.group.clone(),
            resource: self.plural.clone(),
        }
    }

    /// `deployments.apps`, `pods`: the name used in error messages.
    pub(crate) fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// Storage key of a resource type: group plus plural.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct GroupResource {
    pub group: String,
    pub resource: String,
}

/// The set of served types. Fixed when the server starts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Registry {
    types: Vec<ResourceType>,
}

impl Registry {
    /// The built-in types plus every FlexInfer CRD.
    pub fn standard() -> Self {
        let mut registry = Registry { types: builtins() };
        for crd in flexinfer_crds::manifests::crds() {
            for rt in ResourceType::from_crd(&crd) {
                registry.add(rt);
            }
        }
        registry
    }

    /// Adds a type, replacing one with the same group, version and plural.
    pub fn add(&mut self, rt: ResourceType) {
        self.types
            .retain(|t| !(t.group == rt.group && t.version == rt.version && t.plural == rt.plural));
        self.types.push(rt);
    }

    /// Removes a type, if served.
    pub fn remove(&mut self, group: &str, version: &str, plural: &str) {
        self.types
            .retain(|t| !(t.group == group && t.version == version && t.plural == plural));
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// The type of an object given its `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        let (group, version) = split_api_version(api_version);
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    /// Any served version of a group/resource (the first registered one).
    pub fn by_group_resource(&self, gr: &GroupResource) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == gr.group && t.plural == gr.resource)
    }

    /// Groups in registration order (core group excluded), each with its
    /// versions in registration order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in self.types.iter().filter(|t| !t.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) => {
                    if !versions.contains(&t.version) {
                        versions.push(t.version.clone());
                    }
                }
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        out
    }

    /// Types served under one group/version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }
}

/// `apps/v1` → (`apps`, `v1`); `v1` → (``, `v1`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

fn builtins() -> Vec<ResourceType> {
    use ResourceType as R;
    vec![
        R::builtin("", "v1", "Namespace", "namespaces", false, true).with_short_names(&["ns"]),
        R::builtin("", "v1", "Node", "nodes", false, true).with_short_names(&["no"]),
        R::builtin("", "v1", "Pod", "pods", true, true).with_short_names(&["po"]),
        R::builtin("", "v1", "Service", "services", true, true).with_short_names(&["svc"]),
        R::builtin("", "v1", "ConfigMap", "configmaps", true, false).with_short_names(&["cm"]),
        R::builtin("", "v1", "Secret", "secrets", true, false),
        R::builtin("", "v1", "Event", "events", true, false).with_short_names(&["ev"]),
        R::builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            true,
        )
        .with_short_names(&["pvc"]),
        R::builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            true,
        )
        .with_short_names(&["pv"]),
        R::builtin("", "v1", "ServiceAccount", "serviceaccounts", true, false)
            .with_short_names(&["sa"]),
        R::builtin("apps", "v1", "Deployment", "deployments", true, true)
            .with_short_names(&["deploy"]),
        R::builtin("apps", "v1", "ReplicaSet", "replicasets", true, true).with_short_names(&["rs"]),
        R::builtin("apps", "v1", "StatefulSet", "statefulsets", true, true)
            .with_short_names(&["sts"]),
        R::builtin("apps", "v1", "DaemonSet", "daemonsets", true, true).with_short_names(&["ds"]),
        R::builtin("batch", "v1", "Job", "jobs", true, true),
        R::builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            false,
        ),
        R::builtin("coordination.k8s.io", "v1", "Lease", "leases", true, false),
        R::builtin("events.k8s.io", "v1", "Event", "events", true, false).with_short_names(&["ev"]),
        R::builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
        )
        .with_short_names(&["crd", "crds"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flexinfer_crd_is_registered_with_its_scope() {
        let registry = Registry::standard();
        let model = registry
            .lookup("ai.flexinfer", "v1alpha2", "models")
            .expect("models registered");
        assert!(model.namespaced);
        assert!(model.status_subresource);
        assert!(model.custom);
        assert!(model.schema.is_some());
        for crd in flexinfer_crds::manifests::crds() {
            let version = &crd.spec.versions[0].name;
            let rt = registry
                .lookup(&crd.spec.group, version, &crd.spec.names.plural)
                .expect("crd registered");
            assert_eq!(rt.namespaced, crd.spec.scope == "Namespaced");
        }
    }

    #[test]
    fn kinds_resolve_by_api_version() {
        let registry = Registry::standard();
        assert_eq!(
            registry.by_kind("apps/v1", "Deployment").unwrap().plural,
            "deployments"
        );
        assert_eq!(registry.by_kind("v1", "Event").unwrap().group, "");
        assert_eq!(
            registry.by_kind("events.k8s.io/v1", "Event").unwrap().group,
            "events.k8s.io"
        );
        assert!(registry.by_kind("v1", "Nope").is_none());
    }
}
