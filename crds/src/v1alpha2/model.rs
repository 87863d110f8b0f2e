//! `Model` (v1alpha2): one resource per served model.
//!
//! A Model names a backend and a model source; the operator turns it into a
//! Deployment, a Service and, when needed, a cache PVC and prefetch or
//! quantization Jobs, and scales it between `minReplicas` and one replica
//! on demand (scale to zero). Models that name the same `spec.gpu.shared`
//! group take turns on one GPU.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EnvVar, PodSecurityContext, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ModelPhase, ModelSource, ModelStatus, QuantizationSpec};
use crate::defaults;
use crate::labels;
use crate::routing::RoutingStrategy;

/// `status.conditions[].type` values of a Model.
pub mod condition {
    /// The model artifact is present in its cache.
    pub const CACHED: &str = "Cached";
    /// The model is loaded in memory.
    pub const LOADED: &str = "Loaded";
    /// The model serves requests.
    pub const READY: &str = "Ready";
    /// Nodes exist that can run the model.
    pub const SCHEDULABLE: &str = "Schedulable";
    /// The model's aliases do not conflict with other models.
    pub const CONFIG_VALID: &str = "ConfigValid";
}

/// `status.conditions[].reason` values of a Model.
pub mod reason {
    /// No node matches the GPU requirements and node selector.
    pub const NO_MATCHING_NODES: &str = "NoMatchingNodes";
    /// `gpu.vendor` is `auto` and nodes of both vendors match.
    pub const AMBIGUOUS_GPU_VENDOR: &str = "AmbiguousGPUVendor";
    /// The backend does not run on the detected vendor or architecture.
    pub const BACKEND_UNSUPPORTED: &str = "BackendUnsupported";
    /// The VRAM estimate exceeds what the GPUs offer.
    pub const VRAM_INSUFFICIENT: &str = "VRAMInsufficient";
    /// The model can be scheduled.
    pub const SCHEDULABLE: &str = "Schedulable";
    /// Waiting for the cache to be populated.
    pub const CACHE_NOT_READY: &str = "CacheNotReady";
    /// Scaled to zero, waiting for traffic.
    pub const WAITING_FOR_ACTIVATION: &str = "WaitingForActivation";
    /// The backend container is starting.
    pub const STARTING_BACKEND: &str = "StartingBackend";
    /// The API server refused to create the model's pods (the
    /// Deployment's `ReplicaFailure` condition: a missing RuntimeClass,
    /// Pod Security admission, a quota).
    pub const FAILED_CREATE: &str = "FailedCreate";
    /// The backend serves requests.
    pub const BACKEND_READY: &str = "BackendReady";
    /// A higher-priority member of the shared group took the GPU.
    pub const PREEMPTED: &str = "Preempted";
    /// A LiteLLM alias is claimed by another model.
    pub const ALIAS_CONFLICT: &str = "AliasConflict";
    /// The configuration has no conflicts.
    pub const CONFIG_VALID: &str = "ConfigValid";
    /// The backend name is not in the catalog.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
}

