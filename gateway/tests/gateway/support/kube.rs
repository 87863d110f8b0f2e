//! Kubernetes-mode test support: the real gateway binary pointed at an
//! in-memory API server (`flexinfer-testkube`), with fixtures for Models,
//! EndpointSlices and Nodes whose endpoints are real `flexinfer-sim`
//! processes on loopback.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flexinfer_testkube::TestApiServer;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// A `flexinfer-gateway --kubernetes` process.
pub struct KubeGateway {
    child: Child,
    /// Proxy address.
    pub addr: SocketAddr,
}

fn loopback() -> SocketAddr {
    format!("127.0.0.1:{}", crate::support::free_port())
        .parse()
        .unwrap()
}

fn command(kubeconfig: &Path, addr: SocketAddr, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flexinfer-gateway"));
    cmd.arg("--kubernetes")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--listen", &addr.to_string()])
        .args(["--threads", "2", "--shutdown-drain-delay", "0s"])
        .args(extra)
        .env_remove("FLEXINFER_CONFIG")
        .env_remove("FLEXINFER_NAMESPACES")
        .env_remove("FLEXINFER_ALL_NAMESPACES")
        .env("POD_NAMESPACE", "default")
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null());
    cmd
}

impl KubeGateway {
    /// Starts the gateway against `server` and waits until it answers.
    pub async fn start(server: &TestApiServer, extra: &[&str]) -> Self {
        let addr = loopback();
        let child = command(server.kubeconfig_path(), addr, extra)
            .spawn()
            .expect("start flexinfer-gateway");
        let mut gw = Self { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = gw.child.try_wait() {
                panic!("gateway exited during start-up: {status}");
            }
            let ok = crate::support::client()
                .get(gw.url("/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ok {
                return gw;
            }
            assert!(Instant::now() < deadline, "gateway did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs the gateway against `server`, expecting it to refuse to start;
    /// returns its stderr.
    pub async fn start_error(server: &TestApiServer, extra: &[&str]) -> String {
        Self::start_error_with(server.kubeconfig_path(), extra).await
    }

    /// [`Self::start_error`] with another kubeconfig.
    pub async fn start_error_with(kubeconfig: &Path, extra: &[&str]) -> String {
        let mut cmd = command(kubeconfig, loopback(), extra);
        cmd.stderr(Stdio::piped());
        let child = cmd.spawn().expect("start flexinfer-gateway");
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("gateway output");
        assert_eq!(out.status.code(), Some(1), "the gateway must exit with 1");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// POSTs a small chat completion for `model`.
    pub async fn chat(&self, model: &str) -> reqwest::Response {
        crate::support::client()
            .post(self.url("/v1/chat/completions"))
            .json(&crate::support::chat(model))
            .send()
            .await
            .expect("chat request")
    }

    /// The gateway's `/admin/models` entry for `model`.
    pub async fn admin(&self, model: &str) -> Value {
        let report: Value = crate::support::client()
            .get(self.url("/admin/models"))
            .send()
            .await
            .expect("GET /admin/models")
            .json()
            .await
            .expect("JSON");
        report["models"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == model).cloned())
            .unwrap_or(Value::Null)
    }

    /// Waits until `/admin/models` reports `n` ready endpoints for `model`.
    pub async fn wait_endpoints(&self, model: &str, n: u64) {
        eventually(&format!("{n} endpoints for {model}"), || async {
            (self.admin(model).await["endpoints"] == n).then_some(())
        })
        .await;
    }
}

impl Drop for KubeGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 20 ms until it returns `Some`, for at most 20 s.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A v1alpha2 Model in `namespace`; `phase` goes into its status.
pub fn model(namespace: &str, name: &str, phase: Option<&str>, extra_spec: Value) -> Value {
    let mut spec = json!({"backend": "vllm", "source": format!("hf://org/{name}")});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    let mut m = json!({
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
    if let Some(p) = phase {
        m["status"] = json!({"phase": p});
    }
    m
}

/// EndpointSlice `name` of Service `service` with one ready endpoint per
/// address (optionally on a node); its port, named `http`, is the first
/// address's port (a slice has one port for all its endpoints).
pub fn slice(
    namespace: &str,
    service: &str,
    name: &str,
    endpoints: &[(SocketAddr, Option<&str>)],
) -> Value {
    let port = endpoints.first().map_or(8000, |(a, _)| a.port());
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(a, node)| {
            let mut e = json!({"addresses": [a.ip().to_string()], "conditions": {"ready": true}});
            if let Some(n) = node {
                e["nodeName"] = json!(n);
            }
            e
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": eps,
    })
}

/// Creates or replaces an EndpointSlice through the API (a watch event).
pub async fn put_slice(server: &TestApiServer, obj: Value) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let api: Api<EndpointSlice> = Api::namespaced(server.client(), &ns);
    let mut slice: EndpointSlice = serde_json::from_value(obj).unwrap();
    if let Some(old) = api.get_opt(&name).await.unwrap() {
        slice.metadata.resource_version = old.metadata.resource_version;
        api.replace(&name, &PostParams::default(), &slice)
            .await
            .unwrap();
    } else {
        api.create(&PostParams::default(), &slice).await.unwrap();
    }
}

/// Sets a Model's `status.phase` through the status subresource.
pub async fn set_model_phase(server: &TestApiServer, namespace: &str, name: &str, phase: &str) {
    let api: Api<flexinfer_crds::v1alpha2::Model> = Api::namespaced(server.client(), namespace);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase}})),
    )
    .await
    .unwrap();
}
