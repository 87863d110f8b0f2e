//! The Gateway API on the real control plane: the chart's gateway (with
//! `gateway.gatewayApi.enabled`, on the chart's RBAC) against the Gateway
//! API's own CRDs (v1.6.1 standard channel, InferencePool from the
//! inference extension v1.6.0, from `scripts/gateway-api.sh`), with pool
//! pods run by the simulated kubelet on distinct pod IPs.

use std::time::Duration;

use serde_json::{json, Value};

use super::{create, kubectl, plane, Release};
use crate::chart_scenarios::lane::{eventually, fresh_client, sim_process, SimFlags, MODEL_LABEL};
use flexinfer_testkube::real::ControlPlane;

const CRDS_VAR: &str = "FLEXINFER_GATEWAY_API_CRDS";

/// Installs the Gateway API CRDs; `false` (said so) when they were not
/// fetched, which fails where the control plane is required.
fn install_gateway_api_crds(plane: &ControlPlane) -> bool {
    let Some(dir) = std::env::var_os(CRDS_VAR) else {
        assert!(
            std::env::var(flexinfer_testkube::real::REQUIRE_VAR).as_deref() != Ok("1"),
            "{CRDS_VAR} is unset: run `eval \"$(scripts/gateway-api.sh)\"` (scripts/test.sh does)"
        );
        eprintln!("skipped: no Gateway API CRDs ({CRDS_VAR}; scripts/gateway-api.sh fetches them)");
        return false;
    };
    let dir = dir.to_str().expect("utf-8 path").to_owned();
    kubectl(plane, &["apply", "--server-side", "-f", &dir]);
    kubectl(
        plane,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/gatewayclasses.gateway.networking.k8s.io",
            "crd/gateways.gateway.networking.k8s.io",
            "crd/httproutes.gateway.networking.k8s.io",
            "crd/inferencepools.inference.networking.k8s.io",
        ],
    );
    true
}

fn get(plane: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    plane
        .kubectl(&all)
        .ok()
        .and_then(|out| serde_json::from_str(&out).ok())
}

/// The condition `type_` of `conditions`, as (status, reason, observedGeneration).
fn condition(conditions: &Value, type_: &str) -> Option<(String, String, i64)> {
    conditions
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
                c["observedGeneration"].as_i64().unwrap_or(-1),
            )
        })
}

/// The route's status under Gateway `gw` once it holds (Accepted,
/// ResolvedRefs) at the route's current generation.
async fn route_status(plane: &ControlPlane, route: &str, resolved: (&str, &str)) -> Value {
    eventually(
        &format!("HTTPRoute {route}: Accepted, ResolvedRefs={resolved:?} at its generation"),
        Duration::from_secs(30),
        || async {
            let r = get(plane, &["httproute", route, "-n", "gwapi-apps"])?;
            let generation = r["metadata"]["generation"].as_i64()?;
            let parent = r["status"]["parents"]
                .as_array()?
                .iter()
                .find(|p| p["parentRef"]["name"] == "gw")?
                .clone();
            let accepted = condition(&parent["conditions"], "Accepted")?;
            let refs = condition(&parent["conditions"], "ResolvedRefs")?;
            (accepted == ("True".into(), "Accepted".into(), generation)
                && (refs.0.as_str(), refs.1.as_str()) == resolved
                && refs.2 == generation)
                .then_some(parent)
        },
    )
    .await
}

fn pool_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "gwapi-apps",
            "labels": {"app": "pool-llm", MODEL_LABEL: "pool-llm"}},
        "spec": {"nodeName": "gwapi-node", "containers": [{
            "name": "engine", "image": "vllm/vllm-openai:stand-in",
            "args": ["--port", "8000"], "ports": [{"containerPort": 8000}]}]}
    })
}

async fn chat(port: u16, path: &str, prompt: &str) -> (u16, Option<String>, String) {
    let resp = fresh_client()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .header("host", "llm.example.com")
        .json(&json!({"model": "pool-llm", "max_tokens": 4,
            "messages": [{"role": "user", "content": prompt}]}))
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let served = resp
        .headers()
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, served, resp.text().await.unwrap_or_default())
}

