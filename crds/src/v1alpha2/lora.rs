//! `LoRAAdapter` (v1alpha2): a LoRA adapter hot-loaded into a running Model.
//!
//! Clients select an adapter by putting its `adapterName` in the request's
//! `model` field; the gateway routes the request to the parent Model and
//! leaves the name as is, so the engine applies the adapter.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// vLLM endpoint that loads an adapter into a replica.
pub const VLLM_LOAD_LORA_PATH: &str = "/v1/load_lora_adapter";
/// vLLM endpoint that unloads an adapter from a replica.
pub const VLLM_UNLOAD_LORA_PATH: &str = "/v1/unload_lora_adapter";

/// Desired state of a [`LoRAAdapter`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha2",
    kind = "LoRAAdapter",
    plural = "loraadapters",
    singular = "loraadapter",
    namespaced,
    status = "LoRAAdapterStatus",
    shortname = "lora",
    shortname = "filora",
    category = "flexinfer",
    derive = "PartialEq",
    doc = "LoRAAdapter declares a LoRA adapter that is loaded into every replica of a parent Model.",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.modelRef"),
    printcolumn(name = "Adapter", type_ = "string", json_path = ".spec.adapterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Loaded",
        type_ = "integer",
        json_path = ".status.loadedReplicas"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct LoRAAdapterSpec {
    /// Name of the parent Model in the same namespace.
    #[schemars(length(min = 1))]
    pub model_ref: String,
    /// Name clients put in the request's `model` field to select the
    /// adapter.
    #[schemars(length(min = 1))]
    pub adapter_name: String,
    /// Where the adapter weights are.
    pub source: LoRAAdapterSource,
    /// Largest LoRA rank to allow for this adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_rank: Option<i32>,
    /// Load as soon as the model starts instead of on first request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preload: bool,
}

/// Kind of store holding adapter weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum LoRASourceType {
    /// HuggingFace Hub repository (`org/adapter`).
    HuggingFace,
    /// OCI artifact (`registry.example.com/adapters/lora:v1`).
    #[serde(rename = "OCI")]
    Oci,
    /// Path already on the model volume (`/models/adapters/my-lora`).
    LocalPath,
}

/// Location of adapter weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoRAAdapterSource {
    /// Kind of store.
    #[serde(rename = "type")]
    pub type_: LoRASourceType,
    /// Identifier within the store.
    #[schemars(length(min = 1))]
    pub uri: String,
}

/// Lifecycle phase of a LoRA adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum LoRAAdapterPhase {
    /// Created, not processed yet.
    Pending,
    /// Weights being downloaded.
    Caching,
    /// Loaded in the backend.
    Loaded,
    /// Being removed from replicas.
    Unloading,
    /// Could not be loaded.
    Failed,
}

/// Observed state of a [`LoRAAdapter`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoRAAdapterStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<LoRAAdapterPhase>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Replicas of the parent model with the adapter loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_replicas: Option<i32>,
    /// Ready replicas of the parent model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_replicas: Option<i32>,
    /// Human-readable status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
