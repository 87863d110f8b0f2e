//! From everything the watches hold to what the gateway serves and writes:
//! the routing table, the backends (InferencePools and Services) with
//! their endpoints, each Gateway's data-plane Service, and the status of
//! every GatewayClass, Gateway, HTTPRoute and InferencePool of FlexInfer's
//! class. A pure function of its inputs, so every replica computes the
//! same.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use flexinfer_crds::labels;
use flexinfer_crds::RoutingStrategy;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use super::attach::{self, names_gateway, NotAttached};
use super::conditions::{conditions, same, Want};
use super::slots::{self, Slots};
use super::table::{
    Entry, GatewayRoutes, Matcher, PathRule, PickerRoute, RoutingTable, Target, Weighted,
};
use super::types::*;
use crate::config::ModelConfig;
use crate::paths::PathPolicy;
use crate::routing::{Strategy, Upstream};

/// Where the controller stands.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The GatewayClass `controllerName` FlexInfer answers to.
    pub controller_name: String,
    /// Data-plane ports, one per Gateway.
    pub slots: Vec<u16>,
    /// Namespace of the gateway's pods, where each Gateway's Service is.
    pub namespace: String,
    /// Labels of the gateway's pods (the Services' selector).
    pub pod_selector: BTreeMap<String, String>,
}

/// Everything the watches hold.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// GatewayClasses.
    pub classes: Vec<Arc<GatewayClass>>,
    /// Gateways.
    pub gateways: Vec<Arc<Gateway>>,
    /// HTTPRoutes.
    pub routes: Vec<Arc<HTTPRoute>>,
    /// InferencePools.
    pub pools: Vec<Arc<InferencePool>>,
    /// Pods (the pools' endpoints).
    pub pods: Vec<Arc<Pod>>,
    /// Services (backends, pickers, the Gateways' own).
    pub services: Vec<Arc<Service>>,
    /// EndpointSlices (Service backends' endpoints).
    pub slices: Vec<Arc<EndpointSlice>>,
    /// Namespaces (for `from: Selector`).
    pub namespaces: Vec<Arc<Namespace>>,
    /// `Model`s that exist, by the names clients send.
    pub models: BTreeSet<String>,
}

/// The status writes that differ from what the cluster holds.
#[derive(Clone, Debug, Default)]
pub struct Writes {
    /// GatewayClass name → status.
    pub classes: Vec<(String, ConditionsStatus)>,
    /// (namespace, name) → status.
    pub gateways: Vec<(String, String, GatewayStatus)>,
    /// (namespace, name) → status, other controllers' entries kept.
    pub routes: Vec<(String, String, RouteStatus)>,
    /// (namespace, name) → status, other controllers' entries kept.
    pub pools: Vec<(String, String, InferencePoolStatus)>,
    /// Gateways' Services to create or update.
    pub services: Vec<Service>,
    /// Gateways' Services no longer wanted (names in the gateway's namespace).
    pub stale_services: Vec<String>,
}

/// What the gateway serves and writes.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    /// The data plane's routes.
    pub table: RoutingTable,
    /// Backends, as routes of their own store.
    pub backends: Vec<ModelConfig>,
    /// Status and Service writes.
    pub writes: Writes,
}

/// `appProtocol` of pools served over cleartext HTTP/2.
pub const H2C: &str = "kubernetes.io/h2c";

/// Backend key of an InferencePool.
pub fn pool_key(ns: &str, name: &str) -> String {
    format!("inferencepool/{ns}/{name}")
}

/// Backend key of a Service port.
pub fn service_key(ns: &str, name: &str, port: u16) -> String {
    format!("service/{ns}/{name}:{port}")
}

