//! Deciding whether, and how, to update the Node.
//!
//! The agent owns a fixed set of keys ([`LabelKeys::managed_labels`] and
//! [`LabelKeys::managed_annotations`]). A pass changes the Node only when
//! one of them differs from what it should be:
//!
//! - a desired key missing or with another value → a server-side-apply
//!   patch with every desired key (field manager [`FIELD_MANAGER`],
//!   `force`), so the agent owns exactly the fields it sets. A measured
//!   annotation (free VRAM, utilisation, KV-cache usage) counts as another
//!   value only when it moved past its dead band
//!   ([`LabelKeys::dead_bands`]): readings that jitter from pass to pass
//!   would otherwise rewrite the Node every interval, and every watcher of
//!   Nodes (the extender, the operator) with it;
//! - a managed key present but no longer desired (a GPU went away) → a
//!   JSON merge patch setting it to `null`, which removes it whoever set
//!   it (server-side apply only removes fields the applier owned).
//!
//! Keys of other owners are never touched.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Map, Value};

use crate::labels::{LabelKeys, NodeMetadata};

/// Field manager of the agent's patches.
pub const FIELD_MANAGER: &str = "flexinfer-agent";

/// The writes that bring a Node to its desired labels and annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeUpdate {
    /// Merge patch removing keys the agent no longer wants, if any.
    pub remove: Option<Value>,
    /// Server-side-apply body with every desired key, if any differs.
    pub apply: Option<Value>,
}

/// What to write to `node` so that it carries `desired`; `None` when it
/// already does.
pub fn plan(node: &Node, desired: &NodeMetadata, keys: &LabelKeys) -> Option<NodeUpdate> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);

    let bands = keys.dead_bands();
    let differs = |want: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
        want.iter().any(|(key, value)| match have.get(key) {
            Some(current) if current == value => false,
            Some(current) => bands
                .iter()
                .find(|(measured, _)| measured == key)
                .is_none_or(|(_, band)| !within(current, value, *band)),
            None => true,
        })
    };
    let apply = (differs(&desired.labels, labels) || differs(&desired.annotations, annotations))
        .then(|| apply_body(name, desired));

    let stale =
        |managed: &[String], want: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
            managed
                .iter()
                .filter(|key| have.contains_key(*key) && !want.contains_key(*key))
                .map(|key| (key.clone(), Value::Null))
                .collect::<Map<String, Value>>()
        };
    let stale_labels = stale(&keys.managed_labels(), &desired.labels, labels);
    let stale_annotations = stale(
        &keys.managed_annotations(),
        &desired.annotations,
        annotations,
    );
    let remove = (!stale_labels.is_empty() || !stale_annotations.is_empty()).then(|| {
        let mut metadata = Map::new();
        if !stale_labels.is_empty() {
            metadata.insert("labels".into(), Value::Object(stale_labels));
        }
        if !stale_annotations.is_empty() {
            metadata.insert("annotations".into(), Value::Object(stale_annotations));
        }
        json!({ "metadata": metadata })
    });

    (apply.is_some() || remove.is_some()).then_some(NodeUpdate { remove, apply })
}

/// Whether two readings, both numbers, are less than `band` apart.
fn within(current: &str, desired: &str, band: f64) -> bool {
    match (current.parse::<f64>(), desired.parse::<f64>()) {
        (Ok(current), Ok(desired)) => (current - desired).abs() < band,
        _ => false,
    }
}

