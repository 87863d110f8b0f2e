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

/// A simulated kubelet on Node `node` running the pods of `namespace`
/// labelled with model `model` as `flexinfer-sim` processes (with the
/// extra flags `flags` holds for it), on addresses of a pod network; and
/// the host's address on that network.
async fn pool_kubelet(
    plane: &ControlPlane,
    node: &str,
    namespace: &str,
    model: &str,
    flags: &SimFlags,
) -> (flexinfer_testkube::real::RealKubelet, std::net::Ipv4Addr) {
    use flexinfer_testkube::real::{KubeletConfig, PodNetwork, RealKubelet};
    let logs = plane.dir().join(format!("pods-{node}"));
    std::fs::create_dir_all(&logs).expect("log folder");
    let network = std::sync::Arc::new(
        PodNetwork::create().expect("a network namespace for pods (needs root and `ip`)"),
    );
    let host = network.host_ip();
    let flags = flags.clone();
    let kubelet = RealKubelet::start(
        plane.client().await,
        KubeletConfig {
            node: node.into(),
            node_labels: json!({"kubernetes.io/hostname": node}),
            capacity: json!({"cpu": "16", "memory": "64Gi", "pods": "110"}),
            selector: format!("{MODEL_LABEL}={model}"),
            namespace: Some(namespace.into()),
            bind_unscheduled: false,
            runner: std::sync::Arc::new(move |pod, ip| sim_process(pod, ip, &flags, &logs)),
            network: Some(network),
        },
    )
    .await
    .expect("kubelet");
    (kubelet, host)
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

/// A POST of `path` exactly as given, the answer as text.
async fn raw_post(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: llm.example.com\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    conn.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut answer)).await;
    answer
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
    let Some(plane) = plane() else { return };
    if !install_gateway_api_crds(plane) {
        return;
    }
    // The pool's pods, on a kubelet of their own.
    let flags = SimFlags::default();
    let (_kubelet, _) = pool_kubelet(plane, "gwapi-node", "gwapi-apps", "pool-llm", &flags).await;
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
    // A path that escapes its route's prefix once a backend resolves it.
    // Sent raw: HTTP clients resolve dot segments (even encoded) themselves.
    for sneaky in [
        "/v1/%2e%2e/sim/requests",
        "/v1/chat/%2E./x",
        "/v1/../sim/requests",
        "/v1%2fchat",
    ] {
        let answer = raw_post(first, sneaky).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{sneaky}: {answer}");
        assert!(answer.contains("invalid_path"), "{sneaky}: {answer}");
    }
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

const LWEPP_VAR: &str = "FLEXINFER_LWEPP";

/// The inference extension's own picker (`lwepp`) as a process on the
/// host, serving pool `pool` of `namespace`; killed on drop.
struct Lwepp(std::process::Child);

impl Drop for Lwepp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lwepp(plane: &ControlPlane, namespace: &str, pool: &str, grpc: u16) -> Option<Lwepp> {
    let Some(binary) = std::env::var_os(LWEPP_VAR) else {
        assert!(
            std::env::var(flexinfer_testkube::real::REQUIRE_VAR).as_deref() != Ok("1"),
            "{LWEPP_VAR} is unset: run `eval \"$(scripts/gateway-api.sh)\"` (scripts/test.sh does)"
        );
        eprintln!("skipped: no lwepp ({LWEPP_VAR}; scripts/gateway-api.sh builds it)");
        return None;
    };
    let log = std::fs::File::create(plane.dir().join(format!("lwepp-{pool}.log"))).expect("log");
    let child = std::process::Command::new(binary)
        .args(["--pool-name", pool, "--pool-namespace", namespace])
        .args(["--grpc-port", &grpc.to_string()])
        .args([
            "--grpc-health-port",
            &crate::support::free_port().to_string(),
        ])
        .args(["--metrics-port", &crate::support::free_port().to_string()])
        .env("KUBECONFIG", &plane.admin_kubeconfig)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("lwepp starts");
    Some(Lwepp(child))
}

