//! Assembles the Pingora server: proxy service, admin service, model-file
//! reloader (or, with `--kubernetes`, the cluster watches; with `--global`,
//! the member-cluster monitor) and shutdown handling.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use http::Response;
use pingora_core::apps::http_app::{HttpServer, ServeHttp};
use pingora_core::protocols::http::ServerSession;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, ShutdownWatch};
use pingora_core::services::background::{background_service, BackgroundService};
use pingora_core::services::listening::Service;
use tokio::sync::Notify;

use crate::activation::{ActivationQueues, QueueSettings};
use crate::auth::Auth;
use crate::cli::Cli;
use crate::config::ModelTable;
use crate::kube::KubeMode;
use crate::local::EmbeddedOperator;
use crate::metrics::Metrics;
use crate::proxy::{Gateway, ProxySettings};
use crate::ratelimit::{LimitSettings, RouteLimiter};
use crate::registry::FileRegistry;

/// A configured gateway, ready to run.
pub struct GatewayServer {
    server: Server,
    operator: Option<EmbeddedOperator>,
    kube: Option<KubeMode>,
    draining: Arc<AtomicBool>,
    drain_delay: Duration,
    /// The model registry the proxy reads.
    pub registry: Arc<FileRegistry>,
    /// The metrics the proxy records.
    pub metrics: Metrics,
}

