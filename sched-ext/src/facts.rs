//! What the decision code knows about a pod and a node.
//!
//! Parsing happens once per request here; [`crate::filter`] and
//! [`crate::score`] only see these structs. Unparseable or non-finite
//! numbers count as absent: a malformed annotation never fails a request.

use std::collections::BTreeMap;

use flexinfer_crds::{backend, gpu, labels, quantity};
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};

use crate::api::NodeView;

/// The parts of a pod that placement depends on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    /// Namespace (benchmark ConfigMaps are looked up there).
    pub namespace: String,
    /// Name, for logs.
    pub name: String,
    /// UID, so the fair-share count does not count the pod twice.
    pub uid: String,
    /// GPUs the pod asks for (see [`gpu_count`]).
    pub gpu_count: f64,
    /// Annotation `flexinfer.ai/gpu.vram-estimate-mb`, when positive.
    pub vram_estimate_mb: Option<f64>,
    /// Annotation `flexinfer.ai/backend`, canonicalised (`llama.cpp` →
    /// `llamacpp`); unknown names are kept lower-cased.
    pub backend: Option<String>,
    /// Annotation `flexinfer.ai/model`.
    pub model: Option<String>,
    /// The Model or ModelDeployment the pod serves, whose
    /// `<name>-benchmark-results` ConfigMap is the TPS fallback: label
    /// `modeldeployment_cr` (the original's), else the `flexinfer.ai/model`
    /// label the operator puts on every model pod.
    pub deployment: Option<String>,
    /// Pod labels (the fair-share tenant may be one of them).
    pub labels: BTreeMap<String, String>,
}

impl PodFacts {
    /// Reads the facts of `pod`.
    pub fn from_pod(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        let annotation = |key: &str| {
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let labels = meta.labels.clone().unwrap_or_default();
        PodFacts {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            gpu_count: pod.spec.as_ref().map_or(0.0, gpu_count),
            vram_estimate_mb: annotation(labels::VRAM_ESTIMATE_MB)
                .and_then(parse_number)
                .filter(|mb| *mb > 0.0),
            backend: annotation(labels::BACKEND).map(canonical_backend),
            model: annotation(labels::MODEL).map(str::to_owned),
            deployment: [labels::MODEL_DEPLOYMENT_CR, labels::MODEL]
                .iter()
                .filter_map(|key| labels.get(*key))
                .map(|v| v.trim())
                .find(|v| !v.is_empty())
                .map(str::to_owned),
            labels,
        }
    }

    /// Whether the pod asks for a GPU.
    pub fn wants_gpu(&self) -> bool {
        self.gpu_count > 0.0
    }

    /// Whether the extender has an opinion about this pod: it asks for a
    /// GPU or is a FlexInfer model pod. Other pods pass the filter untouched
    /// and get a flat score.
    pub fn is_model_workload(&self) -> bool {
        self.wants_gpu() || self.model.is_some() || self.backend.is_some()
    }
}

/// The canonical backend name, or the lower-cased input when the catalog
/// does not know it.
pub fn canonical_backend(name: &str) -> String {
    backend::canonical_name(name)
        .map(str::to_owned)
        .unwrap_or_else(|| name.trim().to_ascii_lowercase())
}

/// GPUs a pod spec asks for: per GPU resource (`nvidia.com/gpu`,
/// `amd.com/gpu`, `gpu.intel.com/i915`), each container's limit (else its
/// request), summed over containers, and at least the largest init
/// container's (Kubernetes' effective request); then summed over resources.
pub fn gpu_count(spec: &PodSpec) -> f64 {
    gpu::GPU_RESOURCES
        .iter()
        .map(|resource| {
            let regular: f64 = spec
                .containers
                .iter()
                .map(|c| container_gpus(c, resource))
                .sum();
            let init = spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| container_gpus(c, resource))
                .fold(0.0, f64::max);
            regular.max(init)
        })
        .sum()
}

fn container_gpus(container: &Container, resource: &str) -> f64 {
    let Some(resources) = &container.resources else {
        return 0.0;
    };
    let amount = |list: &Option<
        BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        list.as_ref()
            .and_then(|l| l.get(resource))
            .and_then(quantity::to_f64)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    amount(&resources.limits)
        .or_else(|| amount(&resources.requests))
        .unwrap_or(0.0)
}

