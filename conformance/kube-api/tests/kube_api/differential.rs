//! The in-memory API server held to the real one: the same request
//! sequence goes to `TestApiServer` and to a real kube-apiserver
//! (`flexinfer_testkube::real`, skipped where it was not built), and the
//! status codes and the fields that matter must agree, except for the
//! deliberate differences listed in this crate's README ("Deliberate
//! differences from kube-apiserver"), each named here by its step.

use std::path::Path;
use std::time::Duration;

use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use flexinfer_testkube::real::ControlPlane;
use flexinfer_testkube::TestApiServer;

/// Steps whose answers differ on purpose (see the README).
const DELIBERATE: &[&str] = &[];

const NS: &str = "differential";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

/// One server's answer: status code and JSON body.
type Answer = (u16, Value);

async fn call(client: &kube::Client, method: Method, path: &str, ct: &str, body: &Value) -> Answer {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(kube::client::Body::from(bytes))
        .expect("request");
    let resp = client.send(req).await.expect("the server answers");
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The answers of both servers to every step, and where they differ.
struct Differ {
    fake: kube::Client,
    real: kube::Client,
    differences: Vec<String>,
    steps: usize,
}

impl Differ {
    /// Sends one request to both; compares status codes and `project` of
    /// the bodies.
    async fn step(
        &mut self,
        label: &str,
        method: Method,
        path: &str,
        ct: &str,
        body: Value,
        project: impl Fn(&Value) -> Value,
    ) -> (Answer, Answer) {
        self.steps += 1;
        let fake = call(&self.fake, method.clone(), path, ct, &body).await;
        let real = call(&self.real, method, path, ct, &body).await;
        self.compare(label, &fake, &real, project);
        (fake, real)
    }

    fn compare(
        &mut self,
        label: &str,
        fake: &Answer,
        real: &Answer,
        project: impl Fn(&Value) -> Value,
    ) {
        let (pf, pr) = (project(&fake.1), project(&real.1));
        if fake.0 != real.0 || pf != pr {
            let deliberate = if DELIBERATE.contains(&label) {
                " (deliberate)"
            } else {
                ""
            };
            self.differences.push(format!(
                "{label}{deliberate}: testkube {} {pf}, kube-apiserver {} {pr}{}",
                fake.0,
                real.0,
                if fake.0 != real.0 && !real.1.is_null() {
                    format!(" ({})", real.1["message"])
                } else {
                    String::new()
                }
            ));
        }
    }

    /// Like [`Differ::step`], with a body of each server's own (one that
    /// names a uid or resourceVersion the server handed out).
    async fn step_each(
        &mut self,
        label: &str,
        method: Method,
        path: &str,
        bodies: (Value, Value),
        project: impl Fn(&Value) -> Value,
    ) {
        self.steps += 1;
        let fake = call(&self.fake, method.clone(), path, JSON, &bodies.0).await;
        let real = call(&self.real, method, path, JSON, &bodies.1).await;
        self.compare(label, &fake, &real, project);
    }

    /// `path` as each server has it now.
    async fn get_each(&self, path: &str) -> (Value, Value) {
        let fake = call(&self.fake, Method::GET, path, JSON, &Value::Null)
            .await
            .1;
        let real = call(&self.real, Method::GET, path, JSON, &Value::Null)
            .await
            .1;
        (fake, real)
    }

    /// Polls `path` on both until each answers `want` (at most ten
    /// seconds: the real server's garbage collector works asynchronously),
    /// then compares the last answers.
    async fn settle(&mut self, label: &str, path: &str, want: u16) {
        self.steps += 1;
        let mut answers = Vec::new();
        for client in [self.fake.clone(), self.real.clone()] {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let mut last = call(&client, Method::GET, path, JSON, &Value::Null).await;
            while last.0 != want && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                last = call(&client, Method::GET, path, JSON, &Value::Null).await;
            }
            answers.push(last);
        }
        self.compare(label, &answers[0], &answers[1], |_| Value::Null);
    }
}

fn reason(v: &Value) -> Value {
    v["reason"].clone()
}

fn names(v: &Value) -> Value {
    let mut names: Vec<&str> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str())
        // Generated names end in random characters.
        .map(|n| if n.starts_with("gen-") { "gen-*" } else { n })
        .collect();
    names.sort_unstable();
    json!(names)
}

fn data(v: &Value) -> Value {
    v["data"].clone()
}

fn managers(v: &Value) -> Value {
    let mut m: Vec<String> = v["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{}/{}",
                f["manager"].as_str().unwrap_or(""),
                f["operation"].as_str().unwrap_or("")
            )
        })
        .collect();
    m.sort();
    json!(m)
}

