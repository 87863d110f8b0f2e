//! The chart under GitOps, on the real control plane, following the
//! render and apply steps of `helm/flexinfer/README.md` ("Install with
//! Argo CD / Flux") as written: `helm template --kube-version <cluster's>
//! --include-crds`, hooks left to the GitOps tool, `kubectl apply
//! --server-side --force-conflicts` as Argo CD's server-side mode applies,
//! the same again (nothing changes), an upgrade by rendering new values,
//! and a deletion of the rendered objects. Between them the two default
//! gateway replicas run from the applied Deployment on the chart's RBAC:
//! they share one secret the first of them generated, share routing
//! state, take up a rotated secret, and answer a Model from zero.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{gateway_deployment, kubectl, model, plane, repo_root, CRD_SCHEMAS};
use crate::chart_scenarios::lane::{fresh_client, Component, SimFlags};
use flexinfer_testkube::real::ControlPlane;

const RELEASE: &str = "gitops";
const NAMESPACE: &str = "flexinfer-gitops";
/// Argo CD's field manager in server-side mode.
const MANAGER: &str = "argocd-controller";

/// The API server's version, as `--kube-version` takes it.
fn cluster_version(plane: &ControlPlane) -> String {
    let version: Value =
        serde_json::from_str(&kubectl(plane, &["version", "-o", "json"])).expect("JSON");
    version["serverVersion"]["gitVersion"]
        .as_str()
        .expect("server version")
        .to_owned()
}

/// `helm template` as Argo CD renders (CRDs included), with `set`.
fn render(plane: &ControlPlane, version: &str, set: &[&str]) -> String {
    let mut args = vec![
        "template",
        RELEASE,
        "helm/flexinfer",
        "--namespace",
        NAMESPACE,
        "--kube-version",
        version,
        "--include-crds",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    let out = plane
        .helm()
        .args(&args)
        .current_dir(repo_root())
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 manifest")
}

/// The rendered documents without hooks (the GitOps tool runs those as
/// its own hooks), written to a file for `kubectl`.
fn manifest_file(plane: &ControlPlane, rendered: &str, name: &str) -> std::path::PathBuf {
    let docs: Vec<&str> = rendered
        .split("\n---")
        .filter(|d| d.contains("kind:") && !d.contains("helm.sh/hook"))
        .collect();
    let path = plane.dir().join(format!("gitops-{name}.yaml"));
    std::fs::write(&path, docs.join("\n---")).expect("manifest file");
    path
}

/// `kubectl apply --server-side --force-conflicts` as Argo CD's
/// server-side sync does.
fn apply(plane: &ControlPlane, file: &std::path::Path) {
    let _crds = CRD_SCHEMAS.read().unwrap_or_else(|e| e.into_inner());
    let manager = format!("--field-manager={MANAGER}");
    kubectl(
        plane,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            &manager,
            "-f",
            file.to_str().expect("UTF-8 path"),
        ],
    );
}