/// A Service without selector and its EndpointSlice: `name` in
/// `namespace`, port 9002 (`grpc`) served at `ip:port`.
fn picker_service(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
    ip: std::net::Ipv4Addr,
    port: u16,
) {
    create(
        plane,
        &json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "grpc", "port": 9002, "targetPort": port}]}}),
    )
    .expect("picker Service");
    create(
        plane,
        &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": namespace,
                "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "grpc", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}]}),
    )
    .expect("picker EndpointSlice");
}

fn pool_with_picker(name: &str, picker: Option<(&str, &str)>) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": "epp-llm"}},
        "targetPorts": [{"number": 8000}]});
    if let Some((service, mode)) = picker {
        spec["endpointPickerRef"] =
            json!({"name": service, "port": {"number": 9002}, "failureMode": mode});
    }
    json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": name, "namespace": "gwapi-epp"}, "spec": spec})
}

async fn post(port: u16, path: &str, select: Option<&str>) -> reqwest::Response {
    let mut req = fresh_client()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .json(&json!({"model": "epp-llm", "max_tokens": 4,
            "messages": [{"role": "user", "content": "Write as if you were a critic: San Francisco"}]}));
    if let Some(endpoint) = select {
        req = req.header("test-epp-endpoint-selection", endpoint);
    }
    req.send().await.expect("request")
}

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Pools with an `endpointPickerRef` are put to their picker, the
/// inference extension's own `lwepp` (ext_proc over gRPC with TLS): the
/// endpoint it picks is the one that serves, its header changes reach the
/// engine, and the response head goes back to it with the endpoint that
/// served. A dead picker gets FailClose pools 503 and FailOpen pools
/// FlexInfer's picker; a picker that never answers holds only its own
/// pool's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_picker_picks_and_a_dead_or_slow_one_is_contained() {
    let Some(plane) = plane() else { return };
    if !install_gateway_api_crds(plane) {
        return;
    }
    let grpc = crate::support::free_port();
    let _ = create(
        plane,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gwapi-epp"}}),
    );
    let Some(_picker) = lwepp(plane, "gwapi-epp", "picked", grpc) else {
        return;
    };
    let flags = SimFlags::default();
    let (_kubelet, host) =
        pool_kubelet(plane, "gwapi-epp-node", "gwapi-epp", "epp-llm", &flags).await;
    for name in ["epp-llm-a", "epp-llm-b"] {
        let mut pod = pool_pod(name);
        pod["metadata"]["namespace"] = json!("gwapi-epp");
        pod["metadata"]["labels"] = json!({"app": "epp-llm", MODEL_LABEL: "epp-llm"});
        pod["spec"]["nodeName"] = json!("gwapi-epp-node");
        create(plane, &pod).expect("pool pod");
    }
    // A picker that accepts connections and never answers.
    let black_hole = std::net::TcpListener::bind((host, 0)).expect("black hole");
    let black_hole_port = black_hole.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in black_hole.incoming().flatten() {
            held.push(conn);
        }
    });
    let dead_port = crate::support::free_port();
    picker_service(plane, "gwapi-epp", "epp", host, grpc);
    picker_service(plane, "gwapi-epp", "dead", host, dead_port);
    picker_service(plane, "gwapi-epp", "silent", host, black_hole_port);
    for pool in [
        pool_with_picker("picked", Some(("epp", "FailClose"))),
        pool_with_picker("closed", Some(("dead", "FailClose"))),
        pool_with_picker("open", Some(("dead", "FailOpen"))),
        pool_with_picker("slow", Some(("silent", "FailOpen"))),
        pool_with_picker("builtin", None),
    ] {
        create(plane, &pool).expect("InferencePool");
    }
    let slot = crate::support::free_port();
    let rel = Release::install_with_env(
        plane,
        "gwepp",
        "flexinfer-gwepp",
        &[
            "--set",
            "gateway.gatewayApi.enabled=true",
            "--set",
            "gateway.gatewayApi.gatewayClass.name=flexinfer-epp",
            "--set",
            "gateway.gatewayApi.controllerName=flexinfer.ai/epp-test",
        ],
        &[
            ("FLEXINFER_GATEWAY_API_PORTS", &slot.to_string()),
            ("FLEXINFER_GATEWAY_API_PICKER_TIMEOUT", "2s"),
            // One request at a time per picker: a slot a request kept
            // after its client left would show.
            ("FLEXINFER_GATEWAY_API_PICKER_MAX_IN_FLIGHT", "1"),
        ],
    )
    .await;
    create(
        plane,
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "gwapi-epp"},
            "spec": {"gatewayClassName": "flexinfer-epp", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    )
    .expect("Gateway");
    let rule = |prefix: &str, pool: &str| {
        json!({"matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
            "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool}]})
    };
    create(
        plane,
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "pools", "namespace": "gwapi-epp"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                rule("/picked", "picked"), rule("/closed", "closed"), rule("/open", "open"),
                rule("/slow", "slow"), rule("/builtin", "builtin"),
                json!({"matches": [{"path": {"type": "PathPrefix", "value": "/weighted"}}],
                    "backendRefs": [
                        {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                         "name": "closed", "weight": 99},
                        {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                         "name": "builtin", "weight": 1}]})]}}),
    )
    .expect("HTTPRoute");
    let pods: Vec<(String, String)> =
        eventually("both pool pods Ready", Duration::from_secs(60), || async {
            let list = get(plane, &["pods", "-n", "gwapi-epp"])?;
            let ready: Vec<(String, String)> = list["items"]
                .as_array()?
                .iter()
                .filter(|p| {
                    condition(&p["status"]["conditions"], "Ready").is_some_and(|c| c.0 == "True")
                })
                .map(|p| {
                    (
                        p["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        p["status"]["podIP"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            (ready.len() == 2).then_some(ready)
        })
        .await;
    eventually(
        "the picked pool served",
        Duration::from_secs(60),
        || async {
            (post(slot, "/picked/v1/chat/completions", None)
                .await
                .status()
                == 200)
                .then_some(())
        },
    )
    .await;

    // The picker's choice is the endpoint that serves, and the response
    // head went back to it with that endpoint.
    for (name, ip) in &pods {
        for _ in 0..3 {
            let endpoint = format!("{ip}:8000");
            let resp = post(slot, "/picked/v1/chat/completions", Some(&endpoint)).await;
            assert_eq!(resp.status(), 200);
            let header = |h: &str| {
                resp.headers()
                    .get(h)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            assert_eq!(
                header("x-served-by").as_deref(),
                Some(name.as_str()),
                "picked {endpoint}"
            );
            assert_eq!(
                header("x-conformance-test-served-endpoint").as_deref(),
                Some(endpoint.as_str()),
                "the picker heard which endpoint served"
            );
            assert_eq!(header("x-went-into-resp-headers").as_deref(), Some("true"));
        }
    }
    // A picker that cannot be reached: FailClose is 503, FailOpen is served.
    let resp = post(slot, "/closed/v1/chat/completions", None).await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.expect("JSON error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("gwapi-epp/closed"),
        "{body}"
    );
    assert_eq!(
        post(slot, "/open/v1/chat/completions", None).await.status(),
        200
    );
    // A rule's backend that cannot take a request (its picker failed
    // closed) hands it to the rule's other backends, whatever the weights.
    for _ in 0..10 {
        let status = post(slot, "/weighted/v1/chat/completions", None)
            .await
            .status();
        assert_eq!(status, 200);
    }
    // A picker that takes connections and never answers holds its own
    // pool's request until the connection's 1 s bound, then FlexInfer's
    // picker serves it (FailOpen); requests to other pools go on meanwhile.
    let slow = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let status = post(slot, "/slow/v1/chat/completions", None).await.status();
        (status, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..5 {
        assert_eq!(
            post(slot, "/builtin/v1/chat/completions", None)
                .await
                .status(),
            200
        );
        assert_eq!(
            post(slot, "/picked/v1/chat/completions", None)
                .await
                .status(),
            200
        );
    }
    assert!(
        !slow.is_finished(),
        "the slow picker's request waits for its timeout"
    );
    let (status, waited) = slow.await.expect("slow request");
    assert_eq!(
        status, 200,
        "FailOpen: FlexInfer's picker served after the bound"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "served only after the bound: {waited:?}"
    );
    // A client that leaves while its request waits for the silent picker:
    // the gateway hears of it only when it answers (no read is pending on
    // the connection before then), so the request keeps the picker's one
    // slot until its pick gives up (the 1 s bound), and no longer: the next
    // request to that pool waits for the picker again (it would be failed
    // open at once if the slot were never given back).
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let left = impatient
        .post(format!("http://127.0.0.1:{slot}/slow/v1/chat/completions"))
        .json(&json!({"model": "epp-llm", "max_tokens": 4,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await;
    assert!(left.is_err(), "the client gave up before the pick");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let started = std::time::Instant::now();
    assert_eq!(
        post(slot, "/slow/v1/chat/completions", None).await.status(),
        200
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the picker's slot was still held: failed open after {:?}",
        started.elapsed()
    );

    // What the picker adds: p50 of sequential requests through lwepp and
    // through FlexInfer's own picker, on this machine.
    let mut through_picker = Vec::new();
    let mut built_in = Vec::new();
    for _ in 0..100 {
        let started = std::time::Instant::now();
        assert_eq!(
            post(slot, "/picked/v1/chat/completions", None)
                .await
                .status(),
            200
        );
        through_picker.push(started.elapsed());
        let started = std::time::Instant::now();
        assert_eq!(
            post(slot, "/builtin/v1/chat/completions", None)
                .await
                .status(),
            200
        );
        built_in.push(started.elapsed());
    }
    let (picker_p50, builtin_p50) = (p50(through_picker), p50(built_in));
    eprintln!(
        "p50 through lwepp {:.2} ms, through FlexInfer's picker {:.2} ms: the external picker adds {:.2} ms",
        picker_p50.as_secs_f64() * 1e3,
        builtin_p50.as_secs_f64() * 1e3,
        (picker_p50.as_secs_f64() - builtin_p50.as_secs_f64()) * 1e3
    );
    let metrics = fresh_client()
        .get(rel.gateway.url("metrics", "/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    for outcome in ["picked", "failed_closed", "failed_open"] {
        assert!(
            metrics.contains(&format!(
                "flexinfer_proxy_gateway_api_picker_seconds_count{{outcome=\"{outcome}\""
            )),
            "no {outcome} in the picker metric:\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("picker"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let refused = rel.refused(plane);
    assert!(
        refused.is_empty(),
        "refused: {refused:#?}\nlog: {}",
        rel.log.display()
    );
    drop(flags);
    rel.uninstall(plane);
    let _ = plane.kubectl(&["delete", "namespace", "gwapi-epp", "--wait=false"]);
}

/// `flexinfer-bench routing` with `args`, its JSON report.
fn routing_bench(args: &[String]) -> Value {
    let bench = std::path::Path::new(env!("CARGO_BIN_EXE_flexinfer-gateway"))
        .with_file_name("flexinfer-bench");
    let out = std::process::Command::new(&bench)
        .arg("routing")
        .args(args)
        .arg("--json")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bench.display()));
    assert!(
        out.status.success(),
        "flexinfer-bench routing {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the bench's JSON report")
}

fn hit_rate(report: &Value, strategy: &str) -> f64 {
    let s = report["strategies"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["strategy"] == strategy))
        .unwrap_or_else(|| panic!("no {strategy} in {report:#}"));
    assert_eq!(s["failed"], 0, "{strategy}: {s:#}");
    s["hit_rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("{strategy} has no hit rate: {s:#}"))
}

/// The routing benchmark's shared-prefix workload, the same conversations
/// (seed) on four simulated pods of the same settings, three ways: through
/// a `Model` with cache-aware routing (the bench's local mode: the gateway
/// on a model file), through an HTTPRoute to an InferencePool without a
/// picker (FlexInfer's cache-aware picker), and through an HTTPRoute to a
/// pool whose picker is the inference extension's `lwepp` (round robin).
/// The pool's hit rate is no more than 2 points below the Model's, and
/// above lwepp's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_a_picker_hits_the_prefix_caches_as_a_model_does() {
    let Some(plane) = plane() else { return };
    if !install_gateway_api_crds(plane) {
        return;
    }
    const SEED: &str = "11";
    const REQUESTS: &str = "240";
    let local = routing_bench(&[
        "--local".into(),
        "--pods".into(),
        "4".into(),
        "--strategies".into(),
        "cache-aware".into(),
        "--seed".into(),
        SEED.into(),
        "--requests".into(),
        REQUESTS.into(),
    ]);
    let model_rate = hit_rate(&local, "cache-aware");
    let sim = local["settings"]["local"]["sim"].clone();
    let grpc = crate::support::free_port();
    let ns = "gwapi-hit";
    let _ = create(
        plane,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    );
    let Some(_picker) = lwepp(plane, ns, "hit-lwepp", grpc) else {
        return;
    };
    // The pods run the bench's own simulator settings.
    let flags = SimFlags::default();
    flags.lock().unwrap().insert(
        "hit-llm".into(),
        vec![
            "--block-size".into(),
            sim["block_size"].to_string(),
            "--prefix-cache-blocks".into(),
            sim["prefix_cache_blocks"].to_string(),
            "--prefill-tokens-per-second".into(),
            sim["prefill_tokens_per_second"].to_string(),
            "--ttft".into(),
            format!(
                "{}us",
                (sim["ttft_ms"].as_f64().unwrap_or(20.0) * 1000.0) as u64
            ),
            "--tokens-per-second".into(),
            sim["tokens_per_second"].to_string(),
            "--max-num-seqs".into(),
            sim["max_num_seqs"].to_string(),
        ],
    );
    let (_kubelet, host) = pool_kubelet(plane, "gwapi-hit-node", ns, "hit-llm", &flags).await;
    picker_service(plane, ns, "epp", host, grpc);
    for (pool, picker) in [("hit", None), ("hit-lwepp", Some("epp"))] {
        let mut spec = json!({"selector": {"matchLabels": {"app": "hit-llm"}},
            "targetPorts": [{"number": 8000}]});
        if let Some(service) = picker {
            spec["endpointPickerRef"] = json!({"name": service, "port": {"number": 9002}});
        }
        create(
            plane,
            &json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                "metadata": {"name": pool, "namespace": ns}, "spec": spec}),
        )
        .expect("InferencePool");
    }
    let slots = [crate::support::free_port(), crate::support::free_port()];
    let (first, second) = (slots[0].min(slots[1]), slots[0].max(slots[1]));
    let rel = Release::install_with_env(
        plane,
        "gwhit",
        "flexinfer-gwhit",
        &[
            "--set",
            "gateway.gatewayApi.enabled=true",
            "--set",
            "gateway.gatewayApi.gatewayClass.name=flexinfer-hit",
            "--set",
            "gateway.gatewayApi.controllerName=flexinfer.ai/hit-test",
        ],
        &[("FLEXINFER_GATEWAY_API_PORTS", &format!("{first},{second}"))],
    )
    .await;
    // One Gateway per pool (the bench's requests carry no Host to tell
    // them apart); the older Gateway holds the first port.
    for (gateway, pool) in [("gw-hit", "hit"), ("gw-hit-lwepp", "hit-lwepp")] {
        create(
            plane,
            &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": gateway, "namespace": ns},
                "spec": {"gatewayClassName": "flexinfer-hit", "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP"}]}}),
        )
        .expect("Gateway");
        create(
            plane,
            &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": gateway, "namespace": ns},
                "spec": {"parentRefs": [{"name": gateway}], "rules": [{"backendRefs": [
                    {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool}]}]}}),
        )
        .expect("HTTPRoute");
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let ports: std::collections::BTreeMap<String, u16> = eventually(
        "both Gateways' Services",
        Duration::from_secs(30),
        || async {
            let list = get(
                plane,
                &[
                    "services",
                    "-n",
                    "flexinfer-gwhit",
                    "-l",
                    "app.kubernetes.io/managed-by=flexinfer-gateway",
                ],
            )?;
            let by: std::collections::BTreeMap<String, u16> = list["items"]
                .as_array()?
                .iter()
                .filter_map(|s| {
                    let gw = s["metadata"]["annotations"]["flexinfer.ai/gateway"].as_str()?;
                    let port = s["spec"]["ports"][0]["targetPort"].as_u64()?;
                    Some((gw.to_string(), port as u16))
                })
                .collect();
            (by.len() == 2).then_some(by)
        },
    )
    .await;
    let mut totals = Vec::new();
    for (gateway, strategy) in [("gw-hit", "pool"), ("gw-hit-lwepp", "lwepp")] {
        // Fresh pods (empty caches) for each run, as the local run had.
        let _ = plane.kubectl(&[
            "delete",
            "pods",
            "-n",
            ns,
            "-l",
            "app=hit-llm",
            "--wait=true",
        ]);
        for i in 0..4 {
            let mut pod = pool_pod(&format!("hit-llm-{strategy}-{i}"));
            pod["metadata"]["namespace"] = json!(ns);
            pod["metadata"]["labels"] = json!({"app": "hit-llm", MODEL_LABEL: "hit-llm"});
            pod["spec"]["nodeName"] = json!("gwapi-hit-node");
            create(plane, &pod).expect("pool pod");
        }
        let ips: Vec<String> =
            eventually("four pool pods Ready", Duration::from_secs(60), || async {
                let list = get(plane, &["pods", "-n", ns, "-l", "app=hit-llm"])?;
                let ready: Vec<String> = list["items"]
                    .as_array()?
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .filter(|p| {
                        condition(&p["status"]["conditions"], "Ready")
                            .is_some_and(|c| c.0 == "True")
                    })
                    .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_owned))
                    .collect();
                (ready.len() == 4).then_some(ready)
            })
            .await;
        let port = ports[&format!("{ns}/{gateway}")];
        // Served through the Gateway by those four pods before measuring.
        eventually(
            "the pool served by the new pods",
            Duration::from_secs(60),
            || async {
                let resp = fresh_client()
                    .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
                    .json(&json!({"model": "hit-llm", "max_tokens": 1,
                    "messages": [{"role": "user", "content": "warm"}]}))
                    .send()
                    .await
                    .ok()?;
                let by = resp.headers().get("x-served-by")?.to_str().ok()?.to_owned();
                (resp.status() == 200 && by.contains(strategy)).then_some(())
            },
        )
        .await;
        // A round of the engines' load for the picker (--load-scrape-interval).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let report = routing_bench(&[
            "--url".into(),
            format!("http://127.0.0.1:{port}"),
            "--model".into(),
            "hit-llm".into(),
            "--pod-metrics".into(),
            ips.iter()
                .map(|ip| format!("http://{ip}:8000"))
                .collect::<Vec<_>>()
                .join(","),
            "--label".into(),
            strategy.into(),
            "--seed".into(),
            SEED.into(),
            "--requests".into(),
            REQUESTS.into(),
        ]);
        totals.push(hit_rate(&report, strategy));
    }
    let (pool_rate, lwepp_rate) = (totals[0], totals[1]);
    eprintln!(
        "prefix-cache hit rate, shared-prefix workload (seed {SEED}, {REQUESTS} requests, 4 pods): \
         Model (cache-aware) {:.1} %, HTTPRoute -> InferencePool (FlexInfer's picker) {:.1} %, \
         HTTPRoute -> InferencePool with lwepp {:.1} %",
        model_rate * 100.0,
        pool_rate * 100.0,
        lwepp_rate * 100.0
    );
    assert!(
        pool_rate >= model_rate - 0.02,
        "the pool's hit rate {pool_rate:.3} is more than 2 points below the Model's {model_rate:.3}"
    );
    assert!(
        pool_rate > lwepp_rate,
        "FlexInfer's picker {pool_rate:.3} does not beat lwepp's {lwepp_rate:.3}"
    );
    let refused = rel.refused(plane);
    assert!(
        refused.is_empty(),
        "refused: {refused:#?}\nlog: {}",
        rel.log.display()
    );
    drop(flags);
    rel.uninstall(plane);
    let _ = plane.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
