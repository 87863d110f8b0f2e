//! Discovery and labels on fixture machines, checked exactly.

use crate::support;

use std::collections::BTreeMap;

use flexinfer_node::agent::dry_run;
use flexinfer_node::inventory::{GpuVendor, MIB};
use flexinfer_node::labels::LabelKeys;
use support::{rx7900xtx, AmdCard, Machine, VRAM_16G, VRAM_24G, VRAM_APU};

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn amd_gfx1100_24gib_card() {
    let mut machine = Machine::new();
    machine.cpu(true);
    machine.kfd_cpu_node().amd_card(rx7900xtx(0, 128));
    let (inventory, desired) = dry_run(&mut machine.discovery(), &LabelKeys::default());

    assert_eq!(inventory.gpus.len(), 1);
    let gpu = &inventory.gpus[0];
    assert_eq!(gpu.vendor, GpuVendor::Amd);
    assert_eq!(gpu.model, "AMD Radeon RX 7900 XTX");
    assert_eq!(gpu.arch.as_deref(), Some("gfx1100"));
    assert_eq!(gpu.vram_total_bytes, VRAM_24G);
    assert_eq!(gpu.vram_free_bytes, Some(VRAM_24G - 4096 * MIB));
    assert_eq!(gpu.utilization_percent, Some(12.0));
    assert_eq!(gpu.temperature_celsius, Some(45.0));
    assert_eq!(inventory.cpu.cores, 4);

    assert_eq!(
        desired.labels,
        map(&[
            ("flexinfer.ai/cpu.avx512", "true"),
            ("flexinfer.ai/gpu.arch", "gfx1100"),
            ("flexinfer.ai/gpu.count", "1"),
            ("flexinfer.ai/gpu.int4", "true"),
            ("flexinfer.ai/gpu.vendor", "AMD"),
            ("flexinfer.ai/gpu.vram", "23Gi"),
        ])
    );
    // 24560 MiB total − 4096 MiB used.
    assert_eq!(
        desired.annotations,
        map(&[
            ("flexinfer.ai/gpu-free-memory", "20464"),
            ("flexinfer.ai/gpu.util", "12.00"),
        ])
    );
}

#[test]
fn two_amd_cards_and_an_integrated_gpu() {
    let mut machine = Machine::new();
    machine
        .kfd_cpu_node()
        .amd_card(AmdCard {
            index: 0,
            render_minor: 128,
            gfx_target_version: 90006,
            vram_total: VRAM_16G,
            vram_used: 1024 * MIB,
            busy_percent: 30,
            temp_millidegrees: 60_000,
            product_name: "",
        })
        .amd_card(rx7900xtx(1, 129))
        // The APU's 512 MiB carve-out does not count next to discrete cards.
        .amd_card(AmdCard {
            index: 2,
            render_minor: 130,
            gfx_target_version: 100306,
            vram_total: VRAM_APU,
            vram_used: 0,
            busy_percent: 0,
            temp_millidegrees: 40_000,
            product_name: "",
        });
    let (inventory, desired) = dry_run(&mut machine.discovery(), &LabelKeys::default());

    let found: Vec<(u32, Option<&str>, &str)> = inventory
        .gpus
        .iter()
        .map(|g| (g.index, g.arch.as_deref(), g.model.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (0, Some("gfx906"), "AMD GPU 0x744c"),
            (1, Some("gfx1100"), "AMD Radeon RX 7900 XTX"),
        ]
    );
    assert_eq!(
        desired.labels,
        map(&[
            ("flexinfer.ai/cpu.avx512", "false"),
            ("flexinfer.ai/gpu.arch", "gfx1100"),
            ("flexinfer.ai/gpu.count", "2"),
            ("flexinfer.ai/gpu.int4", "true"),
            ("flexinfer.ai/gpu.vendor", "AMD"),
            ("flexinfer.ai/gpu.vram", "23Gi"),
        ])
    );
    // (16368 − 1024) + (24560 − 4096) MiB; (30 + 12) / 2 %.
    assert_eq!(
        desired.annotations,
        map(&[
            ("flexinfer.ai/gpu-free-memory", "35808"),
            ("flexinfer.ai/gpu.util", "21.00"),
        ])
    );
}

#[test]
fn a_machine_without_gpus() {
    let mut machine = Machine::new();
    machine.kfd_cpu_node().intel_card(0);
    let (inventory, desired) = dry_run(&mut machine.discovery(), &LabelKeys::default());
    assert!(inventory.gpus.is_empty());
    assert_eq!(desired.labels, map(&[("flexinfer.ai/cpu.avx512", "false")]));
    assert!(desired.annotations.is_empty());
}

#[test]
fn nvml_absent_and_no_sysfs_is_not_an_error() {
    let machine = Machine::new();
    let mut discovery = flexinfer_node::agent::Discovery::new(
        "/nonexistent/sys",
        machine.proc(),
        "/nonexistent/libnvidia-ml.so.1",
        4096,
    );
    let (inventory, desired) = dry_run(&mut discovery, &LabelKeys::default());
    assert!(inventory.gpus.is_empty());
    assert_eq!(inventory.cpu.cores, 4);
    assert_eq!(desired.labels, map(&[("flexinfer.ai/cpu.avx512", "false")]));
}

#[test]
fn only_an_integrated_gpu_still_counts() {
    let mut machine = Machine::new();
    machine.kfd_cpu_node().amd_card(AmdCard {
        index: 0,
        render_minor: 128,
        gfx_target_version: 110501,
        vram_total: VRAM_APU,
        vram_used: 0,
        busy_percent: 5,
        temp_millidegrees: 40_000,
        product_name: "",
    });
    let (_, desired) = dry_run(&mut machine.discovery(), &LabelKeys::default());
    assert_eq!(desired.labels["flexinfer.ai/gpu.arch"], "gfx1151");
    assert_eq!(desired.labels["flexinfer.ai/gpu.count"], "1");
    assert_eq!(desired.labels["flexinfer.ai/gpu.vram"], "0Gi");
}

#[test]
fn label_prefix_applies_to_every_key() {
    let mut machine = Machine::new();
    machine.kfd_cpu_node().amd_card(rx7900xtx(0, 128));
    let (_, desired) = dry_run(
        &mut machine.discovery(),
        &LabelKeys::new("gpu.example.com/"),
    );
    assert_eq!(desired.labels["gpu.example.com/gpu.vendor"], "AMD");
    assert!(desired
        .labels
        .keys()
        .chain(desired.annotations.keys())
        .all(|k| k.starts_with("gpu.example.com/")));
}
