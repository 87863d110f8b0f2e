//! The standalone operator: with `operator.enabled=true` and
//! `gateway.embeddedOperator=false` the chart runs `flexinfer-operator` in
//! a Deployment of its own. Here it runs as a process from that
//! Deployment on its own ServiceAccount's token, next to the gateway on
//! the gateway's, each with only what the chart grants it.

use std::time::{Duration, Instant};

use flexinfer_testkube::real::{ControlPlane, Forbidden};
use serde_json::Value;

use super::placement::start_component;
use super::{create, gpu_kubelet, kubectl, model, plane, Release};
use crate::chart_scenarios::lane::{fresh_client, SimFlags, MODEL_LABEL};

/// `system:serviceaccount:<namespace>:<account>`.
fn user(namespace: &str, account: &str) -> String {
    format!("system:serviceaccount:{namespace}:{account}")
}

/// Users of the requests that `code` answered, for `resource` (as
/// `group/resource`) in `namespace`.
fn writers(plane: &ControlPlane, code: u16, resource: &str, namespace: &str) -> Vec<String> {
    plane
        .answered(code)
        .into_iter()
        .filter(|r| r.resource == resource && r.namespace == namespace)
        .map(|r| r.user)
        .collect()
}

/// Waits until `model` has a Deployment, a Service and a status phase,
/// all written by the operator.
async fn wait_reconciled(plane: &ControlPlane, rel: &Release, operator_log: &str, model: &str) {
    let namespace = rel.namespace.as_str();
    let selector = format!("{MODEL_LABEL}={model}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = |kind: &str| {
            plane
                .kubectl(&["get", kind, "-n", namespace, "-l", &selector, "-o", "name"])
                .unwrap_or_default()
        };
        let phase = plane
            .kubectl(&[
                "get",
                "models.ai.flexinfer",
                model,
                "-n",
                namespace,
                "-o",
                "jsonpath={.status.phase}",
            ])
            .unwrap_or_default();
        let (deployments, services) = (listed("deployments"), listed("services"));
        if !deployments.trim().is_empty() && !services.trim().is_empty() && !phase.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{model} not reconciled in 60 s: deployments {deployments:?} services {services:?} \
             phase {phase:?}\nevents: {}\noperator log: {operator_log}\ngateway log: {}",
            kubectl(plane, &["get", "events", "-n", namespace]),
            rel.log.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The gateway and the standalone operator each run on their own
/// ServiceAccount's token: the operator (not the gateway) reconciles a
/// Model scaled to zero into its Deployment, Service and status; a chat
/// request through the gateway starts it from zero and is answered; the
/// API server refuses neither account anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_operator_reconciles_and_a_request_starts_the_model() {
    let Some(plane) = plane() else { return };
    let started = Instant::now();
    let name = "standalone";
    let flags = SimFlags::default();
    let _kubelet = gpu_kubelet(plane, "standalone-node", name, &flags).await;
    let rel = Release::install(
        plane,
        "standalone",
        "flexinfer-standalone",
        &[
            "--set",
            "operator.enabled=true",
            "--set",
            "gateway.embeddedOperator=false",
        ],
    )
    .await;
    let namespace = rel.namespace.clone();
    let (operator, operator_account) = start_component(plane, &namespace, "operator").await;
    let operator_log = plane
        .dir()
        .join(format!("{namespace}-operator.log"))
        .display()
        .to_string();
    let serverless =
        serde_json::json!({"enabled": true, "idleTimeout": "5m", "coldStartTimeout": "60s"});
    create(plane, &model(name, &namespace, serverless)).expect("Model created");
    wait_reconciled(plane, &rel, &operator_log, name).await;
    let operator_user = user(&namespace, &operator_account);
    let gateway_user = user(&namespace, &rel.account);
    for resource in ["apps/deployments", "/services"] {
        let created = writers(plane, 201, resource, &namespace);
        assert!(
            created.contains(&operator_user) && !created.contains(&gateway_user),
            "{resource} created by {created:?}, not by the operator alone"
        );
    }

    let resp = fresh_client()
        .post(rel.gateway.url("http", "/v1/chat/completions"))
        .json(&crate::support::chat(name))
        .send()
        .await
        .expect("chat request");
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(
        status,
        200,
        "{body}\nmodel: {}\npods: {}\noperator log: {operator_log}\ngateway log: {}",
        kubectl(
            plane,
            &[
                "get",
                "models.ai.flexinfer",
                name,
                "-n",
                &namespace,
                "-o",
                "yaml"
            ]
        ),
        kubectl(plane, &["get", "pods", "-n", &namespace, "-o", "wide"]),
        rel.log.display()
    );
    let replicas: Value = serde_json::from_str(&kubectl(
        plane,
        &[
            "get",
            "deployments",
            "-n",
            &namespace,
            "-l",
            &format!("{MODEL_LABEL}={name}"),
            "-o",
            "json",
        ],
    ))
    .expect("JSON");
    assert_eq!(
        replicas["items"][0]["spec"]["replicas"], 1,
        "started from zero"
    );
    // A few more seconds of watches, resyncs and status writes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused: Vec<Forbidden> = plane
        .forbidden()
        .into_iter()
        .filter(|f| f.user == operator_user || f.user == gateway_user)
        .collect();
    assert!(
        refused.is_empty(),
        "refused: {refused:#?}\noperator log: {operator_log}"
    );
    eprintln!(
        "standalone operator scenario in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(operator);
    rel.uninstall(plane);
}
