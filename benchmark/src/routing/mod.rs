//! `routing`: how well a gateway's routing strategy uses the pods' prefix
//! (KV) caches. Conversations that share long system prompts are replayed
//! against one gateway (`--url`), or, with `--local`, against fresh
//! simulated pods behind a gateway started per strategy, plus an oracle that
//! asks every pod what it has cached; the pods' counters give the hit rate
//! and the load per pod.
//!
//! Modules, one job each: [`workload`] (the conversations), [`driver`]
//! (playing them, and the oracle's choice), [`metrics`] (the pods'
//! Prometheus counters), [`local`] (starting and stopping processes),
//! [`report`] (table and JSON) and [`plot`] (the PNG chart).

pub mod driver;
pub mod fault;
pub mod local;
pub mod metrics;
pub mod peer;
pub mod plot;
pub mod replicas;
pub mod report;
pub mod workload;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::client::Client;
use crate::load::Stop;
use crate::target::Target;

use driver::{DriveResult, DriveSpec, Endpoints, Route};
use local::{Binaries, SimSettings, Stack};
use metrics::{Pod, PodDelta, PodMetrics};
use peer::PeerCommand;
use replicas::Router;
use report::{LocalSettings, RoutingReport, Settings, StrategyReport};
use workload::{ConversationSpec, Generator};

/// Connect timeout of every connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time limit of one metrics scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// A way of picking the pod for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The gateway's `default`: rotate over the pods.
    RoundRobin,
    /// The gateway's `least-loaded`: fewest requests in flight.
    LeastLoaded,
    /// The gateway's `prefix`: hash of the prompt's prefix.
    Prefix,
    /// The gateway's `cache-aware`.
    CacheAware,
    /// No gateway: the client asks every pod how much of the prompt it has
    /// cached and sends the request to the best one (the upper bound).
    Oracle,
    /// SGLang Model Gateway (`sglang-router`), policy `cache_aware`.
    Sglang,
    /// The router of `--peer-command`.
    Peer,
}

impl Strategy {
    /// Every strategy, in the default order.
    pub const ALL: [Strategy; 7] = [
        Strategy::RoundRobin,
        Strategy::LeastLoaded,
        Strategy::Prefix,
        Strategy::CacheAware,
        Strategy::Oracle,
        Strategy::Sglang,
        Strategy::Peer,
    ];

    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::RoundRobin => "round-robin",
            Strategy::LeastLoaded => "least-loaded",
            Strategy::Prefix => "prefix",
            Strategy::CacheAware => "cache-aware",
            Strategy::Oracle => "oracle",
            Strategy::Sglang => "sglang",
            Strategy::Peer => "peer",
        }
    }

    /// The `routing` value of the gateway's model file; `None` for the
    /// oracle and peer routers.
    pub fn gateway_routing(self) -> Option<&'static str> {
        match self {
            Strategy::RoundRobin => Some("default"),
            Strategy::LeastLoaded => Some("least-loaded"),
            Strategy::Prefix => Some("prefix"),
            Strategy::CacheAware => Some("cache-aware"),
            Strategy::Oracle | Strategy::Sglang | Strategy::Peer => None,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        Strategy::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .or(match text {
                "default" => Some(Strategy::RoundRobin),
                _ => None,
            })
            .ok_or_else(|| {
                let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown strategy {text:?}: use {}", names.join(", "))
            })
    }
}

