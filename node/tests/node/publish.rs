//! The agent's Node patch against the in-memory Kubernetes API
//! (`flexinfer-testkube`): passes run on fixture machines, and the Node is
//! read back through `Api<Node>`. The write counter checks "no write when
//! nothing changed" and "exactly one patch when something did"; fault
//! injection drives the error paths.
//!
//! One test still uses kube's `tower-test` mock, because it asserts the
//! exact requests (method, path, query, content type, body), which the
//! API server only sees as their effect.

use crate::support;

use std::collections::BTreeMap;

use flexinfer_testkube::{TestApiServer, Verb};
use http::{Request, Response};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::client::Body;
use kube::{Api, Client};
use serde_json::{json, Value};
use support::{rx7900xtx, Machine};
use tower_test::mock::{self, Handle};

use flexinfer_node::agent::Agent;
use flexinfer_node::labels::LabelKeys;
use flexinfer_node::metrics::Metrics;
use flexinfer_node::patch::FIELD_MANAGER;
use flexinfer_node::publish::{NodePublisher, Outcome};

const NODE: &str = "gpu-1";

fn agent(machine: &Machine, client: Client, metrics: Metrics) -> Agent {
    let keys = LabelKeys::default();
    Agent::new(
        NODE,
        keys.clone(),
        machine.discovery(),
        NodePublisher::new(client, NODE, keys),
        metrics,
    )
}

/// A machine with one RX 7900 XTX (gfx1100, 24 GiB, 4 GiB used, 12 %
/// busy) and a CPU without AVX-512.
fn machine() -> Machine {
    let mut machine = Machine::new();
    machine.kfd_cpu_node().amd_card(rx7900xtx(0, 128));
    machine
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The labels the agent sets on [`machine`].
fn gpu_labels() -> Vec<(&'static str, &'static str)> {
    vec![
        ("flexinfer.ai/cpu.avx512", "false"),
        ("flexinfer.ai/gpu.arch", "gfx1100"),
        ("flexinfer.ai/gpu.count", "1"),
        ("flexinfer.ai/gpu.int4", "true"),
        ("flexinfer.ai/gpu.vendor", "AMD"),
        ("flexinfer.ai/gpu.vram", "23Gi"),
    ]
}

/// The annotations the agent sets on [`machine`]: free VRAM in MiB
/// (24 GiB nominal less 4 GiB used) and utilisation.
fn gpu_annotations() -> Vec<(&'static str, &'static str)> {
    vec![
        ("flexinfer.ai/gpu-free-memory", "20464"),
        ("flexinfer.ai/gpu.util", "12.00"),
    ]
}

/// Creates the Node as the kubelet would: its hostname label, plus keys
/// of other owners.
async fn create_node(
    server: &TestApiServer,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": NODE, "labels": map(labels), "annotations": map(annotations)},
        "status": {"capacity": {"amd.com/gpu": "1"}}
    }))
    .expect("Node");
    Api::<Node>::all(server.client())
        .create(&PostParams::default(), &node)
        .await
        .expect("create Node");
    server.reset_counters();
}

async fn read_node(server: &TestApiServer) -> Node {
    Api::<Node>::all(server.client())
        .get(NODE)
        .await
        .expect("read Node")
}

fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn annotations(node: &Node) -> BTreeMap<String, String> {
    node.metadata.annotations.clone().unwrap_or_default()
}

/// The `(operation, fieldsV1)` entries of `manager` in `managedFields`.
fn managed_by(node: &Node, manager: &str) -> Vec<(String, Value)> {
    node.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.manager.as_deref() == Some(manager))
        .map(|entry| {
            (
                entry.operation.clone().unwrap_or_default(),
                serde_json::to_value(&entry.fields_v1).expect("fieldsV1"),
            )
        })
        .collect()
}

/// `fieldsV1` owning exactly these labels and annotations.
fn owned_fields(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Value {
    let fields = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(key, _)| (format!("f:{key}"), json!({})))
            .collect::<serde_json::Map<String, Value>>()
    };
    json!({"f:metadata": {"f:labels": fields(labels), "f:annotations": fields(annotations)}})
}

fn kube_status(err: &anyhow::Error) -> &kube::core::Status {
    match err.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => status,
        _ => panic!("expected an API error, got {err:?}"),
    }
}

