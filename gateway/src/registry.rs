//! Which models exist and where their ready endpoints are.
//!
//! The request path asks a [`ModelRegistry`] to resolve the name a client sent
//! into a [`Resolved`] route. Every mode keeps its routes in a [`RouteStore`]
//! (an atomically swapped [`RouteTable`]): file mode fills it from the model
//! file, Kubernetes mode from its watches, global mode from its probes of
//! member gateways; the request path never knows which.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{ConfigError, ModelConfig, ModelTable, RateLimitSpec};
use crate::label_groups::{LabelGroup, LabelGroups};
use crate::paths::PathPolicy;
use crate::ratelimit::{LimitSettings, RouteLimiter};
use crate::routing::{EndpointSet, RoutingOptions, Strategy};

/// A servable model as the request path sees it.
#[derive(Debug)]
pub struct ModelRoute {
    /// Canonical model name (metrics label).
    pub name: Arc<str>,
    /// Name sent upstream in JSON bodies.
    pub backend_model: String,
    /// Routing strategy.
    pub strategy: Strategy,
    /// Routing options (bounded load).
    pub options: RoutingOptions,
    /// Ready endpoints with their ring and in-flight counters.
    pub endpoints: Arc<EndpointSet>,
    /// The model's token bucket, when rate limiting is on.
    pub limiter: Option<Arc<RouteLimiter>>,
    /// The model's own cold-start wait bound, when it has one.
    pub cold_start_timeout: Option<std::time::Duration>,
    /// Paths clients may reach on the model's servers.
    pub paths: PathPolicy,
    /// Health path probed on each endpoint, when checks are on.
    pub health_check: Option<String>,
    /// Requests each endpoint takes at once, when the model bounds it.
    pub max_concurrency: Option<u32>,
    /// Context window in tokens, when known.
    pub context_window: Option<u64>,
    /// Whether requests that cannot fit the window are refused.
    pub context_admission: bool,
    /// APIs whose streams are resumed on another endpoint mid-answer.
    pub stream_failover: crate::resume::StreamFailover,
    /// The model's per-request metric series, once looked up.
    pub meters: crate::metrics::MeterCache,
}

/// How a requested name matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The canonical name.
    Name,
    /// An alias.
    Alias,
    /// A LoRA adapter of the model.
    Lora,
}

/// Result of resolving a requested model name.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The route to serve it on.
    pub route: Arc<ModelRoute>,
    /// Model name the backend must see (backend model or LoRA adapter).
    pub upstream_model: Arc<str>,
    /// How the name matched.
    pub kind: MatchKind,
}

/// One row of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedModel {
    /// Name clients can send.
    pub id: String,
    /// Canonical model this name resolves to.
    pub root: String,
    /// Base model for LoRA adapters.
    pub parent: Option<String>,
    /// The phase, when the source knows it itself (global mode: the best
    /// among the member clusters); otherwise the activation lifecycle's, or
    /// `Ready`.
    pub phase: Option<&'static str>,
}

/// Source of models for the request path.
pub trait ModelRegistry: Send + Sync + 'static {
    /// Resolves a requested name (canonical, alias or LoRA adapter).
    fn resolve(&self, requested: &str) -> Option<Resolved>;
    /// Every servable name, for `GET /v1/models`.
    fn list(&self) -> Vec<ListedModel>;
    /// The label group a requested name is, when it is one (asked only
    /// after [`ModelRegistry::resolve`] found nothing).
    fn label_group(&self, _requested: &str) -> Option<Arc<LabelGroup>> {
        None
    }
}

/// An immutable view of all routes; swapped whole on reload.
#[derive(Debug, Default)]
pub struct RouteTable {
    by_name: HashMap<String, Resolved>,
    listed: Vec<ListedModel>,
    routes: Vec<Arc<ModelRoute>>,
    groups: LabelGroups,
}

