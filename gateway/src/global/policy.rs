//! The cluster routing policy as a pure function: from what the probes know
//! about each member cluster to the model table the request path routes on.
//!
//! For every model some member lists, the route's endpoints are the
//! healthy clusters that list it, ordered by
//! 1. warmth: clusters where the model is `Ready` first, then those where it
//!    is on its way (`Loading`, `Pending`), then those where serving it means
//!    a cold start (`Idle` and any other phase) — a warm cluster farther away
//!    beats a cold start in the nearest one;
//! 2. locality: the configured order (`failoverOrder`, then `clusters`), or,
//!    with the Latency strategy, the measured probe round trip.
//!
//! The strategy then picks among them: Failover and Latency take the first
//! (retries walk down the list); RoundRobin and Weighted spread over the
//! clusters of the warmest tier (equal shares, or `weight` shares) and keep
//! the rest as backups in that order. Unhealthy clusters are left out.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use flexinfer_crds::v1alpha2::ClusterRoutingStrategy;

use super::config::GlobalConfig;
use crate::config::{ModelConfig, ModelTable};
use crate::paths::PathPolicy;
use crate::routing::{Strategy, Upstream};

/// How ready a model is on one cluster, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Warmth {
    /// Serving now (`Ready`, or no phase reported).
    Ready,
    /// Starting (`Loading`, `Pending`): ready sooner than a cold start.
    Warming,
    /// Scaled to zero or otherwise not running: a request there cold-starts it.
    Cold,
}

impl Warmth {
    /// Reads a member's `status.phase`; a member that reports no phase (any
    /// OpenAI-compatible server) serves what it lists.
    pub fn from_phase(phase: Option<&str>) -> Self {
        match phase {
            None | Some("Ready") => Warmth::Ready,
            Some("Loading" | "Pending") => Warmth::Warming,
            Some(_) => Warmth::Cold,
        }
    }

    /// The model phase a global gateway lists for a model whose warmest
    /// available cluster has this warmth.
    pub const fn phase(self) -> &'static str {
        match self {
            Warmth::Ready => "Ready",
            Warmth::Warming => "Loading",
            Warmth::Cold => "Idle",
        }
    }

    /// Lower-case name for metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Warmth::Ready => "ready",
            Warmth::Warming => "warming",
            Warmth::Cold => "cold",
        }
    }
}

/// What the probes currently know about one member cluster (same index as
/// in [`GlobalConfig::clusters`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// Whether the cluster's gateway answers its probe.
    pub healthy: bool,
    /// Where its gateway was last reached.
    pub addr: Option<SocketAddr>,
    /// Smoothed probe round trip.
    pub latency: Option<Duration>,
    /// Models it lists and how warm each is; kept while the cluster is
    /// down, `None` until it was listed once.
    pub models: Option<Vec<(String, Warmth)>>,
}

/// The locality order of the clusters: indices into `config.clusters`.
fn locality(config: &GlobalConfig, views: &[ClusterView]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..config.clusters.len()).collect();
    if config.strategy == ClusterRoutingStrategy::Latency {
        // Whole milliseconds, so that jitter between nearly equal clusters
        // does not reorder them at every probe; unmeasured ones last. The
        // sort is stable: ties keep the configured order.
        order.sort_by_key(|&i| {
            views
                .get(i)
                .and_then(|v| v.latency)
                .map_or(u128::MAX, |l| l.as_millis())
        });
    }
    order
}

