//! Turns the watched objects into the gateway's model table.
//!
//! Each v1alpha2 `Model` and v1alpha1 `ModelDeployment` in scope (parked
//! ones, `litellm.enabled: false`, excepted) becomes one route, named as
//! [`Scope::canonical`] says. Names are claimed in this order, the first
//! claimant of a name winning (later claimants are logged and skipped):
//!
//! 1. canonical names (home namespace first, then the namespace
//!    precedence; Models before ModelDeployments; by name),
//! 2. qualified names `namespace/name` of home-namespace models,
//! 3. plain names of models outside the home namespace,
//! 4. service labels claimed by two or more models: label groups
//!    ([`super::labels`]),
//! 5. aliases: `spec.litellm.servedModelName`, `spec.litellm.aliases`,
//!    service labels claimed by this model only,
//! 6. LoRA adapter names (`spec.adapterName` → `spec.modelRef` in the
//!    adapter's namespace; the backend sees the adapter name).

use flexinfer_crds::names::service_name;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flexinfer_crds::labels;
use flexinfer_crds::v1alpha1::{GPUGroup, ModelDeployment, ModelDeploymentPhase};
use flexinfer_crds::v1alpha2::{LiteLlmSpec, LoRAAdapter, Model, ModelPhase};
use flexinfer_crds::RoutingStrategy;
use flexinfer_operator::lifecycle::Phase;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::endpoints::{terminating_nodes, ReadyEndpoints};
use super::labels::{service_labels, ServiceAnnotations};
use super::scope::{qualified, Scope};
use crate::config::ModelConfig;
use crate::paths::PathPolicy;
use crate::routing::{CacheAwareOptions, Strategy, Upstream};

/// Every watched object, as last seen.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// v1alpha2 Models.
    pub models: Vec<Arc<Model>>,
    /// v1alpha1 ModelDeployments.
    pub deployments: Vec<Arc<ModelDeployment>>,
    /// LoRAAdapters.
    pub adapters: Vec<Arc<LoRAAdapter>>,
    /// GPUGroups.
    pub groups: Vec<Arc<GPUGroup>>,
    /// EndpointSlices of model Services.
    pub slices: Vec<Arc<EndpointSlice>>,
    /// Nodes.
    pub nodes: Vec<Arc<Node>>,
    /// Services of models (their service-label annotations).
    pub services: Vec<Arc<Service>>,
}

/// Which resource a route comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetKind {
    /// A v1alpha2 `Model`.
    Model,
    /// A v1alpha1 `ModelDeployment`.
    ModelDeployment,
}

impl TargetKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Model => "Model",
            TargetKind::ModelDeployment => "ModelDeployment",
        }
    }
}

/// The object activation and touches patch for a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Kind.
    pub kind: TargetKind,
    /// `spec.replicas` of a ModelDeployment (0 for Models).
    pub replicas: i32,
    /// The GPUGroup (same namespace) a ModelDeployment belongs to.
    pub gpu_group: Option<String>,
}

/// One servable model, with the route config the registry builds from.
#[derive(Debug, Clone)]
pub struct ClusterModel {
    /// Route config; `config.name` is the canonical name.
    pub config: ModelConfig,
    /// The object behind it.
    pub target: Target,
    /// Readiness as the activation queues see it.
    pub phase: Phase,
    /// Why the model is in this phase (`status.message`).
    pub message: Option<String>,
    /// The model's cold-start timeout.
    pub cold_start: Duration,
    /// Idle time after which the operator scales the model to zero.
    pub idle_timeout: Duration,
    /// The label groups (service labels shared with other models) it is in.
    pub group_labels: Vec<String>,
}

/// A candidate route before names are claimed.
struct Candidate {
    namespace: String,
    name: String,
    kind: TargetKind,
    annotations: BTreeMap<String, String>,
    aliases: Vec<String>,
    /// `spec.serviceLabels`.
    spec_labels: Vec<String>,
    /// Service labels from every source ([`service_labels`]).
    labels: Vec<String>,
    backend_model: String,
    ready: bool,
    failed: bool,
    wanted: bool,
    message: Option<String>,
    replicas: i32,
    gpu_group_ref: Option<String>,
    cold_start: Duration,
    idle_timeout: Duration,
    /// Context window from the backend config (`maxModelLen`, ...).
    context_window: Option<u64>,
    /// The cold-start timeout the model itself sets, if it does: queued
    /// requests wait at least this long.
    own_cold_start: Option<Duration>,
    /// Where the Service DNS fallback sends requests.
    fallback: (String, u16),
}

