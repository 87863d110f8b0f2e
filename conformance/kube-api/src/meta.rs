//! Object metadata helpers: accessors on untyped objects, timestamps, UIDs
//! and generated names.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

/// `metadata.<field>` as a string, if present.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata`, created (and replaced when not an object) on demand.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let root = obj.as_object_mut().expect("object ensured above");
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("object ensured above")
}

/// `metadata.finalizers` as strings.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// `metadata.labels` as a map, if any.
pub(crate) fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("labels")?.as_object()
}

/// UIDs named by `metadata.ownerReferences`.
pub(crate) fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `obj`'s owner reference to `owner_uid` has
/// `blockOwnerDeletion: true`: a foreground deletion of that owner waits
/// for `obj` to be gone.
pub(crate) fn blocks_owner_deletion(obj: &Value, owner_uid: &str) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
        })
}

/// The current time as a Kubernetes `Time` (RFC 3339, whole seconds, UTC).
pub(crate) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Generates UIDs and name suffixes that differ between servers and runs.
#[derive(Debug)]
pub(crate) struct IdGen {
    seed: std::hash::RandomState,
    counter: AtomicU64,
}

impl Default for IdGen {
    fn default() -> Self {
        IdGen {
            seed: std::hash::RandomState::new(),
            counter: AtomicU64::new(0),
        }
    }
}

impl IdGen {
    fn next(&self) -> u64 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut h = self.seed.build_hasher();
        h.write_u64(n);
        h.finish()
    }

    /// A random version-4-shaped UUID.
    pub fn uid(&self) -> String {
        let a = self.next();
        let b = self.next();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    /// Five characters from the alphabet Kubernetes uses for `generateName`.
    pub fn suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut v = self.next();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(v % ALPHABET.len() as u64) as usize] as char;
                v /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_unique_and_shaped() {
        let ids = IdGen::default();
        let a = ids.uid();
        let b = ids.uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert_eq!(ids.suffix().len(), 5);
    }

    #[test]
    fn time_is_rfc3339_seconds() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }
}
