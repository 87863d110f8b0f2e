//! `flexinfer-operator`: Kubernetes controllers that reconcile FlexInfer CRDs into workloads

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use clap::Parser;
use flexinfer_operator::build::BuildSettings;
use flexinfer_operator::controllers::{self, ControllerSettings, LeaderElection};
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus::{Encoder, TextEncoder};

/// Kubernetes controllers that reconcile FlexInfer CRDs into workloads
#[derive(Parser, Debug)]
#[command(name = "flexinfer-operator", version, about, long_about = LONG_ABOUT)]
struct Cli {
    /// Kubeconfig file; without it the in-cluster service account (or the
    /// default kubeconfig) is used.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context (with --kubeconfig).
    #[arg(long)]
    context: Option<String>,
    /// Namespace to watch; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Run only while holding the coordination.k8s.io Lease (for more than
    /// one replica).
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "flexinfer-system")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "flexinfer-operator")]
    leader_election_id: String,
    /// Identity of this replica in the Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Address serving /healthz and /readyz.
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    health_probe_bind_address: SocketAddr,
    /// Address serving /metrics (Prometheus).
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// schedulerName of model pods (the FlexInfer scheduler extender's
    /// scheduler); default scheduler when unset.
    #[arg(long, env = "FLEXINFER_SCHEDULER_NAME")]
    scheduler_name: Option<String>,
    /// Image of the flash-loader init container.
    #[arg(long, env = "DEFAULT_FLASH_LOADER_IMAGE", default_value = flexinfer_operator::build::DEFAULT_FLASH_LOADER_IMAGE)]
    flash_loader_image: String,
    /// Image of quantization Jobs.
    #[arg(long, env = "DEFAULT_QUANTIZER_IMAGE", default_value = flexinfer_operator::build::DEFAULT_QUANTIZER_IMAGE)]
    quantizer_image: String,
    /// Size limit of the /dev/shm volume of model pods.
    #[arg(long, env = "DEFAULT_SHM_SIZE_LIMIT", default_value = flexinfer_operator::build::DEFAULT_SHM_SIZE_LIMIT)]
    shm_size_limit: String,
    /// Start even when the FlexInfer CRDs are not installed.
    #[arg(long, default_value_t = false)]
    skip_crd_check: bool,
    /// Do not scrape vLLM pods' /metrics for KV-cache pressure.
    #[arg(long, default_value_t = false)]
    no_kv_cache_scrape: bool,
    /// Run the federation controllers (Cluster, FederatedModel): probe the
    /// member clusters named by Cluster objects through their kubeconfig
    /// Secrets and place FederatedModels on them. Off by default.
    #[arg(long, env = "FLEXINFER_FEDERATION", default_value_t = false)]
    federation: bool,
    /// Consecutive failed probes after which a Ready Cluster turns NotReady.
    #[arg(long, env = "FLEXINFER_CLUSTER_FAILURE_THRESHOLD", default_value_t = controllers::federation::DEFAULT_FAILURE_THRESHOLD, value_parser = clap::value_parser!(u32).range(1..))]
    cluster_failure_threshold: u32,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    log_format: String,
}

const LONG_ABOUT: &str = "Reconciles FlexInfer custom resources into workloads: Model (v1alpha2) into a Deployment, a Service and cache PVC/Jobs; GPUGroup (v1alpha1) into one active ModelDeployment chosen from the gateway's demand annotations; ModelCache (v1alpha1) into a PVC and a download Job; ModelDeployment (v1alpha1, legacy) through the same path as Model; LoRAAdapter (v1alpha2) into adapters loaded in running vLLM pods. With --federation: Cluster (v1alpha2) probed for health and capacity through its kubeconfig Secret, and FederatedModel (v1alpha2) into Models in the member clusters, replicas split by weight and moved off clusters that turn NotReady.

Owned objects are written with server-side apply and only when they change. Models scale to zero after their idle timeout (the gateway writes status.lastActiveTime) and take turns on shared GPUs with anti-thrashing.

Serves /healthz and /readyz (ready while the controllers run, i.e. after the leader Lease is held) and /metrics. Exits on SIGTERM after reconciles in flight finish. Fails at start, naming them, when the FlexInfer CRDs are missing. Image overrides of the backend catalog are read from the environment (DEFAULT_VLLM_IMAGE, DEFAULT_OLLAMA_IMAGE_GFX1100, ...).";

#[derive(Clone)]
struct Probe {
    ready: Arc<std::sync::atomic::AtomicBool>,
    registry: prometheus::Registry,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(p): State<Probe>) -> (StatusCode, &'static str) {
    if p.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(p): State<Probe>) -> (StatusCode, String) {
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&p.registry.gather(), &mut buf) {
        Ok(()) => (StatusCode::OK, String::from_utf8_lossy(&buf).into_owned()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn serve(addr: SocketAddr, router: Router) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    axum::serve(listener, router).await?;
    Ok(())
}

async fn client(cli: &Cli) -> anyhow::Result<kube::Client> {
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display()))?;
            let opts = KubeConfigOptions {
                context: cli.context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kc, &opts).await?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| anyhow::anyhow!("no in-cluster config and no usable kubeconfig: {e}"))?,
    };
    Ok(kube::Client::try_from(config)?)
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    tracing::info!("shutdown requested; finishing reconciles in flight");
}

fn image_overrides() -> std::collections::BTreeMap<String, String> {
    flexinfer_crds::backend::all()
        .iter()
        .flat_map(|b| b.images.iter().map(|r| r.env))
        .filter_map(|key| std::env::var(key).ok().map(|v| (key.to_owned(), v)))
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if cli.log_format == "json" {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let client = client(&cli).await?;
    let identity = cli
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("flexinfer-operator-{}", std::process::id()));
    let settings = ControllerSettings {
        build: BuildSettings {
            scheduler_name: cli.scheduler_name.clone(),
            flash_loader_image: cli.flash_loader_image.clone(),
            quantizer_image: cli.quantizer_image.clone(),
            shm_size_limit: cli.shm_size_limit.clone(),
            image_overrides: image_overrides(),
        },
        namespace: cli.namespace.clone(),
        leader_election: cli.leader_elect.then(|| {
            let mut le = LeaderElection::new(&cli.leader_election_namespace, &identity);
            le.lease_name = cli.leader_election_id.clone();
            le
        }),
        check_crds: !cli.skip_crd_check,
        kv_cache_scrape: !cli.no_kv_cache_scrape,
        federation: cli
            .federation
            .then(|| controllers::federation::FederationSettings {
                failure_threshold: cli.cluster_failure_threshold,
                ..Default::default()
            }),
        ..Default::default()
    };
    let probe = Probe {
        ready: settings.ready.clone(),
        registry: settings.registry.clone(),
    };
    let health = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probe.clone());
    let metrics_router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(probe);
    let servers = async {
        if cli.health_probe_bind_address == cli.metrics_bind_address {
            serve(cli.health_probe_bind_address, health.merge(metrics_router)).await
        } else {
            tokio::try_join!(
                serve(cli.health_probe_bind_address, health),
                serve(cli.metrics_bind_address, metrics_router)
            )
            .map(|_| ())
        }
    };
    tracing::info!(namespace = ?cli.namespace, leader_elect = cli.leader_elect, "starting controllers");
    tokio::select! {
        res = controllers::run(client, settings, shutdown_signal()) => res,
        res = servers => res,
    }
}
