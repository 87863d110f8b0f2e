//! Server-side apply of owned objects that writes only when something the
//! controller manages differs.
//!
//! The desired object carries a digest of itself in an annotation. An
//! existing object whose digest matches and that already holds every
//! desired field (a JSON subset check, so fields the API server defaults
//! never matter) is left alone: a second reconcile of an unchanged model
//! sends no write at all. Anything else is applied with `force`, so the
//! controller's field manager owns exactly the fields it renders.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Error;
use crate::desired::APPLIED_HASH;

/// Whether every field of `desired` is present with the same value in
/// `actual`. Arrays must have the same length and match item by item;
/// `null` in `desired` matches anything.
pub fn is_subset(desired: &Value, actual: &Value) -> bool {
    match (desired, actual) {
        (Value::Null, _) => true,
        (Value::Object(d), Value::Object(a)) => d
            .iter()
            .all(|(k, v)| v.is_null() || a.get(k).is_some_and(|av| is_subset(v, av))),
        (Value::Array(d), Value::Array(a)) => {
            d.len() == a.len() && d.iter().zip(a).all(|(dv, av)| is_subset(dv, av))
        }
        (Value::Number(d), Value::Number(a)) => d.as_f64() == a.as_f64(),
        (d, a) => d == a,
    }
}

/// Digest of a desired object (16 hex digits).
pub fn digest(value: &Value) -> String {
    let hash = Sha256::digest(value.to_string().as_bytes());
    hex::encode(&hash[..8])
}

/// Adds the digest annotation to a serialized desired object.
pub fn with_digest(mut value: Value) -> Value {
    let hash = digest(&value);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(map) = annotations.as_object_mut() {
            map.insert(APPLIED_HASH.to_owned(), Value::String(hash));
        }
    }
    value
}

/// Whether `existing` already reflects `desired` (which carries its digest).
pub fn up_to_date(desired: &Value, existing: &Value) -> bool {
    let want = desired
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_HASH));
    let have = existing
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_HASH));
    want.is_some() && want == have && is_subset(desired, existing)
}

/// Result of [`apply_owned`].
#[derive(Debug)]
pub struct Applied<K> {
    /// The object as the API server holds it now.
    pub object: K,
    /// Whether a write was sent.
    pub wrote: bool,
}

/// Applies `desired` with field manager `manager` unless the existing
/// object is already up to date.
pub async fn apply_owned<K>(api: &Api<K>, manager: &str, desired: &K) -> Result<Applied<K>, Error>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = desired
        .meta()
        .name
        .clone()
        .ok_or_else(|| Error::Invalid("desired object has no name".into()))?;
    let value = with_digest(serde_json::to_value(desired)?);
    if let Some(existing) = api.get_opt(&name).await? {
        if up_to_date(&value, &serde_json::to_value(&existing)?) {
            return Ok(Applied {
                object: existing,
                wrote: false,
            });
        }
    }
    let object = api
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&value),
        )
        .await?;
    Ok(Applied {
        object,
        wrote: true,
    })
}

/// Applies `status` to `object`'s status subresource (server-side apply
/// as `manager`, forced) unless `current` serializes the same. Returns
/// whether a write was sent.
pub async fn apply_status<K, S>(
    api: &Api<K>,
    manager: &str,
    object: &K,
    current: &S,
    status: &S,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    if serde_json::to_value(current)? == serde_json::to_value(status)? {
        return Ok(false);
    }
    let name = object.meta().name.clone().unwrap_or_default();
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_server_defaults_and_checks_our_fields() {
        let desired = json!({"spec": {"replicas": 1, "ports": [{"port": 80}]}});
        let actual = json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10,
            "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert!(is_subset(&desired, &actual));
        let changed = json!({"spec": {"replicas": 2, "ports": [{"port": 80}]}});
        assert!(!is_subset(&changed, &actual));
        let longer = json!({"spec": {"ports": [{"port": 80}, {"port": 81}]}});
        assert!(!is_subset(&longer, &actual));
    }

    #[test]
    fn digest_detects_removed_fields() {
        let a = with_digest(json!({"metadata": {"name": "x"}, "spec": {"a": 1, "b": 2}}));
        let b = with_digest(json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        assert!(up_to_date(&a, &a));
        // `b` is a subset of `a`, but its digest differs: it must be applied.
        assert!(!up_to_date(&b, &a));
    }
}
