//! Patch formats: JSON merge patch (RFC 7386), strategic merge patch, JSON
//! patch (RFC 6902), and the merge step of server-side apply.
//!
//! Strategic merge patch is a merge patch in which lists typed as map or
//! set (see [`crate::typing`]) are merged instead of replaced: map-list
//! items are matched by key and merged recursively, set values are added.
//! Supported directives: `$patch: replace` and `$patch: delete` on objects
//! and map-list items, `$retainKeys`, `$deleteFromPrimitiveList/<field>`;
//! `$setElementOrder/<field>` is accepted and ignored. As upstream, custom
//! resources reject strategic merge patches (415).

use serde_json::{Map, Value};

use crate::typing::{item_key, ListType, TypeCursor};

/// Applies an RFC 7386 merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(pm) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let tm = target.as_object_mut().expect("object ensured above");
            for (k, v) in pm {
                if v.is_null() {
                    tm.remove(k);
                } else {
                    merge_patch(tm.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Applies an RFC 6902 JSON patch; the error is the message for a 422.
///
/// As the API server does, a `test` of `null` passes when the path is
/// absent (kube-runtime's finalizer helper relies on it to add the first
/// finalizer). The patch is atomic: on error the target is unchanged.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    let mut work = target.clone();
    for op in ops.0 {
        if let json_patch::PatchOperation::Test(t) = &op {
            if t.value.is_null() && work.pointer(t.path.as_str()).is_none() {
                continue;
            }
        }
        json_patch::patch(&mut work, &[op]).map_err(|e| e.to_string())?;
    }
    *target = work;
    Ok(())
}

/// Applies a strategic merge patch.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value, cur: TypeCursor<'_>) {
    let Some(pm) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = Value::Object(without_directives(pm));
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let tm = target.as_object_mut().expect("object ensured above");
    if let Some(retain) = pm.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        tm.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in pm {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(del)) = (tm.get_mut(field), v.as_array()) {
                items.retain(|i| !del.contains(i));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        let child_cur = cur.field(k);
        match v {
            Value::Null => {
                tm.remove(k);
            }
            Value::Object(vm) if vm.get("$patch").and_then(Value::as_str) == Some("delete") => {
                tm.remove(k);
            }
            Value::Object(_) => {
                strategic_merge(tm.entry(k.clone()).or_insert(Value::Null), v, child_cur);
            }
            Value::Array(patch_items) => {
                let existing = tm
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let lt = child_cur.list_type(k, existing.iter().chain(patch_items.iter()));
                let merged = merge_list_strategic(existing, patch_items, &lt, child_cur.item());
                tm.insert(k.clone(), Value::Array(merged));
            }
            scalar => {
                tm.insert(k.clone(), scalar.clone());
            }
        }
    }
}

fn merge_list_strategic(
    mut existing: Vec<Value>,
    patch_items: &[Value],
    lt: &ListType,
    item_cur: TypeCursor<'_>,
) -> Vec<Value> {
    match lt {
        ListType::Atomic => patch_items
            .iter()
            .map(|i| match i.as_object() {
                Some(m) => Value::Object(without_directives(m)),
                None => i.clone(),
            })
            .collect(),
        ListType::Set => {
            for item in patch_items {
                if !existing.contains(item) {
                    existing.push(item.clone());
                }
            }
            existing
        }
        ListType::Map(keys) => {
            if patch_items.iter().any(|i| {
                i.get("$patch").and_then(Value::as_str) == Some("replace")
                    && i.as_object().is_some_and(|m| m.len() == 1)
            }) {
                // `[{"$patch": "replace"}, ...items]` replaces the whole list.
                return patch_items
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .cloned()
                    .collect();
            }
            for item in patch_items {
                let Some(key) = item_key(item, keys) else {
                    existing.push(item.clone());
                    continue;
                };
                let pos = existing
                    .iter()
                    .position(|e| item_key(e, keys).as_ref() == Some(&key));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(p), true) => {
                        existing.remove(p);
                    }
                    (None, true) => {}
                    (Some(p), false) => strategic_merge(&mut existing[p], item, item_cur),
                    (None, false) => {
                        let mut fresh = Value::Null;
                        strategic_merge(&mut fresh, item, item_cur);
                        existing.push(fresh);
                    }
                }
            }
            existing
        }
    }
}