impl RouteTable {
    /// Builds routes from a validated table, reusing endpoint sets (and so
    /// their in-flight counters and rings) and limiters of `previous` where
    /// nothing changed.
    pub fn build(
        table: &ModelTable,
        limits: &LimitSettings,
        previous: Option<&RouteTable>,
    ) -> Self {
        let mut out = RouteTable::default();
        for model in &table.models {
            let old = previous.and_then(|p| p.routes.iter().find(|r| *r.name == *model.name));
            let route = Arc::new(build_route(model, limits, old.map(|r| r.as_ref())));
            out.insert(&route, model);
            out.routes.push(route);
        }
        for spec in &table.label_groups {
            if out.by_name.contains_key(&spec.label) || out.groups.contains_key(&spec.label) {
                continue;
            }
            let old = previous.and_then(|p| p.groups.get(&spec.label));
            let member = |name: &str| {
                out.by_name
                    .get(name)
                    .filter(|r| *r.route.name == *name)
                    .cloned()
            };
            let Some(group) = LabelGroup::build(spec, member, old.map(|g| g.as_ref())) else {
                continue;
            };
            if let Some(first) = group.members().next() {
                out.listed.push(ListedModel {
                    id: spec.label.clone(),
                    root: first.to_string(),
                    parent: None,
                    phase: None,
                });
            }
            out.groups.insert(spec.label.clone(), Arc::new(group));
        }
        out
    }

    fn insert(&mut self, route: &Arc<ModelRoute>, model: &ModelConfig) {
        let backend: Arc<str> = Arc::from(model.backend_model.as_str());
        let entry = |kind, upstream_model: Arc<str>| Resolved {
            route: route.clone(),
            upstream_model,
            kind,
        };
        self.by_name
            .insert(model.name.clone(), entry(MatchKind::Name, backend.clone()));
        self.listed.push(ListedModel {
            id: model.name.clone(),
            root: model.name.clone(),
            parent: None,
            phase: None,
        });
        for alias in &model.aliases {
            self.by_name
                .insert(alias.clone(), entry(MatchKind::Alias, backend.clone()));
            self.listed.push(ListedModel {
                id: alias.clone(),
                root: model.name.clone(),
                parent: None,
                phase: None,
            });
        }
        let mut adapters: Vec<_> = model.lora.iter().collect();
        adapters.sort();
        for (name, adapter) in adapters {
            self.by_name.insert(
                name.clone(),
                entry(MatchKind::Lora, Arc::from(adapter.as_str())),
            );
            self.listed.push(ListedModel {
                id: name.clone(),
                root: adapter.clone(),
                parent: Some(model.name.clone()),
                phase: None,
            });
        }
    }

    /// Looks a requested name up.
    pub fn resolve(&self, requested: &str) -> Option<Resolved> {
        self.by_name.get(requested).cloned()
    }

    /// The label group called `label`.
    pub fn label_group(&self, label: &str) -> Option<Arc<LabelGroup>> {
        self.groups.get(label).cloned()
    }

    /// All servable names, in file order.
    pub fn list(&self) -> Vec<ListedModel> {
        self.listed.clone()
    }

    /// All routes.
    pub fn routes(&self) -> &[Arc<ModelRoute>] {
        &self.routes
    }
}

fn build_route(
    model: &ModelConfig,
    limits: &LimitSettings,
    old: Option<&ModelRoute>,
) -> ModelRoute {
    let unchanged = |set: &EndpointSet| {
        if model.strategy.is_ordered() {
            set.same_sequence(&model.upstreams)
        } else {
            set.same_endpoints(&model.upstreams)
        }
    };
    let endpoints = match old {
        Some(o) if unchanged(&o.endpoints) => o.endpoints.clone(),
        Some(o) => Arc::new(o.endpoints.rebuild(model.upstreams.clone())),
        None => Arc::new(EndpointSet::new(model.upstreams.clone())),
    };
    let quota: Option<RateLimitSpec> = model.rate_limit.or(limits.per_model);
    let limiter = match (limits.enabled, quota) {
        (true, Some(q)) => match old.and_then(|o| o.limiter.clone()) {
            Some(l) if l.spec() == q => Some(l),
            _ => RouteLimiter::new(q).map(Arc::new),
        },
        _ => None,
    };
    ModelRoute {
        name: Arc::from(model.name.as_str()),
        backend_model: model.backend_model.clone(),
        strategy: model.strategy,
        options: RoutingOptions {
            bounded_load: model.bounded_load,
            cache_aware: model.cache_aware,
        },
        endpoints,
        limiter,
        cold_start_timeout: model.cold_start_timeout,
        paths: model.paths.clone(),
        health_check: model.health_check.clone(),
        max_concurrency: model.max_concurrency,
        context_window: model.context_window,
        context_admission: model.context_admission,
        stream_failover: model.stream_failover,
        meters: Default::default(),
    }
}