fn ns_of<K: kube::Resource>(k: &K) -> String {
    k.meta()
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// The Gateway a reference of an object in `from_ns` names.
fn gateway_key(reference: &ParentReference, from_ns: &str) -> (String, String) {
    (
        reference
            .namespace
            .clone()
            .unwrap_or_else(|| from_ns.to_string()),
        reference.name.clone(),
    )
}

/// A backend reference after resolution.
enum Resolution {
    Pool(Arc<InferencePool>),
    Service {
        key: String,
        upstreams: Vec<Upstream>,
    },
    Model(String),
    /// Why not: (reason, message).
    Broken(&'static str, String),
}

struct Index<'w> {
    world: &'w World,
    pools: HashMap<(String, String), Arc<InferencePool>>,
    services: HashMap<(String, String), Arc<Service>>,
    ns_labels: HashMap<String, BTreeMap<String, String>>,
}

impl<'w> Index<'w> {
    fn new(world: &'w World) -> Self {
        Index {
            world,
            pools: world
                .pools
                .iter()
                .map(|p| ((ns_of(p.as_ref()), p.name_any()), p.clone()))
                .collect(),
            services: world
                .services
                .iter()
                .map(|s| ((ns_of(s.as_ref()), s.name_any()), s.clone()))
                .collect(),
            ns_labels: world
                .namespaces
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect(),
        }
    }

    fn resolve(&self, backend: &BackendRef, route_ns: &str) -> Resolution {
        let ns = backend
            .namespace
            .clone()
            .unwrap_or_else(|| route_ns.to_string());
        if ns != route_ns {
            return Resolution::Broken(
                "RefNotPermitted",
                format!(
                    "backend {ns}/{}: references to other namespaces (ReferenceGrant) are not supported",
                    backend.name
                ),
            );
        }
        let group = backend.group.as_deref().unwrap_or("");
        let kind = backend.kind.as_deref().unwrap_or("Service");
        match (group, kind) {
            (INFERENCE_GROUP, "InferencePool") => {
                match self.pools.get(&(ns.clone(), backend.name.clone())) {
                    Some(p) => Resolution::Pool(p.clone()),
                    None => Resolution::Broken(
                        "BackendNotFound",
                        format!("InferencePool {ns}/{} not found", backend.name),
                    ),
                }
            }
            ("", "Service") => {
                let Some(port) = backend.port else {
                    return Resolution::Broken(
                        "UnsupportedValue",
                        format!("Service {ns}/{}: a port is required", backend.name),
                    );
                };
                match self.services.get(&(ns.clone(), backend.name.clone())) {
                    Some(svc) => Resolution::Service {
                        key: service_key(&ns, &backend.name, port),
                        upstreams: self.service_endpoints(svc, &ns, port),
                    },
                    None => Resolution::Broken(
                        "BackendNotFound",
                        format!("Service {ns}/{} not found", backend.name),
                    ),
                }
            }
            ("ai.flexinfer", "Model") => {
                let plain = backend.name.clone();
                let qualified = format!("{ns}/{}", backend.name);
                if self.world.models.contains(&qualified) {
                    Resolution::Model(qualified)
                } else if self.world.models.contains(&plain) {
                    Resolution::Model(plain)
                } else {
                    Resolution::Broken(
                        "BackendNotFound",
                        format!(
                            "Model {ns}/{} not found among the models served",
                            backend.name
                        ),
                    )
                }
            }
            _ => Resolution::Broken(
                "InvalidKind",
                format!("backends of kind {kind} in group {group:?} are not supported"),
            ),
        }
    }

    /// The ready endpoints of `svc`'s `port`, from its EndpointSlices.
    fn service_endpoints(&self, svc: &Service, ns: &str, port: u16) -> Vec<Upstream> {
        let name = svc.name_any();
        let port_name = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|ports| ports.iter().find(|p| p.port == i32::from(port)))
            .map(|p| p.name.clone().unwrap_or_default());
        let Some(port_name) = port_name else {
            return Vec::new();
        };
        let mut out = BTreeSet::new();
        for slice in &self.world.slices {
            let owner = slice.labels().get("kubernetes.io/service-name");
            if ns_of(slice.as_ref()) != ns || owner != Some(&name) || slice.address_type == "FQDN" {
                continue;
            }
            let number = slice.ports.iter().flatten().find_map(|p| {
                (p.name.clone().unwrap_or_default() == port_name)
                    .then_some(p.port)
                    .flatten()
            });
            let Some(number) = number.and_then(|n| u16::try_from(n).ok()) else {
                continue;
            };
            for ep in &slice.endpoints {
                let c = ep.conditions.as_ref();
                if !c.and_then(|c| c.ready).unwrap_or(true)
                    || c.and_then(|c| c.terminating).unwrap_or(false)
                {
                    continue;
                }
                if let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) {
                    out.insert(SocketAddr::new(ip, number));
                }
            }
        }
        out.into_iter().map(Upstream::from).collect()
    }

    /// Why a pool's picker reference does not resolve, if it does not.
    fn picker_problem(&self, pool: &InferencePool) -> Option<String> {
        let picker = pool.spec.endpoint_picker_ref.as_ref()?;
        let ns = ns_of(pool);
        let kind = picker.kind.as_deref().unwrap_or("Service");
        if !picker.group.as_deref().unwrap_or("").is_empty() || kind != "Service" {
            return Some(format!("endpoint picker of kind {kind} is not supported"));
        }
        if !self
            .services
            .contains_key(&(ns.clone(), picker.name.clone()))
        {
            return Some(format!(
                "endpoint picker Service {ns}/{} not found",
                picker.name
            ));
        }
        if picker.port.is_none() {
            return Some(format!(
                "endpoint picker Service {ns}/{}: a port is required",
                picker.name
            ));
        }
        None
    }
}

