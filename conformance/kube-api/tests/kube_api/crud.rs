use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::{self, Discovery};
use kube::{Client, Config};
use serde_json::json;

use flexinfer_testkube::{TestApiServer, Verb};

use crate::{api_status, config_map};

#[tokio::test]
async fn create_get_list_replace_delete() {
    let server = TestApiServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());

    let created = api
        .create(&PostParams::default(), &config_map("a", &[("k", "v")]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();

    let got = api.get("a").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);

    // A write based on the old resourceVersion conflicts.
    let stale = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    let status = api_status(stale);
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");

    // So does creating the same name.
    let exists = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap_err();
    let status = api_status(exists);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );

    api.create(&PostParams::default(), &config_map("b", &[]))
        .await
        .unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv > rv2);

    // A ConfigMap deleted at once is answered with a Status, as upstream.
    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_right());
    let missing = api_status(api.get("a").await.unwrap_err());
    assert_eq!(missing.code, 404);
    assert_eq!(missing.reason, "NotFound");
    assert_eq!(missing.message, "configmaps \"a\" not found");
    assert_eq!(missing.details.as_ref().unwrap().kind, "configmaps");
    assert!(api.get_opt("a").await.unwrap().is_none());

    assert_eq!(server.writes(Verb::Create, "configmaps"), 3);
    assert_eq!(server.writes(Verb::Update, "configmaps"), 2);
    assert_eq!(server.writes(Verb::Delete, "configmaps"), 1);
    assert_eq!(server.writes(Verb::Get, "configmaps"), 0);
    assert_eq!(server.requests(Verb::Get, "configmaps"), 3);
}

#[tokio::test]
async fn generation_tracks_spec_changes_only() {
    let server = TestApiServer::start().await;
    let api: Api<Deployment> = Api::default_namespaced(server.client());
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}}
        },
        "status": {"replicas": 99}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is not writable on create");

    let pp = PatchParams::default();
    let labelled = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1));

    let scaled = api
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2));

    let status = api
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(status.metadata.generation, Some(2));
    assert_eq!(status.status.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn namespaces_must_exist_and_names_can_be_generated() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let err = api_status(
        nowhere
            .create(&PostParams::default(), &config_map("a", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "namespaces \"nowhere\" not found");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "nowhere"}})).unwrap();
    let ns = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));

    let mut generated = config_map("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let made = nowhere
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // Dry runs answer without storing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    nowhere.create(&dry, &config_map("dry", &[])).await.unwrap();
    assert!(nowhere.get_opt("dry").await.unwrap().is_none());

    // Secrets: stringData is folded into data.
    let secrets: Api<Secret> = Api::default_namespaced(client);
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"token": "abc"}}))
            .unwrap();
    let s = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(s.data.unwrap()["token"].0, b"abc");
    assert!(s.string_data.is_none());
}

#[tokio::test]
async fn discovery_kubeconfig_and_independent_instances() {
    let one = TestApiServer::start().await;
    let two = TestApiServer::start().await;
    assert_ne!(one.addr(), two.addr());

    let client = one.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "33");

    for discovery in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .unwrap(),
    ] {
        assert!(discovery.has_group("ai.flexinfer"));
        assert!(discovery.has_group("apps"));
        let (ar, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk("ai.flexinfer", "v1alpha2", "Model"))
            .expect("Model discovered");
        assert_eq!(ar.plural, "models");
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(
            !caps.subresources.is_empty(),
            "status subresource discovered"
        );
    }
    let (ar, _) = discovery::pinned_kind(
        &client,
        &GroupVersionKind::gvk("ai.flexinfer", "v1alpha1", "GPUGroup"),
    )
    .await
    .unwrap();
    let gpugroups: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar);
    assert!(gpugroups
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());

    // The kubeconfig file works with kube's own loader.
    let kubeconfig = Kubeconfig::read_from(two.kubeconfig_path()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let via_file = Client::try_from(config).unwrap();
    let cms_two: Api<ConfigMap> = Api::default_namespaced(via_file);
    cms_two
        .create(&PostParams::default(), &config_map("only-in-two", &[]))
        .await
        .unwrap();
    let cms_one: Api<ConfigMap> = Api::default_namespaced(client);
    assert!(cms_one.get_opt("only-in-two").await.unwrap().is_none());
    assert_eq!(one.total_writes(), 0);
    assert_eq!(two.total_writes(), 1);
}
