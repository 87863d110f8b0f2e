//! Spec defaults, named once.
//!
//! Every default that the CRD schemas advertise, or that the operator and
//! gateway apply when a field is left unset, is defined here so that the
//! schema, the serde defaults and the helper methods cannot drift apart.

use std::time::Duration;

/// `Model.spec.serverless.idleTimeout` when unset: scale to `minReplicas`
/// after five minutes without traffic.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Idle timeout of image-generation backends (comfyui, diffusers,
/// vllm-omni), whose models are slower to load.
pub const IMAGE_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// `Model.spec.serverless.coldStartTimeout`: how long a request may wait for
/// a model to become ready.
pub const COLD_START_TIMEOUT: Duration = Duration::from_secs(60);

/// `Model.spec.serverless.coldStartTimeout` as written in the CRD schema.
pub const COLD_START_TIMEOUT_LITERAL: &str = "60s";

/// `Model.spec.serverless.enabled`: scale-to-zero is on unless disabled.
pub const SERVERLESS_ENABLED: bool = true;

/// `Model.spec.serverless.minReplicas`.
pub const MIN_REPLICAS: i32 = 0;

/// Replicas of a model whose serverless mode is disabled.
pub const NON_SERVERLESS_REPLICAS: i32 = 1;

/// `Model.spec.gpu.priority` and `GPUGroup.spec.models[].priority`.
pub const GPU_PRIORITY: i32 = 100;

/// GPUs requested when `Model.spec.gpu` is set without `count`.
pub const GPU_COUNT: i32 = 1;

/// Anti-thrashing cooldown of a v1alpha2 shared GPU group after a swap
/// (`Model.spec.gpu.swapCooldown`).
pub const SHARED_SWAP_COOLDOWN: Duration = Duration::from_secs(300);

/// How long demand for a shared-group member must persist before it may
/// preempt the active member.
pub const SHARED_DEMAND_WINDOW: Duration = Duration::from_secs(120);

/// `Model.spec.cache.size` and `ModelCache.spec.storageSize`.
pub const CACHE_SIZE: &str = "50Gi";

/// `Model.spec.cache.hostPath` and `ModelCache.spec.hostPath`.
pub const CACHE_HOST_PATH: &str = "/var/lib/flexinfer/models";

/// `Model.spec.cache.compilationCache.hostPath`.
pub const COMPILATION_CACHE_HOST_PATH: &str = "/var/lib/flexinfer/compile-cache";

/// `Model.spec.cache.compilationCache.sizeLimit`.
pub const COMPILATION_CACHE_SIZE_LIMIT: &str = "2Gi";

/// Flash-loader copy concurrency (`cache.flashLoader.concurrency`).
pub const FLASH_LOADER_CONCURRENCY: i32 = 4;

/// Flash-loader per-worker buffer in KiB (`cache.flashLoader.bufferSizeKB`).
pub const FLASH_LOADER_BUFFER_KB: i32 = 4096;

/// Flash-loader peer-to-peer port (`ModelCache.spec.flashLoader.p2pPort`).
pub const FLASH_LOADER_P2P_PORT: i32 = 9876;

/// `Model.spec.litellm.enabled`: models are exposed unless parked.
pub const LITELLM_ENABLED: bool = true;

/// KV-cache utilization ratio that triggers the pressure policy.
pub const KV_CACHE_HIGH_WATERMARK: f64 = 0.85;

/// KV-cache utilization ratio targeted after pressure mitigation.
pub const KV_CACHE_LOW_WATERMARK: f64 = 0.60;

/// Delay before a KV-cache reconfiguration may be reverted.
pub const KV_CACHE_RECONFIGURE_COOLDOWN: Duration = Duration::from_secs(300);

/// Calibration dataset of AWQ/GPTQ quantization.
pub const QUANTIZE_CALIBRATION_DATASET: &str = "mit-han-lab/pile-val-backup";

/// Calibration sample count of AWQ/GPTQ quantization.
pub const QUANTIZE_CALIBRATION_MAX_SAMPLES: i32 = 256;

/// Calibration sequence length of AWQ/GPTQ quantization.
pub const QUANTIZE_CALIBRATION_MAX_SEQ_LEN: i32 = 4096;

/// Deadline of a quantization Job in seconds.
pub const QUANTIZE_TIMEOUT_SECONDS: i64 = 7200;

