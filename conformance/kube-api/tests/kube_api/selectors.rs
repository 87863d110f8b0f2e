use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use flexinfer_testkube::TestApiServer;

fn pod(name: &str, labels: serde_json::Value, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
    }))
    .unwrap()
}

async fn names(api: &Api<Pod>, lp: &ListParams) -> Vec<String> {
    api.list(lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

#[tokio::test]
async fn label_and_field_selectors() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let other: Namespace = serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &other)
        .await
        .unwrap();

    let default: Api<Pod> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    default
        .create(
            &pp,
            &pod("web-1", json!({"app": "web", "tier": "front"}), "n1"),
        )
        .await
        .unwrap();
    default
        .create(
            &pp,
            &pod(
                "web-2",
                json!({"app": "web", "tier": "front", "canary": "yes"}),
                "n2",
            ),
        )
        .await
        .unwrap();
    default
        .create(
            &pp,
            &pod("db-1", json!({"app": "db", "tier": "back"}), "n1"),
        )
        .await
        .unwrap();
    let in_other: Api<Pod> = Api::namespaced(client.clone(), "other");
    in_other
        .create(&pp, &pod("web-3", json!({"app": "web"}), "n1"))
        .await
        .unwrap();

    let lp = ListParams::default;
    assert_eq!(
        names(&default, &lp().labels("app=web")).await,
        ["web-1", "web-2"]
    );
    assert_eq!(names(&default, &lp().labels("app!=web")).await, ["db-1"]);
    assert_eq!(
        names(&default, &lp().labels("tier in (front,back),!canary")).await,
        ["db-1", "web-1"]
    );
    assert_eq!(
        names(&default, &lp().labels("tier notin (front)")).await,
        ["db-1"]
    );
    assert_eq!(names(&default, &lp().labels("canary")).await, ["web-2"]);
    assert_eq!(
        names(&default, &lp().fields("spec.nodeName=n1")).await,
        ["db-1", "web-1"]
    );
    assert_eq!(
        names(&default, &lp().fields("metadata.name=web-2")).await,
        ["web-2"]
    );
    assert_eq!(
        names(
            &default,
            &lp().fields("metadata.name!=web-2").labels("app=web")
        )
        .await,
        ["web-1"]
    );

    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(
        names(&all, &lp().fields("metadata.namespace=other")).await,
        ["web-3"]
    );
    assert_eq!(
        names(&all, &lp().labels("app=web").fields("spec.nodeName=n1")).await,
        ["web-1", "web-3"]
    );

    let bad = default.list(&lp().labels("app in (web")).await.unwrap_err();
    assert_eq!(crate::api_status(bad).code, 400);

    // deletecollection honours selectors too.
    let deleted = default
        .delete_collection(&kube::api::DeleteParams::default(), &lp().labels("app=web"))
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(deleted.items.len(), 2);
    assert_eq!(names(&default, &lp()).await, ["db-1"]);
    assert_eq!(names(&in_other, &lp()).await, ["web-3"]);
}

#[tokio::test]
async fn lists_paginate_with_continue_tokens() {
    let server = TestApiServer::start().await;
    let api: Api<Pod> = Api::default_namespaced(server.client());
    for i in 0..5 {
        api.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), json!({}), "n"),
        )
        .await
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(2);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        seen.extend(page.items.into_iter().map(|p| p.metadata.name.unwrap()));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
}