/// Desired state of a [`Model`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha2",
    kind = "Model",
    plural = "models",
    singular = "model",
    namespaced,
    status = "ModelStatus",
    shortname = "mdl",
    shortname = "fimodel",
    category = "flexinfer",
    derive = "PartialEq",
    doc = "Model is a served model: a backend plus a model source, scaled to zero when idle and optionally sharing a GPU with other models.",
    printcolumn(name = "Backend", type_ = "string", json_path = ".spec.backend"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Shared",
        type_ = "string",
        json_path = ".spec.gpu.shared",
        priority = 1
    ),
    printcolumn(
        name = "Priority",
        type_ = "integer",
        json_path = ".spec.gpu.priority",
        priority = 1
    ),
    printcolumn(
        name = "TPS",
        type_ = "string",
        json_path = ".status.metrics.tokensPerSecond"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "!self.source.startsWith('pvc://') || !has(self.cache) || !has(self.cache.strategy) || self.cache.strategy == 'SharedPVC' || self.cache.strategy == 'Local' || self.cache.strategy == 'None'"
).message("spec.cache.strategy must be SharedPVC, Local, or None when spec.source is pvc://... (SharedPVC copies to a cache PVC; Local stages onto node-local storage; None mounts the source directly)"))]
#[x_kube(validation = Rule::new(
    "!has(self.resources) || !has(self.resources.limits) || (!('nvidia.com/gpu' in self.resources.limits) && !('amd.com/gpu' in self.resources.limits) && !('gpu.intel.com/i915' in self.resources.limits))"
).message("Do not set GPU limits in spec.resources.limits; use spec.gpu.vendor/spec.gpu.count instead"))]
#[x_kube(validation = Rule::new(
    "!has(self.resources) || !has(self.resources.requests) || (!('nvidia.com/gpu' in self.resources.requests) && !('amd.com/gpu' in self.resources.requests) && !('gpu.intel.com/i915' in self.resources.requests))"
).message("Do not set GPU requests in spec.resources.requests; use spec.gpu.vendor/spec.gpu.count instead"))]
#[x_kube(validation = Rule::new(
    "!has(self.gpu) || !has(self.gpu.vendor) || self.gpu.vendor == 'auto' || !has(self.nodeSelector) || !('node.flexstack.io/gpu-vendor' in self.nodeSelector) || self.nodeSelector['node.flexstack.io/gpu-vendor'] == self.gpu.vendor"
).message("spec.nodeSelector['node.flexstack.io/gpu-vendor'] must match spec.gpu.vendor"))]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// Inference backend: ollama, vllm, mlc-llm, llamacpp, diffusers,
    /// comfyui or vllm-omni (aliases such as `llama.cpp` are accepted).
    pub backend: String,
    /// Model source URI: `HF://org/model`, `ollama://model:tag`,
    /// `file:///path/to/model` or `pvc://claim/path`.
    pub source: String,
    /// Container image, overriding the backend's default for the detected
    /// GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Extra container args, appended after the backend's args.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra container environment, appended after the backend's env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// GPU allocation and sharing. Without it the model runs on CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSpec>,
    /// Scale-to-zero behaviour (enabled by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serverless: Option<ServerlessSpec>,
    /// Model caching. When unset the strategy is Memory for shared models
    /// and SharedPVC otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
    /// Backend-specific configuration (`maxModelLen`, `servedModelName`,
    /// `ggufFile`, `gpuMemoryUtilization`, ...), passed to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub config: Option<Map<String, Value>>,
    /// Compute resources of the model container. GPUs come from `gpu`, not
    /// from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector; when unset, GPU nodes are detected.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations added to the pod, besides the GPU-node tolerations that
    /// GPU models get from the operator (`--gpu-tolerations`; by default
    /// `dedicated=gpu`, `nvidia.com/gpu` and `amd.com/gpu` with effect
    /// NoSchedule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// RuntimeClass of the model's pods; unset: the operator's
    /// `--nvidia-runtime-class` for NVIDIA GPU pods, else none (the node's
    /// default runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Pod security settings of the model's pods, over the operator's
    /// defaults (seccomp `RuntimeDefault`; ROCm groups for AMD GPUs). Set
    /// `runAsNonRoot` (and a user the image allows) for namespaces that
    /// enforce the `restricted` Pod Security level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// Client-facing names: served name, aliases, parking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub litellm: Option<LiteLlmSpec>,
    /// Semantic labels (`textgen`, `code`, `fast`) that route requests to
    /// this model or to a group of models sharing the label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub service_labels: Vec<String>,
    /// KV-cache pressure management (vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<KvCacheSpec>,
    /// Capability overrides; unset fields are inferred from the backend
    /// and config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<ModelCapabilities>,
    /// Post-download quantization; the quantized output is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantize: Option<QuantizationSpec>,
}

/// GPU vendor selector of a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    /// Detect from the nodes matching the selector; fails when both NVIDIA
    /// and AMD nodes match.
    #[default]
    Auto,
    /// NVIDIA GPUs.
    Nvidia,
    /// AMD GPUs.
    Amd,
    /// CPU only: no GPU is requested.
    Cpu,
}

