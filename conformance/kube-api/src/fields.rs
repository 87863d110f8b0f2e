//! Field sets: which fields of an object a manager owns, and their
//! `fieldsV1` form in `metadata.managedFields`.
//!
//! A field path is a sequence of object fields (`f:name`), map-list items
//! (`k:{"name":"x"}`) and set-list values (`v:"x"`). A set holds leaf paths
//! (scalars, empty objects, atomic lists, set values) plus one path per
//! owned map-list item. Written as `fieldsV1` this is the same nesting as a
//! real API server's (`{"f:spec":{"f:replicas":{}}}`, `".": {}` for owned
//! items); positional `i:` elements are not produced.
//!
//! Only `metadata.labels`, `metadata.annotations`, `metadata.finalizers`
//! and `metadata.ownerReferences` are tracked under `metadata`; `apiVersion`
//! and `kind` are never tracked; `status` is tracked separately (with
//! `subresource: status`) for types that have a status subresource.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::registry::ResourceType;
use crate::typing::{item_key, ListType, TypeCursor};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PathElem {
    /// An object field.
    Field(String),
    /// A map-list item, by the JSON of its key fields.
    Key(String),
    /// A set-list value, by its JSON.
    Value(String),
}

pub(crate) type FieldPath = Vec<PathElem>;
pub(crate) type FieldSet = BTreeSet<FieldPath>;

/// Which part of an object a write (and its field set) covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The main resource; `status` excluded when the type has a status
    /// subresource.
    Main,
    /// The `/status` subresource: `status` only.
    Status,
}

/// Metadata fields that managers can own.
pub(crate) const OWNED_METADATA: [&str; 4] =
    ["labels", "annotations", "finalizers", "ownerReferences"];

/// Whether top-level field `name` belongs to `scope` for type `rt`.
pub(crate) fn in_scope(rt: &ResourceType, scope: Scope, name: &str) -> bool {
    match scope {
        Scope::Status => name == "status",
        Scope::Main => {
            let type_meta = matches!(name, "apiVersion" | "kind");
            let separate_status = name == "status" && rt.status_subresource;
            !type_meta && !separate_status
        }
    }
}

/// The fields `obj` sets, within `scope`.
pub(crate) fn field_set(obj: &Value, rt: &ResourceType, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(root) = obj.as_object() else {
        return out;
    };
    let cur = TypeCursor::root(rt);
    for (k, v) in root {
        if !in_scope(rt, scope, k) {
            continue;
        }
        let path = vec![PathElem::Field(k.clone())];
        if k == "metadata" {
            if let Some(meta) = v.as_object() {
                let mcur = cur.field("metadata");
                for f in OWNED_METADATA {
                    if let Some(mv) = meta.get(f) {
                        let mut p = path.clone();
                        p.push(PathElem::Field(f.to_string()));
                        walk_value(mv, f, mcur.field(f), p, &mut out);
                    }
                }
            }
            continue;
        }
        walk_value(v, k, cur.field(k), path, &mut out);
    }
    out
}

fn walk_value(v: &Value, name: &str, cur: TypeCursor<'_>, path: FieldPath, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => walk_object(m, cur, &path, out),
        Value::Array(items) => match cur.list_type(name, items.iter()) {
            ListType::Atomic => {
                out.insert(path);
            }
            ListType::Set => {
                for item in items {
                    let mut p = path.clone();
                    p.push(PathElem::Value(item.to_string()));
                    out.insert(p);
                }
            }
            ListType::Map(keys) => {
                let icur = cur.item();
                for item in items {
                    let Some(key) = item_key(item, &keys) else {
                        continue;
                    };
                    let mut p = path.clone();
                    p.push(PathElem::Key(key.to_string()));
                    if let Some(m) = item.as_object() {
                        walk_object(m, icur, &p, out);
                    }
                    out.insert(p);
                }
            }
        },
        // Null means "no opinion" in apply configurations.
        Value::Null => {}
        _ => {
            out.insert(path);
        }
    }
}

fn walk_object(m: &Map<String, Value>, cur: TypeCursor<'_>, path: &FieldPath, out: &mut FieldSet) {
    for (k, v) in m {
        let mut p = path.clone();
        p.push(PathElem::Field(k.clone()));
        walk_value(v, k, cur.field(k), p, out);
    }
}

/// The value at `path`, if present.
pub(crate) fn value_at<'a>(obj: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = obj;
    for elem in path {
        cur = step(cur, elem)?;
    }
    Some(cur)
}

fn step<'a>(cur: &'a Value, elem: &PathElem) -> Option<&'a Value> {
    match elem {
        PathElem::Field(f) => cur.get(f),
        PathElem::Key(k) => {
            let key: Value = serde_json::from_str(k).ok()?;
            let keys: Vec<String> = key.as_object()?.keys().cloned().collect();
            cur.as_array()?
                .iter()
                .find(|item| item_key(item, &keys).as_ref() == Some(&key))
        }
        PathElem::Value(v) => {
            let value: Value = serde_json::from_str(v).ok()?;
            cur.as_array()?.iter().find(|item| **item == value)
        }
    }
}

