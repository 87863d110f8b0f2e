//! The node agent (the chart's DaemonSet) as a process on its own
//! ServiceAccount's pod-bound token, as the kubelet would give its pod.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{create, gpu_node, helm, kubectl, plane, stored_workload};
use crate::chart_scenarios::lane::Component;

/// The agent's pod on `node`, from the DaemonSet's template, as the
/// DaemonSet controller (which does not run here) would create it.
fn agent_pod(daemonset: &Value, name: &str, node: &str) -> Value {
    let template = &daemonset["spec"]["template"];
    let mut spec = template["spec"].clone();
    spec["nodeName"] = json!(node);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": daemonset["metadata"]["namespace"],
                     "labels": template["metadata"]["labels"]},
        "spec": spec,
    })
}

/// With the chart's defaults, the agent runs with a token bound to its pod
/// on Node `agent-node` (the API server puts the Node in the token's user
/// info): it labels that Node with what it found (here, no GPU: the CPU
/// label, under its own field manager), and the API server, with the
/// chart's RBAC and own-Node admission policy, refuses it nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_agent_labels_its_own_node_on_its_pod_bound_token() {
    let Some(plane) = plane() else { return };
    let (namespace, node) = ("flexinfer-agent", "agent-node");
    gpu_node(plane, node);
    helm(
        plane,
        &[
            "install",
            "agent",
            "helm/flexinfer",
            "--namespace",
            namespace,
            "--create-namespace",
        ],
    );
    let daemonset = stored_workload(plane, namespace, "daemonsets", "flexinfer-agent");
    let pod_name = format!(
        "{}-q7x2k",
        daemonset["metadata"]["name"].as_str().expect("name")
    );
    create(plane, &agent_pod(&daemonset, &pod_name, node)).expect("the agent's pod");
    let account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("the agent runs under a ServiceAccount of its own");
    let token = kubectl(
        plane,
        &[
            "create",
            "token",
            account,
            "-n",
            namespace,
            "--bound-object-kind=Pod",
            &format!("--bound-object-name={pod_name}"),
            "--duration=1h",
        ],
    );
    let kubeconfig = plane.dir().join("agent-pod.kubeconfig");
    plane.write_kubeconfig(&kubeconfig, token.trim());
    let log = plane.dir().join("agent.log");
    let mut agent = Component::of(&daemonset, &kubeconfig, log.clone()).expect("the agent");
    agent.as_pod(&pod_name, node);
    agent.start().await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let stored = loop {
        let stored: Value = serde_json::from_str(&kubectl(
            plane,
            &["get", "node", node, "-o", "json", "--show-managed-fields"],
        ))
        .expect("JSON");
        if stored["metadata"]["labels"]["flexinfer.ai/cpu.avx512"].is_string() {
            break stored;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not label its Node in 30 s: {}\nlog: {}",
            stored["metadata"]["labels"],
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let managers: Vec<&str> = stored["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"flexinfer-agent"),
        "the label is the agent's own: {managers:?}"
    );
    // A few passes more (the chart's interval is 30 s; the first pass and
    // the KV-cache probe's pod list have run).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let user = format!("system:serviceaccount:{namespace}:{account}");
    let refused: Vec<_> = plane
        .forbidden()
        .into_iter()
        .filter(|f| f.user == user)
        .collect();
    assert!(
        refused.is_empty(),
        "refused the agent: {refused:#?}\nlog: {}",
        log.display()
    );
    drop(agent);
    let _ = plane.kubectl(&["delete", "pod", &pod_name, "-n", namespace, "--wait=false"]);
    helm(plane, &["uninstall", "agent", "--namespace", namespace]);
}
