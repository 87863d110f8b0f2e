//! The labels and annotations a node should carry, from its inventory.
//!
//! Labels (`<p>` is `--label-prefix`, default `flexinfer.ai/`):
//!
//! | key | value |
//! |---|---|
//! | `<p>gpu.vendor` | `NVIDIA`, `AMD`, or `MIXED` when both vendors are present |
//! | `<p>gpu.arch` | the newest architecture: `sm_XY` (NVIDIA), `gfxNNNN` (AMD) |
//! | `<p>gpu.vram` | VRAM of the largest GPU in whole GiB, rounded down (`23Gi` for 24560 MiB) |
//! | `<p>gpu.count` | number of GPUs |
//! | `<p>gpu.int4` | `true` when the newest GPU has fast INT4 (NVIDIA ≥ sm_80, AMD always) |
//! | `<p>cpu.avx512` | `true` / `false` |
//!
//! Annotations: `<p>gpu-free-memory` (free VRAM in MiB summed over the
//! GPUs, `%d`) and `<p>gpu.util` (average GPU utilisation in percent,
//! `%.2f`), each only when at least one GPU reports it; and
//! `<p>kv-cache-usage` (average KV-cache usage ratio of the node's model
//! servers, `%.4f`, see [`crate::kv_cache`]) when one reports it.
//!
//! Without GPUs only `cpu.avx512` is set, so the scheduler extender's
//! filter keeps GPU pods off the node. A node with GPUs of both vendors is
//! labelled `gpu.vendor=MIXED` with the total count and no arch, vram or
//! int4 label: any single value would be a guess. The explicit `MIXED`
//! value lets the operator see the ambiguity and refuse to guess.

use std::collections::BTreeMap;

use flexinfer_crds::labels as keys;

use crate::amd::gfx_order;
use crate::inventory::{Gpu, GpuVendor, Inventory, MIB};
use crate::nvidia::sm_order;

/// `gpu.vendor` value of a node with GPUs of more than one vendor.
pub const MIXED_VENDOR: &str = "MIXED";

/// Free VRAM, in MiB, that `gpu-free-memory` may be off by before it is
/// rewritten: allocators move it by a few MiB every pass, while a model
/// needs gigabytes.
pub const FREE_MEMORY_DEAD_BAND_MIB: f64 = 256.0;

/// Percentage points that `gpu.util` may be off by before it is rewritten.
pub const UTIL_DEAD_BAND_PERCENT: f64 = 5.0;

/// Ratio that `kv-cache-usage` may be off by before it is rewritten.
pub const KV_CACHE_DEAD_BAND: f64 = 0.05;

/// The label and annotation keys under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelKeys {
    prefix: String,
}

impl LabelKeys {
    /// Keys under `prefix` (e.g. `flexinfer.ai/`).
    pub fn new(prefix: impl Into<String>) -> Self {
        LabelKeys {
            prefix: prefix.into(),
        }
    }

    fn key(&self, well_known: &str) -> String {
        let suffix = well_known.strip_prefix(keys::PREFIX).unwrap_or(well_known);
        format!("{}{suffix}", self.prefix)
    }

    /// `<p>gpu.vendor`.
    pub fn gpu_vendor(&self) -> String {
        self.key(keys::NODE_GPU_VENDOR)
    }
    /// `<p>gpu.arch`.
    pub fn gpu_arch(&self) -> String {
        self.key(keys::NODE_GPU_ARCH)
    }
    /// `<p>gpu.vram`.
    pub fn gpu_vram(&self) -> String {
        self.key(keys::NODE_GPU_VRAM)
    }
    /// `<p>gpu.count`.
    pub fn gpu_count(&self) -> String {
        self.key(keys::NODE_GPU_COUNT)
    }
    /// `<p>gpu.int4`.
    pub fn gpu_int4(&self) -> String {
        self.key(keys::NODE_GPU_INT4)
    }
    /// `<p>cpu.avx512`.
    pub fn cpu_avx512(&self) -> String {
        self.key(keys::NODE_CPU_AVX512)
    }
    /// `<p>gpu-free-memory`.
    pub fn gpu_free_memory(&self) -> String {
        self.key(keys::NODE_GPU_FREE_MEMORY)
    }
    /// `<p>gpu.util`.
    pub fn gpu_util(&self) -> String {
        self.key(keys::NODE_GPU_UTIL)
    }
    /// `<p>kv-cache-usage`.
    pub fn kv_cache_usage(&self) -> String {
        self.key(keys::NODE_KV_CACHE_USAGE)
    }

    /// Every label the agent owns.
    pub fn managed_labels(&self) -> [String; 6] {
        [
            self.gpu_vendor(),
            self.gpu_arch(),
            self.gpu_vram(),
            self.gpu_count(),
            self.gpu_int4(),
            self.cpu_avx512(),
        ]
    }

