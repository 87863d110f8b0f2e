//! GPU vendors and the Kubernetes extended resources that expose them.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Extended resource of NVIDIA GPUs (device plugin).
pub const NVIDIA_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Extended resource of AMD GPUs (ROCm device plugin).
pub const AMD_GPU_RESOURCE: &str = "amd.com/gpu";
/// Extended resource of Intel GPUs.
pub const INTEL_GPU_RESOURCE: &str = "gpu.intel.com/i915";

/// Every GPU extended resource; a Model must not request these through
/// `spec.resources` (GPUs come from `spec.gpu`).
pub const GPU_RESOURCES: [&str; 3] = [NVIDIA_GPU_RESOURCE, AMD_GPU_RESOURCE, INTEL_GPU_RESOURCE];

/// The hardware a model runs on, as detected on a node.
///
/// Serialized lower-case (`nvidia`, `amd`, `intel`, `cpu`); the node agent
/// writes the `flexinfer.ai/gpu.vendor` label upper-case (`NVIDIA`, `AMD`),
/// which [`Vendor::parse`] accepts too.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[schemars(transform = crate::schema::without_description)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA CUDA GPUs.
    Nvidia,
    /// AMD ROCm GPUs.
    Amd,
    /// Intel GPUs.
    Intel,
    /// No GPU: CPU-only inference.
    Cpu,
}

impl Vendor {
    /// Every vendor, in a stable order.
    pub const ALL: [Vendor; 4] = [Vendor::Nvidia, Vendor::Amd, Vendor::Intel, Vendor::Cpu];

    /// Parses a vendor name case-insensitively (`NVIDIA`, `amd`, ...).
    pub fn parse(value: &str) -> Option<Vendor> {
        let value = value.trim();
        Vendor::ALL
            .into_iter()
            .find(|vendor| vendor.as_str().eq_ignore_ascii_case(value))
    }

    /// The lower-case name used in specs and backend tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
            Vendor::Cpu => "cpu",
        }
    }

    /// The extended resource to request for this vendor, `None` for CPU.
    pub fn resource_name(self) -> Option<&'static str> {
        match self {
            Vendor::Nvidia => Some(NVIDIA_GPU_RESOURCE),
            Vendor::Amd => Some(AMD_GPU_RESOURCE),
            Vendor::Intel => Some(INTEL_GPU_RESOURCE),
            Vendor::Cpu => None,
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_node_label_values_case_insensitively() {
        assert_eq!(Vendor::parse("NVIDIA"), Some(Vendor::Nvidia));
        assert_eq!(Vendor::parse(" amd "), Some(Vendor::Amd));
        assert_eq!(Vendor::parse("Intel"), Some(Vendor::Intel));
        assert_eq!(Vendor::parse("cpu"), Some(Vendor::Cpu));
        assert_eq!(Vendor::parse("tpu"), None);
    }

    #[test]
    fn maps_vendors_to_extended_resources() {
        assert_eq!(Vendor::Nvidia.resource_name(), Some("nvidia.com/gpu"));
        assert_eq!(Vendor::Amd.resource_name(), Some("amd.com/gpu"));
        assert_eq!(Vendor::Intel.resource_name(), Some("gpu.intel.com/i915"));
        assert_eq!(Vendor::Cpu.resource_name(), None);
    }
}