/// A pool's endpoints: every ready, running pod its selector takes, once
/// per target port.
fn pool_endpoints(pool: &InferencePool, pods: &[Arc<Pod>]) -> Vec<Upstream> {
    let ns = ns_of(pool);
    let mut out = BTreeSet::new();
    for pod in pods {
        if ns_of(pod.as_ref()) != ns
            || pod.metadata.deletion_timestamp.is_some()
            || !pool.spec.selector.matches(pod.labels())
        {
            continue;
        }
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<IpAddr>().ok());
        let (true, Some(ip)) = (ready, ip) else {
            continue;
        };
        for port in &pool.spec.target_ports {
            out.insert(SocketAddr::new(ip, port.number));
        }
    }
    out.into_iter().map(Upstream::from).collect()
}

/// A backend's route: the pool's strategy from its `flexinfer.ai/routing`
/// annotation, cache-aware unless it names another.
fn backend_config(
    key: &str,
    annotations: &BTreeMap<String, String>,
    upstreams: Vec<Upstream>,
) -> ModelConfig {
    let strategy = match annotations.get(labels::ROUTING) {
        None => Strategy::CacheAware,
        Some(v) => match RoutingStrategy::from_annotation(Some(v)) {
            RoutingStrategy::ServiceDns => Strategy::Default,
            RoutingStrategy::SessionAffinity => Strategy::SessionAffinity,
            RoutingStrategy::Prefix => Strategy::Prefix,
            RoutingStrategy::LeastLoaded => Strategy::LeastLoaded,
            RoutingStrategy::CacheAware => Strategy::CacheAware,
        },
    };
    ModelConfig {
        name: key.to_string(),
        aliases: Vec::new(),
        backend_model: String::new(),
        strategy,
        bounded_load: None,
        cache_aware: crate::kube::models::cache_aware(key, annotations.get(labels::CACHE_AWARE)),
        upstreams,
        lora: HashMap::new(),
        rate_limit: None,
        paths: PathPolicy::Any,
        health_check: None,
        local: None,
        cold_start_timeout: None,
        max_concurrency: None,
        context_window: None,
        context_admission: false,
        stream_failover: Default::default(),
    }
}

/// Why a pool's requests cannot be served, if they cannot: it names an
/// endpoint picker that does not resolve, with `FailClose` (the default).
/// A `FailOpen` pool is served by FlexInfer's own picker then, as when its
/// picker is unreachable.
fn unserved_reason(pool: &InferencePool, index: &Index) -> Option<String> {
    let picker = pool.spec.endpoint_picker_ref.as_ref()?;
    if picker.failure_mode.as_deref() == Some("FailOpen") {
        return None;
    }
    index.picker_problem(pool)
}

/// A pool's picker as the data plane reaches it: the ready endpoints of
/// its Service's port. `None` without a picker, or when it does not
/// resolve.
fn picker_route(pool: &InferencePool, index: &Index) -> Option<PickerRoute> {
    let picker = pool.spec.endpoint_picker_ref.as_ref()?;
    if index.picker_problem(pool).is_some() {
        return None;
    }
    let ns = ns_of(pool);
    let port = picker.port.as_ref()?.number;
    let svc = index.services.get(&(ns.clone(), picker.name.clone()))?;
    let addrs = index
        .service_endpoints(svc, &ns, port)
        .into_iter()
        .map(|u| u.addr)
        .collect();
    Some(PickerRoute {
        addrs,
        fail_open: picker.failure_mode.as_deref() == Some("FailOpen"),
        pool: Arc::from(format!("{ns}/{}", pool.name_any())),
    })
}

fn matchers(rule: &RouteRule) -> Result<Vec<Matcher>, String> {
    if let Some(filter) = rule.filters.first() {
        return Err(format!(
            "filters are not supported (this rule has {} {})",
            rule.filters.len(),
            filter["type"].as_str().unwrap_or("unnamed")
        ));
    }
    let default = [RouteMatch::default()];
    let matches = if rule.matches.is_empty() {
        &default[..]
    } else {
        &rule.matches[..]
    };
    matches
        .iter()
        .map(|m| {
            let path = m.path.clone().unwrap_or_default();
            let value = path.value.unwrap_or_else(|| "/".into());
            let path = match path.type_.as_deref().unwrap_or("PathPrefix") {
                "PathPrefix" => PathRule::Prefix(value),
                "Exact" => PathRule::Exact(value),
                other => return Err(format!("path match type {other} is not supported")),
            };
            let mut headers = Vec::new();
            for h in &m.headers {
                if h.type_.as_deref().unwrap_or("Exact") != "Exact" {
                    return Err("only Exact header matches are supported".into());
                }
                let name = http::HeaderName::from_bytes(h.name.as_bytes())
                    .map_err(|_| format!("invalid header name {:?}", h.name))?;
                headers.push((name, h.value.clone()));
            }
            let method = match &m.method {
                Some(v) => Some(
                    http::Method::from_bytes(v.as_bytes())
                        .map_err(|_| format!("invalid method {v:?}"))?,
                ),
                None => None,
            };
            Ok(Matcher {
                path,
                headers,
                method,
            })
        })
        .collect()
}

