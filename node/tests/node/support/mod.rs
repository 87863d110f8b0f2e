//! Fixture machines: sysfs and procfs trees in a temporary directory.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use flexinfer_node::agent::Discovery;

/// 24 GiB nominal (RX 7900 XTX): what `mem_info_vram_total` reports.
pub const VRAM_24G: u64 = 25_753_026_560;
/// 16 GiB nominal (Radeon VII / MI50).
pub const VRAM_16G: u64 = 17_163_091_968;
/// 512 MiB carve-out of an integrated GPU.
pub const VRAM_APU: u64 = 536_870_912;

/// A fake machine.
pub struct Machine {
    dir: tempfile::TempDir,
    kfd_nodes: usize,
}

/// One AMD card of a fixture.
pub struct AmdCard<'a> {
    pub index: u32,
    pub render_minor: u32,
    pub gfx_target_version: u32,
    pub vram_total: u64,
    pub vram_used: u64,
    pub busy_percent: u32,
    pub temp_millidegrees: u32,
    pub product_name: &'a str,
}

impl Machine {
    /// An empty machine: a CPU without AVX-512, 64 GiB, no GPUs, an empty
    /// sysfs and a KFD topology with only the CPU node.
    pub fn new() -> Self {
        let machine = Machine {
            dir: tempfile::tempdir().expect("tempdir"),
            kfd_nodes: 0,
        };
        machine.cpu(false);
        fs::create_dir_all(machine.sys().join("class/drm")).unwrap();
        machine
    }

    pub fn sys(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    pub fn proc(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    /// Writes `/proc/cpuinfo` (4 logical CPUs) and `/proc/meminfo`.
    pub fn cpu(&self, avx512: bool) -> &Self {
        let flags = if avx512 {
            "fpu sse2 avx avx2 avx512f avx512dq avx512bw"
        } else {
            "fpu sse2 avx avx2"
        };
        let cpuinfo: String = (0..4)
            .map(|i| format!("processor\t: {i}\nvendor_id\t: AuthenticAMD\nflags\t\t: {flags}\n\n"))
            .collect();
        write(&self.proc().join("cpuinfo"), &cpuinfo);
        write(
            &self.proc().join("meminfo"),
            "MemTotal:       67108864 kB\nMemFree:        1024 kB\n",
        );
        self
    }

    /// Adds the KFD CPU node (gfx_target_version 0).
    pub fn kfd_cpu_node(&mut self) -> &mut Self {
        let node = self.kfd_node_dir();
        write(
            &node.join("properties"),
            "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\ndrm_render_minor 0\n",
        );
        self
    }

    fn kfd_node_dir(&mut self) -> PathBuf {
        let dir = self
            .sys()
            .join(format!("class/kfd/kfd/topology/nodes/{}", self.kfd_nodes));
        self.kfd_nodes += 1;
        dir
    }

    /// Adds an AMD card: `class/drm/cardN` (+ a connector and a render
    /// node, which discovery must ignore) and its KFD node.
    pub fn amd_card(&mut self, card: AmdCard<'_>) -> &mut Self {
        let drm = self.sys().join("class/drm");
        let device = drm.join(format!("card{}/device", card.index));
        write(&device.join("vendor"), "0x1002\n");
        write(&device.join("device"), "0x744c\n");
        write(
            &device.join("mem_info_vram_total"),
            &format!("{}\n", card.vram_total),
        );
        write(
            &device.join("mem_info_vram_used"),
            &format!("{}\n", card.vram_used),
        );
        write(
            &device.join("gpu_busy_percent"),
            &format!("{}\n", card.busy_percent),
        );
        write(
            &device.join("hwmon/hwmon3/temp1_input"),
            &format!("{}\n", card.temp_millidegrees),
        );
        if !card.product_name.is_empty() {
            write(
                &device.join("product_name"),
                &format!("{}\n", card.product_name),
            );
        }
        fs::create_dir_all(device.join(format!("drm/card{}", card.index))).unwrap();
        fs::create_dir_all(device.join(format!("drm/renderD{}", card.render_minor))).unwrap();
        fs::create_dir_all(drm.join(format!("card{}-DP-1", card.index))).unwrap();
        fs::create_dir_all(drm.join(format!("renderD{}", card.render_minor))).unwrap();
        let node = self.kfd_node_dir();
        write(
            &node.join("properties"),
            &format!(
                "cpu_cores_count 0\nsimd_count 192\ngfx_target_version {}\ndrm_render_minor {}\n",
                card.gfx_target_version, card.render_minor
            ),
        );
        self
    }

    /// Changes the VRAM in use on AMD card `index` (as after a model
    /// loaded or unloaded).
    pub fn set_vram_used(&self, index: u32, bytes: u64) -> &Self {
        let device = self.sys().join(format!("class/drm/card{index}/device"));
        write(&device.join("mem_info_vram_used"), &format!("{bytes}\n"));
        self
    }

    /// Adds a non-AMD card (an Intel integrated GPU).
    pub fn intel_card(&mut self, index: u32) -> &mut Self {
        let device = self.sys().join(format!("class/drm/card{index}/device"));
        write(&device.join("vendor"), "0x8086\n");
        write(&device.join("device"), "0x46a6\n");
        self
    }

    /// Discovery on this machine, with NVML absent.
    pub fn discovery(&self) -> Discovery {
        Discovery::new(
            self.sys(),
            self.proc(),
            self.dir
                .path()
                .join("no-nvidia/libnvidia-ml.so.1")
                .into_os_string(),
            4096,
        )
    }
}

/// The RX 7900 XTX of the fixtures (gfx1100, 24 GiB, 4 GiB used).
pub fn rx7900xtx(index: u32, render_minor: u32) -> AmdCard<'static> {
    AmdCard {
        index,
        render_minor,
        gfx_target_version: 110000,
        vram_total: VRAM_24G,
        vram_used: 4 * 1024 * 1024 * 1024,
        busy_percent: 12,
        temp_millidegrees: 45_000,
        product_name: "AMD Radeon RX 7900 XTX",
    }
}

fn write(path: &Path, contents: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}
