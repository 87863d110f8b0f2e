//! The ModelCatalog controller against the in-memory API server and a real
//! OCI registry (Debian's `docker-registry`) on loopback, with artifacts
//! pushed by `oras`. Skipped (saying so) without the registry unless
//! `FLEXINFER_REQUIRE_REGISTRY=1`.

use crate::common;
#[path = "../../../flashload/tests/flashload/support/fake_ecr.rs"]
mod fake_ecr;
#[path = "../../../flashload/tests/flashload/support/registry.rs"]
mod registry;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use flexinfer_crds::v1alpha2::{
    CatalogFilter, ModelCatalog, ModelCatalogSpec, RegistrySource, RegistryType,
};
use flexinfer_operator::controllers::model_catalog::{reconcile, READY};
use flexinfer_operator::controllers::Context;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use registry::{pseudo_random, Registry};
use serde_json::json;

fn catalog(
    name: &str,
    url: &str,
    secret: Option<&str>,
    filter: Option<CatalogFilter>,
) -> ModelCatalog {
    let mut c = ModelCatalog::new(
        name,
        ModelCatalogSpec {
            registries: vec![RegistrySource {
                type_: RegistryType::Oci,
                url: Some(url.into()),
                secret_ref: secret.map(str::to_owned),
                provider: None,
                repositories: Vec::new(),
            }],
            sync_interval: Duration::from_secs(600).into(),
            filter,
        },
    );
    c.metadata.namespace = Some("default".into());
    c
}

async fn create(ctx: &Context, c: &ModelCatalog) {
    let api: Api<ModelCatalog> = Api::default_namespaced(ctx.client.clone());
    api.create(&PostParams::default(), c).await.unwrap();
}

async fn get(ctx: &Context, name: &str) -> ModelCatalog {
    let api: Api<ModelCatalog> = Api::default_namespaced(ctx.client.clone());
    api.get(name).await.unwrap()
}

async fn sync(ctx: &Arc<Context>, name: &str) -> kube::runtime::controller::Action {
    reconcile(Arc::new(get(ctx, name).await), ctx.clone())
        .await
        .unwrap()
}

fn ready(c: &ModelCatalog) -> (String, String, String) {
    let cond = c
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
        .expect("a Ready condition")
        .clone();
    (cond.status, cond.reason, cond.message)
}

fn references(c: &ModelCatalog) -> Vec<String> {
    c.status
        .as_ref()
        .map(|s| s.entries.iter().map(|e| e.reference.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn lists_repositories_and_tags_filters_them_and_resyncs_on_the_interval() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let weights = pseudo_random(300_000, 3);
    let config = b"{\"model_type\":\"qwen3\"}".to_vec();
    reg.push(
        "models/qwen",
        "v1",
        &[("q.gguf", &weights), ("config.json", &config)],
    );
    reg.push("models/qwen", "v2", &[("q.gguf", &weights[..1000])]);
    reg.push("models/llama", "v1", &[("l.gguf", &weights[..5000])]);
    reg.push("models/draft", "v2", &[("d.gguf", &weights[..10])]);
    reg.push("other/thing", "v1", &[("t.bin", &weights[..10])]);

    let (server, ctx, clock) = setup().await;
    let filter = CatalogFilter {
        tags: vec!["v1".into()],
        name_pattern: Some("models/*".into()),
    };
    create(&ctx, &catalog("local", &reg.addr, None, Some(filter))).await;
    let action = sync(&ctx, "local").await;
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(600))
    );
    let c = get(&ctx, "local").await;
    let status = c.status.clone().unwrap();
    let a = &reg.addr;
    assert_eq!(
        references(&c),
        [
            format!("oci://{a}/models/llama:v1"),
            format!("oci://{a}/models/qwen:v1"),
            format!("oci://{a}/models/qwen:v2"),
        ],
        "models/draft lacks tag v1, other/thing fails the pattern"
    );
    assert_eq!(status.total_models, Some(3));
    assert_eq!(status.entries[1].name, "models/qwen");
    assert_eq!(status.entries[1].registry, "OCI");
    assert_eq!(
        status.entries[1].size,
        Some((weights.len() + config.len()) as i64)
    );
    assert_eq!(status.entries[2].size, Some(1000));
    assert_eq!(
        status
            .last_sync_time
            .as_ref()
            .map(flexinfer_operator::controllers::conditions::from_time),
        Some(t0())
    );
    assert_eq!(ready(&c).0, "True");

    // Not due yet: the status write woke the controller, nothing is synced
    // or written.
    server.reset_counters();
    let action = sync(&ctx, "local").await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(600))
    );

    // Due after the interval: a new tag shows up.
    reg.push("models/llama", "v2", &[("l.gguf", &weights[..6000])]);
    clock.advance(Duration::from_secs(601));
    sync(&ctx, "local").await;
    let c = get(&ctx, "local").await;
    assert!(references(&c).contains(&format!("oci://{a}/models/llama:v2")));
    assert_eq!(c.status.unwrap().total_models, Some(4));

    // Named repositories under a path, no filter.
    let mut named = catalog("named", &format!("{a}/other"), None, None);
    named.spec.registries[0].repositories = vec!["thing".into()];
    create(&ctx, &named).await;
    sync(&ctx, "named").await;
    assert_eq!(
        references(&get(&ctx, "named").await),
        [format!("oci://{a}/other/thing:v1")]
    );
}

