//! Prometheus metrics of the agent (served on `--metrics-port`).
//!
//! Per GPU (`gpu` is the vendor's index, `node` the Node name):
//! - `flexinfer_gpu_temperature_celsius{gpu,node}`
//! - `flexinfer_gpu_vram_total_bytes{gpu,node,vendor}`,
//!   `flexinfer_gpu_vram_free_bytes{…}`, `flexinfer_gpu_vram_used_bytes{…}`
//! - `flexinfer_gpu_vram_utilization_percent{gpu,node,vendor}`: used ÷ total
//! - `flexinfer_gpu_utilization_percent{gpu,node,vendor}`: busy percentage
//!
//! Per pass: `flexinfer_agent_gpus{vendor}` and
//! `flexinfer_agent_node_updates_total{result}` (`unchanged`, `updated`,
//! `error`).
//!
//! Per-GPU series are rebuilt every pass, so a GPU that disappears stops
//! being reported.

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::inventory::{GpuVendor, Inventory};

/// The agent's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    temperature: GaugeVec,
    vram_total: GaugeVec,
    vram_free: GaugeVec,
    vram_used: GaugeVec,
    vram_utilization: GaugeVec,
    utilization: GaugeVec,
    gpus: IntGaugeVec,
    updates: IntCounterVec,
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new() -> Self {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let gauge = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(gauge.clone()))
                .expect("unique metric");
            gauge
        };
        let per_gpu = ["gpu", "node", "vendor"];
        let temperature = gauge(
            "flexinfer_gpu_temperature_celsius",
            "GPU temperature.",
            &["gpu", "node"],
        );
        let vram_total = gauge("flexinfer_gpu_vram_total_bytes", "Total VRAM.", &per_gpu);
        let vram_free = gauge("flexinfer_gpu_vram_free_bytes", "Free VRAM.", &per_gpu);
        let vram_used = gauge("flexinfer_gpu_vram_used_bytes", "Used VRAM.", &per_gpu);
        let vram_utilization = gauge(
            "flexinfer_gpu_vram_utilization_percent",
            "Used VRAM over total VRAM, percent.",
            &per_gpu,
        );
        let utilization = gauge(
            "flexinfer_gpu_utilization_percent",
            "GPU busy percentage.",
            &per_gpu,
        );
        let gpus = IntGaugeVec::new(
            Opts::new("flexinfer_agent_gpus", "GPUs found by the last pass."),
            &["vendor"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(gpus.clone()))
            .expect("unique metric");
        let updates = IntCounterVec::new(
            Opts::new(
                "flexinfer_agent_node_updates_total",
                "Passes by what they did to the Node.",
            ),
            &["result"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(updates.clone()))
            .expect("unique metric");
        Metrics {
            registry,
            temperature,
            vram_total,
            vram_free,
            vram_used,
            vram_utilization,
            utilization,
            gpus,
            updates,
        }
    }

    /// Replaces the per-GPU series with those of `inventory`.
    pub fn record_inventory(&self, node: &str, inventory: &Inventory) {
        for gauge in [
            &self.temperature,
            &self.vram_total,
            &self.vram_free,
            &self.vram_used,
            &self.vram_utilization,
            &self.utilization,
        ] {
            gauge.reset();
        }
        for vendor in [GpuVendor::Nvidia, GpuVendor::Amd] {
            let count = inventory.gpus.iter().filter(|g| g.vendor == vendor).count();
            self.gpus
                .with_label_values(&[vendor.label()])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        for gpu in &inventory.gpus {
            let index = gpu.index.to_string();
            let labels = [index.as_str(), node, gpu.vendor.label()];
            let total = gpu.vram_total_bytes as f64;
            self.vram_total.with_label_values(&labels).set(total);
            if let Some(temperature) = gpu.temperature_celsius {
                self.temperature
                    .with_label_values(&[index.as_str(), node])
                    .set(temperature);
            }
            if let (Some(free), Some(used)) = (gpu.vram_free_bytes, gpu.vram_used_bytes()) {
                self.vram_free.with_label_values(&labels).set(free as f64);
                self.vram_used.with_label_values(&labels).set(used as f64);
                if total > 0.0 {
                    self.vram_utilization
                        .with_label_values(&labels)
                        .set(used as f64 / total * 100.0);
                }
            }
            if let Some(busy) = gpu.utilization_percent {
                self.utilization.with_label_values(&labels).set(busy);
            }
        }
    }

    /// Counts one pass's outcome (`unchanged`, `updated` or `error`).
    pub fn record_update(&self, result: &str) {
        self.updates.with_label_values(&[result]).inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        flexinfer_service::render_text(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{Gpu, MIB};

    #[test]
    fn per_gpu_series_follow_the_inventory() {
        let metrics = Metrics::new();
        let gpu = Gpu {
            vendor: GpuVendor::Amd,
            index: 1,
            model: "x".into(),
            arch: None,
            int4: true,
            vram_total_bytes: 1000 * MIB,
            vram_free_bytes: Some(250 * MIB),
            utilization_percent: Some(42.0),
            temperature_celsius: Some(55.5),
        };
        metrics.record_inventory(
            "n1",
            &Inventory {
                gpus: vec![gpu],
                ..Default::default()
            },
        );
        let text = metrics.render();
        assert!(text.contains(r#"flexinfer_gpu_temperature_celsius{gpu="1",node="n1"} 55.5"#));
        assert!(text.contains(
            r#"flexinfer_gpu_vram_utilization_percent{gpu="1",node="n1",vendor="AMD"} 75"#
        ));
        assert!(text
            .contains(r#"flexinfer_gpu_utilization_percent{gpu="1",node="n1",vendor="AMD"} 42"#));
        assert!(text.contains(r#"flexinfer_agent_gpus{vendor="AMD"} 1"#));

        metrics.record_inventory("n1", &Inventory::default());
        let text = metrics.render();
        assert!(!text.contains("flexinfer_gpu_temperature_celsius{"));
        assert!(text.contains(r#"flexinfer_agent_gpus{vendor="AMD"} 0"#));
    }
}
