//! The background loop of the global mode: probes every member gateway on
//! an interval, keeps each cluster's health with a little hysteresis, and
//! swaps in new routes when what the policy reads changed. A cluster the
//! request path failed to reach is probed at once, out of turn. Nothing
//! here runs on the request path.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use flexinfer_crds::v1alpha2::ClusterRoutingStrategy;
use pingora_core::connectors::http::Connector;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use super::config::{GlobalConfig, MemberCluster};
use super::policy::{listed_phases, model_table, ClusterView, Warmth};
use super::probe::{probe, ProbeError, Probed};
use super::registry::GlobalRegistry;
use super::watch::{GlobalObject, ProxyStatus};
use crate::metrics::Metrics;

/// Consecutive failed probes after which a healthy cluster counts as down;
/// one good probe brings it back. A single slow probe on a busy machine
/// does not take a working cluster out of rotation; a request that failed
/// to reach the cluster counts as one failure and has it probed at once.
pub const UNHEALTHY_AFTER: u32 = 2;

/// Weight of the newest probe in the smoothed round trip.
const LATENCY_SMOOTHING: f64 = 0.3;

/// How the member gateways are probed.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Time between two probe rounds.
    pub interval: Duration,
    /// Longest one probe may take.
    pub timeout: Duration,
    /// `Authorization` value sent to members, when they require an API key.
    pub authorization: Option<String>,
}

/// The member-cluster series of the gateway's [`Metrics`].
#[derive(Clone)]
pub struct ClusterMetrics(pub Metrics);

impl ClusterMetrics {
    fn probed(&self, cluster: &str, result: &Result<Probed, ProbeError>) {
        let m = &self.0;
        let outcome = match result {
            Ok(probed) => {
                m.global_probe_duration
                    .with_label_values(&[cluster])
                    .observe(probed.latency.as_secs_f64());
                "success"
            }
            Err(_) => "failure",
        };
        m.global_probes.with_label_values(&[cluster, outcome]).inc();
    }

    fn record(&self, cluster: &Tracked) {
        let m = &self.0;
        let name = cluster.member.name.as_str();
        let view = &cluster.view;
        m.global_cluster_up
            .with_label_values(&[name])
            .set(i64::from(view.healthy));
        for warmth in [Warmth::Ready, Warmth::Warming, Warmth::Cold] {
            let n = view
                .models
                .iter()
                .flatten()
                .filter(|(_, w)| *w == warmth)
                .count();
            m.global_cluster_models
                .with_label_values(&[name, warmth.as_str()])
                .set(n as i64);
        }
    }

    fn forget(&self, name: &str) {
        let m = &self.0;
        let _ = m.global_cluster_up.remove_label_values(&[name]);
        let _ = m.global_probe_duration.remove_label_values(&[name]);
        for warmth in [Warmth::Ready, Warmth::Warming, Warmth::Cold] {
            let _ = m
                .global_cluster_models
                .remove_label_values(&[name, warmth.as_str()]);
        }
        for result in ["success", "failure"] {
            let _ = m.global_probes.remove_label_values(&[name, result]);
        }
    }
}

/// One member cluster and what is known about it.
#[derive(Debug, Clone)]
struct Tracked {
    member: MemberCluster,
    view: ClusterView,
    failures: u32,
}

impl Tracked {
    fn new(member: MemberCluster) -> Self {
        Tracked {
            member,
            view: ClusterView::default(),
            failures: 0,
        }
    }

    /// Folds one probe result in, logging health changes.
    fn apply(&mut self, result: Result<Probed, ProbeError>) {
        let name = &self.member.name;
        match result {
            Ok(probed) => {
                if !self.view.healthy {
                    tracing::info!(cluster = %name, addr = %probed.addr, models = probed.models.len(), "member cluster is healthy");
                }
                self.failures = 0;
                self.view.healthy = true;
                self.view.addr = Some(probed.addr);
                self.view.latency = Some(match self.view.latency {
                    Some(old) => {
                        old.mul_f64(1.0 - LATENCY_SMOOTHING)
                            + probed.latency.mul_f64(LATENCY_SMOOTHING)
                    }
                    None => probed.latency,
                });
                self.view.models = Some(probed.models);
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                if self.view.healthy && self.failures >= UNHEALTHY_AFTER {
                    self.view.healthy = false;
                    tracing::warn!(cluster = %name, error = %e, failures = self.failures, "member cluster is unhealthy");
                } else {
                    tracing::debug!(cluster = %name, error = %e, "member probe failed");
                }
            }
        }
    }
}

/// What the policy reads of the views: the latency only under the Latency
/// strategy, in whole milliseconds, so that jitter alone rebuilds nothing.
fn policy_inputs(strategy: ClusterRoutingStrategy, clusters: &[Tracked]) -> Vec<ClusterView> {
    clusters
        .iter()
        .map(|c| {
            let latency = match strategy {
                ClusterRoutingStrategy::Latency => c
                    .view
                    .latency
                    .map(|l| Duration::from_millis(l.as_millis() as u64)),
                _ => None,
            };
            ClusterView {
                latency,
                ..c.view.clone()
            }
        })
        .collect()
}

