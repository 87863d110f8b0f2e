//! `ModelDeployment` (v1alpha1, deprecated): the per-deployment resource
//! that `Model` replaces. Still served so that existing manifests keep
//! working; the gateway falls back to it when no Model has the requested
//! name.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::GpuAllocation;
use crate::defaults;
use crate::v1alpha2::LiteLlmSpec;

/// `status.conditions[].type` values of a ModelDeployment.
pub mod condition {
    /// Serving requests.
    pub const READY: &str = "Ready";
    /// A GPU was allocated.
    pub const GPU_ALLOCATED: &str = "GPUAllocated";
    /// The model is loaded.
    pub const MODEL_LOADED: &str = "ModelLoaded";
    /// The Service has endpoints.
    pub const ENDPOINT_READY: &str = "EndpointReady";
    /// A rollout is in progress.
    pub const PROGRESSING: &str = "Progressing";
}

/// `status.conditions[].reason` values of a ModelDeployment.
pub mod reason {
    /// Reconciliation in progress.
    pub const RECONCILING: &str = "Reconciling";
    /// A GPU was allocated.
    pub const GPU_ALLOCATED: &str = "GPUAllocated";
    /// No GPU could be allocated.
    pub const GPU_ALLOCATION_FAILED: &str = "GPUAllocationFailed";
    /// The Deployment is ready.
    pub const DEPLOYMENT_READY: &str = "DeploymentReady";
    /// The Service is ready.
    pub const SERVICE_READY: &str = "ServiceReady";
    /// The model failed to load.
    pub const MODEL_LOAD_FAILED: &str = "ModelLoadFailed";
    /// The spec is invalid.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
}

/// Desired state of a [`ModelDeployment`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha1",
    kind = "ModelDeployment",
    plural = "modeldeployments",
    singular = "modeldeployment",
    namespaced,
    shortname = "mdeploy",
    category = "flexinfer",
    status = "ModelDeploymentStatus",
    derive = "PartialEq",
    doc = "ModelDeployment is the deprecated per-deployment model resource; use Model (v1alpha2).",
    printcolumn(name = "Backend", type_ = "string", json_path = ".spec.backend"),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "TPS", type_ = "string", json_path = ".status.tokensPerSecond"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelDeploymentSpec {
    /// Backend name (ollama, vllm, ...).
    #[schemars(length(min = 1))]
    pub backend: String,
    /// Model identifier passed to the backend (`llama3:8b`).
    #[schemars(length(min = 1))]
    pub model: String,
    /// Desired pods while active.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Pods kept while idle (0 for scale to zero).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_replicas: i32,
    /// Seconds without traffic before scaling to `minReplicas`.
    #[serde(default = "default_idle_timeout_seconds")]
    #[schemars(range(min = 0))]
    pub idle_timeout_seconds: i32,
    /// Longest a request waits for activation, in seconds.
    #[serde(default = "default_cold_start_timeout_seconds")]
    #[schemars(range(min = 10, max = 1800))]
    pub cold_start_timeout_seconds: i32,
    /// Compute resources of the model container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Benchmark tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<BenchmarkSpec>,
    /// ModelCache providing the model volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_cache_ref: Option<String>,
    /// Client-facing names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub litellm: Option<LiteLlmSpec>,
    /// Pod node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// MLC-LLM settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlcllm: Option<MlcLlmConfig>,
    /// vLLM settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm: Option<VllmConfig>,
    /// llama.cpp settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llamacpp: Option<LlamaCppConfig>,
    /// ComfyUI settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comfyui: Option<ComfyUiConfig>,
    /// vLLM-Omni settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_omni: Option<VllmOmniConfig>,
    /// GPUGroup the deployment belongs to; the group then decides scaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_group_ref: Option<String>,
    /// Priority within the GPUGroup (overridable by the group's member
    /// entry).
    #[serde(default = "default_priority")]
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,
    /// Estimated VRAM use in MB.
    #[serde(
        default,
        rename = "vramEstimateMB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub vram_estimate_mb: Option<i64>,
    /// Semantic labels put on the Service while the deployment is active.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub service_labels: Vec<String>,
}

impl ModelDeploymentSpec {
    /// A spec with every optional field at its default.
    pub fn new(backend: impl Into<String>, model: impl Into<String>) -> ModelDeploymentSpec {
        ModelDeploymentSpec {
            backend: backend.into(),
            model: model.into(),
            replicas: default_replicas(),
            min_replicas: 0,
            idle_timeout_seconds: default_idle_timeout_seconds(),
            cold_start_timeout_seconds: default_cold_start_timeout_seconds(),
            resources: None,
            benchmark: None,
            model_cache_ref: None,
            litellm: None,
            node_selector: BTreeMap::new(),
            mlcllm: None,
            vllm: None,
            llamacpp: None,
            comfyui: None,
            vllm_omni: None,
            gpu_group_ref: None,
            priority: default_priority(),
            vram_estimate_mb: None,
            service_labels: Vec::new(),
        }
    }

