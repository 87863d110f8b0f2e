//! Observed state of a `Model`: phase, conditions, replicas, placement,
//! shared-group, cache and KV-cache state.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::model::CacheStrategy;
use super::QuantizationStatus;

/// Lifecycle phase of a Model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum ModelPhase {
    /// Being scheduled, or waiting for its cache.
    Pending,
    /// Pods are starting and loading weights.
    Loading,
    /// Serving requests.
    Ready,
    /// Scaled to zero, waiting for traffic.
    Idle,
    /// Cannot run (unknown backend, no matching nodes, ...).
    Failed,
    /// A higher-priority member of its shared group holds the GPU.
    Preempted,
}

impl ModelPhase {
    /// The phase as written in `status.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelPhase::Pending => "Pending",
            ModelPhase::Loading => "Loading",
            ModelPhase::Ready => "Ready",
            ModelPhase::Idle => "Idle",
            ModelPhase::Failed => "Failed",
            ModelPhase::Preempted => "Preempted",
        }
    }
}

impl std::fmt::Display for ModelPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of a model within its shared GPU group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum SharedGroupState {
    /// Holds the GPU.
    Active,
    /// Waiting for the GPU.
    Queued,
    /// Lost the GPU to another member.
    Preempted,
}

/// Refinement of the Loading (and Preempted) phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum LoadingSubstage {
    /// Pulling the container image.
    ImagePulling,
    /// Container starting.
    Initializing,
    /// Reading weights; the gateway fails fast when this stalls.
    LoadingWeights,
    /// Compiling kernels or capturing graphs.
    Compiling,
    /// Server up, waiting for the readiness probe.
    HealthCheckPending,
    /// Evicted from the shared GPU.
    Preempted,
}

/// Observed state of a `Model`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ModelPhase>,
    /// `metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Latest observations, of types Cached, Loaded, Ready, Schedulable and
    /// ConfigValid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Replicas of the model's Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Replicas passing their readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// GPU the model was placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuStatus>,
    /// In-cluster URL, e.g. `http://qwen3-8b.default.svc:8000`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// When the model last served (or was asked to serve) a request; the
    /// idle timeout counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_time: Option<Time>,
    /// Runtime performance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsStatus>,
    /// State within the shared GPU group (shared models only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_group: Option<SharedGroupStatus>,
    /// Cache state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheStatus>,
    /// KV-cache pressure state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<KvCacheStatus>,
    /// Refinement of the Loading phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loading_substage: Option<LoadingSubstage>,
    /// When the loading substage or message last changed; a stale value
    /// while loading weights means the load stalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loading_progress_at: Option<Time>,
    /// Short human-readable summary (`loading weights (18/34 shards)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The GPU a model was placed on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuStatus {
    /// Node name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Device index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// NVIDIA, AMD or Intel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Architecture (`sm_89`, `gfx1100`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Memory of the GPU in MB.
    #[serde(default, rename = "memoryMB", skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<i64>,
}

/// Runtime performance (decimal strings).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsStatus {
    /// Generation speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<String>,
    /// Time the last load took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_time_seconds: Option<String>,
    /// Average request latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_latency_ms: Option<String>,
}

/// State of a model within its shared GPU group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedGroupStatus {
    /// The group (`spec.gpu.shared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// Active, Queued or Preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SharedGroupState>,
    /// The member currently holding the group's GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_model: Option<String>,
    /// 1-based position while queued (0 when active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<i32>,
    /// Who took the GPU: a member name, `primary/<name>` for a static park
    /// behind the primary, or `gpu-lease/<owner>` for a training lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// When the model was preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_at: Option<Time>,
}

/// Prefix of `sharedGroup.preemptedBy` for a model parked behind its
/// group's primary.
pub const PREEMPTED_BY_PRIMARY_PREFIX: &str = "primary/";

/// Prefix of `sharedGroup.preemptedBy` for a model parked by a GPU lease.
pub const PREEMPTED_BY_GPU_LEASE_PREFIX: &str = "gpu-lease/";

impl SharedGroupStatus {
    /// Whether the model is parked behind a higher-priority primary (the
    /// gateway answers 503 instead of waking it).
    pub fn parked_behind_primary(&self) -> bool {
        self.preempted_by
            .as_deref()
            .is_some_and(|by| by.starts_with(PREEMPTED_BY_PRIMARY_PREFIX))
    }
}

/// Cache state of a model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheStatus {
    /// Strategy in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<CacheStrategy>,
    /// The artifact is in place.
    #[serde(default)]
    pub ready: bool,
    /// PVC in use.
    #[serde(default, rename = "pvcName", skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    /// Job that puts the artifact in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Coarse Job phase: Pending, Running, Succeeded, Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_phase: Option<String>,
    /// Human-readable cache message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Size of the cached artifact in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// Result of quantization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<QuantizationStatus>,
}

/// KV-cache pressure state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvCacheStatus {
    /// Usage ratio, formatted `%.4f`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<String>,
    /// Usage is at or above the high watermark.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pressure: bool,
    /// When pressure was last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pressure_time: Option<Time>,
    /// Last action taken: Observed, Reconfigure or EvictRequested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,
    /// Config overrides are in effect.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconfigured: bool,
    /// When the overrides were applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfigured_at: Option<Time>,
    /// `maxNumSeqs` before reconfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_num_seqs: Option<i32>,
    /// `maxNumSeqs` applied by reconfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfigured_max_num_seqs: Option<i32>,
    /// `maxModelLen` before reconfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_model_len: Option<i32>,
    /// `maxModelLen` applied by reconfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfigured_max_model_len: Option<i32>,
    /// Config fields overridden by the active reconfiguration, with their
    /// original values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub original_config: Option<Map<String, Value>>,
    /// Replicas were scaled down because of pressure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
    /// When the eviction happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted_at: Option<Time>,
}
