//! The exact server-side apply requests of `tps --publish`, against kube's
//! `tower-test` mock of the API server.

use std::collections::BTreeMap;
use std::time::Duration;

use flexinfer_bench::publish::{self, Destination};
use flexinfer_bench::tps::{TpsResult, TpsSample, TPS_SCHEMA};
use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{json, Value};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn result() -> TpsResult {
    TpsResult {
        schema: TPS_SCHEMA,
        model: "llama-3-8b".into(),
        backend: "vllm".into(),
        max_tokens: 128,
        warmup_iterations: 2,
        iterations: 5,
        min_duration_s: 30.0,
        samples: vec![
            TpsSample {
                completion_tokens: 128,
                generation_s: 2.54,
                tokens_per_second: 50.0,
                ttft_ms: Some(200.0),
            };
            5
        ],
        tokens_per_second: 50.0,
        completion_tokens: 640,
        duration_s: 12.7,
        ttft_ms: Some(200.0),
        timestamp: "2026-01-02T03:04:05Z".into(),
    }
}

/// Takes the next request, checks it is an apply of ConfigMap `name` by
/// `manager`, answers with the applied object and returns its body.
async fn expect_apply(handle: &mut Handle, name: &str, manager: &str) -> Value {
    let (request, send) = handle.next_request().await.expect("a request");
    assert_eq!(request.method(), Method::PATCH);
    assert_eq!(
        request.uri().path(),
        format!("/api/v1/namespaces/models/configmaps/{name}")
    );
    let query: BTreeMap<String, String> = request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    assert_eq!(query.get("fieldManager").map(String::as_str), Some(manager));
    assert_eq!(query.get("force").map(String::as_str), Some("true"));
    assert_eq!(
        request.headers()["content-type"],
        "application/apply-patch+yaml"
    );
    let body: Value =
        serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap();
    send.send_response(
        Response::builder()
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
    body
}

#[tokio::test]
async fn publishes_both_config_maps_by_server_side_apply() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "models");
    let class = "vendor=nvidia,arch=sm_89,vram=24Gi,count=1,int4=true".to_owned();
    let destination = Destination {
        namespace: "models".into(),
        deployment_config_map: Some("md-benchmark-results".into()),
        global_config_map: "flexinfer-benchmark-results".into(),
        device_class: Some(class.clone()),
    };
    let server = tokio::spawn(async move {
        let deployment = expect_apply(&mut handle, "md-benchmark-results", "flexinfer-bench").await;
        let hash = publish::result_hash("vllm", "llama-3-8b", &class);
        let manager = format!("flexinfer-bench-{}", &hash[..16]);
        let global = expect_apply(&mut handle, "flexinfer-benchmark-results", &manager).await;
        (deployment, global, hash)
    });
    publish::publish(client, &destination, &result(), Duration::from_secs(30))
        .await
        .expect("publish succeeds");
    let (deployment, global, hash) = server.await.unwrap();

    assert_eq!(
        deployment,
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "md-benchmark-results",
                "namespace": "models",
                "labels": {"app.kubernetes.io/managed-by": "flexinfer"},
            },
            "data": {
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
            },
        })
    );
    let data = global["data"].as_object().unwrap();
    assert_eq!(data.len(), 2, "only this benchmark's keys are applied");
    assert_eq!(data[&format!("bench_{hash}")], "50");
    let meta: Value =
        serde_json::from_str(data[&format!("meta_{hash}")].as_str().unwrap()).unwrap();
    assert_eq!(
        meta["deviceClass"],
        "vendor=nvidia,arch=sm_89,vram=24Gi,count=1,int4=true"
    );
    assert_eq!(meta["tokensPerSecond"], 50.0);
    assert_eq!(meta["samples"], 5);
}

#[tokio::test]
async fn the_device_class_comes_from_the_node_labels() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "models");
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("a request");
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri().path(), "/api/v1/nodes/gpu-1");
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {
                "flexinfer.ai/gpu.vendor": "amd",
                "flexinfer.ai/gpu.arch": "gfx1100",
                "flexinfer.ai/gpu.vram": "24Gi",
                "flexinfer.ai/gpu.count": "2",
                "flexinfer.ai/gpu.int4": "true",
            }},
        });
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&node).unwrap()))
                .unwrap(),
        );
    });
    let class = publish::node_device_class(client, "gpu-1").await.unwrap();
    server.await.unwrap();
    assert_eq!(class, "vendor=amd,arch=gfx1100,vram=24Gi,count=2,int4=true");
}
