//! `ModelCache` (v1alpha1): a model artifact downloaded once into shared,
//! node-local or in-memory storage, optionally processed by a pipeline
//! (download → abliterate → finetune → quantize → publish).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defaults;
use crate::v1alpha2::{QuantizationSpec, QuantizationStatus};

/// Desired state of a [`ModelCache`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha1",
    kind = "ModelCache",
    plural = "modelcaches",
    singular = "modelcache",
    namespaced,
    shortname = "mcache",
    category = "flexinfer",
    status = "ModelCacheStatus",
    derive = "PartialEq",
    doc = "ModelCache downloads a model artifact once and keeps it where model pods can mount it.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.storageStrategy"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyNodes"),
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.totalNodes"),
    printcolumn(name = "Path", type_ = "string", json_path = ".status.path"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.cacheSizeBytes",
        priority = 1
    ),
    printcolumn(
        name = "LastAccess",
        type_ = "date",
        json_path = ".status.lastAccessTime",
        priority = 1
    ),
    printcolumn(
        name = "Evictions",
        type_ = "integer",
        json_path = ".status.evictionCount",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelCacheSpec {
    /// Artifact URI: `huggingface://org/model`, `HF://org/model`,
    /// `mlc://org/model`, `oci://registry/repo:tag`, `oras://registry/repo@sha256:...`.
    #[schemars(length(min = 1))]
    pub source: String,
    /// Where the artifact is kept.
    #[serde(default)]
    pub storage_strategy: StorageStrategy,
    /// Storage class of the SharedPVC claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_storage_class_name: Option<String>,
    /// Existing claim to download into instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_claim_name: Option<String>,
    /// Directory within the claim; defaults to the cache name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// Size of a created claim.
    #[serde(default = "default_storage_size")]
    pub storage_size: String,
    /// Secret with key `HF_TOKEN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// `kubernetes.io/dockerconfigjson` Secret for `oci://`/`oras://`
    /// sources.
    #[serde(
        default,
        rename = "ociRegistrySecretRef",
        skip_serializing_if = "Option::is_none"
    )]
    pub oci_registry_secret_ref: Option<String>,
    /// Nodes that hold a NodeLocal copy (default `nvidia.com/gpu.present=true`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Base directory of NodeLocal storage (default
    /// `/var/lib/flexinfer/models`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// Eviction order under storage pressure.
    #[serde(default)]
    pub eviction_policy: EvictionPolicy,
    /// `/dev/shm` usage in percent that triggers eviction (Memory strategy).
    #[serde(default = "default_eviction_threshold_percent")]
    #[schemars(range(min = 50, max = 99))]
    pub eviction_threshold_percent: i32,
    /// Largest size the cache may occupy, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_cache_size_bytes: Option<i64>,
    /// Caches in the same group are evicted together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_group: Option<String>,
    /// Higher values are evicted later (0-100).
    #[serde(default = "default_retention_priority")]
    #[schemars(range(min = 0, max = 100))]
    pub retention_priority: i32,
    /// Flash loader for pods using this cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash_loader: Option<CacheFlashLoaderSpec>,
    /// Download Job tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download: Option<DownloadSpec>,
    /// Abliteration after download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abliteration: Option<AbliterationSpec>,
    /// Finetuning after abliteration or download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finetune: Option<FinetuneSpec>,
    /// Quantization before the cache is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<QuantizationSpec>,
    /// Publishing of the final artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<PublishSpec>,
}

impl ModelCacheSpec {
    /// A spec for `source` with every optional field at its default.
    pub fn new(source: impl Into<String>) -> ModelCacheSpec {
        ModelCacheSpec {
            source: source.into(),
            storage_strategy: StorageStrategy::default(),
            cluster_storage_class_name: None,
            existing_claim_name: None,
            model_path: None,
            storage_size: default_storage_size(),
            secret_ref: None,
            oci_registry_secret_ref: None,
            node_selector: BTreeMap::new(),
            host_path: None,
            eviction_policy: EvictionPolicy::default(),
            eviction_threshold_percent: default_eviction_threshold_percent(),
            max_cache_size_bytes: None,
            model_group: None,
            retention_priority: default_retention_priority(),
            flash_loader: None,
            download: None,
            abliteration: None,
            finetune: None,
            quantization: None,
            publish: None,
        }
    }