/// Resolves a `host`, `port` pair to addresses without waiting (see
/// [`super::dns::DnsCache`]).
pub type Resolve<'a> = &'a dyn Fn(&str, u16) -> Vec<std::net::SocketAddr>;

/// Builds the routes from `snap`, in precedence order. A Ready model whose
/// Service has no EndpointSlice at all is routed to its Service DNS name
/// (or `status.endpoint`) through `resolve`.
pub fn build(snap: &Snapshot, scope: &Scope, resolve: Resolve<'_>) -> Vec<ClusterModel> {
    let excluded = terminating_nodes(snap.nodes.iter().map(|n| n.as_ref()));
    let ready = ReadyEndpoints::collect(snap.slices.iter().map(|s| s.as_ref()), &excluded);
    let mut candidates: Vec<Candidate> = Vec::new();
    for m in &snap.models {
        if let Some(c) = from_model(m, scope) {
            candidates.push(c);
        }
    }
    for d in &snap.deployments {
        if let Some(c) = from_deployment(d, scope) {
            candidates.push(c);
        }
    }
    let services = ServiceAnnotations::collect(&snap.services);
    for c in &mut candidates {
        let service = services.get(&c.namespace, &service_name(&c.name));
        c.labels = service_labels(service, &c.annotations, &c.spec_labels);
    }
    candidates.sort_by(|a, b| {
        scope
            .compare(&a.namespace, &b.namespace)
            .then(a.kind.cmp(&b.kind))
            .then(a.name.cmp(&b.name))
    });

    let mut claims = Claims::default();
    let mut out: Vec<ClusterModel> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for c in &candidates {
        let key = scope.canonical(&c.namespace, &c.name);
        if !claims.claim(&key, &key) {
            continue;
        }
        index.insert((c.namespace.clone(), c.name.clone()), out.len());
        let service = service_name(&c.name);
        let mut upstreams = ready.upstreams(&c.namespace, &service);
        if c.ready && upstreams.is_empty() && ready.port(&c.namespace, &service).is_none() {
            let (host, port) = &c.fallback;
            let name = format!("{host}:{port}");
            upstreams = resolve(host, *port)
                .into_iter()
                .map(|addr| Upstream::new(addr, name.clone()))
                .collect();
        }
        let phase = match (c.ready, c.failed, upstreams.is_empty()) {
            (true, _, false) => Phase::Ready,
            (true, _, true) => Phase::Loading,
            (false, true, _) => Phase::Failed,
            (false, false, _) if c.wanted => Phase::Loading,
            _ => Phase::Idle,
        };
        let group = gpu_group(c, &snap.groups);
        let mut config = route_config(&key, c, upstreams);
        if group.is_some() {
            // A member may have to wait for another to be drained first.
            config.cold_start_timeout = Some(group_member_wait(c.cold_start));
        }
        out.push(ClusterModel {
            config,
            target: Target {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                kind: c.kind,
                replicas: c.replicas,
                gpu_group: group,
            },
            phase,
            message: c.message.clone(),
            cold_start: c.cold_start,
            idle_timeout: c.idle_timeout,
            group_labels: Vec::new(),
        });
    }
    let home = scope.home().to_string();
    let route_of = |c: &Candidate| index.get(&(c.namespace.clone(), c.name.clone())).copied();
    let mut extra: Vec<(usize, String)> = Vec::new();
    for c in candidates.iter().filter(|c| c.namespace == home) {
        if let Some(i) = route_of(c) {
            extra.push((i, qualified(&c.namespace, &c.name)));
        }
    }
    for c in candidates.iter().filter(|c| c.namespace != home) {
        if let Some(i) = route_of(c) {
            extra.push((i, c.name.clone()));
        }
    }
    for (i, alias) in extra.drain(..) {
        let owner = out[i].config.name.clone();
        if claims.claim(&alias, &owner) {
            out[i].config.aliases.push(alias);
        }
    }
    // Labels claimed by two or more models form groups, ahead of aliases.
    let mut claimants: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for c in &candidates {
        if let Some(i) = route_of(c) {
            for label in &c.labels {
                let routes = claimants.entry(label.as_str()).or_default();
                if !routes.contains(&i) {
                    routes.push(i);
                }
            }
        }
    }
    claimants.retain(|_, routes| routes.len() > 1);
    for (label, routes) in &claimants {
        if claims.claim(label, &format!("label group {label}")) {
            for &i in routes {
                out[i].group_labels.push(label.to_string());
            }
        }
    }
    for c in &candidates {
        if let Some(i) = route_of(c) {
            let single = c
                .labels
                .iter()
                .filter(|l| !claimants.contains_key(l.as_str()));
            extra.extend(c.aliases.iter().chain(single).map(|a| (i, a.clone())));
        }
    }
    for (i, alias) in extra {
        let owner = out[i].config.name.clone();
        if claims.claim(&alias, &owner) {
            out[i].config.aliases.push(alias);
        }
    }

    let mut adapters: Vec<&Arc<LoRAAdapter>> = snap
        .adapters
        .iter()
        .filter(|a| {
            a.metadata
                .namespace
                .as_deref()
                .is_some_and(|ns| scope.contains(ns))
        })
        .collect();
    adapters.sort_by(|a, b| {
        let (na, nb) = (ns_of(&a.metadata), ns_of(&b.metadata));
        scope
            .compare(na, nb)
            .then(a.metadata.name.cmp(&b.metadata.name))
    });
    for a in adapters {
        let ns = ns_of(&a.metadata).to_string();
        let Some(&i) = index.get(&(ns, a.spec.model_ref.clone())) else {
            continue;
        };
        let name = a.spec.adapter_name.trim();
        if name.is_empty() {
            continue;
        }
        let owner = out[i].config.name.clone();
        if claims.claim(name, &owner) {
            out[i]
                .config
                .lora
                .insert(name.to_string(), name.to_string());
        }
    }
    out
}

