//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`,
//! `/apis/<group>`, `/apis/<group>/<version>`, and the aggregated form of
//! `/api` and `/apis` (`apidiscovery.k8s.io/v2`) that kube's
//! `Discovery::run_aggregated` asks for.

use serde_json::{json, Value};

use crate::registry::{Registry, ResourceType};

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-flexinfer-testkube",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "none",
        "compiler": "none",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub(crate) fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .map(|(g, vs)| {
            let mut doc = group_doc(g, vs);
            if let Some(o) = doc.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            doc
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub(crate) fn group(registry: &Registry, group: &str) -> Option<Value> {
    registry
        .groups()
        .into_iter()
        .find(|(g, _)| g == group)
        .map(|(g, vs)| group_doc(&g, &vs))
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for rt in registry.in_group_version(group, version) {
        resources.push(json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
            "shortNames": rt.short_names,
            "categories": rt.categories,
        }));
        if rt.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

fn aggregated_resource(rt: &ResourceType) -> Value {
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let mut subresources = Vec::new();
    if rt.status_subresource {
        subresources.push(json!({
            "subresource": "status",
            "responseKind": gvk,
            "verbs": ["get", "patch", "update"],
        }));
    }
    json!({
        "resource": rt.plural,
        "responseKind": gvk,
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": VERBS,
        "shortNames": rt.short_names,
        "categories": rt.categories,
        "subresources": subresources,
    })
}

fn aggregated_group(registry: &Registry, group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = registry
                .in_group_version(group, v)
                .map(aggregated_resource)
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group}, "versions": vs})
}

/// Aggregated discovery of `/apis` (`core == false`) or `/api`.
pub(crate) fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(registry, "", &["v1".to_string()])]
    } else {
        registry
            .groups()
            .iter()
            .map(|(g, vs)| aggregated_group(registry, g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// Whether an `Accept` header asks for aggregated discovery.
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    accept.contains("as=APIGroupDiscoveryList")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_groups_and_resources() {
        let r = Registry::standard();
        let g = groups(&r);
        let names: Vec<&str> = g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"apps"));
        assert!(names.contains(&"ai.flexinfer"));
        let core = resources(&r, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        assert!(core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods/status"));
        assert!(resources(&r, "nope", "v1").is_none());
        let agg = aggregated(&r, false);
        assert!(agg["items"].as_array().unwrap().len() >= 5);
    }
}
