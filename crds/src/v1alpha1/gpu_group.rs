//! `GPUGroup` (v1alpha1, legacy): ModelDeployments taking turns on one GPU,
//! with priority-based preemption and anti-thrashing.
//!
//! The gateway signals demand by annotating the group with
//! [`crate::labels::queue_annotation`] and
//! [`crate::labels::queue_since_annotation`]; the operator picks the active
//! model and records it in `status.activeModel`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::GpuAllocation;
use crate::defaults;

/// Desired state of a [`GPUGroup`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha1",
    kind = "GPUGroup",
    plural = "gpugroups",
    singular = "gpugroup",
    namespaced,
    shortname = "gpug",
    category = "flexinfer",
    status = "GPUGroupStatus",
    derive = "PartialEq",
    doc = "GPUGroup is a set of ModelDeployments that share one GPU, one active at a time.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Active", type_ = "string", json_path = ".status.activeModel"),
    printcolumn(name = "Swaps", type_ = "integer", json_path = ".status.swapCount"),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.scalingPolicy.strategy"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GPUGroupSpec {
    /// Member ModelDeployments.
    #[schemars(length(min = 1))]
    pub models: Vec<GPUGroupMember>,
    /// Node selector shared by every member.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// How members compete for the GPU.
    #[serde(default)]
    pub scaling_policy: ScalingPolicy,
    /// Protection against rapid swapping.
    #[serde(default)]
    pub anti_thrashing: AntiThrashingPolicy,
    /// Create a Memory-backed ModelCache for every member, for fast swaps.
    #[serde(default)]
    pub auto_cache_models: bool,
}

/// A member of a GPU group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUGroupMember {
    /// ModelDeployment name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// ModelDeployment namespace; defaults to the group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Preemption priority; with demand on several members the highest
    /// wins.
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
    /// Minimum replicas within the group, overriding the ModelDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_replicas: Option<i32>,
    /// Maximum replicas within the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_replicas: Option<i32>,
}

impl GPUGroupMember {
    /// A member with default priority.
    pub fn new(name: impl Into<String>) -> GPUGroupMember {
        GPUGroupMember {
            name: name.into(),
            namespace: None,
            priority: default_priority(),
            vram_estimate_mb: None,
            min_replicas: None,
            max_replicas: None,
        }
    }
}

/// How members share the GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum ShareStrategy {
    /// One member at a time.
    #[default]
    Exclusive,
    /// Time slicing through MPS/MIG (reserved).
    TimeSliced,
    /// Several members when VRAM permits (reserved).
    MemoryShared,
}

/// When a lower-priority member is evicted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum PreemptionPolicy {
    /// At once.
    Immediate,
    /// After in-flight requests finish, up to `drainTimeoutSeconds`.
    #[default]
    Graceful,
}

/// How members compete for the GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingPolicy {
    /// Sharing strategy.
    #[serde(default)]
    pub strategy: ShareStrategy,
    /// Eviction timing.
    #[serde(default)]
    pub preemption_policy: PreemptionPolicy,
    /// Longest wait for a graceful drain.
    #[serde(default = "default_drain_timeout_seconds")]
    #[schemars(range(min = 5, max = 300))]
    pub drain_timeout_seconds: i32,
}

impl Default for ScalingPolicy {
    fn default() -> Self {
        ScalingPolicy {
            strategy: ShareStrategy::default(),
            preemption_policy: PreemptionPolicy::default(),
            drain_timeout_seconds: default_drain_timeout_seconds(),
        }
    }
}

impl ScalingPolicy {
    /// Longest wait for a graceful drain.
    pub fn drain_timeout(&self) -> Duration {
        seconds(self.drain_timeout_seconds)
    }
}

/// Protection against A→B→A swapping.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AntiThrashingPolicy {
    /// Apply the protections below.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How long the active model runs before it may be preempted.
    #[serde(default = "default_minimum_run_duration_seconds")]
    #[schemars(range(min = 0, max = 300))]
    pub minimum_run_duration_seconds: i32,
    /// How long a preempted model waits before it may preempt back.
    #[serde(default = "default_cooldown_after_preemption_seconds")]
    #[schemars(range(min = 0, max = 600))]
    pub cooldown_after_preemption_seconds: i32,
    /// Queued requests needed before a swap.
    #[serde(default = "default_request_queue_threshold")]
    #[schemars(range(min = 1, max = 100))]
    pub request_queue_threshold: i32,
    /// How long demand must persist before a swap; 0 disables the check.
    #[serde(default = "default_hysteresis_window_seconds")]
    #[schemars(range(min = 0, max = 60))]
    pub hysteresis_window_seconds: i32,
}