async fn docker_config_secret(ctx: &Context, name: &str, registry: &str, user: &str, pass: &str) {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    let config = json!({"auths": {registry: {"auth": auth}}}).to_string();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(config.into_bytes()),
        )])),
        ..Default::default()
    };
    let api: Api<Secret> = Api::default_namespaced(ctx.client.clone());
    let _ = api.delete(name, &Default::default()).await;
    api.create(&PostParams::default(), &secret).await.unwrap();
}

#[tokio::test]
async fn credentials_come_from_the_secret_and_a_refusal_is_reported() {
    let Some(reg) = Registry::start(Some(("catalog", "s3cret"))) else {
        return;
    };
    reg.push("private/m", "v1", &[("m.gguf", &pseudo_random(1000, 5))]);
    let (_server, ctx, clock) = setup().await;
    docker_config_secret(&ctx, "pull", &reg.addr, "catalog", "s3cret").await;
    create(&ctx, &catalog("private", &reg.addr, Some("pull"), None)).await;
    sync(&ctx, "private").await;
    let c = get(&ctx, "private").await;
    assert_eq!(ready(&c).0, "True", "{:?}", ready(&c));
    assert_eq!(references(&c), [format!("oci://{}/private/m:v1", reg.addr)]);

    // The password is changed: Ready=False with the registry's refusal,
    // the previous entries kept, a retry sooner than the interval.
    docker_config_secret(&ctx, "pull", &reg.addr, "catalog", "wrong").await;
    clock.advance(Duration::from_secs(601));
    let action = sync(&ctx, "private").await;
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(30))
    );
    let c = get(&ctx, "private").await;
    let (status, reason, message) = ready(&c);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SyncFailed"));
    assert!(
        message.contains(&format!("registry {} refused credentials (401)", reg.addr)),
        "{message}"
    );
    assert!(
        !message.contains("wrong"),
        "no secret in the message: {message}"
    );
    assert_eq!(references(&c), [format!("oci://{}/private/m:v1", reg.addr)]);

    // A missing Secret is an error too.
    let api: Api<ModelCatalog> = Api::default_namespaced(ctx.client.clone());
    api.patch(
        "private",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"registries": [{"type": "OCI", "url": reg.addr, "secretRef": "absent"}]}})),
    )
    .await
    .unwrap();
    sync(&ctx, "private").await;
    let (status, _, message) = ready(&get(&ctx, "private").await);
    assert_eq!(status, "False");
    assert!(message.contains("Secret absent not found"), "{message}");
}