/// Preference of a shared-group member for keeping the GPU warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum WarmPolicy {
    /// The group's primary: reclaims the GPU from idle non-primary members.
    Primary,
}

/// GPU allocation and sharing.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!has(self.vendor) || self.vendor != 'cpu' || !has(self.count)")
    .message("gpu.count must be omitted when gpu.vendor is cpu"))]
#[x_kube(validation = Rule::new("!has(self.vendor) || self.vendor != 'cpu' || !has(self.vramEstimateMB)")
    .message("gpu.vramEstimateMB must be omitted when gpu.vendor is cpu"))]
#[x_kube(validation = Rule::new("!has(self.vendor) || self.vendor != 'cpu' || !has(self.shared) || size(self.shared) == 0")
    .message("gpu.shared must be empty when gpu.vendor is cpu"))]
#[serde(rename_all = "camelCase")]
pub struct GpuSpec {
    /// Vendor to target; `auto` detects it from the nodes, `cpu` requests
    /// no GPU.
    #[serde(default)]
    pub vendor: GpuVendor,
    /// Shared GPU group. Models with the same value take turns on one GPU;
    /// higher priority preempts lower. Unset means exclusive GPU access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<String>,
    /// Priority within the shared group; higher preempts lower.
    #[serde(default = "default_priority")]
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,
    /// Number of GPUs (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub count: Option<i32>,
    /// Restricts the model to nodes whose `flexinfer.ai/gpu.arch` label
    /// equals this architecture (`gfx1100`, `sm_89`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Estimated VRAM use in MB, for scheduling and shared-group packing.
    #[serde(
        default,
        rename = "vramEstimateMB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub vram_estimate_mb: Option<i64>,
    /// Anti-thrashing cooldown of the shared group after a swap (default
    /// 5m); the group uses the largest value among its members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_cooldown: Option<kube::core::Duration>,
    /// Promote this member by priority alone, ignoring cooldowns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_promotion: Option<bool>,
    /// Warm-keeping preference within the shared group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_policy: Option<WarmPolicy>,
}

impl Default for GpuSpec {
    fn default() -> Self {
        GpuSpec {
            vendor: GpuVendor::Auto,
            shared: None,
            priority: defaults::GPU_PRIORITY,
            count: None,
            arch: None,
            vram_estimate_mb: None,
            swap_cooldown: None,
            force_promotion: None,
            warm_policy: None,
        }
    }
}

impl GpuSpec {
    /// The shared group name, `None` when unset or blank.
    pub fn shared_group(&self) -> Option<&str> {
        self.shared
            .as_deref()
            .map(str::trim)
            .filter(|group| !group.is_empty())
    }

    /// Effective swap cooldown.
    pub fn swap_cooldown(&self) -> Duration {
        self.swap_cooldown
            .map_or(defaults::SHARED_SWAP_COOLDOWN, Duration::from)
    }
}

/// Scale-to-zero behaviour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerlessSpec {
    /// Scale to `minReplicas` when idle.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Replicas kept while idle: 0 for true scale-to-zero, 1 for a warm
    /// model.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10))]
    pub min_replicas: i32,
    /// Time without traffic before scaling down. Unset means the backend's
    /// default: 5m, or 10m for image-generation backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<kube::core::Duration>,
    /// Longest a request waits for the model to become ready before it gets
    /// 503.
    #[serde(default = "default_cold_start_timeout")]
    #[schemars(extend("default" = defaults::COLD_START_TIMEOUT_LITERAL))]
    pub cold_start_timeout: kube::core::Duration,
}

impl Default for ServerlessSpec {
    fn default() -> Self {
        ServerlessSpec {
            enabled: defaults::SERVERLESS_ENABLED,
            min_replicas: defaults::MIN_REPLICAS,
            idle_timeout: None,
            cold_start_timeout: default_cold_start_timeout(),
        }
    }
}

impl ServerlessSpec {
    /// Idle timeout, [`defaults::IDLE_TIMEOUT`] (300s) when unset. Use
    /// [`ModelSpec::idle_timeout`] for the backend-aware value.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
            .map_or(defaults::IDLE_TIMEOUT, Duration::from)
    }

    /// Cold-start timeout.
    pub fn cold_start_timeout(&self) -> Duration {
        self.cold_start_timeout.into()
    }
}

