//! The real-cluster lane: FlexInfer against a real Kubernetes control plane
//! (etcd, kube-apiserver with RBAC and admission at their defaults,
//! kube-controller-manager) and the real `helm`, all built from their Go
//! modules by `scripts/control-plane.sh` (`flexinfer_testkube::real`).
//! Skipped, saying so, where they were not built; CI requires them
//! (`FLEXINFER_REQUIRE_CONTROL_PLANE=1`). The chart scenarios run here
//! too (`scenarios`, on `lane::RealLane`).

#[path = "real_cluster/agent.rs"]
mod agent;
#[path = "real_cluster/gateway_api.rs"]
mod gateway_api;
#[path = "real_cluster/gitops.rs"]
mod gitops;
#[path = "real_cluster/lane.rs"]
pub mod lane;
#[path = "real_cluster/scenarios.rs"]
mod scenarios;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flexinfer_crds::{v1alpha1, v1alpha2};
use flexinfer_testkube::real::ControlPlane;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn plane() -> Option<&'static ControlPlane> {
    let plane = ControlPlane::shared();
    if plane.is_none() {
        eprintln!(
            "skipped: no real control plane built (run `eval \"$(scripts/control-plane.sh)\"`, \
             which needs Go)"
        );
    }
    plane
}

/// Runs `kubectl` as the admin, panicking with its error.
fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    plane
        .kubectl(args)
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

/// `kubectl apply` of `object` (JSON) as the admin, returning what the
/// server stored.
fn create(plane: &ControlPlane, object: &Value) -> Result<Value, String> {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), object.to_string()).expect("object file");
    let path = file.path().to_str().expect("utf-8 path");
    plane
        .kubectl(&["create", "-f", path, "-o", "json"])
        .map(|out| serde_json::from_str(&out).expect("kubectl prints JSON"))
}

/// Installs every CRD of the chart (the same files as `crds/manifests/`)
/// and waits until the API server serves them.
fn install_crds(plane: &ControlPlane) {
    let dir = repo_root().join("helm/flexinfer/crds");
    kubectl(
        plane,
        &[
            "apply",
            "--server-side",
            "-f",
            dir.to_str().expect("utf-8 path"),
        ],
    );
    kubectl(
        plane,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ],
    );
}

/// Every FlexInfer object in the repository's examples and docs: the YAML
/// files of `crds/examples/` and `examples/`, and the YAML blocks of
/// `docs/*.md`, as (where, object).
fn documented_objects() -> Vec<(String, Value)> {
    let root = repo_root();
    let mut texts: Vec<(String, String)> = Vec::new();
    for dir in ["crds/examples", "examples"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .expect("examples folder")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("example");
            texts.push((f.strip_prefix(&root).unwrap().display().to_string(), text));
        }
    }
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    for f in docs {
        let text = std::fs::read_to_string(&f).expect("doc");
        let name = f.strip_prefix(&root).unwrap().display().to_string();
        // YAML blocks, and here-documents of shell blocks
        // (`kubectl apply -f - <<'EOF'`).
        let mut block: Option<String> = None;
        let mut heredoc = false;
        let mut n = 0;
        for line in text.lines() {
            let l = line.trim_start();
            match &mut block {
                None if l.starts_with("```yaml") => block = Some(String::new()),
                None if l.contains("<<'EOF'") || l.contains("<<EOF") => {
                    heredoc = true;
                    block = Some(String::new());
                }
                Some(_) if (!heredoc && l.starts_with("```")) || (heredoc && l == "EOF") => {
                    n += 1;
                    heredoc = false;
                    texts.push((format!("{name} block {n}"), block.take().unwrap()));
                }
                Some(b) => {
                    b.push_str(line);
                    b.push('\n');
                }
                None => {}
            }
        }
    }
    let mut out = Vec::new();
    for (source, text) in texts {
        if !text.contains("apiVersion: ai.flexinfer/") {
            continue;
        }
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let Ok(value) = serde::Deserialize::deserialize(doc) else {
                continue;
            };
            let value: Value = value;
            let flexinfer = value["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("ai.flexinfer/"));
            if flexinfer {
                out.push((format!("{source} document {}", i + 1), value));
            }
        }
    }
    out
}

/// Leaf paths of a JSON value (`a.b[0].c`), with their values.
fn leaves(value: &Value, path: String, out: &mut BTreeSet<(String, String)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(v, p, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{path}[{i}]"), out);
            }
        }
        other => {
            out.insert((path, other.to_string()));
        }
    }
}