/// Builds the model table: one route per model any member lists (the
/// member resolves aliases and adapters itself, so the name is forwarded
/// unchanged), its endpoints the healthy clusters serving it, in policy
/// order. A model whose clusters are all down keeps a route without
/// endpoints, so clients get 503 rather than 404.
pub fn model_table(config: &GlobalConfig, views: &[ClusterView]) -> ModelTable {
    let order = locality(config, views);
    // Model → (warmth, locality rank, cluster index) of every healthy cluster listing it.
    let mut models: BTreeMap<&str, Vec<(Warmth, usize, usize)>> = BTreeMap::new();
    for (rank, &i) in order.iter().enumerate() {
        let Some(view) = views.get(i) else { continue };
        for (name, warmth) in view.models.iter().flatten() {
            let entry = models.entry(name.as_str()).or_default();
            if view.healthy && view.addr.is_some() {
                entry.push((*warmth, rank, i));
            }
        }
    }
    let strategy = match config.strategy {
        ClusterRoutingStrategy::Failover | ClusterRoutingStrategy::Latency => Strategy::Failover,
        ClusterRoutingStrategy::RoundRobin | ClusterRoutingStrategy::Weighted => Strategy::Weighted,
    };
    let mut table = ModelTable::default();
    for (name, mut candidates) in models {
        candidates.sort();
        let best = candidates.first().map(|c| c.0);
        let upstreams = candidates
            .iter()
            .filter_map(|&(warmth, _, i)| {
                let cluster = &config.clusters[i];
                let addr = views[i].addr?;
                let weight = match (Some(warmth) == best, config.strategy) {
                    (false, _) => 0,
                    (true, ClusterRoutingStrategy::Weighted) => cluster.weight,
                    (true, _) => 1,
                };
                Some(Upstream::new(addr, cluster.name.clone()).with_weight(weight))
            })
            .collect();
        table.models.push(ModelConfig {
            name: name.to_string(),
            aliases: Vec::new(),
            backend_model: name.to_string(),
            strategy,
            bounded_load: None,
            cache_aware: Default::default(),
            upstreams,
            lora: Default::default(),
            rate_limit: None,
            // Member gateways decide which paths they serve.
            paths: PathPolicy::Any,
            health_check: None,
            local: None,
            cold_start_timeout: None,
            // Member gateways bound their own models' concurrency.
            max_concurrency: None,
            context_window: None,
            context_admission: false,
            stream_failover: Default::default(),
        });
    }
    table
}

/// Phase the global gateway lists for a model no available cluster serves.
pub const UNAVAILABLE_PHASE: &str = "Unavailable";

