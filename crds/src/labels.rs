//! Well-known label, annotation, finalizer and object-name keys.
//!
//! Every key that one FlexInfer component writes and another reads is
//! defined here, so that the node agent, the scheduler extender, the
//! operator and the gateway agree on spelling. Most keys use the
//! `flexinfer.ai/` prefix; a few inherited ones use `ai.flexinfer/` or
//! `litellm.flexinfer.ai/`.

use std::collections::BTreeMap;

/// Prefix of FlexInfer labels and annotations.
pub const PREFIX: &str = "flexinfer.ai/";

// ---------------------------------------------------------------------------
// Node labels written by the node agent.
// ---------------------------------------------------------------------------

/// Node label: GPU vendor, `NVIDIA` or `AMD`. Nodes without it are rejected
/// by the scheduler extender's filter.
pub const NODE_GPU_VENDOR: &str = "flexinfer.ai/gpu.vendor";
/// Node label: GPU architecture, `sm_XY` (NVIDIA) or `gfxNNNN` (AMD).
pub const NODE_GPU_ARCH: &str = "flexinfer.ai/gpu.arch";
/// Node label: VRAM of one GPU in whole GiB, e.g. `24Gi`.
pub const NODE_GPU_VRAM: &str = "flexinfer.ai/gpu.vram";
/// Node label: number of GPUs on the node.
pub const NODE_GPU_COUNT: &str = "flexinfer.ai/gpu.count";
/// Node label: `true` when the GPU has fast INT4 paths.
pub const NODE_GPU_INT4: &str = "flexinfer.ai/gpu.int4";
/// Node label: `true` when the CPU supports AVX-512.
pub const NODE_CPU_AVX512: &str = "flexinfer.ai/cpu.avx512";

// ---------------------------------------------------------------------------
// Node annotations written by the node agent and the termination detector.
// ---------------------------------------------------------------------------

/// Node annotation: free VRAM in MB summed over the node's GPUs.
pub const NODE_GPU_FREE_MEMORY: &str = "flexinfer.ai/gpu-free-memory";
/// Node annotation: average GPU utilization (`%.2f`).
pub const NODE_GPU_UTIL: &str = "flexinfer.ai/gpu.util";
/// Node annotation: average KV-cache usage ratio of the node's model pods
/// (`%.4f`).
pub const NODE_KV_CACHE_USAGE: &str = "flexinfer.ai/kv-cache-usage";
/// Node annotation: relative cost of the node, used by the scheduler score.
pub const NODE_COST: &str = "flexinfer.ai/cost";
/// Node annotation and taint key: `"true"` when the (spot) node is about to
/// be reclaimed; the gateway stops routing to its pods.
pub const NODE_SPOT_TERMINATING: &str = "flexinfer.ai/spot-terminating";
/// Node annotation: when the spot node will be reclaimed (RFC 3339).
pub const NODE_SPOT_TERMINATING_AT: &str = "flexinfer.ai/spot-terminating-at";

// ---------------------------------------------------------------------------
// Third-party node labels read by GPU detection.
// ---------------------------------------------------------------------------

/// NVIDIA GPU feature discovery: compute capability major version.
pub const NVIDIA_COMPUTE_MAJOR: &str = "nvidia.com/gpu.compute.major";
/// NVIDIA GPU feature discovery: a GPU is present (`true`).
pub const NVIDIA_GPU_PRESENT: &str = "nvidia.com/gpu.present";
/// AMD node labeller: GPU architecture (`gfx1100`).
pub const AMD_GPU_ARCHITECTURE: &str = "gpu.amd.com/gpu-architecture";
/// AMD node labeller: GPU model name.
pub const AMD_GPU_MODEL: &str = "gpu.amd.com/model";
/// AMD node labeller: prefix of GPU family labels (`amd.com/gpu.family.GC_11_0_0`).
pub const AMD_GPU_FAMILY_PREFIX: &str = "amd.com/gpu.family.";
/// Node label some clusters use to pin a vendor; a Model's nodeSelector on
/// it must agree with `spec.gpu.vendor`.
pub const FLEXSTACK_GPU_VENDOR: &str = "node.flexstack.io/gpu-vendor";

// ---------------------------------------------------------------------------
// Labels on objects the operator owns.
// ---------------------------------------------------------------------------

