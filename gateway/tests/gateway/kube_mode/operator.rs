//! Kubernetes mode with `--embedded-operator`: the operator's controllers
//! run inside the gateway process, and the two halves meet through the
//! cluster: the gateway's activation patch (`status.lastActiveTime`) makes
//! the embedded operator scale an idle Model's Deployment from 0 to 1.

use flexinfer_testkube::TestApiServer;
use serde_json::{json, Value};

use crate::kube_mode::kube_support::{eventually, model, KubeGateway};

fn replicas(server: &TestApiServer, name: &str) -> Option<i64> {
    server
        .object("apps/v1", "Deployment", "default", name)
        .and_then(|d| d["spec"]["replicas"].as_i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_operator_reconciles_and_scales_from_zero_on_a_request() {
    let server = TestApiServer::start().await;
    let gw = KubeGateway::start(&server, &["--embedded-operator"]).await;

    // A serverless CPU model: the embedded operator creates its Service and
    // a Deployment with no replica (never active yet).
    let spec = json!({"backend": "llamacpp", "source": "file:///models/tiny.gguf",
                      "serverless": {"enabled": true, "idleTimeout": "5m"}});
    let mut obj = model("default", "tiny", None, Value::Null);
    obj["spec"] = spec;
    server.insert(&obj).expect("model");
    eventually(
        "Deployment and Service from the embedded operator",
        || async {
            let service = server.object("v1", "Service", "default", "tiny");
            (service.is_some() && replicas(&server, "tiny") == Some(0)).then_some(())
        },
    )
    .await;
    let status = eventually("a phase from the operator", || async {
        let m = server.object("ai.flexinfer/v1alpha2", "Model", "default", "tiny")?;
        m["status"]["phase"].as_str().map(str::to_owned)
    })
    .await;
    assert_eq!(status, "Idle", "a never-used serverless model is idle");

    // A request for it: the gateway patches lastActiveTime, the operator
    // (in the same process) scales the Deployment to one replica.
    let client = crate::support::client();
    let url = gw.url("/v1/chat/completions");
    let request = tokio::spawn(async move {
        client
            .post(url)
            .json(&json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
    });
    eventually("replicas 0 -> 1 after the request", || async {
        (replicas(&server, "tiny") == Some(1)).then_some(())
    })
    .await;
    let m = server
        .object("ai.flexinfer/v1alpha2", "Model", "default", "tiny")
        .expect("model");
    assert!(
        m["status"]["lastActiveTime"].is_string(),
        "the gateway's activity mark is kept: {m}"
    );
    request.abort();

    let metrics = crate::support::client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    assert!(
        metrics.contains("flexinfer_operator_reconciles_total"),
        "the embedded operator's metrics are not on the gateway's /metrics"
    );
}