/// The probe loop, run as a Pingora background service.
pub struct ClusterMonitor {
    /// The GlobalProxy file, re-read when it changes.
    pub path: Option<PathBuf>,
    /// Or the GlobalProxy object in Kubernetes, watched.
    pub object: Option<GlobalObject>,
    /// The configuration in force at start.
    pub config: GlobalConfig,
    /// Where new routes go.
    pub registry: Arc<GlobalRegistry>,
    /// Probe timing and credentials.
    pub settings: ProbeSettings,
    /// Series to keep current.
    pub metrics: ClusterMetrics,
}

impl ClusterMonitor {
    fn modified(&self) -> Option<SystemTime> {
        let path = self.path.as_ref()?;
        std::fs::metadata(path).and_then(|m| m.modified()).ok()
    }

    /// Re-reads the file.
    fn reload(&self, config: &mut GlobalConfig, clusters: &mut Vec<Tracked>) {
        let Some(path) = &self.path else { return };
        match GlobalConfig::load(path) {
            Ok(fresh) => {
                self.replace(fresh, config, clusters);
            }
            Err(e) => {
                tracing::error!(error = %e, "GlobalProxy reload failed; keeping the previous clusters");
            }
        }
    }

    /// Puts a new configuration in force; clusters whose name and address
    /// stay keep what is known about them. Whether anything changed.
    fn replace(
        &self,
        fresh: GlobalConfig,
        config: &mut GlobalConfig,
        clusters: &mut Vec<Tracked>,
    ) -> bool {
        if fresh == *config {
            return false;
        }
        let mut old = std::mem::take(clusters);
        for member in &fresh.clusters {
            let kept = old
                .iter()
                .position(|t| {
                    t.member.name == member.name && t.member.authority == member.authority
                })
                .map(|pos| old.remove(pos));
            let mut tracked = kept.unwrap_or_else(|| Tracked::new(member.clone()));
            tracked.member = member.clone();
            clusters.push(tracked);
        }
        for gone in old {
            self.metrics.forget(&gone.member.name);
        }
        tracing::info!(clusters = clusters.len(), strategy = ?fresh.strategy, "GlobalProxy reloaded");
        *config = fresh;
        true
    }
}

#[async_trait]
impl BackgroundService for ClusterMonitor {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        let mut config = self.config.clone();
        let mut clusters: Vec<Tracked> =
            config.clusters.iter().cloned().map(Tracked::new).collect();
        let mut last_modified = self.modified();
        let mut last_inputs: Option<(GlobalConfig, Vec<ClusterView>)> = None;
        let (mut object_updates, status_tx) = match self.object.clone() {
            Some(object) => {
                let (tx, rx) = tokio::sync::watch::channel(None);
                let (status_tx, status_rx) = tokio::sync::watch::channel(None);
                tokio::spawn(super::watch::run(object, tx, status_rx));
                (Some(rx), Some(status_tx))
            }
            None => (None, None),
        };
        let interval = self.settings.interval.max(Duration::from_millis(50));
        let authorization = self.settings.authorization.as_deref();
        let mut next_round = tokio::time::Instant::now();
        loop {
            // Which clusters to probe now: all of them on the interval, or
            // those the request path just failed to reach.
            let due: Vec<usize> = tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep_until(next_round) => {
                    next_round = tokio::time::Instant::now() + interval;
                    let modified = self.modified();
                    if modified != last_modified {
                        last_modified = modified;
                        self.reload(&mut config, &mut clusters);
                    }
                    (0..clusters.len()).collect()
                }
                names = self.registry.suspects() => {
                    suspect(&mut clusters, &names)
                }
                changed = next_object(&mut object_updates) => {
                    match changed {
                        // Unchanged clusters (e.g. only the status moved): nothing to probe.
                        Some(fresh) => {
                            if self.replace(fresh, &mut config, &mut clusters) {
                                (0..clusters.len()).collect()
                            } else {
                                Vec::new()
                            }
                        }
                        // The watch gave up (no client): nothing more will come.
                        None => {
                            object_updates = None;
                            Vec::new()
                        }
                    }
                }
            };
            let probes = due.iter().map(|&i| {
                probe(
                    &connector,
                    &clusters[i].member,
                    authorization,
                    self.settings.timeout,
                )
            });
            let results = futures::future::join_all(probes).await;
            for (&i, result) in due.iter().zip(results) {
                let cluster = &mut clusters[i];
                self.metrics.probed(&cluster.member.name, &result);
                cluster.apply(result);
                self.metrics.record(cluster);
            }
            let inputs = (config.clone(), policy_inputs(config.strategy, &clusters));
            if last_inputs.as_ref() != Some(&inputs) {
                let table = model_table(&inputs.0, &inputs.1);
                let complete = clusters.iter().all(|c| c.view.models.is_some());
                self.registry
                    .update(&table, listed_phases(&inputs.1), complete);
                tracing::debug!(
                    models = table.models.len(),
                    complete,
                    "global routes updated"
                );
                last_inputs = Some(inputs);
            }
            if let Some(tx) = &status_tx {
                let current = Some(proxy_status(&config, &clusters));
                tx.send_if_modified(|old| {
                    let changed = *old != current;
                    *old = current;
                    changed
                });
            }
        }
    }
}