    /// Base directory of NodeLocal storage.
    pub fn host_path(&self) -> &str {
        self.host_path
            .as_deref()
            .unwrap_or(defaults::CACHE_HOST_PATH)
    }

    /// Whether the source is an OCI artifact (`oci://` or `oras://`).
    pub fn is_oci_source(&self) -> bool {
        let source = self.source.trim().to_ascii_lowercase();
        source.starts_with("oci://") || source.starts_with("oras://")
    }
}

/// Where a cache keeps its artifact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum StorageStrategy {
    /// Let the operator choose (SharedPVC).
    #[default]
    Auto,
    /// A copy on each selected node's disk.
    NodeLocal,
    /// One ReadWriteMany claim.
    #[serde(rename = "SharedPVC")]
    SharedPvc,
    /// Downloaded at pod start, not kept.
    Ephemeral,
    /// In `/dev/shm` on each selected node.
    Memory,
}

/// Eviction order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum EvictionPolicy {
    /// Least recently used first.
    #[default]
    #[serde(rename = "LRU")]
    Lru,
    /// Least frequently used first.
    #[serde(rename = "LFU")]
    Lfu,
    /// Oldest first.
    #[serde(rename = "FIFO")]
    Fifo,
    /// Never evict.
    None,
}

/// Flash loader of pods using a cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheFlashLoaderSpec {
    /// On or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Parallel copy workers.
    #[serde(default = "default_flash_loader_concurrency")]
    #[schemars(range(min = 1, max = 32))]
    pub concurrency: i32,
    /// Size limit of the tmpfs volume (default twice the model size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmpfs_size_limit: Option<String>,
    /// Peer-to-peer transfer between pods on a node.
    #[serde(default, rename = "p2p", skip_serializing_if = "Option::is_none")]
    pub p2p: Option<bool>,
    /// Port of peer-to-peer transfer.
    #[serde(default = "default_p2p_port", rename = "p2pPort")]
    #[schemars(range(min = 1, max = 65535))]
    pub p2p_port: i32,
    /// Image of the init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl Default for CacheFlashLoaderSpec {
    fn default() -> Self {
        CacheFlashLoaderSpec {
            enabled: None,
            concurrency: default_flash_loader_concurrency(),
            tmpfs_size_limit: None,
            p2p: None,
            p2p_port: default_p2p_port(),
            image: None,
        }
    }
}

/// Download Job tuning.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownloadSpec {
    /// Memory limit in GB (default 16).
    #[serde(
        default,
        rename = "maxMemoryGB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 128))]
    pub max_memory_gb: Option<i32>,
    /// Use `hf_transfer` (default: on when the limit is at least 16 GB).
    #[serde(
        default,
        rename = "hfTransfer",
        skip_serializing_if = "Option::is_none"
    )]
    pub hf_transfer: Option<bool>,
    /// Retries before failing (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10))]
    pub backoff_limit: Option<i32>,
    /// Job deadline in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 300, max = 86400))]
    pub timeout_seconds: Option<i64>,
}

/// Abliteration (removal of the refusal direction) of the weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbliterationSpec {
    /// Memory limit in GB (default 56).
    #[serde(
        default,
        rename = "maxMemoryGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_memory_gb: Option<i32>,
    /// Node selector of the Job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Contrastive prompt pairs.
    #[serde(default = "default_abliteration_samples")]
    #[schemars(range(min = 16, max = 512))]
    pub num_samples: i32,
    /// Leave GDN (linear attention) layers untouched.
    #[serde(default = "default_true", rename = "skipGDNLayers")]
    pub skip_gdn_layers: bool,
    /// Leave vision encoder layers untouched.
    #[serde(default = "default_true")]
    pub skip_vision_layers: bool,
    /// Decoder layers: `auto`, a range (`10-55`) or indices (`0,1,5`).
    #[serde(default = "default_target_layers")]
    pub target_layers: String,
    /// Job deadline in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 300, max = 43200))]
    pub timeout_seconds: Option<i64>,
    /// Load the model on GPU (with CPU offload).
    #[serde(default, rename = "useGPU", skip_serializing_if = "Option::is_none")]
    pub use_gpu: Option<bool>,
    /// Weight matrices to orthogonalise (default `o_proj`, `down_proj`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_matrices: Vec<String>,
}

