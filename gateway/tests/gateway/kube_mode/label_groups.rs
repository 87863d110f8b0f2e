//! Kubernetes mode, service labels: one label claimed by several Models is
//! a label group; the gateway picks a member per request.

use flexinfer_testkube::TestApiServer;
use serde_json::{json, Value};

use crate::kube_mode::kube_support::{eventually, model, set_model_phase, slice, KubeGateway};
use crate::support::{last_recorded, pod, post_json, served_by, SimProcess};

/// Ready Models `names` (in this order) sharing the service label `chat`,
/// each with one pod named `pod-<name>` (started with `pod_flags`).
fn ready_models(server: &TestApiServer, names: &[&str], pod_flags: &[&str]) -> Vec<SimProcess> {
    names
        .iter()
        .map(|name| {
            let backend = format!("org/{name}");
            let p = pod(&format!("pod-{name}"), &[&backend], pod_flags);
            server
                .insert(&model(
                    "default",
                    name,
                    Some("Ready"),
                    json!({"serviceLabels": ["chat"]}),
                ))
                .unwrap();
            server
                .insert(&slice(
                    "default",
                    name,
                    &format!("{name}-1"),
                    &[(p.addr(), None)],
                ))
                .unwrap();
            p
        })
        .collect()
}

/// The model's Service, as the operator writes it, with `annotations`.
fn service(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"flexinfer.ai/model": name},
            "annotations": annotations},
        "spec": {"ports": [{"name": "http", "port": 8000}]}
    })
}

/// Which pod served each of `n` sequential requests for `model`.
async fn serve_sequence(gw: &KubeGateway, model: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let resp = gw.chat(model).await;
        assert_eq!(resp.status(), 200, "request for {model}");
        out.push(served_by(&resp));
    }
    out
}

