use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Resource;
use serde_json::json;

use flexinfer_testkube::{TestApiServer, Verb};

use crate::{api_status, config_map, eventually};

fn owned_secret(name: &str, owner: &ConfigMap) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    s
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let server = TestApiServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut cm = config_map("f", &[]);
    cm.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();

    let marked = api
        .delete("f", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    let still = api.get("f").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());

    // Finalizers cannot be added any more.
    let err = api
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup", "late"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_status(err).code, 422);

    let uid = still.metadata.uid.clone().unwrap();
    let gone = await_condition(api.clone(), "f", conditions::is_deleted(&uid));
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), gone)
        .await
        .unwrap()
        .unwrap();
    assert!(api.get_opt("f").await.unwrap().is_none());
}

#[tokio::test]
async fn owner_deletion_garbage_collects_dependents() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &config_map("owner", &[]))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &owned_secret("dep", &owner))
        .await
        .unwrap();

    // Background (default): the owner goes at once, dependents follow.
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually("dependent collected", || async {
        secrets
            .get_opt("dep")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // Orphan: dependents stay, without the owner reference.
    let owner = cms
        .create(&PostParams::default(), &config_map("owner2", &[]))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &owned_secret("orphan", &owner))
        .await
        .unwrap();
    cms.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    eventually("owner removed", || async {
        cms.get_opt("owner2").await.unwrap().is_none().then_some(())
    })
    .await;
    let orphan = secrets.get("orphan").await.unwrap();
    assert!(orphan
        .metadata
        .owner_references
        .unwrap_or_default()
        .is_empty());

    // Foreground: the owner waits for its dependents that block its
    // deletion.
    let owner = cms
        .create(&PostParams::default(), &config_map("owner3", &[]))
        .await
        .unwrap();
    let mut held = owned_secret("held", &owner);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    for r in held.metadata.owner_references.iter_mut().flatten() {
        r.block_owner_deletion = Some(true);
    }
    secrets.create(&PostParams::default(), &held).await.unwrap();
    cms.delete("owner3", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually("dependent marked", || async {
        secrets
            .get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    let waiting = cms.get("owner3").await.unwrap();
    assert!(waiting
        .metadata
        .finalizers
        .unwrap()
        .contains(&"foregroundDeletion".to_string()));
    secrets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("owner removed after dependents", || async {
        cms.get_opt("owner3").await.unwrap().is_none().then_some(())
    })
    .await;

    // Dependents whose owner never existed are collected too.
    let mut dangling = Secret::default();
    dangling.metadata.name = Some("dangling".into());
    dangling.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "ghost".into(),
        uid: "00000000-0000-4000-8000-000000000000".into(),
        ..Default::default()
    }]);
    secrets
        .create(&PostParams::default(), &dangling)
        .await
        .unwrap();
    eventually("dangling collected", || async {
        secrets
            .get_opt("dangling")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn namespace_deletion_removes_its_contents() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "tmp"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    let mut held = config_map("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    cms.create(&PostParams::default(), &config_map("plain", &[]))
        .await
        .unwrap();

    namespaces
        .delete("tmp", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("tmp").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    eventually("plain removed", || async {
        cms.get_opt("plain").await.unwrap().is_none().then_some(())
    })
    .await;
    let err = api_status(
        cms.create(&PostParams::default(), &config_map("new", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403);

    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("namespace removed", || async {
        namespaces
            .get_opt("tmp")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn injected_faults_fail_the_next_requests() {
    let server = TestApiServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();

    server.fail_next(Verb::Get, "configmaps", 2, 500);
    for _ in 0..2 {
        let err = api_status(api.get("a").await.unwrap_err());
        assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    }
    api.get("a").await.unwrap();
    assert_eq!(server.requests(Verb::Get, "configmaps"), 3);

    // kube's client retries 429, 503 and 504 on its own.
    server.fail_next(Verb::Get, "configmaps", 2, 503);
    api.get("a").await.unwrap();
    assert_eq!(server.requests(Verb::Get, "configmaps"), 6);

    server.fail_next(Verb::Patch, "*", 1, 409);
    let err = api_status(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "y"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(
        api.get("a")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .is_empty(),
        "failed write did not happen"
    );
    assert_eq!(server.writes(Verb::Patch, "configmaps"), 1);

    server.reset_counters();
    assert_eq!(server.total_writes(), 0);
}