/// Where a model's weights are kept between runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum CacheStrategy {
    /// In RAM (`/dev/shm`): fast reloads, costs memory.
    Memory,
    /// On a PVC (`<model>-cache` unless `pvcName` is set).
    #[serde(rename = "SharedPVC")]
    SharedPvc,
    /// On a node-local hostPath directory (e.g. NVMe).
    Local,
    /// No cache: the backend downloads or mounts the source directly.
    None,
}

/// Model caching.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheSpec {
    /// Strategy; defaults to Memory for shared models, SharedPVC otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<CacheStrategy>,
    /// PVC of the SharedPVC strategy; created as `<model>-cache` when unset.
    #[serde(default, rename = "pvcName", skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    /// Storage class of created PVCs; unset: the operator's
    /// `--cache-storage-class`, else the cluster's default StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// Size of created PVCs.
    #[serde(default = "default_cache_size")]
    pub size: String,
    /// Access mode of created PVCs: `ReadWriteOnce` (the default; the
    /// model's pods are then replaced, never overlapped, and all replicas
    /// must share a node) or `ReadWriteMany` (a class that supports it;
    /// replicas on several nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]))]
    pub access_mode: Option<String>,
    /// Base directory of the Local strategy; each model gets
    /// `<hostPath>/<namespace>/<model>`.
    #[serde(default = "default_cache_host_path")]
    pub host_path: String,
    /// Persistent GPU kernel compilation cache (AMD ROCm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compilation_cache: Option<CompilationCacheSpec>,
    /// Flash loader: copy model files into tmpfs before the backend starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash_loader: Option<FlashLoaderSpec>,
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec {
            strategy: None,
            pvc_name: None,
            storage_class: None,
            access_mode: None,
            size: default_cache_size(),
            host_path: default_cache_host_path(),
            compilation_cache: None,
            flash_loader: None,
        }
    }
}

impl CacheSpec {
    /// Whether the flash loader was switched on or off explicitly; `None`
    /// leaves the choice to the operator (on for shared models with the
    /// Local strategy).
    pub fn flash_loader_enabled(&self) -> Option<bool> {
        self.flash_loader.as_ref().and_then(|loader| loader.enabled)
    }
}

/// Host-persistent GPU kernel compilation cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompilationCacheSpec {
    /// Persist compilation artifacts; defaults to on for shared AMD models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Base directory on the node; each model gets
    /// `<hostPath>/<namespace>/<model>`.
    #[serde(default = "default_compilation_cache_host_path")]
    pub host_path: String,
    /// Soft size limit of the directory.
    #[serde(default = "default_compilation_cache_size_limit")]
    pub size_limit: String,
}

impl Default for CompilationCacheSpec {
    fn default() -> Self {
        CompilationCacheSpec {
            enabled: None,
            host_path: default_compilation_cache_host_path(),
            size_limit: default_compilation_cache_size_limit(),
        }
    }
}

/// The flash-loader init container: a parallel, verified copy of the model
/// files from the cache volume into tmpfs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlashLoaderSpec {
    /// On or off; unset lets the operator decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Parallel copy workers.
    #[serde(default = "default_flash_loader_concurrency")]
    #[schemars(range(min = 1, max = 32))]
    pub concurrency: i32,
    /// Size limit of the tmpfs volume (defaults to `cache.size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmpfs_size_limit: Option<String>,
    /// Per-worker I/O buffer in KiB.
    #[serde(default = "default_flash_loader_buffer_kb", rename = "bufferSizeKB")]
    #[schemars(range(min = 32, max = 16384))]
    pub buffer_size_kb: i32,
    /// Verify sizes after copying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_integrity: Option<bool>,
    /// Image of the init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl Default for FlashLoaderSpec {
    fn default() -> Self {
        FlashLoaderSpec {
            enabled: None,
            concurrency: default_flash_loader_concurrency(),
            tmpfs_size_limit: None,
            buffer_size_kb: default_flash_loader_buffer_kb(),
            verify_integrity: None,
            image: None,
        }
    }
}

