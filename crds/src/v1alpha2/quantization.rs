//! Post-download quantization of model weights, shared by `Model.spec.quantize`
//! and `ModelCache.spec.quantization`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defaults;

/// Target format of a quantization Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum QuantizationFormat {
    /// llama.cpp GGUF (CPU quantization).
    #[serde(rename = "GGUF")]
    Gguf,
    /// Activation-aware weight quantization.
    #[serde(rename = "AWQ")]
    Awq,
    /// GPTQ.
    #[serde(rename = "GPTQ")]
    Gptq,
    /// ExLlamaV2.
    #[serde(rename = "EXL2")]
    Exl2,
    /// 8-bit floating point.
    #[serde(rename = "FP8")]
    Fp8,
    /// llm-compressor compressed-tensors.
    #[serde(rename = "COMPRESSED_TENSORS")]
    CompressedTensors,
}

/// Which modules GPTQ keeps at full precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum DynamicExclusion {
    /// Detect hybrid architectures and exclude attention, expert, vision and
    /// MTP modules.
    Auto,
    /// Exclude only GDN (linear attention) layers.
    Gdn,
    /// Quantize every module.
    None,
}

/// How GPTQ treats dense linear module families after quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum DenseModulePolicy {
    /// Restore dense modules to source precision.
    Fallback,
    /// Keep dense GPTQ modules once a validator accepts every layer.
    Validate,
}

/// Calibration of AWQ/GPTQ quantization (ignored for GGUF and EXL2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalibrationSpec {
    /// Maximum sequence length of calibration samples (default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 32768))]
    pub max_seq_len: Option<i32>,
    /// Number of calibration samples (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8, max = 2048))]
    pub max_samples: Option<i32>,
    /// Calibration samples processed in parallel during AWQ; lower values
    /// reduce peak VRAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub n_parallel_calib_samples: Option<i32>,
    /// HuggingFace dataset of calibration samples (default
    /// `mit-han-lab/pile-val-backup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
}

impl CalibrationSpec {
    /// Effective maximum sequence length.
    pub fn max_seq_len(&self) -> i32 {
        self.max_seq_len
            .unwrap_or(defaults::QUANTIZE_CALIBRATION_MAX_SEQ_LEN)
    }

    /// Effective sample count.
    pub fn max_samples(&self) -> i32 {
        self.max_samples
            .unwrap_or(defaults::QUANTIZE_CALIBRATION_MAX_SAMPLES)
    }

    /// Effective calibration dataset.
    pub fn dataset(&self) -> &str {
        self.dataset
            .as_deref()
            .unwrap_or(defaults::QUANTIZE_CALIBRATION_DATASET)
    }
}

/// Post-download quantization: the controller downloads the source model,
/// runs a quantization Job and serves (or caches) its output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuantizationSpec {
    /// Target format.
    pub format: QuantizationFormat,
    /// GGUF quantization level (`Q4_K_M`, `Q5_K_M`, `Q8_0`); GGUF only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf_type: Option<String>,
    /// Bit width for AWQ/GPTQ/COMPRESSED_TENSORS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<i32>,
    /// Group size for AWQ/GPTQ/COMPRESSED_TENSORS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_size: Option<i32>,
    /// Run the Job on a GPU (required for AWQ/GPTQ/COMPRESSED_TENSORS; GGUF
    /// runs on CPU). GPU Jobs get the GPU-node toleration.
    #[serde(default, rename = "useGPU", skip_serializing_if = "Option::is_none")]
    pub use_gpu: Option<bool>,
    /// Memory limit of the Job in GB (default 32 for GGUF, 48 otherwise).
    #[serde(
        default,
        rename = "maxMemoryGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_memory_gb: Option<i32>,
    /// Deadline of the Job in seconds (default 7200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 300, max = 43200))]
    pub timeout_seconds: Option<i64>,
    /// Symmetric GPTQ quantization (default true; needed by ExLlama kernels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sym: Option<bool>,
    /// GPTQ activation reordering (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desc_act: Option<bool>,
    /// Calibration parameters for AWQ/GPTQ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationSpec>,
    /// Fraction of VRAM available to GPTQ quantization, as a decimal string
    /// (default `"0.80"`).
    #[serde(
        default,
        rename = "gpuMemoryFraction",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpu_memory_fraction: Option<String>,
    /// Modules GPTQ keeps at full precision (default `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_exclusion: Option<DynamicExclusion>,
    /// Treatment of GPTQ dense module families (default `fallback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_module_policy: Option<DenseModulePolicy>,
    /// Minimum cosine similarity when `denseModulePolicy` is `validate`, as
    /// a decimal string (default `"0.98"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_module_cosine_threshold: Option<String>,
    /// Node selector of the Job, overriding the model's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
}

