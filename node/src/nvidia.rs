//! NVIDIA GPUs through NVML (`nvml-wrapper`).
//!
//! The NVML library is loaded at run time: the agent runs on machines
//! without NVIDIA drivers, and there a missing library simply means "no
//! NVIDIA GPUs". Initialisation is retried every pass, so GPUs appear once
//! the driver is installed (e.g. by a GPU operator) without restarting the
//! agent.

use std::ffi::OsString;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::inventory::{Gpu, GpuVendor};

/// Default NVML library: the versioned name the driver (and the NVIDIA
/// container toolkit) always installs.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// NVML, loaded on first use.
pub struct NvidiaProbe {
    library: OsString,
    nvml: Option<Nvml>,
}

impl NvidiaProbe {
    /// A probe loading NVML from `library` (a file name searched like
    /// `dlopen` does, or a path).
    pub fn new(library: impl Into<OsString>) -> Self {
        NvidiaProbe {
            library: library.into(),
            nvml: None,
        }
    }

    /// The NVIDIA GPUs. Absent library or driver: none. Errors reading one
    /// GPU leave that GPU's optional values unknown (or skip the GPU when
    /// its memory cannot be read).
    pub fn discover(&mut self) -> Vec<Gpu> {
        if self.nvml.is_none() {
            match Nvml::builder().lib_path(&self.library).init() {
                Ok(nvml) => self.nvml = Some(nvml),
                Err(err) if is_absent(&err) => {
                    tracing::debug!(error = %err, library = ?self.library, "NVML not available: no NVIDIA GPUs");
                    return Vec::new();
                }
                Err(err) => {
                    tracing::warn!(error = %err, "NVML initialisation failed");
                    return Vec::new();
                }
            }
        }
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let count = match nvml.device_count() {
            Ok(count) => count,
            Err(err) => {
                tracing::warn!(error = %err, "NVML device count failed");
                return Vec::new();
            }
        };
        (0..count)
            .filter_map(|index| match device(nvml, index) {
                Ok(gpu) => Some(gpu),
                Err(err) => {
                    tracing::warn!(index, error = %err, "reading NVIDIA GPU failed");
                    None
                }
            })
            .collect()
    }
}

/// Errors that mean "this machine has no usable NVIDIA driver".
fn is_absent(err: &NvmlError) -> bool {
    matches!(
        err,
        NvmlError::LibloadingError(_)
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::DriverNotLoaded
            | NvmlError::LibraryNotFound
            | NvmlError::NotFound
    )
}

fn device(nvml: &Nvml, index: u32) -> Result<Gpu, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let memory = device.memory_info()?;
    let capability = device.cuda_compute_capability().ok();
    Ok(Gpu {
        vendor: GpuVendor::Nvidia,
        index,
        model: device.name().unwrap_or_else(|_| "NVIDIA GPU".to_owned()),
        arch: capability.as_ref().map(|c| sm_arch(c.major, c.minor)),
        int4: capability.as_ref().is_some_and(|c| c.major >= 8),
        vram_total_bytes: memory.total,
        vram_free_bytes: Some(memory.free),
        utilization_percent: device.utilization_rates().ok().map(|u| f64::from(u.gpu)),
        temperature_celsius: device
            .temperature(TemperatureSensor::Gpu)
            .ok()
            .map(f64::from),
    })
}

/// `sm_XY` from compute capability X.Y.
pub fn sm_arch(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// The numeric order of an `sm_XY` name, for choosing the newest.
pub fn sm_order(arch: &str) -> Option<u32> {
    arch.strip_prefix("sm_")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_library_means_no_gpus() {
        let mut probe = NvidiaProbe::new("/nonexistent/libnvidia-ml.so.1");
        assert!(probe.discover().is_empty());
        // And again: the failure is not cached as a broken state.
        assert!(probe.discover().is_empty());
        assert!(probe.nvml.is_none());
    }

    #[test]
    fn compute_capability_names() {
        assert_eq!(sm_arch(8, 9), "sm_89");
        assert_eq!(sm_arch(9, 0), "sm_90");
        assert_eq!(sm_arch(5, 2), "sm_52");
        assert_eq!(sm_order("sm_89"), Some(89));
        assert_eq!(sm_order("sm_100"), Some(100));
        assert!(sm_order("sm_100") > sm_order("sm_90"));
        assert_eq!(sm_order("gfx1100"), None);
    }
}