/// Kind/name → resourceVersion of every object of `file`.
fn versions(plane: &ControlPlane, file: &std::path::Path) -> BTreeMap<String, String> {
    let list: Value = serde_json::from_str(&kubectl(
        plane,
        &[
            "get",
            "-f",
            file.to_str().expect("UTF-8 path"),
            "-o",
            "json",
        ],
    ))
    .expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            (
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                ),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

/// The versions once nothing changed for a second (controllers done with
/// their status writes).
async fn settled(plane: &ControlPlane, file: &std::path::Path) -> BTreeMap<String, String> {
    let mut last = versions(plane, file);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = versions(plane, file);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The decoded shared secret of the peer Secret, if written.
fn peer_secret(plane: &ControlPlane) -> Option<String> {
    use base64::Engine as _;
    let name = format!("{RELEASE}-flexinfer-proxy-peers");
    let data = plane
        .kubectl(&[
            "get",
            "secret",
            &name,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.data.secret}",
        ])
        .ok()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// One series of a replica's metrics.
async fn metric(gw: &Component, series: &str) -> f64 {
    let text = fresh_client()
        .get(gw.url("metrics", "/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    crate::support::metric_value(&text, series)
}

async fn wait_metric(gw: &Component, series: &str, at_least: f64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(gw, series).await < at_least {
        assert!(
            Instant::now() < deadline,
            "{what}: {series} stayed below {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The two default replicas of the applied gateway Deployment, each
/// naming the other as its peer (what the headless Service resolves to).
async fn replicas(plane: &ControlPlane) -> (Component, Component) {
    let deployment = gateway_deployment(plane, NAMESPACE);
    assert_eq!(deployment["spec"]["replicas"], 2, "the chart's default");
    let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("account")
        .to_owned();
    let kubeconfig = plane.kubeconfig_for(NAMESPACE, &account);
    let log = |n: &str| plane.dir().join(format!("gitops-gateway-{n}.log"));
    let mut a = Component::of(&deployment, &kubeconfig, log("a")).expect("gateway");
    let mut b = Component::of(&deployment, &kubeconfig, log("b")).expect("gateway");
    a.set_env(
        "PROXY_ROUTING_PEERS",
        &format!("127.0.0.1:{}", b.port("peers")),
    );
    b.set_env(
        "PROXY_ROUTING_PEERS",
        &format!("127.0.0.1:{}", a.port("peers")),
    );
    a.start().await;
    b.start().await;
    (a, b)
}

const LINKED: &str = "flexinfer_proxy_routing_peer_snapshots_total{result=\"applied\"}";
const ROTATED: &str = "flexinfer_proxy_routing_peer_secret_changes_total{result=\"rotated\"}";
const REFUSED: &str = "flexinfer_proxy_routing_peer_rejected_total{reason=\"bad_signature\"}";
const SENT: &str = "flexinfer_proxy_routing_peer_batches_total{result=\"sent\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_rendered_and_applied_server_side_is_stable_and_works() {
    let Some(plane) = plane() else { return };
    let version = cluster_version(plane);

    // A render is a pure function of the values and the version.
    let first = render(plane, &version, &[]);
    assert_eq!(first, render(plane, &version, &[]), "two renders differ");
    assert!(!first.contains("lookup"), "nothing read from a cluster");

    // Sync: the namespace (CreateNamespace=true), then the manifest.
    kubectl(plane, &["create", "namespace", NAMESPACE]);
    let file = manifest_file(plane, &first, "v1");
    apply(plane, &file);
    assert_eq!(
        peer_secret(plane),
        None,
        "the rendered Secret holds no data"
    );

    // The replicas start on the chart's RBAC; the first writes the secret,
    // both hold it and share.
    let (a, b) = replicas(plane).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let secret = loop {
        if let Some(s) = peer_secret(plane) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no replica wrote the peer secret"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(secret.len() >= 32);
    wait_metric(&a, LINKED, 1.0, "a linked to b").await;
    wait_metric(&b, LINKED, 1.0, "b linked to a").await;

    // A second sync changes nothing: `kubectl diff` finds no difference,
    // and no object's resourceVersion moves.
    let before = settled(plane, &file).await;
    let manager = format!("--field-manager={MANAGER}");
    let path = file.to_str().expect("UTF-8 path");
    let diff = plane.kubectl(&[
        "diff",
        "--server-side",
        "--force-conflicts",
        &manager,
        "-f",
        path,
    ]);
    assert!(diff.is_ok(), "a second sync would change: {diff:?}");
    apply(plane, &file);
    let after = versions(plane, &file);
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .collect();
    assert!(changed.is_empty(), "the second apply changed {changed:?}");
    assert_eq!(
        peer_secret(plane).as_deref(),
        Some(secret.as_str()),
        "the apply kept the secret"
    );

    // A Model from zero through a replica.
    let flags = SimFlags::default();
    let _kubelet = super::gpu_kubelet(plane, "gitops-node", "gitops-m", &flags).await;
    // Cache-aware, so that each request publishes its prompt's blocks.
    let mut served = model(
        "gitops-m",
        NAMESPACE,
        serde_json::json!({"enabled": true, "idleTimeout": "5m", "coldStartTimeout": "60s"}),
    );
    served["metadata"]["annotations"] = serde_json::json!({"flexinfer.ai/routing": "cache-aware"});
    super::create(plane, &served).expect("Model created");
    let resp = fresh_client()
        .post(a.url("http", "/v1/chat/completions"))
        .json(&crate::support::chat("gitops-m"))
        .send()
        .await
        .expect("chat request");
    assert_eq!(
        resp.status(),
        200,
        "{}",
        resp.text().await.unwrap_or_default()
    );

    // The secret rotated by hand (as a secrets manager would): both
    // replicas take it up within moments, and not one message is refused.
    let rotated = serde_json::json!({"stringData": {"secret": "a-secret-rotated-by-the-operator-of-the-cluster"}});
    let name = format!("{RELEASE}-flexinfer-proxy-peers");
    kubectl(
        plane,
        &[
            "patch",
            "secret",
            &name,
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            &rotated.to_string(),
        ],
    );
    let started = Instant::now();
    wait_metric(&a, ROTATED, 1.0, "a took up the rotation").await;
    wait_metric(&b, ROTATED, 1.0, "b took up the rotation").await;
    eprintln!(
        "both replicas held the rotated secret {:?} after the patch",
        started.elapsed()
    );
    let sent = metric(&a, SENT).await;
    for _ in 0..4 {
        let _ = fresh_client()
            .post(a.url("http", "/v1/chat/completions"))
            .json(&crate::support::chat("gitops-m"))
            .send()
            .await;
    }
    wait_metric(&a, SENT, sent + 1.0, "a kept sending to b").await;
    assert_eq!(metric(&a, REFUSED).await + metric(&b, REFUSED).await, 0.0);

    // Upgrade: new values rendered and applied; the data the gateway wrote
    // is not the manifest's, so it stays.
    let upgraded = render(plane, &version, &["gateway.logLevel=debug"]);
    let file2 = manifest_file(plane, &upgraded, "v2");
    apply(plane, &file2);
    let deployment = gateway_deployment(plane, NAMESPACE);
    assert!(
        deployment.to_string().contains("\"debug\""),
        "the upgrade reached the Deployment"
    );
    assert_eq!(
        peer_secret(plane).as_deref(),
        Some("a-secret-rotated-by-the-operator-of-the-cluster"),
        "the upgrade kept the secret"
    );

    // Delete: the Models first (their controllers still run), then every
    // rendered object but the CRDs (Argo CD keeps CRDs unless told).
    kubectl(
        plane,
        &[
            "delete",
            "model",
            "gitops-m",
            "-n",
            NAMESPACE,
            "--wait",
            "--timeout=60s",
        ],
    );
    drop((a, b));
    let without_crds = plane.dir().join("gitops-delete.yaml");
    let text = std::fs::read_to_string(&file2).expect("manifest");
    let docs: Vec<&str> = text
        .split("\n---")
        .filter(|d| !d.contains("kind: CustomResourceDefinition"))
        .collect();
    std::fs::write(&without_crds, docs.join("\n---")).expect("file");
    kubectl(
        plane,
        &[
            "delete",
            "--wait",
            "-f",
            without_crds.to_str().expect("UTF-8 path"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left = super::left_by(plane, NAMESPACE, RELEASE);
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(300)).await;
        left = super::left_by(plane, NAMESPACE, RELEASE);
    }
    assert!(left.is_empty(), "the deletion left {left:?}");
}