/// The spec as the operator reads it: through its Rust type.
fn typed<T: DeserializeOwned + Serialize>(spec: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(spec.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

fn operator_view(kind: &str, version: &str, object: &Value) -> Result<Value, String> {
    match (version, kind) {
        ("ai.flexinfer/v1alpha2", "Model") => typed::<v1alpha2::Model>(object),
        ("ai.flexinfer/v1alpha2", "LoRAAdapter") => typed::<v1alpha2::LoRAAdapter>(object),
        ("ai.flexinfer/v1alpha2", "Cluster") => typed::<v1alpha2::Cluster>(object),
        ("ai.flexinfer/v1alpha2", "ModelCatalog") => typed::<v1alpha2::ModelCatalog>(object),
        ("ai.flexinfer/v1alpha2", "FederatedModel") => typed::<v1alpha2::FederatedModel>(object),
        ("ai.flexinfer/v1alpha2", "GlobalProxy") => typed::<v1alpha2::GlobalProxy>(object),
        ("ai.flexinfer/v1alpha1", "GPUGroup") => typed::<v1alpha1::GPUGroup>(object),
        ("ai.flexinfer/v1alpha1", "ModelCache") => typed::<v1alpha1::ModelCache>(object),
        ("ai.flexinfer/v1alpha1", "ModelDeployment") => typed::<v1alpha1::ModelDeployment>(object),
        _ => Err(format!("no Rust type for {version} {kind}")),
    }
}

/// Every CRD the chart installs is accepted, and every example object in
/// the repository is created as written: the server prunes none of its
/// fields, and what it defaults reads the same to the operator as the
/// object without them.
#[test]
fn every_crd_and_documented_object_is_accepted_as_written() {
    let Some(plane) = plane() else { return };
    let _schemas = CRD_SCHEMAS.read().unwrap_or_else(|e| e.into_inner());
    install_crds(plane);
    let objects = documented_objects();
    assert!(objects.len() >= 15, "found only {} objects", objects.len());
    let mut failures = Vec::new();
    let mut defaulted_report = Vec::new();
    for (n, (source, mut object)) in objects.into_iter().enumerate() {
        // Each in a namespace of its own (examples reuse names).
        let namespace = format!("examples-{n}");
        let _ = plane.kubectl(&["create", "namespace", &namespace]);
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        // Every FlexInfer kind is namespaced.
        object["metadata"]["namespace"] = Value::String(namespace.clone());
        let stored = match create(plane, &object) {
            Ok(stored) => stored,
            Err(e) => {
                failures.push(format!("{source} ({kind}): refused: {e}"));
                continue;
            }
        };
        let (mut sent, mut kept) = (BTreeSet::new(), BTreeSet::new());
        leaves(&object["spec"], String::new(), &mut sent);
        leaves(&stored["spec"], String::new(), &mut kept);
        let sent_paths: BTreeSet<&String> = sent.iter().map(|(p, _)| p).collect();
        let kept_paths: BTreeSet<&String> = kept.iter().map(|(p, _)| p).collect();
        let pruned: Vec<&&String> = sent_paths.difference(&kept_paths).collect();
        if !pruned.is_empty() {
            failures.push(format!("{source} ({kind}): the server pruned {pruned:?}"));
        }
        let defaulted: Vec<&&String> = kept_paths.difference(&sent_paths).collect();
        if !defaulted.is_empty() {
            defaulted_report.push(format!("{source} ({kind}): defaulted {defaulted:?}"));
        }
        match (
            operator_view(&kind, &version, &object),
            operator_view(&kind, &version, &stored),
        ) {
            (Ok(a), Ok(b)) if a["spec"] == b["spec"] => {}
            (Ok(a), Ok(b)) => failures.push(format!(
                "{source} ({kind}): the operator reads the stored spec differently:\n  \
                 sent   {}\n  stored {}",
                a["spec"], b["spec"]
            )),
            (Err(e), _) | (_, Err(e)) => {
                failures.push(format!("{source} ({kind}): operator type: {e}"))
            }
        }
    }
    for line in &defaulted_report {
        eprintln!("{line}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Enum values that YAML 1.1 reads as booleans (`ON`, `OFF` of the
/// ModelDeployment's `jitPolicy`) reach the API server as strings when
/// kubectl applies the chart's CRD files, so an object using them is
/// accepted.
#[test]
fn enum_values_yaml_1_1_reads_as_booleans_validate() {
    let Some(plane) = plane() else { return };
    install_crds(plane);
    let namespace = "yaml-booleans";
    let _ = plane.kubectl(&["create", "namespace", namespace]);
    for policy in ["ON", "OFF", "REDO"] {
        let name = format!("jit-{}", policy.to_lowercase());
        let object = serde_json::json!({
            "apiVersion": "ai.flexinfer/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "backend": "mlc-llm",
                "model": "HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC",
                "mlcllm": {"jitPolicy": policy},
            },
        });
        let stored =
            create(plane, &object).unwrap_or_else(|e| panic!("jitPolicy {policy} refused: {e}"));
        assert_eq!(stored["spec"]["mlcllm"]["jitPolicy"], policy);
    }
}

/// `kubectl get flexinfer` lists every FlexInfer kind, and no short name
/// of ours is one the API server already serves for a built-in resource.
#[test]
fn crds_share_a_category_and_short_names_no_built_in_uses() {
    let Some(plane) = plane() else { return };
    install_crds(plane);
    let ours = kubectl(
        plane,
        &["api-resources", "--categories=flexinfer", "-o", "name"],
    );
    let ours: BTreeSet<&str> = ours.lines().collect();
    let crds = flexinfer_crds::manifests::crds();
    let expected: BTreeSet<String> = crds
        .iter()
        .map(|crd| crd.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        ours,
        expected.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    let mut taken = BTreeSet::new();
    for line in kubectl(plane, &["api-resources", "--no-headers"]).lines() {
        let columns: Vec<&str> = line.split_whitespace().collect();
        // NAME SHORTNAMES APIVERSION NAMESPACED KIND; SHORTNAMES may be empty.
        if columns.len() == 5 && !columns[2].starts_with("ai.flexinfer/") {
            taken.extend(columns[1].split(',').map(str::to_owned));
        }
    }
    assert!(
        taken.contains("po") && taken.contains("deploy"),
        "{taken:?}"
    );
    for crd in &crds {
        for short in crd.spec.names.short_names.iter().flatten() {
            assert!(!taken.contains(short), "{short} is a built-in short name");
        }
    }
    let listed = kubectl(plane, &["get", "flexinfer", "-A", "-o", "name"]);
    assert!(!listed.contains("Error"), "{listed}");
    kubectl(plane, &["get", "fimodel,ficl,mdeploy,gpug,mcache", "-A"]);
}

/// `helm` of the control plane, panicking with its output on failure.
fn helm(plane: &ControlPlane, args: &[&str]) -> String {
    // Helm applies the chart's CRDs on install.
    let _schemas = CRD_SCHEMAS.read().unwrap_or_else(|e| e.into_inner());
    let out = plane
        .helm()
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kinds the chart can install, namespaced and cluster-wide, for
/// `kubectl get`.
const NAMESPACED_KINDS: &str = "deployments,replicasets,pods,services,serviceaccounts,configmaps,\
secrets,roles,rolebindings,poddisruptionbudgets,networkpolicies,daemonsets,jobs,leases,\
endpointslices";
const CLUSTER_KINDS: &str = "clusterroles,clusterrolebindings,priorityclasses,\
validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicies,\
validatingadmissionpolicybindings";

/// Names of what `release` left, by kind.
fn left_by(plane: &ControlPlane, namespace: &str, release: &str) -> Vec<String> {
    let selector = format!("app.kubernetes.io/instance={release}");
    let mut left = Vec::new();
    for (kinds, scope) in [(NAMESPACED_KINDS, namespace), (CLUSTER_KINDS, "")] {
        let mut args = vec!["get", kinds, "-l", &selector, "-o", "name"];
        if !scope.is_empty() {
            args.extend(["-n", scope]);
        }
        let out = kubectl(plane, &args);
        left.extend(out.lines().map(str::to_owned));
    }
    left
}

/// The chart installs with its default values and again with the
/// scheduler extender on, upgrades to a changed value, and uninstalls
/// leaving nothing but its CRDs (which Helm never deletes).
#[test]
fn helm_installs_upgrades_and_uninstalls_the_chart() {
    let Some(plane) = plane() else { return };
    let chart = "helm/flexinfer";
    for (release, namespace, extra) in [
        ("defaults", "flexinfer-defaults", &[][..]),
        (
            "extender",
            "flexinfer-extender",
            &["--set", "scheduler.enabled=true"][..],
        ),
    ] {
        let mut args = vec![
            "install",
            release,
            chart,
            "--namespace",
            namespace,
            "--create-namespace",
        ];
        args.extend_from_slice(extra);
        helm(plane, &args);
        let deployments = kubectl(
            plane,
            &["get", "deployments", "-n", namespace, "-o", "name"],
        );
        assert!(
            deployments.contains("flexinfer-proxy"),
            "{release}: the gateway Deployment exists: {deployments}"
        );
        if release == "extender" {
            // The second kube-scheduler runs the API server's version, and
            // nothing is written in kube-system (managed clusters refuse it).
            let version: Value =
                serde_json::from_str(&kubectl(plane, &["version", "-o", "json"])).expect("JSON");
            let server = version["serverVersion"]["gitVersion"]
                .as_str()
                .expect("server version");
            let image = kubectl(
                plane,
                &[
                    "get",
                    "deploy",
                    "-n",
                    namespace,
                    "-l",
                    "app.kubernetes.io/component=kube-scheduler",
                    "-o",
                    "jsonpath={.items[*].spec.template.spec.containers[*].image}",
                ],
            );
            assert_eq!(image, format!("registry.k8s.io/kube-scheduler:{server}"));
            let selector = format!("app.kubernetes.io/instance={release}");
            let in_kube_system = kubectl(
                plane,
                &[
                    "get",
                    "rolebindings,roles",
                    "-n",
                    "kube-system",
                    "-l",
                    &selector,
                    "-o",
                    "name",
                ],
            );
            assert!(in_kube_system.trim().is_empty(), "{in_kube_system}");
        }
        // kube-controller-manager turns each Deployment into a ReplicaSet.
        let mut replica_sets = String::new();
        for _ in 0..100 {
            replica_sets = kubectl(
                plane,
                &["get", "replicasets", "-n", namespace, "-o", "name"],
            );
            if replica_sets.lines().count() >= deployments.lines().count() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(
            replica_sets.lines().count() >= deployments.lines().count(),
            "{release}: ReplicaSets {replica_sets} for {deployments}"
        );

        let replicas = || {
            kubectl(
                plane,
                &[
                    "get",
                    "deploy",
                    "-n",
                    namespace,
                    "-o",
                    "jsonpath={.items[*].spec.replicas}",
                ],
            )
        };
        let before = replicas();
        let mut upgrade = vec![
            "upgrade",
            release,
            chart,
            "--namespace",
            namespace,
            "--reuse-values",
            "--set",
            "gateway.logLevel=debug",
        ];
        upgrade.extend_from_slice(extra);
        helm(plane, &upgrade);
        let env = kubectl(plane, &["get", "deploy", "-n", namespace, "-o", "json"]);
        assert!(
            env.contains("debug"),
            "{release}: the upgrade changed the gateway"
        );
        let after = replicas();
        assert_eq!(before, after, "{release}: replicas kept over the upgrade");

        helm(
            plane,
            &["uninstall", release, "--namespace", namespace, "--wait"],
        );
        let mut left = left_by(plane, namespace, release);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            left = left_by(plane, namespace, release);
        }
        assert!(left.is_empty(), "{release}: uninstall left {left:?}");
        let crds = kubectl(plane, &["get", "crd", "-o", "name"]);
        assert!(crds.contains("models.ai.flexinfer"), "CRDs stay: {crds}");
    }
}

/// Whether `user` may `verb` `resource` in `namespace`, as `kubectl auth
/// can-i` answers (it exits 1 for "no").
fn can_i(plane: &ControlPlane, user: &str, verb: &str, resource: &str, namespace: &str) -> bool {
    match plane.kubectl(&[
        "auth", "can-i", verb, resource, "-n", namespace, "--as", user,
    ]) {
        Ok(answer) => answer.trim() == "yes",
        Err(error) => {
            assert!(
                !error.contains("error"),
                "kubectl auth can-i {verb} {resource}: {error}"
            );
            false
        }
    }
}

/// With the chart's default values (one watched namespace, the release's)
/// the gateway's ServiceAccount, which terminates untrusted traffic, may
/// write workloads only in that namespace: the API server's own RBAC says
/// no to a Deployment, a Pod or a Job in kube-system or any other
/// namespace, and to Secrets anywhere. The node agent's ServiceAccount may
/// patch Nodes by RBAC, but the chart's ValidatingAdmissionPolicy refuses
/// a write from a token that is not bound to a pod on that Node.
#[test]
fn default_accounts_may_write_only_where_their_component_works() {
    let Some(plane) = plane() else { return };
    let namespace = "flexinfer-scope";
    helm(
        plane,
        &[
            "install",
            "scope",
            "helm/flexinfer",
            "--namespace",
            namespace,
            "--create-namespace",
        ],
    );
    kubectl(plane, &["create", "namespace", "flexinfer-elsewhere"]);
    let gateway = format!("system:serviceaccount:{namespace}:scope-flexinfer-gateway");
    for (verb, resource) in [
        ("create", "deployments"),
        ("patch", "deployments"),
        ("delete", "services"),
        ("create", "jobs"),
    ] {
        assert!(
            can_i(plane, &gateway, verb, resource, namespace),
            "the gateway may {verb} {resource} in its watched namespace"
        );
    }
    for other in ["kube-system", "default", "flexinfer-elsewhere"] {
        for (verb, resource) in [
            ("create", "deployments"),
            ("patch", "deployments"),
            ("create", "pods"),
            ("delete", "pods"),
            ("create", "jobs"),
            ("create", "configmaps"),
            ("list", "models.ai.flexinfer"),
        ] {
            assert!(
                !can_i(plane, &gateway, verb, resource, other),
                "the gateway may {verb} {resource} in {other}"
            );
        }
    }
    for (verb, resource) in [
        ("get", "secrets"),
        ("create", "events"),
        ("update", "leases"),
    ] {
        assert!(
            !can_i(plane, &gateway, verb, resource, namespace),
            "the gateway may {verb} {resource} with the defaults"
        );
    }

    let agent = format!("system:serviceaccount:{namespace}:scope-flexinfer-agent");
    gpu_node(plane, "scope-node");
    assert!(
        can_i(plane, &agent, "patch", "nodes", ""),
        "RBAC lets the agent patch Nodes"
    );
    let label = r#"{"metadata":{"labels":{"flexinfer.ai/scope-test":"x"}}}"#;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refusal = loop {
        // The policy takes effect once the API server has loaded it.
        match plane.kubectl(&[
            "patch",
            "node",
            "scope-node",
            "--type=merge",
            "-p",
            label,
            "--as",
            &agent,
        ]) {
            Err(error) => break error,
            Ok(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the agent patched a Node it does not run on"
                );
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        }
    };
    assert!(
        refusal.contains("may write only the Node its pod runs on"),
        "{refusal}"
    );
    kubectl(
        plane,
        &["patch", "node", "scope-node", "--type=merge", "-p", label],
    );
    helm(
        plane,
        &["uninstall", "scope", "--namespace", namespace, "--wait"],
    );
}

/// Registers a Node with one NVIDIA GPU, labelled as the node agent labels
/// it (there is no kubelet: nothing runs on it).
fn gpu_node(plane: &ControlPlane, name: &str) {
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "flexinfer.ai/gpu.vendor": "nvidia",
            "flexinfer.ai/gpu.arch": "sm_89",
            "flexinfer.ai/gpu.vram": "24Gi",
            "flexinfer.ai/gpu.count": "1"}},
    });
    if create(plane, &node).is_err() {
        return; // Another test registered it.
    }
    let status = serde_json::json!({"status": {
        "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "1", "pods": "110"},
        "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "1", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "simulated", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    kubectl(
        plane,
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
}

/// A simulated kubelet on a one-GPU NVIDIA Node `node` (labelled as the
/// node agent would) that binds and runs, as `flexinfer-sim` processes in a
/// network namespace, the pods of `model` only.
async fn gpu_kubelet(
    plane: &ControlPlane,
    node: &str,
    model: &str,
    flags: &crate::chart_scenarios::lane::SimFlags,
) -> flexinfer_testkube::real::RealKubelet {
    use crate::chart_scenarios::lane::{sim_process, MODEL_LABEL};
    use flexinfer_testkube::real::{KubeletConfig, PodNetwork, RealKubelet};
    let logs = plane.dir().join(format!("pods-{node}"));
    std::fs::create_dir_all(&logs).expect("log folder");
    let flags = flags.clone();
    RealKubelet::start(
        plane.client().await,
        KubeletConfig {
            node: node.into(),
            node_labels: serde_json::json!({
                "kubernetes.io/hostname": node,
                "flexinfer.ai/gpu.vendor": "nvidia",
                "flexinfer.ai/gpu.arch": "sm_89",
                "flexinfer.ai/gpu.vram": "24Gi",
                "flexinfer.ai/gpu.count": "1"}),
            capacity: serde_json::json!({"cpu": "16", "memory": "64Gi",
                "nvidia.com/gpu": "1", "pods": "110"}),
            selector: format!("{MODEL_LABEL}={model}"),
            namespace: None,
            bind_unscheduled: true,
            runner: std::sync::Arc::new(move |pod, ip| sim_process(pod, ip, &flags, &logs)),
            network: Some(std::sync::Arc::new(
                PodNetwork::create().expect("a network namespace for pods (needs root and `ip`)"),
            )),
        },
    )
    .await
    .expect("kubelet")
}

/// The stored workload of `resource` (`deployments`, `daemonsets`, ...) in
/// `namespace` whose name ends with `suffix`.
fn stored_workload(plane: &ControlPlane, namespace: &str, resource: &str, suffix: &str) -> Value {
    let list: Value = serde_json::from_str(&kubectl(
        plane,
        &["get", resource, "-n", namespace, "-o", "json"],
    ))
    .expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(suffix))
        })
        .unwrap_or_else(|| panic!("no {resource} named *{suffix} in {namespace}"))
        .clone()
}

/// The chart's gateway Deployment in `namespace`, as stored.
fn gateway_deployment(plane: &ControlPlane, namespace: &str) -> Value {
    stored_workload(plane, namespace, "deployments", "flexinfer-proxy")
}

/// The Secrets of `namespace`, read as an administrator (as the kubelet
/// reads the ones it mounts).
fn secrets(plane: &ControlPlane, namespace: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(&kubectl(
        plane,
        &["get", "secrets", "-n", namespace, "-o", "json"],
    ))
    .expect("JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// A release installed by the real `helm` with `values`, and its gateway
/// running as a process on its own ServiceAccount's token.
struct Release {
    namespace: String,
    release: String,
    account: String,
    gateway: crate::chart_scenarios::lane::Component,
    log: PathBuf,
}

impl Release {
    async fn install(
        plane: &ControlPlane,
        release: &str,
        namespace: &str,
        values: &[&str],
    ) -> Self {
        Self::install_with_env(plane, release, namespace, values, &[]).await
    }

    /// [`Release::install`], with env values set over the rendered ones
    /// (what differs between this machine and a pod: free ports).
    async fn install_with_env(
        plane: &ControlPlane,
        release: &str,
        namespace: &str,
        values: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut args = vec![
            "install",
            release,
            "helm/flexinfer",
            "--namespace",
            namespace,
            "--create-namespace",
        ];
        args.extend_from_slice(values);
        helm(plane, &args);
        let gateway = gateway_deployment(plane, namespace);
        let account = gateway["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .expect("the gateway runs under a ServiceAccount of its own")
            .to_owned();
        let kubeconfig = plane.kubeconfig_for(namespace, &account);
        let log = plane.dir().join(format!("{release}-gateway.log"));
        let mut gateway =
            crate::chart_scenarios::lane::Component::of(&gateway, &kubeconfig, log.clone())
                .expect("a gateway");
        gateway.mount_secrets(&secrets(plane, namespace), plane.dir());
        for (name, value) in env {
            gateway.set_env(name, value);
        }
        gateway.start().await;
        Release {
            namespace: namespace.to_owned(),
            release: release.to_owned(),
            account,
            gateway,
            log,
        }
    }

    /// The requests the API server refused the gateway's account so far.
    fn refused(&self, plane: &ControlPlane) -> Vec<flexinfer_testkube::real::Forbidden> {
        let user = format!("system:serviceaccount:{}:{}", self.namespace, self.account);
        plane
            .forbidden()
            .into_iter()
            .filter(|f| f.user == user)
            .collect()
    }

    /// `helm upgrade` with `values` (over the installed ones), then the
    /// gateway restarted from the upgraded Deployment, as a rollout would.
    async fn upgrade(&mut self, plane: &ControlPlane, values: &[&str]) {
        let mut args = vec![
            "upgrade",
            self.release.as_str(),
            "helm/flexinfer",
            "--namespace",
            self.namespace.as_str(),
            "--reuse-values",
        ];
        args.extend_from_slice(values);
        helm(plane, &args);
        let deployment = gateway_deployment(plane, &self.namespace);
        let kubeconfig = plane.kubeconfig_for(&self.namespace, &self.account);
        let mut gateway =
            crate::chart_scenarios::lane::Component::of(&deployment, &kubeconfig, self.log.clone())
                .expect("a gateway");
        gateway.mount_secrets(&secrets(plane, &self.namespace), plane.dir());
        // The old pod stops first (SIGTERM: it releases its Lease), as
        // Kubernetes stops a pod the rollout replaces.
        self.gateway
            .terminate(std::time::Duration::from_secs(30))
            .await;
        gateway.start().await;
        self.gateway = gateway;
    }

    /// Requests of the gateway's account the API server answered `code`.
    fn answered(
        &self,
        plane: &ControlPlane,
        code: u16,
    ) -> Vec<flexinfer_testkube::real::Forbidden> {
        let user = format!("system:serviceaccount:{}:{}", self.namespace, self.account);
        plane
            .answered(code)
            .into_iter()
            .filter(|f| f.user == user)
            .collect()
    }

    fn uninstall(self, plane: &ControlPlane) {
        drop(self.gateway);
        helm(
            plane,
            &["uninstall", &self.release, "--namespace", &self.namespace],
        );
    }
}

fn model(name: &str, namespace: &str, serverless: Value) -> Value {
    serde_json::json!({
        "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backend": "vllm", "source": format!("hf://org/{name}"),
                 "gpu": {"vendor": "nvidia"}, "cache": {"strategy": "None"},
                 "serverless": serverless},
    })
}

/// The chart's gateway (with its embedded operator, the default) runs as a
/// process authenticated with its own ServiceAccount's token, so every
/// permission it uses is the chart's: it starts, reconciles a Model into
/// its Deployment and Service and reports its status, and the API server
/// refuses it nothing (its audit log shows no 403 for that account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_runs_on_the_charts_rbac_and_is_refused_nothing() {
    let Some(plane) = plane() else { return };
    gpu_node(plane, "rbac-node");
    let rel = Release::install(plane, "rbac", "flexinfer-rbac", &[]).await;
    let namespace = rel.namespace.clone();
    create(
        plane,
        &model(
            "rbac-model",
            &namespace,
            serde_json::json!({"enabled": false}),
        ),
    )
    .expect("Model created");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let deployment = plane.kubectl(&[
            "get",
            "deployment",
            "-n",
            &namespace,
            "-l",
            "flexinfer.ai/model=rbac-model",
            "-o",
            "name",
        ]);
        let phase = plane.kubectl(&[
            "get",
            "model",
            "rbac-model",
            "-n",
            &namespace,
            "-o",
            "jsonpath={.status.phase}",
        ]);
        if deployment.is_ok_and(|d| !d.trim().is_empty()) && phase.is_ok_and(|p| !p.is_empty()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Model was not reconciled within 60 s: {}\nevents: {}\ngateway log: {}",
            plane
                .kubectl(&["get", "model", "rbac-model", "-n", &namespace, "-o", "yaml"])
                .unwrap_or_default(),
            plane
                .kubectl(&["get", "events", "-n", &namespace])
                .unwrap_or_default(),
            rel.log.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // A few more seconds of watches, resyncs and status writes.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let refused = rel.refused(plane);
    assert!(
        refused.is_empty(),
        "the API server refused the gateway {} request(s): {refused:#?}\nlog: {}",
        refused.len(),
        rel.log.display()
    );
    rel.uninstall(plane);
}

/// A chat request for a Model scaled to zero, through the real cluster: the
/// gateway (on the chart's RBAC) scales the Model's Deployment up,
/// kube-controller-manager makes its ReplicaSet and Pod, the simulated
/// kubelet binds and runs the Pod as a `flexinfer-sim` process,
/// kube-controller-manager publishes it in an EndpointSlice once Ready, and
/// the request is answered; nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_starts_a_model_from_zero_through_the_real_cluster() {
    use crate::chart_scenarios::lane::SimFlags;
    let Some(plane) = plane() else { return };
    let flags = SimFlags::default();
    let _kubelet = gpu_kubelet(plane, "sim-node-1", "cold", &flags).await;
    // No RuntimeClass `nvidia` exists here, as on most clusters: the
    // chart's defaults name none, so admission takes the NVIDIA pod.
    let rel = Release::install(plane, "coldstart", "flexinfer-coldstart", &[]).await;
    let namespace = rel.namespace.clone();
    create(
        plane,
        &model(
            "cold",
            &namespace,
            serde_json::json!({"enabled": true, "idleTimeout": "5m", "coldStartTimeout": "60s"}),
        ),
    )
    .expect("Model created");
    let started = std::time::Instant::now();
    let resp = crate::chart_scenarios::lane::fresh_client()
        .post(rel.gateway.url("http", "/v1/chat/completions"))
        .json(&crate::support::chat("cold"))
        .send()
        .await
        .expect("chat request");
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(
        status,
        200,
        "{body}\nmodel: {}\npods: {}\nevents: {}\ngateway log: {}",
        plane
            .kubectl(&["get", "model", "cold", "-n", &namespace, "-o", "yaml"])
            .unwrap_or_default(),
        plane
            .kubectl(&["get", "pods", "-n", &namespace, "-o", "wide"])
            .unwrap_or_default(),
        plane
            .kubectl(&["get", "events", "-n", &namespace])
            .unwrap_or_default(),
        rel.log.display()
    );
    eprintln!(
        "cold start through the real cluster answered in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let refused = rel.refused(plane);
    assert!(refused.is_empty(), "refused: {refused:#?}");
    drop(flags);
    rel.uninstall(plane);
}

/// The API server refuses an Event whose note is over 1 KiB; the
/// operator's publisher cuts a long note (here of multi-byte characters, as
/// joined catalog or LoRA errors can be) so that the event is still
/// recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_with_a_long_note_is_recorded() {
    let Some(plane) = plane() else { return };
    let namespace = "long-notes";
    let _ = plane.kubectl(&["create", "namespace", namespace]);
    let _ = plane.kubectl(&["create", "configmap", "noted", "-n", namespace]);
    let events = flexinfer_operator::controllers::events::EventPublisher::new(
        plane.client().await,
        "flexinfer-test",
    );
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("noted".into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    let note = "entry ünsupported; ".repeat(200);
    events.warning(&regarding, "LongNote", note.clone()).await;
    let listed = kubectl(
        plane,
        &["get", "events.events.k8s.io", "-n", namespace, "-o", "json"],
    );
    let listed: Value = serde_json::from_str(&listed).expect("kubectl prints JSON");
    let recorded: Vec<&str> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|event| event["reason"] == "LongNote")
        .filter_map(|event| event["note"].as_str())
        .collect();
    assert_eq!(recorded.len(), 1, "{listed}");
    assert!(recorded[0].len() <= 1024);
    assert!(note.starts_with(recorded[0].trim_end_matches('…')));
}

/// Keeps the test that installs an older CRD apart (writer) from those
/// that need the chart's CRDs as they are (readers): `helm install` applies
/// the chart's CRDs and fails on a changed one; the documented objects
/// need every field.
static CRD_SCHEMAS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The documented upgrade path of the CRDs, which `helm upgrade` never
/// touches: with an older GlobalProxy CRD (no `spec.failoverOrder`) the API
/// server prunes that field from what it stores; `kubectl apply
/// --server-side --force-conflicts -f helm/flexinfer/crds/`, as
/// docs/operations.md and the chart README write it, brings the field back
/// over the CRDs Helm installed.
#[test]
fn the_documented_crd_upgrade_keeps_fields_an_older_crd_prunes() {
    let Some(plane) = plane() else { return };
    let _schemas = CRD_SCHEMAS.write().unwrap_or_else(|e| e.into_inner());
    let documented = "kubectl apply --server-side --force-conflicts -f helm/flexinfer/crds/";
    for doc in [
        "docs/operations.md",
        "helm/flexinfer/README.md",
        "docs/quickstart.md",
    ] {
        let text = std::fs::read_to_string(repo_root().join(doc)).expect("doc");
        assert!(text.contains(documented), "{doc} documents `{documented}`");
    }
    install_crds(plane);
    // The chart's CRDs again however this test ends.
    struct Restore<'a>(&'a ControlPlane);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let dir = repo_root().join("helm/flexinfer/crds");
            let _ = self.0.kubectl(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                dir.to_str().unwrap_or_default(),
            ]);
        }
    }
    let _restore = Restore(plane);
    let namespace = "crd-upgrade";
    let _ = plane.kubectl(&["create", "namespace", namespace]);
    // The CRD of an older chart: without spec.failoverOrder.
    kubectl(
        plane,
        &[
            "patch",
            "crd",
            "globalproxies.ai.flexinfer",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/failoverOrder"}]"#,
        ],
    );
    // Written without field validation, as a controller or an older
    // kubectl would: the API server prunes what its schema lacks.
    let create_unvalidated = |object: &Value| -> Value {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), object.to_string()).expect("object file");
        let path = file.path().to_str().expect("utf-8 path");
        serde_json::from_str(&kubectl(
            plane,
            &["create", "--validate=false", "-f", path, "-o", "json"],
        ))
        .expect("kubectl prints JSON")
    };
    let proxy = |name: &str| {
        serde_json::json!({
            "apiVersion": "ai.flexinfer/v1alpha2", "kind": "GlobalProxy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"externalEndpoint": "llm.example.com", "strategy": "Failover",
                     "failoverOrder": ["b", "a"],
                     "clusters": [{"name": "a", "endpoint": "http://a.example.com"},
                                  {"name": "b", "endpoint": "http://b.example.com"}]},
        })
    };
    // The schema change takes effect once the API server has reloaded it.
    let mut stored = Value::Null;
    for n in 0..50 {
        let name = format!("before-{n}");
        stored = create_unvalidated(&proxy(&name));
        if stored["spec"].get("failoverOrder").is_none() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        stored["spec"].get("failoverOrder").is_none(),
        "the older CRD prunes spec.failoverOrder: {stored}"
    );

    // The documented command, over CRDs written by another field manager.
    let dir = repo_root().join("helm/flexinfer/crds/");
    let dir = format!(
        "{}/",
        dir.to_str().expect("utf-8 path").trim_end_matches('/')
    );
    kubectl(
        plane,
        &["apply", "--server-side", "--force-conflicts", "-f", &dir],
    );
    let mut stored = Value::Null;
    for n in 0..50 {
        let name = format!("after-{n}");
        stored = create_unvalidated(&proxy(&name));
        if stored["spec"].get("failoverOrder").is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(
        stored["spec"]["failoverOrder"],
        serde_json::json!(["b", "a"]),
        "the upgraded CRD keeps spec.failoverOrder: {stored}"
    );
    let _ = plane.kubectl(&["delete", "namespace", namespace, "--wait=false"]);
}

