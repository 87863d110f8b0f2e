//! Custom resource schemas: pruning, defaulting and basic validation, as a
//! real API server does with a CRD's structural `openAPIV3Schema`.
//!
//! Implemented: unknown fields are pruned (unless
//! `x-kubernetes-preserve-unknown-fields` or `additionalProperties`
//! allow them), nulls are dropped from non-`nullable` fields, `default`s
//! are filled in (recursively), and `type`, `required`, `enum` and
//! `x-kubernetes-int-or-string` are checked (422 Invalid on failure).
//! Not implemented: CEL rules (`x-kubernetes-validations`), `format`,
//! `pattern`, length and range limits, `anyOf`/`oneOf`/`allOf`/`not`.
//! Built-in types are not validated.

use serde_json::{Map, Value};

use crate::fields::Scope;
use crate::registry::ResourceType;

/// Prunes, defaults and validates the part of `obj` that `scope` covers.
pub(crate) fn normalize(rt: &ResourceType, obj: &mut Value, scope: Scope) -> Result<(), String> {
    let (true, Some(root)) = (rt.custom, rt.schema.as_deref()) else {
        return Ok(());
    };
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    let props = root.get("properties").and_then(Value::as_object);
    let preserve = preserves_unknown(root);
    let keys: Vec<String> = o.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let covered = match scope {
            Scope::Status => k == "status",
            Scope::Main => k != "status" || !rt.status_subresource,
        };
        if !covered {
            continue;
        }
        match props.and_then(|p| p.get(&k)) {
            Some(child) => {
                if o.get(&k).is_some_and(Value::is_null) && !nullable(child) {
                    o.remove(&k);
                    continue;
                }
                if let Some(v) = o.get_mut(&k) {
                    walk(v, child, &k)?;
                }
            }
            None if preserve => {}
            None => {
                o.remove(&k);
            }
        }
    }
    // Top-level defaults (e.g. a defaulted `spec`).
    if let Some(props) = props {
        for (k, child) in props {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            let covered = match scope {
                Scope::Status => k == "status",
                Scope::Main => k != "status" || !rt.status_subresource,
            };
            if covered && !o.contains_key(k) {
                if let Some(d) = child.get("default") {
                    let mut d = d.clone();
                    walk(&mut d, child, k)?;
                    o.insert(k.clone(), d);
                }
            }
        }
    }
    Ok(())
}

fn preserves_unknown(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn nullable(s: &Value) -> bool {
    s.get("nullable").and_then(Value::as_bool) == Some(true)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn walk(v: &mut Value, s: &Value, path: &str) -> Result<(), String> {
    if v.is_null() && nullable(s) {
        return Ok(());
    }
    let int_or_string = s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if int_or_string {
        return match type_name(v) {
            "integer" | "string" => check_enum(v, s, path),
            other => Err(format!(
                "{path}: Invalid value: \"{other}\": {path} in body must be of type integer or string"
            )),
        };
    }
    if let Some(want) = s.get("type").and_then(Value::as_str) {
        let got = type_name(v);
        let ok = got == want || (want == "number" && got == "integer");
        if !ok {
            return Err(format!(
                "{path}: Invalid value: \"{got}\": {path} in body must be of type {want}: {v}"
            ));
        }
    }
    check_enum(v, s, path)?;
    match v {
        Value::Object(m) => walk_object(m, s, path),
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item, item_schema, &format!("{path}[{i}]"))?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_enum(v: &Value, s: &Value, path: &str) -> Result<(), String> {
    if let Some(allowed) = s.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            return Err(format!(
                "{path}: Unsupported value: {v}: supported values: {}",
                list.join(", ")
            ));
        }
    }
    Ok(())
}

fn walk_object(m: &mut Map<String, Value>, s: &Value, path: &str) -> Result<(), String> {
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties");
    let preserve = preserves_unknown(s);
    let embedded = s
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true);
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in keys {
        let child_path = format!("{path}.{k}");
        let child_schema = props
            .and_then(|p| p.get(&k))
            .or_else(|| additional.filter(|a| a.is_object()));
        match child_schema {
            Some(cs) => {
                if m.get(&k).is_some_and(Value::is_null) && !nullable(cs) {
                    m.remove(&k);
                    continue;
                }
                if let Some(cv) = m.get_mut(&k) {
                    walk(cv, cs, &child_path)?;
                }
            }
            None => {
                let allowed = preserve
                    || additional.and_then(Value::as_bool) == Some(true)
                    || (embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
                if !allowed {
                    m.remove(&k);
                }
            }
        }
    }
    if let Some(props) = props {
        for (k, cs) in props {
            if !m.contains_key(k) {
                if let Some(d) = cs.get("default") {
                    let mut d = d.clone();
                    walk(&mut d, cs, &format!("{path}.{k}"))?;
                    m.insert(k.clone(), d);
                }
            }
        }
    }
    if let Some(required) = s.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !m.contains_key(r) {
                return Err(format!("{path}.{r}: Required value"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn model() -> ResourceType {
        Registry::standard()
            .lookup("ai.flexinfer", "v1alpha2", "models")
            .unwrap()
            .clone()
    }

    #[test]
    fn prunes_unknown_fields_and_keeps_free_form_ones() {
        let rt = model();
        let mut obj = json!({
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": "m", "anything": 1},
            "spec": {"backend": "vllm", "source": "HF://a/b", "bogus": true, "config": {"maxModelLen": 4096}},
            "junk": 1
        });
        normalize(&rt, &mut obj, Scope::Main).unwrap();
        assert!(obj["spec"].get("bogus").is_none());
        assert!(obj.get("junk").is_none());
        assert_eq!(obj["spec"]["config"]["maxModelLen"], 4096);
        assert_eq!(obj["metadata"]["anything"], 1);
    }

    #[test]
    fn rejects_wrong_types_and_missing_required_fields() {
        let rt = model();
        let mut obj = json!({"spec": {"backend": 3, "source": "x"}});
        let err = normalize(&rt, &mut obj, Scope::Main).unwrap_err();
        assert!(err.contains("spec.backend"), "{err}");
        let mut obj = json!({"spec": {"backend": "vllm"}});
        let err = normalize(&rt, &mut obj, Scope::Main).unwrap_err();
        assert!(err.contains("spec.source: Required value"), "{err}");
    }

    #[test]
    fn fills_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "a": {"type": "integer", "default": 5},
                "b": {"type": "object", "default": {}, "properties": {"c": {"type": "string", "default": "x"}}}
            }}}
        });
        let mut rt = model();
        rt.schema = Some(std::sync::Arc::new(schema));
        let mut obj = json!({"spec": {}});
        normalize(&rt, &mut obj, Scope::Main).unwrap();
        assert_eq!(obj["spec"], json!({"a": 5, "b": {"c": "x"}}));
    }
}
