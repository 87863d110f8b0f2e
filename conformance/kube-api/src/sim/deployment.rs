//! A simulated Deployment controller (opt-in).
//!
//! For every Deployment it keeps `spec.replicas` (default 1) Pods, named
//! `<deployment>-<suffix>`, labelled and specced from the pod template and
//! owned by the Deployment (no ReplicaSet in between). Pods start
//! `Running` with `podIP` and `hostIP` 127.0.0.1 and `Ready=False`, and turn
//! `Ready=True` after the configured delay. When the template changes,
//! Pods of the old template are replaced all at once (no rolling update,
//! no surge). The Deployment's status follows: `replicas`,
//! `updatedReplicas`, `readyReplicas`, `availableReplicas`,
//! `observedGeneration` and an `Available` condition.
//!
//! Pods matching the selector of the simulated kubelet (when it is on)
//! start `Pending` without an address instead; the kubelet runs them and
//! writes their status.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::fields::Scope;
use crate::meta;
use crate::registry::ResourceType;
use crate::selector::LabelSelector;
use crate::store::{owner_reference, State, Store};

const MANAGER: &str = "deployment-controller";
/// Annotation on simulated Pods naming the template they were made from.
pub const TEMPLATE_HASH_ANNOTATION: &str = "testkube.flexinfer.ai/template-hash";

/// Selector of the Pods the simulated kubelet runs, if it is on.
pub(crate) type KubeletPods = Arc<RwLock<Option<LabelSelector>>>;

/// Runs the controller until `shutdown` flips.
pub(crate) async fn run(
    store: Arc<Store>,
    ready_after: Duration,
    kubelet: KubeletPods,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut changes = store.subscribe();
    let mut ready_at: HashMap<String, Instant> = HashMap::new();
    loop {
        let kubelet = kubelet.read().unwrap_or_else(|e| e.into_inner()).clone();
        let next = reconcile(&store, ready_after, kubelet.as_ref(), &mut ready_at);
        let far = Instant::now() + Duration::from_secs(86_400);
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            _ = tokio::time::sleep_until(next.unwrap_or(far)) => {}
            _ = shutdown.changed() => break,
        }
    }
}

fn types(store: &Store) -> Option<(ResourceType, ResourceType)> {
    Some((
        store.registry.lookup("apps", "v1", "deployments")?.clone(),
        store.registry.lookup("", "v1", "pods")?.clone(),
    ))
}

