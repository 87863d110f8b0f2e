//! Requests shaped like kube-scheduler's: full Pod and Node objects as Go
//! marshals them (no `apiVersion`/`kind` on cached objects, compact JSON).

#![allow(dead_code)]

use serde_json::{json, Value};

/// The captured GPU node (full object, managed fields and image list
/// included).
pub fn node_template() -> Value {
    serde_json::from_str(include_str!("../../fixtures/node-gpu.json")).expect("node fixture")
}

/// The captured vLLM model pod (asks for one AMD GPU, estimate 18000 MB).
pub fn pod() -> Value {
    serde_json::from_str(include_str!("../../fixtures/pod-vllm.json")).expect("pod fixture")
}

/// What the filter should decide for a generated node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Passes the filter.
    Pass,
    /// No `flexinfer.ai/gpu.vendor` label.
    NoVendor,
    /// 8000 MB free, the pod needs 18000.
    LowVram,
    /// Maxwell GPU: vLLM unsupported.
    Maxwell,
}

/// The expectation for node `i` of [`nodes`].
pub fn expectation(i: usize) -> Expect {
    match i % 10 {
        0 => Expect::NoVendor,
        1 => Expect::LowVram,
        2 => Expect::Maxwell,
        _ => Expect::Pass,
    }
}

/// `count` distinct nodes derived from the captured node: one in ten lacks
/// the vendor label, one in ten has too little free VRAM, one in ten is a
/// Maxwell NVIDIA node, the rest pass with varied free VRAM, utilisation,
/// KV-cache usage and architecture.
pub fn nodes(count: usize) -> Vec<Value> {
    let template = node_template();
    (0..count)
        .map(|i| {
            let mut node = template.clone();
            let name = format!("gpu-node-{i:04}");
            node["metadata"]["name"] = json!(name);
            node["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{i:012}"));
            node["metadata"]["labels"]["kubernetes.io/hostname"] = json!(name);
            let mut label_value = node["metadata"]["labels"].take();
            let mut annotation_value = node["metadata"]["annotations"].take();
            let labels = label_value.as_object_mut().expect("labels");
            let annotations = annotation_value.as_object_mut().expect("annotations");
            annotations.insert(
                "flexinfer.ai/gpu-free-memory".into(),
                json!(format!("{}", 18_000 + (i * 37) % 6_000)),
            );
            annotations.insert(
                "flexinfer.ai/gpu.util".into(),
                json!(format!("{:.2}", (i * 13 % 100) as f64)),
            );
            annotations.insert(
                "flexinfer.ai/kv-cache-usage".into(),
                json!(format!("{:.4}", (i * 7 % 100) as f64 / 100.0)),
            );
            if i % 2 == 1 {
                labels.insert("flexinfer.ai/gpu.arch".into(), json!("gfx906"));
                labels.insert("flexinfer.ai/gpu.vram".into(), json!("16Gi"));
            }
            match expectation(i) {
                Expect::NoVendor => {
                    labels.remove("flexinfer.ai/gpu.vendor");
                }
                Expect::LowVram => {
                    annotations.insert("flexinfer.ai/gpu-free-memory".into(), json!("8000"));
                }
                Expect::Maxwell => {
                    labels.insert("flexinfer.ai/gpu.vendor".into(), json!("NVIDIA"));
                    labels.insert("flexinfer.ai/gpu.arch".into(), json!("sm_52"));
                }
                Expect::Pass => {}
            }
            node["metadata"]["labels"] = label_value;
            node["metadata"]["annotations"] = annotation_value;
            node
        })
        .collect()
}

/// An `ExtenderArgs` body as kube-scheduler sends it to an extender that
/// is not `nodeCacheCapable`: Go's field order (`metadata` first, then
/// `name`, `uid`, `resourceVersion`, …, `labels`, `annotations`,
/// `managedFields` inside it), map keys sorted, compact.
pub fn extender_args(pod: &Value, nodes: &[Value]) -> Vec<u8> {
    let mut out = String::from("{\"Pod\":");
    go_object(pod, &mut out);
    out.push_str(",\"Nodes\":{\"metadata\":{},\"items\":[");
    for (i, node) in nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        go_object(node, &mut out);
    }
    out.push_str("]},\"NodeNames\":null}");
    out.into_bytes()
}

/// Field order of Go's `TypeMeta` + object and of `ObjectMeta`.
const OBJECT_ORDER: &[&str] = &["kind", "apiVersion", "metadata", "spec", "status"];
const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Writes a Kubernetes object with its top level and `metadata` in Go's
/// field order.
fn go_object(object: &Value, out: &mut String) {
    write_ordered(object, OBJECT_ORDER, out, |key, value, out| {
        if key == "metadata" {
            write_ordered(value, META_ORDER, out, |_, value, out| {
                out.push_str(&value.to_string())
            });
        } else {
            out.push_str(&value.to_string());
        }
    });
}

/// Writes the object `value` with the keys of `order` first, in that
/// order, then the others sorted; `write` writes each value.
fn write_ordered(
    value: &Value,
    order: &[&str],
    out: &mut String,
    write: impl Fn(&str, &Value, &mut String),
) {
    let Some(map) = value.as_object() else {
        out.push_str(&value.to_string());
        return;
    };
    let rank = |key: &str| order.iter().position(|k| *k == key).unwrap_or(order.len());
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        write(key, &map[key], out);
    }
    out.push('}');
}
