//! The extender over real HTTP, with requests shaped like kube-scheduler's
//! (full Pod and Node objects) and responses decoded the way kube-scheduler
//! decodes them (Go field names, `v1.NodeList` of `v1.Node`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use flexinfer_sched::extender::Settings;
use flexinfer_sched::tps::{benchmark_key, StaticTpsSource};
use flexinfer_sched::{server, Extender};
use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use support::{expectation, Expect};

/// `extenderv1.ExtenderFilterResult` as kube-scheduler decodes it.
#[derive(Debug, Deserialize)]
#[allow(non_snake_case)]
struct GoFilterResult {
    Nodes: Option<GoNodeList>,
    NodeNames: Option<Vec<String>>,
    FailedNodes: Option<BTreeMap<String, String>>,
    FailedAndUnresolvableNodes: Option<BTreeMap<String, String>>,
    Error: String,
}

#[derive(Debug, Deserialize)]
struct GoNodeList {
    items: Vec<Node>,
}

/// `extenderv1.HostPriority`.
#[derive(Debug, Deserialize)]
#[allow(non_snake_case)]
struct GoHostPriority {
    Host: String,
    Score: i64,
}

async fn metrics_text(client: &reqwest::Client, addr: SocketAddr) -> String {
    client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn serve(extender: Extender) -> SocketAddr {
    serve_limited(extender, 64 * 1024 * 1024).await
}

async fn serve_limited(extender: Extender, max_body_bytes: usize) -> SocketAddr {
    let app = server::router(Arc::new(extender), max_body_bytes);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

fn extender() -> Extender {
    // gfx1100 nodes of the fixture have a global benchmark result; the
    // deployment result covers the rest.
    let class = "vendor=AMD,arch=gfx1100,vram=24Gi,count=1,int4=true";
    let mut tps = StaticTpsSource::default();
    tps.insert(
        "ml",
        "flexinfer-benchmark-results",
        [(benchmark_key("vllm", "qwen3-8b", class), "48.0")],
    );
    tps.insert(
        "ml",
        "qwen3-8b-benchmark-results",
        [("tokensPerSecond", "30")],
    );
    Extender::new(
        Settings {
            benchmark_config_map: "flexinfer-benchmark-results".into(),
            ..Default::default()
        },
        Arc::new(tps),
    )
}

#[tokio::test]
async fn filter_and_prioritize_answer_kube_scheduler_requests() {
    let addr = serve(extender()).await;
    let client = reqwest::Client::new();
    let nodes = support::nodes(40);
    let body = support::extender_args(&support::pod(), &nodes);

    let response = client
        .post(format!("http://{addr}/filter"))
        .header("Content-Type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    // Passing nodes travel as slices of the request; the length is still
    // announced up front, as Go's client expects of a JSON answer.
    let length: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let raw = response.bytes().await.unwrap();
    assert_eq!(raw.len(), length);
    let result: GoFilterResult = serde_json::from_slice(&raw).unwrap();
    assert_eq!(result.Error, "");
    assert!(result.NodeNames.is_none());
    let passed = result.Nodes.expect("Nodes").items;
    let failed = result.FailedNodes.unwrap_or_default();
    let unresolvable = result.FailedAndUnresolvableNodes.unwrap_or_default();

    // Every candidate is either passed or failed, exactly once, and for
    // the expected reason.
    let passed_names: BTreeSet<String> = passed
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(passed_names.len(), passed.len());
    for (i, node) in nodes.iter().enumerate() {
        let name = node["metadata"]["name"].as_str().unwrap();
        let outcome = (
            passed_names.contains(name),
            failed.get(name).map(String::as_str),
            unresolvable.get(name).map(String::as_str),
        );
        match expectation(i) {
            Expect::Pass => assert_eq!(outcome, (true, None, None), "{name}"),
            Expect::NoVendor => assert_eq!(
                outcome,
                (
                    false,
                    None,
                    Some("No vendor label: node has no flexinfer.ai/gpu.vendor label")
                ),
                "{name}"
            ),
            Expect::LowVram => assert_eq!(
                outcome,
                (
                    false,
                    Some("Insufficient VRAM: have 8000MB need 18000MB"),
                    None
                ),
                "{name}"
            ),
            Expect::Maxwell => assert_eq!(
                outcome,
                (
                    false,
                    None,
                    Some("Unsupported arch: backend vllm unsupported on GPU arch sm_52")
                ),
                "{name}"
            ),
        }
    }
    // Passing nodes come back as the full objects that were sent.
    let sent: Node = serde_json::from_value(nodes[3].clone()).unwrap();
    let echoed = passed
        .iter()
        .find(|n| n.metadata.name == sent.metadata.name)
        .unwrap();
    assert_eq!(echoed, &sent);
    assert!(
        echoed
            .status
            .as_ref()
            .unwrap()
            .images
            .as_ref()
            .unwrap()
            .len()
            > 5
    );

    // kube-scheduler then prioritizes the nodes that passed.
    let passing: Vec<_> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| expectation(*i) == Expect::Pass)
        .map(|(_, n)| n.clone())
        .collect();
    for path in ["prioritize", "score"] {
        let response = client
            .post(format!("http://{addr}/{path}"))
            .body(support::extender_args(&support::pod(), &passing))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let priorities: Vec<GoHostPriority> = response.json().await.unwrap();
        assert_eq!(priorities.len(), passing.len());
        for (priority, node) in priorities.iter().zip(&passing) {
            assert_eq!(priority.Host, node["metadata"]["name"].as_str().unwrap());
            assert!((0..=10).contains(&priority.Score), "{priority:?}");
        }
        assert_eq!(priorities.iter().map(|p| p.Score).max(), Some(10));
        // gfx1100 nodes (48 tok/s, even index) beat gfx906 nodes (30 tok/s).
        let best = priorities.iter().max_by_key(|p| p.Score).unwrap();
        let index: usize = best.Host.trim_start_matches("gpu-node-").parse().unwrap();
        assert_eq!(index % 2, 0, "{best:?}");
    }

    // Nodes unchanged since an earlier call (same name, uid and
    // resourceVersion) are not read again, and the answer is the same.
    let again = client
        .post(format!("http://{addr}/filter"))
        .body(body.clone())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(again, raw);
    let metrics = metrics_text(&client, addr).await;
    let passing = passing.len();
    for line in [
        "flexinfer_scheduler_node_metadata_total{source=\"request\"} 40".to_string(),
        format!(
            "flexinfer_scheduler_node_metadata_total{{source=\"known\"}} {}",
            2 * passing + 40
        ),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }
}

#[tokio::test]
async fn malformed_requests_get_errors_not_crashes() {
    let addr = serve(extender()).await;
    let client = reqwest::Client::new();

    let response = client
        .post(format!("http://{addr}/filter"))
        .body("{\"Pod\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let result: GoFilterResult = response.json().await.unwrap();
    assert!(
        result.Error.starts_with("failed to decode ExtenderArgs"),
        "{}",
        result.Error
    );
    assert!(result.Nodes.is_none());

    let response = client
        .post(format!("http://{addr}/prioritize"))
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("ExtenderArgs"));

    // Bodies over the limit are refused, announced or not.
    let small = serve_limited(extender(), 1024).await;
    for chunked in [false, true] {
        let body = support::extender_args(&support::pod(), &support::nodes(1));
        let request = client.post(format!("http://{small}/filter"));
        let request = if chunked {
            let stream = futures::stream::iter([Ok::<_, std::io::Error>(body)]);
            request.body(reqwest::Body::wrap_stream(stream))
        } else {
            request.body(body)
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 413, "chunked: {chunked}");
        assert!(response.text().await.unwrap().contains("--max-body-bytes"));
    }

    // The server is still there.
    let health = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.text().await.unwrap().is_empty());
}

#[tokio::test]
async fn metrics_count_decisions_rejections_and_latency() {
    let addr = serve(extender()).await;
    let client = reqwest::Client::new();
    let nodes = support::nodes(10);
    client
        .post(format!("http://{addr}/filter"))
        .body(support::extender_args(&support::pod(), &nodes))
        .send()
        .await
        .unwrap();
    let text = metrics_text(&client, addr).await;
    for line in [
        r#"flexinfer_scheduler_requests_total{result="ok",verb="filter"} 1"#,
        r#"flexinfer_scheduler_filter_decisions_total{result="passed"} 7"#,
        r#"flexinfer_scheduler_filter_decisions_total{result="rejected"} 3"#,
        r#"flexinfer_scheduler_rejections_total{reason="no_vendor_label"} 1"#,
        r#"flexinfer_scheduler_rejections_total{reason="insufficient_vram"} 1"#,
        r#"flexinfer_scheduler_rejections_total{reason="unsupported_arch"} 1"#,
        r#"flexinfer_scheduler_request_duration_seconds_count{verb="filter"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}