fn template_hash(template: &Value) -> String {
    let mut h = DefaultHasher::new();
    template.to_string().hash(&mut h);
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// One pass over every Deployment; returns when the next Pod turns ready.
fn reconcile(
    store: &Store,
    ready_after: Duration,
    kubelet: Option<&LabelSelector>,
    ready_at: &mut HashMap<String, Instant>,
) -> Option<Instant> {
    let (deploy_rt, pod_rt) = types(store)?;
    store.with_state(|store, st| {
        let now = Instant::now();
        let pods = st.objects_of(&pod_rt.group_resource());
        for (_, d) in st.objects_of(&deploy_rt.group_resource()) {
            if meta::is_deleting(&d) {
                continue;
            }
            reconcile_one(
                store,
                st,
                &deploy_rt,
                &pod_rt,
                &d,
                &pods,
                now,
                ready_after,
                kubelet,
                ready_at,
            );
        }
        // Forget pods that are gone.
        ready_at.retain(|uid, _| st.uid_exists(uid));
        ready_at.values().filter(|t| **t > now).min().copied()
    })
}

#[allow(clippy::too_many_arguments)]
fn reconcile_one(
    store: &Store,
    st: &mut State,
    deploy_rt: &ResourceType,
    pod_rt: &ResourceType,
    d: &Value,
    pods: &[((String, String), Value)],
    now: Instant,
    ready_after: Duration,
    kubelet: Option<&LabelSelector>,
    ready_at: &mut HashMap<String, Instant>,
) {
    let ns = meta::meta_str(d, "namespace")
        .unwrap_or_default()
        .to_string();
    let uid = meta::meta_str(d, "uid").unwrap_or_default().to_string();
    let name = meta::meta_str(d, "name").unwrap_or_default().to_string();
    let desired = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0) as usize;
    let template = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let hash = template_hash(&template);
    let by_kubelet = kubelet.is_some_and(|sel| {
        sel.matches(
            template
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
        )
    });

    let owned: Vec<&Value> = pods
        .iter()
        .filter(|((pns, _), p)| {
            *pns == ns && meta::owner_uids(p).contains(&uid) && !meta::is_deleting(p)
        })
        .map(|(_, p)| p)
        .collect();
    let (current, stale): (Vec<&Value>, Vec<&Value>) = owned.iter().partition(|p| {
        p.pointer(&format!(
            "/metadata/annotations/{}",
            TEMPLATE_HASH_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)
            == Some(hash.as_str())
    });
    for p in &stale {
        let key = (
            ns.clone(),
            meta::meta_str(p, "name").unwrap_or_default().to_string(),
        );
        store.delete_internal(st, pod_rt, &key);
    }
    let mut current: Vec<Value> = current.into_iter().cloned().collect();
    // Scale down: newest first.
    current.sort_by(|a, b| {
        meta::meta_str(a, "creationTimestamp")
            .cmp(&meta::meta_str(b, "creationTimestamp"))
            .then(meta::meta_str(a, "name").cmp(&meta::meta_str(b, "name")))
    });
    while current.len() > desired {
        if let Some(p) = current.pop() {
            let key = (
                ns.clone(),
                meta::meta_str(&p, "name").unwrap_or_default().to_string(),
            );
            store.delete_internal(st, pod_rt, &key);
        }
    }
    while current.len() < desired {
        let mut annotations = template
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        annotations.insert(TEMPLATE_HASH_ANNOTATION.into(), json!(hash));
        let status = if by_kubelet {
            json!({
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
            })
        } else {
            json!({
                "phase": "Running",
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "hostIP": "127.0.0.1",
                "startTime": meta::now(),
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"},
                    {"type": "ContainersReady", "status": "False"},
                ],
            })
        };
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": format!("{name}-"),
                "namespace": ns,
                "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                "annotations": annotations,
                "ownerReferences": [owner_reference(deploy_rt, d)],
            },
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
            "status": status,
        });
        match store.create_internal(st, pod_rt, pod, MANAGER) {
            Ok(created) => {
                if let Some(uid) = meta::meta_str(&created, "uid").filter(|_| !by_kubelet) {
                    ready_at.insert(uid.to_string(), now + ready_after);
                }
                current.push(created);
            }
            Err(e) => {
                tracing::warn!(error = %e, "simulated deployment controller could not create a pod");
                break;
            }
        }
    }
    // Readiness after the delay.
    let mut ready = 0;
    for p in current.iter_mut() {
        let Some(puid) = meta::meta_str(p, "uid").map(str::to_string) else {
            continue;
        };
        if pod_ready(p) {
            ready += 1;
            continue;
        }
        if by_kubelet {
            continue;
        }
        let at = *ready_at.entry(puid).or_insert(now + ready_after);
        if at <= now {
            let mut new = p.clone();
            if let Some(cs) = new
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
            {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    if c.get("type")
                        .is_some_and(|t| t == "Ready" || t == "ContainersReady")
                    {
                        c.insert("status".into(), json!("True"));
                    }
                }
            }
            if let Ok(updated) =
                store.update_internal(st, pod_rt, p.clone(), new, Scope::Status, MANAGER)
            {
                *p = updated;
                ready += 1;
            }
        }
    }
    let mut new = d.clone();
    let available = ready >= desired;
    new["status"] = json!({
        "observedGeneration": d.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": current.len(),
        "updatedReplicas": current.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": desired.saturating_sub(ready),
        "conditions": [{
            "type": "Available",
            "status": if available { "True" } else { "False" },
            "reason": if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
        }],
    });
    // Kubernetes omits zero counts.
    if let Some(s) = new["status"].as_object_mut() {
        s.retain(|_, v| v != &json!(0));
    }
    if let Err(e) = store.update_internal(st, deploy_rt, d.clone(), new, Scope::Status, MANAGER) {
        tracing::warn!(error = %e, "simulated deployment controller could not write status");
    }
}
