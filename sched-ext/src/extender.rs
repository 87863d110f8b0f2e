//! The extender's two calls, from request bytes to response bytes.
//!
//! This is the glue between the wire format ([`crate::api`]), the pure
//! decisions ([`crate::filter`], [`crate::score`], [`crate::normalize`])
//! and the cluster state sources ([`TpsSource`], [`NodeSource`],
//! [`TenantUsage`]). It never panics on request input: a request that
//! cannot be answered yields a filter result with `Error` set, or a
//! [`RequestError`] for prioritize (which has no error field).
//!
//! Pods that neither ask for a GPU nor carry the `flexinfer.ai/model` or
//! `flexinfer.ai/backend` annotation are not the extender's business: they
//! pass every node and get the same score (0) everywhere.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::api::{ExtenderFilterResult, HostPriority};
use crate::facts::{NodeFacts, PodFacts};
use crate::filter::{self, Rejection};
use crate::metrics::{Metrics, Verb};
use crate::normalize::normalize;
use crate::response::FilterResponse;
use crate::scan::{self, KnownNodes, ScannedView};
use crate::score::{raw_score, ScoreInputs, Weights};
use crate::tenant::{self, FairShare, NoTenantUsage, TenantUsage};
use crate::tps::{TpsLookup, TpsSource};

/// Read access to Node objects by name, for requests that carry only
/// `NodeNames` (extender configured `nodeCacheCapable: true`).
pub trait NodeSource: Send + Sync {
    /// The node called `name`, if known.
    fn node(&self, name: &str) -> Option<Arc<Node>>;
}

/// A fixed set of nodes, for tests, benchmarks and running without a
/// cluster.
#[derive(Debug, Default, Clone)]
pub struct StaticNodeSource(std::collections::HashMap<String, Arc<Node>>);

impl StaticNodeSource {
    /// Holds `nodes`, keyed by name.
    pub fn new(nodes: impl IntoIterator<Item = Node>) -> Self {
        StaticNodeSource(
            nodes
                .into_iter()
                .map(|node| {
                    (
                        node.metadata.name.clone().unwrap_or_default(),
                        Arc::new(node),
                    )
                })
                .collect(),
        )
    }
}

impl NodeSource for StaticNodeSource {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.0.get(name).cloned()
    }
}

/// Why a call could not be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The body is not `ExtenderArgs` JSON.
    Body(String),
    /// The request has no pod.
    NoPod,
    /// The request has neither `Nodes` nor `NodeNames`.
    NoNodes,
    /// The request has only `NodeNames` and the extender keeps no node
    /// cache.
    NoNodeCache,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Body(err) => write!(f, "failed to decode ExtenderArgs: {err}"),
            RequestError::NoPod => f.write_str("ExtenderArgs has no Pod"),
            RequestError::NoNodes => f.write_str("ExtenderArgs has neither Nodes nor NodeNames"),
            RequestError::NoNodeCache => f.write_str(
                "ExtenderArgs has only NodeNames but the extender keeps no node cache \
                 (start it with --node-cache=true or set nodeCacheCapable: false)",
            ),
        }
    }
}

impl std::error::Error for RequestError {}

/// Settings of the decisions.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Score weights.
    pub weights: Weights,
    /// Tenant fair share.
    pub fair_share: FairShare,
    /// Name of the global benchmark ConfigMap.
    pub benchmark_config_map: String,
}

/// A decoded `ExtenderArgs`: the pod's facts, and the candidates either as
/// raw node objects or as names.
struct Request<'a> {
    pod: PodFacts,
    nodes: Option<Vec<scan::ScannedNode<'a>>>,
    node_names: Option<Vec<String>>,
}

impl<'a> Request<'a> {
    fn parse(body: &'a [u8], known: &KnownNodes, metrics: &Metrics) -> Result<Self, RequestError> {
        let spans = scan::args_with(body, Some(known))
            .map_err(|err| RequestError::Body(err.to_string()))?;
        if let Some(nodes) = &spans.nodes {
            let known = nodes
                .iter()
                .filter(|node| matches!(node.view, ScannedView::Known(_)))
                .count();
            metrics.observe_node_reads(nodes.len() - known, known);
        }
        let pod: Option<Pod> = spans
            .pod
            .map(serde_json::from_str)
            .transpose()
            .map_err(|err| RequestError::Body(format!("Pod: {err}")))?
            .flatten();
        let pod = PodFacts::from_pod(pod.as_ref().ok_or(RequestError::NoPod)?);
        let node_names: Option<Vec<String>> = spans
            .node_names
            .map(serde_json::from_str)
            .transpose()
            .map_err(|err| RequestError::Body(format!("NodeNames: {err}")))?
            .flatten();
        Ok(Request {
            pod,
            nodes: spans.nodes,
            node_names,
        })
    }
}

