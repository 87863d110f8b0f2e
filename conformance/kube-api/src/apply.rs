//! Server-side apply and `metadata.managedFields`.
//!
//! Every write records which manager set which fields:
//!
//! - Apply (`PATCH` with `application/apply-patch+yaml`): the manager's
//!   `Apply` entry becomes exactly the fields of its configuration. Fields
//!   it applied before and no longer applies are removed from the object
//!   unless another manager also owns them. Changing a field another
//!   manager owns to a different value is a conflict (409 with one
//!   `FieldManagerConflict` cause per field) unless `force=true`, which
//!   takes the field over. Setting it to the value it already has makes
//!   the ownership shared.
//! - Create, update and non-apply patches: the manager's `Update` entry
//!   gains every field whose value the write changed; those fields leave
//!   every other manager's set.
//!
//! Applying a configuration that changes neither the object nor anyone's
//! field set is a no-op: nothing is written and `resourceVersion` stays.
//! Entries are keyed by manager, operation and subresource, as upstream.
//! Approximations: field sets are computed from the objects themselves
//! (see [`crate::fields`]), defaults applied by the server are not owned by
//! anyone, and clients cannot overwrite `managedFields`.

use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::fields::{
    display, field_set, from_fields_v1, in_scope, remove_at, to_fields_v1, value_at, FieldPath,
    FieldSet, PathElem, Scope, OWNED_METADATA,
};
use crate::meta;
use crate::patch::apply_merge;
use crate::registry::ResourceType;
use crate::typing::TypeCursor;

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub subresource: String,
    pub api_version: String,
    pub time: String,
    pub fields: FieldSet,
}

impl ManagedEntry {
    fn same_slot(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(&self.fields),
        });
        if !self.subresource.is_empty() {
            v["subresource"] = Value::String(self.subresource.clone());
        }
        v
    }
}

/// The entries recorded on `obj`.
pub(crate) fn managed_entries(obj: &Value) -> Vec<ManagedEntry> {
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| {
                    let s = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                    let manager = s("manager");
                    if manager.is_empty() {
                        return None;
                    }
                    Some(ManagedEntry {
                        manager,
                        operation: s("operation"),
                        subresource: s("subresource"),
                        api_version: s("apiVersion"),
                        time: s("time"),
                        fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `entries` as `metadata.managedFields` (removed when empty).
pub(crate) fn set_managed_entries(obj: &mut Value, entries: &[ManagedEntry]) {
    let meta = meta::meta_mut(obj);
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(ManagedEntry::to_json).collect()),
        );
    }
}

fn subresource_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Main => "",
        Scope::Status => "status",
    }
}

fn same_entries_ignoring_time(a: &[ManagedEntry], b: &[ManagedEntry]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.manager == y.manager
                && x.operation == y.operation
                && x.subresource == y.subresource
                && x.api_version == y.api_version
                && x.fields == y.fields
        })
}

/// Records a non-apply write by `manager` that turned `old` (absent for a
/// create) into `new`, updating `new`'s managed fields.
pub(crate) fn track_update(
    rt: &ResourceType,
    scope: Scope,
    manager: &str,
    old: Option<&Value>,
    new: &mut Value,
) {
    let mut entries = old.map(managed_entries).unwrap_or_default();
    let sub = subresource_name(scope);
    let new_fields = field_set(new, rt, scope);
    let changed: FieldSet = match old {
        None => new_fields.clone(),
        Some(old) => new_fields
            .iter()
            .filter(|p| match p.last() {
                Some(PathElem::Field(_)) => value_at(old, p) != value_at(new, p),
                _ => value_at(old, p).is_none(),
            })
            .cloned()
            .collect(),
    };
    let removed: FieldSet = match old {
        None => FieldSet::new(),
        Some(old) => field_set(old, rt, scope)
            .difference(&new_fields)
            .cloned()
            .collect(),
    };
    if changed.is_empty() && removed.is_empty() {
        set_managed_entries(new, &entries);
        return;
    }
    for e in entries.iter_mut().filter(|e| e.subresource == sub) {
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let api_version = rt.api_version();
    match entries
        .iter_mut()
        .find(|e| e.same_slot(manager, "Update", sub))
    {
        Some(e) => {
            e.fields.extend(changed);
            e.time = meta::now();
            e.api_version = api_version;
        }
        None if !changed.is_empty() => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Update".into(),
            subresource: sub.into(),
            api_version,
            time: meta::now(),
            fields: changed,
        }),
        None => {}
    }
    entries.retain(|e| !e.fields.is_empty());
    set_managed_entries(new, &entries);
}

