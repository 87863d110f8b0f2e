//! The extender's watched caches against the in-memory Kubernetes API
//! (`flexinfer-testkube`): objects are created, patched and deleted through
//! `kube::Api`, and the lookups follow them through the watch, without a
//! request of their own. Mostly the benchmark ConfigMaps behind the
//! tokens/s term; also the Node cache and the Pod cache of fair share.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flexinfer_sched::extender::{NodeSource as _, Settings};
use flexinfer_sched::facts::{NodeFacts, PodFacts};
use flexinfer_sched::tenant::{FairShare, TenantUsage as _};
use flexinfer_sched::tps::{benchmark_key, TpsLookup, TpsSource as _};
use flexinfer_sched::watch::{benchmark_config_maps, nodes, pods, ConfigMapCache};
use flexinfer_sched::Extender;
use flexinfer_testkube::{TestApiServer, Verb};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const GLOBAL: &str = "flexinfer-benchmark-results";
const DEPLOYMENT: &str = "qwen-md-benchmark-results";
const GFX1100: &str = "vendor=AMD,arch=gfx1100,vram=24Gi,count=1,int4=true";
const GFX906: &str = "vendor=AMD,arch=gfx906,vram=16Gi,count=1,int4=true";

/// How long a change may take to arrive through the watch (loaded CI).
const PROPAGATION: Duration = Duration::from_secs(15);

/// A server with namespaces `ml` and `other`, counters zeroed.
async fn server() -> TestApiServer {
    let server = TestApiServer::start().await;
    let namespaces: Api<Namespace> = Api::all(server.client());
    for name in ["ml", "other"] {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }
    server.reset_counters();
    server
}

/// Starts the extender's ConfigMap cache on `client`, watching `namespace`
/// (all when empty), and waits for its first list.
async fn watch(client: Client, namespace: &str) -> (ConfigMapCache, JoinHandle<()>) {
    let (cache, task) = benchmark_config_maps(client, namespace, GLOBAL.into());
    let task = tokio::spawn(task);
    tokio::time::timeout(PROPAGATION, cache.store().wait_until_ready())
        .await
        .expect("initial list within the deadline")
        .expect("reflector writer alive");
    (cache, task)
}

async fn create(client: &Client, namespace: &str, name: &str, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }))
    .expect("ConfigMap");
    api.create(&PostParams::default(), &config_map)
        .await
        .expect("create ConfigMap");
}

async fn merge(client: &Client, namespace: &str, name: &str, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": data })),
    )
    .await
    .expect("patch ConfigMap");
}

async fn delete(client: &Client, namespace: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete ConfigMap");
}

/// Waits until `check` holds, failing after [`PROPAGATION`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PROPAGATION;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not seen through the watch within {PROPAGATION:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A vLLM pod of model `qwen` owned by ModelDeployment `qwen-md` in `ml`.
fn pod() -> PodFacts {
    PodFacts {
        namespace: "ml".into(),
        name: "qwen-md-0".into(),
        backend: Some("vllm".into()),
        model: Some("qwen".into()),
        deployment: Some("qwen-md".into()),
        gpu_count: 1.0,
        ..Default::default()
    }
}

fn node(arch: &'static str, vram: &'static str) -> NodeFacts<'static> {
    NodeFacts {
        name: "n",
        vendor: Some("AMD"),
        arch: Some(arch),
        vram: Some(vram),
        count: Some("1"),
        int4: Some("true"),
        ..Default::default()
    }
}

/// Tokens/s of [`pod`] on a gfx1100 and on a gfx906 node, as a request
/// would see them.
fn tps(cache: &ConfigMapCache) -> (f64, f64) {
    let mut lookup = TpsLookup::new(cache, &pod(), GLOBAL);
    (
        lookup.tps(&node("gfx1100", "24Gi")),
        lookup.tps(&node("gfx906", "16Gi")),
    )
}

fn key(class: &str) -> String {
    benchmark_key("vllm", "qwen", class)
}

/// Runs `lookups` and asserts that it sent no request to the API server.
fn without_requests(server: &TestApiServer, lookups: impl FnOnce()) {
    let before = server.request_counts();
    lookups();
    assert_eq!(
        server.request_counts(),
        before,
        "lookups must read the watched cache"
    );
}