/// What to run, from the command line.
#[derive(Debug, Clone)]
pub struct RoutingSpec {
    /// `--url`: the gateway measured (`None` with `--local`).
    pub url: Option<String>,
    /// Bearer token for the gateway.
    pub api_key: Option<String>,
    /// `model` sent (and served by local pods).
    pub model: String,
    /// Name of the `--url` run in the report.
    pub label: String,
    /// Pods whose /metrics are scraped in `--url` mode.
    pub pod_metrics: Vec<String>,
    /// The conversations.
    pub conversations: ConversationSpec,
    /// Conversations played at once.
    pub concurrency: usize,
    /// When each strategy stops.
    pub stop: Stop,
    /// `max_tokens` of every request.
    pub max_tokens: u32,
    /// Seed of prompts and draws (the same for every strategy).
    pub seed: u64,
    /// Per-request limit.
    pub timeout: Duration,
    /// Times a request whose connection failed before any answer is sent
    /// again, to the next replica.
    pub client_retries: u32,
    /// `--local`: pods, strategies and binaries.
    pub local: Option<LocalSpec>,
}

/// `--local` settings.
#[derive(Debug, Clone)]
pub struct LocalSpec {
    /// Pods per strategy.
    pub pods: usize,
    /// Strategies, in order.
    pub strategies: Vec<Strategy>,
    /// Gateway replicas per strategy.
    pub replicas: usize,
    /// Whether replicas share routing state.
    pub sharing: bool,
    /// How pods are started.
    pub sim: SimSettings,
    /// Binaries.
    pub binaries: Binaries,
    /// Python with `sglang-router` installed (strategy `sglang`).
    pub sglang_python: Option<std::path::PathBuf>,
    /// The router of strategy `peer`.
    pub peer_command: Option<PeerCommand>,
    /// A gateway replica killed (and restarted) mid-run.
    pub fault: Option<fault::FaultSpec>,
}

impl RoutingSpec {
    fn settings(&self) -> Settings {
        Settings {
            mode: if self.local.is_some() { "local" } else { "url" },
            url: self.url.clone(),
            model: self.model.clone(),
            workload: self.conversations.kind,
            tenants: self.conversations.tenants,
            system_tokens: self.conversations.system_tokens,
            user_tokens: self.conversations.user_tokens,
            turns: self.conversations.turns,
            concurrency: self.concurrency,
            requests: match self.stop {
                Stop::Requests(n) => Some(n),
                Stop::Duration(_) => None,
            },
            duration_s: match self.stop {
                Stop::Duration(d) => Some(d.as_secs_f64()),
                Stop::Requests(_) => None,
            },
            max_tokens: self.max_tokens,
            seed: self.seed,
            timeout_s: self.timeout.as_secs_f64(),
            client_retries: self.client_retries,
            pod_metrics: self.pod_metrics.clone(),
            local: self.local.as_ref().map(|l| LocalSettings {
                pods: l.pods,
                strategies: l.strategies.iter().map(|s| s.to_string()).collect(),
                replicas: l.replicas,
                sharing: l.sharing,
                sim: l.sim.clone(),
                sim_bin: l.binaries.sim.display().to_string(),
                gateway_bin: l.binaries.gateway.as_ref().map(|p| p.display().to_string()),
            }),
        }
    }

    fn drive_spec(&self, endpoints: Arc<Endpoints>) -> DriveSpec {
        DriveSpec {
            concurrency: self.concurrency,
            stop: self.stop,
            timeout: self.timeout,
            model: self.model.clone(),
            max_tokens: self.max_tokens,
            client_retries: self.client_retries,
            endpoints,
        }
    }
}

/// Runs every strategy of `spec` and reports them.
pub async fn run(spec: &RoutingSpec) -> Result<RoutingReport> {
    let strategies = match &spec.local {
        Some(local) => run_local(spec, local).await,
        None => vec![run_url(spec).await?],
    };
    Ok(RoutingReport::new(spec.settings(), strategies))
}

/// Scrapes every pod; a pod that cannot be scraped gives `None`.
async fn scrape_all(pods: &[Pod]) -> Vec<Option<PodMetrics>> {
    let mut out = Vec::with_capacity(pods.len());
    for pod in pods {
        match pod.scrape(SCRAPE_TIMEOUT).await {
            Ok(m) => out.push(Some(m)),
            Err(e) => {
                tracing::warn!(pod = %pod.url, error = %format!("{e:#}"), "cannot scrape metrics");
                out.push(None);
            }
        }
    }
    out
}