impl Default for AntiThrashingPolicy {
    fn default() -> Self {
        AntiThrashingPolicy {
            enabled: defaults::ANTI_THRASHING_ENABLED,
            minimum_run_duration_seconds: defaults::MINIMUM_RUN_DURATION_SECONDS,
            cooldown_after_preemption_seconds: defaults::COOLDOWN_AFTER_PREEMPTION_SECONDS,
            request_queue_threshold: defaults::REQUEST_QUEUE_THRESHOLD,
            hysteresis_window_seconds: defaults::HYSTERESIS_WINDOW_SECONDS,
        }
    }
}

impl AntiThrashingPolicy {
    /// How long the active model runs before it may be preempted.
    pub fn minimum_run_duration(&self) -> Duration {
        seconds(self.minimum_run_duration_seconds)
    }

    /// How long a preempted model waits before it may preempt back.
    pub fn cooldown_after_preemption(&self) -> Duration {
        seconds(self.cooldown_after_preemption_seconds)
    }

    /// How long demand must persist before a swap.
    pub fn hysteresis_window(&self) -> Duration {
        seconds(self.hysteresis_window_seconds)
    }
}

/// Lifecycle phase of a GPU group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum GPUGroupPhase {
    /// Not reconciled yet.
    Pending,
    /// No member active.
    Idle,
    /// A member is running.
    Active,
    /// The active member is draining before a swap.
    Draining,
    /// Members are being swapped.
    Swapping,
    /// Something went wrong.
    Failed,
}

/// State of a member within its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum MemberState {
    /// Running on the GPU.
    Active,
    /// Scaled down for another member.
    Preempted,
    /// Requests are waiting for it.
    Queued,
    /// No pending requests.
    Idle,
}

/// Observed state of a [`GPUGroup`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUGroupStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<GPUGroupPhase>,
    /// Member currently holding the GPU; unset when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_model: Option<String>,
    /// GPU assigned to the group.
    #[serde(
        default,
        rename = "allocatedGPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocated_gpu: Option<GpuAllocation>,
    /// When the active member last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_swap_time: Option<Time>,
    /// Why it changed (`demand: queue=5, priority=100`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_swap_reason: Option<String>,
    /// Swaps since creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_count: Option<i64>,
    /// Per-member state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_statuses: Vec<GPUGroupModelStatus>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// State of one member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUGroupModelStatus {
    /// ModelDeployment name.
    pub name: String,
    /// State within the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<MemberState>,
    /// Requests waiting for the member (from the gateway's annotations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_requests: Option<i32>,
    /// When requests started queueing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_since: Option<Time>,
    /// When the member last served requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_time: Option<Time>,
    /// When the member was last preempted (cooldown tracking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_at: Option<Time>,
    /// Member that preempted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// Outcome of the latest preemption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_preemption_result: Option<PreemptionResult>,
    /// Recent queue depth samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_history: Vec<QueueSample>,
    /// Queue trend: increasing, decreasing or stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend_direction: Option<String>,
    /// Consistency of the trend, 0-100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub trend_stability: Option<i32>,
}

/// Outcome of a preemption.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionResult {
    /// When it started.
    pub start_time: Time,
    /// When the pods were gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Whether it completed.
    pub success: bool,
    /// Seconds the pods took to terminate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_duration_seconds: Option<i32>,
    /// Whether the drain timed out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// Pods terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_terminated: Option<i32>,
    /// Error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Queue depth at a point in time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueSample {
    /// When the sample was taken.
    pub timestamp: Time,
    /// Queue depth.
    pub depth: i32,
}

impl GPUGroup {
    /// The member currently holding the GPU.
    pub fn active_model(&self) -> Option<&str> {
        self.status.as_ref()?.active_model.as_deref()
    }

    /// The member entry of a ModelDeployment, if it belongs to the group.
    pub fn member(&self, name: &str) -> Option<&GPUGroupMember> {
        self.spec.models.iter().find(|member| member.name == name)
    }
}

fn seconds(value: i32) -> Duration {
    Duration::from_secs(u64::try_from(value).unwrap_or(0))
}

fn default_true() -> bool {
    true
}

fn default_priority() -> i32 {
    defaults::GPU_PRIORITY
}

fn default_drain_timeout_seconds() -> i32 {
    defaults::DRAIN_TIMEOUT_SECONDS
}

fn default_minimum_run_duration_seconds() -> i32 {
    defaults::MINIMUM_RUN_DURATION_SECONDS
}

fn default_cooldown_after_preemption_seconds() -> i32 {
    defaults::COOLDOWN_AFTER_PREEMPTION_SECONDS
}

fn default_request_queue_threshold() -> i32 {
    defaults::REQUEST_QUEUE_THRESHOLD
}

fn default_hysteresis_window_seconds() -> i32 {
    defaults::HYSTERESIS_WINDOW_SECONDS
}
