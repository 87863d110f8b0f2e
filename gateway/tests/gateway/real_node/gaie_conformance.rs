//! The Gateway API Inference Extension's own conformance suite (v1.6.0,
//! Gateway profile) against FlexInfer on the real node: the chart with
//! `gateway.gatewayApi.enabled`, the Gateway API's CRDs, and the suite's
//! backends (echo-basic, the extension's lwepp picker) as real pods from
//! images built from their Go sources (`scripts/gateway-api.sh`,
//! `scripts/images.sh`). The suite runs as its Go test binary, against the
//! Gateways' addresses through kube-proxy.

use std::process::Command;
use std::time::Instant;

/// A variable the lane needs, or `None` (skipped, said so) when unset and
/// not required.
fn needed(name: &str, script: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var("FLEXINFER_REQUIRE_REAL_NODE").as_deref() != Ok("1"),
                "{name} is unset: run `eval \"$({script})\"` (scripts/test.sh does)"
            );
            eprintln!("skipped: {name} is unset ({script})");
            None
        }
    }
}

/// The suite's verdicts: (test, passed) for every conformance test it ran.
fn verdicts(output: &str) -> Vec<(String, bool)> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let (passed, rest) = if let Some(rest) = line.strip_prefix("--- PASS: TestConformance/")
            {
                (true, rest)
            } else if let Some(rest) = line.strip_prefix("--- FAIL: TestConformance/") {
                (false, rest)
            } else {
                return None;
            };
            let name = rest.split_whitespace().next()?;
            // Subtests (`Name/case`) are part of their test's verdict.
            (!name.contains('/')).then(|| (name.to_owned(), passed))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaie_conformance_suite_gateway_profile_passes() {
    use flexinfer_testkube::real::node::{NodeParts, RealNode};
    let Some(parts) = NodeParts::find() else {
        eprintln!("skipped: the real node's parts were not built");
        return;
    };
    let (Some(suite), Some(crds)) = (
        needed("FLEXINFER_GAIE_SUITE", "scripts/gateway-api.sh"),
        needed("FLEXINFER_GATEWAY_API_CRDS", "scripts/gateway-api.sh"),
    ) else {
        return;
    };
    let node = tokio::task::spawn_blocking(move || RealNode::start(&parts))
        .await
        .expect("node");
    let kubectl = |args: &[&str]| {
        node.plane
            .kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    };
    kubectl(&["apply", "--server-side", "-f", &crds]);
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/gateways.gateway.networking.k8s.io",
        "crd/httproutes.gateway.networking.k8s.io",
        "crd/inferencepools.inference.networking.k8s.io",
    ]);
    let registry = format!("image.registry={}", node.images);
    let out = node
        .plane
        .helm()
        .args([
            "install",
            "flexinfer",
            "helm/flexinfer",
            "--namespace",
            "flexinfer-system",
            "--create-namespace",
            "--set",
            &registry,
            "--set",
            "gateway.gatewayApi.enabled=true",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR").trim_end_matches("/gateway"))
        .output()
        .expect("helm");
    assert!(
        out.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.wait_rollout("flexinfer-system", "deployment/flexinfer-proxy");
    // The suite's setup waits for at least one Ready pod in the Gateways'
    // namespace, where its manifests put none: it assumes a data plane
    // deployed per Gateway into the Gateway's namespace, as the reported
    // implementations do. FlexInfer's data plane is the release's gateway
    // replicas, so the lane puts a placeholder pod there, and says so
    // (conformance/reports/v1.6.0/gateway/flexinfer/README.md).
    node.apply(&format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: inference-conformance-infra}}
---
apiVersion: v1
kind: Pod
metadata:
  name: placeholder
  namespace: inference-conformance-infra
  labels: {{app.kubernetes.io/name: suite-placeholder}}
  annotations:
    flexinfer.ai/why: "GAIE v1.6.0's setup needs a Ready pod in the Gateways' namespace; FlexInfer's data plane runs in its release namespace"
spec:
  containers:
  - name: pause
    image: {images}/pause:3.10
"#,
        images = node.images
    ));

    let report = node.plane.dir().join("gaie-report.yaml");
    let started = Instant::now();
    let run = Command::new(&suite)
        .args([
            "-test.run",
            "TestConformance",
            "-test.v",
            "-test.timeout",
            "40m",
            "--gateway-class",
            "flexinfer",
            "--organization",
            "FlexInfer",
            "--project",
            "flexinfer",
            "--url",
            "https://github.com/flexinfer/flexinfer",
            "--version",
            env!("CARGO_PKG_VERSION"),
            "--contact",
            "https://github.com/flexinfer/flexinfer/issues",
        ])
        .arg(format!("--report-output={}", report.display()))
        .env("KUBECONFIG", &node.plane.admin_kubeconfig)
        .current_dir(node.plane.dir())
        .output()
        .expect("the conformance suite runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let log = node.plane.dir().join("gaie-conformance.log");
    std::fs::write(&log, &output).expect("suite log");
    let verdicts = verdicts(&output);
    let failed: Vec<&str> = verdicts
        .iter()
        .filter(|(_, passed)| !passed)
        .map(|(name, _)| name.as_str())
        .collect();
    eprintln!(
        "GAIE conformance v1.6.0, Gateway profile: {} of {} passed in {:.0} s (log {}, report {})",
        verdicts.len() - failed.len(),
        verdicts.len(),
        started.elapsed().as_secs_f64(),
        log.display(),
        report.display()
    );
    if std::env::var("FLEXINFER_BLESS").as_deref() == Ok("1") && report.exists() {
        let dest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../conformance/reports/v1.6.0/gateway/flexinfer/v{}-default-gateway-report.yaml",
            env!("CARGO_PKG_VERSION")
        ));
        std::fs::create_dir_all(dest.parent().unwrap()).expect("reports folder");
        std::fs::copy(&report, &dest).expect("report copied");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644))
            .expect("report readable");
    }
    assert!(
        failed.is_empty() && verdicts.len() >= 14,
        "failed: {failed:?}\n{}",
        output
            .lines()
            .filter(|l| l.contains("--- FAIL") || l.contains("Error") || l.contains("error"))
            .take(80)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let differences = tokio::task::spawn_blocking(move || node.stop())
        .await
        .expect("stop");
    assert!(
        differences.is_empty(),
        "the host was not restored: {differences:#?}"
    );
}

#[test]
fn the_suites_verdicts_are_read_from_its_output() {
    let out = "=== RUN TestConformance\n    --- PASS: TestConformance/InferencePoolAccepted (1.2s)\n        --- PASS: TestConformance/InferencePoolAccepted/sub (0.1s)\n    --- FAIL: TestConformance/GatewayFollowingEPPRouting (30.0s)\n--- FAIL: TestConformance (40s)\n";
    assert_eq!(
        verdicts(out),
        vec![
            ("InferencePoolAccepted".to_string(), true),
            ("GatewayFollowingEPPRouting".to_string(), false)
        ]
    );
}