/// The lookup order (global key of the device class, then the
/// deployment's `tokensPerSecond`, then 0) follows creations, updates and
/// deletions of both ConfigMaps as they arrive through the watch; lookups
/// never call the API server.
#[tokio::test]
async fn lookups_follow_creations_updates_and_deletions() {
    let server = server().await;
    let client = server.client();
    let (cache, task) = watch(client.clone(), "").await;

    without_requests(&server, || assert_eq!(tps(&cache), (0.0, 0.0)));

    // The per-deployment result applies to every device class.
    create(
        &client,
        "ml",
        DEPLOYMENT,
        json!({"tokensPerSecond": "17.25"}),
    )
    .await;
    eventually("per-deployment ConfigMap ADDED", || {
        tps(&cache) == (17.25, 17.25)
    })
    .await;

    // The same names in another namespace are not the pod's.
    create(
        &client,
        "other",
        DEPLOYMENT,
        json!({"tokensPerSecond": "99"}),
    )
    .await;
    create(&client, "other", GLOBAL, json!({ key(GFX906): "99" })).await;

    // The global result wins for the device class it names.
    create(&client, "ml", GLOBAL, json!({ key(GFX1100): "42.5" })).await;
    eventually("global ConfigMap ADDED", || tps(&cache) == (42.5, 17.25)).await;
    // Events arrive in order: the `other` ConfigMaps were seen before.
    assert!(cache.config_map("other", GLOBAL).is_some());
    without_requests(&server, || {
        for _ in 0..1000 {
            assert_eq!(tps(&cache), (42.5, 17.25));
        }
    });

    // MODIFIED: a changed value and a new device class.
    merge(
        &client,
        "ml",
        GLOBAL,
        json!({ key(GFX1100): "50", key(GFX906): "33" }),
    )
    .await;
    eventually("global ConfigMap MODIFIED", || tps(&cache) == (50.0, 33.0)).await;

    // A malformed global value falls back to the deployment result.
    merge(&client, "ml", GLOBAL, json!({ key(GFX906): "fast" })).await;
    eventually("malformed global value", || tps(&cache) == (50.0, 17.25)).await;

    // DELETED: back to the deployment result, which is then updated...
    delete(&client, "ml", GLOBAL).await;
    eventually("global ConfigMap DELETED", || tps(&cache) == (17.25, 17.25)).await;
    merge(&client, "ml", DEPLOYMENT, json!({"tokensPerSecond": "20"})).await;
    eventually("per-deployment ConfigMap MODIFIED", || {
        tps(&cache) == (20.0, 20.0)
    })
    .await;
    // ...and deleted: nothing measured.
    delete(&client, "ml", DEPLOYMENT).await;
    eventually("per-deployment ConfigMap DELETED", || {
        tps(&cache) == (0.0, 0.0)
    })
    .await;

    // One LIST, then the watch; never a GET.
    assert_eq!(server.requests(Verb::Get, "configmaps"), 0);
    assert_eq!(server.requests(Verb::List, "configmaps"), 1);
    assert!(server.requests(Verb::Watch, "configmaps") >= 1);
    task.abort();
}