/// A bare Node gets the desired labels and annotations in one
/// server-side apply, owned by the agent's field manager; an unchanged
/// pass writes nothing; a changed value is exactly one patch.
#[tokio::test]
async fn labels_once_then_writes_only_what_changed() {
    let server = TestApiServer::start().await;
    let hostname = ("kubernetes.io/hostname", NODE);
    let cost = ("flexinfer.ai/cost", "2");
    create_node(&server, &[hostname], &[cost]).await;
    let machine = machine();
    let mut agent = agent(&machine, server.client(), Metrics::new());

    let outcome = agent.pass().await.expect("first pass");
    assert_eq!(
        outcome,
        Outcome::Updated {
            removed: false,
            applied: true
        }
    );
    assert_eq!(server.writes(Verb::Patch, "nodes"), 1);
    assert_eq!(server.total_writes(), 1);
    assert_eq!(server.requests(Verb::Get, "nodes"), 1);

    let node = read_node(&server).await;
    let mut want_labels = gpu_labels();
    want_labels.push(hostname);
    let mut want_annotations = gpu_annotations();
    want_annotations.push(cost);
    assert_eq!(labels(&node), map(&want_labels));
    assert_eq!(annotations(&node), map(&want_annotations));
    // The agent owns exactly the keys it applied; the kubelet's and the
    // admin's keys stay with their creator.
    assert_eq!(
        managed_by(&node, FIELD_MANAGER),
        [(
            "Apply".to_owned(),
            owned_fields(&gpu_labels(), &gpu_annotations())
        )]
    );

    // Same hardware: one GET, no write, the Node untouched.
    server.reset_counters();
    assert_eq!(agent.pass().await.expect("quiet pass"), Outcome::Unchanged);
    assert_eq!(server.total_writes(), 0);
    assert_eq!(server.requests(Verb::Get, "nodes"), 1);
    let unchanged = read_node(&server).await;
    assert_eq!(
        unchanged.metadata.resource_version,
        node.metadata.resource_version
    );

    // A model loaded: 8 GiB in use, so 4096 MiB less free. One patch.
    machine.set_vram_used(0, 8 * 1024 * 1024 * 1024);
    server.reset_counters();
    let outcome = agent.pass().await.expect("pass after a change");
    assert_eq!(
        outcome,
        Outcome::Updated {
            removed: false,
            applied: true
        }
    );
    assert_eq!(server.writes(Verb::Patch, "nodes"), 1);
    assert_eq!(server.total_writes(), 1);
    let changed = read_node(&server).await;
    assert_eq!(labels(&changed), map(&want_labels));
    let mut want_annotations = want_annotations.clone();
    want_annotations[0] = ("flexinfer.ai/gpu-free-memory", "16368");
    assert_eq!(annotations(&changed), map(&want_annotations));
    assert_ne!(
        changed.metadata.resource_version,
        node.metadata.resource_version
    );
}

/// Free VRAM that jitters by a few MiB between passes (as allocators make
/// it) leaves the Node alone: passes over ten intervals write it once, and
/// a change past the dead band is written again.
#[tokio::test]
async fn jittering_readings_do_not_rewrite_the_node_every_pass() {
    let server = TestApiServer::start().await;
    create_node(&server, &[("kubernetes.io/hostname", NODE)], &[]).await;
    let machine = machine();
    let mut agent = agent(&machine, server.client(), Metrics::new());
    const GIB: u64 = 1024 * 1024 * 1024;
    const MIB: u64 = 1024 * 1024;
    for pass in 0..10 {
        machine.set_vram_used(0, 4 * GIB + (pass % 3) * 40 * MIB);
        agent.pass().await.expect("pass");
    }
    assert_eq!(server.writes(Verb::Patch, "nodes"), 1);
    assert_eq!(server.total_writes(), 1);
    assert_eq!(
        annotations(&read_node(&server).await)["flexinfer.ai/gpu-free-memory"],
        "20464"
    );

    server.reset_counters();
    machine.set_vram_used(0, 5 * GIB);
    agent.pass().await.expect("pass after a load");
    assert_eq!(server.writes(Verb::Patch, "nodes"), 1);
    assert_eq!(
        annotations(&read_node(&server).await)["flexinfer.ai/gpu-free-memory"],
        "19440"
    );
}

/// When the GPU goes away, the keys the agent set are removed with one
/// merge patch; keys of other owners stay; the next pass is quiet.
#[tokio::test]
async fn keys_no_longer_wanted_are_removed() {
    let server = TestApiServer::start().await;
    let team = ("team", "ml");
    create_node(&server, &[team], &[]).await;
    let with_gpu = machine();
    agent(&with_gpu, server.client(), Metrics::new())
        .pass()
        .await
        .expect("labelling pass");
    assert_eq!(labels(&read_node(&server).await).len(), 7);

    let without_gpu = Machine::new();
    let mut agent = agent(&without_gpu, server.client(), Metrics::new());
    server.reset_counters();
    assert_eq!(
        agent.pass().await.expect("pass without the GPU"),
        Outcome::Updated {
            removed: true,
            applied: false
        }
    );
    assert_eq!(server.writes(Verb::Patch, "nodes"), 1);
    assert_eq!(server.total_writes(), 1);
    let node = read_node(&server).await;
    assert_eq!(
        labels(&node),
        map(&[("flexinfer.ai/cpu.avx512", "false"), team])
    );
    assert_eq!(annotations(&node), BTreeMap::new());

    server.reset_counters();
    assert_eq!(agent.pass().await.expect("quiet pass"), Outcome::Unchanged);
    assert_eq!(server.total_writes(), 0);
}