/// The server-side-apply body: the Node's identity and the desired keys.
pub fn apply_body(name: &str, desired: &NodeMetadata) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": desired.labels,
            "annotations": desired.annotations,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
        serde_json::from_value(json!({
            "metadata": {
                "name": "gpu-1",
                "labels": labels.iter().cloned().collect::<BTreeMap<_, _>>(),
                "annotations": annotations.iter().cloned().collect::<BTreeMap<_, _>>(),
            }
        }))
        .unwrap()
    }

    fn desired() -> NodeMetadata {
        NodeMetadata {
            labels: BTreeMap::from([
                ("flexinfer.ai/cpu.avx512".into(), "true".into()),
                ("flexinfer.ai/gpu.vendor".into(), "AMD".into()),
            ]),
            annotations: BTreeMap::from([("flexinfer.ai/gpu-free-memory".into(), "20000".into())]),
        }
    }

    #[test]
    fn nothing_to_do_when_the_node_already_matches() {
        let node = node(
            &[
                ("flexinfer.ai/cpu.avx512", "true"),
                ("flexinfer.ai/gpu.vendor", "AMD"),
                ("kubernetes.io/hostname", "gpu-1"),
            ],
            &[
                ("flexinfer.ai/gpu-free-memory", "20000"),
                ("flexinfer.ai/cost", "2"),
            ],
        );
        assert_eq!(plan(&node, &desired(), &LabelKeys::default()), None);
    }

    #[test]
    fn a_changed_value_is_applied_with_every_desired_key() {
        let node = node(
            &[
                ("flexinfer.ai/cpu.avx512", "true"),
                ("flexinfer.ai/gpu.vendor", "AMD"),
            ],
            &[("flexinfer.ai/gpu-free-memory", "19000")],
        );
        let update = plan(&node, &desired(), &LabelKeys::default()).unwrap();
        assert_eq!(update.remove, None);
        assert_eq!(
            update.apply.unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "gpu-1",
                    "labels": {"flexinfer.ai/cpu.avx512": "true", "flexinfer.ai/gpu.vendor": "AMD"},
                    "annotations": {"flexinfer.ai/gpu-free-memory": "20000"}
                }
            })
        );
    }

    #[test]
    fn keys_no_longer_wanted_are_removed_and_foreign_keys_kept() {
        let node = node(
            &[
                ("flexinfer.ai/cpu.avx512", "true"),
                ("flexinfer.ai/gpu.vendor", "AMD"),
                ("flexinfer.ai/gpu.arch", "gfx1100"),
                ("flexinfer.ai/something-else", "x"),
            ],
            &[
                ("flexinfer.ai/gpu-free-memory", "20000"),
                ("flexinfer.ai/gpu.util", "3.00"),
            ],
        );
        let update = plan(&node, &desired(), &LabelKeys::default()).unwrap();
        assert_eq!(update.apply, None);
        assert_eq!(
            update.remove.unwrap(),
            json!({"metadata": {
                "labels": {"flexinfer.ai/gpu.arch": null},
                "annotations": {"flexinfer.ai/gpu.util": null}
            }})
        );
    }

    #[test]
    fn readings_within_their_dead_band_are_not_rewritten() {
        let keys = LabelKeys::default();
        let labels = [
            ("flexinfer.ai/cpu.avx512", "true"),
            ("flexinfer.ai/gpu.vendor", "AMD"),
        ];
        let mut want = desired();
        want.annotations
            .insert("flexinfer.ai/gpu.util".into(), "14.00".into());
        want.annotations
            .insert("flexinfer.ai/kv-cache-usage".into(), "0.5100".into());
        // 200 MiB, 4 points and 0.04 off: within the bands.
        let close = node(
            &labels,
            &[
                ("flexinfer.ai/gpu-free-memory", "20200"),
                ("flexinfer.ai/gpu.util", "10.00"),
                ("flexinfer.ai/kv-cache-usage", "0.4700"),
            ],
        );
        assert_eq!(plan(&close, &want, &keys), None);
        // Any one past its band: one apply with every fresh reading.
        for (key, far) in [
            ("flexinfer.ai/gpu-free-memory", "20256"),
            ("flexinfer.ai/gpu.util", "19.00"),
            ("flexinfer.ai/kv-cache-usage", "0.5600"),
        ] {
            let mut annotations = vec![
                ("flexinfer.ai/gpu-free-memory", "20000"),
                ("flexinfer.ai/gpu.util", "14.00"),
                ("flexinfer.ai/kv-cache-usage", "0.5100"),
            ];
            annotations.retain(|(k, _)| *k != key);
            annotations.push((key, far));
            let update = plan(&node(&labels, &annotations), &want, &keys).expect(key);
            assert_eq!(
                update.apply.unwrap()["metadata"]["annotations"],
                json!(want.annotations),
                "{key}"
            );
        }
    }

    #[test]
    fn labels_and_unreadable_values_have_no_dead_band() {
        let keys = LabelKeys::default();
        let mut want = desired();
        want.labels
            .insert("flexinfer.ai/gpu.count".into(), "2".into());
        let node_with = |count: &str, free: &str| {
            node(
                &[
                    ("flexinfer.ai/cpu.avx512", "true"),
                    ("flexinfer.ai/gpu.vendor", "AMD"),
                    ("flexinfer.ai/gpu.count", count),
                ],
                &[("flexinfer.ai/gpu-free-memory", free)],
            )
        };
        assert!(plan(&node_with("1", "20000"), &want, &keys).is_some());
        assert!(plan(&node_with("2", "lots"), &want, &keys).is_some());
        assert_eq!(plan(&node_with("2", "20000"), &want, &keys), None);
    }

    #[test]
    fn a_bare_node_gets_everything() {
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "gpu-1"}})).unwrap();
        let update = plan(&bare, &desired(), &LabelKeys::default()).unwrap();
        assert!(update.apply.is_some());
        assert!(update.remove.is_none());
    }
}
