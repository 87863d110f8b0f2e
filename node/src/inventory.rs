//! What discovery finds on a node.

use std::fmt;

/// A GPU vendor the agent can discover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuVendor {
    /// NVIDIA, through NVML.
    Nvidia,
    /// AMD, through sysfs and KFD.
    Amd,
}

impl GpuVendor {
    /// The value of the `gpu.vendor` label.
    pub fn label(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => "NVIDIA",
            GpuVendor::Amd => "AMD",
        }
    }
}

impl fmt::Display for GpuVendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// Vendor.
    pub vendor: GpuVendor,
    /// Index among the vendor's GPUs (NVML index, DRM card number).
    pub index: u32,
    /// Model name.
    pub model: String,
    /// Architecture: `sm_XY` (NVIDIA compute capability X.Y) or `gfxNNNN`
    /// (AMD), when known.
    pub arch: Option<String>,
    /// Whether the GPU has fast INT4 paths: NVIDIA compute capability ≥ 8;
    /// every AMD GPU FlexInfer supports.
    pub int4: bool,
    /// Total VRAM, bytes.
    pub vram_total_bytes: u64,
    /// Free VRAM, bytes, when known.
    pub vram_free_bytes: Option<u64>,
    /// Busy percentage (0–100), when known.
    pub utilization_percent: Option<f64>,
    /// Temperature in °C, when known.
    pub temperature_celsius: Option<f64>,
}

impl Gpu {
    /// Total VRAM in MiB.
    pub fn vram_total_mib(&self) -> u64 {
        self.vram_total_bytes / MIB
    }

    /// Used VRAM, bytes, when the free amount is known.
    pub fn vram_used_bytes(&self) -> Option<u64> {
        self.vram_free_bytes
            .map(|free| self.vram_total_bytes.saturating_sub(free))
    }
}

/// Bytes in a MiB.
pub const MIB: u64 = 1024 * 1024;

/// CPU features and size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuInfo {
    /// AVX-512 foundation instructions (`avx512f`).
    pub avx512: bool,
    /// AVX2 instructions.
    pub avx2: bool,
    /// Logical CPUs.
    pub cores: u32,
    /// Physical memory, bytes.
    pub memory_bytes: u64,
}

/// Everything one discovery pass found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// GPUs of every vendor that count (integrated AMD GPUs are left out
    /// when a discrete one exists).
    pub gpus: Vec<Gpu>,
    /// The CPU.
    pub cpu: CpuInfo,
}
