//! Legacy API version (`ai.flexinfer/v1alpha1`), still served so that
//! existing manifests keep applying.

mod gpu_group;
mod model_cache;
pub mod model_deployment;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use gpu_group::{
    AntiThrashingPolicy, GPUGroup, GPUGroupMember, GPUGroupModelStatus, GPUGroupPhase,
    GPUGroupSpec, GPUGroupStatus, MemberState, PreemptionPolicy, PreemptionResult, QueueSample,
    ScalingPolicy, ShareStrategy,
};
pub use model_cache::{
    AbliterationSpec, AbliterationStatus, CacheFlashLoaderSpec, DownloadSpec, EvictionPolicy,
    FinetuneDataset, FinetuneLora, FinetuneMode, FinetuneSpec, FinetuneStatus, ModelCache,
    ModelCachePhase, ModelCacheSpec, ModelCacheStatus, PublishSpec, PublishStatus, PublishTarget,
    StorageStrategy,
};
pub use model_deployment::{
    BenchmarkSpec, CacheAcceleration, ComfyUiConfig, DeploymentMetrics, Endpoints,
    GpuGroupMembership, JitPolicy, KvCacheDtype, LlamaCppConfig, MlcCompileOptions, MlcLlmConfig,
    MlcMode, MlcOverrides, ModelDeployment, ModelDeploymentPhase, ModelDeploymentSpec,
    ModelDeploymentStatus, RopeScaling, RopeScalingType, VllmConfig, VllmDtype, VllmOmniConfig,
    VllmQuantization,
};

/// A GPU allocated to a ModelDeployment or GPUGroup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuAllocation {
    /// Node name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Device index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// GPU model.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Memory in MB.
    #[serde(default, rename = "memoryMB", skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<i64>,
    /// Architecture (`sm_52`, `gfx1100`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// NVIDIA, AMD or Intel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
}
