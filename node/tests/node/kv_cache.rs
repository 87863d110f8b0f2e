//! The KV-cache probe: lists the node's FlexInfer pods through the
//! in-memory Kubernetes API (`flexinfer-testkube`, which applies the label
//! and field selectors) and scrapes their metrics over real HTTP on
//! loopback addresses.

use crate::support;

use std::net::Ipv4Addr;

use axum::routing::get;
use axum::Router;
use flexinfer_testkube::{TestApiServer, Verb};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::Api;
use serde_json::{json, Value};
use support::{rx7900xtx, Machine};

use flexinfer_node::agent::Agent;
use flexinfer_node::kv_cache::KvCacheProbe;
use flexinfer_node::labels::LabelKeys;
use flexinfer_node::metrics::Metrics;
use flexinfer_node::publish::NodePublisher;

/// Serves `body` at `http://<ip>:<port>/metrics`, bound to `ip` only.
async fn metrics_server(ip: Ipv4Addr, body: String) -> u16 {
    let app = Router::new().route("/metrics", get(move || async move { body }));
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

/// A port with nothing listening.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// A vLLM exposition reporting `value` as its KV-cache usage.
fn usage(value: f64) -> String {
    format!(
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{{model_name=\"qwen\"}} {value}\n"
    )
}

/// A FlexInfer pod of namespace `ml` on `node`.
fn pod(name: &str, node: &str, phase: &str, ip: Option<&str>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml",
                     "labels": {"app.kubernetes.io/managed-by": "flexinfer"}},
        "spec": {"nodeName": node, "containers": [{"name": "server", "image": "x"}]},
        "status": {"phase": phase, "podIP": ip}
    })
}

/// Stores `pods` as given (status kept), without API requests.
fn insert(server: &TestApiServer, pods: impl IntoIterator<Item = Value>) {
    for pod in pods {
        server.insert(&pod).expect("insert pod");
    }
}

/// Only running FlexInfer pods on this node count: pods of other nodes,
/// pods not managed by FlexInfer and finished pods are left out, each
/// behind its own loopback address with a metric that would change the
/// average. Ports without a server are skipped.
#[tokio::test]
async fn averages_the_usage_of_running_model_pods_on_the_node() {
    let server = TestApiServer::start().await;
    let here = metrics_server(Ipv4Addr::new(127, 0, 0, 1), usage(0.9)).await;
    let other_node = metrics_server(Ipv4Addr::new(127, 0, 0, 2), usage(0.1)).await;
    let unmanaged = metrics_server(Ipv4Addr::new(127, 0, 0, 3), usage(0.2)).await;
    let finished = metrics_server(Ipv4Addr::new(127, 0, 0, 4), usage(0.3)).await;
    let nothing = closed_port().await;

    let mut unmanaged_pod = pod("grafana-0", "gpu-1", "Running", Some("127.0.0.3"));
    unmanaged_pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("helm");
    insert(
        &server,
        [
            pod("qwen-0", "gpu-1", "Running", Some("127.0.0.1")),
            pod("qwen-1", "gpu-2", "Running", Some("127.0.0.2")),
            unmanaged_pod,
            pod("done-0", "gpu-1", "Succeeded", Some("127.0.0.4")),
            pod("pending-0", "gpu-1", "Pending", None),
        ],
    );

    let probe = KvCacheProbe::new(
        server.client(),
        "gpu-1",
        vec![nothing, here, other_node, unmanaged, finished],
    );
    assert_eq!(probe.average_usage().await.unwrap(), Some(0.9));
    assert_eq!(server.requests(Verb::List, "pods"), 1);
    assert_eq!(server.total_writes(), 0);

    // A second model server on the node: the average of both.
    let second = metrics_server(Ipv4Addr::new(127, 0, 0, 5), usage(0.5)).await;
    insert(
        &server,
        [pod("llama-0", "gpu-1", "Running", Some("127.0.0.5"))],
    );
    let probe = KvCacheProbe::new(server.client(), "gpu-1", vec![here, second]);
    let average = probe.average_usage().await.unwrap().unwrap();
    assert!((average - 0.7).abs() < 1e-9, "{average}");
}

#[tokio::test]
async fn no_reporting_pod_means_no_figure() {
    let server = TestApiServer::start().await;
    let nothing = closed_port().await;
    insert(
        &server,
        [pod("qwen-0", "gpu-1", "Running", Some("127.0.0.1"))],
    );
    let probe = KvCacheProbe::new(server.client(), "gpu-1", vec![nothing]);
    assert_eq!(probe.average_usage().await.unwrap(), None);
}

#[tokio::test]
async fn a_failed_pod_list_is_an_error() {
    let server = TestApiServer::start().await;
    server.fail_next(Verb::List, "pods", 1, 500);
    let probe = KvCacheProbe::new(server.client(), "gpu-1", vec![closed_port().await]);
    assert!(probe.average_usage().await.is_err());
}

/// The agent publishes the figure as the `kv-cache-usage` annotation, and
/// drops the annotation when the pod list fails rather than leave a stale
/// value.
#[tokio::test]
async fn the_agent_publishes_the_usage_on_its_node() {
    let server = TestApiServer::start().await;
    let port = metrics_server(Ipv4Addr::new(127, 0, 0, 1), usage(0.25)).await;
    insert(
        &server,
        [pod("qwen-0", "gpu-1", "Running", Some("127.0.0.1"))],
    );
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "gpu-1"}})).unwrap();
    let nodes: Api<Node> = Api::all(server.client());
    nodes.create(&PostParams::default(), &node).await.unwrap();

    let mut machine = Machine::new();
    machine.kfd_cpu_node().amd_card(rx7900xtx(0, 128));
    let keys = LabelKeys::default();
    let mut agent = Agent::new(
        "gpu-1",
        keys.clone(),
        machine.discovery(),
        NodePublisher::new(server.client(), "gpu-1", keys),
        Metrics::new(),
    )
    .with_kv_cache(KvCacheProbe::new(server.client(), "gpu-1", vec![port]));

    agent.pass().await.unwrap();
    let annotations = nodes.get("gpu-1").await.unwrap().metadata.annotations;
    assert_eq!(
        annotations.unwrap_or_default()["flexinfer.ai/kv-cache-usage"],
        "0.2500"
    );

    server.fail_next(Verb::List, "pods", 1, 500);
    agent.pass().await.unwrap();
    let annotations = nodes
        .get("gpu-1")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("flexinfer.ai/kv-cache-usage"),
        "{annotations:?}"
    );
    assert_eq!(annotations["flexinfer.ai/gpu-free-memory"], "20464");
}