    /// Time without traffic before scaling down.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.idle_timeout_seconds).unwrap_or(0))
    }

    /// Longest a request waits for activation.
    pub fn cold_start_timeout(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.cold_start_timeout_seconds).unwrap_or(0))
    }

    /// Whether the deployment is parked (`litellm.enabled: false`).
    pub fn is_parked(&self) -> bool {
        self.litellm
            .as_ref()
            .is_some_and(|litellm| !litellm.enabled)
    }
}

impl ModelDeployment {
    /// Whether the deployment serves requests: condition `Ready` is true and
    /// replicas are wanted.
    pub fn is_ready(&self) -> bool {
        self.spec.replicas > 0
            && self.status.as_ref().is_some_and(|status| {
                crate::conditions::is_true(&status.conditions, condition::READY)
            })
    }
}

/// Benchmark tuning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BenchmarkSpec {
    /// Warm-up requests before measuring.
    #[serde(default = "default_warmup_iterations")]
    #[schemars(range(min = 0))]
    pub warmup_iterations: i32,
    /// Minimum measuring time (`30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_duration: Option<kube::core::Duration>,
    /// Tokens to generate per request.
    #[serde(default = "default_batch_size")]
    #[schemars(range(min = 1))]
    pub batch_size: i32,
    /// Measured requests.
    #[serde(default = "default_iterations")]
    #[schemars(range(min = 1))]
    pub iterations: i32,
}

impl Default for BenchmarkSpec {
    fn default() -> Self {
        BenchmarkSpec {
            warmup_iterations: default_warmup_iterations(),
            min_duration: None,
            batch_size: default_batch_size(),
            iterations: default_iterations(),
        }
    }
}

/// MLC-LLM serving mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum MlcMode {
    /// Single user, small footprint.
    Local,
    /// Many users, large KV cache.
    Server,
    /// Chat-optimised.
    Interactive,
}

/// MLC-LLM just-in-time compilation policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "UPPERCASE")]
pub enum JitPolicy {
    /// Compile when needed.
    On,
    /// Never compile; needs `modelLibPath`.
    Off,
    /// Always recompile.
    Redo,
    /// Use cached compilations only.
    Readonly,
}

/// MLC-LLM settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MlcLlmConfig {
    /// Serving mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<MlcMode>,
    /// Pre-compiled model library (`.so`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_lib_path: Option<String>,
    /// GPU memory budget in bytes (default 23068672000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpu_memory_bytes: Option<i64>,
    /// JIT compilation policy.
    #[serde(default, rename = "jitPolicy", skip_serializing_if = "Option::is_none")]
    pub jit_policy: Option<JitPolicy>,
    /// `--overrides` parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<MlcOverrides>,
    /// TVM/CUDA compile options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_options: Option<MlcCompileOptions>,
}

impl MlcLlmConfig {
    /// Effective GPU memory budget.
    pub fn gpu_memory_bytes(&self) -> i64 {
        self.gpu_memory_bytes
            .unwrap_or(defaults::MLC_GPU_MEMORY_BYTES)
    }
}

/// MLC-LLM `--overrides` parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MlcOverrides {
    /// Prefill chunk size (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 64, max = 8192))]
    pub prefill_chunk_size: Option<i32>,
    /// Context plus generation length (default 16384).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 256, max = 131072))]
    pub max_total_seq_length: Option<i32>,
    /// Concurrent sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub max_num_sequence: Option<i32>,
    /// Fraction of GPU memory, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<String>,
    /// Context window size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 256, max = 131072))]
    pub context_window_size: Option<i32>,
    /// Extra `key=value;...` overrides appended verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// MLC-LLM compile options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MlcCompileOptions {
    /// CUTLASS GEMM kernels (needs FP16 hardware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_cutlass: Option<bool>,
    /// FlashInfer attention (Ampere or newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_flash_infer: Option<bool>,
    /// cuBLAS GEMM fallback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_cublas_gemm: Option<bool>,
    /// CUDA graph capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_cuda_graph: Option<bool>,
}

/// vLLM weight data type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum VllmDtype {
    /// From the model config.
    Auto,
    /// FP16.
    Float16,
    /// BF16.
    Bfloat16,
    /// FP32.
    Float32,
}