/// The parts of a node that placement depends on, borrowed from the
/// request (or the node cache).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeFacts<'a> {
    /// Node name.
    pub name: &'a str,
    /// Label `flexinfer.ai/gpu.vendor` (`NVIDIA`, `AMD`).
    pub vendor: Option<&'a str>,
    /// Label `flexinfer.ai/gpu.arch` (`sm_89`, `gfx1100`).
    pub arch: Option<&'a str>,
    /// Label `flexinfer.ai/gpu.vram` (`24Gi`, per GPU).
    pub vram: Option<&'a str>,
    /// Label `flexinfer.ai/gpu.count`.
    pub count: Option<&'a str>,
    /// Label `flexinfer.ai/gpu.int4`.
    pub int4: Option<&'a str>,
    /// Annotation `flexinfer.ai/gpu-free-memory`: free VRAM in MiB summed
    /// over the node's GPUs.
    pub free_mb: Option<f64>,
    /// Annotation `flexinfer.ai/gpu.util`: average GPU utilisation, percent.
    pub util: Option<f64>,
    /// Annotation `flexinfer.ai/cost`: relative node cost.
    pub cost: Option<f64>,
    /// Annotation `flexinfer.ai/kv-cache-usage`: KV-cache usage ratio (0–1).
    pub kv_cache_usage: Option<f64>,
}

impl<'a> NodeFacts<'a> {
    /// Reads the facts through two lookups, one for labels and one for
    /// annotations. Empty values count as absent.
    pub fn from_lookup(
        name: &'a str,
        label: impl Fn(&str) -> Option<&'a str>,
        annotation: impl Fn(&str) -> Option<&'a str>,
    ) -> Self {
        let label = |key: &str| label(key).map(str::trim).filter(|v| !v.is_empty());
        let number = |key: &str| annotation(key).and_then(parse_number);
        NodeFacts {
            name,
            vendor: label(labels::NODE_GPU_VENDOR),
            arch: label(labels::NODE_GPU_ARCH),
            vram: label(labels::NODE_GPU_VRAM),
            count: label(labels::NODE_GPU_COUNT),
            int4: label(labels::NODE_GPU_INT4),
            free_mb: number(labels::NODE_GPU_FREE_MEMORY),
            util: number(labels::NODE_GPU_UTIL),
            cost: number(labels::NODE_COST),
            kv_cache_usage: number(labels::NODE_KV_CACHE_USAGE),
        }
    }

    /// Reads the facts of a node from the request.
    pub fn from_view(view: &'a NodeView<'_>) -> Self {
        let meta = &view.metadata;
        Self::from_lookup(
            meta.name.as_ref(),
            |key| meta.labels.get(key),
            |key| meta.annotations.get(key),
        )
    }

    /// Reads the facts of a cached Node object.
    pub fn from_node(node: &'a Node) -> Self {
        let meta = &node.metadata;
        Self::from_lookup(
            meta.name.as_deref().unwrap_or_default(),
            |key| meta.labels.as_ref()?.get(key).map(String::as_str),
            |key| meta.annotations.as_ref()?.get(key).map(String::as_str),
        )
    }

    /// VRAM of one GPU in MiB, from the `gpu.vram` label (`24Gi`, `24576Mi`,
    /// or a bare number of GiB).
    pub fn vram_per_gpu_mb(&self) -> Option<f64> {
        let value = self.vram?;
        let (number, factor) = if let Some(gi) = value.strip_suffix("Gi") {
            (gi, 1024.0)
        } else if let Some(mi) = value.strip_suffix("Mi") {
            (mi, 1.0)
        } else {
            (value, 1024.0)
        };
        parse_number(number)
            .map(|n| n * factor)
            .filter(|mb| *mb > 0.0)
    }

    /// Number of GPUs from the `gpu.count` label; 1 when absent.
    pub fn gpu_count(&self) -> f64 {
        self.count
            .and_then(parse_number)
            .filter(|n| *n >= 1.0)
            .unwrap_or(1.0)
    }
}