/// Only benchmark ConfigMaps (the global name or `*-benchmark-results`)
/// reach the store, from the initial LIST and from the watch alike, and
/// without their managed fields.
#[tokio::test]
async fn only_benchmark_config_maps_are_kept() {
    let server = server().await;
    let client = server.client();
    create(&client, "ml", GLOBAL, json!({ key(GFX1100): "31.5" })).await;
    create(&client, "ml", "kube-root-ca.crt", json!({"ca.crt": "..."})).await;
    create(&client, "ml", DEPLOYMENT, json!({"tokensPerSecond": "12"})).await;

    let (cache, task) = watch(client.clone(), "").await;
    create(
        &client,
        "other",
        "llama-benchmark-results",
        json!({"tokensPerSecond": "3"}),
    )
    .await;
    create(&client, "other", "settings", json!({"a": "b"})).await;
    eventually("ConfigMap ADDED", || {
        cache
            .config_map("other", "llama-benchmark-results")
            .is_some()
    })
    .await;

    let mut names: Vec<String> = cache
        .store()
        .state()
        .iter()
        .map(|cm| {
            format!(
                "{}/{}",
                cm.metadata.namespace.as_deref().unwrap_or_default(),
                cm.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ml/flexinfer-benchmark-results",
            "ml/qwen-md-benchmark-results",
            "other/llama-benchmark-results",
        ]
    );
    // The server records managed fields; the cache drops them.
    let stored = server
        .object("v1", "ConfigMap", "ml", GLOBAL)
        .expect("stored ConfigMap");
    assert!(stored["metadata"]["managedFields"].is_array(), "{stored}");
    let cached = cache.config_map("ml", GLOBAL).expect("cached");
    assert!(cached.metadata.managed_fields.is_none());
    assert_eq!(
        cached.data,
        Some(BTreeMap::from([(key(GFX1100), "31.5".to_owned())]))
    );
    assert_eq!(tps(&cache), (31.5, 12.0));
    task.abort();
}

/// With `WATCH_NAMESPACE` set, ConfigMaps of other namespaces are not
/// watched.
#[tokio::test]
async fn a_namespaced_watch_sees_only_its_namespace() {
    let server = server().await;
    let client = server.client();
    let (cache, task) = watch(client.clone(), "ml").await;

    create(
        &client,
        "other",
        DEPLOYMENT,
        json!({"tokensPerSecond": "5"}),
    )
    .await;
    create(&client, "ml", GLOBAL, json!({ key(GFX906): "7" })).await;
    eventually("ConfigMap of the watched namespace", || {
        cache.config_map("ml", GLOBAL).is_some()
    })
    .await;
    assert!(cache.config_map("other", DEPLOYMENT).is_none());
    assert_eq!(cache.store().state().len(), 1);
    assert_eq!(tps(&cache), (0.0, 7.0));
    task.abort();
}

/// When the watch history expires (410 Gone), the reflector relists and
/// keeps following changes.
#[tokio::test]
async fn the_cache_relists_after_the_watch_expires() {
    let server = server().await;
    let client = server.client();
    create(&client, "ml", DEPLOYMENT, json!({"tokensPerSecond": "8"})).await;
    let (cache, task) = watch(client.clone(), "").await;
    assert_eq!(tps(&cache), (8.0, 8.0));
    assert_eq!(server.requests(Verb::List, "configmaps"), 1);

    server.expire_watch_history();
    eventually("relist after 410 Gone", || {
        server.requests(Verb::List, "configmaps") >= 2
    })
    .await;
    merge(&client, "ml", DEPLOYMENT, json!({"tokensPerSecond": "9"})).await;
    eventually("change after the relist", || tps(&cache) == (9.0, 9.0)).await;
    delete(&client, "ml", DEPLOYMENT).await;
    eventually("deletion after the relist", || tps(&cache) == (0.0, 0.0)).await;
    assert_eq!(server.requests(Verb::Get, "configmaps"), 0);
    task.abort();
}

/// Scores of a prioritize call served from the watched cache follow the
/// benchmark results as they change.
#[tokio::test]
async fn prioritize_scores_follow_the_watched_results() {
    let server = server().await;
    let client = server.client();
    let (cache, task) = watch(client.clone(), "").await;
    let extender = Extender::new(
        Settings {
            benchmark_config_map: GLOBAL.into(),
            ..Default::default()
        },
        Arc::new(cache.clone()),
    );

    // Two nodes alike but for the GPU architecture; the fixture pod is
    // vLLM `qwen3-8b` of ModelDeployment `qwen3-8b` in `ml`.
    let gfx1100 = support::node_template();
    let mut gfx906 = gfx1100.clone();
    gfx906["metadata"]["name"] = json!("gpu-node-b");
    gfx906["metadata"]["labels"]["flexinfer.ai/gpu.arch"] = json!("gfx906");
    let body = support::extender_args(&support::pod(), &[gfx1100, gfx906]);
    let scores = || -> (i64, i64) {
        let reply = extender.prioritize(&body).expect("prioritize");
        let list: Value = serde_json::from_slice(&reply).expect("JSON");
        let score = |host: &str| {
            list.as_array()
                .expect("HostPriorityList")
                .iter()
                .find(|p| p["Host"] == host)
                .and_then(|p| p["Score"].as_i64())
                .expect("score")
        };
        (score("gpu-node-a"), score("gpu-node-b"))
    };
    let (a, b) = scores();
    assert_eq!(a, b, "no results yet: the nodes are alike");

    let class = |arch: &str| format!("vendor=AMD,arch={arch},vram=24Gi,count=1,int4=true");
    let global =
        |arch: &str, tps: &str| json!({ benchmark_key("vllm", "qwen3-8b", &class(arch)): tps });
    create(
        &client,
        "ml",
        "qwen3-8b-benchmark-results",
        json!({"tokensPerSecond": "30"}),
    )
    .await;
    create(&client, "ml", GLOBAL, global("gfx906", "60")).await;
    eventually("gfx906 result", || {
        let (a, b) = scores();
        b > a
    })
    .await;
    merge(&client, "ml", GLOBAL, global("gfx1100", "90")).await;
    eventually("gfx1100 result", || {
        let (a, b) = scores();
        a > b
    })
    .await;
    assert_eq!(server.requests(Verb::Get, "configmaps"), 0);
    assert_eq!(server.requests(Verb::List, "configmaps"), 1);
    task.abort();
}

/// The Node cache (for `nodeCacheCapable` extenders) keeps each Node's
/// metadata, current through the watch, and drops the rest.
#[tokio::test]
async fn the_node_cache_follows_node_labels() {
    let server = server().await;
    let client = server.client();
    let (cache, task) = nodes(client.clone());
    let task = tokio::spawn(task);

    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-1", "labels": {"flexinfer.ai/gpu.vendor": "AMD"},
                     "annotations": {"flexinfer.ai/gpu-free-memory": "20464"}},
        "spec": {"podCIDR": "10.244.1.0/24"}
    }))
    .expect("Node");
    api.create(&PostParams::default(), &node)
        .await
        .expect("create Node");
    eventually("Node ADDED", || cache.node("gpu-1").is_some()).await;
    let cached = cache.node("gpu-1").expect("cached Node");
    assert_eq!(
        cached.metadata.labels.as_ref().unwrap()["flexinfer.ai/gpu.vendor"],
        "AMD"
    );
    assert_eq!(
        cached.metadata.annotations.as_ref().unwrap()["flexinfer.ai/gpu-free-memory"],
        "20464"
    );
    assert!(cached.spec.is_none() && cached.status.is_none());
    assert!(cached.metadata.managed_fields.is_none());

    api.patch(
        "gpu-1",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"flexinfer.ai/gpu-free-memory": "16368"}}}),
        ),
    )
    .await
    .expect("patch Node");
    eventually("Node MODIFIED", || {
        cache.node("gpu-1").is_some_and(|node| {
            node.metadata.annotations.as_ref().unwrap()["flexinfer.ai/gpu-free-memory"] == "16368"
        })
    })
    .await;
    api.delete("gpu-1", &DeleteParams::default())
        .await
        .expect("delete Node");
    eventually("Node DELETED", || cache.node("gpu-1").is_none()).await;
    assert_eq!(server.requests(Verb::Get, "nodes"), 0);
    task.abort();
}

