//! Measured tokens/s: where the score's `tps` term comes from.
//!
//! The benchmarker publishes results in two ConfigMaps, both in the pod's
//! namespace; the lookup takes the first that has a value:
//!
//! 1. the global ConfigMap (`BENCHMARK_RESULTS_CONFIGMAP`, default
//!    `flexinfer-benchmark-results`), key [`benchmark_key`] of the pod's
//!    backend and model and the node's [`device_class`];
//! 2. the per-deployment ConfigMap `<modeldeployment_cr>-benchmark-results`,
//!    key `tokensPerSecond`;
//! 3. otherwise 0.
//!
//! ConfigMaps are read through [`TpsSource`], which the server implements
//! over a watched cache ([`crate::watch`]); nothing is fetched per request.

use std::collections::HashMap;
use std::sync::Arc;

use flexinfer_crds::benchmark::{self, DeviceLabels};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::facts::{parse_number, NodeFacts, PodFacts};

/// Key of the per-deployment ConfigMap holding tokens/s.
pub const TOKENS_PER_SECOND_KEY: &str = "tokensPerSecond";
/// Suffix of per-deployment benchmark ConfigMaps.
pub const DEPLOYMENT_CONFIG_MAP_SUFFIX: &str = "-benchmark-results";
/// Prefix of the keys of the global benchmark ConfigMap.
pub const BENCHMARK_KEY_PREFIX: &str = benchmark::KEY_PREFIX;

/// Read access to benchmark ConfigMaps.
pub trait TpsSource: Send + Sync {
    /// The ConfigMap `namespace/name`, if known.
    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>>;
}

/// A fixed set of ConfigMaps, for tests, benchmarks and running without a
/// cluster.
#[derive(Debug, Default, Clone)]
pub struct StaticTpsSource {
    maps: HashMap<(String, String), Arc<ConfigMap>>,
}

impl StaticTpsSource {
    /// Adds (or replaces) the ConfigMap `namespace/name` with `data`.
    pub fn insert<K, V>(
        &mut self,
        namespace: &str,
        name: &str,
        data: impl IntoIterator<Item = (K, V)>,
    ) where
        K: Into<String>,
        V: Into<String>,
    {
        let config_map = ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
            ),
            ..Default::default()
        };
        self.maps.insert(
            (namespace.to_owned(), name.to_owned()),
            Arc::new(config_map),
        );
    }
}

impl TpsSource for StaticTpsSource {
    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.maps
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}

/// The device class of a node, as the benchmarker records it (see
/// [`flexinfer_crds::benchmark`]).
pub fn device_class(node: &NodeFacts<'_>) -> String {
    DeviceLabels {
        vendor: node.vendor.unwrap_or_default(),
        arch: node.arch.unwrap_or_default(),
        vram: node.vram.unwrap_or_default(),
        count: node.count.unwrap_or_default(),
        int4: node.int4.unwrap_or_default(),
    }
    .device_class()
}

/// Key of a result in the global ConfigMap (see
/// [`flexinfer_crds::benchmark::key`]).
pub fn benchmark_key(backend: &str, model: &str, device_class: &str) -> String {
    benchmark::key(backend, model, device_class)
}

/// Name of a ModelDeployment's benchmark ConfigMap.
pub fn deployment_config_map(deployment: &str) -> String {
    format!("{deployment}{DEPLOYMENT_CONFIG_MAP_SUFFIX}")
}

/// Tokens/s lookup for one pod across the nodes of one request: the two
/// ConfigMaps are resolved once, and results are memoised per device
/// class.
pub struct TpsLookup {
    global: Option<(Arc<ConfigMap>, String, String)>,
    fallback: f64,
    memo: HashMap<String, f64>,
}

impl TpsLookup {
    /// Prepares the lookup for `pod`; `global_name` is the global
    /// ConfigMap's name.
    pub fn new(source: &dyn TpsSource, pod: &PodFacts, global_name: &str) -> Self {
        let global = match (&pod.backend, &pod.model) {
            (Some(backend), Some(model)) => source
                .config_map(&pod.namespace, global_name)
                .map(|map| (map, backend.clone(), model.clone())),
            _ => None,
        };
        let fallback = pod
            .deployment
            .as_deref()
            .and_then(|md| source.config_map(&pod.namespace, &deployment_config_map(md)))
            .and_then(|map| value(&map, TOKENS_PER_SECOND_KEY))
            .unwrap_or(0.0);
        TpsLookup {
            global,
            fallback,
            memo: HashMap::new(),
        }
    }

    /// Tokens/s of the pod on `node`.
    pub fn tps(&mut self, node: &NodeFacts<'_>) -> f64 {
        let Some((map, backend, model)) = &self.global else {
            return self.fallback;
        };
        let class = device_class(node);
        if let Some(tps) = self.memo.get(&class) {
            return *tps;
        }
        let tps = value(map, &benchmark_key(backend, model, &class)).unwrap_or(self.fallback);
        self.memo.insert(class, tps);
        tps
    }
}