/// vLLM quantization method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum VllmQuantization {
    /// AWQ.
    #[serde(rename = "awq")]
    Awq,
    /// SqueezeLLM.
    #[serde(rename = "squeezellm")]
    SqueezeLlm,
    /// GPTQ.
    #[serde(rename = "gptq")]
    Gptq,
    /// FP8.
    #[serde(rename = "fp8")]
    Fp8,
    /// Explicitly none.
    #[serde(rename = "None")]
    Disabled,
    /// Unset.
    #[serde(rename = "")]
    Unset,
}

/// vLLM KV-cache data type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheDtype {
    /// From the model config.
    Auto,
    /// FP8.
    Fp8,
    /// FP8 E5M2.
    #[serde(rename = "fp8_e5m2")]
    Fp8E5m2,
    /// FP8 E4M3.
    #[serde(rename = "fp8_e4m3")]
    Fp8E4m3,
    /// Intel FP8.
    #[serde(rename = "fp8_inc")]
    Fp8Inc,
    /// INT8 (recommended on AMD).
    Int8,
}

/// RoPE scaling method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum RopeScalingType {
    /// Linear interpolation.
    Linear,
    /// Dynamic NTK-aware scaling.
    Dynamic,
    /// YaRN.
    Yarn,
    /// LongRoPE.
    Longrope,
}

/// RoPE scaling for contexts beyond the training length.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RopeScaling {
    /// Method.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<RopeScalingType>,
    /// Scaling factor as a decimal string (`"2.0"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<String>,
}

/// vLLM settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VllmConfig {
    /// GPUs for tensor parallelism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub tensor_parallel_size: Option<i32>,
    /// Weight data type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<VllmDtype>,
    /// Quantization method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<VllmQuantization>,
    /// Context plus generation length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 256, max = 131072))]
    pub max_model_len: Option<i32>,
    /// Fraction of GPU memory as a decimal string (default `"0.9"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<String>,
    /// Disable CUDA graphs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce_eager: Option<bool>,
    /// Sequences per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_num_seqs: Option<i32>,
    /// CPU swap space per GPU in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub swap_space: Option<i32>,
    /// Run code from the model repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_remote_code: Option<bool>,
    /// `HIP_VISIBLE_DEVICES` (`"1"`, `"0,1"`).
    #[serde(
        default,
        rename = "hipVisibleDevices",
        skip_serializing_if = "Option::is_none"
    )]
    pub hip_visible_devices: Option<String>,
    /// Automatic prefix caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_prefix_caching: Option<bool>,
    /// KV-cache data type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<KvCacheDtype>,
    /// Compute FP8 KV scales at run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calculate_kv_scales: Option<bool>,
    /// Attention backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [
        "FLASH_ATTN", "XFORMERS", "ROCM_FLASH", "FLASHINFER", "TORCH_SDPA",
        "flash_attn", "xformers", "rocm_flash", "flashinfer", "torch_sdpa"
    ]))]
    pub attention_backend: Option<String>,
    /// CPU RAM in GB for offloading.
    #[serde(
        default,
        rename = "cpuOffloadGB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 512))]
    pub cpu_offload_gb: Option<i32>,
    /// Chunked prefill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_chunked_prefill: Option<bool>,
    /// KV-cache block size in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [8, 16, 32]))]
    pub block_size: Option<i32>,
    /// RoPE scaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
}

/// llama.cpp settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LlamaCppConfig {
    /// Context size in tokens (default 2048).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 131072))]
    pub context_size: Option<i32>,
    /// Layers offloaded to the GPU (999 for all).
    #[serde(
        default,
        rename = "nGPULayers",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub n_gpu_layers: Option<i32>,
    /// Prompt batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub batch_size: Option<i32>,
    /// Generation threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub threads: Option<i32>,
    /// Flash attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash_attention: Option<bool>,
    /// GPU of the main model.
    #[serde(default, rename = "mainGPU", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub main_gpu: Option<i32>,
    /// RoPE frequency base as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_freq_base: Option<String>,
    /// RoPE frequency scale as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_freq_scale: Option<String>,
}

impl LlamaCppConfig {
    /// Effective context size.
    pub fn context_size(&self) -> i32 {
        self.context_size.unwrap_or(defaults::LLAMACPP_CONTEXT_SIZE)
    }
}

