//! Federation end to end: the operator runs against a "hub" in-memory API
//! server (Cluster and FederatedModel objects, kubeconfig Secrets) and
//! places Models in two or three "member" API servers.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use flexinfer_crds::v1alpha2::{
    Cluster, ClusterPhase, ClusterRoutingStrategy, ClusterSpec, FederatedModel,
    FederatedModelPlacement, FederatedModelRouting, FederatedModelSpec, Model,
};
use flexinfer_operator::controllers::federated_model::phase;
use flexinfer_operator::controllers::federation::FederationSettings;
use flexinfer_operator::controllers::{self, ControllerSettings};
use flexinfer_operator::federation::kubeconfig::MemberTimeouts;
use flexinfer_operator::federation::{
    FEDERATED_MODEL, FEDERATION_CLUSTER, MANAGER, REPLICAS_ANNOTATION,
};
use flexinfer_testkube::{TestApiServer, Verb};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, LocalObjectReference, Node, NodeStatus, Pod, PodSpec, PodStatus,
    ResourceRequirements, Secret,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

async fn server() -> TestApiServer {
    TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap()
}

/// Operator settings of the hub: federation on, 1 s status resync.
fn hub_settings() -> ControllerSettings {
    ControllerSettings {
        kv_cache_scrape: false,
        federation: Some(FederationSettings {
            resync: Duration::from_secs(1),
            probe_timeout: Duration::from_secs(5),
            member_timeouts: MemberTimeouts {
                connect: Duration::from_secs(2),
                read: Duration::from_secs(5),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs the operator on `client` until the returned sender fires or drops.
fn run_operator(client: Client, settings: ControllerSettings) -> tokio::sync::oneshot::Sender<()> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(controllers::run(client, settings, async {
        let _ = stop_rx.await;
    }));
    stop_tx
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn node(name: &str, allocatable: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.status = Some(NodeStatus {
        allocatable: Some(quantities(allocatable)),
        ..Default::default()
    });
    n
}

fn running_pod(name: &str, node: &str, requests: &[(&str, &str)]) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.spec = Some(PodSpec {
        node_name: Some(node.into()),
        containers: vec![Container {
            name: "main".into(),
            resources: Some(ResourceRequirements {
                requests: Some(quantities(requests)),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    p
}

/// Writes (or rewrites) the kubeconfig Secret of `name` for `member`.
async fn put_secret(hub: &Client, name: &str, member: &TestApiServer) {
    let secrets: Api<Secret> = Api::default_namespaced(hub.clone());
    let kubeconfig = std::fs::read_to_string(member.kubeconfig_path()).unwrap();
    let body = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("{name}-kubeconfig")},
        "stringData": {"kubeconfig": kubeconfig},
    });
    secrets
        .patch(
            &format!("{name}-kubeconfig"),
            &PatchParams::apply("test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap();
}

/// A Cluster probed every second through Secret `<name>-kubeconfig`.
fn cluster(name: &str, labels: &[(&str, &str)]) -> Cluster {
    cluster_probed_every(name, labels, Duration::from_secs(1))
}

fn cluster_probed_every(name: &str, labels: &[(&str, &str)], interval: Duration) -> Cluster {
    Cluster::new(
        name,
        ClusterSpec {
            api_endpoint: format!("https://{name}.clusters.example.com:6443"),
            secret_ref: LocalObjectReference {
                name: format!("{name}-kubeconfig"),
            },
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            probe_interval: interval.into(),
        },
    )
}

async fn register(hub: &Client, name: &str, member: &TestApiServer, labels: &[(&str, &str)]) {
    put_secret(hub, name, member).await;
    let clusters: Api<Cluster> = Api::default_namespaced(hub.clone());
    clusters
        .create(&PostParams::default(), &cluster(name, labels))
        .await
        .unwrap();
}

fn federated_model(
    name: &str,
    placement: FederatedModelPlacement,
    weights: &[(&str, i32)],
) -> FederatedModel {
    FederatedModel::new(
        name,
        FederatedModelSpec {
            template: cpu_model(name).spec,
            placement,
            routing: (!weights.is_empty()).then(|| FederatedModelRouting {
                strategy: ClusterRoutingStrategy::Weighted,
                weights: weights.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
                failover_order: Vec::new(),
            }),
        },
    )
}

fn by_names(names: &[&str]) -> FederatedModelPlacement {
    FederatedModelPlacement {
        clusters: names.iter().map(|n| (*n).to_owned()).collect(),
        ..Default::default()
    }
}

async fn cluster_phase(hub: &Client, name: &str) -> Option<ClusterPhase> {
    let clusters: Api<Cluster> = Api::default_namespaced(hub.clone());
    clusters
        .get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
}

/// The share annotation of `name` in `member`, if the Model exists.
async fn share(member: &Client, name: &str) -> Option<String> {
    let models: Api<Model> = Api::default_namespaced(member.clone());
    let m = models.get_opt(name).await.ok()??;
    m.annotations().get(REPLICAS_ANNOTATION).cloned()
}

async fn wait_share(member: &Client, name: &str, want: &str, what: &str) {
    eventually(what, || async {
        (share(member, name).await.as_deref() == Some(want)).then_some(())
    })
    .await;
}

async fn wait_gone(member: &Client, name: &str, what: &str) {
    let models: Api<Model> = Api::default_namespaced(member.clone());
    eventually(what, || async {
        models.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// `cluster → (phase, totalReplicas)` of a FederatedModel's status.
async fn placement_status(hub: &Client, name: &str) -> BTreeMap<String, (String, i32)> {
    let fms: Api<FederatedModel> = Api::default_namespaced(hub.clone());
    let fm = fms.get(name).await.unwrap();
    fm.status
        .unwrap_or_default()
        .clusters
        .into_iter()
        .map(|c| {
            (
                c.cluster,
                (c.phase.unwrap_or_default(), c.total_replicas.unwrap_or(-1)),
            )
        })
        .collect()
}

fn condition(fm: &FederatedModel, type_: &str) -> Option<(String, String)> {
    fm.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn weights_split_replicas_failover_moves_the_share_and_delete_cleans_up() {
    let hub = server().await;
    let member_a = server().await;
    let mut member_b = Some(server().await);
    let hub_client = hub.client();
    let a = member_a.client();

    // Member A: two GPU nodes, one pod holding a GPU; its own operator
    // runs Models with a simulated kubelet.
    for name in ["gpu-1", "gpu-2"] {
        member_a
            .insert(&node(
                name,
                &[
                    ("nvidia.com/gpu", "4"),
                    ("cpu", "8"),
                    ("memory", "32Gi"),
                    ("pods", "110"),
                ],
            ))
            .unwrap();
    }
    member_a
        .insert(&running_pod(
            "trainer",
            "gpu-1",
            &[("nvidia.com/gpu", "1"), ("cpu", "2")],
        ))
        .unwrap();
    member_a.enable_deployment_controller(Duration::from_millis(200));
    let _member_a_operator = run_operator(
        a.clone(),
        ControllerSettings {
            kv_cache_scrape: false,
            ..Default::default()
        },
    );

    register(&hub_client, "a", &member_a, &[("region", "eu")]).await;
    register(
        &hub_client,
        "b",
        member_b.as_ref().unwrap(),
        &[("region", "us")],
    )
    .await;
    let _hub_operator = run_operator(hub_client.clone(), hub_settings());

    // Cluster status: Ready, capacity from A's Nodes, free capacity net
    // of the running pod.
    let clusters: Api<Cluster> = Api::default_namespaced(hub_client.clone());
    let status = eventually("cluster a ready with capacity", || async {
        let st = clusters.get("a").await.unwrap().status?;
        (st.phase == Some(ClusterPhase::Ready)).then_some(st)
    })
    .await;
    assert_eq!(
        status.capacity,
        quantities(&[("cpu", "16"), ("memory", "64Gi"), ("nvidia.com/gpu", "8")])
    );
    assert_eq!(
        status.available,
        quantities(&[("cpu", "14"), ("memory", "64Gi"), ("nvidia.com/gpu", "7")])
    );
    assert!(status.last_probe_time.is_some());
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "ProbeSucceeded")
    );
    eventually("cluster b ready", || async {
        (cluster_phase(&hub_client, "b").await == Some(ClusterPhase::Ready)).then_some(())
    })
    .await;

    // Weights 2:1 with one replica per weight unit: 2 replicas in A, 1 in B.
    let fms: Api<FederatedModel> = Api::default_namespaced(hub_client.clone());
    fms.create(
        &PostParams::default(),
        &federated_model("llama", by_names(&["a", "b"]), &[("a", 2), ("b", 1)]),
    )
    .await
    .unwrap();
    let b = member_b.as_ref().unwrap().client();
    wait_share(&a, "llama", "2", "2 replicas in member a").await;
    wait_share(&b, "llama", "1", "1 replica in member b").await;
    let in_a = Api::<Model>::default_namespaced(a.clone())
        .get("llama")
        .await
        .unwrap();
    assert_eq!(in_a.labels()[FEDERATED_MODEL], "llama");
    assert_eq!(in_a.labels()[FEDERATION_CLUSTER], "a");
    assert_eq!(in_a.spec, cpu_model("llama").spec);
    assert!(
        in_a.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|f| f.manager.as_deref() == Some(MANAGER)
                && f.operation.as_deref() == Some("Apply")),
        "member Model written by server-side apply as {MANAGER}"
    );
    // A's own operator runs the share: a Deployment with 2 replicas.
    let deployments_a: Api<Deployment> = Api::default_namespaced(a.clone());
    eventually("deployment with 2 replicas in a", || async {
        let d = deployments_a.get_opt("llama").await.unwrap()?;
        (d.spec?.replicas == Some(2)).then_some(())
    })
    .await;

    // Per-cluster status and readiness roll up to the FederatedModel.
    let fm = eventually("a ready in the federated status", || async {
        let fm = fms.get("llama").await.unwrap();
        let st = fm.status.clone()?;
        (st.ready_clusters == Some(1) && st.total_clusters == Some(2)).then_some(fm)
    })
    .await;
    let st = fm.status.clone().unwrap();
    let a_entry = st.clusters.iter().find(|c| c.cluster == "a").unwrap();
    assert_eq!(a_entry.phase.as_deref(), Some("Ready"));
    assert_eq!(
        (a_entry.ready_replicas, a_entry.total_replicas),
        (Some(2), Some(2))
    );
    let b_entry = st.clusters.iter().find(|c| c.cluster == "b").unwrap();
    assert_eq!(b_entry.total_replicas, Some(1));
    assert_eq!(
        condition(&fm, "Placed"),
        Some(("True".into(), "Placed".into()))
    );
    assert_eq!(
        condition(&fm, "Ready"),
        Some(("True".into(), "ClustersReady".into()))
    );
    assert!(fm
        .finalizers()
        .iter()
        .any(|f| f == "flexinfer.ai/federation-cleanup"));
    // The Cluster status lists the member's Models.
    eventually("cluster a lists llama", || async {
        let st = clusters.get("a").await.unwrap().status?;
        st.models
            .iter()
            .any(|m| {
                m.name == "llama" && m.namespace == "default" && m.phase.as_deref() == Some("Ready")
            })
            .then_some(())
    })
    .await;

    // Member B stops answering: its share moves to A.
    let stopped = Instant::now();
    member_b.take().unwrap().shutdown().await;
    eventually("cluster b not ready", || async {
        (cluster_phase(&hub_client, "b").await == Some(ClusterPhase::NotReady)).then_some(())
    })
    .await;
    let not_ready_after = stopped.elapsed();
    wait_share(&a, "llama", "3", "b's share moved to a").await;
    let moved_after = stopped.elapsed();
    eprintln!(
        "failover: cluster NotReady {} ms after the member stopped; share moved {} ms after it stopped ({} ms after NotReady)",
        not_ready_after.as_millis(),
        moved_after.as_millis(),
        (moved_after - not_ready_after).as_millis()
    );
    let b_status = clusters.get("b").await.unwrap().status.unwrap();
    let b_ready = b_status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (b_ready.status.as_str(), b_ready.reason.as_str()),
        ("False", "ProbeFailed")
    );
    // The last known capacity and models stay in the status.
    assert!(b_status.models.iter().any(|m| m.name == "llama"));
    eventually("deployment with 3 replicas in a", || async {
        let d = deployments_a.get_opt("llama").await.unwrap()?;
        (d.spec?.replicas == Some(3)).then_some(())
    })
    .await;
    let placed = eventually("status shows the failover", || async {
        let p = placement_status(&hub_client, "llama").await;
        (p.get("b").map(|e| e.0.as_str()) == Some(phase::CLUSTER_NOT_READY)).then_some(p)
    })
    .await;
    assert_eq!(placed["a"].1, 3);
    assert_eq!(placed["b"].1, 0);

    // B comes back at a new address: the rotated Secret rebuilds the
    // client, B gets its share back and A returns to 2.
    let member_b2 = server().await;
    let b2 = member_b2.client();
    put_secret(&hub_client, "b", &member_b2).await;
    wait_share(&b2, "llama", "1", "1 replica in the new member b").await;
    wait_share(&a, "llama", "2", "a back to 2 replicas").await;
    eventually("cluster b ready again", || async {
        (cluster_phase(&hub_client, "b").await == Some(ClusterPhase::Ready)).then_some(())
    })
    .await;

    // Deleting the FederatedModel deletes the member Models (A's own
    // operator finishes its Model's cleanup), then the FederatedModel.
    fms.delete("llama", &DeleteParams::default()).await.unwrap();
    wait_gone(&a, "llama", "model gone from a").await;
    wait_gone(&b2, "llama", "model gone from b").await;
    eventually("federated model gone", || async {
        fms.get_opt("llama").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("deployment gone from a", || async {
        deployments_a
            .get_opt("llama")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn selection_changes_conflicts_and_unusable_secrets() {
    let hub = server().await;
    let member_a = server().await;
    let member_b = server().await;
    let hub_client = hub.client();
    let (a, b) = (member_a.client(), member_b.client());
    register(&hub_client, "a", &member_a, &[("region", "eu")]).await;
    register(&hub_client, "b", &member_b, &[("region", "us")]).await;

    // A Cluster whose Secret does not exist, and one whose kubeconfig
    // would run a command.
    let clusters: Api<Cluster> = Api::default_namespaced(hub_client.clone());
    clusters
        .create(&PostParams::default(), &cluster("nosecret", &[]))
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::default_namespaced(hub_client.clone());
    let exec = "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {server: 'https://x.example.com'}\ncontexts:\n- name: x\n  context: {cluster: x, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}\n";
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "exec-kubeconfig"},
                "stringData": {"kubeconfig": exec},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    clusters
        .create(&PostParams::default(), &cluster("exec", &[]))
        .await
        .unwrap();

    // B already runs a Model of the same name that is not ours.
    let foreign: Api<Model> = Api::default_namespaced(b.clone());
    foreign
        .create(&PostParams::default(), &cpu_model("qwen"))
        .await
        .unwrap();

    let _hub_operator = run_operator(hub_client.clone(), hub_settings());

    for (name, reason) in [("nosecret", "SecretNotFound"), ("exec", "KubeconfigUnsafe")] {
        let st = eventually(&format!("cluster {name} unknown"), || async {
            let st = clusters.get(name).await.unwrap().status?;
            (st.phase == Some(ClusterPhase::Unknown)).then_some(st)
        })
        .await;
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reason),
            "{name}"
        );
    }

    // Selected by label: only the eu cluster gets it.
    let fms: Api<FederatedModel> = Api::default_namespaced(hub_client.clone());
    let by_region = FederatedModelPlacement {
        cluster_selector: Some(LabelSelector {
            match_labels: Some([("region".to_owned(), "eu".to_owned())].into()),
            match_expressions: None,
        }),
        replicas_per_cluster: 2,
        ..Default::default()
    };
    fms.create(
        &PostParams::default(),
        &federated_model("qwen", by_region, &[]),
    )
    .await
    .unwrap();
    wait_share(&a, "qwen", "2", "2 replicas in a").await;
    let p = eventually("status of the eu placement", || async {
        let p = placement_status(&hub_client, "qwen").await;
        (p.len() == 1).then_some(p)
    })
    .await;
    assert_eq!(p["a"].1, 2);

    // Steady state: resyncs (every second) write nothing, neither the
    // member Model nor the FederatedModel status.
    eventually("placed condition settled", || async {
        let fm = fms.get("qwen").await.unwrap();
        (condition(&fm, "Placed")?.1 == "Placed").then_some(())
    })
    .await;
    member_a.reset_counters();
    hub.reset_counters();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        member_a.total_writes(),
        0,
        "{:?}",
        member_a.request_counts()
    );
    assert!(member_a.requests(Verb::Get, "models") >= 2, "resyncs ran");
    assert_eq!(hub.writes(Verb::Patch, "federatedmodels"), 0);
    assert_eq!(hub.writes(Verb::Patch, "federatedmodels/status"), 0);

    // Re-targeted to B by name: A's Model goes; B's foreign Model is left
    // alone and reported as a conflict.
    fms.patch(
        "qwen",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"placement": {"clusterSelector": null, "clusters": ["b", "missing"]}}}),
        ),
    )
    .await
    .unwrap();
    wait_gone(&a, "qwen", "model removed from the unselected cluster").await;
    let fm = eventually("conflict reported", || async {
        let fm = fms.get("qwen").await.unwrap();
        let p = placement_status(&hub_client, "qwen").await;
        (p.get("b").map(|e| e.0.as_str()) == Some(phase::CONFLICT)).then_some(fm)
    })
    .await;
    let p = placement_status(&hub_client, "qwen").await;
    assert_eq!(p["missing"].0, phase::CLUSTER_NOT_FOUND);
    assert_eq!(condition(&fm, "Placed").unwrap().1, "PlacementFailed");
    assert_eq!(
        condition(&fm, "Ready"),
        Some(("False".into(), "NoClusterReady".into()))
    );
    let still = foreign.get("qwen").await.unwrap();
    assert!(still.labels().get(FEDERATED_MODEL).is_none());
    assert!(still.annotations().get(REPLICAS_ANNOTATION).is_none());

    // Deleting the FederatedModel leaves the foreign Model in place.
    fms.delete("qwen", &DeleteParams::default()).await.unwrap();
    eventually("federated model gone", || async {
        fms.get_opt("qwen").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(foreign.get_opt("qwen").await.unwrap().is_some());
}

/// `Ready` condition `(status, reason)` and phase of a Cluster.
async fn cluster_health(hub: &Client, name: &str) -> Option<(ClusterPhase, String, String)> {
    let clusters: Api<Cluster> = Api::default_namespaced(hub.clone());
    let st = clusters.get(name).await.unwrap().status?;
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((st.phase?, ready.status.clone(), ready.reason.clone()))
}

#[tokio::test]
async fn failure_threshold_tolerates_single_failed_probes() {
    let hub = server().await;
    let member = server().await;
    let hub_client = hub.client();
    let m = member.client();
    // Probed every 3 s so that each intermediate state lasts long enough
    // to be seen on a loaded machine.
    put_secret(&hub_client, "a", &member).await;
    Api::<Cluster>::default_namespaced(hub_client.clone())
        .create(
            &PostParams::default(),
            &cluster_probed_every("a", &[], Duration::from_secs(3)),
        )
        .await
        .unwrap();
    let mut settings = hub_settings();
    if let Some(f) = settings.federation.as_mut() {
        f.failure_threshold = 2;
    }
    let _hub_operator = run_operator(hub_client.clone(), settings);
    let fms: Api<FederatedModel> = Api::default_namespaced(hub_client.clone());
    fms.create(
        &PostParams::default(),
        &federated_model("phi", by_names(&["a"]), &[]),
    )
    .await
    .unwrap();
    wait_share(&m, "phi", "1", "1 replica in a").await;

    // One failed probe (Node list answered 500; kube's client retries 503s): still Ready, the
    // condition says the probe is failing, the share stays.
    member.fail_next(Verb::List, "nodes", 1, 500);
    eventually("probe failing below the threshold", || async {
        let h = cluster_health(&hub_client, "a").await?;
        (h == (ClusterPhase::Ready, "True".into(), "ProbeFailing".into())).then_some(())
    })
    .await;
    assert_eq!(placement_status(&hub_client, "phi").await["a"].1, 1);
    eventually("probe succeeds again", || async {
        let h = cluster_health(&hub_client, "a").await?;
        (h.2 == "ProbeSucceeded").then_some(())
    })
    .await;

    // Two in a row: NotReady, and the only cluster has no share left
    // (three failures keep it there for two probe intervals).
    member.fail_next(Verb::List, "nodes", 3, 500);
    eventually("not ready at the threshold", || async {
        let h = cluster_health(&hub_client, "a").await?;
        (h == (ClusterPhase::NotReady, "False".into(), "ProbeFailed".into())).then_some(())
    })
    .await;
    let fm = eventually("no ready cluster left", || async {
        let fm = fms.get("phi").await.unwrap();
        (condition(&fm, "Placed")?.1 == "NoReadyClusters").then_some(fm)
    })
    .await;
    assert_eq!(
        fm.status.unwrap().clusters[0].phase.as_deref(),
        Some(phase::CLUSTER_NOT_READY)
    );
    // It recovers on the next good probe.
    eventually("ready again", || async {
        let h = cluster_health(&hub_client, "a").await?;
        (h.0 == ClusterPhase::Ready).then_some(())
    })
    .await;
    eventually("placed again", || async {
        let fm = fms.get("phi").await.unwrap();
        (condition(&fm, "Placed")?.1 == "Placed").then_some(())
    })
    .await;
}

/// Kills the operator process when the test ends, even on a panic.
struct Operator(std::process::Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_binary_runs_federation_behind_its_flag() {
    let hub = server().await;
    let member = server().await;
    member
        .insert(&node("n1", &[("amd.com/gpu", "2"), ("cpu", "4")]))
        .unwrap();
    let hub_client = hub.client();
    register(&hub_client, "edge", &member, &[]).await;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _operator = Operator(
        std::process::Command::new(env!("CARGO_BIN_EXE_flexinfer-operator"))
            .arg("--kubeconfig")
            .arg(hub.kubeconfig_path())
            .args(["--health-probe-bind-address", "127.0.0.1:0"])
            .args([
                "--metrics-bind-address",
                &format!("127.0.0.1:{metrics_port}"),
            ])
            .args(["--no-kv-cache-scrape", "--federation"])
            .args(["--cluster-failure-threshold", "2"])
            .env_remove("KUBECONFIG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let clusters: Api<Cluster> = Api::default_namespaced(hub_client.clone());
    let st = eventually("cluster probed by the binary", || async {
        let st = clusters.get("edge").await.unwrap().status?;
        (st.phase == Some(ClusterPhase::Ready)).then_some(st)
    })
    .await;
    assert_eq!(
        st.capacity,
        quantities(&[("amd.com/gpu", "2"), ("cpu", "4")])
    );
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("flexinfer_operator_reconciles_total{controller=\"cluster\"}"),
        "{metrics}"
    );
}