/// Everything FlexInfer serves and writes for `world`.
pub fn compile(world: &World, settings: &Settings) -> Compiled {
    let index = Index::new(world);
    let mut out = Compiled::default();
    let ours: BTreeSet<String> = world
        .classes
        .iter()
        .filter(|c| c.spec.controller_name == settings.controller_name)
        .map(|c| c.name_any())
        .collect();
    for class in world
        .classes
        .iter()
        .filter(|c| ours.contains(&c.name_any()))
    {
        let old = class.status.clone().unwrap_or_default();
        let want = conditions(
            &[Want::yes("Accepted", "Accepted")],
            class.metadata.generation,
            &old.conditions,
        );
        if !same(&want, &old.conditions) {
            out.writes
                .classes
                .push((class.name_any(), ConditionsStatus { conditions: want }));
        }
    }
    let mut gateways: Vec<&Arc<Gateway>> = world
        .gateways
        .iter()
        .filter(|g| {
            ours.contains(&g.spec.gateway_class_name) && g.metadata.deletion_timestamp.is_none()
        })
        .collect();
    gateways.sort_by_key(|g| {
        (
            g.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ns_of(g.as_ref()),
            g.name_any(),
        )
    });
    let by_key: HashMap<(String, String), &Arc<Gateway>> = gateways
        .iter()
        .map(|g| ((ns_of(g.as_ref()), g.name_any()), *g))
        .collect();
    let slots: Slots = slots::assign(&gateways, &world.services, settings);
    out.writes.services = slots.wanted.clone();
    out.writes.stale_services = slots.stale.clone();

    // Routes: entries per Gateway, attachments per listener, route status.
    let mut entries: HashMap<(String, String), Vec<Entry>> = HashMap::new();
    let mut attached: HashMap<(String, String, String), i32> = HashMap::new();
    // Pool → Gateways whose accepted routes use it.
    let mut pool_parents: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
    let mut backends: BTreeMap<String, ModelConfig> = BTreeMap::new();
    let mut unserved: HashMap<Arc<str>, String> = HashMap::new();
    let mut pickers: HashMap<Arc<str>, PickerRoute> = HashMap::new();
    let mut h2c = std::collections::HashSet::new();
    for route in &world.routes {
        let route_ns = ns_of(route.as_ref());
        let route_id: Arc<str> = Arc::from(format!("{route_ns}/{}", route.name_any()));
        let old = route.status.clone().unwrap_or_default();
        let mut ours_status = Vec::new();
        // Resolve the rules once.
        let mut problem: Option<(&'static str, String)> = None;
        let mut rules: Vec<(Vec<Matcher>, Arc<[Weighted]>)> = Vec::new();
        let mut invalid: Option<String> = None;
        let mut pools_used = Vec::new();
        for rule in &route.spec.rules {
            let matchers = match matchers(rule) {
                Ok(m) => m,
                Err(e) => {
                    invalid = Some(e);
                    break;
                }
            };
            let mut weighted = Vec::new();
            for b in &rule.backend_refs {
                let weight = b.weight.unwrap_or(1);
                let target = match index.resolve(b, &route_ns) {
                    Resolution::Pool(pool) => {
                        let key = pool_key(&route_ns, &pool.name_any());
                        pools_used.push((route_ns.clone(), pool.name_any()));
                        if !backends.contains_key(&key) {
                            let mut cfg = backend_config(
                                &key,
                                pool.annotations(),
                                pool_endpoints(&pool, &world.pods),
                            );
                            cfg.name = key.clone();
                            backends.insert(key.clone(), cfg);
                        }
                        if let Some(why) = unserved_reason(&pool, &index) {
                            unserved.insert(Arc::from(key.as_str()), why);
                        }
                        if let Some(picker) = picker_route(&pool, &index) {
                            pickers.insert(Arc::from(key.as_str()), picker);
                        }
                        if pool.spec.app_protocol.as_deref() == Some(H2C) {
                            h2c.insert(Arc::from(key.as_str()));
                        }
                        Target::Backend(Arc::from(key))
                    }
                    Resolution::Service { key, upstreams } => {
                        backends
                            .entry(key.clone())
                            .or_insert_with(|| backend_config(&key, &BTreeMap::new(), upstreams));
                        Target::Backend(Arc::from(key))
                    }
                    Resolution::Model(name) => Target::Model(Arc::from(name)),
                    Resolution::Broken(reason, message) => {
                        problem.get_or_insert((reason, message));
                        Target::Unresolved
                    }
                };
                weighted.push(Weighted { target, weight });
            }
            rules.push((matchers, Arc::from(weighted)));
        }
        for reference in &route.spec.parent_refs {
            if !names_gateway(reference) {
                continue;
            }
            let gw_key = gateway_key(reference, &route_ns);
            let Some(gateway) = by_key.get(&gw_key) else {
                continue;
            };
            let accepted = match &invalid {
                Some(e) => Err(("UnsupportedValue", e.clone())),
                None => attach::attach(gateway, reference, route, index.ns_labels.get(&route_ns))
                    .map_err(|e: NotAttached| (e.reason(), format!("{e:?}"))),
            };
            let mut wanted = Vec::new();
            match &accepted {
                Ok(listeners) => {
                    wanted.push(Want::yes("Accepted", "Accepted"));
                    let list = entries.entry(gw_key.clone()).or_default();
                    for (listener, hosts) in listeners {
                        *attached
                            .entry((gw_key.0.clone(), gw_key.1.clone(), listener.name.clone()))
                            .or_default() += 1;
                        for (i, (matchers, backends)) in rules.iter().enumerate() {
                            for m in matchers {
                                list.push(Entry {
                                    hosts: hosts.clone(),
                                    matcher: m.clone(),
                                    backends: backends.clone(),
                                    order: (
                                        route
                                            .metadata
                                            .creation_timestamp
                                            .as_ref()
                                            .map(|t| t.0.to_string())
                                            .unwrap_or_default(),
                                        route_id.to_string(),
                                        i,
                                    ),
                                    route: route_id.clone(),
                                });
                            }
                        }
                    }
                    for pool in &pools_used {
                        pool_parents
                            .entry(pool.clone())
                            .or_default()
                            .insert(gw_key.clone());
                    }
                }
                Err((reason, message)) => {
                    wanted.push(Want::no("Accepted", reason, message.clone()))
                }
            }
            wanted.push(match &problem {
                Some((reason, message)) => Want::no("ResolvedRefs", reason, message.clone()),
                None => Want::yes("ResolvedRefs", "ResolvedRefs"),
            });
            let previous = old
                .parents
                .iter()
                .find(|p| {
                    p.parent_ref == *reference && p.controller_name == settings.controller_name
                })
                .map(|p| p.conditions.as_slice())
                .unwrap_or_default();
            ours_status.push(RouteParentStatus {
                parent_ref: reference.clone(),
                controller_name: settings.controller_name.clone(),
                conditions: conditions(&wanted, route.metadata.generation, previous),
            });
        }
        let mut parents: Vec<RouteParentStatus> = old
            .parents
            .iter()
            .filter(|p| p.controller_name != settings.controller_name)
            .cloned()
            .collect();
        parents.extend(ours_status);
        if !same_route_parents(&parents, &old.parents) {
            out.writes
                .routes
                .push((route_ns.clone(), route.name_any(), RouteStatus { parents }));
        }
    }

    // Gateways: status and the table.
    for gateway in &gateways {
        let key = (ns_of(gateway.as_ref()), gateway.name_any());
        let old = gateway.status.clone().unwrap_or_default();
        let slot = slots.by_gateway.get(&key);
        let address = slot.and_then(|s| s.address.clone());
        let mut wanted = vec![Want::yes("Accepted", "Accepted")];
        wanted.push(match (slot, &address) {
            (None, _) => Want::no(
                "Programmed",
                "NoResources",
                format!(
                    "every data-plane port ({} in all) serves another Gateway",
                    settings.slots.len()
                ),
            ),
            (Some(_), None) => Want::no(
                "Programmed",
                "AddressNotAssigned",
                "waiting for the Gateway's Service address",
            ),
            (Some(_), Some(_)) => Want::yes("Programmed", "Programmed"),
        });
        let listeners = gateway
            .spec
            .listeners
            .iter()
            .map(|l| {
                let previous = old
                    .listeners
                    .iter()
                    .find(|s| s.name == l.name)
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or_default();
                let served = attach::serves_http(l);
                let kinds_ok = attach::takes_http_routes(l);
                let wanted = if !served {
                    vec![
                        Want::no(
                            "Accepted",
                            "UnsupportedProtocol",
                            format!("protocol {} is not served", l.protocol),
                        ),
                        Want::no("Programmed", "Invalid", "not served"),
                        Want::yes("ResolvedRefs", "ResolvedRefs"),
                    ]
                } else if !kinds_ok {
                    vec![
                        Want::yes("Accepted", "Accepted"),
                        Want::yes("Programmed", "Programmed"),
                        Want::no(
                            "ResolvedRefs",
                            "InvalidRouteKinds",
                            "only HTTPRoute is supported",
                        ),
                    ]
                } else {
                    vec![
                        Want::yes("Accepted", "Accepted"),
                        Want::yes("Programmed", "Programmed"),
                        Want::yes("ResolvedRefs", "ResolvedRefs"),
                    ]
                };
                ListenerStatus {
                    name: l.name.clone(),
                    supported_kinds: if served && kinds_ok {
                        vec![GroupKind {
                            group: Some(GATEWAY_GROUP.into()),
                            kind: "HTTPRoute".into(),
                        }]
                    } else {
                        Vec::new()
                    },
                    attached_routes: attached
                        .get(&(key.0.clone(), key.1.clone(), l.name.clone()))
                        .copied()
                        .unwrap_or(0),
                    conditions: conditions(&wanted, gateway.metadata.generation, previous),
                }
            })
            .collect();
        let status = GatewayStatus {
            addresses: address
                .iter()
                .map(|a| GatewayAddress {
                    type_: Some(
                        if a.parse::<IpAddr>().is_ok() {
                            "IPAddress"
                        } else {
                            "Hostname"
                        }
                        .into(),
                    ),
                    value: a.clone(),
                })
                .collect(),
            conditions: conditions(&wanted, gateway.metadata.generation, &old.conditions),
            listeners,
        };
        if !same_gateway_status(&status, &old) {
            out.writes
                .gateways
                .push((key.0.clone(), key.1.clone(), status));
        }
        if let Some(slot) = slot {
            let gateway_id: Arc<str> = Arc::from(format!("{}/{}", key.0, key.1));
            out.table.by_port.insert(
                slot.port,
                Arc::new(GatewayRoutes {
                    gateway: gateway_id,
                    entries: entries.remove(&key).unwrap_or_default(),
                }),
            );
        }
    }

    // Pools: one parent entry per Gateway of ours that routes to them.
    let our_gateways: BTreeSet<(String, String)> = by_key.keys().cloned().collect();
    for pool in &world.pools {
        let key = (ns_of(pool.as_ref()), pool.name_any());
        let old = pool.status.clone().unwrap_or_default();
        let parents_of = pool_parents.get(&key).cloned().unwrap_or_default();
        let problem = index.picker_problem(pool);
        let mut parents: Vec<PoolParentStatus> = old
            .parents
            .iter()
            .filter(|p| {
                // Entries for Gateways not of this controller stay.
                let gw = gateway_key(&p.parent_ref, &key.0);
                !our_gateways.contains(&gw)
                    && p.controller_name.as_deref() != Some(&settings.controller_name)
            })
            .cloned()
            .collect();
        for (gw_ns, gw_name) in &parents_of {
            let parent_ref = ParentReference {
                group: Some(GATEWAY_GROUP.into()),
                kind: Some("Gateway".into()),
                namespace: Some(gw_ns.clone()),
                name: gw_name.clone(),
                section_name: None,
                port: None,
            };
            let previous = old
                .parents
                .iter()
                .find(|p| {
                    p.parent_ref.name == *gw_name && gateway_key(&p.parent_ref, &key.0).0 == *gw_ns
                })
                .map(|p| p.conditions.as_slice())
                .unwrap_or_default();
            let wanted = [
                Want::yes("Accepted", "Accepted"),
                match &problem {
                    Some(why) => Want::no("ResolvedRefs", "InvalidExtensionRef", why.clone()),
                    None => Want::yes("ResolvedRefs", "ResolvedRefs"),
                },
            ];
            parents.push(PoolParentStatus {
                conditions: conditions(&wanted, pool.metadata.generation, previous),
                parent_ref,
                controller_name: Some(settings.controller_name.clone()),
            });
        }
        if !same_pool_parents(&parents, &old.parents) {
            out.writes.pools.push((
                key.0.clone(),
                key.1.clone(),
                InferencePoolStatus { parents },
            ));
        }
    }
    out.table.unserved = unserved;
    out.table.pickers = pickers;
    out.table.h2c = h2c;
    out.backends = backends.into_values().collect();
    out
}

fn same_route_parents(a: &[RouteParentStatus], b: &[RouteParentStatus]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.parent_ref == y.parent_ref
                && x.controller_name == y.controller_name
                && same(&x.conditions, &y.conditions)
        })
}

