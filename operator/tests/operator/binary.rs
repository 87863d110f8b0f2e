//! The `flexinfer-operator` binary against the in-memory API server:
//! `--kubeconfig`, `/healthz`, `/readyz`, `/metrics`, reconciling, and a
//! graceful exit on SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use flexinfer_crds::v1alpha2::{Model, ModelSpec, ServerlessSpec};
use flexinfer_testkube::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn http_get(url: &str) -> Option<(u16, String)> {
    let resp = reqwest::get(url).await.ok()?;
    let code = resp.status().as_u16();
    Some((code, resp.text().await.ok()?))
}

#[tokio::test]
async fn binary_serves_probes_and_metrics_and_exits_on_sigterm() {
    let server = TestApiServer::start().await;
    let (health, metrics) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_flexinfer-operator"))
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health}"),
        ])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .arg("--no-kv-cache-scrape")
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let mut ready = false;
    for _ in 0..400 {
        if let Some((200, _)) = http_get(&format!("http://127.0.0.1:{health}/readyz")).await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "operator never became ready");
    assert_eq!(
        http_get(&format!("http://127.0.0.1:{health}/healthz"))
            .await
            .unwrap()
            .0,
        200
    );

    let models: Api<Model> = Api::default_namespaced(server.client());
    let spec = ModelSpec {
        backend: "llamacpp".into(),
        source: "file:///m.gguf".into(),
        serverless: Some(ServerlessSpec {
            enabled: false,
            ..Default::default()
        }),
        ..Default::default()
    };
    models
        .create(&PostParams::default(), &Model::new("bin", spec))
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::default_namespaced(server.client());
    let mut created = false;
    for _ in 0..400 {
        if deployments.get_opt("bin").await.unwrap().is_some() {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(created, "the binary did not reconcile the Model");
    let (code, body) = http_get(&format!("http://127.0.0.1:{metrics}/metrics"))
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert!(
        body.contains("flexinfer_operator_reconciles_total{controller=\"model\"}"),
        "{body}"
    );

    // SIGTERM: reconciles finish, the process exits with success.
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let mut status = None;
    for _ in 0..400 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("operator did not exit after SIGTERM")
    });
    assert!(status.success(), "{status:?}");
}

#[test]
fn help_explains_the_operator() {
    let out = Command::new(env!("CARGO_BIN_EXE_flexinfer-operator"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for flag in [
        "--kubeconfig",
        "--leader-elect",
        "--health-probe-bind-address",
        "--metrics-bind-address",
        "--scheduler-name",
        "--federation",
        "--cluster-failure-threshold",
    ] {
        assert!(text.contains(flag), "{flag} missing from --help");
    }
    assert!(text.contains("SIGTERM"));
}
