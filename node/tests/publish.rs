//! The agent's requests to the API server, asserted exactly with kube's
//! `tower-test` mock: one GET per pass, a server-side-apply PATCH only when
//! a label or annotation changed, a merge PATCH only for stale keys.

mod support;

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use support::{rx7900xtx, Machine};
use tower_test::mock::{self, Handle};

use flexinfer_node::agent::Agent;
use flexinfer_node::labels::LabelKeys;
use flexinfer_node::metrics::Metrics;
use flexinfer_node::publish::{NodePublisher, Outcome};

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn agent(machine: &Machine, client: Client) -> Agent {
    let keys = LabelKeys::default();
    Agent::new(
        "gpu-1",
        keys.clone(),
        machine.discovery(),
        NodePublisher::new(client, "gpu-1", keys),
        Metrics::new(),
    )
}

fn node(labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-1", "resourceVersion": "41",
                     "labels": labels, "annotations": annotations},
        "status": {"capacity": {"amd.com/gpu": "1"}}
    })
}

fn desired_labels() -> Value {
    json!({
        "flexinfer.ai/cpu.avx512": "false",
        "flexinfer.ai/gpu.arch": "gfx1100",
        "flexinfer.ai/gpu.count": "1",
        "flexinfer.ai/gpu.int4": "true",
        "flexinfer.ai/gpu.vendor": "AMD",
        "flexinfer.ai/gpu.vram": "24Gi"
    })
}

fn desired_annotations() -> Value {
    json!({"flexinfer.ai/gpu-free-memory": "20464", "flexinfer.ai/gpu.util": "12.00"})
}

fn machine() -> Machine {
    let mut machine = Machine::new();
    machine.kfd_cpu_node().amd_card(rx7900xtx(0, 128));
    machine
}

async fn body_json(request: Request<Body>) -> Value {
    let bytes = request.into_body().collect_bytes().await.expect("body");
    serde_json::from_slice(&bytes).expect("JSON body")
}

fn respond(send: mock::SendResponse<Response<Body>>, value: &Value) {
    send.send_response(Response::new(Body::from(value.to_string().into_bytes())));
}

async fn expect_get(handle: &mut MockHandle, reply: &Value) {
    let (request, send) = handle.next_request().await.expect("GET node");
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/nodes/gpu-1");
    respond(send, reply);
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

/// A bare node gets one server-side apply; the next pass, seeing the
/// labels in place, sends nothing but its GET.
#[tokio::test]
async fn applies_once_then_stays_quiet() {
    let machine = machine();
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut agent = agent(&machine, Client::new(service, "default"));

    let first = tokio::spawn(async move {
        let outcome = agent.pass().await;
        (agent, outcome)
    });
    expect_get(
        &mut handle,
        &node(json!({"kubernetes.io/hostname": "gpu-1"}), json!({})),
    )
    .await;

    let (request, send) = handle.next_request().await.expect("apply");
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(request.uri().path(), "/api/v1/nodes/gpu-1");
    assert_eq!(
        query(&request),
        [
            ("fieldManager".to_owned(), "flexinfer-agent".to_owned()),
            ("force".to_owned(), "true".to_owned())
        ]
    );
    assert_eq!(
        request.headers()["content-type"],
        "application/apply-patch+yaml"
    );
    let applied = body_json(request).await;
    assert_eq!(
        applied,
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "gpu-1",
                "labels": desired_labels(),
                "annotations": desired_annotations()
            }
        })
    );
    let mut labelled_labels = desired_labels();
    labelled_labels["kubernetes.io/hostname"] = json!("gpu-1");
    let labelled = node(labelled_labels, desired_annotations());
    respond(send, &labelled);

    let (mut agent, outcome) = first.await.unwrap();
    assert_eq!(
        outcome.unwrap(),
        Outcome::Updated {
            removed: false,
            applied: true
        }
    );

    // Second pass: nothing changed, so only the GET.
    let second = tokio::spawn(async move {
        let outcome = agent.pass().await;
        (agent, outcome)
    });
    expect_get(&mut handle, &labelled).await;
    let (agent, outcome) = second.await.unwrap();
    assert_eq!(outcome.unwrap(), Outcome::Unchanged);
    drop(agent);
    assert!(
        handle.next_request().await.is_none(),
        "no request after an unchanged pass"
    );
}

/// Labels the agent set earlier but no longer wants (the GPU is gone) are
/// removed with a merge patch; unchanged desired keys need no apply.
#[tokio::test]
async fn stale_keys_are_removed_with_a_merge_patch() {
    let machine = Machine::new();
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut agent = agent(&machine, Client::new(service, "default"));

    let pass = tokio::spawn(async move { agent.pass().await });
    let mut labels = desired_labels();
    labels["team"] = json!("ml");
    expect_get(&mut handle, &node(labels, desired_annotations())).await;

    let (request, send) = handle.next_request().await.expect("merge patch");
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(
        query(&request),
        [("fieldManager".to_owned(), "flexinfer-agent".to_owned())]
    );
    assert_eq!(
        request.headers()["content-type"],
        "application/merge-patch+json"
    );
    assert_eq!(
        body_json(request).await,
        json!({"metadata": {
            "labels": {
                "flexinfer.ai/gpu.arch": null,
                "flexinfer.ai/gpu.count": null,
                "flexinfer.ai/gpu.int4": null,
                "flexinfer.ai/gpu.vendor": null,
                "flexinfer.ai/gpu.vram": null
            },
            "annotations": {
                "flexinfer.ai/gpu-free-memory": null,
                "flexinfer.ai/gpu.util": null
            }
        }})
    );
    respond(
        send,
        &node(
            json!({"flexinfer.ai/cpu.avx512": "false", "team": "ml"}),
            json!({}),
        ),
    );
    assert_eq!(
        pass.await.unwrap().unwrap(),
        Outcome::Updated {
            removed: true,
            applied: false
        }
    );
}

/// An API error fails the pass (to be retried next tick) without panicking.
#[tokio::test]
async fn api_errors_fail_the_pass() {
    let machine = machine();
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut agent = agent(&machine, Client::new(service, "default"));
    let pass = tokio::spawn(async move { agent.pass().await });
    let (_, send) = handle.next_request().await.expect("GET node");
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "nodes \"gpu-1\" is forbidden", "reason": "Forbidden", "code": 403});
    let response = Response::builder()
        .status(403)
        .body(Body::from(status.to_string().into_bytes()))
        .unwrap();
    send.send_response(response);
    let err = pass.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("forbidden"), "{err}");
}
