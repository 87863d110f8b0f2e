//! Kubernetes mode, routing: Models and EndpointSlices in an in-memory API
//! server, real `flexinfer-sim` processes as the pods.

use std::collections::HashSet;

use flexinfer_testkube::TestApiServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::kube_mode::kube_support::{model, put_slice, slice, KubeGateway};
use crate::support::{last_recorded, pod, served_by};

/// Which pods served `n` chat requests for `model` (all must succeed).
async fn served(gw: &KubeGateway, model: &str, n: usize) -> HashSet<String> {
    let mut pods = HashSet::new();
    for _ in 0..n {
        let resp = gw.chat(model).await;
        assert_eq!(resp.status(), 200, "request for {model}");
        pods.insert(served_by(&resp));
    }
    pods
}

fn set(names: &[&str]) -> HashSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_follow_endpoint_slices_and_skip_terminating_nodes() {
    let server = TestApiServer::start().await;
    let (a, b, c) = (
        pod("pod-a", &["org/m"], &[]),
        pod("pod-b", &["org/m"], &[]),
        pod("pod-c", &["org/m"], &[]),
    );
    server
        .insert(&model("default", "m", Some("Ready"), json!({})))
        .unwrap();
    server
        .insert(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "spot-1"}}))
        .unwrap();
    server
        .insert(&slice("default", "m", "m-a", &[(a.addr(), None)]))
        .unwrap();
    let gw = KubeGateway::start(&server, &[]).await;
    gw.wait_endpoints("m", 1).await;
    assert_eq!(served(&gw, "m", 4).await, set(&["pod-a"]));

    // A new slice (a watch event) adds endpoints; rotation reaches both.
    put_slice(&server, slice("default", "m", "m-b", &[(b.addr(), None)])).await;
    put_slice(
        &server,
        slice("default", "m", "m-c", &[(c.addr(), Some("spot-1"))]),
    )
    .await;
    gw.wait_endpoints("m", 3).await;
    assert_eq!(
        served(&gw, "m", 12).await,
        set(&["pod-a", "pod-b", "pod-c"])
    );

    // The node of pod-c is about to be reclaimed: no more requests there.
    let nodes: Api<Node> = Api::all(server.client());
    nodes
        .patch(
            "spot-1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"flexinfer.ai/spot-terminating": "true"}}}),
            ),
        )
        .await
        .unwrap();
    gw.wait_endpoints("m", 2).await;
    assert_eq!(served(&gw, "m", 12).await, set(&["pod-a", "pod-b"]));

    // pod-b leaves its slice: once that one event is seen, it gets nothing.
    put_slice(&server, slice("default", "m", "m-b", &[])).await;
    gw.wait_endpoints("m", 1).await;
    assert_eq!(served(&gw, "m", 12).await, set(&["pod-a"]));

    // The backend sees the model's served name from its source.
    assert_eq!(last_recorded(&a).await["model"], "org/m");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_resolve_across_namespaces_aliases_and_adapters() {
    let server = TestApiServer::start().await;
    let home = pod("home", &["org/m"], &[]);
    let team = pod("team", &["org/m", "sql-v1"], &[]);
    for ns in ["team", "other"] {
        server
            .insert(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
    }
    let mut m = model(
        "default",
        "m",
        Some("Ready"),
        json!({"litellm": {"aliases": ["chat"]}}),
    );
    m["metadata"]["annotations"] = json!({"flexinfer.ai/routing": "least-loaded"});
    server.insert(&m).unwrap();
    server
        .insert(&model(
            "team",
            "m",
            Some("Ready"),
            json!({"litellm": {"aliases": ["chat", "team-chat"]}}),
        ))
        .unwrap();
    server
        .insert(&model("other", "hidden", Some("Ready"), json!({})))
        .unwrap();
    server
        .insert(&json!({
            "apiVersion": "ai.flexinfer/v1alpha2", "kind": "LoRAAdapter",
            "metadata": {"name": "sql", "namespace": "team"},
            "spec": {"modelRef": "m", "adapterName": "sql-v1",
                "source": {"type": "HuggingFace", "uri": "org/sql"}}
        }))
        .unwrap();
    server
        .insert(&slice("default", "m", "m-1", &[(home.addr(), None)]))
        .unwrap();
    server
        .insert(&slice("team", "m", "m-1", &[(team.addr(), None)]))
        .unwrap();
    let gw = KubeGateway::start(&server, &["--namespaces", "default,team"]).await;
    gw.wait_endpoints("m", 1).await;
    gw.wait_endpoints("team/m", 1).await;

    for (name, pod) in [
        ("m", "home"),
        ("default/m", "home"),
        ("chat", "home"),
        ("team/m", "team"),
        ("team-chat", "team"),
        ("sql-v1", "team"),
    ] {
        assert_eq!(served(&gw, name, 1).await, set(&[pod]), "{name}");
    }
    // The adapter name reaches the engine as sent.
    assert_eq!(last_recorded(&team).await["model"], "sql-v1");
    let resp = gw.chat("hidden").await;
    assert_eq!(resp.status(), 404, "namespace 'other' is not watched");

    let list: serde_json::Value = crate::support::client()
        .get(gw.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: HashSet<String> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    for id in ["m", "chat", "team/m", "team-chat", "sql-v1"] {
        assert!(ids.contains(id), "{id} missing from {ids:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_aware_model_keeps_each_prompt_on_the_pod_that_cached_it() {
    let server = TestApiServer::start().await;
    let (a, b) = (pod("pod-a", &["org/m"], &[]), pod("pod-b", &["org/m"], &[]));
    let mut m = model("default", "m", Some("Ready"), json!({}));
    m["metadata"]["annotations"] = json!({"flexinfer.ai/routing": "cache-aware"});
    server.insert(&m).unwrap();
    for (name, pod) in [("m-a", &a), ("m-b", &b)] {
        server
            .insert(&slice("default", "m", name, &[(pod.addr(), None)]))
            .unwrap();
    }
    let gw = KubeGateway::start(&server, &[]).await;
    gw.wait_endpoints("m", 2).await;

    // Two tenants with long system prompts: each stays where it went first.
    for tenant in ["alpha", "beta"] {
        let system = format!("{tenant} policy. ").repeat(200);
        let mut pods = HashSet::new();
        for turn in 0..6 {
            let body = json!({"model": "m", "max_tokens": 1, "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": format!("question {turn}")},
            ]});
            let resp = crate::support::client()
                .post(gw.url("/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            pods.insert(served_by(&resp));
        }
        assert_eq!(pods.len(), 1, "{tenant} moved: {pods:?}");
    }
}