/// Finetuning mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum FinetuneMode {
    /// LoRA.
    Lora,
    /// Quantized LoRA.
    #[default]
    Qlora,
    /// Full finetuning.
    Full,
}

/// Finetuning of the weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinetuneSpec {
    /// Training data.
    pub dataset: FinetuneDataset,
    /// Finetuning mode.
    #[serde(default)]
    pub mode: FinetuneMode,
    /// Per-device batch size (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<i32>,
    /// Training epochs (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub epochs: Option<i32>,
    /// Gradient checkpointing (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_checkpointing: Option<bool>,
    /// Learning rate as a decimal string (default `"2e-4"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<String>,
    /// LoRA parameters (ignored in full mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<FinetuneLora>,
    /// Memory limit in GB (default 56).
    #[serde(
        default,
        rename = "maxMemoryGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_memory_gb: Option<i32>,
    /// Training sequence length (default 2048).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 32768))]
    pub max_seq_len: Option<i32>,
    /// Merge the adapter into the base weights (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_adapter: Option<bool>,
    /// Job deadline in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 300, max = 86400))]
    pub timeout_seconds: Option<i64>,
    /// Train on GPU (default true).
    #[serde(default, rename = "useGPU", skip_serializing_if = "Option::is_none")]
    pub use_gpu: Option<bool>,
}

/// Training data of a finetune.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinetuneDataset {
    /// HuggingFace dataset ID.
    #[serde(
        default,
        rename = "huggingFace",
        skip_serializing_if = "Option::is_none"
    )]
    pub hugging_face: Option<String>,
    /// Samples to use (all when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_samples: Option<i32>,
    /// Claim holding the dataset.
    #[serde(default, rename = "pvcName", skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    /// Path within that claim.
    #[serde(
        default,
        rename = "pvcSubPath",
        skip_serializing_if = "Option::is_none"
    )]
    pub pvc_sub_path: Option<String>,
    /// Dataset split (default `train`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// LoRA parameters of a finetune.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinetuneLora {
    /// Alpha scaling (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<i32>,
    /// Dropout as a decimal string (default `"0.05"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<String>,
    /// Rank (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub rank: Option<i32>,
    /// Modules receiving adapters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_modules: Vec<String>,
}

/// Publish destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum PublishTarget {
    /// An OCI registry.
    Oci,
    /// HuggingFace Hub.
    Huggingface,
}

/// Publishing of the final artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublishSpec {
    /// Destinations.
    #[schemars(length(min = 1))]
    pub targets: Vec<PublishTarget>,
    /// HuggingFace repository (for the huggingface target).
    #[serde(
        default,
        rename = "huggingFaceRepo",
        skip_serializing_if = "Option::is_none"
    )]
    pub hugging_face_repo: Option<String>,
    /// OCI reference (for the oci target).
    #[serde(default, rename = "ociRef", skip_serializing_if = "Option::is_none")]
    pub oci_ref: Option<String>,
    /// Secret with `OCI_USERNAME`/`OCI_PASSWORD` and/or `HF_TOKEN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// Memory limit in GB (default 8).
    #[serde(
        default,
        rename = "maxMemoryGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_memory_gb: Option<i32>,
    /// Job deadline in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 300, max = 43200))]
    pub timeout_seconds: Option<i64>,
}