/// Builds everything from the command line; fails on invalid settings or model file.
pub fn build(cli: &Cli) -> anyhow::Result<GatewayServer> {
    cli.validate().map_err(|e| anyhow::anyhow!(e))?;
    let metrics = Metrics::new();
    let limits = LimitSettings::new(
        cli.rate_limit_enabled,
        (cli.rate_limit_global, cli.rate_limit_global_burst),
        (cli.rate_limit_per_model, cli.rate_limit_burst),
    );
    let queue_settings = QueueSettings {
        max_queue: cli.max_queue_size,
        queue_timeout: cli.queue_timeout,
        cold_start_timeout: cli.cold_start_timeout,
    };
    let global = match (&cli.global, &cli.global_object) {
        (Some(path), _) => Some(crate::global::GlobalMode::load(
            path,
            global_probe_settings(cli),
            limits,
            &metrics,
        )?),
        (None, Some(reference)) => Some(crate::global::GlobalMode::from_object(
            crate::global::GlobalObject::parse(reference, cli.kubeconfig.clone())
                .map_err(|e| anyhow::anyhow!(e))?,
            global_probe_settings(cli),
            limits,
            &metrics,
        )),
        (None, None) => None,
    };
    let (registry, operator, kube) = match (&cli.config, cli.kubernetes, &global) {
        (_, _, Some(global)) => (global.registry().routes(), None, None),
        (Some(path), false, None) => {
            let table = ModelTable::load(path)?;
            let registry = Arc::new(FileRegistry::with_table(path, &table, limits));
            (registry, EmbeddedOperator::start(&table)?, None)
        }
        _ => {
            let registry = Arc::new(FileRegistry::from_table(&ModelTable::default(), limits));
            let settings = crate::kube::KubeSettings {
                kubeconfig: cli.kubeconfig.clone(),
                scope: crate::kube::Scope::from_flags(
                    &cli.pod_namespace,
                    &cli.namespaces,
                    cli.all_namespaces,
                ),
                resync: cli.kube_resync,
                touch_interval: cli.touch_interval,
                activation_wait: queue_settings
                    .queue_timeout
                    .max(queue_settings.cold_start_timeout),
                embedded_operator: cli
                    .embedded_operator
                    .then(|| embedded_controllers(cli, &metrics)),
                ..crate::kube::KubeSettings::default()
            };
            let kube = crate::kube::KubeMode::start(settings, registry.clone())?;
            (registry, None, Some(kube))
        }
    };
    let auth = if cli.auth_enabled {
        let mut tokens: Vec<String> = cli
            .auth_token
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if let Some(path) = &cli.auth_token_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            tokens.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        let auth = Auth::new(tokens);
        anyhow::ensure!(!auth.is_empty(), "auth is enabled but no API key was given");
        Some(auth)
    } else {
        None
    };
    let global_limiter = if limits.enabled {
        limits.global.and_then(RouteLimiter::new)
    } else {
        None
    };
    let draining = Arc::new(AtomicBool::new(false));
    let settings = ProxySettings {
        max_body_bytes: cli.max_body_bytes,
        connect_timeout: cli.upstream_connect_timeout,
        read_timeout: cli.upstream_read_timeout,
        // A global gateway tries every available cluster before it fails.
        max_attempts: if global.is_some() {
            usize::MAX
        } else {
            cli.attempts()
        },
        routing_enabled: cli.routing_enabled,
        key_limits: crate::routing::KeyLimits::DEFAULT,
        cluster_failover: global.is_some(),
        upstream_authorization: match (&global, &cli.global_member_token) {
            (Some(_), Some(token)) => Some(
                http::HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
                    anyhow::anyhow!("FLEXINFER_GLOBAL_MEMBER_TOKEN is not a valid header value")
                })?,
            ),
            _ => None,
        },
    };

    let threads = if cli.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cli.threads
    };
    let conf = ServerConf {
        threads,
        // Draining is handled by our own signal watch (drain delay first),
        // so Pingora closes listeners at once when told to stop.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(cli.graceful_shutdown_timeout.as_secs()),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let proxy_registry: Arc<dyn crate::registry::ModelRegistry> = match &global {
        Some(g) => g.registry(),
        None => registry.clone(),
    };
    let mut gateway = Gateway::new(
        proxy_registry,
        auth,
        global_limiter,
        metrics.clone(),
        settings,
        draining.clone(),
    );
    if let Some(global) = &global {
        gateway = gateway.with_endpoint_failures(global.registry());
    }
    let lifecycle = match (&operator, &kube) {
        (Some(op), _) => Some(op.lifecycle()),
        (None, Some(k)) => Some(k.lifecycle()),
        (None, None) => None,
    };
    if let Some(lifecycle) = lifecycle {
        let queues = ActivationQueues::new(lifecycle, queue_settings);
        gateway = gateway.with_activation(Arc::new(queues));
    }
    let mut proxy = pingora_proxy::http_proxy_service_with_name(
        &server.configuration,
        gateway,
        "flexinfer-gateway",
    );
    proxy.add_tcp(&cli.listen);
    server.add_service(proxy);

    if let Some(addr) = &cli.metrics_listen {
        let admin = AdminApp {
            metrics: metrics.clone(),
            draining: draining.clone(),
        };
        let mut svc = Service::new("flexinfer-admin".to_string(), HttpServer::new_app(admin));
        svc.add_tcp(addr);
        server.add_service(svc);
    }

    if let Some(global) = global {
        tracing::info!(
            clusters = global.clusters().len(),
            "global mode: routing to member clusters' gateways"
        );
        server.add_service(background_service(
            "global cluster monitor",
            global.into_monitor(),
        ));
    } else if kube.is_none() {
        let reloader = Reloader {
            registry: registry.clone(),
            metrics: metrics.clone(),
            interval: cli.reload_interval,
        };
        server.add_service(background_service("model-file reloader", reloader));
    }

    Ok(GatewayServer {
        server,
        operator,
        kube,
        draining,
        drain_delay: cli.shutdown_drain_delay,
        registry,
        metrics,
    })
}

impl GatewayServer {
    /// Runs until SIGTERM (graceful, after the drain delay) or SIGINT (fast).
    pub fn run(self) {
        let watch = SignalWatch {
            draining: self.draining.clone(),
            drain_delay: self.drain_delay,
            stop: None,
        };
        self.run_with(watch);
    }

    /// Runs until `stop` is notified (used by tests), or a signal arrives.
    pub fn run_until(self, stop: Arc<Notify>) {
        let watch = SignalWatch {
            draining: self.draining.clone(),
            drain_delay: self.drain_delay,
            stop: Some(stop),
        };
        self.run_with(watch);
    }

    fn run_with(self, watch: SignalWatch) {
        self.server.run(RunArgs {
            shutdown_signal: Box::new(watch),
        });
        if let Some(op) = self.operator {
            tracing::info!("stopping local model processes");
            op.shutdown();
        }
        if let Some(kube) = self.kube {
            kube.shutdown();
        }
    }
}