fn deltas(
    pods: &[Pod],
    before: &[Option<PodMetrics>],
    after: &[Option<PodMetrics>],
) -> Vec<PodDelta> {
    pods.iter()
        .enumerate()
        .map(|(i, pod)| PodDelta::between(&pod.url, before[i].as_ref(), after[i].as_ref()))
        .collect()
}

/// Replays the workload against `route`, scraping `pods` before and after;
/// `started` is told when the requests begin.
async fn measure(
    spec: &RoutingSpec,
    (name, routing): (&str, Option<&str>),
    (route, endpoints): (Route, Arc<Endpoints>),
    pods: &[Pod],
    gateways: &[Router],
    started: Option<tokio::sync::oneshot::Sender<std::time::Instant>>,
) -> (StrategyReport, DriveResult) {
    let before = scrape_all(pods).await;
    let routers_before = Router::read_all(gateways).await;
    let generator = Generator::new(spec.conversations, spec.seed);
    tracing::info!(strategy = name, "running");
    if let Some(started) = started {
        let _ = started.send(std::time::Instant::now());
    }
    let result = driver::drive(route, generator, spec.drive_spec(endpoints)).await;
    let after = scrape_all(pods).await;
    let routers_after = Router::read_all(gateways).await;
    let mut report = StrategyReport::from_run(
        name,
        routing,
        result.clone(),
        deltas(pods, &before, &after),
        None,
    );
    report.replicas = gateways.len();
    let spent = replicas::Spent::between(&routers_before, &routers_after);
    report.router_cpu_us_per_request = spent.cpu_us_per(report.requests);
    report.state_bytes_per_request = spent.peer_bytes_per(report.requests);
    (report, result)
}

async fn run_url(spec: &RoutingSpec) -> Result<StrategyReport> {
    let Some(url) = spec.url.as_deref() else {
        bail!("--url (BENCHMARK_URL) or --local must be given");
    };
    let target = Target::parse(url)?;
    let client = Client::new(target, spec.api_key.as_deref(), None, CONNECT_TIMEOUT)?;
    let pods = spec
        .pod_metrics
        .iter()
        .map(|u| Pod::new(u).with_context(|| format!("--pod-metrics {u}")))
        .collect::<Result<Vec<_>>>()?;
    let route = (Route::Gateway(vec![client]), Arc::new(Endpoints::new(1)));
    Ok(measure(spec, (&spec.label, None), route, &pods, &[], None)
        .await
        .0)
}

async fn run_local(spec: &RoutingSpec, local: &LocalSpec) -> Vec<StrategyReport> {
    let mut reports = Vec::with_capacity(local.strategies.len());
    for &strategy in &local.strategies {
        let routing = strategy.gateway_routing();
        let report = match run_one_local(spec, local, strategy).await {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!(%strategy, error = %format!("{e:#}"), "strategy did not run");
                StrategyReport::failed(strategy.as_str(), routing, format!("{e:#}"))
            }
        };
        reports.push(report);
    }
    reports
}

async fn run_one_local(
    spec: &RoutingSpec,
    local: &LocalSpec,
    strategy: Strategy,
) -> Result<StrategyReport> {
    let routing = strategy.gateway_routing();
    let replicas = routing.map_or(0, |_| local.replicas);
    let peer = peer_command(local, strategy)?;
    let mut stack = Stack::start(
        &local.binaries,
        &local.sim,
        local.pods,
        routing,
        (replicas, local.sharing),
    )
    .await?;
    if let Some(peer) = &peer {
        if let Err(e) = stack.start_peer(peer).await {
            stack.stop().await;
            return Err(e);
        }
    }
    let measured =
        measure_local(spec, local, strategy, (routing, peer.is_some()), &mut stack).await;
    stack.stop().await;
    measured
}

