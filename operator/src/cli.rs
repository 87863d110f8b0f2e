//! The `flexinfer-operator` command line, and the controller settings and
//! Kubernetes client it describes.
//!
//! Every flag with an environment variable can be set either way (the flag
//! wins). The controllers' own options are [`ControllerArgs`], which the
//! gateway's embedded operator shares. Image overrides of the backend
//! catalog are not flags: they are read from the environment by
//! [`image_overrides_from_env`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::controllers::{ControllerSettings, LeaderElection};
pub use crate::settings::image_overrides_from_env;
use crate::settings::ControllerArgs;

/// Kubernetes controllers that reconcile FlexInfer CRDs into workloads
#[derive(Parser, Debug)]
#[command(name = "flexinfer-operator", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Kubeconfig file; without it the in-cluster service account (or the
    /// default kubeconfig) is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (with --kubeconfig).
    #[arg(long)]
    pub context: Option<String>,
    /// Namespace to watch; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Run the controllers only while holding the coordination.k8s.io Lease,
    /// stopping them when it is lost and starting them again when it is
    /// regained. Needed wherever two replicas may run at once (several, or
    /// an old and a new pod in a rollout); the chart always sets it.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "flexinfer-system")]
    pub leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "flexinfer-operator")]
    pub leader_election_id: String,
    /// Identity of this replica in the Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Address serving /healthz and /readyz.
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    pub health_probe_bind_address: SocketAddr,
    /// Address serving /metrics (Prometheus).
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: SocketAddr,
    /// The controllers' options, shared with the gateway's embedded
    /// operator.
    #[command(flatten)]
    pub controllers: ControllerArgs,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
}

/// The long description of `flexinfer-operator --help`.
pub const LONG_ABOUT: &str = "Reconciles FlexInfer custom resources into workloads: Model (v1alpha2) into a Deployment, a Service and cache PVC/Jobs; GPUGroup (v1alpha1) into one active ModelDeployment chosen from the gateway's demand annotations; ModelCache (v1alpha1) into a PVC and a download Job; ModelDeployment (v1alpha1, legacy) through the same path as Model; LoRAAdapter (v1alpha2) into adapters loaded in running vLLM pods. With --federation: Cluster (v1alpha2) probed for health and capacity through its kubeconfig Secret, and FederatedModel (v1alpha2) into Models in the member clusters, replicas split by weight and moved off clusters that turn NotReady.

Owned objects are written with server-side apply and only when they change. Models scale to zero after their idle timeout (the gateway writes status.lastActiveTime) and take turns on shared GPUs with anti-thrashing.

Serves /healthz and /readyz (ready while the controllers run, i.e. after the leader Lease is held) and /metrics. Exits on SIGTERM after reconciles in flight finish. Fails at start, naming them, when the FlexInfer CRDs are missing. Image overrides of the backend catalog are read from the environment (DEFAULT_VLLM_IMAGE, DEFAULT_OLLAMA_IMAGE_GFX1100, ...).";

impl Cli {
    /// This replica's identity in the Lease: `--identity` (`POD_NAME`),
    /// else `HOSTNAME`, else `flexinfer-operator-<pid>`.
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("flexinfer-operator-{}", std::process::id()))
    }

    /// The controller settings these flags describe, for the replica
    /// `identity` and with the backend catalog's `image_overrides` (see
    /// [`image_overrides_from_env`]).
    pub fn controller_settings(
        &self,
        identity: &str,
        image_overrides: BTreeMap<String, String>,
    ) -> ControllerSettings {
        let leader_election = self.leader_elect.then(|| {
            LeaderElection::new(&self.leader_election_namespace, identity)
                .with_lease(&self.leader_election_id)
        });
        self.controllers.controller_settings(
            self.namespace.clone(),
            leader_election,
            image_overrides,
        )
    }

    /// A Kubernetes client: from `--kubeconfig` (and `--context`) when
    /// given, else the in-cluster service account or the default
    /// kubeconfig.
    pub async fn kube_client(&self) -> anyhow::Result<kube::Client> {
        let config = match &self.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path).map_err(|e| {
                    anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display())
                })?;
                let opts = KubeConfigOptions {
                    context: self.context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(kc, &opts).await?
            }
            None => kube::Config::infer().await.map_err(|e| {
                anyhow::anyhow!("no in-cluster config and no usable kubeconfig: {e}")
            })?,
        };
        Ok(kube::Client::try_from(config)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::BuildSettings;
    use clap::CommandFactory;

    #[test]
    fn command_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_give_the_default_settings() {
        let cli = Cli::try_parse_from(["flexinfer-operator"]).unwrap();
        let settings = cli.controller_settings("replica-0", BTreeMap::new());
        let defaults = ControllerSettings::default();
        assert_eq!(settings.build, BuildSettings::default());
        assert_eq!(settings.namespace, None);
        assert_eq!(settings.leader_election, None);
        assert_eq!(settings.check_crds, defaults.check_crds);
        assert_eq!(settings.kv_cache_scrape, defaults.kv_cache_scrape);
        assert!(settings.federation.is_none());
    }

    #[test]
    fn flags_map_onto_the_settings() {
        let cli = Cli::try_parse_from([
            "flexinfer-operator",
            "--namespace=team-a",
            "--leader-elect",
            "--leader-election-namespace=ops",
            "--leader-election-id=flexinfer-controllers",
            "--scheduler-name=flexinfer-scheduler",
            "--flash-loader-image=registry.example.com/flashload:1",
            "--quantizer-image=registry.example.com/quantizer:2",
            "--shm-size-limit=16Gi",
            "--skip-crd-check",
            "--no-kv-cache-scrape",
            "--federation",
            "--cluster-failure-threshold=2",
        ])
        .unwrap();
        let overrides = BTreeMap::from([("DEFAULT_VLLM_IMAGE".to_owned(), "vllm:x".to_owned())]);
        let settings = cli.controller_settings("replica-0", overrides.clone());
        assert_eq!(settings.namespace.as_deref(), Some("team-a"));
        let le = settings.leader_election.expect("leader election");
        assert_eq!(
            (
                le.namespace.as_str(),
                le.lease_name.as_str(),
                le.identity.as_str()
            ),
            ("ops", "flexinfer-controllers", "replica-0")
        );
        assert_eq!(
            settings.build.scheduler_name.as_deref(),
            Some("flexinfer-scheduler")
        );
        assert_eq!(
            (
                settings.build.flash_loader_image.as_str(),
                settings.build.quantizer_image.as_str(),
                settings.build.shm_size_limit.as_str()
            ),
            (
                "registry.example.com/flashload:1",
                "registry.example.com/quantizer:2",
                "16Gi"
            )
        );
        assert_eq!(settings.build.image_overrides, overrides);
        assert!(!settings.check_crds);
        assert!(!settings.kv_cache_scrape);
        assert_eq!(settings.federation.map(|f| f.failure_threshold), Some(2));
    }

    #[test]
    fn failure_threshold_is_at_least_one() {
        assert!(
            Cli::try_parse_from(["flexinfer-operator", "--cluster-failure-threshold=0"]).is_err()
        );
    }
}