#[tokio::test]
async fn the_running_controller_fills_the_status() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    reg.push("models/tiny", "v1", &[("t.gguf", &pseudo_random(2000, 9))]);
    let (_server, ctx, _clock) = setup().await;
    create(&ctx, &catalog("live", &reg.addr, None, None)).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = futures::FutureExt::shared(async move {
        let _ = stopped.await;
    });
    let task = tokio::spawn(flexinfer_operator::controllers::model_catalog::run(
        ctx.clone(),
        stopped,
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let c = get(&ctx, "live").await;
        if c.status.as_ref().and_then(|s| s.total_models) == Some(1) {
            assert_eq!(
                references(&c),
                [format!("oci://{}/models/tiny:v1", reg.addr)]
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no status after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn aws_keys_in_the_secret_are_exchanged_for_an_ecr_token() {
    let password = "ecr-login-password";
    let Some(reg) = Registry::start(Some(("AWS", password))) else {
        return;
    };
    reg.push("team/model", "v3", &[("m.gguf", &pseudo_random(100, 1))]);
    let ecr = fake_ecr::start("AKIDCATALOG", "eu-central-1", password).await;
    let (_server, ctx, _clock) = setup().await;
    let data = [
        ("aws_access_key_id", "AKIDCATALOG"),
        ("aws_secret_access_key", "never-shown"),
        ("aws_region", "eu-central-1"),
        ("ecr_endpoint", ecr.endpoint.as_str()),
    ];
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("aws".into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::default_namespaced(ctx.client.clone());
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut c = catalog("ecr", &reg.addr, Some("aws"), None);
    c.spec.registries[0].provider = Some(flexinfer_crds::v1alpha2::OciProvider::Ecr);
    c.spec.registries[0].repositories = vec!["team/model".into()];
    create(&ctx, &c).await;
    sync(&ctx, "ecr").await;
    let c = get(&ctx, "ecr").await;
    assert_eq!(ready(&c).0, "True", "{:?}", ready(&c));
    assert_eq!(
        references(&c),
        [format!("oci://{}/team/model:v3", reg.addr)]
    );
    assert_eq!(ecr.calls().len(), 1);
}

/// A catalog far larger than an object may be (here 20,000 entries, kept
/// from a registry that now fails, with sixty registries' errors in the
/// message) is written bounded: the first entries in order, `totalModels`
/// counting them all, a message of at most 4 KiB; the status stays far
/// under etcd's 1.5 MiB limit.
#[tokio::test]
async fn a_huge_catalog_keeps_its_status_small() {
    use flexinfer_operator::catalog::bounds::{MAX_ENTRIES, MAX_ENTRIES_BYTES, MAX_MESSAGE_BYTES};

    let (_server, ctx, _clock) = setup().await;
    // Nothing listens on port 1: every sync of these registries fails.
    let dead = "127.0.0.1:1";
    let mut c = catalog("huge", &format!("{dead}/models"), None, None);
    for n in 1..60 {
        c.spec.registries.push(RegistrySource {
            url: Some(format!("127.0.0.{}:1/models-with-a-long-path-{n}", n + 1)),
            ..c.spec.registries[0].clone()
        });
    }
    create(&ctx, &c).await;
    let entries: Vec<serde_json::Value> = (0..20_000)
        .map(|n| {
            json!({"name": format!("models/m{n:05}"), "registry": "OCI",
                   "reference": format!("oci://{dead}/models/m{n:05}:v1"), "size": 1})
        })
        .collect();
    let api: Api<ModelCatalog> = Api::default_namespaced(ctx.client.clone());
    api.patch_status(
        "huge",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"entries": entries, "totalModels": 20_000}})),
    )
    .await
    .expect("the previous status");

    sync(&ctx, "huge").await;
    let c = get(&ctx, "huge").await;
    let status = c.status.clone().expect("status");
    assert_eq!(status.total_models, Some(20_000));
    assert_eq!(status.entries.len(), MAX_ENTRIES);
    assert_eq!(status.entries[0].name, "models/m00000");
    assert_eq!(
        status.entries[MAX_ENTRIES - 1].name,
        format!("models/m{:05}", MAX_ENTRIES - 1)
    );
    let (ready, _, message) = ready(&c);
    assert_eq!(ready, "False");
    assert!(
        message.len() <= MAX_MESSAGE_BYTES,
        "{} bytes",
        message.len()
    );
    let bytes = serde_json::to_vec(&status).expect("JSON").len();
    assert!(
        bytes < MAX_ENTRIES_BYTES + 2 * MAX_MESSAGE_BYTES,
        "{bytes} bytes of status"
    );
}
