//! Assembles the Pingora server: command line → mode → gateway →
//! listening addresses claimed ([`crate::listeners`]) → services (proxy,
//! admin listener, the mode's background services) and shutdown handling
//! ([`crate::shutdown`]).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora_core::apps::http_app::ServeHttp;
use pingora_core::protocols::http::ServerSession;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{RunArgs, Server};
use pingora_core::services::background::background_service;
use pingora_core::services::listening::Service;
use pingora_core::services::ServiceWithDependents;
use tokio::sync::Notify;

use crate::activation::{ActivationQueues, QueueSettings};
use crate::auth::Auth;
use crate::cli::Cli;
use crate::connections::GuardedApp;
use crate::file_reloader::FileReloader;
use crate::kube::backoff::ActivationBackoff;
use crate::listeners::{Planned, Reserved};
use crate::metrics::Metrics;
use crate::modes;
use crate::proxy::{Gateway, ProxySettings, SideRoutes, WindowSettings};
use crate::ratelimit::{LimitSettings, RouteLimiter};
use crate::shutdown::{DrainPolicy, SignalWatch};
use crate::tenants::Tenants;

/// A configured gateway, ready to run.
pub struct GatewayServer {
    server: Server,
    shutdown: Option<Box<dyn FnOnce() + Send>>,
    step_down: Option<Arc<Notify>>,
    draining: Arc<AtomicBool>,
    drain: DrainPolicy,
    /// The listening addresses, held until Pingora binds them.
    listeners: Reserved,
    /// Where models come from, for the start-up log line.
    pub source: String,
    /// The metrics the proxy records.
    pub metrics: Metrics,
}

/// Builds everything from the command line; fails on invalid settings or model file.
pub fn build(cli: &Cli) -> anyhow::Result<GatewayServer> {
    cli.validate().map_err(|e| anyhow::anyhow!(e))?;
    let peers = crate::peers::from_cli(cli)?;
    let metrics = Metrics::new();
    let limits = LimitSettings::new(
        cli.rate_limit_enabled,
        (cli.rate_limit_global, cli.rate_limit_global_burst),
        (cli.rate_limit_per_model, cli.rate_limit_burst),
    );
    let mode = modes::start(cli, &metrics, limits)?;
    let draining = Arc::new(AtomicBool::new(false));
    let side_routes = SideRoutes::new(metrics.clone(), draining.clone());
    let tenants = tenants(cli)?;
    let key_reloader = key_file_reloader(cli, tenants.as_ref(), &metrics);
    // Tenants' budgets hold for the fleet when the replicas share state.
    let budgets = tenants.clone().map(|t| {
        if let Some(peers) = &peers {
            t.fleet().set_window(peers.flush_interval);
        }
        t as Arc<dyn crate::peers::SharedBudgets>
    });
    let mut gateway = gateway(cli, &mode, limits, side_routes.clone(), &metrics, tenants)?;
    // Every setting is valid: the addresses are claimed before anything
    // is served, and a taken one stops the start here.
    let gateway_ports = gateway_api_listeners(cli, mode.gateway_api.as_deref());
    if let Some(plane) = &mode.gateway_api {
        gateway = gateway.with_gateway_api(plane.clone());
    }
    let mut planned = planned_listeners(cli, peers.as_ref());
    planned.extend(gateway_ports.iter().map(|a| Planned::new(a, "Gateway API")));
    let listeners = match crate::listeners::reserve(&planned) {
        Ok(listeners) => listeners,
        Err(e) => {
            if let Some(stop) = mode.shutdown {
                stop();
            }
            return Err(e.into());
        }
    };
    let peer_services = match peers {
        Some(settings) => {
            let book = gateway.response_book();
            let (handles, services) =
                crate::peers::start(settings, mode.routes.clone(), book, budgets, &metrics);
            gateway = gateway.with_peers(handles);
            services
        }
        None => Vec::new(),
    };

    let mut server = Server::new_with_opt_and_conf(None, server_conf(cli));
    server.bootstrap();
    let proxy = pingora_proxy::http_proxy(&server.configuration, gateway);
    let guarded = GuardedApp::new(proxy, cli.connection_settings(), metrics.clone());
    let mut proxy = Service::new("flexinfer-gateway".to_string(), guarded);
    proxy.add_listener(client_listener(&cli.listen));
    for addr in &gateway_ports {
        proxy.add_listener(client_listener(addr));
    }
    server.add_service(proxy);
    if let Some(addr) = &cli.metrics_listen {
        let debug_config = serde_json::to_vec_pretty(&cli.debug_config()).unwrap_or_default();
        let admin = AdminApp {
            side_routes,
            debug_config,
        };
        let admin =
            crate::connections::guarded_http(admin, cli.connection_settings(), metrics.clone());
        let mut svc = Service::new("flexinfer-admin".to_string(), admin);
        svc.add_tcp(addr);
        server.add_service(svc);
    }
    server.add_services(mode.services);
    server.add_services(peer_services);
    server.add_services(key_reloader.into_iter().collect());

    Ok(GatewayServer {
        server,
        shutdown: mode.shutdown,
        step_down: mode.step_down,
        draining,
        drain: DrainPolicy {
            delay: cli.shutdown_drain_delay,
            graceful_timeout: cli.graceful_shutdown_timeout,
        },
        listeners,
        source: mode.source,
        metrics,
    })
}