/// Parses a finite number; anything else is absent.
pub fn parse_number(value: &str) -> Option<f64> {
    value.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn gpu_count_uses_limits_then_requests_over_all_gpu_resources() {
        let pod = pod(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"limits": {"amd.com/gpu": "2"}, "requests": {"amd.com/gpu": "1"}}},
                    {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "4"}}},
                    {"name": "c"}
                ],
                "initContainers": [
                    {"name": "i", "resources": {"limits": {"amd.com/gpu": "3"}}}
                ]
            }
        }));
        // amd: max(2, init 3) = 3; nvidia: 1.
        assert_eq!(PodFacts::from_pod(&pod).gpu_count, 4.0);
    }

    #[test]
    fn pod_facts_read_annotations_and_canonicalise_the_backend() {
        let pod = pod(json!({
            "metadata": {
                "name": "m-0", "namespace": "ml", "uid": "u1",
                "labels": {"modeldeployment_cr": "md"},
                "annotations": {
                    "flexinfer.ai/backend": "llama.cpp",
                    "flexinfer.ai/model": "qwen",
                    "flexinfer.ai/gpu.vram-estimate-mb": "8192"
                }
            },
            "spec": {"containers": []}
        }));
        let facts = PodFacts::from_pod(&pod);
        assert_eq!(facts.backend.as_deref(), Some("llamacpp"));
        assert_eq!(facts.model.as_deref(), Some("qwen"));
        assert_eq!(facts.deployment.as_deref(), Some("md"));
        assert_eq!(facts.vram_estimate_mb, Some(8192.0));
        assert_eq!(facts.namespace, "ml");
        assert!(!facts.wants_gpu());
        assert!(facts.is_model_workload());
    }

    #[test]
    fn pods_the_operator_builds_name_their_benchmark_config_map() {
        // The labels the operator puts on every model pod, nothing else.
        let labels = flexinfer_crds::labels::selector_labels("qwen-md", "vllm");
        let built = pod(json!({"metadata": {"labels": labels}, "spec": {"containers": []}}));
        assert_eq!(
            PodFacts::from_pod(&built).deployment.as_deref(),
            Some("qwen-md")
        );
        // The original's label wins where a pod has it.
        let mut labels = flexinfer_crds::labels::selector_labels("qwen-md", "vllm");
        labels.insert("modeldeployment_cr".into(), "legacy".into());
        let legacy = pod(json!({"metadata": {"labels": labels}, "spec": {"containers": []}}));
        assert_eq!(
            PodFacts::from_pod(&legacy).deployment.as_deref(),
            Some("legacy")
        );
    }

    #[test]
    fn malformed_numbers_count_as_absent() {
        let pod = pod(json!({"metadata": {"annotations": {
            "flexinfer.ai/gpu.vram-estimate-mb": "lots"}}}));
        assert_eq!(PodFacts::from_pod(&pod).vram_estimate_mb, None);
        let pod = pod_with_estimate("-5");
        assert_eq!(PodFacts::from_pod(&pod).vram_estimate_mb, None);

        let facts = NodeFacts::from_lookup("n", |_| None, |_| Some("NaN"));
        assert_eq!(facts.free_mb, None);
        assert_eq!(facts.util, None);
    }

    fn pod_with_estimate(value: &str) -> Pod {
        pod(json!({"metadata": {"annotations": {"flexinfer.ai/gpu.vram-estimate-mb": value}}}))
    }

    #[test]
    fn node_vram_label_forms() {
        let facts = |vram: &'static str| NodeFacts {
            vram: Some(vram),
            ..Default::default()
        };
        assert_eq!(facts("24Gi").vram_per_gpu_mb(), Some(24576.0));
        assert_eq!(facts("512Mi").vram_per_gpu_mb(), Some(512.0));
        assert_eq!(facts("16").vram_per_gpu_mb(), Some(16384.0));
        assert_eq!(facts("big").vram_per_gpu_mb(), None);
        assert_eq!(NodeFacts::default().gpu_count(), 1.0);
    }
}
