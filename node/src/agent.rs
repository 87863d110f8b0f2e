//! The agent's pass: discover, record metrics, label.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::config::AgentConfig;
use crate::inventory::Inventory;
use crate::kv_cache::KvCacheProbe;
use crate::labels::{self, LabelKeys, NodeMetadata};
use crate::metrics::Metrics;
use crate::nvidia::NvidiaProbe;
use crate::publish::{NodePublisher, Outcome};
use crate::{amd, cpu};

/// Hardware discovery across vendors.
pub struct Discovery {
    sysfs_root: PathBuf,
    proc_root: PathBuf,
    min_discrete_vram_mib: u64,
    nvidia: NvidiaProbe,
}

impl Discovery {
    /// Discovery reading `sysfs_root` and `proc_root` and loading NVML from
    /// `nvml_library`.
    pub fn new(
        sysfs_root: impl Into<PathBuf>,
        proc_root: impl Into<PathBuf>,
        nvml_library: impl Into<std::ffi::OsString>,
        min_discrete_vram_mib: u64,
    ) -> Self {
        Discovery {
            sysfs_root: sysfs_root.into(),
            proc_root: proc_root.into(),
            min_discrete_vram_mib,
            nvidia: NvidiaProbe::new(nvml_library),
        }
    }

    /// Discovery as configured.
    pub fn from_config(config: &AgentConfig) -> Self {
        Discovery::new(
            &config.sysfs_root,
            &config.proc_root,
            config.nvml_library.as_os_str(),
            config.min_discrete_vram_mb,
        )
    }

    /// One discovery pass (blocking: file reads and NVML calls).
    pub fn discover(&mut self) -> Inventory {
        let mut gpus = self.nvidia.discover();
        gpus.extend(amd::discover(&self.sysfs_root, self.min_discrete_vram_mib));
        Inventory {
            gpus,
            cpu: cpu::discover(&self.proc_root),
        }
    }
}

/// The agent of one node.
pub struct Agent {
    node_name: String,
    keys: LabelKeys,
    discovery: Option<Discovery>,
    publisher: NodePublisher,
    metrics: Metrics,
    kv_cache: Option<KvCacheProbe>,
}

impl Agent {
    /// An agent labelling `node_name` through `publisher`.
    pub fn new(
        node_name: impl Into<String>,
        keys: LabelKeys,
        discovery: Discovery,
        publisher: NodePublisher,
        metrics: Metrics,
    ) -> Self {
        Agent {
            node_name: node_name.into(),
            keys,
            discovery: Some(discovery),
            publisher,
            metrics,
            kv_cache: None,
        }
    }

    /// Also publishes the KV-cache usage `probe` reads.
    pub fn with_kv_cache(mut self, probe: KvCacheProbe) -> Self {
        self.kv_cache = Some(probe);
        self
    }

    /// One pass: discover (off the async threads), export metrics, read
    /// the KV-cache usage (when enabled), and update the Node if its labels
    /// or annotations differ.
    pub async fn pass(&mut self) -> anyhow::Result<Outcome> {
        let mut discovery = self
            .discovery
            .take()
            .ok_or_else(|| anyhow::anyhow!("a previous discovery pass panicked"))?;
        let (discovery, inventory) = tokio::task::spawn_blocking(move || {
            let inventory = discovery.discover();
            (discovery, inventory)
        })
        .await?;
        self.discovery = Some(discovery);
        self.metrics.record_inventory(&self.node_name, &inventory);
        let mut desired = labels::desired(&inventory, &self.keys);
        if let Some(probe) = &self.kv_cache {
            match probe.average_usage().await {
                Ok(Some(usage)) => labels::add_kv_cache_usage(&mut desired, &self.keys, usage),
                Ok(None) => {}
                // Without the figure the annotation is dropped rather than
                // left stale.
                Err(err) => tracing::warn!(error = %err, "listing model pods failed"),
            }
        }
        let outcome = self.publisher.publish(&desired).await;
        match &outcome {
            Ok(Outcome::Unchanged) => self.metrics.record_update("unchanged"),
            Ok(outcome @ Outcome::Updated { .. }) => {
                tracing::info!(node = %self.node_name, ?outcome, labels = ?desired.labels, "node updated");
                self.metrics.record_update("updated");
            }
            Err(_) => self.metrics.record_update("error"),
        }
        Ok(outcome?)
    }

    /// Runs a pass every `interval` until `shutdown` completes. Failed
    /// passes are logged and retried at the next tick.
    pub async fn run(
        mut self,
        interval: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = ticker.tick() => {}
            }
            if let Err(err) = self.pass().await {
                tracing::warn!(node = %self.node_name, error = %err, "labelling pass failed");
            }
        }
    }
}

/// What `--dry-run` prints: the labels and annotations of this machine.
pub fn dry_run(discovery: &mut Discovery, keys: &LabelKeys) -> (Inventory, NodeMetadata) {
    let inventory = discovery.discover();
    let desired = labels::desired(&inventory, keys);
    (inventory, desired)
}