/// Names claimed so far and by whom.
#[derive(Default)]
struct Claims(HashMap<String, String>);

impl Claims {
    fn claim(&mut self, name: &str, owner: &str) -> bool {
        match self.0.get(name) {
            None => {
                self.0.insert(name.to_string(), owner.to_string());
                true
            }
            Some(prev) if prev == owner => false,
            Some(prev) => {
                tracing::debug!(name, owner = %prev, skipped = owner, "name already claimed");
                false
            }
        }
    }
}

fn ns_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

fn route_config(key: &str, c: &Candidate, upstreams: Vec<Upstream>) -> ModelConfig {
    let strategy = match RoutingStrategy::from_annotation(
        c.annotations.get(labels::ROUTING).map(String::as_str),
    ) {
        RoutingStrategy::ServiceDns => Strategy::Default,
        RoutingStrategy::SessionAffinity => Strategy::SessionAffinity,
        RoutingStrategy::Prefix => Strategy::Prefix,
        RoutingStrategy::LeastLoaded => Strategy::LeastLoaded,
        RoutingStrategy::CacheAware => Strategy::CacheAware,
    };
    ModelConfig {
        name: key.to_string(),
        aliases: Vec::new(),
        backend_model: c.backend_model.clone(),
        strategy,
        bounded_load: None,
        cache_aware: cache_aware(key, c.annotations.get(labels::CACHE_AWARE)),
        upstreams,
        lora: HashMap::new(),
        rate_limit: None,
        paths: serve_paths(key, c.annotations.get(labels::SERVE_PATHS)),
        health_check: None,
        local: None,
        cold_start_timeout: c.own_cold_start,
        max_concurrency: max_concurrency(key, c.annotations.get(labels::MAX_CONCURRENCY)),
        context_window: c.context_window,
        context_admission: c
            .annotations
            .get(labels::ADMISSION)
            .is_some_and(|v| v.trim() == labels::ADMISSION_CONTEXT_BOUNDED),
        stream_failover: stream_failover(key, c.annotations.get(labels::STREAM_FAILOVER)),
    }
}

