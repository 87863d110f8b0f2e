//! Writing a [`TpsResult`] where the scheduler extender reads it: the
//! per-deployment ConfigMap (`<deployment>-benchmark-results`, key
//! `tokensPerSecond`) and the global one (`flexinfer-benchmark-results`,
//! key `bench_<first 32 hex of SHA-256(backend|model|deviceClass)>`), both
//! by server-side apply.
//!
//! The global ConfigMap is shared by every benchmark, so each
//! (backend, model, device class) applies under a field manager of its own:
//! server-side apply then only ever touches that benchmark's two keys and
//! leaves the others' alone.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use flexinfer_crds::benchmark::DeviceLabels;
use flexinfer_crds::labels;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

use crate::tps::TpsResult;

/// Field manager of the per-deployment ConfigMap.
pub const FIELD_MANAGER: &str = "flexinfer-bench";

/// The node's device class, as the scheduler builds it from node labels
/// (see [`flexinfer_crds::benchmark`]).
pub fn device_class(node_labels: &BTreeMap<String, String>) -> String {
    let get = |key: &str| node_labels.get(key).map(String::as_str).unwrap_or("");
    DeviceLabels {
        vendor: get(labels::NODE_GPU_VENDOR),
        arch: get(labels::NODE_GPU_ARCH),
        vram: get(labels::NODE_GPU_VRAM),
        count: get(labels::NODE_GPU_COUNT),
        int4: get(labels::NODE_GPU_INT4),
    }
    .device_class()
}

pub use flexinfer_crds::benchmark::{key as global_key, result_hash};

/// A duration as Go prints it (`30s`, `1m30s`, `1h0m0s`, `500ms`), the
/// format the `minDuration` key has always had.
pub fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    if d < Duration::from_secs(1) {
        let ms = d.as_secs_f64() * 1000.0;
        return format!("{}ms", trim_float(ms));
    }
    let total = d.as_secs();
    let (h, m) = (total / 3600, (total % 3600) / 60);
    let s = (total % 60) as f64 + f64::from(d.subsec_nanos()) / 1e9;
    let s = trim_float(s);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

fn trim_float(v: f64) -> String {
    let text = format!("{v:.9}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Data of the per-deployment ConfigMap.
pub fn deployment_data(result: &TpsResult, min_duration: Duration) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "tokensPerSecond".to_owned(),
            result.tokens_per_second.to_string(),
        ),
        ("model".to_owned(), result.model.clone()),
        ("backend".to_owned(), result.backend.clone()),
        (
            "warmupIterations".to_owned(),
            result.warmup_iterations.to_string(),
        ),
        ("iterations".to_owned(), result.iterations.to_string()),
        ("batchSize".to_owned(), result.max_tokens.to_string()),
        ("minDuration".to_owned(), go_duration(min_duration)),
        (
            "completionTokens".to_owned(),
            result.completion_tokens.to_string(),
        ),
        ("durationSeconds".to_owned(), result.duration_s.to_string()),
        ("samples".to_owned(), result.samples.len().to_string()),
        ("timestamp".to_owned(), result.timestamp.clone()),
    ])
}

/// This benchmark's two entries of the global ConfigMap: `bench_<hash>`
/// (tokens/s) and `meta_<hash>` (JSON details).
pub fn global_data(result: &TpsResult, device_class: &str) -> BTreeMap<String, String> {
    let hash = result_hash(&result.backend, &result.model, device_class);
    let meta = json!({
        "backend": result.backend,
        "model": result.model,
        "deviceClass": device_class,
        "tokensPerSecond": result.tokens_per_second,
        "completionTokens": result.completion_tokens,
        "durationSeconds": result.duration_s,
        "samples": result.samples.len(),
        "timestamp": result.timestamp,
    });
    BTreeMap::from([
        (
            format!("bench_{hash}"),
            result.tokens_per_second.to_string(),
        ),
        (format!("meta_{hash}"), meta.to_string()),
    ])
}

/// Field manager of one benchmark's entries in the global ConfigMap.
pub fn global_field_manager(backend: &str, model: &str, device_class: &str) -> String {
    format!(
        "{FIELD_MANAGER}-{}",
        &result_hash(backend, model, device_class)[..16]
    )
}

/// The server-side apply body of a ConfigMap holding `data`.
pub fn apply_body(name: &str, namespace: &str, data: &BTreeMap<String, String>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { (labels::APP_MANAGED_BY): labels::MANAGED_BY_FLEXINFER },
        },
        "data": data,
    })
}

/// Where to publish.
#[derive(Debug, Clone)]
pub struct Destination {
    /// Namespace of both ConfigMaps.
    pub namespace: String,
    /// Per-deployment ConfigMap name, if any.
    pub deployment_config_map: Option<String>,
    /// Global ConfigMap name.
    pub global_config_map: String,
    /// Device class; without it the global entry is not written.
    pub device_class: Option<String>,
}

/// Applies both ConfigMaps.
pub async fn publish(
    client: kube::Client,
    destination: &Destination,
    result: &TpsResult,
    min_duration: Duration,
) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client, &destination.namespace);
    if let Some(name) = &destination.deployment_config_map {
        let body = apply_body(
            name,
            &destination.namespace,
            &deployment_data(result, min_duration),
        );
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .with_context(|| format!("cannot apply ConfigMap {}/{name}", destination.namespace))?;
    }
    if let Some(class) = &destination.device_class {
        let name = &destination.global_config_map;
        let manager = global_field_manager(&result.backend, &result.model, class);
        let body = apply_body(name, &destination.namespace, &global_data(result, class));
        api.patch(
            name,
            &PatchParams::apply(&manager).force(),
            &Patch::Apply(&body),
        )
        .await
        .with_context(|| format!("cannot apply ConfigMap {}/{name}", destination.namespace))?;
    }
    Ok(())
}

/// Reads the device class of node `name` from its labels.
pub async fn node_device_class(client: kube::Client, name: &str) -> Result<String> {
    let node = Api::<Node>::all(client)
        .get(name)
        .await
        .with_context(|| format!("cannot read node {name}"))?;
    Ok(device_class(&node.metadata.labels.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn device_class_and_key_match_the_scheduler() {
        let labels = BTreeMap::from([
            ("flexinfer.ai/gpu.vendor".to_owned(), "nvidia".to_owned()),
            ("flexinfer.ai/gpu.arch".to_owned(), "sm_89".to_owned()),
            ("flexinfer.ai/gpu.vram".to_owned(), "24Gi".to_owned()),
            ("flexinfer.ai/gpu.count".to_owned(), "1".to_owned()),
            ("flexinfer.ai/gpu.int4".to_owned(), "true".to_owned()),
        ]);
        let class = device_class(&labels);
        assert_eq!(
            class,
            "vendor=nvidia,arch=sm_89,vram=24Gi,count=1,int4=true"
        );
        assert_eq!(
            device_class(&BTreeMap::new()),
            "vendor=,arch=,vram=,count=,int4="
        );
        // sha256("vllm|m|x") = 0b9b6f…; only the first 16 bytes are kept.
        let expected: String = Sha256::digest(b"vllm|m|x")[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(global_key("vllm", "m", "x"), format!("bench_{expected}"));
        assert_eq!(global_key("vllm", "m", "x").len(), "bench_".len() + 32);
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
