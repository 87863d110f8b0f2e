//! AMD GPUs from sysfs and the KFD topology, without ROCm tools.
//!
//! - `class/drm/card<N>/device/vendor` is `0x1002` for AMD.
//! - `…/device/mem_info_vram_total` and `mem_info_vram_used`: VRAM, bytes.
//! - `…/device/gpu_busy_percent`: utilisation.
//! - `…/device/hwmon/hwmon*/temp1_input`: edge temperature, m°C.
//! - `…/device/product_name` (else the PCI `device` id): the model.
//! - `class/kfd/kfd/topology/nodes/<K>/properties`: `gfx_target_version`
//!   (`110000` → `gfx1100`) of the KFD node whose `drm_render_minor`
//!   matches the card's `device/drm/renderD<minor>`.
//!
//! Integrated GPUs (APUs) report a little VRAM carve-out: a GPU counts only
//! when it has at least `min_discrete_vram_mib` (4096 by default,
//! `FLEXINFER_AMD_MIN_DISCRETE_VRAM_MB`), unless no GPU reaches it, in
//! which case all count.

use std::fs;
use std::path::{Path, PathBuf};

use crate::inventory::{Gpu, GpuVendor};

/// PCI vendor id of AMD.
pub const AMD_PCI_VENDOR: &str = "0x1002";
/// Default VRAM below which an AMD GPU counts as integrated.
pub const DEFAULT_MIN_DISCRETE_VRAM_MIB: u64 = 4096;

/// The AMD GPUs under `sysfs_root` (normally `/sys`). A machine without
/// any, or without a readable sysfs, has none: that is not an error.
pub fn discover(sysfs_root: &Path, min_discrete_vram_mib: u64) -> Vec<Gpu> {
    let topology = kfd_topology(sysfs_root);
    let mut gpus: Vec<Gpu> = cards(sysfs_root)
        .into_iter()
        .filter_map(|(index, device)| card(index, &device, &topology))
        .collect();
    gpus.sort_by_key(|gpu| gpu.index);
    if gpus
        .iter()
        .any(|gpu| gpu.vram_total_mib() >= min_discrete_vram_mib)
    {
        gpus.retain(|gpu| gpu.vram_total_mib() >= min_discrete_vram_mib);
    }
    gpus
}

/// `(N, class/drm/cardN/device)` for every `cardN` entry.
fn cards(sysfs_root: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = fs::read_dir(sysfs_root.join("class/drm")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let index = name.to_str()?.strip_prefix("card")?.parse().ok()?;
            Some((index, entry.path().join("device")))
        })
        .collect()
}

fn card(index: u32, device: &Path, topology: &[KfdNode]) -> Option<Gpu> {
    if read_trimmed(&device.join("vendor"))?.to_ascii_lowercase() != AMD_PCI_VENDOR {
        return None;
    }
    let total = read_number(&device.join("mem_info_vram_total"))?;
    let used = read_number(&device.join("mem_info_vram_used"));
    let model = read_trimmed(&device.join("product_name"))
        .filter(|name| !name.is_empty())
        .or_else(|| read_trimmed(&device.join("device")).map(|id| format!("AMD GPU {id}")))
        .unwrap_or_else(|| "AMD GPU".to_owned());
    let arch = render_minor(device).and_then(|minor| {
        topology
            .iter()
            .find(|node| node.render_minor == Some(minor))
            .map(|node| gfx_name(node.gfx_target_version))
    });
    let arch = arch.or_else(|| {
        // Without a render-minor match, a machine with one GPU architecture
        // still has an unambiguous answer.
        let mut versions: Vec<u32> = topology.iter().map(|n| n.gfx_target_version).collect();
        versions.sort_unstable();
        versions.dedup();
        match versions.as_slice() {
            [only] => Some(gfx_name(*only)),
            _ => None,
        }
    });
    Some(Gpu {
        vendor: GpuVendor::Amd,
        index,
        model,
        arch,
        int4: true,
        vram_total_bytes: total,
        vram_free_bytes: used.map(|used| total.saturating_sub(used)),
        utilization_percent: read_number(&device.join("gpu_busy_percent")).map(|p| p as f64),
        temperature_celsius: temperature(device),
    })
}