    /// The measured annotations and how far each may drift from the value
    /// on the Node before the agent rewrites it ([`crate::patch`]):
    /// [`FREE_MEMORY_DEAD_BAND_MIB`], [`UTIL_DEAD_BAND_PERCENT`],
    /// [`KV_CACHE_DEAD_BAND`].
    pub fn dead_bands(&self) -> [(String, f64); 3] {
        [
            (self.gpu_free_memory(), FREE_MEMORY_DEAD_BAND_MIB),
            (self.gpu_util(), UTIL_DEAD_BAND_PERCENT),
            (self.kv_cache_usage(), KV_CACHE_DEAD_BAND),
        ]
    }

    /// Every annotation the agent owns.
    pub fn managed_annotations(&self) -> [String; 3] {
        [
            self.gpu_free_memory(),
            self.gpu_util(),
            self.kv_cache_usage(),
        ]
    }
}

impl Default for LabelKeys {
    fn default() -> Self {
        LabelKeys::new(keys::PREFIX)
    }
}

/// Labels and annotations of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMetadata {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// Adds the KV-cache usage annotation.
pub fn add_kv_cache_usage(meta: &mut NodeMetadata, keys: &LabelKeys, usage: f64) {
    meta.annotations
        .insert(keys.kv_cache_usage(), format!("{usage:.4}"));
}

/// What the node should carry.
pub fn desired(inventory: &Inventory, keys: &LabelKeys) -> NodeMetadata {
    let mut meta = NodeMetadata::default();
    meta.labels
        .insert(keys.cpu_avx512(), inventory.cpu.avx512.to_string());
    let gpus = &inventory.gpus;
    if gpus.is_empty() {
        return meta;
    }
    meta.labels.insert(keys.gpu_count(), gpus.len().to_string());
    let vendor = gpus[0].vendor;
    if gpus.iter().any(|gpu| gpu.vendor != vendor) {
        meta.labels
            .insert(keys.gpu_vendor(), MIXED_VENDOR.to_owned());
    } else {
        meta.labels
            .insert(keys.gpu_vendor(), vendor.label().to_owned());
        let largest_mib = gpus.iter().map(Gpu::vram_total_mib).max().unwrap_or(0);
        meta.labels
            .insert(keys.gpu_vram(), format!("{}Gi", whole_gib(largest_mib)));
        match newest(gpus) {
            Some(gpu) => {
                if let Some(arch) = &gpu.arch {
                    meta.labels.insert(keys.gpu_arch(), arch.clone());
                }
                meta.labels.insert(keys.gpu_int4(), gpu.int4.to_string());
            }
            None => {
                meta.labels
                    .insert(keys.gpu_int4(), (vendor == GpuVendor::Amd).to_string());
            }
        }
    }

    let free: Vec<u64> = gpus.iter().filter_map(|gpu| gpu.vram_free_bytes).collect();
    if !free.is_empty() {
        let free_mib: u64 = free.iter().map(|bytes| bytes / MIB).sum();
        meta.annotations
            .insert(keys.gpu_free_memory(), free_mib.to_string());
    }
    let utils: Vec<f64> = gpus
        .iter()
        .filter_map(|gpu| gpu.utilization_percent)
        .collect();
    if !utils.is_empty() {
        let average = utils.iter().sum::<f64>() / utils.len() as f64;
        meta.annotations
            .insert(keys.gpu_util(), format!("{average:.2}"));
    }
    meta
}

/// MiB → whole GiB, rounded down, as the labels have always been written:
/// a "24 GB" card that reports 24560 MiB is `23Gi`. Benchmark results are
/// keyed by device classes built from this label, so it must not change.
fn whole_gib(mib: u64) -> u64 {
    mib / 1024
}