/// Label and pod annotation: the Model (or ModelDeployment) name.
pub const MODEL: &str = "flexinfer.ai/model";
/// Label and pod annotation: the canonical backend name.
pub const BACKEND: &str = "flexinfer.ai/backend";
/// Label: the shared GPU group of a Model (`spec.gpu.shared`).
pub const GPU_GROUP: &str = "flexinfer.ai/gpu-group";
/// Pod annotation: VRAM estimate in MB, read by the scheduler extender.
pub const VRAM_ESTIMATE_MB: &str = "flexinfer.ai/gpu.vram-estimate-mb";
/// Legacy pod label naming the owning ModelDeployment (benchmark lookup).
pub const MODEL_DEPLOYMENT_CR: &str = "modeldeployment_cr";

/// Standard label: application name.
pub const APP_NAME: &str = "app.kubernetes.io/name";
/// Standard label: instance name.
pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
/// Standard label: managing tool.
pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Standard label: component within the application.
pub const APP_COMPONENT: &str = "app.kubernetes.io/component";

/// Value of [`APP_NAME`] on model workloads.
pub const APP_NAME_MODEL: &str = "model";
/// Value of [`APP_MANAGED_BY`] on everything FlexInfer creates.
pub const MANAGED_BY_FLEXINFER: &str = "flexinfer";
/// Value of [`APP_COMPONENT`] on per-node runtime pods.
pub const COMPONENT_RUNTIME: &str = "flexinfer-runtime";

// ---------------------------------------------------------------------------
// Annotations on Models (and ModelDeployments) read by the gateway.
// ---------------------------------------------------------------------------

/// Model annotation: routing strategy (`session-affinity`, `prefix`,
/// `least-loaded`; anything else means Service DNS). See
/// [`crate::routing::RoutingStrategy`].
pub const ROUTING: &str = "flexinfer.ai/routing";
/// Model annotation: knobs of `cache-aware` routing as comma-separated
/// `key=value` pairs (`prefixWeight`, `loadWeight`, `kvWeight`, `blockSize`,
/// `blocksPerEndpoint`, `loadBoundFloor`, `matchThreshold`), as the model
/// file's `cacheAware`.
pub const CACHE_AWARE: &str = "flexinfer.ai/cache-aware";
/// Model annotation: mid-stream failover, `on`, `off` (the default) or
/// the APIs whose streams are resumed on another endpoint when their engine
/// fails mid-answer (`chat`, `completions`, comma-separated), as the model
/// file's `streamFailover`.
pub const STREAM_FAILOVER: &str = "flexinfer.ai/stream-failover";
/// Model annotation: requests each endpoint serves at once (a positive
/// integer); more wait in the gateway's queue by priority and tenant.
pub const MAX_CONCURRENCY: &str = "flexinfer.ai/max-concurrency";
/// Model annotation: comma-separated path prefixes the model serves; other
/// paths get 404.
pub const SERVE_PATHS: &str = "flexinfer.ai/serve-paths";
/// Model annotation: admission control mode; see [`ADMISSION_CONTEXT_BOUNDED`].
pub const ADMISSION: &str = "flexinfer.ai/admission";
/// Value of [`ADMISSION`] that opts a model into context-window admission.
pub const ADMISSION_CONTEXT_BOUNDED: &str = "context-bounded";
/// Model annotation: priorityClassName for the model's pods.
pub const SERVING_PRIORITY_CLASS: &str = "flexinfer.ai/serving-priority-class";

// ---------------------------------------------------------------------------
// Service and Deployment annotations (aliases and service labels).
// ---------------------------------------------------------------------------

/// Service annotation: comma-separated service labels of the model.
pub const SERVICE_LABELS: &str = "flexinfer.ai/service-labels";
/// Service annotation: service labels of the active shared-group member.
/// When the key is present (even empty) it takes precedence over
/// [`SERVICE_LABELS`].
pub const ACTIVE_SERVICES: &str = "ai.flexinfer/active-services";
/// Service/Deployment annotation: the model name clients use.
pub const LITELLM_SERVED_MODEL: &str = "litellm.flexinfer.ai/served-model";
/// Service/Deployment annotation: sorted, comma-joined aliases.
pub const LITELLM_ALIASES: &str = "litellm.flexinfer.ai/aliases";
/// Service/Deployment annotation: the Copilot/IDE alias.
pub const LITELLM_COPILOT_MODEL: &str = "litellm.flexinfer.ai/copilot-model";
/// Deployment annotation: JSON `{"toolCalling","vision","imageGeneration"}`.
pub const LITELLM_CAPABILITIES: &str = "litellm.flexinfer.ai/capabilities";

// ---------------------------------------------------------------------------
// Cache Job annotations.
// ---------------------------------------------------------------------------