impl QuantizationSpec {
    /// A spec for `format` with every optional field unset.
    pub fn new(format: QuantizationFormat) -> QuantizationSpec {
        QuantizationSpec {
            format,
            gguf_type: None,
            bits: None,
            group_size: None,
            use_gpu: None,
            max_memory_gb: None,
            timeout_seconds: None,
            sym: None,
            desc_act: None,
            calibration: None,
            gpu_memory_fraction: None,
            dynamic_exclusion: None,
            dense_module_policy: None,
            dense_module_cosine_threshold: None,
            node_selector: BTreeMap::new(),
        }
    }

    /// Whether the Job runs on a GPU.
    pub fn use_gpu(&self) -> bool {
        self.use_gpu.unwrap_or(false)
    }

    /// Effective memory limit in GB.
    pub fn max_memory_gb(&self) -> i32 {
        self.max_memory_gb.unwrap_or(match self.format {
            QuantizationFormat::Gguf => defaults::QUANTIZE_MAX_MEMORY_GB_GGUF,
            _ => defaults::QUANTIZE_MAX_MEMORY_GB,
        })
    }

    /// Effective Job deadline in seconds.
    pub fn timeout_seconds(&self) -> i64 {
        self.timeout_seconds
            .unwrap_or(defaults::QUANTIZE_TIMEOUT_SECONDS)
    }
}

/// Result of a quantization Job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuantizationStatus {
    /// Format applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Specific quantization type (`Q4_K_M` for GGUF).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Model size before quantization in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_size_bytes: Option<i64>,
    /// Model size after quantization in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compressed_size_bytes: Option<i64>,
    /// Original over compressed size, formatted `%.2f` (`"3.75"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_ratio: Option<String>,
    /// Wall-clock duration of the Job (`"1234s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization_time: Option<String>,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the Job completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Calibration parameters actually used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_params: Option<CalibrationSpec>,
    /// Job progress in percent (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress: Option<i32>,
    /// Human-readable progress (`"layer 152/336"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_detail: Option<String>,
    /// Last lines of the Job's logs on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_timeout_defaults_depend_on_format() {
        assert_eq!(
            QuantizationSpec::new(QuantizationFormat::Gguf).max_memory_gb(),
            32
        );
        assert_eq!(
            QuantizationSpec::new(QuantizationFormat::Gptq).max_memory_gb(),
            48
        );
        assert_eq!(
            QuantizationSpec::new(QuantizationFormat::Awq).timeout_seconds(),
            7200
        );
        assert!(!QuantizationSpec::new(QuantizationFormat::Awq).use_gpu());
    }

    #[test]
    fn formats_use_upstream_spelling() {
        let json = serde_json::to_value(QuantizationFormat::CompressedTensors).unwrap();
        assert_eq!(json, "COMPRESSED_TENSORS");
        let spec: QuantizationSpec = serde_json::from_value(serde_json::json!({
            "format": "GPTQ", "useGPU": true, "maxMemoryGB": 64, "dynamicExclusion": "gdn",
        }))
        .unwrap();
        assert!(spec.use_gpu());
        assert_eq!(spec.max_memory_gb(), 64);
        assert_eq!(spec.dynamic_exclusion, Some(DynamicExclusion::Gdn));
    }

    #[test]
    fn calibration_defaults() {
        let calibration = CalibrationSpec::default();
        assert_eq!(calibration.max_seq_len(), 4096);
        assert_eq!(calibration.max_samples(), 256);
        assert_eq!(calibration.dataset(), "mit-han-lab/pile-val-backup");
    }
}