/// APIs resumed mid-stream, from the model's `flexinfer.ai/stream-failover`
/// annotation; an unusable value keeps failover off (and says so).
fn stream_failover(key: &str, annotation: Option<&String>) -> crate::resume::StreamFailover {
    let Some(value) = annotation else {
        return Default::default();
    };
    value.parse().unwrap_or_else(|e| {
        tracing::warn!(model = key, error = %e, "ignoring the model's stream-failover annotation");
        Default::default()
    })
}

/// Requests each endpoint takes at once, from the model's
/// `flexinfer.ai/max-concurrency` annotation; an unusable value is
/// ignored (and said so).
fn max_concurrency(key: &str, annotation: Option<&String>) -> Option<u32> {
    let value = annotation?;
    match value.trim().parse::<u32>() {
        Ok(n) if n > 0 => Some(n),
        _ => {
            tracing::warn!(model = key, value = %value, "ignoring {}: not a positive integer", labels::MAX_CONCURRENCY);
            None
        }
    }
}

/// The paths a model serves, from its `flexinfer.ai/serve-paths`
/// annotation; an unusable value keeps the default (and says so).
/// The knobs of cache-aware routing from the model's
/// `flexinfer.ai/cache-aware` annotation; an unusable value keeps the
/// defaults (and says so).
pub(crate) fn cache_aware(key: &str, annotation: Option<&String>) -> CacheAwareOptions {
    let Some(value) = annotation else {
        return CacheAwareOptions::default();
    };
    value.parse().unwrap_or_else(|e| {
        tracing::warn!(model = key, error = %e, "ignoring the model's cache-aware annotation");
        CacheAwareOptions::default()
    })
}

fn serve_paths(key: &str, annotation: Option<&String>) -> PathPolicy {
    PathPolicy::from_annotation(annotation.map(String::as_str)).unwrap_or_else(|e| {
        tracing::warn!(model = key, error = %e, "ignoring the model's serve-paths annotation");
        PathPolicy::Inference
    })
}

fn from_model(m: &Model, scope: &Scope) -> Option<Candidate> {
    let name = m.metadata.name.clone()?;
    let namespace = ns_of(&m.metadata).to_string();
    if !scope.contains(&namespace) || m.metadata.deletion_timestamp.is_some() || m.spec.is_parked()
    {
        return None;
    }
    let annotations = m.metadata.annotations.clone().unwrap_or_default();
    let aliases = m.spec.client_aliases(&name);
    let status = m.status.as_ref();
    let phase = status.and_then(|s| s.phase);
    Some(Candidate {
        aliases,
        spec_labels: m.spec.service_labels.clone(),
        labels: Vec::new(),
        annotations,
        backend_model: m.spec.backend_model_name(),
        ready: phase == Some(ModelPhase::Ready),
        failed: phase == Some(ModelPhase::Failed),
        wanted: matches!(phase, Some(ModelPhase::Loading | ModelPhase::Pending)),
        message: status.and_then(|s| s.message.clone()),
        replicas: 0,
        gpu_group_ref: None,
        cold_start: m.spec.cold_start_timeout(),
        idle_timeout: m.spec.idle_timeout(),
        context_window: m.spec.context_window().and_then(|n| u64::try_from(n).ok()),
        own_cold_start: m.spec.serverless.as_ref().map(|s| s.cold_start_timeout()),
        fallback: fallback(
            status.and_then(|s| s.endpoint.as_deref()),
            &name,
            &namespace,
            &m.spec.backend,
        ),
        kind: TargetKind::Model,
        namespace,
        name,
    })
}