/// The outcome of an apply.
#[derive(Debug)]
pub(crate) enum Applied {
    /// Nothing changes; the live object stands.
    Unchanged,
    /// The new object (with managed fields), to be committed.
    Changed(Value),
}

/// Applies `config` as `manager` to `live` (absent: the apply creates).
pub(crate) fn apply(
    rt: &ResourceType,
    scope: Scope,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Applied, ApiError> {
    let name = meta::meta_str(config, "name")
        .unwrap_or_default()
        .to_string();
    let sub = subresource_name(scope);
    let config = scoped_config(rt, scope, config);
    let applied = field_set(&config, rt, scope);

    let mut entries = live.map(managed_entries).unwrap_or_default();
    let previous: FieldSet = entries
        .iter()
        .find(|e| e.same_slot(manager, "Apply", sub))
        .map(|e| e.fields.clone())
        .unwrap_or_default();

    // Conflicts: fields other managers own that this configuration sets to
    // a different value.
    let mut conflicts: Vec<(usize, FieldPath)> = Vec::new();
    if let Some(live) = live {
        for (i, e) in entries.iter().enumerate() {
            if e.manager == manager || e.subresource != sub {
                continue;
            }
            for p in applied.intersection(&e.fields) {
                if matches!(p.last(), Some(PathElem::Field(_)))
                    && value_at(&config, p) != value_at(live, p)
                {
                    conflicts.push((i, p.clone()));
                }
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            let list: Vec<(String, String)> = conflicts
                .iter()
                .map(|(i, p)| (entries[*i].manager.clone(), display(p)))
                .collect();
            return Err(ApiError::apply_conflict(rt, &name, &list));
        }
        for (i, p) in &conflicts {
            entries[*i].fields.remove(p);
        }
    }

    // Fields this manager stops applying go away unless someone else owns
    // them (or something under them).
    let mut object = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    let mut dropped: Vec<&FieldPath> = previous.difference(&applied).collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        let owned_elsewhere = entries.iter().any(|e| {
            !e.same_slot(manager, "Apply", sub) && e.fields.iter().any(|q| q.starts_with(p))
        });
        if !owned_elsewhere {
            remove_at(&mut object, p);
        }
    }

    apply_merge(&mut object, &config, TypeCursor::root(rt));

    match entries
        .iter_mut()
        .find(|e| e.same_slot(manager, "Apply", sub))
    {
        Some(e) => {
            e.fields = applied;
            e.api_version = config
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
        }
        None => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            subresource: sub.into(),
            api_version: config
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: meta::now(),
            fields: applied,
        }),
    }
    entries.retain(|e| !e.fields.is_empty());

    if let Some(live) = live {
        let old_entries = managed_entries(live);
        let mut a = object.clone();
        let mut b = live.clone();
        meta::meta_mut(&mut a).remove("managedFields");
        meta::meta_mut(&mut b).remove("managedFields");
        if a == b && same_entries_ignoring_time(&old_entries, &entries) {
            return Ok(Applied::Unchanged);
        }
        // Only the entry of the manager that wrote gets a new time.
        for e in entries.iter_mut() {
            if e.same_slot(manager, "Apply", sub) {
                e.time = meta::now();
            }
        }
    }
    set_managed_entries(&mut object, &entries);
    Ok(Applied::Changed(object))
}