/// Memory limit of a GGUF quantization Job in GB.
pub const QUANTIZE_MAX_MEMORY_GB_GGUF: i32 = 32;

/// Memory limit of every other quantization Job in GB.
pub const QUANTIZE_MAX_MEMORY_GB: i32 = 48;

/// GPU memory fraction available to GPTQ quantization.
pub const QUANTIZE_GPU_MEMORY_FRACTION: &str = "0.80";

/// Cosine similarity threshold of GPTQ dense-module validation.
pub const QUANTIZE_DENSE_MODULE_COSINE_THRESHOLD: &str = "0.98";

/// `ModelCatalog.spec.syncInterval`.
pub const CATALOG_SYNC_INTERVAL: Duration = Duration::from_secs(3600);

/// `ModelCatalog.spec.syncInterval` as written in the CRD schema.
pub const CATALOG_SYNC_INTERVAL_LITERAL: &str = "1h";

/// `Cluster.spec.probeInterval`.
pub const CLUSTER_PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// `Cluster.spec.probeInterval` as written in the CRD schema.
pub const CLUSTER_PROBE_INTERVAL_LITERAL: &str = "30s";

/// `FederatedModel.spec.placement.replicasPerCluster`.
pub const REPLICAS_PER_CLUSTER: i32 = 1;

/// `ModelDeployment.spec.replicas`.
pub const MD_REPLICAS: i32 = 1;

/// `ModelDeployment.spec.idleTimeoutSeconds`.
pub const MD_IDLE_TIMEOUT_SECONDS: i32 = 300;

/// `ModelDeployment.spec.coldStartTimeoutSeconds`.
pub const MD_COLD_START_TIMEOUT_SECONDS: i32 = 60;

/// `ModelDeployment.spec.benchmark.warmupIterations`.
pub const BENCHMARK_WARMUP_ITERATIONS: i32 = 2;

/// `ModelDeployment.spec.benchmark.batchSize`.
pub const BENCHMARK_BATCH_SIZE: i32 = 128;

/// `ModelDeployment.spec.benchmark.iterations`.
pub const BENCHMARK_ITERATIONS: i32 = 5;

/// `ModelDeployment.spec.mlcllm.gpuMemoryBytes` when unset.
pub const MLC_GPU_MEMORY_BYTES: i64 = 23_068_672_000;

/// `ModelDeployment.spec.llamacpp.contextSize` when unset.
pub const LLAMACPP_CONTEXT_SIZE: i32 = 2048;

/// `ModelDeployment.spec.comfyui.modelsPath`.
pub const COMFYUI_MODELS_PATH: &str = "/models";

/// `ModelDeployment.spec.comfyui.customNodesPath`.
pub const COMFYUI_CUSTOM_NODES_PATH: &str = "/app/ComfyUI/custom_nodes";

/// `ModelDeployment.spec.vllmOmni.defaultSize`.
pub const VLLM_OMNI_DEFAULT_SIZE: &str = "1024x1024";

/// `ModelCache.spec.evictionThresholdPercent`.
pub const EVICTION_THRESHOLD_PERCENT: i32 = 85;

/// `ModelCache.spec.retentionPriority`.
pub const RETENTION_PRIORITY: i32 = 50;

/// `GPUGroup.spec.scalingPolicy.drainTimeoutSeconds`.
pub const DRAIN_TIMEOUT_SECONDS: i32 = 60;

/// `GPUGroup.spec.antiThrashing.enabled`.
pub const ANTI_THRASHING_ENABLED: bool = true;

/// `GPUGroup.spec.antiThrashing.minimumRunDurationSeconds`: how long the
/// active model runs before it may be preempted.
pub const MINIMUM_RUN_DURATION_SECONDS: i32 = 30;

/// `GPUGroup.spec.antiThrashing.cooldownAfterPreemptionSeconds`: how long a
/// preempted model waits before it may preempt back.
pub const COOLDOWN_AFTER_PREEMPTION_SECONDS: i32 = 60;

/// `GPUGroup.spec.antiThrashing.requestQueueThreshold`: queued requests
/// needed before a swap.
pub const REQUEST_QUEUE_THRESHOLD: i32 = 3;

/// `GPUGroup.spec.antiThrashing.hysteresisWindowSeconds`: how long demand
/// must persist before a swap.
pub const HYSTERESIS_WINDOW_SECONDS: i32 = 10;