/// Client-facing names of a model (LiteLLM-compatible annotations).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiteLlmSpec {
    /// Expose the model; `false` parks it (hidden from `/v1/models`,
    /// requests get 404 and never wake it).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Name clients use; defaults to the resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model_name: Option<String>,
    /// Further names that route to this model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Alias for IDE/Copilot clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copilot_alias: Option<String>,
}

impl Default for LiteLlmSpec {
    fn default() -> Self {
        LiteLlmSpec {
            enabled: defaults::LITELLM_ENABLED,
            served_model_name: None,
            aliases: Vec::new(),
            copilot_alias: None,
        }
    }
}

/// Reaction to KV-cache pressure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum KvCachePressurePolicy {
    /// Emit events only.
    #[default]
    Observe,
    /// Reduce backend limits (see `reconfigureStrategy`).
    Reconfigure,
    /// Scale down the lowest-priority replica.
    Evict,
}

/// Which limits the Reconfigure policy reduces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum KvCacheReconfigureStrategy {
    /// Reduce `maxNumSeqs`.
    #[default]
    ReduceSeqs,
    /// Reduce `maxModelLen`.
    ReduceMaxLen,
    /// Reduce both.
    Both,
}

/// KV-cache pressure management.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvCacheSpec {
    /// Reaction when usage reaches the high watermark.
    #[serde(default)]
    pub pressure_policy: KvCachePressurePolicy,
    /// Usage ratio that triggers the policy (default 0.85).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<Quantity>,
    /// Usage ratio targeted after mitigation (default 0.60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_watermark: Option<Quantity>,
    /// vLLM `--block-size` override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_block_size: Option<i32>,
    /// vLLM `--swap-space` in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_space: Option<Quantity>,
    /// Delay before a reconfiguration may be reverted (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfigure_cooldown: Option<kube::core::Duration>,
    /// Limits the Reconfigure policy reduces.
    #[serde(default)]
    pub reconfigure_strategy: KvCacheReconfigureStrategy,
}

impl KvCacheSpec {
    /// Effective high watermark.
    pub fn high_watermark(&self) -> f64 {
        self.high_watermark
            .as_ref()
            .and_then(crate::quantity::to_f64)
            .unwrap_or(defaults::KV_CACHE_HIGH_WATERMARK)
    }

    /// Effective low watermark.
    pub fn low_watermark(&self) -> f64 {
        self.low_watermark
            .as_ref()
            .and_then(crate::quantity::to_f64)
            .unwrap_or(defaults::KV_CACHE_LOW_WATERMARK)
    }

    /// Effective reconfigure cooldown.
    pub fn reconfigure_cooldown(&self) -> Duration {
        self.reconfigure_cooldown
            .map_or(defaults::KV_CACHE_RECONFIGURE_COOLDOWN, Duration::from)
    }
}

/// Capability overrides for downstream consumers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCapabilities {
    /// OpenAI tool calling (inferred: vllm, ollama; llamacpp with `jinja`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calling: Option<bool>,
    /// Image input (inferred: llamacpp with `mmproj`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<bool>,
    /// Image generation (inferred: diffusers, comfyui, vllm-omni).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_generation: Option<bool>,
}

impl ModelSpec {
    /// GPU vendor selector. A model without `gpu` runs on CPU, consistent
    /// with [`ModelSpec::gpu_count`] returning 0.
    pub fn gpu_vendor(&self) -> GpuVendor {
        self.gpu.as_ref().map_or(GpuVendor::Cpu, |gpu| gpu.vendor)
    }

    /// GPUs to request: 0 without `gpu` or on CPU, else `count` (default 1).
    pub fn gpu_count(&self) -> i32 {
        match &self.gpu {
            None => 0,
            Some(gpu) if gpu.vendor == GpuVendor::Cpu => 0,
            Some(gpu) => gpu.count.unwrap_or(defaults::GPU_COUNT),
        }
    }

