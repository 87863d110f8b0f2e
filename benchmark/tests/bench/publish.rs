//! `tps --publish` against the in-memory Kubernetes API server
//! (`flexinfer-testkube`: server-side apply with field managers, as a real
//! API server does it).

use std::time::Duration;

use flexinfer_bench::publish::{self, Destination};
use flexinfer_bench::tps::{TpsResult, TpsSample, TPS_SCHEMA};
use flexinfer_testkube::{TestApiServer, Verb};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

fn result(model: &str, tokens_per_second: f64) -> TpsResult {
    TpsResult {
        schema: TPS_SCHEMA,
        model: model.into(),
        backend: "vllm".into(),
        max_tokens: 128,
        warmup_iterations: 2,
        iterations: 5,
        min_duration_s: 30.0,
        samples: vec![
            TpsSample {
                completion_tokens: 128,
                generation_s: 2.54,
                tokens_per_second,
                ttft_ms: Some(200.0),
            };
            5
        ],
        tokens_per_second,
        completion_tokens: 640,
        duration_s: 12.7,
        ttft_ms: Some(200.0),
        timestamp: "2026-01-02T03:04:05Z".into(),
    }
}

const CLASS: &str = "vendor=nvidia,arch=sm_89,vram=24Gi,count=1,int4=true";

fn destination(deployment: Option<&str>) -> Destination {
    Destination {
        namespace: "models".into(),
        deployment_config_map: deployment.map(str::to_owned),
        global_config_map: "flexinfer-benchmark-results".into(),
        device_class: Some(CLASS.to_owned()),
    }
}

/// An API server with the `models` namespace.
async fn api_server() -> TestApiServer {
    let server = TestApiServer::start().await;
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "models"}})).unwrap();
    Api::<Namespace>::all(server.client())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    server
}

/// The data and the field managers of ConfigMap `name`.
async fn config_map(client: &kube::Client, name: &str) -> (Value, Vec<String>) {
    let map = Api::<ConfigMap>::namespaced(client.clone(), "models")
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("ConfigMap {name}: {e}"));
    let managers = map
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.manager.clone())
        .collect();
    (serde_json::to_value(&map.data).unwrap(), managers)
}

#[tokio::test]
async fn publishes_both_config_maps_by_server_side_apply() {
    let server = api_server().await;
    let client = server.client();
    publish::publish(
        client.clone(),
        &destination(Some("md-benchmark-results")),
        &result("llama-3-8b", 50.0),
        Duration::from_secs(30),
    )
    .await
    .expect("publish succeeds");
    assert_eq!(server.requests(Verb::Patch, "configmaps"), 2);

    let (deployment, managers) = config_map(&client, "md-benchmark-results").await;
    assert_eq!(
        deployment,
        json!({
            "tokensPerSecond": "50",
            "model": "llama-3-8b",
            "backend": "vllm",
            "warmupIterations": "2",
            "iterations": "5",
            "batchSize": "128",
            "minDuration": "30s",
            "completionTokens": "640",
            "durationSeconds": "12.7",
            "samples": "5",
            "timestamp": "2026-01-02T03:04:05Z",
        })
    );
    assert_eq!(managers, ["flexinfer-bench"]);

    let hash = publish::result_hash("vllm", "llama-3-8b", CLASS);
    let (global, managers) = config_map(&client, "flexinfer-benchmark-results").await;
    let data = global.as_object().unwrap();
    assert_eq!(data.len(), 2, "{global}");
    assert_eq!(data[&format!("bench_{hash}")], "50");
    let meta: Value =
        serde_json::from_str(data[&format!("meta_{hash}")].as_str().unwrap()).unwrap();
    assert_eq!(meta["deviceClass"], CLASS);
    assert_eq!(meta["tokensPerSecond"], 50.0);
    assert_eq!(meta["samples"], 5);
    assert_eq!(managers, [format!("flexinfer-bench-{}", &hash[..16])]);
}

#[tokio::test]
async fn benchmarks_share_the_global_config_map_without_clobbering_each_other() {
    let server = api_server().await;
    let client = server.client();
    let publish = |model: &'static str, tps: f64| {
        let client = client.clone();
        async move {
            publish::publish(
                client,
                &destination(None),
                &result(model, tps),
                Duration::from_secs(30),
            )
            .await
            .expect("publish succeeds")
        }
    };
    publish("llama-3-8b", 50.0).await;
    publish("qwen3-8b", 42.0).await;
    // Publishing again replaces only that benchmark's keys.
    publish("llama-3-8b", 55.0).await;

    let (global, managers) = config_map(&client, "flexinfer-benchmark-results").await;
    let data = global.as_object().unwrap();
    let llama = publish::result_hash("vllm", "llama-3-8b", CLASS);
    let qwen = publish::result_hash("vllm", "qwen3-8b", CLASS);
    assert_eq!(data.len(), 4, "{global}");
    assert_eq!(data[&format!("bench_{llama}")], "55");
    assert_eq!(data[&format!("bench_{qwen}")], "42");
    // One field manager per benchmark: each owns only its own keys.
    let mut managers = managers;
    managers.sort();
    let mut expected = vec![
        format!("flexinfer-bench-{}", &llama[..16]),
        format!("flexinfer-bench-{}", &qwen[..16]),
    ];
    expected.sort();
    assert_eq!(managers, expected);
}

#[tokio::test]
async fn the_device_class_comes_from_the_node_labels() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {
            "flexinfer.ai/gpu.vendor": "amd",
            "flexinfer.ai/gpu.arch": "gfx1100",
            "flexinfer.ai/gpu.vram": "24Gi",
            "flexinfer.ai/gpu.count": "2",
            "flexinfer.ai/gpu.int4": "true",
        }},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let class = publish::node_device_class(client.clone(), "gpu-1")
        .await
        .unwrap();
    assert_eq!(class, "vendor=amd,arch=gfx1100,vram=24Gi,count=2,int4=true");
    assert!(publish::node_device_class(client, "gpu-2").await.is_err());
}