/// ComfyUI settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComfyUiConfig {
    /// Directory of workflow JSON files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows_path: Option<String>,
    /// Where model files are mounted.
    #[serde(default = "default_comfyui_models_path")]
    pub models_path: String,
    /// Directory of custom nodes.
    #[serde(default = "default_comfyui_custom_nodes_path")]
    pub custom_nodes_path: String,
    /// Models to preload (`checkpoints/sdxl.safetensors`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preload_models: Vec<String>,
    /// Send CORS headers.
    #[serde(default = "default_true", rename = "enableCORS")]
    pub enable_cors: bool,
    /// Extra command-line arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

impl Default for ComfyUiConfig {
    fn default() -> Self {
        ComfyUiConfig {
            workflows_path: None,
            models_path: default_comfyui_models_path(),
            custom_nodes_path: default_comfyui_custom_nodes_path(),
            preload_models: Vec::new(),
            enable_cors: true,
            extra_args: Vec::new(),
        }
    }
}

/// vLLM-Omni cache acceleration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum CacheAcceleration {
    /// None.
    None,
    /// TeaCache.
    #[default]
    Teacache,
    /// Cache-DiT.
    Cachedit,
}

/// vLLM-Omni (image generation) settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VllmOmniConfig {
    /// Diffusion model to load; defaults to `spec.model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diffusion_model: Option<String>,
    /// Cache acceleration.
    #[serde(default)]
    pub cache_acceleration: CacheAcceleration,
    /// Default output size.
    #[serde(default = "default_vllm_omni_size")]
    pub default_size: String,
    /// Fraction of GPU memory as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<String>,
    /// Sequences per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_num_seqs: Option<i32>,
}

impl Default for VllmOmniConfig {
    fn default() -> Self {
        VllmOmniConfig {
            diffusion_model: None,
            cache_acceleration: CacheAcceleration::default(),
            default_size: default_vllm_omni_size(),
            gpu_memory_utilization: None,
            max_num_seqs: None,
        }
    }
}

/// Lifecycle phase of a ModelDeployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum ModelDeploymentPhase {
    /// Being set up.
    Pending,
    /// Pods running.
    Running,
    /// Cannot run.
    Failed,
    /// Being deleted.
    Terminating,
    /// Scaled to zero.
    Idle,
}

/// Observed state of a [`ModelDeployment`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelDeploymentStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ModelDeploymentPhase>,
    /// Latest observations, of types Ready, GPUAllocated, ModelLoaded,
    /// EndpointReady and Progressing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Allocated GPU.
    #[serde(
        default,
        rename = "allocatedGPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocated_gpu: Option<GpuAllocation>,
    /// Access endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
    /// When the model last got a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_access_time: Option<Time>,
    /// Runtime metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<DeploymentMetrics>,
    /// Measured tokens per second, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<String>,
    /// State within the GPUGroup (with `gpuGroupRef` only).
    #[serde(
        default,
        rename = "gpuGroupState",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpu_group_state: Option<GpuGroupMembership>,
}

/// Access endpoints of a deployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Endpoints {
    /// In-cluster URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal: Option<String>,
    /// External URL, if exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<String>,
}

/// Runtime metrics of a deployment (decimal strings).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentMetrics {
    /// Generation speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<String>,
    /// Average load time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_model_load_time: Option<String>,
    /// Average latency in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_latency_ms: Option<String>,
    /// Error rate in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<String>,
}

/// A deployment's state within its GPUGroup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuGroupMembership {
    /// The GPUGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// Active, Preempted, Queued or Idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<super::MemberState>,
    /// When the deployment was last preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_at: Option<Time>,
    /// Deployment that preempted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// Requests waiting for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_requests: Option<i32>,
}

fn default_true() -> bool {
    true
}

fn default_replicas() -> i32 {
    defaults::MD_REPLICAS
}

fn default_idle_timeout_seconds() -> i32 {
    defaults::MD_IDLE_TIMEOUT_SECONDS
}

fn default_cold_start_timeout_seconds() -> i32 {
    defaults::MD_COLD_START_TIMEOUT_SECONDS
}

fn default_priority() -> i32 {
    defaults::GPU_PRIORITY
}

fn default_warmup_iterations() -> i32 {
    defaults::BENCHMARK_WARMUP_ITERATIONS
}

fn default_batch_size() -> i32 {
    defaults::BENCHMARK_BATCH_SIZE
}

fn default_iterations() -> i32 {
    defaults::BENCHMARK_ITERATIONS
}

fn default_comfyui_models_path() -> String {
    defaults::COMFYUI_MODELS_PATH.to_owned()
}

fn default_comfyui_custom_nodes_path() -> String {
    defaults::COMFYUI_CUSTOM_NODES_PATH.to_owned()
}

fn default_vllm_omni_size() -> String {
    defaults::VLLM_OMNI_DEFAULT_SIZE.to_owned()
}