async fn metrics(gw: &KubeGateway) -> String {
    crate::support::client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_shared_by_ready_models_alternates_and_prefers_ready_ones() {
    let server = TestApiServer::start().await;
    let pods = ready_models(&server, &["b", "a"], &[]);
    let gw = KubeGateway::start(&server, &[]).await;
    gw.wait_endpoints("a", 1).await;
    gw.wait_endpoints("b", 1).await;

    let got = serve_sequence(&gw, "chat", 6).await;
    assert!(
        got.chunks(2).all(|pair| {
            pair[0] != pair[1] && pair.iter().all(|p| p == "pod-a" || p == "pod-b")
        }),
        "round-robin over both members: {got:?}"
    );
    assert_eq!(got[0], got[2], "{got:?}");
    // Each member's pod sees its own served model name.
    assert_eq!(last_recorded(&pods[0]).await["model"], "org/b");
    assert_eq!(last_recorded(&pods[1]).await["model"], "org/a");
    let text = metrics(&gw).await;
    assert!(
        text.contains(
            "flexinfer_proxy_label_group_route_decisions_total{label=\"chat\",outcome=\"default_rr\",strategy=\"round-robin\"} 6"
        ),
        "{text}"
    );

    // With b loading, every request goes to a.
    set_model_phase(&server, "default", "b", "Loading").await;
    eventually("b no longer Ready", || async {
        (gw.admin("b").await["phase"] != "Ready").then_some(())
    })
    .await;
    assert_eq!(serve_sequence(&gw, "chat", 4).await, ["pod-a"; 4]);
    let list: Value = crate::support::client()
        .get(gw.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "chat"),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_member_ready_the_alphabetically_first_is_cold_started() {
    let server = TestApiServer::start().await;
    for name in ["m-b", "m-a"] {
        server
            .insert(&model(
                "default",
                name,
                Some("Idle"),
                json!({"serviceLabels": ["chat"]}),
            ))
            .unwrap();
    }
    let gw = std::sync::Arc::new(KubeGateway::start(&server, &[]).await);
    let request = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let resp = gw.chat("chat").await;
            (resp.status().as_u16(), served_by(&resp))
        })
    };
    let model_obj = |name: &str| {
        server
            .object("ai.flexinfer/v1alpha2", "Model", "default", name)
            .unwrap()
    };
    let mut m = eventually("m-a activated", || async {
        let m = model_obj("m-a");
        m["status"]["lastActiveTime"].is_string().then_some(m)
    })
    .await;
    assert!(
        model_obj("m-b")["status"]["lastActiveTime"].is_null(),
        "only the first claimant is activated"
    );
    // The operator's part: m-a loads.
    let p = pod("pod-m-a", &["org/m-a"], &[]);
    m["status"]["phase"] = json!("Ready");
    server.insert(&m).unwrap();
    server
        .insert(&slice("default", "m-a", "m-a-1", &[(p.addr(), None)]))
        .unwrap();
    let (status, by) = request.await.unwrap();
    assert_eq!((status, by.as_str()), (200, "pod-m-a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_services_on_the_service_decides_over_service_labels() {
    let server = TestApiServer::start().await;
    let _pods = ready_models(&server, &["a", "b"], &[]);
    // A shared-GPU group: b is the active member, a's value is empty.
    let labels = |active: &str| json!({"flexinfer.ai/service-labels": "chat", "ai.flexinfer/active-services": active});
    server.insert(&service("a", labels(""))).unwrap();
    server.insert(&service("b", labels("chat"))).unwrap();
    let gw = KubeGateway::start(&server, &[]).await;
    gw.wait_endpoints("a", 1).await;
    gw.wait_endpoints("b", 1).await;
    assert_eq!(serve_sequence(&gw, "chat", 4).await, ["pod-b"; 4]);

    // The operator swaps the active member: the gateway follows the Services.
    server.insert(&service("a", labels("chat"))).unwrap();
    server.insert(&service("b", labels(""))).unwrap();
    eventually("chat served by a", || async {
        (serve_sequence(&gw, "chat", 1).await == ["pod-a"]).then_some(())
    })
    .await;
    assert_eq!(serve_sequence(&gw, "chat", 4).await, ["pod-a"; 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_loaded_sends_requests_past_a_busy_member() {
    let server = TestApiServer::start().await;
    let slow = pod("pod-a", &["org/a"], &["--ttft", "2s"]);
    let _fast = ready_models(&server, &["b"], &[]);
    server
        .insert(&model(
            "default",
            "a",
            Some("Ready"),
            json!({"serviceLabels": ["chat"]}),
        ))
        .unwrap();
    server
        .insert(&slice("default", "a", "a-1", &[(slow.addr(), None)]))
        .unwrap();
    let gw = std::sync::Arc::new(
        KubeGateway::start(&server, &["--label-group-routing", "least-loaded"]).await,
    );
    gw.wait_endpoints("a", 1).await;
    gw.wait_endpoints("b", 1).await;

    // Both idle: the first member, a, takes the slow request.
    let busy = {
        let gw = gw.clone();
        tokio::spawn(async move { served_by(&gw.chat("chat").await) })
    };
    eventually("a picked", || async {
        metrics(&gw)
            .await
            .contains("flexinfer_proxy_label_group_route_target_hits_total{label=\"chat\",model=\"a\",strategy=\"least-loaded\"} 1")
            .then_some(())
    })
    .await;
    assert_eq!(serve_sequence(&gw, "chat", 4).await, ["pod-b"; 4]);
    assert_eq!(busy.await.unwrap(), "pod-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_mode_keeps_a_cache_key_on_one_member() {
    let server = TestApiServer::start().await;
    let _pods = ready_models(&server, &["a", "b"], &[]);
    let gw = KubeGateway::start(&server, &["--label-group-routing", "prefix-or-rr"]).await;
    gw.wait_endpoints("a", 1).await;
    gw.wait_endpoints("b", 1).await;

    let body = serde_json::to_vec(&crate::support::chat("chat")).unwrap();
    let url = gw.url("/v1/chat/completions");
    let mut members = std::collections::HashSet::new();
    for k in 0..12 {
        let key = format!("tenant-{k}");
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 {
            let resp = post_json(&url, &body, &[("x-flexinfer-cache-key", &key)]).await;
            assert_eq!(resp.status(), 200);
            seen.insert(served_by(&resp));
        }
        assert_eq!(seen.len(), 1, "key {key} went to {seen:?}");
        members.extend(seen);
    }
    assert_eq!(members.len(), 2, "keys spread over both members");
    let text = metrics(&gw).await;
    assert!(
        text.contains("outcome=\"hashed_prefix\",strategy=\"prefix-or-rr\"} 36"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_label_group_mode_stops_the_gateway() {
    let server = TestApiServer::start().await;
    let err = KubeGateway::start_error(&server, &["--label-group-routing", "PREFIX-OR-RR"]).await;
    assert!(
        err.contains("FLEXINFER_PROXY_LABEL_GROUP_ROUTING must be one of"),
        "{err}"
    );
}