/// Answers filter and prioritize calls.
pub struct Extender {
    settings: Settings,
    tps: Arc<dyn TpsSource>,
    nodes: Option<Arc<dyn NodeSource>>,
    tenants: Arc<dyn TenantUsage>,
    known: KnownNodes,
    metrics: Metrics,
}

impl Extender {
    /// An extender reading benchmark results from `tps`, without a node
    /// cache and without pod usage.
    pub fn new(settings: Settings, tps: Arc<dyn TpsSource>) -> Self {
        Extender {
            settings,
            tps,
            nodes: None,
            tenants: Arc::new(NoTenantUsage),
            known: KnownNodes::default(),
            metrics: Metrics::new(),
        }
    }

    /// Answers `NodeNames` requests from `nodes`.
    pub fn with_nodes(mut self, nodes: Arc<dyn NodeSource>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// Remembers the metadata of at most `capacity` nodes between requests
    /// (see [`KnownNodes`]; 0 reads every node of every request).
    pub fn with_known_nodes(mut self, capacity: usize) -> Self {
        self.known = KnownNodes::new(capacity);
        self
    }

    /// Reads tenant GPU use from `tenants`.
    pub fn with_tenants(mut self, tenants: Arc<dyn TenantUsage>) -> Self {
        self.tenants = tenants;
        self
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Answers a filter call: always an `ExtenderFilterResult` JSON, with
    /// `Error` set when the request could not be answered.
    pub fn filter(&self, body: &[u8]) -> Vec<u8> {
        self.filter_response(body).to_vec(body)
    }

    /// Answers a filter call like [`Self::filter`], leaving the passing
    /// nodes in `body` (see [`FilterResponse`]).
    pub fn filter_response(&self, body: &[u8]) -> FilterResponse {
        let start = Instant::now();
        let outcome = self.filter_body(body);
        let ok = outcome.is_ok();
        let response = outcome.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "filter request failed");
            FilterResponse::owned(
                ExtenderFilterResult {
                    error: err.to_string(),
                    ..Default::default()
                }
                .to_json(),
            )
        });
        self.metrics
            .observe_request(Verb::Filter, ok, start.elapsed());
        response
    }

    /// Answers a prioritize call with a `HostPriorityList` JSON.
    pub fn prioritize(&self, body: &[u8]) -> Result<Vec<u8>, RequestError> {
        let start = Instant::now();
        let outcome = self.prioritize_body(body);
        if let Err(err) = &outcome {
            tracing::warn!(error = %err, "prioritize request failed");
        }
        self.metrics
            .observe_request(Verb::Prioritize, outcome.is_ok(), start.elapsed());
        outcome
    }

    fn filter_body(&self, body: &[u8]) -> Result<FilterResponse, RequestError> {
        let request = Request::parse(body, &self.known, &self.metrics)?;
        let pod = &request.pod;
        let mut result = ExtenderFilterResult::default();
        let mut rejections: Vec<&'static str> = Vec::new();
        let mut reject =
            |result: &mut ExtenderFilterResult<'_>, name: &str, rejection: Rejection| {
                tracing::debug!(pod = %pod.name, node = name, reason = %rejection, "node rejected");
                rejections.push(rejection.metric_label());
                let failed = if rejection.resolvable_by_preemption() {
                    &mut result.failed_nodes
                } else {
                    &mut result.failed_and_unresolvable_nodes
                };
                failed.insert(name.to_owned(), rejection.to_string());
            };

        let passed;
        if let Some(items) = &request.nodes {
            let mut passing = Vec::with_capacity(items.len());
            if pod.wants_gpu() {
                for item in items {
                    let node = NodeFacts::from_view(&item.view);
                    match filter::check(pod, &node) {
                        Ok(()) => passing.push(item.raw),
                        Err(rejection) => reject(&mut result, node.name, rejection),
                    }
                }
            } else {
                passing.extend(items.iter().map(|item| item.raw));
            }
            passed = passing.len();
            result.nodes = Some(passing);
        } else if let Some(names) = &request.node_names {
            let mut passing = Vec::with_capacity(names.len());
            if !pod.wants_gpu() {
                // Nothing to check: no node lookups needed.
                passing.extend(names.iter().map(String::as_str));
                passed = passing.len();
                result.node_names = Some(passing);
                self.metrics.observe_filter(passed, &rejections);
                return Ok(result.encode(body));
            }
            let store = self.nodes.as_ref().ok_or(RequestError::NoNodeCache)?;
            for name in names {
                let Some(node) = store.node(name) else {
                    reject(&mut result, name, Rejection::UnknownNode);
                    continue;
                };
                match filter::check(pod, &NodeFacts::from_node(&node)) {
                    Ok(()) => passing.push(name.as_str()),
                    Err(rejection) => reject(&mut result, name, rejection),
                }
            }
            passed = passing.len();
            result.node_names = Some(passing);
        } else {
            return Err(RequestError::NoNodes);
        }

        self.metrics.observe_filter(passed, &rejections);
        tracing::debug!(
            pod = %pod.name,
            namespace = %pod.namespace,
            passed,
            rejected = rejections.len(),
            "filtered"
        );
        Ok(result.encode(body))
    }

    fn prioritize_body(&self, body: &[u8]) -> Result<Vec<u8>, RequestError> {
        let request = Request::parse(body, &self.known, &self.metrics)?;
        let pod = &request.pod;

        let cached: Vec<Option<Arc<Node>>>;
        let nodes: Vec<Option<NodeFacts>> = if let Some(items) = &request.nodes {
            items
                .iter()
                .map(|item| Some(NodeFacts::from_view(&item.view)))
                .collect()
        } else if let Some(names) = &request.node_names {
            if !pod.is_model_workload() {
                let flat: Vec<HostPriority> = names
                    .iter()
                    .map(|name| HostPriority {
                        host: name.clone(),
                        score: 0,
                    })
                    .collect();
                return serde_json::to_vec(&flat)
                    .map_err(|err| RequestError::Body(err.to_string()));
            }
            let store = self.nodes.as_ref().ok_or(RequestError::NoNodeCache)?;
            cached = names.iter().map(|name| store.node(name)).collect();
            cached
                .iter()
                .map(|node| node.as_deref().map(NodeFacts::from_node))
                .collect()
        } else {
            return Err(RequestError::NoNodes);
        };
        let host = |index: usize, node: &Option<NodeFacts>| match node {
            Some(node) => node.name.to_owned(),
            None => request
                .node_names
                .as_ref()
                .and_then(|names| names.get(index))
                .cloned()
                .unwrap_or_default(),
        };

        let scores = if pod.is_model_workload() {
            self.scores(pod, &nodes)
        } else {
            vec![0; nodes.len()]
        };
        let priorities: Vec<HostPriority> = nodes
            .iter()
            .enumerate()
            .zip(scores)
            .map(|((index, node), score)| HostPriority {
                host: host(index, node),
                score,
            })
            .collect();
        serde_json::to_vec(&priorities).map_err(|err| RequestError::Body(err.to_string()))
    }

    /// Normalised scores of `pod` on `nodes`; unknown nodes get 0.
    fn scores(&self, pod: &PodFacts, nodes: &[Option<NodeFacts>]) -> Vec<i64> {
        let settings = &self.settings;
        let headroom = match tenant::share(&settings.fair_share, self.tenants.as_ref(), pod) {
            Some(share) => {
                let tenant = settings.fair_share.tenant_of(pod);
                self.metrics.observe_tenant(
                    &pod.namespace,
                    tenant,
                    share.usage_ratio,
                    share.headroom * settings.weights.tenant_fair_share,
                );
                share.headroom
            }
            None => 0.0,
        };
        let mut tps = TpsLookup::new(self.tps.as_ref(), pod, &settings.benchmark_config_map);
        let raw: Vec<f64> = nodes
            .iter()
            .map(|node| match node {
                Some(node) => {
                    let inputs = ScoreInputs::for_node(node, tps.tps(node), headroom);
                    raw_score(&inputs, &settings.weights)
                }
                None => f64::NAN,
            })
            .collect();
        let scores = normalize(&raw);
        if tracing::enabled!(tracing::Level::DEBUG) {
            for (node, (raw, score)) in nodes.iter().zip(raw.iter().zip(&scores)) {
                if let Some(node) = node {
                    tracing::debug!(pod = %pod.name, node = node.name, raw, score, "scored");
                }
            }
        }
        scores
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tps::{benchmark_key, device_class, StaticTpsSource};
    use serde_json::{json, Value};

    fn extender(tps: StaticTpsSource) -> Extender {
        Extender::new(
            Settings {
                benchmark_config_map: "flexinfer-benchmark-results".into(),
                ..Default::default()
            },
            Arc::new(tps),
        )
    }

    fn gpu_pod() -> Value {
        json!({
            "metadata": {
                "name": "qwen-0", "namespace": "ml", "uid": "u",
                "annotations": {
                    "flexinfer.ai/model": "qwen",
                    "flexinfer.ai/backend": "vllm",
                    "flexinfer.ai/gpu.vram-estimate-mb": "16000"
                }
            },
            "spec": {"containers": [{"name": "server", "resources": {"limits": {"amd.com/gpu": "1"}}}]}
        })
    }

    fn node(name: &str, labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels, "annotations": annotations},
               "status": {"capacity": {"amd.com/gpu": "1"}}})
    }

    fn nodes() -> Vec<Value> {
        vec![
            node("cpu-only", json!({"kubernetes.io/os": "linux"}), json!({})),
            node(
                "small",
                json!({"flexinfer.ai/gpu.vendor": "AMD", "flexinfer.ai/gpu.arch": "gfx1100"}),
                json!({"flexinfer.ai/gpu-free-memory": "8000"}),
            ),
            node(
                "maxwell",
                json!({"flexinfer.ai/gpu.vendor": "NVIDIA", "flexinfer.ai/gpu.arch": "sm_52"}),
                json!({}),
            ),
            node(
                "big",
                json!({"flexinfer.ai/gpu.vendor": "AMD", "flexinfer.ai/gpu.arch": "gfx1100",
                       "flexinfer.ai/gpu.vram": "24Gi", "flexinfer.ai/gpu.count": "1"}),
                json!({"flexinfer.ai/gpu-free-memory": "20000"}),
            ),
        ]
    }

    fn filter(ext: &Extender, request: Value) -> Value {
        serde_json::from_slice(&ext.filter(request.to_string().as_bytes())).unwrap()
    }

    #[test]
    fn filter_echoes_passing_nodes_and_reports_reasons() {
        let ext = extender(StaticTpsSource::default());
        let result = filter(
            &ext,
            json!({"Pod": gpu_pod(), "Nodes": {"metadata": {}, "items": nodes()}, "NodeNames": null}),
        );
        let items = result["Nodes"]["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0], nodes()[3], "passing nodes are echoed verbatim");
        assert_eq!(
            result["FailedNodes"],
            json!({"small": "Insufficient VRAM: have 8000MB need 16000MB"})
        );
        assert_eq!(
            result["FailedAndUnresolvableNodes"],
            json!({
                "cpu-only": "No vendor label: node has no flexinfer.ai/gpu.vendor label",
                "maxwell": "Unsupported arch: backend vllm unsupported on GPU arch sm_52"
            })
        );
        assert_eq!(result["Error"], "");
        assert_eq!(result["NodeNames"], Value::Null);
        let metrics = ext.metrics().render();
        assert!(metrics
            .contains(r#"flexinfer_scheduler_rejections_total{reason="insufficient_vram"} 1"#));
        assert!(
            metrics.contains(r#"flexinfer_scheduler_rejections_total{reason="no_vendor_label"} 1"#)
        );
        assert!(metrics
            .contains(r#"flexinfer_scheduler_rejections_total{reason="unsupported_arch"} 1"#));
    }

    #[test]
    fn cpu_pods_with_node_names_need_no_node_cache() {
        let ext = extender(StaticTpsSource::default());
        let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}});
        let result = filter(&ext, json!({"Pod": pod, "NodeNames": ["a", "b"]}));
        assert_eq!(result["NodeNames"], json!(["a", "b"]));
        assert_eq!(result["Error"], "");
        let body = json!({"Pod": pod, "NodeNames": ["a"]}).to_string();
        let priorities: Value =
            serde_json::from_slice(&ext.prioritize(body.as_bytes()).unwrap()).unwrap();
        assert_eq!(priorities, json!([{"Host": "a", "Score": 0}]));
    }

    #[test]
    fn cpu_pods_pass_every_node() {
        let ext = extender(StaticTpsSource::default());
        let pod = json!({"metadata": {"name": "web", "namespace": "default"},
                         "spec": {"containers": [{"name": "c"}]}});
        let result = filter(&ext, json!({"Pod": pod, "Nodes": {"items": nodes()}}));
        assert_eq!(result["Nodes"]["items"].as_array().unwrap().len(), 4);
        assert_eq!(result["FailedNodes"], json!({}));
    }

    #[test]
    fn bad_requests_fill_the_error_field() {
        let ext = extender(StaticTpsSource::default());
        for (body, message) in [
            (&b"{not json"[..], "failed to decode ExtenderArgs"),
            (b"{\"Nodes\":{\"items\":[]}}", "ExtenderArgs has no Pod"),
            (
                b"{\"Pod\":{}}",
                "ExtenderArgs has neither Nodes nor NodeNames",
            ),
            (
                br#"{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"amd.com/gpu":"1"}}}]}},"NodeNames":["a"]}"#,
                "keeps no node cache",
            ),
            (b"[1,2]", "failed to decode ExtenderArgs"),
            (b"", "failed to decode ExtenderArgs"),
        ] {
            let result: Value = serde_json::from_slice(&ext.filter(body)).unwrap();
            let error = result["Error"].as_str().unwrap();
            assert!(error.contains(message), "{error}");
            assert!(ext.prioritize(body).is_err());
        }
        // A node item of the wrong shape fails the call, it does not panic.
        let result = filter(
            &ext,
            json!({"Pod": gpu_pod(), "Nodes": {"items": [{"metadata": 5}]}}),
        );
        assert!(result["Error"]
            .as_str()
            .unwrap()
            .contains("expected an object"));
        assert!(ext
            .metrics()
            .render()
            .contains(r#"result="error",verb="filter""#));
    }

    fn cache() -> Arc<StaticNodeSource> {
        Arc::new(StaticNodeSource::new(
            nodes()
                .into_iter()
                .map(|n| serde_json::from_value::<Node>(n).unwrap()),
        ))
    }

    #[test]
    fn node_names_are_resolved_through_the_node_cache() {
        let ext = extender(StaticTpsSource::default()).with_nodes(cache());
        let result = filter(
            &ext,
            json!({"Pod": gpu_pod(), "NodeNames": ["big", "small", "ghost"]}),
        );
        assert_eq!(result["NodeNames"], json!(["big"]));
        assert_eq!(result["Nodes"], Value::Null);
        assert_eq!(
            result["FailedNodes"]["small"],
            "Insufficient VRAM: have 8000MB need 16000MB"
        );
        assert_eq!(
            result["FailedAndUnresolvableNodes"]["ghost"],
            "Unknown node: not in the extender's node cache"
        );

        let body = json!({"Pod": gpu_pod(), "NodeNames": ["big", "ghost"]}).to_string();
        let priorities: Value =
            serde_json::from_slice(&ext.prioritize(body.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            priorities,
            json!([{"Host": "big", "Score": 10}, {"Host": "ghost", "Score": 0}])
        );
    }

    #[test]
    fn prioritize_ranks_by_tps_then_free_vram() {
        let fast = node(
            "fast",
            json!({"flexinfer.ai/gpu.vendor": "AMD", "flexinfer.ai/gpu.arch": "gfx1100",
                   "flexinfer.ai/gpu.vram": "24Gi", "flexinfer.ai/gpu.count": "1", "flexinfer.ai/gpu.int4": "true"}),
            json!({"flexinfer.ai/gpu-free-memory": "12288", "flexinfer.ai/gpu.util": "10"}),
        );
        let slow = node(
            "slow",
            json!({"flexinfer.ai/gpu.vendor": "AMD", "flexinfer.ai/gpu.arch": "gfx906",
                   "flexinfer.ai/gpu.vram": "16Gi", "flexinfer.ai/gpu.count": "1", "flexinfer.ai/gpu.int4": "true"}),
            json!({"flexinfer.ai/gpu-free-memory": "16384"}),
        );
        let hot = node(
            "hot",
            json!({"flexinfer.ai/gpu.vendor": "AMD", "flexinfer.ai/gpu.arch": "gfx1100",
                   "flexinfer.ai/gpu.vram": "24Gi", "flexinfer.ai/gpu.count": "1", "flexinfer.ai/gpu.int4": "true"}),
            json!({"flexinfer.ai/gpu-free-memory": "12288", "flexinfer.ai/gpu.util": "10",
                   "flexinfer.ai/kv-cache-usage": "1.0"}),
        );
        let class = |labels: &Value| {
            let get = |k: &str| labels[k].as_str();
            device_class(&NodeFacts {
                vendor: get("flexinfer.ai/gpu.vendor"),
                arch: get("flexinfer.ai/gpu.arch"),
                vram: get("flexinfer.ai/gpu.vram"),
                count: get("flexinfer.ai/gpu.count"),
                int4: get("flexinfer.ai/gpu.int4"),
                ..Default::default()
            })
        };
        let mut tps = StaticTpsSource::default();
        tps.insert(
            "ml",
            "flexinfer-benchmark-results",
            [
                (
                    benchmark_key("vllm", "qwen", &class(&fast["metadata"]["labels"])),
                    "20",
                ),
                (
                    benchmark_key("vllm", "qwen", &class(&slow["metadata"]["labels"])),
                    "10",
                ),
            ],
        );
        let ext = extender(tps);
        let body = json!({"Pod": gpu_pod(), "Nodes": {"items": [slow, fast, hot]}}).to_string();
        let priorities: Vec<HostPriority> =
            serde_json::from_slice(&ext.prioritize(body.as_bytes()).unwrap()).unwrap();
        // fast  = 20×0.7 − 10×0.2 + 0.5×10            = 17
        // slow  = 10×0.7           + 1.0×10            = 17
        // hot   = 17 − 1.0×0.3 − (1.0 − 0.85)×20       = 13.7
        let scores: Vec<(&str, i64)> = priorities
            .iter()
            .map(|p| (p.host.as_str(), p.score))
            .collect();
        assert_eq!(scores, [("slow", 10), ("fast", 10), ("hot", 7)]);
    }

    #[test]
    fn pods_outside_flexinfer_get_a_flat_score() {
        let ext = extender(StaticTpsSource::default());
        let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": []}});
        let body = json!({"Pod": pod, "Nodes": {"items": nodes()}}).to_string();
        let priorities: Vec<HostPriority> =
            serde_json::from_slice(&ext.prioritize(body.as_bytes()).unwrap()).unwrap();
        assert_eq!(priorities.len(), 4);
        assert!(priorities.iter().all(|p| p.score == 0));
        assert_eq!(priorities[3].host, "big");
    }

    struct Used(f64);

    impl TenantUsage for Used {
        fn used_gpus(&self, _: &FairShare, _: &str, _: &str, _: &str) -> f64 {
            self.0
        }
    }

    #[test]
    fn fair_share_is_reported_per_tenant() {
        let ext = Extender::new(
            Settings {
                fair_share: FairShare {
                    enabled: true,
                    budget_gpus: 4.0,
                    tenant_label_key: String::new(),
                },
                ..Default::default()
            },
            Arc::new(StaticTpsSource::default()),
        )
        .with_tenants(Arc::new(Used(1.0)));
        let body = json!({"Pod": gpu_pod(), "Nodes": {"items": nodes()}}).to_string();
        ext.prioritize(body.as_bytes()).unwrap();
        let metrics = ext.metrics().render();
        assert!(metrics
            .contains(r#"flexinfer_scheduler_tenant_usage_ratio{namespace="ml",tenant="ml"} 0.5"#));
        assert!(metrics.contains(
            r#"flexinfer_scheduler_tenant_score_adjustment{namespace="ml",tenant="ml"} 2.5"#
        ));
    }
}