/// The render minor of a card: `device/drm/renderD<minor>`.
fn render_minor(device: &Path) -> Option<u32> {
    fs::read_dir(device.join("drm"))
        .ok()?
        .flatten()
        .find_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("renderD")?
                .parse()
                .ok()
        })
}

fn temperature(device: &Path) -> Option<f64> {
    let mut hwmons: Vec<PathBuf> = fs::read_dir(device.join("hwmon"))
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .collect();
    hwmons.sort();
    hwmons
        .iter()
        .find_map(|hwmon| read_number(&hwmon.join("temp1_input")))
        .map(|millidegrees| millidegrees as f64 / 1000.0)
}

/// A GPU node of the KFD topology.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KfdNode {
    gfx_target_version: u32,
    render_minor: Option<u32>,
}

/// The GPU nodes of the KFD topology (CPU nodes have no
/// `gfx_target_version`).
fn kfd_topology(sysfs_root: &Path) -> Vec<KfdNode> {
    let Ok(entries) = fs::read_dir(sysfs_root.join("class/kfd/kfd/topology/nodes")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let properties = fs::read_to_string(entry.path().join("properties")).ok()?;
            let value = |key: &str| {
                properties.lines().find_map(|line| {
                    let (name, value) = line.split_once(' ')?;
                    (name == key).then(|| value.trim().parse::<u32>().ok())?
                })
            };
            let version = value("gfx_target_version").filter(|v| *v > 0)?;
            Some(KfdNode {
                gfx_target_version: version,
                render_minor: value("drm_render_minor").filter(|m| *m > 0),
            })
        })
        .collect()
}

/// `gfx_target_version` → LLVM target name: `major·10000 + minor·100 +
/// stepping`, minor and stepping written in hex (`90010` → `gfx90a`).
pub fn gfx_name(version: u32) -> String {
    let major = version / 10_000;
    let minor = (version / 100) % 100;
    let stepping = version % 100;
    format!("gfx{major}{minor:x}{stepping:x}")
}

/// The numeric order of an AMD architecture name, for choosing the newest.
pub fn gfx_order(arch: &str) -> Option<u32> {
    let digits = arch.strip_prefix("gfx")?;
    if digits.len() < 3 {
        return None;
    }
    let (major, rest) = digits.split_at(digits.len() - 2);
    let major: u32 = major.parse().ok()?;
    let minor = u32::from_str_radix(&rest[..1], 16).ok()?;
    let stepping = u32::from_str_radix(&rest[1..], 16).ok()?;
    Some(major * 10_000 + minor * 100 + stepping)
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn read_number(path: &Path) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_target_versions_map_to_llvm_names() {
        assert_eq!(gfx_name(110000), "gfx1100");
        assert_eq!(gfx_name(110001), "gfx1101");
        assert_eq!(gfx_name(90006), "gfx906");
        assert_eq!(gfx_name(90010), "gfx90a");
        assert_eq!(gfx_name(90402), "gfx942");
        assert_eq!(gfx_name(100300), "gfx1030");
        assert_eq!(gfx_name(110501), "gfx1151");
    }

    #[test]
    fn gfx_order_inverts_gfx_name() {
        for version in [110000, 90006, 90010, 90402, 100300, 120001] {
            assert_eq!(gfx_order(&gfx_name(version)), Some(version));
        }
        assert!(gfx_order("gfx1100") > gfx_order("gfx942"));
        assert_eq!(gfx_order("sm_89"), None);
        assert_eq!(gfx_order("gfx"), None);
    }

    #[test]
    fn missing_sysfs_means_no_gpus() {
        assert!(discover(Path::new("/nonexistent/sysfs"), 4096).is_empty());
    }
}