/// A non-negative number stored under `key`.
fn value(map: &ConfigMap, key: &str) -> Option<f64> {
    map.data
        .as_ref()?
        .get(key)
        .and_then(|v| parse_number(v))
        .filter(|tps| *tps >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeFacts<'static> {
        NodeFacts {
            name: "n",
            vendor: Some("AMD"),
            arch: Some("gfx1100"),
            vram: Some("24Gi"),
            count: Some("1"),
            int4: Some("true"),
            ..Default::default()
        }
    }

    fn pod() -> PodFacts {
        PodFacts {
            namespace: "ml".into(),
            backend: Some("vllm".into()),
            model: Some("qwen".into()),
            deployment: Some("qwen-md".into()),
            gpu_count: 1.0,
            ..Default::default()
        }
    }

    #[test]
    fn device_class_format() {
        assert_eq!(
            device_class(&node()),
            "vendor=AMD,arch=gfx1100,vram=24Gi,count=1,int4=true"
        );
        assert_eq!(
            device_class(&NodeFacts::default()),
            "vendor=,arch=,vram=,count=,int4="
        );
    }

    #[test]
    fn benchmark_key_is_a_truncated_sha256() {
        // Independently computed: sha256(b"vllm|qwen|<class>").hexdigest()[:32].
        assert_eq!(
            benchmark_key("vllm", "qwen", &device_class(&node())),
            "bench_83e499d2a8e6f178612158b696d565a4"
        );
        assert_ne!(benchmark_key("a", "b", "c"), benchmark_key("a", "b", "d"));
    }

    #[test]
    fn global_result_wins_over_the_deployment_result() {
        let key = benchmark_key("vllm", "qwen", &device_class(&node()));
        let mut source = StaticTpsSource::default();
        source.insert(
            "ml",
            "flexinfer-benchmark-results",
            [(key.as_str(), "42.5")],
        );
        source.insert(
            "ml",
            "qwen-md-benchmark-results",
            [("tokensPerSecond", "10")],
        );
        let mut lookup = TpsLookup::new(&source, &pod(), "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 42.5);
        // Another device class has no global entry: the deployment result.
        let other = NodeFacts {
            arch: Some("gfx906"),
            ..node()
        };
        assert_eq!(lookup.tps(&other), 10.0);
    }

    #[test]
    fn falls_back_to_the_deployment_config_map_then_zero() {
        let mut source = StaticTpsSource::default();
        source.insert(
            "ml",
            "qwen-md-benchmark-results",
            [("tokensPerSecond", "17.25")],
        );
        let mut lookup = TpsLookup::new(&source, &pod(), "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 17.25);

        let empty = StaticTpsSource::default();
        let mut lookup = TpsLookup::new(&empty, &pod(), "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 0.0);

        // ConfigMaps of another namespace are not consulted.
        let mut elsewhere = StaticTpsSource::default();
        elsewhere.insert(
            "other",
            "qwen-md-benchmark-results",
            [("tokensPerSecond", "5")],
        );
        let mut lookup = TpsLookup::new(&elsewhere, &pod(), "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 0.0);
    }

    #[test]
    fn the_global_config_map_name_is_configurable() {
        let key = benchmark_key("vllm", "qwen", &device_class(&node()));
        let mut source = StaticTpsSource::default();
        source.insert("ml", "my-results", [(key.as_str(), "8")]);
        let mut lookup = TpsLookup::new(&source, &pod(), "my-results");
        assert_eq!(lookup.tps(&node()), 8.0);
        let mut lookup = TpsLookup::new(&source, &pod(), "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 0.0);
    }

    #[test]
    fn malformed_values_are_skipped() {
        let key = benchmark_key("vllm", "qwen", &device_class(&node()));
        let mut source = StaticTpsSource::default();
        source.insert(
            "ml",
            "flexinfer-benchmark-results",
            [(key.as_str(), "fast")],
        );
        source.insert(
            "ml",
            "qwen-md-benchmark-results",
            [("tokensPerSecond", "-3")],
        );
        let mut lookup = TpsLookup::new(&source, &pod(), "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 0.0);
    }

    #[test]
    fn pods_without_model_or_backend_use_only_the_deployment_result() {
        let key = benchmark_key("vllm", "qwen", &device_class(&node()));
        let mut source = StaticTpsSource::default();
        source.insert("ml", "flexinfer-benchmark-results", [(key.as_str(), "42")]);
        source.insert(
            "ml",
            "qwen-md-benchmark-results",
            [("tokensPerSecond", "9")],
        );
        let pod = PodFacts {
            model: None,
            ..pod()
        };
        let mut lookup = TpsLookup::new(&source, &pod, "flexinfer-benchmark-results");
        assert_eq!(lookup.tps(&node()), 9.0);
    }
}