/// The phase of every listed model on the global gateway's `/v1/models`:
/// its best warmth among the healthy clusters, [`UNAVAILABLE_PHASE`] when
/// none of those lists it.
pub fn listed_phases(views: &[ClusterView]) -> HashMap<String, &'static str> {
    let mut best: HashMap<String, Option<Warmth>> = HashMap::new();
    for view in views {
        let usable = view.healthy && view.addr.is_some();
        for (name, warmth) in view.models.iter().flatten() {
            let entry = best.entry(name.clone()).or_insert(None);
            if usable && entry.is_none_or(|b| *warmth < b) {
                *entry = Some(*warmth);
            }
        }
    }
    best.into_iter()
        .map(|(name, w)| (name, w.map_or(UNAVAILABLE_PHASE, Warmth::phase)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::global::config::MemberCluster;

    fn config(strategy: ClusterRoutingStrategy, weights: &[u32]) -> GlobalConfig {
        let names = ["near", "mid", "far"];
        GlobalConfig {
            strategy,
            clusters: weights
                .iter()
                .zip(names)
                .map(|(&weight, name)| MemberCluster {
                    name: name.to_string(),
                    endpoint: format!("http://{name}:80"),
                    authority: format!("{name}:80"),
                    host: name.to_string(),
                    weight,
                })
                .collect(),
        }
    }

    fn up(port: u16, models: &[(&str, Warmth)]) -> ClusterView {
        ClusterView {
            healthy: true,
            addr: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            latency: Some(Duration::from_millis(port as u64)),
            models: Some(models.iter().map(|(m, w)| (m.to_string(), *w)).collect()),
        }
    }

    fn down(view: ClusterView) -> ClusterView {
        ClusterView {
            healthy: false,
            ..view
        }
    }

    /// `(cluster, weight)` of each endpoint of `model`, in order.
    fn route(table: &ModelTable, model: &str) -> (Strategy, Vec<(String, u32)>) {
        let m = table
            .models
            .iter()
            .find(|m| m.name == model)
            .unwrap_or_else(|| panic!("no route for {model}"));
        assert_eq!(m.backend_model, model);
        (
            m.strategy,
            m.upstreams
                .iter()
                .map(|u| (u.name.clone(), u.weight))
                .collect(),
        )
    }

    fn names(route: &(Strategy, Vec<(String, u32)>)) -> Vec<&str> {
        route.1.iter().map(|(n, _)| n.as_str()).collect()
    }

    use Warmth::*;

    #[test]
    fn listed_phase_is_the_best_available_warmth() {
        let views = [
            up(1, &[("a", Cold), ("b", Cold)]),
            up(2, &[("a", Warming)]),
            down(up(3, &[("a", Ready), ("c", Ready)])),
        ];
        let phases = listed_phases(&views);
        assert_eq!(phases["a"], "Loading");
        assert_eq!(phases["b"], "Idle");
        assert_eq!(phases["c"], UNAVAILABLE_PHASE);
        assert_eq!(phases.len(), 3);
    }

    #[test]
    fn phases_map_to_warmth() {
        assert_eq!(Warmth::from_phase(None), Ready);
        assert_eq!(Warmth::from_phase(Some("Ready")), Ready);
        assert_eq!(Warmth::from_phase(Some("Loading")), Warming);
        assert_eq!(Warmth::from_phase(Some("Pending")), Warming);
        for phase in ["Idle", "Failed", "Preempted", "Stopping", "Unknown"] {
            assert_eq!(Warmth::from_phase(Some(phase)), Cold, "{phase}");
        }
    }

    #[test]
    fn failover_is_locality_first_among_equally_warm_clusters() {
        let c = config(ClusterRoutingStrategy::Failover, &[1, 1, 1]);
        let views = [
            up(1, &[("m", Ready)]),
            up(2, &[("m", Ready)]),
            up(3, &[("m", Ready)]),
        ];
        let r = route(&model_table(&c, &views), "m");
        assert_eq!(r.0, Strategy::Failover);
        assert_eq!(names(&r), ["near", "mid", "far"]);
    }

    #[test]
    fn a_warm_far_cluster_beats_a_cold_start_nearby() {
        let c = config(ClusterRoutingStrategy::Failover, &[1, 1, 1]);
        let views = [
            up(1, &[("m", Cold)]),
            up(2, &[("m", Warming)]),
            up(3, &[("m", Ready)]),
        ];
        assert_eq!(
            names(&route(&model_table(&c, &views), "m")),
            ["far", "mid", "near"]
        );
        // Nobody warm: the nearest healthy cluster cold-starts it.
        let views = [up(1, &[("m", Cold)]), up(2, &[("m", Cold)]), up(3, &[])];
        assert_eq!(
            names(&route(&model_table(&c, &views), "m")),
            ["near", "mid"]
        );
    }

    #[test]
    fn unhealthy_clusters_and_clusters_without_the_model_are_skipped() {
        let c = config(ClusterRoutingStrategy::Failover, &[1, 1, 1]);
        let views = [
            down(up(1, &[("m", Ready), ("only-near", Ready)])),
            up(2, &[("m", Ready)]),
            up(3, &[("other", Ready)]),
        ];
        let table = model_table(&c, &views);
        assert_eq!(names(&route(&table, "m")), ["mid"]);
        assert_eq!(names(&route(&table, "other")), ["far"]);
        // Known from the down cluster's last listing: a route without
        // endpoints (503), not an unknown model (404).
        assert!(route(&table, "only-near").1.is_empty());
        // Never listed: unknown.
        let views = [ClusterView::default(), up(2, &[("m", Ready)])];
        let table = model_table(&config(ClusterRoutingStrategy::Failover, &[1, 1]), &views);
        let listed: Vec<_> = table.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(listed, ["m"]);
    }

    #[test]
    fn round_robin_spreads_over_the_warm_tier_only() {
        let c = config(ClusterRoutingStrategy::RoundRobin, &[5, 5, 5]);
        let views = [
            up(1, &[("m", Cold)]),
            up(2, &[("m", Ready)]),
            up(3, &[("m", Ready)]),
        ];
        let r = route(&model_table(&c, &views), "m");
        assert_eq!(r.0, Strategy::Weighted);
        assert_eq!(
            r.1,
            [("mid".into(), 1), ("far".into(), 1), ("near".into(), 0)]
        );
    }

    #[test]
    fn weighted_uses_cluster_weights_in_the_warm_tier() {
        let c = config(ClusterRoutingStrategy::Weighted, &[2, 1, 4]);
        let views = [
            up(1, &[("m", Ready)]),
            up(2, &[("m", Ready)]),
            up(3, &[("m", Warming)]),
        ];
        let r = route(&model_table(&c, &views), "m");
        assert_eq!(
            r.1,
            [("near".into(), 2), ("mid".into(), 1), ("far".into(), 0)]
        );
    }

    #[test]
    fn latency_orders_by_measured_round_trip() {
        let c = config(ClusterRoutingStrategy::Latency, &[1, 1, 1]);
        let mut views = [
            up(30, &[("m", Ready)]),
            up(10, &[("m", Ready)]),
            up(20, &[("m", Ready)]),
        ];
        let r = route(&model_table(&c, &views), "m");
        assert_eq!(r.0, Strategy::Failover);
        assert_eq!(names(&r), ["mid", "far", "near"]);
        // Unmeasured clusters go last; equal latencies keep list order.
        views[1].latency = None;
        views[0].latency = Some(Duration::from_micros(20_400));
        assert_eq!(
            names(&route(&model_table(&c, &views), "m")),
            ["near", "far", "mid"]
        );
    }
}
