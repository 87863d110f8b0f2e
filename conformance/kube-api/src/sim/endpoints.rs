//! A simulated EndpointSlice controller (opt-in).
//!
//! For every Service with a `spec.selector`, it maintains EndpointSlices
//! (`addressType: IPv4`, labelled `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`,
//! owned by the Service) listing the selected Pods that have a
//! `status.podIP`. `conditions.ready`/`serving` follow the Pod's `Ready`
//! condition; Pods being deleted are `terminating`. Ports come from the
//! Service: a numeric `targetPort` is used as is, a named one is resolved
//! against each Pod's container ports, and Pods that resolve to different
//! port numbers go into different slices (as upstream). So a Pod with
//! `podIP: 127.0.0.1` and a container port where a test process listens
//! makes the slice point at that process.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::fields::Scope;
use crate::meta;
use crate::registry::ResourceType;
use crate::selector::LabelSelector;
use crate::store::{owner_reference, State, Store};

const MANAGER: &str = "endpointslice-controller";
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// Runs the controller until `shutdown` flips.
pub(crate) async fn run(store: Arc<Store>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut changes = store.subscribe();
    loop {
        reconcile(&store);
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
}

struct Types {
    service: ResourceType,
    pod: ResourceType,
    slice: ResourceType,
}

fn types(store: &Store) -> Option<Types> {
    Some(Types {
        service: store.registry.lookup("", "v1", "services")?.clone(),
        pod: store.registry.lookup("", "v1", "pods")?.clone(),
        slice: store
            .registry
            .lookup("discovery.k8s.io", "v1", "endpointslices")?
            .clone(),
    })
}

/// One pass over every Service.
pub(crate) fn reconcile(store: &Store) {
    let Some(t) = types(store) else {
        return;
    };
    store.with_state(|store, st| {
        let pods = st.objects_of(&t.pod.group_resource());
        let slices = st.objects_of(&t.slice.group_resource());
        let services = st.objects_of(&t.service.group_resource());
        for ((ns, name), svc) in &services {
            let existing: Vec<&Value> = slices
                .iter()
                .filter(|((sns, _), s)| {
                    sns == ns
                        && s.pointer("/metadata/labels")
                            .and_then(|l| l.get(SERVICE_NAME_LABEL))
                            .and_then(Value::as_str)
                            == Some(name.as_str())
                        && s.pointer("/metadata/labels")
                            .and_then(|l| l.get(MANAGED_BY_LABEL))
                            .and_then(Value::as_str)
                            == Some(MANAGED_BY)
                })
                .map(|(_, s)| s)
                .collect();
            let Some(selector) = svc.pointer("/spec/selector").and_then(Value::as_object) else {
                continue;
            };
            if selector.is_empty() || meta::is_deleting(svc) {
                continue;
            }
            let desired =
                desired_slices(&t, svc, ns, name, &LabelSelector::from_map(selector), &pods);
            sync(store, st, &t.slice, ns, &existing, desired);
        }
    });
}

fn resolve_port(port: &Value, pod: &Value) -> Option<i64> {
    match port.get("targetPort") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(named)) => {
            if let Ok(n) = named.parse::<i64>() {
                return Some(n);
            }
            pod.pointer("/spec/containers")
                .and_then(Value::as_array)?
                .iter()
                .flat_map(|c| {
                    c.get("ports")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .find(|p| p.get("name").and_then(Value::as_str) == Some(named.as_str()))
                .and_then(|p| p.get("containerPort").and_then(Value::as_i64))
        }
        _ => port.get("port").and_then(Value::as_i64),
    }
}

fn desired_slices(
    t: &Types,
    svc: &Value,
    ns: &str,
    name: &str,
    selector: &LabelSelector,
    pods: &[((String, String), Value)],
) -> BTreeMap<String, Value> {
    let svc_ports: Vec<Value> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Port set (JSON) -> endpoints.
    let mut groups: BTreeMap<String, (Value, Vec<Value>)> = BTreeMap::new();
    for ((pns, _), pod) in pods {
        if pns != ns || !selector.matches(meta::labels(pod)) {
            continue;
        }
        let Some(ip) = pod.pointer("/status/podIP").and_then(Value::as_str) else {
            continue;
        };
        let ports: Vec<Value> = svc_ports
            .iter()
            .filter_map(|p| {
                let port = resolve_port(p, pod)?;
                let mut out = json!({
                    "port": port,
                    "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP")),
                });
                if let Some(n) = p.get("name") {
                    out["name"] = n.clone();
                } else {
                    out["name"] = json!("");
                }
                if let Some(ap) = p.get("appProtocol") {
                    out["appProtocol"] = ap.clone();
                }
                Some(out)
            })
            .collect();
        let ports = Value::Array(ports);
        let terminating = meta::is_deleting(pod);
        let ready = !terminating
            && pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
        let mut endpoint = json!({
            "addresses": [ip],
            "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
            "targetRef": {
                "kind": "Pod",
                "namespace": ns,
                "name": meta::meta_str(pod, "name").unwrap_or_default(),
                "uid": meta::meta_str(pod, "uid").unwrap_or_default(),
            },
        });
        if let Some(node) = pod.pointer("/spec/nodeName") {
            endpoint["nodeName"] = node.clone();
        }
        groups
            .entry(ports.to_string())
            .or_insert_with(|| (ports.clone(), Vec::new()))
            .1
            .push(endpoint);
    }
    if groups.is_empty() {
        groups.insert(String::new(), (Value::Null, Vec::new()));
    }
    groups
        .into_iter()
        .map(|(key, (ports, endpoints))| {
            let mut h = DefaultHasher::new();
            key.hash(&mut h);
            let slice_name = format!("{name}-{:05x}", h.finish() & 0xfffff);
            let mut slice = json!({
                "apiVersion": t.slice.api_version(),
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name,
                    "namespace": ns,
                    "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
                    "ownerReferences": [owner_reference(&t.service, svc)],
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
            });
            if !ports.is_null() {
                slice["ports"] = ports;
            }
            (slice_name, slice)
        })
        .collect()
}

fn sync(
    store: &Store,
    st: &mut State,
    slice_rt: &ResourceType,
    ns: &str,
    existing: &[&Value],
    mut desired: BTreeMap<String, Value>,
) {
    for old in existing {
        let name = meta::meta_str(old, "name").unwrap_or_default().to_string();
        match desired.remove(&name) {
            Some(want) => {
                let mut new = (*old).clone();
                if let Some(o) = new.as_object_mut() {
                    for k in ["addressType", "endpoints", "ports"] {
                        match want.get(k) {
                            Some(v) => o.insert(k.into(), v.clone()),
                            None => o.remove(k),
                        };
                    }
                }
                if new != **old {
                    if let Err(e) = store.update_internal(
                        st,
                        slice_rt,
                        (*old).clone(),
                        new,
                        Scope::Main,
                        MANAGER,
                    ) {
                        tracing::warn!(error = %e, "simulated endpointslice controller could not update a slice");
                    }
                }
            }
            None => store.delete_internal(st, slice_rt, &(ns.to_string(), name)),
        }
    }
    for (_, slice) in desired {
        if let Err(e) = store.create_internal(st, slice_rt, slice, MANAGER) {
            tracing::warn!(error = %e, "simulated endpointslice controller could not create a slice");
        }
    }
}