/// The GPU with the newest known architecture.
fn newest(gpus: &[Gpu]) -> Option<&Gpu> {
    gpus.iter()
        .filter_map(|gpu| {
            let arch = gpu.arch.as_deref()?;
            let order = match gpu.vendor {
                GpuVendor::Amd => gfx_order(arch),
                GpuVendor::Nvidia => sm_order(arch),
            }?;
            Some((order, gpu))
        })
        .max_by_key(|(order, gpu)| (*order, std::cmp::Reverse(gpu.index)))
        .map(|(_, gpu)| gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::CpuInfo;

    fn gpu(vendor: GpuVendor, index: u32, arch: &str, mib: u64) -> Gpu {
        Gpu {
            vendor,
            index,
            model: "test".into(),
            arch: Some(arch.into()),
            int4: vendor == GpuVendor::Amd || sm_order(arch).is_some_and(|o| o >= 80),
            vram_total_bytes: mib * MIB,
            vram_free_bytes: Some(mib * MIB / 2),
            utilization_percent: Some(10.0 * (index + 1) as f64),
            temperature_celsius: None,
        }
    }

    fn labels(meta: &NodeMetadata) -> Vec<(&str, &str)> {
        meta.labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn nvidia_node() {
        let inventory = Inventory {
            gpus: vec![
                gpu(GpuVendor::Nvidia, 0, "sm_89", 24_564),
                gpu(GpuVendor::Nvidia, 1, "sm_89", 24_564),
            ],
            cpu: CpuInfo {
                avx512: true,
                ..Default::default()
            },
        };
        let meta = desired(&inventory, &LabelKeys::default());
        assert_eq!(
            labels(&meta),
            [
                ("flexinfer.ai/cpu.avx512", "true"),
                ("flexinfer.ai/gpu.arch", "sm_89"),
                ("flexinfer.ai/gpu.count", "2"),
                ("flexinfer.ai/gpu.int4", "true"),
                ("flexinfer.ai/gpu.vendor", "NVIDIA"),
                ("flexinfer.ai/gpu.vram", "23Gi"),
            ]
        );
        // 12282 + 12282 MiB free; utilisation (10 + 20) / 2.
        assert_eq!(meta.annotations["flexinfer.ai/gpu-free-memory"], "24564");
        assert_eq!(meta.annotations["flexinfer.ai/gpu.util"], "15.00");
    }

    #[test]
    fn maxwell_has_no_int4_and_the_newest_arch_wins() {
        let inventory = Inventory {
            gpus: vec![
                gpu(GpuVendor::Nvidia, 0, "sm_52", 4096),
                gpu(GpuVendor::Nvidia, 1, "sm_61", 8192),
            ],
            ..Default::default()
        };
        let meta = desired(&inventory, &LabelKeys::default());
        assert_eq!(meta.labels["flexinfer.ai/gpu.arch"], "sm_61");
        assert_eq!(meta.labels["flexinfer.ai/gpu.int4"], "false");
        assert_eq!(meta.labels["flexinfer.ai/gpu.vram"], "8Gi");
    }

    #[test]
    fn two_vendors_are_labelled_mixed_without_guessing() {
        let inventory = Inventory {
            gpus: vec![
                gpu(GpuVendor::Nvidia, 0, "sm_89", 24_564),
                gpu(GpuVendor::Amd, 0, "gfx1100", 24_560),
            ],
            ..Default::default()
        };
        let meta = desired(&inventory, &LabelKeys::default());
        assert_eq!(
            labels(&meta),
            [
                ("flexinfer.ai/cpu.avx512", "false"),
                ("flexinfer.ai/gpu.count", "2"),
                ("flexinfer.ai/gpu.vendor", "MIXED"),
            ]
        );
        assert_eq!(meta.annotations["flexinfer.ai/gpu-free-memory"], "24562");
    }

    #[test]
    fn no_gpu_means_only_the_cpu_label() {
        let meta = desired(&Inventory::default(), &LabelKeys::default());
        assert_eq!(labels(&meta), [("flexinfer.ai/cpu.avx512", "false")]);
        assert!(meta.annotations.is_empty());
    }

    #[test]
    fn prefix_is_configurable() {
        let keys = LabelKeys::new("example.com/");
        let inventory = Inventory {
            gpus: vec![gpu(GpuVendor::Amd, 0, "gfx906", 16_368)],
            ..Default::default()
        };
        let meta = desired(&inventory, &keys);
        assert_eq!(meta.labels["example.com/gpu.vendor"], "AMD");
        assert_eq!(meta.labels["example.com/gpu.vram"], "15Gi");
        assert_eq!(meta.annotations["example.com/gpu-free-memory"], "8184");
        assert!(meta.labels.keys().all(|k| k.starts_with("example.com/")));
        assert_eq!(keys.managed_labels()[0], "example.com/gpu.vendor");
        assert_eq!(keys.managed_annotations()[1], "example.com/gpu.util");
        assert_eq!(keys.managed_annotations()[2], "example.com/kv-cache-usage");
        let mut meta = meta;
        add_kv_cache_usage(&mut meta, &keys, 0.123456);
        assert_eq!(meta.annotations["example.com/kv-cache-usage"], "0.1235");
    }

    #[test]
    fn vram_is_floored_to_whole_gib() {
        assert_eq!(whole_gib(24_560), 23);
        assert_eq!(whole_gib(24_576), 24);
        assert_eq!(whole_gib(81_559), 79);
        assert_eq!(whole_gib(143_771), 140);
        assert_eq!(whole_gib(1_023), 0);
    }
}