/// Lifecycle phase of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum ModelCachePhase {
    /// Not processed yet.
    Pending,
    /// Storage being provisioned.
    Initializing,
    /// Artifact being downloaded or synced.
    Provisioning,
    /// Artifact being quantized.
    Quantizing,
    /// Usable.
    Ready,
    /// Something went wrong.
    Failed,
}

/// Observed state of a [`ModelCache`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCacheStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ModelCachePhase>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Where the artifact is (`<pvc>:<path>` or a host path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Artifact size, as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<String>,
    /// Nodes holding a complete copy (NodeLocal, Memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_nodes: Option<i32>,
    /// Nodes that should hold a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_nodes: Option<i32>,
    /// When a deployment last used the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_access_time: Option<Time>,
    /// Evictions since creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_count: Option<i64>,
    /// Size of the cached data in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size_bytes: Option<i64>,
    /// Seconds resident in memory since the last eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residency_seconds: Option<i64>,
    /// Hit ratio as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<String>,
    /// Since when the cache is resident in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_since: Option<Time>,
    /// Accesses since creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_count: Option<i64>,
    /// Result of quantization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<QuantizationStatus>,
    /// Result of abliteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abliteration: Option<AbliterationStatus>,
    /// Result of finetuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finetune: Option<FinetuneStatus>,
    /// Result of publishing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<PublishStatus>,
    /// Digest of the pulled OCI artifact.
    #[serde(default, rename = "ociDigest", skip_serializing_if = "Option::is_none")]
    pub oci_digest: Option<String>,
    /// When the OCI artifact was pulled.
    #[serde(
        default,
        rename = "ociPulledAt",
        skip_serializing_if = "Option::is_none"
    )]
    pub oci_pulled_at: Option<Time>,
    /// Registry host of the OCI artifact.
    #[serde(
        default,
        rename = "ociRegistry",
        skip_serializing_if = "Option::is_none"
    )]
    pub oci_registry: Option<String>,
}

/// Result of abliteration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbliterationStatus {
    /// Wall-clock duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abliteration_time: Option<String>,
    /// Last log lines on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Decoder layers modified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers_modified: Option<i32>,
    /// Progress in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<i32>,
    /// Human-readable progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_detail: Option<String>,
    /// L2 norm of the refusal direction (diagnostic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_dir_norm: Option<String>,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
}

/// Result of finetuning.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinetuneStatus {
    /// Epochs completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs_completed: Option<i32>,
    /// Error on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Wall-clock duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finetune_time: Option<String>,
    /// Progress in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<i32>,
    /// Human-readable progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_detail: Option<String>,
    /// Training throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_second: Option<String>,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Training steps completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<i32>,
    /// Final training loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_loss: Option<String>,
}

/// Result of publishing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublishStatus {
    /// Error on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// HuggingFace commit of the upload.
    #[serde(
        default,
        rename = "huggingFaceCommit",
        skip_serializing_if = "Option::is_none"
    )]
    pub hugging_face_commit: Option<String>,
    /// Digest of the pushed OCI artifact.
    #[serde(default, rename = "ociDigest", skip_serializing_if = "Option::is_none")]
    pub oci_digest: Option<String>,
    /// Progress in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<i32>,
    /// Human-readable progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_detail: Option<String>,
    /// When publishing completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<Time>,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
}

fn default_true() -> bool {
    true
}

fn default_storage_size() -> String {
    defaults::CACHE_SIZE.to_owned()
}

fn default_eviction_threshold_percent() -> i32 {
    defaults::EVICTION_THRESHOLD_PERCENT
}

fn default_retention_priority() -> i32 {
    defaults::RETENTION_PRIORITY
}

fn default_flash_loader_concurrency() -> i32 {
    defaults::FLASH_LOADER_CONCURRENCY
}

fn default_p2p_port() -> i32 {
    defaults::FLASH_LOADER_P2P_PORT
}

fn default_abliteration_samples() -> i32 {
    128
}

fn default_target_layers() -> String {
    "auto".to_owned()
}
