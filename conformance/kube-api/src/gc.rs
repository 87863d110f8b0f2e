//! Background garbage collection and namespace termination.
//!
//! After every write the collector looks for:
//!
//! - objects whose `ownerReferences` all name UIDs that no longer exist:
//!   deleted (background propagation; their own finalizers still apply);
//! - objects being deleted with the `orphan` finalizer (deleted with
//!   `propagationPolicy: Orphan`): the owner reference is removed from
//!   their dependents, then the finalizer;
//! - objects being deleted with the `foregroundDeletion` finalizer
//!   (`propagationPolicy: Foreground`): dependents are deleted, and the
//!   finalizer removed once none that blocks its owner's deletion
//!   (`blockOwnerDeletion: true`) is left;
//! - namespaces being deleted: everything in them is deleted, and the
//!   namespace removed once it is empty.
//!
//! Owners are matched by UID only (upstream also checks kind and name).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::fields::Scope;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::{ObjKey, State, Store};

const MANAGER: &str = "generic-garbage-collector";

/// Runs the collector until `shutdown` flips.
pub(crate) async fn run(store: Arc<Store>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut changes = store.subscribe();
    loop {
        collect(&store);
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
}

/// One collection, repeated until nothing is left to do.
pub(crate) fn collect(store: &Store) {
    store.with_state(|store, st| {
        for _ in 0..32 {
            if !pass(store, st) {
                break;
            }
        }
    });
}

type Ref = (GroupResource, ObjKey);

fn pass(store: &Store, st: &mut State) -> bool {
    let mut dependents: HashMap<String, Vec<Ref>> = HashMap::new();
    let mut dangling: Vec<Ref> = Vec::new();
    let mut orphaning: Vec<(Ref, String)> = Vec::new();
    let mut foreground: Vec<(Ref, String)> = Vec::new();
    let mut namespaces: Vec<String> = Vec::new();
    for (gr, key, obj) in st.all_objects() {
        let owners = meta::owner_uids(obj);
        for uid in &owners {
            dependents
                .entry(uid.clone())
                .or_default()
                .push((gr.clone(), key.clone()));
        }
        if !owners.is_empty() && !meta::is_deleting(obj) && owners.iter().all(|u| !st.uid_exists(u))
        {
            dangling.push((gr.clone(), key.clone()));
        }
        if meta::is_deleting(obj) {
            let uid = meta::meta_str(obj, "uid").unwrap_or_default().to_string();
            let finalizers = meta::finalizers(obj);
            if finalizers.iter().any(|f| f == "orphan") {
                orphaning.push(((gr.clone(), key.clone()), uid.clone()));
            }
            if finalizers.iter().any(|f| f == "foregroundDeletion") {
                foreground.push(((gr.clone(), key.clone()), uid));
            }
            if gr.group.is_empty() && gr.resource == "namespaces" {
                namespaces.push(key.1.clone());
            }
        }
    }
    let mut changed = false;
    for r in dangling {
        changed |= delete(store, st, &r);
    }
    for (owner, uid) in orphaning {
        for dep in dependents.get(&uid).cloned().unwrap_or_default() {
            changed |= edit(store, st, &dep, |obj| {
                if let Some(refs) = obj
                    .get_mut("metadata")
                    .and_then(|m| m.get_mut("ownerReferences"))
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                }
                // As upstream, no owner left means no `ownerReferences`.
                if meta::owner_uids(obj).is_empty() {
                    meta::meta_mut(obj).remove("ownerReferences");
                }
            });
        }
        changed |= remove_finalizer(store, st, &owner, "orphan");
    }
    for (owner, uid) in foreground {
        let deps: Vec<Ref> = dependents
            .get(&uid)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|d| st.get(&d.0, &d.1).is_some())
            .collect();
        let blocking = deps.iter().any(|d| {
            st.get(&d.0, &d.1)
                .is_some_and(|dep| meta::blocks_owner_deletion(dep, &uid))
        });
        for d in &deps {
            changed |= delete(store, st, d);
        }
        if !blocking {
            changed |= remove_finalizer(store, st, &owner, "foregroundDeletion");
        }
    }
    for ns in namespaces {
        let contents: Vec<Ref> = st
            .all_objects()
            .filter(|(gr, key, _)| {
                !key.0.is_empty()
                    && key.0 == ns
                    && !(gr.group.is_empty() && gr.resource == "namespaces")
            })
            .map(|(gr, key, _)| (gr.clone(), key.clone()))
            .collect();
        if contents.is_empty() {
            let key: ObjKey = (String::new(), ns.clone());
            let ns_gr = GroupResource {
                group: String::new(),
                resource: "namespaces".into(),
            };
            let finalizers = st
                .get(&ns_gr, &key)
                .map(meta::finalizers)
                .unwrap_or_default();
            if finalizers.is_empty() {
                if let Some(rt) = store.registry.by_group_resource(&ns_gr).cloned() {
                    store.remove_locked(st, &rt, &key);
                    changed = true;
                }
            }
        } else {
            for r in contents {
                changed |= delete(store, st, &r);
            }
        }
    }
    changed
}

fn delete(store: &Store, st: &mut State, r: &Ref) -> bool {
    let Some(obj) = st.get(&r.0, &r.1) else {
        return false;
    };
    if meta::is_deleting(obj) {
        return false;
    }
    let Some(rt) = store.registry.by_group_resource(&r.0).cloned() else {
        return false;
    };
    let before = st.rv;
    store.delete_internal(st, &rt, &r.1);
    st.rv != before
}

fn edit(store: &Store, st: &mut State, r: &Ref, f: impl FnOnce(&mut Value)) -> bool {
    let Some(old) = st.get(&r.0, &r.1).cloned() else {
        return false;
    };
    let Some(rt) = store.registry.by_group_resource(&r.0).cloned() else {
        return false;
    };
    let mut new = old.clone();
    f(&mut new);
    if new == old {
        return false;
    }
    let before = st.rv;
    let _ = store.update_internal(st, &rt, old, new, Scope::Main, MANAGER);
    st.rv != before
}

fn remove_finalizer(store: &Store, st: &mut State, r: &Ref, finalizer: &str) -> bool {
    edit(store, st, r, |obj| {
        let rest: Vec<String> = meta::finalizers(obj)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        let m = meta::meta_mut(obj);
        if rest.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(rest));
        }
    })
}
