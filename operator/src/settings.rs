//! The controllers' options on the command line, shared by
//! `flexinfer-operator` and `flexinfer-gateway --embedded-operator`, and
//! the one mapping from them to [`ControllerSettings`].
//!
//! Both binaries flatten [`ControllerArgs`] into their command lines, so the
//! controllers get the same flags and environment variables, and the same
//! settings, wherever they run.

use std::collections::BTreeMap;

use clap::Args;
use k8s_openapi::api::core::v1::Toleration;

use crate::controllers::{federation, ControllerSettings, LeaderElection};
use crate::desired::{self, BuildSettings};

/// Options of the controllers that are not process plumbing (namespace,
/// Lease, listeners and logging belong to each binary).
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct ControllerArgs {
    /// schedulerName of model pods (the FlexInfer scheduler extender's
    /// scheduler); default scheduler when unset.
    #[arg(long, env = "FLEXINFER_SCHEDULER_NAME")]
    pub scheduler_name: Option<String>,
    /// Image of the flash-loader init container.
    #[arg(long, env = "DEFAULT_FLASH_LOADER_IMAGE", default_value = desired::DEFAULT_FLASH_LOADER_IMAGE)]
    pub flash_loader_image: String,
    /// Image of quantization Jobs.
    #[arg(long, env = "DEFAULT_QUANTIZER_IMAGE", default_value = desired::DEFAULT_QUANTIZER_IMAGE)]
    pub quantizer_image: String,
    /// Size limit of the /dev/shm volume of model pods.
    #[arg(long, env = "DEFAULT_SHM_SIZE_LIMIT", default_value = desired::DEFAULT_SHM_SIZE_LIMIT)]
    pub shm_size_limit: String,
    /// StorageClass of cache PVCs whose Model sets no
    /// `spec.cache.storageClass`; unset: the cluster's default StorageClass.
    #[arg(long, env = "FLEXINFER_CACHE_STORAGE_CLASS")]
    pub cache_storage_class: Option<String>,
    /// runtimeClassName of NVIDIA GPU pods whose Model sets no
    /// `spec.runtimeClassName` (e.g. `nvidia` where the GPU Operator or the
    /// container runtime defines that RuntimeClass); unset: none, the
    /// node's default runtime.
    #[arg(long, env = "FLEXINFER_NVIDIA_RUNTIME_CLASS")]
    pub nvidia_runtime_class: Option<String>,
    /// Tolerations of GPU model pods and their cache Jobs, as a JSON list of
    /// Kubernetes tolerations; default: `dedicated=gpu`, `nvidia.com/gpu`
    /// and `amd.com/gpu`, effect NoSchedule.
    #[arg(long, env = "FLEXINFER_GPU_TOLERATIONS", value_parser = parse_tolerations)]
    pub gpu_tolerations: Option<GpuTolerations>,
    /// Start even when the FlexInfer CRDs are not installed.
    #[arg(long, default_value_t = false)]
    pub skip_crd_check: bool,
    /// Do not scrape vLLM pods' /metrics for KV-cache pressure.
    #[arg(long, default_value_t = false)]
    pub no_kv_cache_scrape: bool,
    /// Run the federation controllers (Cluster, FederatedModel): probe the
    /// member clusters named by Cluster objects through their kubeconfig
    /// Secrets and place FederatedModels on them. Off by default.
    #[arg(long, env = "FLEXINFER_FEDERATION", default_value_t = false)]
    pub federation: bool,
    /// Consecutive failed probes after which a Ready Cluster turns NotReady.
    #[arg(long, env = "FLEXINFER_CLUSTER_FAILURE_THRESHOLD", default_value_t = federation::DEFAULT_FAILURE_THRESHOLD, value_parser = clap::value_parser!(u32).range(1..))]
    pub cluster_failure_threshold: u32,
}

impl Default for ControllerArgs {
    /// The flags' defaults (no flag and no variable set).
    fn default() -> Self {
        Self {
            scheduler_name: None,
            flash_loader_image: desired::DEFAULT_FLASH_LOADER_IMAGE.to_owned(),
            quantizer_image: desired::DEFAULT_QUANTIZER_IMAGE.to_owned(),
            shm_size_limit: desired::DEFAULT_SHM_SIZE_LIMIT.to_owned(),
            cache_storage_class: None,
            nvidia_runtime_class: None,
            gpu_tolerations: None,
            skip_crd_check: false,
            no_kv_cache_scrape: false,
            federation: false,
            cluster_failure_threshold: federation::DEFAULT_FAILURE_THRESHOLD,
        }
    }
}