/// Cache Job annotation: the model source the Job fetches.
pub const CACHE_SOURCE: &str = "flexinfer.ai/source";
/// Cache Job annotation: the Job kind (`prefetch`, ...).
pub const CACHE_KIND: &str = "flexinfer.ai/cache-kind";
/// Value of [`CACHE_KIND`] on prefetch Jobs.
pub const CACHE_KIND_PREFETCH: &str = "prefetch";
/// Cache Job annotation: the cache PVC.
pub const CACHE_PVC: &str = "flexinfer.ai/cache-pvc";
/// Cache Job annotation: destination directory inside the PVC.
pub const CACHE_DEST: &str = "flexinfer.ai/cache-dest";
/// Annotation of cache Jobs: digest of the work they do (their pod
/// template without images), so a Job is recreated only when that changes.
pub const CACHE_WORK: &str = "flexinfer.ai/cache-work";

// ---------------------------------------------------------------------------
// Shared GPU demand and leases.
// ---------------------------------------------------------------------------

/// Label on GPU-lease ConfigMaps (training jobs holding a shared GPU).
pub const GPU_LEASE: &str = "ai.flexinfer/gpu-lease";

/// Name of the GPU-lease ConfigMap of a shared group.
pub fn gpu_lease_config_map(group: &str) -> String {
    format!("gpu-lease-{group}")
}

/// GPUGroup annotation carrying the queue depth of a member model, written
/// by the gateway as demand signal: `flexinfer.ai/queue.<model>`.
pub fn queue_annotation(model: &str) -> String {
    format!("{PREFIX}queue.{}", queue_key_part(model))
}

/// GPUGroup annotation carrying when requests for a member model started
/// queueing (RFC 3339): `flexinfer.ai/queue-since.<model>`.
pub fn queue_since_annotation(model: &str) -> String {
    format!("{PREFIX}queue-since.{}", queue_key_part(model))
}

/// The model's part of a queue annotation key. The name part of a key
/// holds 63 characters, so names longer than 51 (63 less `queue-since.`)
/// are shortened with a hash; [`model_from_queue_annotation`] then gives
/// that shortened form.
fn queue_key_part(model: &str) -> String {
    crate::names::bounded(model, 51)
}

/// The model named by a [`queue_annotation`] key, if `key` is one.
pub fn model_from_queue_annotation(key: &str) -> Option<&str> {
    key.strip_prefix(PREFIX)?
        .strip_prefix("queue.")
        .filter(|model| !model.is_empty())
}

/// The model named by a [`queue_since_annotation`] key, if `key` is one.
pub fn model_from_queue_since_annotation(key: &str) -> Option<&str> {
    key.strip_prefix(PREFIX)?
        .strip_prefix("queue-since.")
        .filter(|model| !model.is_empty())
}

// ---------------------------------------------------------------------------
// Finalizers.
// ---------------------------------------------------------------------------

/// Finalizer of v1alpha2 Models: deletes the Deployment, Service and tmpfs.
pub const MODEL_FINALIZER: &str = "flexinfer.ai/model-cleanup";
/// Finalizer of v1alpha1 ModelDeployments.
pub const MODEL_DEPLOYMENT_FINALIZER: &str = "flexinfer.ai/cleanup";
/// Finalizer of LoRAAdapters: unloads the adapter from every replica.
pub const LORA_FINALIZER: &str = "flexinfer.ai/lora-cleanup";

// ---------------------------------------------------------------------------
// Scheduling.
// ---------------------------------------------------------------------------

/// Taint key of dedicated GPU nodes; model pods tolerate
/// `dedicated=gpu:NoSchedule`.
pub const GPU_TAINT_KEY: &str = "dedicated";
/// Taint value of dedicated GPU nodes.
pub const GPU_TAINT_VALUE: &str = "gpu";
/// Taint effect of dedicated GPU nodes.
pub const GPU_TAINT_EFFECT: &str = "NoSchedule";

/// ConfigMap (in the pod's namespace) holding global benchmark results.
pub const BENCHMARK_RESULTS_CONFIG_MAP: &str = "flexinfer-benchmark-results";

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

/// Labels of a model's owned objects and pods: [`identity_labels`] plus
/// the backend. Values naming the model are [`crate::names::label_value`].
pub fn selector_labels(model: &str, backend: &str) -> BTreeMap<String, String> {
    let mut out = identity_labels(model);
    out.insert(BACKEND.to_owned(), backend.to_owned());
    out
}