/// The object status: healthy and configured clusters and, under the
/// Failover strategy, the cluster first requests go to (the first healthy
/// one in locality order).
fn proxy_status(config: &GlobalConfig, clusters: &[Tracked]) -> ProxyStatus {
    let healthy = clusters.iter().filter(|c| c.view.healthy);
    ProxyStatus {
        active_cluster: match config.strategy {
            ClusterRoutingStrategy::Failover => {
                healthy.clone().next().map(|c| c.member.name.clone())
            }
            _ => None,
        },
        healthy_clusters: healthy.count() as i32,
        total_clusters: clusters.len() as i32,
    }
}

/// The next version of the watched GlobalProxy; `None` when the watch
/// ended; never, without a watch.
async fn next_object(
    updates: &mut Option<tokio::sync::watch::Receiver<Option<GlobalConfig>>>,
) -> Option<GlobalConfig> {
    let Some(rx) = updates.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        rx.changed().await.ok()?;
        if let Some(config) = rx.borrow_and_update().clone() {
            return Some(config);
        }
    }
}

/// Marks the healthy clusters named in `names` as one failure away from
/// down (the request path's failed connection counts as a failed probe)
/// and returns their indices, to probe at once: a failed probe then takes
/// the cluster out, a good one clears it.
fn suspect(clusters: &mut [Tracked], names: &[String]) -> Vec<usize> {
    let mut due = Vec::new();
    for (i, cluster) in clusters.iter_mut().enumerate() {
        if cluster.view.healthy && names.contains(&cluster.member.name) {
            cluster.failures = cluster.failures.max(UNHEALTHY_AFTER.saturating_sub(1));
            due.push(i);
        }
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn tracked() -> Tracked {
        Tracked::new(MemberCluster {
            name: "east".into(),
            endpoint: "http://east:80".into(),
            authority: "east:80".into(),
            host: "east".into(),
            weight: 1,
        })
    }

    fn ok(ms: u64) -> Result<Probed, ProbeError> {
        Ok(Probed {
            addr: SocketAddr::from(([127, 0, 0, 1], 80)),
            latency: Duration::from_millis(ms),
            models: vec![("m".into(), Warmth::Ready)],
        })
    }

    fn failed() -> Result<Probed, ProbeError> {
        Err(ProbeError::Status(500))
    }

    #[test]
    fn health_needs_consecutive_failures_to_drop_and_one_success_to_return() {
        let mut t = tracked();
        t.apply(failed());
        assert!(!t.view.healthy, "never probed successfully");
        assert!(t.view.models.is_none());
        t.apply(ok(10));
        assert!(t.view.healthy);
        for _ in 1..UNHEALTHY_AFTER {
            t.apply(failed());
            assert!(t.view.healthy, "one failed probe is not enough");
        }
        t.apply(failed());
        assert!(!t.view.healthy);
        assert!(t.view.models.is_some(), "the last list is kept");
        t.apply(ok(10));
        assert!(t.view.healthy);
        assert_eq!(t.failures, 0);
    }

    #[test]
    fn a_failed_request_and_one_failed_probe_take_a_cluster_out() {
        let mut clusters = [tracked()];
        clusters[0].apply(ok(10));
        assert_eq!(
            suspect(&mut clusters, &["west".into()]),
            Vec::<usize>::new()
        );
        assert_eq!(suspect(&mut clusters, &["east".into()]), [0]);
        assert!(clusters[0].view.healthy, "a suspect stays in until probed");
        clusters[0].apply(failed());
        assert!(!clusters[0].view.healthy);
        // Down clusters are not probed out of turn.
        assert!(suspect(&mut clusters, &["east".into()]).is_empty());
        // A false alarm: the probe succeeds and the count starts over.
        clusters[0].apply(ok(10));
        suspect(&mut clusters, &["east".into()]);
        clusters[0].apply(ok(10));
        assert_eq!(clusters[0].failures, 0);
        assert!(clusters[0].view.healthy);
    }

    #[test]
    fn latency_is_smoothed_and_only_matters_to_the_latency_strategy() {
        let mut t = tracked();
        t.apply(ok(10));
        t.apply(ok(20));
        let smoothed = t.view.latency.unwrap().as_secs_f64();
        assert!((smoothed - 0.013).abs() < 1e-6, "{smoothed}");
        let inputs = policy_inputs(ClusterRoutingStrategy::Failover, &[t.clone()]);
        assert_eq!(inputs[0].latency, None);
        let inputs = policy_inputs(ClusterRoutingStrategy::Latency, &[t]);
        let rounded = inputs[0].latency.unwrap();
        assert!(
            rounded == Duration::from_millis(12) || rounded == Duration::from_millis(13),
            "{rounded:?}"
        );
    }
}