fn from_deployment(d: &ModelDeployment, scope: &Scope) -> Option<Candidate> {
    let name = d.metadata.name.clone()?;
    let namespace = ns_of(&d.metadata).to_string();
    if !scope.contains(&namespace) || d.metadata.deletion_timestamp.is_some() || d.spec.is_parked()
    {
        return None;
    }
    let annotations = d.metadata.annotations.clone().unwrap_or_default();
    let aliases = litellm_aliases(d.spec.litellm.as_ref(), &name);
    let status = d.status.as_ref();
    let phase = status.and_then(|s| s.phase);
    let running =
        d.is_ready() || (d.spec.replicas > 0 && phase == Some(ModelDeploymentPhase::Running));
    Some(Candidate {
        aliases,
        spec_labels: d.spec.service_labels.clone(),
        labels: Vec::new(),
        annotations,
        backend_model: d.spec.model.clone(),
        ready: running,
        failed: phase == Some(ModelDeploymentPhase::Failed),
        wanted: d.spec.replicas > 0,
        message: None,
        replicas: d.spec.replicas,
        gpu_group_ref: d.spec.gpu_group_ref.clone().filter(|g| !g.is_empty()),
        cold_start: d.spec.cold_start_timeout(),
        idle_timeout: d.spec.idle_timeout(),
        context_window: None,
        // `coldStartTimeoutSeconds: 0` means unset.
        own_cold_start: Some(d.spec.cold_start_timeout()).filter(|t| !t.is_zero()),
        fallback: fallback(
            status
                .and_then(|s| s.endpoints.as_ref())
                .and_then(|e| e.internal.as_deref()),
            &name,
            &namespace,
            &d.spec.backend,
        ),
        kind: TargetKind::ModelDeployment,
        namespace,
        name,
    })
}

/// Default port of model servers whose backend is not in the catalog.
pub const DEFAULT_BACKEND_PORT: u16 = 8000;

/// The Service DNS fallback target: `endpoint` (a URL) when given, else
/// `<service>.<namespace>.svc` on the backend's port.
fn fallback(endpoint: Option<&str>, name: &str, namespace: &str, backend: &str) -> (String, u16) {
    if let Some(hp) = endpoint.and_then(super::dns::host_port) {
        return hp;
    }
    let port = flexinfer_crds::backend::get(backend)
        .ok()
        .and_then(|b| u16::try_from(b.port).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_BACKEND_PORT);
    (format!("{}.{namespace}.svc", service_name(name)), port)
}

/// `servedModelName` and `aliases` of a LiteLLM block, trimmed, non-empty,
/// without the resource name and duplicates.
fn litellm_aliases(litellm: Option<&LiteLlmSpec>, name: &str) -> Vec<String> {
    let Some(l) = litellm else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for a in l
        .served_model_name
        .iter()
        .chain(l.aliases.iter())
        .map(|a| a.trim())
    {
        if !a.is_empty() && a != name && !out.iter().any(|o| o == a) {
            out.push(a.to_string());
        }
    }
    out
}

/// The GPUGroup of a ModelDeployment: its `gpuGroupRef` when that group
/// exists, else a group of its namespace listing it as a member.
/// Least wait of a GPUGroup member's queued requests, which may need a
/// swap (the running member drained, then this one loaded): twice its
/// cold-start timeout, and at least two minutes.
pub const GROUP_MEMBER_MIN_WAIT: Duration = Duration::from_secs(120);

fn group_member_wait(cold_start: Duration) -> Duration {
    (cold_start * 2).max(GROUP_MEMBER_MIN_WAIT)
}

