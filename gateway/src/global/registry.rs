//! The global mode's model registry: the routes of the cluster policy,
//! swapped whole when the probes change them, plus the answer for a model
//! nobody listed while some member's list is still unknown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::config::ModelTable;
use crate::proxy::EndpointFailures;
use crate::ratelimit::LimitSettings;
use crate::registry::{ListedModel, MatchKind, ModelRegistry, ModelRoute, Resolved, RouteStore};
use crate::routing::{EndpointSet, RoutingOptions, Strategy, Upstream};

/// Routes across member clusters, for the request path.
pub struct GlobalRegistry {
    routes: Arc<RouteStore>,
    /// Every member's model list is known (each answered a probe once).
    complete: AtomicBool,
    /// The endpoint set of models no reachable cluster serves.
    nowhere: Arc<EndpointSet>,
    /// Clusters whose connection failed on the request path since the
    /// monitor last looked, by name.
    suspects: Mutex<Vec<String>>,
    /// Wakes the monitor when a cluster becomes a suspect.
    suspected: Notify,
    /// Phase listed for each model.
    phases: ArcSwap<HashMap<String, &'static str>>,
}

impl GlobalRegistry {
    /// An empty registry: until the first probes answer, every model is
    /// unavailable (503) rather than unknown (404).
    pub fn new(limits: LimitSettings) -> Self {
        GlobalRegistry {
            routes: Arc::new(RouteStore::from_table(&ModelTable::default(), limits)),
            complete: AtomicBool::new(false),
            nowhere: Arc::new(EndpointSet::default()),
            suspects: Mutex::new(Vec::new()),
            suspected: Notify::new(),
            phases: ArcSwap::default(),
        }
    }

    /// Waits until a cluster is reported failed, then returns the names
    /// reported since the last call. Cancel-safe: names are taken only by
    /// a call that returns them.
    pub async fn suspects(&self) -> Vec<String> {
        loop {
            let taken = std::mem::take(&mut *self.lock_suspects());
            if !taken.is_empty() {
                return taken;
            }
            self.suspected.notified().await;
        }
    }

    fn lock_suspects(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // The list stays consistent even if a holder panicked.
        self.suspects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Swaps in the routes of the policy and the phases to list;
    /// `complete` says whether every member's model list is known, so that
    /// a model none lists is unknown.
    pub fn update(
        &self,
        table: &ModelTable,
        phases: HashMap<String, &'static str>,
        complete: bool,
    ) {
        self.routes.replace(table);
        self.phases.store(Arc::new(phases));
        self.complete.store(complete, Ordering::Release);
    }

    /// The routes themselves (a [`RouteStore`] fed by the probes).
    pub fn routes(&self) -> Arc<RouteStore> {
        self.routes.clone()
    }

    /// A route without endpoints for a model that may exist on a cluster
    /// whose list is not known yet: the client gets 503, and may retry.
    fn unavailable(&self, requested: &str) -> Resolved {
        let route = ModelRoute {
            name: Arc::from(requested),
            backend_model: requested.to_string(),
            strategy: Strategy::Failover,
            options: RoutingOptions::default(),
            endpoints: self.nowhere.clone(),
            limiter: None,
            cold_start_timeout: None,
            paths: crate::paths::PathPolicy::Any,
            health_check: None,
            max_concurrency: None,
            context_window: None,
            context_admission: false,
            stream_failover: Default::default(),
            meters: Default::default(),
        };
        Resolved {
            route: Arc::new(route),
            upstream_model: Arc::from(requested),
            kind: MatchKind::Name,
        }
    }
}

impl EndpointFailures for GlobalRegistry {
    fn connection_failed(&self, endpoint: &Upstream) {
        let mut suspects = self.lock_suspects();
        if !suspects.contains(&endpoint.name) {
            suspects.push(endpoint.name.clone());
        }
        drop(suspects);
        self.suspected.notify_one();
    }
}

impl ModelRegistry for GlobalRegistry {
    fn resolve(&self, requested: &str) -> Option<Resolved> {
        match self.routes.resolve(requested) {
            Some(found) => Some(found),
            None if self.complete.load(Ordering::Acquire) => None,
            None => Some(self.unavailable(requested)),
        }
    }

    fn list(&self) -> Vec<ListedModel> {
        let phases = self.phases.load();
        let mut listed = self.routes.list();
        for model in &mut listed {
            model.phase = phases.get(&model.id).copied();
        }
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::routing::Upstream;

    fn table(model: &str, endpoints: usize) -> ModelTable {
        let upstreams = (0..endpoints)
            .map(|i| Upstream::new(([127, 0, 0, 1], 9000 + i as u16).into(), format!("c{i}")))
            .collect();
        ModelTable {
            models: vec![ModelConfig {
                name: model.into(),
                aliases: vec![],
                backend_model: model.into(),
                strategy: Strategy::Failover,
                bounded_load: None,
                cache_aware: Default::default(),
                upstreams,
                lora: Default::default(),
                rate_limit: None,
                paths: Default::default(),
                health_check: None,
                local: None,
                cold_start_timeout: None,
                max_concurrency: None,
                context_window: None,
                context_admission: false,
                stream_failover: Default::default(),
            }],
            ..ModelTable::default()
        }
    }

    #[test]
    fn unknown_models_are_unavailable_until_every_list_is_known() {
        let registry = GlobalRegistry::new(LimitSettings::default());
        let r = registry.resolve("m").expect("unavailable, not unknown");
        assert!(r.route.endpoints.is_empty());
        assert_eq!(&*r.route.name, "m");

        registry.update(&table("m", 2), HashMap::from([("m".into(), "Idle")]), false);
        assert_eq!(registry.list()[0].phase, Some("Idle"));
        assert_eq!(registry.resolve("m").unwrap().route.endpoints.len(), 2);
        assert!(registry
            .resolve("other")
            .unwrap()
            .route
            .endpoints
            .is_empty());

        registry.update(&table("m", 1), HashMap::new(), true);
        assert_eq!(registry.resolve("m").unwrap().route.endpoints.len(), 1);
        assert!(registry.resolve("other").is_none());
        let listed = registry.list();
        assert_eq!((listed[0].id.as_str(), listed[0].phase), ("m", None));
        assert_eq!(listed.len(), 1);
    }

    #[tokio::test]
    async fn failed_connections_wake_the_monitor_once_per_cluster() {
        let registry = GlobalRegistry::new(LimitSettings::default());
        let east = Upstream::new(([127, 0, 0, 1], 1).into(), "east");
        let west = Upstream::new(([127, 0, 0, 1], 2).into(), "west");
        registry.connection_failed(&east);
        registry.connection_failed(&east);
        registry.connection_failed(&west);
        assert_eq!(registry.suspects().await, ["east", "west"]);
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), registry.suspects());
        assert!(waiting.await.is_err(), "nothing new was reported");
        registry.connection_failed(&west);
        assert_eq!(registry.suspects().await, ["west"]);
    }
}