    /// Priority within the shared group.
    pub fn priority(&self) -> i32 {
        self.gpu
            .as_ref()
            .map_or(defaults::GPU_PRIORITY, |gpu| gpu.priority)
    }

    /// Shared GPU group, `None` for exclusive models.
    pub fn shared_group(&self) -> Option<&str> {
        self.gpu.as_ref().and_then(GpuSpec::shared_group)
    }

    /// Whether the model takes turns on a shared GPU.
    pub fn is_shared(&self) -> bool {
        self.shared_group().is_some()
    }

    /// VRAM estimate in MB, if given.
    pub fn vram_estimate_mb(&self) -> Option<i64> {
        self.gpu.as_ref().and_then(|gpu| gpu.vram_estimate_mb)
    }

    /// Whether scale-to-zero is on (default true).
    pub fn is_serverless(&self) -> bool {
        self.serverless
            .as_ref()
            .map_or(defaults::SERVERLESS_ENABLED, |s| s.enabled)
    }

    /// Replicas kept while idle: `minReplicas` when serverless, else 1.
    pub fn min_replicas(&self) -> i32 {
        if !self.is_serverless() {
            return defaults::NON_SERVERLESS_REPLICAS;
        }
        self.serverless
            .as_ref()
            .map_or(defaults::MIN_REPLICAS, |s| s.min_replicas)
    }

    /// Idle timeout: `serverless.idleTimeout`, else the backend's default
    /// (10m for image generation), else [`defaults::IDLE_TIMEOUT`].
    pub fn idle_timeout(&self) -> Duration {
        if let Some(timeout) = self.serverless.as_ref().and_then(|s| s.idle_timeout) {
            return timeout.into();
        }
        crate::backend::get(&self.backend)
            .map_or(defaults::IDLE_TIMEOUT, |backend| backend.idle_timeout)
    }

    /// Longest a request waits for activation.
    pub fn cold_start_timeout(&self) -> Duration {
        self.serverless.as_ref().map_or(
            defaults::COLD_START_TIMEOUT,
            ServerlessSpec::cold_start_timeout,
        )
    }

    /// Cache strategy: explicit, else Memory for shared models, else
    /// SharedPVC.
    pub fn cache_strategy(&self) -> CacheStrategy {
        match self.cache.as_ref().and_then(|cache| cache.strategy) {
            Some(strategy) => strategy,
            None if self.is_shared() => CacheStrategy::Memory,
            None => CacheStrategy::SharedPvc,
        }
    }

    /// Whether the model is parked (`litellm.enabled: false`): hidden and
    /// never woken by requests.
    pub fn is_parked(&self) -> bool {
        self.litellm
            .as_ref()
            .is_some_and(|litellm| !litellm.enabled)
    }

    /// The parsed model source.
    pub fn model_source(&self) -> ModelSource {
        ModelSource::parse(&self.source)
    }

    /// Name to put in the request body's `model` field for the backend:
    /// `config.servedModelName`, else the source without its scheme.
    pub fn backend_model_name(&self) -> String {
        match self
            .config_str("servedModelName")
            .filter(|name| !name.is_empty())
        {
            Some(name) => name.to_owned(),
            None => self.model_source().backend_model_name(),
        }
    }

    /// Name clients use: `litellm.servedModelName`, else the resource name.
    pub fn served_model_name<'a>(&'a self, resource_name: &'a str) -> &'a str {
        self.litellm
            .as_ref()
            .and_then(|litellm| litellm.served_model_name.as_deref())
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .unwrap_or(resource_name)
    }

    /// Names other than the resource name that route to this model:
    /// `litellm.servedModelName` and `litellm.aliases`, trimmed, non-empty,
    /// without duplicates, in declaration order.
    pub fn client_aliases(&self, resource_name: &str) -> Vec<String> {
        let Some(litellm) = &self.litellm else {
            return Vec::new();
        };
        let mut aliases: Vec<String> = Vec::new();
        let candidates = litellm
            .served_model_name
            .iter()
            .chain(litellm.aliases.iter());
        for alias in candidates.map(|alias| alias.trim()) {
            if !alias.is_empty() && alias != resource_name && !aliases.iter().any(|a| a == alias) {
                aliases.push(alias.to_owned());
            }
        }
        aliases
    }