/// The route table of every mode, replaced whole when the models change
/// (a reloaded file, a watch event, a probe) without disturbing requests in
/// flight: they keep the routes they resolved.
pub struct RouteStore {
    path: Option<PathBuf>,
    limits: LimitSettings,
    table: ArcSwap<RouteTable>,
}

impl RouteStore {
    /// Loads the file at `path`.
    pub fn load(path: &Path, limits: LimitSettings) -> Result<Self, ConfigError> {
        let table = ModelTable::load(path)?;
        Ok(Self::with_table(path, &table, limits))
    }

    /// A registry over `table`, already loaded from `path` (reloaded from it later).
    pub fn with_table(path: &Path, table: &ModelTable, limits: LimitSettings) -> Self {
        Self {
            path: Some(path.to_path_buf()),
            table: ArcSwap::from_pointee(RouteTable::build(table, &limits, None)),
            limits,
        }
    }

    /// A registry over an in-memory table (no file to reload).
    pub fn from_table(table: &ModelTable, limits: LimitSettings) -> Self {
        Self {
            path: None,
            table: ArcSwap::from_pointee(RouteTable::build(table, &limits, None)),
            limits,
        }
    }

    /// Re-reads the file; on error the current table stays in force.
    pub fn reload(&self) -> Result<usize, ConfigError> {
        let Some(path) = &self.path else {
            return Ok(self.table.load().routes.len());
        };
        let table = ModelTable::load(path)?;
        self.replace(&table);
        Ok(table.models.len())
    }

    /// Swaps in a new table.
    pub fn replace(&self, table: &ModelTable) {
        let current = self.table.load();
        let next = RouteTable::build(table, &self.limits, Some(&current));
        self.table.store(Arc::new(next));
    }

    /// The file this registry reads, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The current table.
    pub fn snapshot(&self) -> Arc<RouteTable> {
        self.table.load_full()
    }
}

impl ModelRegistry for RouteStore {
    fn resolve(&self, requested: &str) -> Option<Resolved> {
        self.table.load().resolve(requested)
    }

    fn list(&self) -> Vec<ListedModel> {
        self.table.load().list()
    }

    fn label_group(&self, requested: &str) -> Option<Arc<LabelGroup>> {
        self.table.load().label_group(requested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(yaml: &str) -> ModelTable {
        ModelTable::from_yaml(yaml).unwrap()
    }

    #[test]
    fn resolves_names_aliases_and_adapters() {
        let reg = RouteStore::from_table(
            &table(
                "models:\n- name: base\n  backendModel: org/base\n  aliases: [b]\n  endpoints: ['127.0.0.1:9']\n  loraAdapters: [{name: sql, adapter: sql-v2}]\n",
            ),
            LimitSettings::default(),
        );
        let r = reg.resolve("b").unwrap();
        assert_eq!(
            (&*r.route.name, &*r.upstream_model, r.kind),
            ("base", "org/base", MatchKind::Alias)
        );
        let r = reg.resolve("sql").unwrap();
        assert_eq!((&*r.upstream_model, r.kind), ("sql-v2", MatchKind::Lora));
        assert!(reg.resolve("nope").is_none());
        let ids: Vec<_> = reg.list().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["base", "b", "sql"]);
    }

    #[test]
    fn reload_keeps_unchanged_endpoint_sets() {
        let reg = RouteStore::from_table(
            &table("models:\n- name: a\n  endpoints: ['127.0.0.1:1']\n- name: b\n  endpoints: ['127.0.0.1:2']\n"),
            LimitSettings::default(),
        );
        let a_before = reg.resolve("a").unwrap().route.endpoints.clone();
        let b_before = reg.resolve("b").unwrap().route.endpoints.clone();
        reg.replace(&table(
            "models:\n- name: a\n  endpoints: ['127.0.0.1:1']\n- name: b\n  endpoints: ['127.0.0.1:3']\n",
        ));
        assert!(Arc::ptr_eq(
            &a_before,
            &reg.resolve("a").unwrap().route.endpoints
        ));
        assert!(!Arc::ptr_eq(
            &b_before,
            &reg.resolve("b").unwrap().route.endpoints
        ));
    }
}