impl ControllerArgs {
    /// The controller settings these options describe, watching
    /// `namespace` (all when `None`), with `leader_election` and the backend
    /// catalog's `image_overrides` (see [`image_overrides_from_env`]).
    /// The metrics registry and event reporter keep their defaults.
    pub fn controller_settings(
        &self,
        namespace: Option<String>,
        leader_election: Option<LeaderElection>,
        image_overrides: BTreeMap<String, String>,
    ) -> ControllerSettings {
        ControllerSettings {
            build: BuildSettings {
                scheduler_name: self.scheduler_name.clone(),
                flash_loader_image: self.flash_loader_image.clone(),
                quantizer_image: self.quantizer_image.clone(),
                shm_size_limit: self.shm_size_limit.clone(),
                image_overrides,
                cache_storage_class: self.cache_storage_class.clone().filter(|c| !c.is_empty()),
                nvidia_runtime_class: self.nvidia_runtime_class.clone().filter(|c| !c.is_empty()),
                gpu_tolerations: self
                    .gpu_tolerations
                    .clone()
                    .map_or_else(desired::default_gpu_tolerations, |t| t.0),
            },
            namespace,
            leader_election,
            check_crds: !self.skip_crd_check,
            kv_cache_scrape: !self.no_kv_cache_scrape,
            federation: self.federation.then(|| federation::FederationSettings {
                failure_threshold: self.cluster_failure_threshold,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The flags (`--name`) whose values differ from their defaults.
    pub fn changed_flags(&self) -> Vec<&'static str> {
        let defaults = Self::default();
        [
            (
                self.scheduler_name != defaults.scheduler_name,
                "--scheduler-name",
            ),
            (
                self.flash_loader_image != defaults.flash_loader_image,
                "--flash-loader-image",
            ),
            (
                self.quantizer_image != defaults.quantizer_image,
                "--quantizer-image",
            ),
            (
                self.shm_size_limit != defaults.shm_size_limit,
                "--shm-size-limit",
            ),
            (self.cache_storage_class.is_some(), "--cache-storage-class"),
            (
                self.nvidia_runtime_class.is_some(),
                "--nvidia-runtime-class",
            ),
            (self.gpu_tolerations.is_some(), "--gpu-tolerations"),
            (self.skip_crd_check, "--skip-crd-check"),
            (self.no_kv_cache_scrape, "--no-kv-cache-scrape"),
            (self.federation, "--federation"),
            (
                self.cluster_failure_threshold != defaults.cluster_failure_threshold,
                "--cluster-failure-threshold",
            ),
        ]
        .into_iter()
        .filter_map(|(changed, flag)| changed.then_some(flag))
        .collect()
    }
}

/// Tolerations given on the command line (`--gpu-tolerations`).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTolerations(pub Vec<Toleration>);

impl Eq for GpuTolerations {}

/// Parses `--gpu-tolerations`: a JSON list of tolerations (`[]` for none).
fn parse_tolerations(value: &str) -> Result<GpuTolerations, String> {
    serde_json::from_str(value)
        .map(GpuTolerations)
        .map_err(|e| format!("expected a JSON list of tolerations ({e}), e.g. [{{\"key\":\"dedicated\",\"operator\":\"Equal\",\"value\":\"gpu\",\"effect\":\"NoSchedule\"}}]"))
}

/// Image overrides of the backend catalog set in the environment: each
/// image reference's variable (`DEFAULT_VLLM_IMAGE`, ...) that is set,
/// with its value.
pub fn image_overrides_from_env() -> BTreeMap<String, String> {
    image_overrides_from(|key| std::env::var(key).ok())
}

/// Image overrides of the backend catalog as `lookup` gives them: each
/// image reference's variable for which it returns a value.
pub fn image_overrides_from(lookup: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
    flexinfer_crds::backend::all()
        .iter()
        .flat_map(|b| b.images.iter().map(|r| r.env))
        .filter_map(|key| lookup(key).map(|v| (key.to_owned(), v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        controllers: ControllerArgs,
    }

    #[test]
    fn default_is_the_flags_defaults() {
        Flags::command().debug_assert();
        let parsed = Flags::try_parse_from(["x"]).unwrap().controllers;
        assert_eq!(parsed, ControllerArgs::default());
        assert!(parsed.changed_flags().is_empty());
    }

    #[test]
    fn changed_flags_are_named() {
        let parsed = Flags::try_parse_from([
            "x",
            "--scheduler-name=s",
            "--quantizer-image=q:1",
            "--federation",
        ])
        .unwrap()
        .controllers;
        assert_eq!(
            parsed.changed_flags(),
            ["--scheduler-name", "--quantizer-image", "--federation"]
        );
    }

    #[test]
    fn image_overrides_are_the_catalog_variables_only() {
        let env = BTreeMap::from([
            ("DEFAULT_VLLM_IMAGE", "vllm:x"),
            ("DEFAULT_FLASH_LOADER_IMAGE", "fl:1"),
            ("EXTRA", "1"),
        ]);
        let overrides = image_overrides_from(|key| env.get(key).map(|v| v.to_string()));
        assert_eq!(
            overrides,
            BTreeMap::from([("DEFAULT_VLLM_IMAGE".to_owned(), "vllm:x".to_owned())])
        );
    }
}