/// Every address the gateway listens on, with what it serves.
fn planned_listeners(cli: &Cli, peers: Option<&crate::peers::PeerSettings>) -> Vec<Planned> {
    let mut planned = vec![Planned::new(&cli.listen, "proxy")];
    planned.extend(
        cli.metrics_listen
            .iter()
            .map(|a| Planned::new(a, "metrics")),
    );
    planned.extend(peers.map(|p| Planned::new(&p.listen, "routing peers")));
    planned
}

/// The Gateway API's data-plane addresses: its ports on the proxy's host.
fn gateway_api_listeners(cli: &Cli, plane: Option<&crate::gatewayapi::DataPlane>) -> Vec<String> {
    let Some(plane) = plane else {
        return Vec::new();
    };
    let host = cli
        .listen
        .rsplit_once(':')
        .map_or("0.0.0.0", |(host, _)| host);
    plane.ports.iter().map(|p| format!("{host}:{p}")).collect()
}

/// The request path over `mode`'s routes and lifecycle.
fn gateway(
    cli: &Cli,
    mode: &modes::Mode,
    limits: LimitSettings,
    side_routes: SideRoutes,
    metrics: &Metrics,
    tenants: Option<Arc<Tenants>>,
) -> anyhow::Result<Gateway> {
    let global_limiter = if limits.enabled {
        limits.global.and_then(RouteLimiter::new)
    } else {
        None
    };
    let mut settings = ProxySettings {
        max_body_bytes: cli.max_body_bytes,
        connect_timeout: cli.upstream_connect_timeout,
        read_timeout: cli.upstream_read_timeout,
        upstream_keepalive: cli.upstream_keepalive_timeout,
        max_attempts: cli.attempts(),
        outlier: cli.outlier_policy(),
        routing_enabled: cli.routing_enabled,
        key_limits: cli.key_limits(),
        route_debug_header: cli.route_debug_header,
        tenant_cache_salt: cli.tenant_cache_salt,
        tenant_default_max_tokens: cli.tenant_default_max_tokens.max(1),
        held_progress_interval: Some(cli.held_stream_progress_interval)
            .filter(|every| !every.is_zero()),
        usage_headers: cli.usage_headers,
        validate_requests: cli.validate_requests,
        max_concurrency_per_endpoint: (cli.max_concurrency_per_endpoint > 0)
            .then_some(cli.max_concurrency_per_endpoint),
        window: WindowSettings {
            clamp: cli.max_tokens_clamp_enabled,
            prompt_reserve: match cli.max_tokens_clamp_prompt_reserve_tokens {
                0 => 512,
                n => n,
            },
            admission: cli.admission_enabled,
            margin_percent: cli.admission_safety_margin_percent.clamp(0, 50) as u64,
            default_max_tokens: cli.admission_default_max_tokens,
        },
        label_group_mode: cli.label_group_mode().map_err(anyhow::Error::msg)?,
        ..ProxySettings::default()
    };
    mode.upstreams.apply(&mut settings);
    // Turns between tenants in the queues go by their usage across the fleet.
    let bands = tenants.as_ref().map(|t| {
        let usage = t.usage().clone();
        crate::flow::UsageBands(Arc::new(move |tenant: &str| usage.band(tenant)))
    });
    let mut gateway = Gateway::new(
        mode.routes.clone(),
        tenants,
        global_limiter,
        side_routes,
        metrics.clone(),
        settings,
    )
    .with_admin_keys(admin_keys(cli));
    if let Some(failures) = &mode.failures {
        gateway = gateway.with_endpoint_failures(failures.clone());
    }
    let queue_settings = QueueSettings {
        max_queue: cli.max_queue_size,
        queue_timeout: cli.queue_timeout,
        cold_start_timeout: cli.cold_start_timeout,
    };
    // Kubernetes mode retries failed scale-ups itself (`kube::actions`);
    // local models are retried by the queues.
    let backoff = (cli.backoff_enabled && !cli.kubernetes).then(|| ActivationBackoff {
        retries: cli.backoff_max_retries,
        initial: cli.backoff_initial_wait,
        max: cli.backoff_max_wait,
        retried: metrics.activation_retries.clone(),
        waited: metrics.activation_retry_wait.clone(),
    });
    let queues = ActivationQueues::new(mode.lifecycle.clone(), queue_settings)
        .with_backoff(backoff)
        .with_usage_bands(bands);
    Ok(gateway.with_activation(Arc::new(queues)))
}