fn install_crds(plane: &ControlPlane) {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../helm/flexinfer/crds");
    let crds = crds.to_str().expect("utf-8 path");
    plane
        .kubectl(&["apply", "--server-side", "-f", crds])
        .expect("CRDs applied");
    plane
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .expect("CRDs established");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn testkube_answers_as_kube_apiserver_does() {
    let Some(plane) = ControlPlane::shared() else {
        eprintln!("skipped: no real control plane (run `eval \"$(scripts/control-plane.sh)\"`)");
        return;
    };
    install_crds(plane);
    let fake_server = TestApiServer::start().await;
    let mut d = Differ {
        fake: fake_server.client(),
        real: plane.client().await,
        differences: Vec::new(),
        steps: 0,
    };
    let ns = format!("/api/v1/namespaces/{NS}");
    let cms = format!("{ns}/configmaps");
    let cm = |name: &str| format!("{cms}/{name}");

    d.step(
        "create namespace",
        Method::POST,
        "/api/v1/namespaces",
        JSON,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        |v| v["metadata"]["name"].clone(),
    )
    .await;

    // Create, conflict on create, get, 404.
    let a = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"app": "x", "tier": "one"}}, "data": {"k": "v"}});
    d.step("create", Method::POST, &cms, JSON, a.clone(), data)
        .await;
    d.step(
        "create existing",
        Method::POST,
        &cms,
        JSON,
        a.clone(),
        reason,
    )
    .await;
    d.step("get", Method::GET, &cm("a"), JSON, Value::Null, data)
        .await;
    d.step(
        "get missing",
        Method::GET,
        &cm("nope"),
        JSON,
        Value::Null,
        reason,
    )
    .await;
    d.step(
        "create in missing namespace",
        Method::POST,
        "/api/v1/namespaces/missing/configmaps",
        JSON,
        a.clone(),
        reason,
    )
    .await;
    d.step(
        "create with an invalid name",
        Method::POST,
        &cms,
        JSON,
        json!({"metadata": {"name": "Not_Valid"}}),
        reason,
    )
    .await;

    // generateName.
    d.step(
        "generateName",
        Method::POST,
        &cms,
        JSON,
        json!({"metadata": {"generateName": "gen-"}}),
        |v| {
            json!(v["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gen-") && n.len() == 9))
        },
    )
    .await;

    // Selectors.
    let b = json!({"metadata": {"name": "b", "labels": {"app": "y"}}});
    d.step("create b", Method::POST, &cms, JSON, b, data).await;
    for (label, query) in [
        ("label selector =", "labelSelector=app%3Dx"),
        ("label selector !=", "labelSelector=app%21%3Dx"),
        ("label selector in", "labelSelector=app%20in%20(x,y)"),
        ("label selector exists", "labelSelector=tier"),
        ("label selector not exists", "labelSelector=%21tier"),
        ("field selector name", "fieldSelector=metadata.name%3Db"),
    ] {
        d.step(
            label,
            Method::GET,
            &format!("{cms}?{query}"),
            JSON,
            Value::Null,
            names,
        )
        .await;
    }
    d.step(
        "bad label selector",
        Method::GET,
        &format!("{cms}?labelSelector=%3D%3D%3D"),
        JSON,
        Value::Null,
        reason,
    )
    .await;

    // Optimistic concurrency.
    let (mut fake_a, mut real_a) = d.get_each(&cm("a")).await;
    fake_a["data"] = json!({"k": "w"});
    real_a["data"] = json!({"k": "w"});
    let both = (fake_a.clone(), real_a.clone());
    d.step_each("update", Method::PUT, &cm("a"), both.clone(), data)
        .await;
    d.step_each(
        "update with a stale resourceVersion",
        Method::PUT,
        &cm("a"),
        both,
        reason,
    )
    .await;
    let mut swapped = (real_a, fake_a);
    swapped.0["metadata"]["resourceVersion"] = Value::Null;
    swapped.1["metadata"]["resourceVersion"] = Value::Null;
    d.step_each(
        "update naming another uid",
        Method::PUT,
        &cm("a"),
        swapped,
        reason,
    )
    .await;
    d.step(
        "merge patch",
        Method::PATCH,
        &cm("a"),
        MERGE,
        json!({"data": {"extra": "1"}}),
        data,
    )
    .await;

    // Server-side apply: managers, conflicts, force.
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "s"}, "data": {"owned": "by-one"}});
    d.step(
        "apply creates",
        Method::PATCH,
        &format!("{}?fieldManager=one", cm("s")),
        APPLY,
        applied.clone(),
        |v| json!([data(v), managers(v)]),
    )
    .await;
    d.step(
        "apply again changes nothing",
        Method::PATCH,
        &format!("{}?fieldManager=one", cm("s")),
        APPLY,
        applied,
        |v| json!([data(v), managers(v)]),
    )
    .await;
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "s"}, "data": {"owned": "by-two"}});
    d.step(
        "apply conflicting",
        Method::PATCH,
        &format!("{}?fieldManager=two", cm("s")),
        APPLY,
        other.clone(),
        reason,
    )
    .await;
    d.step(
        "apply conflicting with force",
        Method::PATCH,
        &format!("{}?fieldManager=two&force=true", cm("s")),
        APPLY,
        other,
        |v| json!([data(v), managers(v)]),
    )
    .await;
    d.step(
        "apply without a field manager",
        Method::PATCH,
        &cm("s"),
        APPLY,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}}),
        reason,
    )
    .await;

    // Immutable data.
    d.step(
        "create immutable",
        Method::POST,
        &cms,
        JSON,
        json!({"metadata": {"name": "frozen"}, "data": {"k": "v"}, "immutable": true}),
        data,
    )
    .await;
    d.step(
        "change immutable data",
        Method::PATCH,
        &cm("frozen"),
        MERGE,
        json!({"data": {"k": "w"}}),
        reason,
    )
    .await;

    // Finalizers: delete marks, removing the last finalizer deletes.
    d.step(
        "create with a finalizer",
        Method::POST,
        &cms,
        JSON,
        json!({"metadata": {"name": "fin", "finalizers": ["example.com/hold"]}}),
        |v| v["metadata"]["finalizers"].clone(),
    )
    .await;
    d.step(
        "delete with a finalizer",
        Method::DELETE,
        &cm("fin"),
        JSON,
        Value::Null,
        |v| json!(v["metadata"]["deletionTimestamp"].is_string()),
    )
    .await;
    d.step(
        "get while finalizing",
        Method::GET,
        &cm("fin"),
        JSON,
        Value::Null,
        |v| json!(v["metadata"]["deletionTimestamp"].is_string()),
    )
    .await;
    d.step(
        "remove the finalizer",
        Method::PATCH,
        &cm("fin"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
        |_| Value::Null,
    )
    .await;
    d.settle("gone after its finalizer", &cm("fin"), 404).await;

    // Owner references: background and foreground propagation.
    let ((_, owner), _) = d
        .step(
            "create owner",
            Method::POST,
            &cms,
            JSON,
            json!({"metadata": {"name": "owner"}}),
            |_| Value::Null,
        )
        .await;
    let child = |name: &str, uid: &Value| {
        json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1",
            "kind": "ConfigMap", "name": "owner", "uid": uid}]}})
    };
    // Each server gave the owner its own uid: the child names the right one.
    let real_owner = call(&d.real, Method::GET, &cm("owner"), JSON, &Value::Null)
        .await
        .1;
    let fake_child = call(
        &d.fake,
        Method::POST,
        &cms,
        JSON,
        &child("child", &owner["metadata"]["uid"]),
    )
    .await;
    let real_child = call(
        &d.real,
        Method::POST,
        &cms,
        JSON,
        &child("child", &real_owner["metadata"]["uid"]),
    )
    .await;
    d.compare("create child", &fake_child, &real_child, |_| Value::Null);
    d.step(
        "delete owner (background)",
        Method::DELETE,
        &cm("owner"),
        JSON,
        Value::Null,
        |_| Value::Null,
    )
    .await;
    d.settle("child collected", &cm("child"), 404).await;

    // Status subresource of a custom resource.
    let models = format!("/apis/ai.flexinfer/v1alpha2/namespaces/{NS}/models");
    let model = json!({"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
        "metadata": {"name": "m"},
        "spec": {"backend": "vllm", "source": "hf://org/m", "notAField": 1},
        "status": {"phase": "Ready"}});
    d.step("create a Model", Method::POST, &models, JSON, model, |v| {
        json!([v["spec"]["notAField"], v["status"]])
    })
    .await;
    d.step(
        "status through the main resource",
        Method::PATCH,
        &format!("{models}/m"),
        MERGE,
        json!({"status": {"phase": "Failed"}}),
        |v| v["status"]["phase"].clone(),
    )
    .await;
    d.step(
        "status through /status",
        Method::PATCH,
        &format!("{models}/m/status"),
        MERGE,
        json!({"status": {"phase": "Loading"}, "spec": {"backend": "llamacpp"}}),
        |v| json!([v["status"]["phase"], v["spec"]["backend"]]),
    )
    .await;
    d.step(
        "a Model that fails its schema",
        Method::POST,
        &models,
        JSON,
        json!({"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
            "metadata": {"name": "bad"}, "spec": {"backend": 7}}),
        reason,
    )
    .await;

    let unexpected: Vec<&String> = d
        .differences
        .iter()
        .filter(|l| !l.contains("(deliberate)"))
        .collect();
    eprintln!(
        "{} steps; differences:\n{}",
        d.steps,
        d.differences.join("\n")
    );
    assert!(
        unexpected.is_empty(),
        "testkube differs from kube-apiserver:\n{}",
        unexpected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