fn gpu_group(c: &Candidate, groups: &[Arc<GPUGroup>]) -> Option<String> {
    if c.kind != TargetKind::ModelDeployment {
        return None;
    }
    let in_ns: Vec<&Arc<GPUGroup>> = groups
        .iter()
        .filter(|g| ns_of(&g.metadata) == c.namespace)
        .collect();
    if let Some(r) = &c.gpu_group_ref {
        return in_ns
            .iter()
            .any(|g| g.metadata.name.as_deref() == Some(r))
            .then(|| r.clone());
    }
    in_ns
        .iter()
        .find(|g| {
            g.spec.models.iter().any(|m| {
                m.name == c.name && m.namespace.as_deref().is_none_or(|ns| ns == c.namespace)
            })
        })
        .and_then(|g| g.metadata.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(v: serde_json::Value) -> Arc<Model> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn slice(ns: &str, svc: &str, ip: &str) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("{svc}-x"), "namespace": ns,
                    "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8000}],
                "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]
            }))
            .unwrap(),
        )
    }

    fn spec() -> serde_json::Value {
        json!({"backend": "vllm", "source": "hf://org/m"})
    }

    #[test]
    fn names_follow_namespace_precedence() {
        let mut a = spec();
        a["litellm"] = json!({"aliases": ["chat", "shared"]});
        let mut b = spec();
        b["litellm"] = json!({"aliases": ["shared"]});
        let snap = Snapshot {
            models: vec![
                model(json!({"metadata": {"name": "m", "namespace": "b",
                    "annotations": {"flexinfer.ai/routing": "prefix"}}, "spec": b,
                    "status": {"phase": "Ready"}})),
                model(json!({"metadata": {"name": "m", "namespace": "a"}, "spec": a})),
                model(json!({"metadata": {"name": "solo", "namespace": "b"}, "spec": spec()})),
                model(json!({"metadata": {"name": "hidden", "namespace": "c"}, "spec": spec()})),
            ],
            slices: vec![slice("b", "m", "10.0.0.9")],
            adapters: vec![Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "sql", "namespace": "b"},
                    "spec": {"modelRef": "solo", "adapterName": "sql-v1",
                        "source": {"type": "HuggingFace", "uri": "org/sql"}}
                }))
                .unwrap(),
            )],
            ..Snapshot::default()
        };
        let scope = Scope::from_flags("", &["a".into(), "b".into()], false);
        let out = build(&snap, &scope, &|_, _| Vec::new());
        let names: Vec<&str> = out.iter().map(|m| m.config.name.as_str()).collect();
        assert_eq!(names, ["m", "b/m", "b/solo"]);
        assert_eq!(out[0].config.aliases, ["a/m", "chat", "shared"]);
        assert!(
            out[1].config.aliases.is_empty(),
            "{:?}",
            out[1].config.aliases
        );
        assert_eq!(out[2].config.aliases, ["solo"]);
        assert_eq!(
            out[2].config.lora.get("sql-v1").map(String::as_str),
            Some("sql-v1")
        );
        assert_eq!(out[1].config.strategy, Strategy::Prefix);
        assert_eq!(out[1].phase, Phase::Ready);
        assert_eq!(out[1].config.upstreams.len(), 1);
        assert_eq!(out[0].phase, Phase::Idle);
        assert_eq!(out[0].config.backend_model, "org/m");
    }

    #[test]
    fn the_stream_failover_annotation_names_the_apis_and_nonsense_keeps_it_off() {
        let with = |value: &str| {
            model(
                json!({"metadata": {"name": value.replace([',', ' '], "-"), "namespace": "a",
                "annotations": {"flexinfer.ai/stream-failover": value}}, "spec": spec()}),
            )
        };
        let snap = Snapshot {
            models: vec![with("completions"), with("on"), with("messages")],
            ..Snapshot::default()
        };
        let scope = Scope::from_flags("", &["a".into()], false);
        let out = build(&snap, &scope, &|_, _| Vec::new());
        let failover = |name: &str| {
            out.iter()
                .find(|m| m.config.name == name)
                .map(|m| m.config.stream_failover)
        };
        let completions = failover("completions").expect("model");
        assert!(completions.completions && !completions.chat);
        assert_eq!(failover("on"), Some(crate::resume::StreamFailover::ALL));
        assert!(failover("messages").expect("model").is_off());
    }

    #[test]
    fn shared_service_labels_form_groups_and_single_ones_are_aliases() {
        let labelled = |labels: serde_json::Value| {
            let mut s = spec();
            s["serviceLabels"] = labels;
            s
        };
        let service = |name: &str, active: &str| {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ml",
                    "annotations": {"ai.flexinfer/active-services": active}}}))
                .unwrap(),
            )
        };
        let snap = Snapshot {
            models: vec![
                model(json!({"metadata": {"name": "b", "namespace": "ml"},
                    "spec": labelled(json!(["chat", "code"])), "status": {"phase": "Ready"}})),
                model(json!({"metadata": {"name": "a", "namespace": "ml",
                    "annotations": {"flexinfer.ai/service-labels": "chat, solo"}},
                    "spec": spec()})),
                model(json!({"metadata": {"name": "c", "namespace": "ml"},
                    "spec": labelled(json!(["code"]))})),
                model(json!({"metadata": {"name": "d", "namespace": "ml"},
                    "spec": labelled(json!(["code"]))})),
            ],
            slices: vec![slice("ml", "b", "10.0.0.2")],
            // c's Service says it is the inactive member of a shared group.
            services: vec![service("c", "")],
            ..Snapshot::default()
        };
        let out = build(&snap, &Scope::from_flags("ml", &[], false), &|_, _| {
            Vec::new()
        });
        let by_name = |n: &str| out.iter().find(|m| m.config.name == n).unwrap();
        assert_eq!(by_name("a").group_labels, ["chat"]);
        assert_eq!(by_name("a").config.aliases, ["ml/a", "solo"]);
        assert_eq!(by_name("b").group_labels, ["chat", "code"]);
        assert!(by_name("c").group_labels.is_empty());
        assert_eq!(by_name("d").group_labels, ["code"]);
        let specs = super::super::labels::group_specs(&out);
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].label, "chat");
        assert_eq!(
            specs[0].members,
            [("a".to_string(), false), ("b".to_string(), true)]
        );
        assert_eq!(
            specs[1].members,
            [("b".to_string(), true), ("d".to_string(), false)]
        );
    }

    #[test]
    fn all_namespaces_put_home_first_then_alphabetical() {
        let snap = Snapshot {
            models: ["zeta", "alpha", "ml"]
                .iter()
                .map(|ns| {
                    model(json!({"metadata": {"name": "m", "namespace": ns}, "spec": spec()}))
                })
                .collect(),
            ..Snapshot::default()
        };
        let out = build(&snap, &Scope::from_flags("ml", &[], true), &|_, _| {
            Vec::new()
        });
        let names: Vec<&str> = out.iter().map(|m| m.config.name.as_str()).collect();
        assert_eq!(names, ["m", "alpha/m", "zeta/m"]);
        assert_eq!(out[0].config.aliases, ["ml/m"]);
    }

    #[test]
    fn ready_models_without_slices_fall_back_to_service_dns() {
        let snap = Snapshot {
            models: vec![
                model(
                    json!({"metadata": {"name": "a", "namespace": "ml"}, "spec": spec(),
                    "status": {"phase": "Ready"}}),
                ),
                model(
                    json!({"metadata": {"name": "b", "namespace": "ml"}, "spec": spec(),
                    "status": {"phase": "Ready", "endpoint": "http://b-svc.ml:9000"}}),
                ),
                model(
                    json!({"metadata": {"name": "c", "namespace": "ml"}, "spec": spec(),
                    "status": {"phase": "Ready"}}),
                ),
            ],
            slices: vec![Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "c-1", "namespace": "ml",
                        "labels": {"kubernetes.io/service-name": "c"}},
                    "addressType": "IPv4", "ports": [{"name": "http", "port": 8000}],
                    "endpoints": []
                }))
                .unwrap(),
            )],
            ..Snapshot::default()
        };
        let asked = std::cell::RefCell::new(Vec::new());
        let resolve = |host: &str, port: u16| {
            asked.borrow_mut().push(format!("{host}:{port}"));
            vec![std::net::SocketAddr::from(([10, 0, 0, 7], port))]
        };
        let out = build(&snap, &Scope::from_flags("ml", &[], false), &resolve);
        assert_eq!(*asked.borrow(), ["a.ml.svc:8000", "b-svc.ml:9000"]);
        assert_eq!(out[0].config.upstreams[0].name, "a.ml.svc:8000");
        assert_eq!(out[0].phase, Phase::Ready);
        assert_eq!(out[1].config.upstreams[0].addr.to_string(), "10.0.0.7:9000");
        // A Service whose slices list no ready endpoint is not ready.
        assert!(out[2].config.upstreams.is_empty());
        assert_eq!(out[2].phase, Phase::Loading);
    }

    #[test]
    fn ready_needs_endpoints_and_parked_models_are_hidden() {
        let mut parked = spec();
        parked["litellm"] = json!({"enabled": false});
        let snap = Snapshot {
            models: vec![
                model(
                    json!({"metadata": {"name": "r", "namespace": "default"}, "spec": spec(),
                    "status": {"phase": "Ready"}}),
                ),
                model(json!({"metadata": {"name": "p", "namespace": "default"}, "spec": parked})),
            ],
            ..Snapshot::default()
        };
        let out = build(&snap, &Scope::from_flags("default", &[], false), &|_, _| {
            Vec::new()
        });
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].phase, Phase::Loading);
    }
}
