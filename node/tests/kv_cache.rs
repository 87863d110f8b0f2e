//! The KV-cache probe: lists the node's FlexInfer pods through the API
//! (asserted with kube's `tower-test` mock) and scrapes their metrics over
//! real HTTP.

use axum::routing::get;
use axum::Router;
use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::json;

use flexinfer_node::kv_cache::KvCacheProbe;

async fn metrics_server(body: &'static str) -> u16 {
    let app = Router::new().route("/metrics", get(move || async move { body }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

/// A port with nothing listening.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

fn pod(name: &str, phase: &str, ip: Option<&str>) -> serde_json::Value {
    json!({"metadata": {"name": name, "namespace": "ml"},
           "spec": {"nodeName": "gpu-1", "containers": [{"name": "server", "image": "x"}]},
           "status": {"phase": phase, "podIP": ip}})
}

#[tokio::test]
async fn averages_the_usage_of_running_model_pods_on_the_node() {
    let vllm = metrics_server(
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"qwen\"} 0.9\n",
    )
    .await;
    let nothing = closed_port().await;

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let probe = KvCacheProbe::new(
        Client::new(service, "default"),
        "gpu-1",
        vec![nothing, vllm],
    );
    let task = tokio::spawn(async move { probe.average_usage().await });

    let (request, send) = handle.next_request().await.expect("pod list");
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/pods");
    let query = request.uri().query().unwrap_or("");
    assert!(
        query.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dflexinfer"),
        "{query}"
    );
    assert!(
        query.contains("fieldSelector=spec.nodeName%3Dgpu-1"),
        "{query}"
    );
    let list = json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "3"},
        "items": [
            pod("qwen-0", "Running", Some("127.0.0.1")),
            pod("pending-0", "Pending", None),
            pod("done-0", "Succeeded", Some("127.0.0.2")),
        ]
    });
    send.send_response(Response::new(Body::from(list.to_string().into_bytes())));

    let usage = task.await.unwrap().unwrap();
    assert_eq!(usage, Some(0.9));
}

#[tokio::test]
async fn no_reporting_pod_means_no_figure() {
    let nothing = closed_port().await;
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let probe = KvCacheProbe::new(Client::new(service, "default"), "gpu-1", vec![nothing]);
    let task = tokio::spawn(async move { probe.average_usage().await });
    let (_, send) = handle.next_request().await.expect("pod list");
    let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                      "items": [pod("qwen-0", "Running", Some("127.0.0.1"))]});
    send.send_response(Response::new(Body::from(list.to_string().into_bytes())));
    assert_eq!(task.await.unwrap().unwrap(), None);
}