/// The part of an apply configuration the write covers: `status` only for
/// the status subresource; otherwise everything but server-managed
/// metadata (and `status` when the type has a status subresource).
fn scoped_config(rt: &ResourceType, scope: Scope, config: &Value) -> Value {
    let mut out = Map::new();
    let Some(cm) = config.as_object() else {
        return Value::Object(out);
    };
    for (k, v) in cm {
        if k == "apiVersion" || k == "kind" {
            out.insert(k.clone(), v.clone());
            continue;
        }
        if !in_scope(rt, scope, k) {
            continue;
        }
        if k == "metadata" {
            let mut meta = Map::new();
            if let Some(m) = v.as_object() {
                for f in OWNED_METADATA {
                    if let Some(fv) = m.get(f) {
                        meta.insert(f.to_string(), fv.clone());
                    }
                }
            }
            out.insert(k.clone(), Value::Object(meta));
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> ResourceType {
        ResourceType::builtin("", "v1", "ConfigMap", "configmaps", true, false)
    }

    fn config(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    fn changed(a: Applied) -> Value {
        match a {
            Applied::Changed(v) => v,
            Applied::Unchanged => panic!("expected a change"),
        }
    }

    #[test]
    fn reapply_is_a_no_op_and_dropped_fields_are_removed() {
        let rt = cm();
        let first = changed(
            apply(
                &rt,
                Scope::Main,
                None,
                &config(json!({"a": "1", "b": "2"})),
                "m",
                false,
            )
            .unwrap(),
        );
        let again = apply(
            &rt,
            Scope::Main,
            Some(&first),
            &config(json!({"a": "1", "b": "2"})),
            "m",
            false,
        )
        .unwrap();
        assert!(matches!(again, Applied::Unchanged));
        let second = changed(
            apply(
                &rt,
                Scope::Main,
                Some(&first),
                &config(json!({"a": "1"})),
                "m",
                false,
            )
            .unwrap(),
        );
        assert_eq!(second["data"], json!({"a": "1"}));
    }

    #[test]
    fn conflicts_unless_forced_or_equal() {
        let rt = cm();
        let first = changed(
            apply(
                &rt,
                Scope::Main,
                None,
                &config(json!({"a": "1"})),
                "one",
                false,
            )
            .unwrap(),
        );
        let err = apply(
            &rt,
            Scope::Main,
            Some(&first),
            &config(json!({"a": "2"})),
            "two",
            false,
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("conflict with \"one\": .data.a"),
            "{}",
            err.message
        );
        // Same value: shared ownership, no conflict.
        let shared = changed(
            apply(
                &rt,
                Scope::Main,
                Some(&first),
                &config(json!({"a": "1"})),
                "two",
                false,
            )
            .unwrap(),
        );
        assert_eq!(managed_entries(&shared).len(), 2);
        // Forced: ownership moves.
        let forced = changed(
            apply(
                &rt,
                Scope::Main,
                Some(&first),
                &config(json!({"a": "3"})),
                "two",
                true,
            )
            .unwrap(),
        );
        let entries = managed_entries(&forced);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager, "two");
        assert_eq!(forced["data"]["a"], "3");
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let rt = cm();
        let applied = changed(
            apply(
                &rt,
                Scope::Main,
                None,
                &config(json!({"a": "1", "b": "2"})),
                "applier",
                false,
            )
            .unwrap(),
        );
        let mut updated = applied.clone();
        updated["data"]["a"] = json!("9");
        track_update(&rt, Scope::Main, "editor", Some(&applied), &mut updated);
        let entries = managed_entries(&updated);
        let editor = entries.iter().find(|e| e.manager == "editor").unwrap();
        assert_eq!(editor.operation, "Update");
        assert_eq!(editor.fields.len(), 1);
        let err = apply(
            &rt,
            Scope::Main,
            Some(&updated),
            &config(json!({"a": "1", "b": "2"})),
            "applier",
            false,
        )
        .unwrap_err();
        assert!(err.message.contains("editor"));
    }
}