fn same_pool_parents(a: &[PoolParentStatus], b: &[PoolParentStatus]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.parent_ref == y.parent_ref
                && x.controller_name == y.controller_name
                && same(&x.conditions, &y.conditions)
        })
}

fn same_gateway_status(a: &GatewayStatus, b: &GatewayStatus) -> bool {
    a.addresses == b.addresses
        && same(&a.conditions, &b.conditions)
        && a.listeners.len() == b.listeners.len()
        && a.listeners.iter().zip(&b.listeners).all(|(x, y)| {
            x.name == y.name
                && x.supported_kinds == y.supported_kinds
                && x.attached_routes == y.attached_routes
                && same(&x.conditions, &y.conditions)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn settings() -> Settings {
        Settings {
            controller_name: crate::gatewayapi::CONTROLLER_NAME.into(),
            slots: vec![9100, 9101],
            namespace: "flexinfer".into(),
            pod_selector: BTreeMap::from([("app".into(), "gw".into())]),
        }
    }

    fn pod(name: &str, ip: &str, ready: bool) -> Arc<Pod> {
        obj(
            json!({"metadata": {"name": name, "namespace": "apps", "labels": {"app": "llm"}},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}}),
        )
    }

    fn world(route_backend: &str) -> World {
        World {
            classes: vec![
                obj(
                    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                    "metadata": {"name": "flexinfer", "generation": 1},
                    "spec": {"controllerName": crate::gatewayapi::CONTROLLER_NAME}}),
                ),
                obj(
                    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                    "metadata": {"name": "other"}, "spec": {"controllerName": "example.com/other"}}),
                ),
            ],
            gateways: vec![obj(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": "infra", "generation": 3},
                "spec": {"gatewayClassName": "flexinfer", "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP",
                     "allowedRoutes": {"namespaces": {"from": "All"}}}]}}),
            )],
            routes: vec![obj(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "r", "namespace": "apps", "generation": 2},
                "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}],
                    "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                        "backendRefs": [{"group": "inference.networking.k8s.io",
                            "kind": "InferencePool", "name": route_backend}]}]}}),
            )],
            pools: vec![obj(
                json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                "metadata": {"name": "pool", "namespace": "apps", "generation": 1},
                "spec": {"selector": {"matchLabels": {"app": "llm"}},
                    "targetPorts": [{"number": 8000}, {"number": 8001}]},
                "status": {"parents": [{"parentRef": {"group": "gateway.networking.k8s.io",
                    "kind": "Gateway", "namespace": "elsewhere", "name": "theirs"},
                    "controllerName": "example.com/other",
                    "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}}),
            )],
            pods: vec![pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", false)],
            ..World::default()
        }
    }

    /// The status of the first write for `name` in `list`.
    fn written<'a, S>(list: &'a [(String, String, S)], name: &str) -> Option<&'a S> {
        list.iter().find(|(_, n, _)| n == name).map(|(_, _, s)| s)
    }

    fn condition<'a>(
        conds: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
        t: &str,
    ) -> (&'a str, &'a str, Option<i64>) {
        let c = conds.iter().find(|c| c.type_ == t).unwrap();
        (c.status.as_str(), c.reason.as_str(), c.observed_generation)
    }

    #[test]
    fn a_route_to_a_pool_is_served_and_every_status_says_so() {
        let out = compile(&world("pool"), &settings());
        assert_eq!(out.writes.classes.len(), 1, "only our class is written");
        assert_eq!(out.writes.classes[0].0, "flexinfer");
        let gw = written(&out.writes.gateways, "gw").unwrap();
        assert_eq!(
            condition(&gw.conditions, "Accepted"),
            ("True", "Accepted", Some(3))
        );
        // No Service address yet: not programmed.
        assert_eq!(condition(&gw.conditions, "Programmed").0, "False");
        assert_eq!(gw.listeners[0].attached_routes, 1);
        let route = written(&out.writes.routes, "r").unwrap();
        assert_eq!(route.parents.len(), 1);
        assert_eq!(
            condition(&route.parents[0].conditions, "Accepted"),
            ("True", "Accepted", Some(2))
        );
        assert_eq!(
            condition(&route.parents[0].conditions, "ResolvedRefs").0,
            "True"
        );
        let pool = written(&out.writes.pools, "pool").unwrap();
        assert_eq!(
            pool.parents.len(),
            2,
            "the other controller's entry is kept"
        );
        let ours = pool
            .parents
            .iter()
            .find(|p| p.parent_ref.name == "gw")
            .unwrap();
        assert_eq!(ours.parent_ref.namespace.as_deref(), Some("infra"));
        assert_eq!(condition(&ours.conditions, "Accepted").0, "True");
        // The data plane: the Gateway on its slot, the pool's ready pod on
        // both target ports, cache-aware.
        let routes = out.table.gateway(9100).expect("first slot");
        let found = routes
            .find(
                "any",
                &http::Method::POST,
                "/v1/chat/completions",
                &http::HeaderMap::new(),
            )
            .unwrap();
        assert_eq!(
            found.backends[0].target,
            Target::Backend(Arc::from("inferencepool/apps/pool"))
        );
        assert!(routes
            .find("any", &http::Method::GET, "/v2", &http::HeaderMap::new())
            .is_none());
        let backend = &out.backends[0];
        assert_eq!(backend.strategy, Strategy::CacheAware);
        let addrs: Vec<String> = backend
            .upstreams
            .iter()
            .map(|u| u.addr.to_string())
            .collect();
        assert_eq!(addrs, ["10.0.0.1:8000", "10.0.0.1:8001"]);
        assert_eq!(out.writes.services.len(), 1);
    }

    #[test]
    fn a_missing_pool_is_backend_not_found_and_a_gone_route_leaves_the_pool() {
        let mut w = world("nope");
        let out = compile(&w, &settings());
        let route = written(&out.writes.routes, "r").unwrap();
        assert_eq!(
            condition(&route.parents[0].conditions, "Accepted").0,
            "True"
        );
        assert_eq!(
            condition(&route.parents[0].conditions, "ResolvedRefs"),
            ("False", "BackendNotFound", Some(2))
        );
        // The pool had an entry of ours (from an earlier route): it goes, the other stays.
        let mut pool = (*w.pools[0]).clone();
        let mut ours = pool.status.as_ref().unwrap().parents[0].clone();
        ours.parent_ref.namespace = Some("infra".into());
        ours.parent_ref.name = "gw".into();
        ours.controller_name = Some(crate::gatewayapi::CONTROLLER_NAME.into());
        pool.status.as_mut().unwrap().parents.push(ours);
        w.pools = vec![Arc::new(pool)];
        w.routes.clear();
        let out = compile(&w, &settings());
        let pool = written(&out.writes.pools, "pool").expect("the pool's parents are rewritten");
        assert_eq!(pool.parents.len(), 1);
        assert_eq!(pool.parents[0].parent_ref.name, "theirs");
    }

    #[test]
    fn status_already_written_is_not_written_again() {
        let w = world("pool");
        let first = compile(&w, &settings());
        let mut w2 = w.clone();
        let mut route = (*w.routes[0]).clone();
        route.status = Some(first.writes.routes[0].2.clone());
        w2.routes = vec![Arc::new(route.clone())];
        assert!(compile(&w2, &settings()).writes.routes.is_empty());
        // A new generation is a new status (observedGeneration).
        route.metadata.generation = Some(3);
        w2.routes = vec![Arc::new(route)];
        let again = compile(&w2, &settings());
        let r = written(&again.writes.routes, "r").unwrap();
        assert_eq!(condition(&r.parents[0].conditions, "Accepted").2, Some(3));
    }

    #[test]
    fn picker_modes_decide_whether_a_pool_is_served_and_filters_are_refused() {
        let with_picker = |w: &mut World, mode: Option<&str>| {
            let mut pool = (*w.pools[0]).clone();
            pool.spec.endpoint_picker_ref = Some(EndpointPickerRef {
                name: "epp".into(),
                failure_mode: mode.map(str::to_string),
                ..EndpointPickerRef::default()
            });
            w.pools = vec![Arc::new(pool)];
        };
        let key: Arc<str> = Arc::from("inferencepool/apps/pool");
        // FailClose (the default), picker Service missing: unserved, and
        // the pool says why.
        let mut w = world("pool");
        with_picker(&mut w, None);
        let out = compile(&w, &settings());
        assert!(
            out.table.unserved[&key].contains("not found"),
            "{:?}",
            out.table.unserved
        );
        let pool = written(&out.writes.pools, "pool").unwrap();
        let ours = pool
            .parents
            .iter()
            .find(|p| p.parent_ref.name == "gw")
            .unwrap();
        assert_eq!(
            condition(&ours.conditions, "ResolvedRefs").1,
            "InvalidExtensionRef"
        );
        // The Service exists: still unserved with FailClose (no external
        // picker is called), served by FlexInfer's picker with FailOpen.
        w.services = vec![obj(
            json!({"metadata": {"name": "epp", "namespace": "apps"},
            "spec": {"ports": [{"name": "grpc", "port": 9002}]}}),
        )];
        w.slices = vec![obj(
            json!({"metadata": {"name": "epp-1", "namespace": "apps",
                "labels": {"kubernetes.io/service-name": "epp"}},
            "addressType": "IPv4", "ports": [{"name": "grpc", "port": 9002}],
            "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true}}]}),
        )];
        let mut pool = (*w.pools[0]).clone();
        pool.spec.endpoint_picker_ref.as_mut().unwrap().port = Some(PoolPort { number: 9002 });
        w.pools = vec![Arc::new(pool)];
        let out = compile(&w, &settings());
        assert!(out.table.unserved.is_empty(), "{:?}", out.table.unserved);
        let picker = &out.table.pickers[&key];
        assert_eq!(picker.addrs, vec!["10.0.0.7:9002".parse().unwrap()]);
        assert!(!picker.fail_open);
        // FailOpen, without a port: no picker to ask, FlexInfer's serves.
        with_picker(&mut w, Some("FailOpen"));
        let out = compile(&w, &settings());
        assert!(out.table.unserved.is_empty());
        assert!(out.table.pickers.is_empty());
        // A rule with a filter is not accepted.
        let mut w = world("pool");
        let mut route = (*w.routes[0]).clone();
        route.spec.rules[0].filters = vec![json!({"type": "RequestHeaderModifier"})];
        w.routes = vec![Arc::new(route)];
        let out = compile(&w, &settings());
        let r = written(&out.writes.routes, "r").unwrap();
        assert_eq!(
            condition(&r.parents[0].conditions, "Accepted").1,
            "UnsupportedValue"
        );
        assert!(out.table.gateway(9100).unwrap().entries.is_empty());
    }
}