/// The API keys and their tenants, when keys are required
/// (`--auth-enabled` or `--api-key-file`).
fn tenants(cli: &Cli) -> anyhow::Result<Option<Arc<Tenants>>> {
    if !cli.auth_enabled && cli.api_key_file.is_none() {
        return Ok(None);
    }
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
    Ok(Some(Arc::new(Tenants::load(
        cli.api_key_file.as_deref(),
        tokens,
    )?)))
}

/// Reloads the API-key file, when there is one.
fn key_file_reloader(
    cli: &Cli,
    tenants: Option<&Arc<Tenants>>,
    metrics: &Metrics,
) -> Option<Box<dyn ServiceWithDependents>> {
    let tenants = tenants?.clone();
    let path = tenants.path()?.to_path_buf();
    let reloader = FileReloader {
        what: "API-key file",
        path,
        interval: cli.reload_interval,
        reload: Box::new(move || tenants.reload()),
        reloads: metrics.key_file_reloads.clone(),
    };
    Some(Box::new(background_service(
        "API-key file reloader",
        reloader,
    )))
}

/// The admin keys, when any are given.
fn admin_keys(cli: &Cli) -> Option<Auth> {
    let keys = Auth::new(
        cli.admin_auth_token
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty()),
    );
    (!keys.is_empty()).then_some(keys)
}

/// Pingora's settings: worker threads, and shutdown timing (draining is
/// handled by our own signal watch, which tells Pingora to stop once
/// nothing is in flight: it then closes the listeners and stops at once).
fn server_conf(cli: &Cli) -> ServerConf {
    let threads = if cli.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cli.threads
    };
    ServerConf {
        threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    }
}

impl GatewayServer {
    /// Runs until SIGTERM (graceful, after the drain delay) or SIGINT
    /// (fast). A listener Pingora fails to bind ends the process.
    pub fn run(self) {
        crate::listeners::exit_when_a_listener_fails();
        self.run_with(None);
    }

    /// Runs until `stop` is notified (used by tests), or a signal arrives.
    pub fn run_until(self, stop: Arc<Notify>) {
        self.run_with(Some(stop));
    }

    fn run_with(self, stop: Option<Arc<Notify>>) {
        let watch =
            SignalWatch::new(self.draining, self.drain, stop).with_step_down(self.step_down);
        // Pingora binds the addresses itself from here on.
        drop(self.listeners);
        self.server.run(RunArgs {
            shutdown_signal: Box::new(watch),
        });
        if let Some(shutdown) = self.shutdown {
            shutdown();
        }
    }
}

/// `/metrics`, `/healthz` and `/readyz` on the admin address: the proxy's
/// own side routes; `/debug/config`: the settings in force, secrets
/// redacted; 404 for anything else.
struct AdminApp {
    side_routes: SideRoutes,
    debug_config: Vec<u8>,
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path();
        let (status, content_type, body) = match self.side_routes.answer(path) {
            Some(a) => (a.status, a.content_type, a.body.to_vec()),
            None if path == "/debug/config" => (200, "application/json", self.debug_config.clone()),
            None => (404, "text/plain", b"not found".to_vec()),
        };
        Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(body)
            .unwrap_or_default()
    }
}

/// A listener for clients without Pingora's 64 KiB read buffer per
/// connection: the request head and body readers have buffers of their own,
/// and the read buffer, zeroed when a connection is accepted, was most of
/// what an open stream held (without TLS there are no small record reads
/// for it to gather).
fn client_listener(addr: &str) -> pingora_core::listeners::ListenerConfig {
    use pingora_core::protocols::l4::stream::{L4BufferSettings, DEFAULT_L4_WRITE_BUFFER_SIZE};
    pingora_core::listeners::ListenerConfig::tcp(addr)
        .l4_buffer(L4BufferSettings::new(0, DEFAULT_L4_WRITE_BUFFER_SIZE))
}