    /// A backend config value.
    pub fn config_value(&self, key: &str) -> Option<&Value> {
        self.config.as_ref()?.get(key)
    }

    /// A string backend config value.
    pub fn config_str(&self, key: &str) -> Option<&str> {
        self.config_value(key)?.as_str()
    }

    /// An integer backend config value (floats with no fraction count).
    pub fn config_i64(&self, key: &str) -> Option<i64> {
        let value = self.config_value(key)?;
        value.as_i64().or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0)
                .map(|f| f as i64)
        })
    }

    /// A boolean backend config value.
    pub fn config_bool(&self, key: &str) -> Option<bool> {
        self.config_value(key)?.as_bool()
    }

    /// Context window in tokens: the first positive of config
    /// `maxModelLen`, `maxTotalSeqLength`, `contextWindowSize`,
    /// `contextSize`.
    pub fn context_window(&self) -> Option<i64> {
        [
            "maxModelLen",
            "maxTotalSeqLength",
            "contextWindowSize",
            "contextSize",
        ]
        .into_iter()
        .filter_map(|key| self.config_i64(key))
        .find(|&tokens| tokens > 0)
    }

    /// Largest prompt in tokens: config `maxInputTokens`, else the context
    /// window, capped at the context window.
    pub fn max_input_tokens(&self) -> Option<i64> {
        self.capped_token_limit("maxInputTokens")
    }

    /// Largest completion in tokens: config `maxOutputTokens`, else the
    /// context window, capped at the context window.
    pub fn max_output_tokens(&self) -> Option<i64> {
        self.capped_token_limit("maxOutputTokens")
    }

    fn capped_token_limit(&self, key: &str) -> Option<i64> {
        let window = self.context_window();
        let limit = self
            .config_i64(key)
            .filter(|&tokens| tokens > 0)
            .or(window)?;
        Some(window.map_or(limit, |window| limit.min(window)))
    }
}

impl Model {
    /// Lifecycle phase, if reported.
    pub fn phase(&self) -> Option<ModelPhase> {
        self.status.as_ref().and_then(|status| status.phase)
    }

    /// Whether the model serves requests.
    pub fn is_ready(&self) -> bool {
        self.phase() == Some(ModelPhase::Ready)
    }

    /// Routing strategy from the `flexinfer.ai/routing` annotation.
    pub fn routing_strategy(&self) -> RoutingStrategy {
        RoutingStrategy::from_annotation(self.annotation(labels::ROUTING))
    }

    /// Path prefixes from the `flexinfer.ai/serve-paths` annotation; empty
    /// means every path is served.
    pub fn serve_paths(&self) -> Vec<String> {
        self.annotation(labels::SERVE_PATHS)
            .map(labels::split_list)
            .unwrap_or_default()
    }

    /// Whether the model opted into context-window admission control.
    pub fn admission_context_bounded(&self) -> bool {
        self.annotation(labels::ADMISSION)
            .is_some_and(|value| value.trim() == labels::ADMISSION_CONTEXT_BOUNDED)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

fn default_true() -> bool {
    true
}

fn default_priority() -> i32 {
    defaults::GPU_PRIORITY
}

fn default_cold_start_timeout() -> kube::core::Duration {
    defaults::COLD_START_TIMEOUT.into()
}

fn default_cache_size() -> String {
    defaults::CACHE_SIZE.to_owned()
}

fn default_cache_host_path() -> String {
    defaults::CACHE_HOST_PATH.to_owned()
}

fn default_compilation_cache_host_path() -> String {
    defaults::COMPILATION_CACHE_HOST_PATH.to_owned()
}

fn default_compilation_cache_size_limit() -> String {
    defaults::COMPILATION_CACHE_SIZE_LIMIT.to_owned()
}

fn default_flash_loader_concurrency() -> i32 {
    defaults::FLASH_LOADER_CONCURRENCY
}

fn default_flash_loader_buffer_kb() -> i32 {
    defaults::FLASH_LOADER_BUFFER_KB
}