fn without_directives(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Merges an apply configuration into an object: objects recursively,
/// map lists by key, set lists by value, everything else replaced. Nulls in
/// the configuration mean "no opinion" and are skipped.
pub(crate) fn apply_merge(target: &mut Value, config: &Value, cur: TypeCursor<'_>) {
    let Some(cm) = config.as_object() else {
        if !config.is_null() {
            *target = config.clone();
        }
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let tm = target.as_object_mut().expect("object ensured above");
    for (k, v) in cm {
        let child_cur = cur.field(k);
        match v {
            Value::Null => {}
            Value::Object(_) => {
                apply_merge(tm.entry(k.clone()).or_insert(Value::Null), v, child_cur)
            }
            Value::Array(items) => {
                let existing = tm
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let lt = child_cur.list_type(k, existing.iter().chain(items.iter()));
                let merged = match lt {
                    ListType::Atomic => items.clone(),
                    ListType::Set => {
                        let mut out = existing;
                        for i in items {
                            if !out.contains(i) {
                                out.push(i.clone());
                            }
                        }
                        out
                    }
                    ListType::Map(keys) => {
                        let mut out = existing;
                        let icur = child_cur.item();
                        for item in items {
                            let key = item_key(item, &keys);
                            let pos = key.as_ref().and_then(|key| {
                                out.iter()
                                    .position(|e| item_key(e, &keys).as_ref() == Some(key))
                            });
                            match pos {
                                Some(p) => apply_merge(&mut out[p], item, icur),
                                None => {
                                    let mut fresh = Value::Null;
                                    apply_merge(&mut fresh, item, icur);
                                    out.push(fresh);
                                }
                            }
                        }
                        out
                    }
                };
                tm.insert(k.clone(), Value::Array(merged));
            }
            scalar => {
                tm.insert(k.clone(), scalar.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ResourceType;
    use serde_json::json;

    fn pod() -> ResourceType {
        ResourceType::builtin("", "v1", "Pod", "pods", true, true)
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let rt = pod();
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}], "args": ["x"]}});
        strategic_merge(
            &mut t,
            &json!({"spec": {
                "containers": [{"name": "b", "image": "3"}, {"name": "c", "image": "4"}],
                "$setElementOrder/containers": [{"name": "a"}],
                "args": ["y"]
            }}),
            TypeCursor::root(&rt),
        );
        assert_eq!(
            t["spec"]["containers"],
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "3"}, {"name": "c", "image": "4"}])
        );
        assert_eq!(t["spec"]["args"], json!(["y"]));
        strategic_merge(
            &mut t,
            &json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}, "metadata": {"finalizers": ["f"]}}),
            TypeCursor::root(&rt),
        );
        assert_eq!(t["spec"]["containers"].as_array().unwrap().len(), 2);
        strategic_merge(
            &mut t,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f"]}}),
            TypeCursor::root(&rt),
        );
        assert_eq!(t["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn json_patch_reports_errors() {
        let mut t = json!({"a": 1});
        json_patch(
            &mut t,
            &json!([{"op": "replace", "path": "/a", "value": 2}]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": 2}));
        assert!(json_patch(&mut t, &json!([{"op": "test", "path": "/a", "value": 3}])).is_err());
        assert!(json_patch(&mut t, &json!({"not": "a patch"})).is_err());
        // A failed op leaves the target unchanged.
        assert!(json_patch(
            &mut t,
            &json!([{"op": "replace", "path": "/a", "value": 5}, {"op": "test", "path": "/a", "value": 3}])
        )
        .is_err());
        assert_eq!(t, json!({"a": 2}));
    }

    #[test]
    fn json_patch_test_of_null_passes_on_a_missing_path() {
        let mut t = json!({"metadata": {"name": "m"}});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
            ]),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f"]));
        // A present value is still compared.
        assert!(json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}])
        )
        .is_err());
    }

    #[test]
    fn apply_merge_keeps_other_items() {
        let rt = pod();
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "1"}]}});
        apply_merge(
            &mut t,
            &json!({"spec": {"containers": [{"name": "b", "image": "2"}], "x": null}}),
            TypeCursor::root(&rt),
        );
        assert_eq!(t["spec"]["containers"].as_array().unwrap().len(), 2);
        assert!(t["spec"].get("x").is_none());
    }
}