fn step_mut<'a>(cur: &'a mut Value, elem: &PathElem) -> Option<&'a mut Value> {
    match elem {
        PathElem::Field(f) => cur.get_mut(f),
        PathElem::Key(k) => {
            let key: Value = serde_json::from_str(k).ok()?;
            let keys: Vec<String> = key.as_object()?.keys().cloned().collect();
            cur.as_array_mut()?
                .iter_mut()
                .find(|item| item_key(item, &keys).as_ref() == Some(&key))
        }
        PathElem::Value(v) => {
            let value: Value = serde_json::from_str(v).ok()?;
            cur.as_array_mut()?.iter_mut().find(|item| **item == value)
        }
    }
}

/// Removes the field, item or value at `path`; returns whether something
/// was removed.
pub(crate) fn remove_at(obj: &mut Value, path: &[PathElem]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let mut parent = obj;
    for elem in parent_path {
        match step_mut(parent, elem) {
            Some(next) => parent = next,
            None => return false,
        }
    }
    match last {
        PathElem::Field(f) => parent
            .as_object_mut()
            .is_some_and(|m| m.remove(f).is_some()),
        PathElem::Key(_) | PathElem::Value(_) => {
            let Some(found) = step(parent, last).cloned() else {
                return false;
            };
            match parent.as_array_mut() {
                Some(items) => {
                    let before = items.len();
                    items.retain(|i| *i != found);
                    items.len() != before
                }
                None => false,
            }
        }
    }
}

/// `.spec.containers[name="app"].image`: a path for conflict messages.
pub(crate) fn display(path: &[PathElem]) -> String {
    let mut s = String::new();
    for elem in path {
        match elem {
            PathElem::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElem::Key(k) => {
                let key: Value = serde_json::from_str(k).unwrap_or(Value::Null);
                let parts: Vec<String> = key
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            PathElem::Value(v) => s.push_str(&format!("[={v}]")),
        }
    }
    s
}

/// The `fieldsV1` object of a set.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for elem in path {
            let key = match elem {
                PathElem::Field(f) => format!("f:{f}"),
                PathElem::Key(k) => format!("k:{k}"),
                PathElem::Value(v) => format!("v:{v}"),
            };
            let child = node.entry(key).or_insert_with(|| Value::Object(Map::new()));
            if !child.is_object() {
                *child = Value::Object(Map::new());
            }
            node = child.as_object_mut().expect("object ensured above");
        }
        if matches!(path.last(), Some(PathElem::Key(_))) {
            node.insert(".".into(), Value::Object(Map::new()));
        }
    }
    Value::Object(root)
}

/// The set written as `fieldsV1` (unknown element kinds are skipped).
pub(crate) fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    if let Some(m) = v.as_object() {
        parse_node(m, &mut Vec::new(), &mut out);
    }
    out
}

fn parse_node(m: &Map<String, Value>, path: &mut FieldPath, out: &mut FieldSet) {
    for (k, child) in m {
        if k == "." {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            continue;
        }
        let elem = if let Some(f) = k.strip_prefix("f:") {
            PathElem::Field(f.to_string())
        } else if let Some(key) = k.strip_prefix("k:") {
            PathElem::Key(key.to_string())
        } else if let Some(val) = k.strip_prefix("v:") {
            PathElem::Value(val.to_string())
        } else {
            continue;
        };
        path.push(elem);
        match child.as_object() {
            Some(cm) if !cm.is_empty() => parse_node(cm, path, out),
            _ => {
                out.insert(path.clone());
            }
        }
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> ResourceType {
        ResourceType::builtin("apps", "v1", "Deployment", "deployments", true, true)
    }

    #[test]
    fn field_sets_round_trip_through_fields_v1() {
        let obj = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"a": "b"}, "finalizers": ["x"]},
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [{"name": "app", "image": "i", "ports": [{"containerPort": 80}]}]}}
            },
            "status": {"replicas": 2}
        });
        let set = field_set(&obj, &deployment(), Scope::Main);
        let v1 = to_fields_v1(&set);
        assert_eq!(v1["f:spec"]["f:replicas"], json!({}));
        assert!(v1["f:metadata"]["f:finalizers"]["v:\"x\""].is_object());
        let item = &v1["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"];
        assert_eq!(item["."], json!({}));
        assert_eq!(item["f:image"], json!({}));
        assert!(v1.get("f:status").is_none());
        assert!(v1["f:metadata"].get("f:name").is_none());
        assert_eq!(from_fields_v1(&v1), set);

        let status = field_set(&obj, &deployment(), Scope::Status);
        assert_eq!(status.len(), 1);
    }

    #[test]
    fn values_and_removal_by_path() {
        let mut obj = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]}});
        let rt = deployment();
        let set = field_set(&obj, &rt, Scope::Main);
        let image = set
            .iter()
            .find(|p| p.last() == Some(&PathElem::Field("image".into())))
            .unwrap()
            .clone();
        assert_eq!(value_at(&obj, &image), Some(&json!("x")));
        assert_eq!(display(&image), ".spec.containers[name=\"a\"].image");
        assert!(remove_at(&mut obj, &image));
        assert_eq!(obj["spec"]["containers"][0], json!({"name": "a"}));
        let item_b = vec![
            PathElem::Field("spec".into()),
            PathElem::Field("containers".into()),
            PathElem::Key(json!({"name": "b"}).to_string()),
        ];
        assert!(remove_at(&mut obj, &item_b));
        assert_eq!(obj["spec"]["containers"].as_array().unwrap().len(), 1);
        assert!(!remove_at(&mut obj, &item_b));
    }
}