/// Turns signals into Pingora shutdown requests, flipping `/readyz` to 503
/// and waiting the drain delay before a graceful stop.
struct SignalWatch {
    draining: Arc<AtomicBool>,
    drain_delay: Duration,
    stop: Option<Arc<Notify>>,
}

#[async_trait]
impl ShutdownSignalWatch for SignalWatch {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            std::future::pending::<()>().await;
            return ShutdownSignal::FastShutdown;
        };
        let stop = self.stop.clone();
        let test_stop = async move {
            match stop {
                Some(n) => n.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int.recv() => ShutdownSignal::FastShutdown,
            _ = term.recv() => {
                self.draining.store(true, Ordering::SeqCst);
                tracing::info!(delay = ?self.drain_delay, "SIGTERM: draining before shutdown");
                tokio::time::sleep(self.drain_delay).await;
                ShutdownSignal::GracefulTerminate
            }
            _ = test_stop => ShutdownSignal::FastShutdown,
        }
    }
}

/// `/metrics`, `/healthz` and `/readyz` on the admin address.
struct AdminApp {
    metrics: Metrics,
    draining: Arc<AtomicBool>,
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        let (status, content_type, body) = match path.as_str() {
            "/metrics" => (200, "text/plain; version=0.0.4", self.metrics.render()),
            "/healthz" => (200, "text/plain", b"ok".to_vec()),
            "/readyz" if self.draining.load(Ordering::Relaxed) => {
                (503, "text/plain", b"draining".to_vec())
            }
            "/readyz" => (200, "text/plain", b"ok".to_vec()),
            _ => (404, "text/plain", b"not found".to_vec()),
        };
        Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(body)
            .unwrap_or_default()
    }
}

/// Reloads the model file when its modification time changes or on SIGHUP.
struct Reloader {
    registry: Arc<FileRegistry>,
    metrics: Metrics,
    interval: Duration,
}

impl Reloader {
    fn modified(&self) -> Option<SystemTime> {
        let path = self.registry.path()?;
        std::fs::metadata(path).and_then(|m| m.modified()).ok()
    }

    fn reload(&self, why: &str) {
        match self.registry.reload() {
            Ok(n) => {
                self.metrics.reloads.with_label_values(&["success"]).inc();
                tracing::info!(models = n, trigger = why, "model file reloaded");
            }
            Err(e) => {
                self.metrics.reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %e, trigger = why, "model file reload failed; keeping the previous models");
            }
        }
    }
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).ok();
        let mut last = self.modified();
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(100)));
        loop {
            let hup_recv = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = hup_recv => self.reload("SIGHUP"),
                _ = tick.tick() => {
                    let now = self.modified();
                    if now != last {
                        last = now;
                        self.reload("file change");
                    }
                }
            }
        }
    }
}

/// How the global mode probes member gateways.
fn global_probe_settings(cli: &Cli) -> crate::global::ProbeSettings {
    crate::global::ProbeSettings {
        interval: cli.global_probe_interval,
        timeout: cli.global_probe_timeout,
        authorization: cli
            .global_member_token
            .as_ref()
            .map(|t| format!("Bearer {}", t.trim())),
    }
}

/// Settings of the operator controllers run inside the gateway in
/// Kubernetes mode (`--embedded-operator`).
fn embedded_controllers(cli: &Cli, metrics: &Metrics) -> crate::kube::EmbeddedControllers {
    let namespace = match (cli.all_namespaces, cli.namespaces.as_slice()) {
        (true, _) => None,
        (false, []) => Some(cli.pod_namespace.clone()),
        (false, [one]) => Some(one.clone()),
        // The controllers watch one namespace or all of them.
        (false, _) => None,
    };
    let identity = cli
        .pod_name
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("flexinfer-gateway-{}", std::process::id()));
    crate::kube::EmbeddedControllers {
        namespace,
        leader_election: cli.leader_elect.then(|| {
            (
                cli.pod_namespace.clone(),
                cli.leader_election_lease.clone(),
                identity,
            )
        }),
        registry: metrics.registry().clone(),
    }
}