/// Measures one strategy on a started stack, killing and restarting a
/// replica meanwhile when asked.
async fn measure_local(
    spec: &RoutingSpec,
    local: &LocalSpec,
    strategy: Strategy,
    (routing, peer): (Option<&str>, bool),
    stack: &mut Stack,
) -> Result<StrategyReport> {
    let replicas = routing.map_or(0, |_| local.replicas);
    let pods = stack
        .pod_urls()
        .iter()
        .map(|u| Pod::new(u))
        .collect::<Result<Vec<_>>>()?;
    let routers = stack
        .gateways
        .iter()
        .map(|g| Router::new(&g.url, g.pid()))
        .collect::<Result<Vec<_>>>()?;
    if routers.len() > 1
        && local.sharing
        && !Router::wait_linked(&routers, routers.len() - 1, Duration::from_secs(15)).await
    {
        tracing::warn!("gateway replicas did not all reach each other within 15 s");
    }
    let route = match stack.gateways.is_empty() {
        false => Route::Gateway(
            stack
                .gateways
                .iter()
                .map(|g| Client::new(Target::parse(&g.url)?, None, None, CONNECT_TIMEOUT))
                .collect::<Result<Vec<_>>>()?,
        ),
        true => Route::Oracle(
            stack
                .pod_urls()
                .iter()
                .map(|u| Client::new(Target::parse(u)?, None, None, CONNECT_TIMEOUT))
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let routing = routing.or(peer.then_some(match strategy {
        Strategy::Sglang => "cache_aware",
        _ => "peer",
    }));
    let name = match (replicas, local.sharing) {
        (0 | 1, _) => strategy.as_str().to_owned(),
        (n, true) => format!("{strategy} x{n}"),
        (n, false) => format!("{strategy} x{n} unshared"),
    };
    let endpoints = Arc::new(Endpoints::new(stack.gateways.len()));
    let fault = local.fault.filter(|_| stack.gateways.len() > 1 && !peer);
    let Some(fault) = fault else {
        let route = (route, endpoints);
        let (report, _) = measure(spec, (&name, routing), route, &pods, &routers, None).await;
        return Ok(report);
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let controller = async {
        match rx.await {
            Ok(started) => Some(fault::run(stack, &endpoints, fault, started).await),
            Err(_) => None,
        }
    };
    let route = (route, endpoints.clone());
    let run = measure(spec, (&name, routing), route, &pods, &routers, Some(tx));
    let ((mut report, result), log) = tokio::join!(run, controller);
    if let Some(log) = log {
        let failovers = endpoints.failovers();
        report.fault = Some(fault::FaultReport::new(&log, &result, failovers));
    }
    Ok(report)
}

/// The peer router `strategy` starts, if it is one.
fn peer_command(local: &LocalSpec, strategy: Strategy) -> Result<Option<PeerCommand>> {
    match strategy {
        Strategy::Sglang => {
            let python = local.sglang_python.as_deref().with_context(|| {
                format!(
                    "strategy sglang needs --sglang-python ({}): eval \"$(scripts/sglang-router.sh)\"",
                    peer::SGLANG_PYTHON_ENV
                )
            })?;
            Ok(Some(PeerCommand::sglang(
                python,
                "cache_aware",
                local::free_port()?,
            )))
        }
        Strategy::Peer => local
            .peer_command
            .clone()
            .map(Some)
            .context("strategy peer needs --peer-command"),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_names() {
        for s in Strategy::ALL {
            assert_eq!(s.as_str().parse::<Strategy>(), Ok(s));
        }
        assert_eq!("default".parse::<Strategy>(), Ok(Strategy::RoundRobin));
        assert!("fastest"
            .parse::<Strategy>()
            .unwrap_err()
            .contains("cache-aware"));
        assert_eq!(Strategy::RoundRobin.gateway_routing(), Some("default"));
        assert_eq!(Strategy::CacheAware.gateway_routing(), Some("cache-aware"));
        assert_eq!(Strategy::Oracle.gateway_routing(), None);
    }
}