/// `helm template` for managed clusters' version strings: the second
/// kube-scheduler's image is the API server's version without the vendor
/// suffix, never one newer than the cluster.
#[test]
fn the_kube_scheduler_image_follows_the_clusters_version() {
    let Some(plane) = plane() else { return };
    for (cluster, tag) in [
        ("v1.31.4-gke.1256000", "v1.31.4"),
        ("v1.30.2+k3s1", "v1.30.2"),
        ("v1.29.3-eks-adc7111", "v1.29.3"),
    ] {
        let rendered = helm(
            plane,
            &[
                "template",
                "flexinfer",
                "helm/flexinfer",
                "--kube-version",
                cluster,
                "--set",
                "scheduler.enabled=true",
                "--show-only",
                "templates/scheduler-kube-scheduler.yaml",
            ],
        );
        let want = format!("image: registry.k8s.io/kube-scheduler:{tag}\n");
        assert!(rendered.contains(&want), "{cluster}: {rendered}");
    }
}

/// `helm uninstall` of a release whose `models` holds a Model: the
/// pre-delete hook Job deletes the Model while the gateway's controllers
/// still run, so they remove its finalizer and it is gone, not left
/// Terminating; uninstall then completes. There is no kubelet for the Job:
/// the test runs the Job's container command (the real `kubectl`) on the
/// hook's own ServiceAccount and reports the pod Succeeded, as a kubelet
/// would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_deletes_the_releases_models_while_the_controllers_run() {
    let Some(plane) = plane() else { return };
    gpu_node(plane, "hook-node");
    let namespace = "flexinfer-hook";
    let spec = model("hooked", namespace, serde_json::json!({"enabled": false}))["spec"].clone();
    let models = format!("models={}", serde_json::json!({"hooked": {"spec": spec}}));
    let rel = Release::install(plane, "hook", namespace, &["--set-json", &models]).await;
    // The controllers have taken the Model in hand (their finalizer).
    let finalized = || {
        plane
            .kubectl(&[
                "get",
                "model",
                "hooked",
                "-n",
                namespace,
                "-o",
                "jsonpath={.metadata.finalizers}",
            ])
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while finalized().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Model got no finalizer; gateway log: {}",
            rel.log.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let mut uninstall = plane
        .helm()
        .args([
            "uninstall",
            "hook",
            "--namespace",
            namespace,
            "--timeout",
            "2m",
        ])
        .current_dir(repo_root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("helm uninstall");
    // kube-controller-manager makes the hook Job's pod.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let pod = loop {
        let pods: Value = serde_json::from_str(&kubectl(
            plane,
            &[
                "get",
                "pods",
                "-n",
                namespace,
                "-l",
                "app.kubernetes.io/component=uninstall",
                "-o",
                "json",
            ],
        ))
        .expect("JSON");
        if let Some(pod) = pods["items"].as_array().and_then(|p| p.first()) {
            break pod.clone();
        }
        if std::time::Instant::now() > deadline {
            let _ = uninstall.kill();
            panic!("no pre-delete hook pod: {:?}", uninstall.wait_with_output());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    // The kubelet's part: run each container as the pod's ServiceAccount.
    let account = pod["spec"]["serviceAccountName"].as_str().expect("account");
    let kubeconfig = plane.kubeconfig_for(namespace, account);
    let bin = flexinfer_testkube::real::binaries().expect("control plane binaries");
    let mut statuses = Vec::new();
    for c in pod["spec"]["containers"].as_array().expect("containers") {
        assert_eq!(c["command"], serde_json::json!(["kubectl"]));
        let args: Vec<&str> = c["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string"))
            .collect();
        let out = tokio::process::Command::new(bin.join("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(&args)
            .output()
            .await
            .expect("kubectl");
        assert!(
            out.status.success(),
            "hook container {}: kubectl {args:?}: {}",
            c["name"],
            String::from_utf8_lossy(&out.stderr)
        );
        statuses.push(serde_json::json!({
            "name": c["name"], "image": c["image"], "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                     "startedAt": "2026-01-01T00:00:00Z",
                                     "finishedAt": "2026-01-01T00:00:01Z"}},
        }));
    }
    // kubectl delete --wait returned: the controllers removed the finalizer.
    let left = kubectl(plane, &["get", "models", "-n", namespace, "-o", "name"]);
    assert!(left.trim().is_empty(), "Models left after the hook: {left}");
    let name = pod["metadata"]["name"].as_str().expect("pod name");
    let status = serde_json::json!({"status": {"phase": "Succeeded",
        "containerStatuses": statuses,
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]}});
    kubectl(
        plane,
        &[
            "patch",
            "pod",
            name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
    let out = tokio::task::spawn_blocking(move || uninstall.wait_with_output())
        .await
        .expect("join")
        .expect("helm uninstall output");
    assert!(
        out.status.success(),
        "helm uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(rel.gateway);
}

/// Waits until `model` in `namespace` reports `phase`, showing the Model,
/// its pods and events and the gateway's log when it does not in `limit`.
async fn wait_phase(plane: &ControlPlane, rel: &Release, model: &str, phase: &str, limit: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(limit);
    let namespace = rel.namespace.as_str();
    loop {
        let now = plane
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
        if now == phase {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{model} is {now:?}, not {phase} after {limit} s\nmodel: {}\npods: {}\nevents: {}\ngateway log: {}",
            plane
                .kubectl(&["get", "models.ai.flexinfer", model, "-n", namespace, "-o", "yaml"])
                .unwrap_or_default(),
            plane
                .kubectl(&["get", "pods", "-n", namespace, "-o", "wide", "--show-labels"])
                .unwrap_or_default(),
            plane.kubectl(&["get", "events", "-n", namespace]).unwrap_or_default(),
            rel.log.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A first install as on an ordinary cluster (no default StorageClass
/// here, no RuntimeClass `nvidia`): a GPU Model named `qwen2.5-7b` (a valid
/// object name but not a valid Service name) becomes Ready under a derived
/// Service name and answers under its own name; changing its `spec.backend`
/// (the Deployment's selector used to name the backend) replaces its
/// Deployment and it is Ready again; a Model whose cache has no
/// StorageClass says so; `helm upgrade` to a new flash-loader image (which
/// changes its prefetch Job's template) and back reconciles without any
/// 422; no request of the gateway's account is refused. The namespace
/// enforces the `restricted` Pod Security level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dotted_model_survives_a_backend_change_and_a_chart_upgrade() {
    use crate::chart_scenarios::lane::{SimFlags, MODEL_LABEL};
    let Some(plane) = plane() else { return };
    let name = "qwen2.5-7b";
    let flags = SimFlags::default();
    let _kubelet = gpu_kubelet(plane, "sim-node-2", name, &flags).await;
    let mut rel = Release::install(plane, "first", "flexinfer-first", &[]).await;
    let namespace = rel.namespace.clone();
    // Pod Security admission enforces `restricted` here: the model's pods
    // are admitted once the Model runs as a non-root user.
    kubectl(
        plane,
        &[
            "label",
            "namespace",
            &namespace,
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    );
    let model = serde_json::json!({
        "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backend": "vllm", "source": "hf://Qwen/Qwen2.5-7B-Instruct",
                 "gpu": {"vendor": "nvidia"},
                 "securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
                 "cache": {"strategy": "None"}, "serverless": {"enabled": false}},
    });
    create(plane, &model).expect("Model created");
    // A cached Model: its PVC gets no class (none is default here) and its
    // prefetch Job carries the flash-loader image of the chart.
    let cached = serde_json::json!({
        "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
        "metadata": {"name": "oci-cached", "namespace": namespace},
        "spec": {"backend": "llamacpp", "source": "oci://registry.example.com/models/qwen:q4",
                 "serverless": {"enabled": false}},
    });
    create(plane, &cached).expect("Model created");
    // A Model naming a RuntimeClass the cluster lacks: admission refuses its
    // pods, and the Model says so instead of waiting.
    let refused_model = serde_json::json!({
        "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
        "metadata": {"name": "no-runtime", "namespace": namespace},
        "spec": {"backend": "llamacpp", "source": "hf://org/m", "runtimeClassName": "gpu-runtime",
                 "cache": {"strategy": "None"}, "serverless": {"enabled": false}},
    });
    create(plane, &refused_model).expect("Model created");
    wait_phase(plane, &rel, name, "Ready", 90).await;
    wait_phase(plane, &rel, "no-runtime", "Failed", 60).await;
    let why = kubectl(
        plane,
        &[
            "get",
            "models.ai.flexinfer",
            "no-runtime",
            "-n",
            &namespace,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}",
        ],
    );
    assert!(
        why.contains("RuntimeClass") && why.contains("gpu-runtime"),
        "{why}"
    );

    let services = kubectl(
        plane,
        &[
            "get",
            "services",
            "-n",
            &namespace,
            "-l",
            &format!("{MODEL_LABEL}={name}"),
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    assert!(
        services.starts_with("qwen2-5-7b-") && !services.contains('.'),
        "Service {services:?}"
    );
    async fn chat(url: String, model: &str) -> (reqwest::StatusCode, String) {
        let resp = crate::chart_scenarios::lane::fresh_client()
            .post(url)
            .json(&crate::support::chat(model))
            .send()
            .await
            .expect("chat request");
        (resp.status(), resp.text().await.unwrap_or_default())
    }
    let url = |rel: &Release| rel.gateway.url("http", "/v1/chat/completions");
    let (status, body) = chat(url(&rel), name).await;
    assert_eq!(status, 200, "{body}");

    // The cache without a class says why it does not bind.
    let cached_message = kubectl(
        plane,
        &[
            "get",
            "models.ai.flexinfer",
            "oci-cached",
            "-n",
            &namespace,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Cached\")].message}",
        ],
    );
    assert!(
        cached_message.contains("no StorageClass"),
        "{cached_message}"
    );
    let job_image = || {
        kubectl(
            plane,
            &[
                "get",
                "jobs",
                "-n",
                &namespace,
                "-l",
                &format!("{MODEL_LABEL}=oci-cached"),
                "-o",
                "jsonpath={.items[*].spec.template.spec.containers[0].image}",
            ],
        )
    };
    let image_before = job_image();
    assert!(!image_before.is_empty(), "the prefetch Job exists");

    // A new backend: the Deployment is replaced, the Model is Ready again.
    kubectl(
        plane,
        &[
            "patch",
            "models.ai.flexinfer",
            name,
            "-n",
            &namespace,
            "--type=merge",
            "-p",
            r#"{"spec": {"backend": "llamacpp"}}"#,
        ],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let backends = kubectl(
            plane,
            &[
                "get",
                "pods",
                "-n",
                &namespace,
                "-l",
                &format!("{MODEL_LABEL}={name}"),
                "-o",
                "jsonpath={.items[*].metadata.labels.flexinfer\\.ai/backend}",
            ],
        );
        let phase = kubectl(
            plane,
            &[
                "get",
                "models.ai.flexinfer",
                name,
                "-n",
                &namespace,
                "-o",
                "jsonpath={.status.phase}",
            ],
        );
        if backends.trim() == "llamacpp" && phase == "Ready" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after the backend change: pods {backends:?}, phase {phase:?}\n{}\nlog: {}",
            kubectl(plane, &["get", "events", "-n", &namespace]),
            rel.log.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let (status, body) = chat(url(&rel), name).await;
    assert_eq!(status, 200, "after the backend change: {body}");

    // Upgrades that change the prefetch Job's image.
    rel.upgrade(plane, &["--set", "flashload.image.tag=next"])
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    wait_phase(plane, &rel, name, "Ready", 60).await;
    assert_eq!(
        job_image(),
        image_before,
        "a finished or running download is not redone"
    );
    let (status, body) = chat(url(&rel), name).await;
    assert_eq!(status, 200, "after the upgrade: {body}");

    let invalid = rel.answered(plane, 422);
    assert!(
        invalid.is_empty(),
        "422 answers: {invalid:#?}\nlog: {}",
        rel.log.display()
    );
    let refused = rel.refused(plane);
    assert!(refused.is_empty(), "refused: {refused:#?}");
    rel.uninstall(plane);
}

#[path = "real_cluster/placement.rs"]
mod placement;

#[path = "real_cluster/operator.rs"]
mod operator;
