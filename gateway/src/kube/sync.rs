//! Rebuilds the routes whenever a watch reports a change, and on a timer as
//! a safety net. Route tables go through the same [`RouteStore::replace`]
//! path as model-file reloads, so endpoint sets (and their hash rings and
//! in-flight counters) are rebuilt only when a model's ready endpoints change.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::dns::DnsCache;
use super::lifecycle::KubeLifecycle;
use super::models::{self, Resolve, Snapshot};
use super::reflect::Stores;
use super::scope::Scope;
use crate::config::ModelTable;
use crate::registry::RouteStore;

/// Rebuilds routes and readiness from the stores once, resolving Service
/// DNS fallbacks through `dns`.
pub fn apply(
    stores: &Stores,
    scope: &Scope,
    registry: &RouteStore,
    lifecycle: &KubeLifecycle,
    dns: &Arc<DnsCache>,
) {
    let resolve = |host: &str, port: u16| dns.lookup(host, port);
    apply_snapshot(&stores.snapshot(), scope, registry, lifecycle, &resolve);
}

/// Rebuilds routes and readiness from `snapshot`.
pub fn apply_snapshot(
    snapshot: &Snapshot,
    scope: &Scope,
    registry: &RouteStore,
    lifecycle: &KubeLifecycle,
    resolve: Resolve<'_>,
) {
    let models = models::build(snapshot, scope, resolve);
    let table = ModelTable {
        models: models.iter().map(|m| m.config.clone()).collect(),
        label_groups: super::labels::group_specs(&models),
        ..ModelTable::default()
    };
    // Routes first: a request released by the readiness change below
    // resolves its model again and must find the new endpoints.
    registry.replace(&table);
    lifecycle.update(&models);
}

/// What the rebuild loop works on.
pub struct Sync {
    /// The reflectors' stores.
    pub stores: Stores,
    /// Namespaces served.
    pub scope: Scope,
    /// The registry the request path reads.
    pub registry: Arc<RouteStore>,
    /// The lifecycle the activation queues read.
    pub lifecycle: Arc<KubeLifecycle>,
    /// Service DNS fallback answers.
    pub dns: Arc<DnsCache>,
}

impl Sync {
    /// Rebuilds once.
    pub fn apply(&self) {
        apply(
            &self.stores,
            &self.scope,
            &self.registry,
            &self.lifecycle,
            &self.dns,
        );
    }
}

/// Rebuilds after every change notification (watch events, DNS answers)
/// and every `resync`.
pub async fn run(sync: Sync, changed: Arc<Notify>, resync: Duration) {
    let mut tick = tokio::time::interval(resync.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = changed.notified() => {}
            _ = tick.tick() => tracing::debug!("periodic resync of Kubernetes routes"),
        }
        sync.apply();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::ModelLifecycle;
    use crate::ratelimit::LimitSettings;
    use crate::registry::ModelRegistry;
    use flexinfer_operator::lifecycle::Phase;
    use serde_json::json;

    fn snapshot(phase: &str, last_active: &str, ips: &[&str]) -> Snapshot {
        let eps: Vec<_> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
            .collect();
        Snapshot {
            models: vec![Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "m", "namespace": "default"},
                    "spec": {"backend": "vllm", "source": "hf://org/m"},
                    "status": {"phase": phase, "lastActiveTime": last_active}
                }))
                .unwrap(),
            )],
            slices: vec![Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "m-1", "namespace": "default",
                        "labels": {"kubernetes.io/service-name": "m"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8000}],
                    "endpoints": eps
                }))
                .unwrap(),
            )],
            ..Snapshot::default()
        }
    }

    #[tokio::test]
    async fn endpoint_sets_are_rebuilt_only_when_endpoints_change() {
        let scope = Scope::from_flags("default", &[], false);
        let registry = RouteStore::from_table(&ModelTable::default(), LimitSettings::default());
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let lifecycle = KubeLifecycle::new(tx, Duration::from_secs(60));
        let none = |_: &str, _: u16| Vec::new();
        let t0 = "2026-01-01T00:00:00Z";
        apply_snapshot(
            &snapshot("Ready", t0, &["10.0.0.1"]),
            &scope,
            &registry,
            &lifecycle,
            &none,
        );
        let first = registry.resolve("m").unwrap().route.endpoints.clone();
        let mut ready = lifecycle.status("m").unwrap();
        assert_eq!(ready.borrow_and_update().phase, Phase::Ready);

        // A status-only change (activity time) keeps the set and its ring.
        let t1 = "2026-01-01T00:01:00Z";
        apply_snapshot(
            &snapshot("Ready", t1, &["10.0.0.1"]),
            &scope,
            &registry,
            &lifecycle,
            &none,
        );
        let same = registry.resolve("m").unwrap().route.endpoints.clone();
        assert!(Arc::ptr_eq(&first, &same));
        assert!(!ready.has_changed().unwrap());

        apply_snapshot(
            &snapshot("Ready", t1, &["10.0.0.1", "10.0.0.2"]),
            &scope,
            &registry,
            &lifecycle,
            &none,
        );
        let grown = registry.resolve("m").unwrap().route.endpoints.clone();
        assert!(!Arc::ptr_eq(&first, &grown));
        assert_eq!(grown.len(), 2);

        apply_snapshot(
            &snapshot("Ready", t1, &[]),
            &scope,
            &registry,
            &lifecycle,
            &none,
        );
        assert!(ready.has_changed().unwrap());
        assert_eq!(ready.borrow_and_update().phase, Phase::Loading);

        apply_snapshot(&Snapshot::default(), &scope, &registry, &lifecycle, &none);
        assert!(registry.resolve("m").is_none());
        assert!(
            ready.changed().await.is_err(),
            "a removed model closes its channel"
        );
    }
}