/// A failed patch fails the pass (counted as an error, the Node
/// unchanged); the next pass, at the next tick, succeeds.
#[tokio::test]
async fn a_failed_patch_is_retried_by_the_next_pass() {
    let server = TestApiServer::start().await;
    create_node(&server, &[("kubernetes.io/hostname", NODE)], &[]).await;
    let machine = machine();
    let metrics = Metrics::new();
    let mut agent = agent(&machine, server.client(), metrics.clone());

    server.fail_next(Verb::Patch, "nodes", 1, 500);
    let err = agent.pass().await.expect_err("the patch fails");
    assert_eq!(kube_status(&err).code, 500);
    assert_eq!(
        labels(&read_node(&server).await),
        map(&[("kubernetes.io/hostname", NODE)])
    );
    assert!(metrics
        .render()
        .contains(r#"flexinfer_agent_node_updates_total{result="error"} 1"#));

    assert_eq!(
        agent.pass().await.expect("the next pass"),
        Outcome::Updated {
            removed: false,
            applied: true
        }
    );
    // The failed attempt and the successful one.
    assert_eq!(server.writes(Verb::Patch, "nodes"), 2);
    let mut want = gpu_labels();
    want.push(("kubernetes.io/hostname", NODE));
    assert_eq!(labels(&read_node(&server).await), map(&want));
    assert!(metrics
        .render()
        .contains(r#"flexinfer_agent_node_updates_total{result="updated"} 1"#));
}

/// A failed read fails the pass without writing; a missing Node is an
/// error, never created by the agent.
#[tokio::test]
async fn read_errors_fail_the_pass_without_writes() {
    let server = TestApiServer::start().await;
    let machine = machine();
    let mut agent = agent(&machine, server.client(), Metrics::new());

    let err = agent.pass().await.expect_err("no such Node");
    assert_eq!(kube_status(&err).code, 404);
    assert_eq!(server.total_writes(), 0);
    assert!(server.object("v1", "Node", "", NODE).is_none());

    create_node(&server, &[], &[]).await;
    server.fail_next(Verb::Get, "nodes", 1, 403);
    let err = agent.pass().await.expect_err("forbidden");
    assert_eq!(kube_status(&err).code, 403);
    assert_eq!(server.total_writes(), 0);
    assert_eq!(labels(&read_node(&server).await), BTreeMap::new());
}

type MockHandle = Handle<Request<Body>, Response<Body>>;

async fn body_json(request: Request<Body>) -> Value {
    let bytes = request.into_body().collect_bytes().await.expect("body");
    serde_json::from_slice(&bytes).expect("JSON body")
}

fn respond(send: mock::SendResponse<Response<Body>>, value: &Value) {
    send.send_response(Response::new(Body::from(value.to_string().into_bytes())));
}

fn query(request: &Request<Body>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    pairs.sort();
    pairs
}

async fn next_request(
    handle: &mut MockHandle,
) -> (Request<Body>, mock::SendResponse<Response<Body>>) {
    handle.next_request().await.expect("a request")
}

/// The exact requests of a pass that both removes and applies keys:
/// `GET /api/v1/nodes/gpu-1`; a JSON merge patch nulling the stale key,
/// with the agent's field manager; a server-side apply
/// (`application/apply-patch+yaml`, `fieldManager=flexinfer-agent`,
/// `force=true`) with every desired key and the Node's identity only.
/// This is the one test on kube's `tower-test` mock: the request shape is
/// the contract with the API server (the apply content type and `force`
/// decide the ownership semantics), and the in-memory server only shows
/// its effect.
#[tokio::test]
async fn the_requests_are_a_merge_patch_and_a_forced_server_side_apply() {
    let machine = machine();
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut agent = agent(&machine, Client::new(service, "default"), Metrics::new());
    let pass = tokio::spawn(async move { agent.pass().await });

    let (request, send) = next_request(&mut handle).await;
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/nodes/gpu-1");
    let stale = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "resourceVersion": "41",
                     "labels": {"kubernetes.io/hostname": NODE},
                     "annotations": {"flexinfer.ai/kv-cache-usage": "0.5000"}}
    });
    respond(send, &stale);

    let (request, send) = next_request(&mut handle).await;
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(request.uri().path(), "/api/v1/nodes/gpu-1");
    assert_eq!(
        query(&request),
        [("fieldManager".to_owned(), FIELD_MANAGER.to_owned())]
    );
    assert_eq!(
        request.headers()["content-type"],
        "application/merge-patch+json"
    );
    assert_eq!(
        body_json(request).await,
        json!({"metadata": {"annotations": {"flexinfer.ai/kv-cache-usage": null}}})
    );
    respond(send, &stale);

    let (request, send) = next_request(&mut handle).await;
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(request.uri().path(), "/api/v1/nodes/gpu-1");
    assert_eq!(
        query(&request),
        [
            ("fieldManager".to_owned(), FIELD_MANAGER.to_owned()),
            ("force".to_owned(), "true".to_owned())
        ]
    );
    assert_eq!(
        request.headers()["content-type"],
        "application/apply-patch+yaml"
    );
    assert_eq!(
        body_json(request).await,
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": map(&gpu_labels()),
                "annotations": map(&gpu_annotations())
            }
        })
    );
    respond(send, &stale);

    assert_eq!(
        pass.await.expect("pass task").expect("pass"),
        Outcome::Updated {
            removed: true,
            applied: true
        }
    );
    assert!(
        handle.next_request().await.is_none(),
        "nothing after the apply"
    );
}