/// The Pod cache behind fair share counts the GPUs of a tenant's pods as
/// they are created, finish and go away.
#[tokio::test]
async fn the_pod_cache_counts_the_gpus_of_live_pods() {
    let server = server().await;
    let client = server.client();
    let (cache, task) = pods(client.clone(), "ml");
    let task = tokio::spawn(task);
    let settings = FairShare {
        enabled: true,
        budget_gpus: 4.0,
        tenant_label_key: "team".into(),
    };

    let pod = |name: &str, ns: &str, team: &str, gpus: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"team": team}},
            "spec": {"containers": [{"name": "c", "image": "x",
                     "resources": {"limits": {"amd.com/gpu": gpus}}}]}
        }))
        .expect("Pod")
    };
    let ml: Api<Pod> = Api::namespaced(client.clone(), "ml");
    let other: Api<Pod> = Api::namespaced(client.clone(), "other");
    let pp = PostParams::default();
    ml.create(&pp, &pod("a", "ml", "blue", "1")).await.unwrap();
    ml.create(&pp, &pod("b", "ml", "blue", "2")).await.unwrap();
    ml.create(&pp, &pod("c", "ml", "red", "4")).await.unwrap();
    other
        .create(&pp, &pod("d", "other", "blue", "8"))
        .await
        .unwrap();
    eventually("Pods ADDED", || {
        cache.used_gpus(&settings, "ml", "blue", "") == 3.0
    })
    .await;
    assert_eq!(cache.used_gpus(&settings, "ml", "red", ""), 4.0);
    // The pod being scheduled is not counted twice.
    let b_uid = ml.get("b").await.unwrap().metadata.uid.unwrap();
    assert_eq!(cache.used_gpus(&settings, "ml", "blue", &b_uid), 1.0);

    // A finished pod frees its GPUs; so does a deleted one.
    ml.patch_status(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    eventually("Pod finished", || {
        cache.used_gpus(&settings, "ml", "blue", "") == 1.0
    })
    .await;
    ml.delete("c", &DeleteParams::default()).await.unwrap();
    eventually("Pod DELETED", || {
        cache.used_gpus(&settings, "ml", "red", "") == 0.0
    })
    .await;
    task.abort();
}