/// A Gateway of the chart's GatewayClass gets an address (its Service's
/// cluster IP); an HTTPRoute to an InferencePool without an endpoint
/// picker is served by FlexInfer's cache-aware picker over the pool's
/// pods; every status is written at the object's generation, a broken
/// reference is `BackendNotFound` and answered 500, a deleted route leaves
/// the pool's parents, and a deleted Gateway takes its Service with it.
/// The API server refuses the gateway's account nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_routes_a_pool_through_flexinfers_picker_and_reports_status() {
    use flexinfer_testkube::real::{KubeletConfig, PodNetwork, RealKubelet};
    let Some(plane) = plane() else { return };
    if !install_gateway_api_crds(plane) {
        return;
    }
    // The pool's pods, on a kubelet of their own.
    let logs = plane.dir().join("pods-gwapi-node");
    std::fs::create_dir_all(&logs).expect("log folder");
    let flags = SimFlags::default();
    let runner_flags = flags.clone();
    let _kubelet = RealKubelet::start(
        plane.client().await,
        KubeletConfig {
            node: "gwapi-node".into(),
            node_labels: json!({"kubernetes.io/hostname": "gwapi-node"}),
            capacity: json!({"cpu": "16", "memory": "64Gi", "pods": "110"}),
            selector: format!("{MODEL_LABEL}=pool-llm"),
            namespace: Some("gwapi-apps".into()),
            bind_unscheduled: false,
            runner: std::sync::Arc::new(move |pod, ip| sim_process(pod, ip, &runner_flags, &logs)),
            network: Some(std::sync::Arc::new(
                PodNetwork::create().expect("a network namespace for pods (needs root and `ip`)"),
            )),
        },
    )
    .await
    .expect("kubelet");
    for ns in ["gwapi-apps", "gwapi-infra"] {
        let _ = create(
            plane,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    // The documented objects are what the real CRDs accept.
    let doc = std::fs::read_to_string(super::repo_root().join("docs/gateway-api.md")).expect("doc");
    let mut documented = 0;
    for block in doc.split("```yaml\n").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
        for document in serde_yaml::Deserializer::from_str(block) {
            let mut object: Value = serde::Deserialize::deserialize(document).expect("YAML");
            let ns = format!(
                "gwapi-{}",
                object["metadata"]["namespace"].as_str().unwrap_or("apps")
            );
            object["metadata"]["namespace"] = Value::String(ns);
            let file = tempfile::NamedTempFile::new().expect("temp file");
            std::fs::write(file.path(), object.to_string()).expect("object file");
            let path = file.path().to_str().expect("utf-8 path");
            if let Err(e) = plane.kubectl(&["create", "--dry-run=server", "-f", path]) {
                panic!("docs/gateway-api.md: {} refused: {e}", object["kind"]);
            }
            documented += 1;
        }
    }
    assert_eq!(
        documented, 3,
        "the worked example's Gateway, InferencePool and HTTPRoute"
    );
    for pod in ["pool-llm-a", "pool-llm-b"] {
        create(plane, &pool_pod(pod)).expect("pool pod");
    }
    let slots = [crate::support::free_port(), crate::support::free_port()];
    let ports = format!("{},{}", slots[0].min(slots[1]), slots[0].max(slots[1]));
    let first = slots[0].min(slots[1]);
    let rel = Release::install_with_env(
        plane,
        "gwapi",
        "flexinfer-gwapi",
        &["--set", "gateway.gatewayApi.enabled=true"],
        &[("FLEXINFER_GATEWAY_API_PORTS", &ports)],
    )
    .await;
    let class = eventually(
        "the GatewayClass Accepted",
        Duration::from_secs(30),
        || async {
            let c = get(plane, &["gatewayclass", "flexinfer"])?;
            (condition(&c["status"]["conditions"], "Accepted")?.0 == "True").then_some(c)
        },
    )
    .await;
    assert_eq!(
        class["spec"]["controllerName"],
        "flexinfer.ai/gateway-controller"
    );
    create(
        plane,
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "gwapi-infra"},
            "spec": {"gatewayClassName": "flexinfer", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP",
                 "allowedRoutes": {"namespaces": {"from": "All"}}}]}}),
    )
    .expect("Gateway");
    create(
        plane,
        &json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": "pool", "namespace": "gwapi-apps"},
            "spec": {"selector": {"matchLabels": {"app": "pool-llm"}},
                     "targetPorts": [{"number": 8000}]}}),
    )
    .expect("InferencePool");
    let route = |name: &str, path: &str, pool: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "gwapi-apps"},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "gwapi-infra"}],
                "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                    "backendRefs": [{"group": "inference.networking.k8s.io",
                        "kind": "InferencePool", "name": pool}]}]}})
    };
    create(plane, &route("chat", "/v1", "pool")).expect("HTTPRoute");
    create(plane, &route("broken", "/broken", "missing")).expect("HTTPRoute");

    // The Gateway: programmed, with its Service's cluster IP, on the first slot.
    let gateway = eventually(
        "the Gateway Programmed with an address and both routes",
        Duration::from_secs(30),
        || async {
            let g = get(plane, &["gateway", "gw", "-n", "gwapi-infra"])?;
            let programmed = condition(&g["status"]["conditions"], "Programmed")?;
            let attached = g["status"]["listeners"][0]["attachedRoutes"] == 2;
            (programmed.0 == "True" && attached && g["status"]["addresses"][0]["value"].is_string())
                .then_some(g)
        },
    )
    .await;
    let address = gateway["status"]["addresses"][0]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let services = get(
        plane,
        &[
            "services",
            "-n",
            "flexinfer-gwapi",
            "-l",
            "app.kubernetes.io/managed-by=flexinfer-gateway",
        ],
    )
    .expect("Services");
    let service = services["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|s| s["spec"]["clusterIP"] == address.as_str())
        })
        .unwrap_or_else(|| panic!("no Service holds the Gateway's address {address}: {services:#}"))
        .clone();
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], first);

    // Routes and the pool.
    route_status(plane, "chat", ("True", "ResolvedRefs")).await;
    route_status(plane, "broken", ("False", "BackendNotFound")).await;
    let pool = eventually(
        "the pool's parent is the Gateway",
        Duration::from_secs(30),
        || async {
            let p = get(plane, &["inferencepool", "pool", "-n", "gwapi-apps"])?;
            let parent = p["status"]["parents"].as_array()?.first()?.clone();
            (condition(&parent["conditions"], "Accepted")?.0 == "True").then_some(parent)
        },
    )
    .await;
    assert_eq!(pool["parentRef"]["name"], "gw");
    assert_eq!(pool["parentRef"]["namespace"], "gwapi-infra");
    assert_eq!(pool["parentRef"]["kind"], "Gateway");

    // Traffic, once both pods are ready endpoints: a shared prompt stays on
    // one pod (the cache-aware picker), every answer comes from a pool pod.
    let pods = ["pool-llm-a", "pool-llm-b"];
    eventually("both pool pods Ready", Duration::from_secs(60), || async {
        let list = get(plane, &["pods", "-n", "gwapi-apps"])?;
        let ready = list["items"].as_array()?.iter().filter(|p| {
            condition(&p["status"]["conditions"], "Ready").is_some_and(|c| c.0 == "True")
        });
        (ready.count() == 2).then_some(())
    })
    .await;
    let shared = "You are a careful assistant. ".repeat(40);
    let mut served = std::collections::BTreeMap::new();
    for i in 0..8 {
        let (status, by, body) = chat(
            first,
            "/v1/chat/completions",
            &format!("{shared} question {i}"),
        )
        .await;
        assert_eq!(status, 200, "{body}\nlog: {}", rel.log.display());
        let by = by.expect("x-served-by");
        assert!(pods.contains(&by.as_str()), "answered by {by}");
        *served.entry(by).or_insert(0) += 1;
    }
    assert_eq!(served.len(), 1, "one shared prefix, one pod: {served:?}");
    let (status, _, body) = chat(first, "/nothing", "x").await;
    assert_eq!(status, 404, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON error");
    assert_eq!(error["error"]["code"], "route_not_found");
    let (status, _, body) = chat(first, "/broken/v1/chat/completions", "x").await;
    assert_eq!(status, 500, "a rule whose backend does not resolve: {body}");
    // The proxy port knows no pool as a model: a pool is reached through
    // its routes only.
    let resp = fresh_client()
        .post(rel.gateway.url("http", "/v1/chat/completions"))
        .json(&crate::support::chat("inferencepool/gwapi-apps/pool"))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 404);

    // A changed route: its status follows its new generation.
    kubectl(
        plane,
        &[
            "patch",
            "httproute",
            "chat",
            "-n",
            "gwapi-apps",
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/spec/rules/0/matches/0/path/value", "value": "/v1/chat"}]"#,
        ],
    );
    let parent = route_status(plane, "chat", ("True", "ResolvedRefs")).await;
    assert_eq!(condition(&parent["conditions"], "Accepted").unwrap().2, 2);
    eventually(
        "the route's new path served",
        Duration::from_secs(10),
        || async {
            let (status, _, _) = chat(first, "/v1/completions", "x").await;
            (status == 404).then_some(())
        },
    )
    .await;

    // A deleted route: the pool leaves the Gateway, and nothing is routed.
    kubectl(plane, &["delete", "httproute", "chat", "-n", "gwapi-apps"]);
    eventually(
        "the pool without parents",
        Duration::from_secs(30),
        || async {
            let p = get(plane, &["inferencepool", "pool", "-n", "gwapi-apps"])?;
            p["status"]["parents"]
                .as_array()
                .is_none_or(|a| a.is_empty())
                .then_some(())
        },
    )
    .await;
    let (status, _, body) = chat(first, "/v1/chat/completions", "x").await;
    assert_eq!(status, 404, "{body}");

    // A deleted Gateway takes its Service.
    kubectl(plane, &["delete", "gateway", "gw", "-n", "gwapi-infra"]);
    let name = service["metadata"]["name"].as_str().unwrap().to_owned();
    eventually(
        "the Gateway's Service removed",
        Duration::from_secs(30),
        || async {
            get(plane, &["service", &name, "-n", "flexinfer-gwapi"])
                .is_none()
                .then_some(())
        },
    )
    .await;

    let refused = rel.refused(plane);
    assert!(
        refused.is_empty(),
        "refused: {refused:#?}\nlog: {}",
        rel.log.display()
    );
    drop(flags);
    rel.uninstall(plane);
    for ns in ["gwapi-apps", "gwapi-infra"] {
        let _ = plane.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}