/// Labels that identify a model's pods whatever its backend: the
/// Deployment's selector (immutable, so a changed `spec.backend` must not
/// change it) and the Service's selector.
pub fn identity_labels(model: &str) -> BTreeMap<String, String> {
    let value = crate::names::label_value(model);
    BTreeMap::from([
        (APP_NAME.to_owned(), APP_NAME_MODEL.to_owned()),
        (APP_INSTANCE.to_owned(), value.clone()),
        (APP_MANAGED_BY.to_owned(), MANAGED_BY_FLEXINFER.to_owned()),
        (MODEL.to_owned(), value),
    ])
}

/// A label selector (`key=value`) matching the pods of `model`.
pub fn model_selector(model: &str) -> String {
    format!("{MODEL}={}", crate::names::label_value(model))
}

/// Splits a comma-separated annotation value (service labels, aliases,
/// serve paths) into trimmed, non-empty items, keeping their order.
pub fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_annotations_embed_the_model_name() {
        assert_eq!(queue_annotation("llama3"), "flexinfer.ai/queue.llama3");
        assert_eq!(
            queue_since_annotation("llama3"),
            "flexinfer.ai/queue-since.llama3"
        );
    }

    #[test]
    fn queue_annotation_keys_fit_the_api_server_limit() {
        // The name part of an annotation key holds at most 63 characters.
        let model = "m".repeat(60);
        for key in [queue_annotation(&model), queue_since_annotation(&model)] {
            let name = key.strip_prefix(PREFIX).unwrap();
            assert!(name.len() <= 63, "{key}");
        }
        assert_ne!(
            queue_annotation(&"m".repeat(60)),
            queue_annotation(&"m".repeat(61))
        );
    }

    #[test]
    fn identity_labels_leave_the_backend_out() {
        let identity = identity_labels("qwen");
        assert!(!identity.contains_key(BACKEND));
        let all = selector_labels("qwen", "vllm");
        assert!(identity.iter().all(|(k, v)| all.get(k) == Some(v)));
        assert_eq!(all[BACKEND], "vllm");
        let long = "q".repeat(80);
        assert!(identity_labels(&long)[MODEL].len() <= 63);
    }

    #[test]
    fn queue_annotations_round_trip() {
        assert_eq!(
            model_from_queue_annotation(&queue_annotation("qwen-7b")),
            Some("qwen-7b")
        );
        assert_eq!(
            model_from_queue_since_annotation(&queue_since_annotation("qwen-7b")),
            Some("qwen-7b")
        );
        // The two families never match each other.
        assert_eq!(
            model_from_queue_annotation("flexinfer.ai/queue-since.qwen"),
            None
        );
        assert_eq!(
            model_from_queue_since_annotation("flexinfer.ai/queue.qwen"),
            None
        );
        assert_eq!(model_from_queue_annotation("flexinfer.ai/queue."), None);
        assert_eq!(model_from_queue_annotation("other.io/queue.qwen"), None);
    }

    #[test]
    fn node_keys_use_the_flexinfer_prefix() {
        for key in [
            NODE_GPU_VENDOR,
            NODE_GPU_ARCH,
            NODE_GPU_VRAM,
            NODE_GPU_COUNT,
            NODE_GPU_INT4,
            NODE_CPU_AVX512,
            NODE_GPU_FREE_MEMORY,
            VRAM_ESTIMATE_MB,
            ROUTING,
            STREAM_FAILOVER,
        ] {
            assert!(key.starts_with(PREFIX), "{key}");
        }
        assert_eq!(NODE_GPU_VENDOR, "flexinfer.ai/gpu.vendor");
        assert_eq!(NODE_GPU_FREE_MEMORY, "flexinfer.ai/gpu-free-memory");
        assert_eq!(VRAM_ESTIMATE_MB, "flexinfer.ai/gpu.vram-estimate-mb");
    }

    #[test]
    fn selector_labels_identify_model_and_backend() {
        let labels = selector_labels("qwen3-8b", "vllm");
        assert_eq!(labels.len(), 5);
        assert_eq!(labels[MODEL], "qwen3-8b");
        assert_eq!(labels[BACKEND], "vllm");
        assert_eq!(labels[APP_INSTANCE], "qwen3-8b");
        assert_eq!(labels[APP_NAME], "model");
        assert_eq!(labels[APP_MANAGED_BY], "flexinfer");
    }

    #[test]
    fn split_list_trims_and_drops_empty_items() {
        assert_eq!(
            split_list(" code, fast ,,textgen "),
            ["code", "fast", "textgen"]
        );
        assert!(split_list("").is_empty());
        assert!(split_list(" , ").is_empty());
    }

    #[test]
    fn lease_config_map_name() {
        assert_eq!(gpu_lease_config_map("gfx1100-a"), "gpu-lease-gfx1100-a");
    }
}
