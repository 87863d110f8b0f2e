//! The in-memory API server held to the real one: the same request
//! sequence goes to `TestApiServer` and to a real kube-apiserver
//! (`flexinfer_testkube::real`, skipped where it was not built), and the
//! status codes and the fields that matter must agree, except for the
//! deliberate differences listed in this crate's README ("Held to
//! kube-apiserver", "Deliberate differences"), each named here by its
//! step. Steps that depend on the real server's controllers (garbage
//! collection) poll both servers until a condition or a timeout.

use std::path::Path;
use std::time::Duration;

use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use flexinfer_testkube::real::ControlPlane;
use flexinfer_testkube::TestApiServer;

/// Steps whose answers differ on purpose (see the README).
const DELIBERATE: &[&str] = &["periodic bookmarks"];

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
        self.settle_on(label, path, |a| a.0 == want, |_| Value::Null)
            .await;
    }

    /// Polls `path` on both until `done` holds for each answer (at most
    /// ten seconds), then compares the last answers with `project`.
    async fn settle_on(
        &mut self,
        label: &str,
        path: &str,
        done: impl Fn(&Answer) -> bool,
        project: impl Fn(&Value) -> Value,
    ) {
        self.steps += 1;
        let mut answers = Vec::new();
        for client in [self.fake.clone(), self.real.clone()] {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let mut last = call(&client, Method::GET, path, JSON, &Value::Null).await;
            while !done(&last) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                last = call(&client, Method::GET, path, JSON, &Value::Null).await;
            }
            answers.push(last);
        }
        self.compare(label, &answers[0], &answers[1], project);
    }

    /// A GET of a path of each server's own (one naming a resourceVersion
    /// or `continue` token it handed out).
    async fn get_paths(
        &mut self,
        label: &str,
        paths: (&str, &str),
        project: impl Fn(&Value) -> Value,
    ) -> (Answer, Answer) {
        self.steps += 1;
        let (fake, real) = tokio::join!(
            call(&self.fake, Method::GET, paths.0, JSON, &Value::Null),
            call(&self.real, Method::GET, paths.1, JSON, &Value::Null)
        );
        self.compare(label, &fake, &real, project);
        (fake, real)
    }

    /// Opens the same watch on both (its path sets `timeoutSeconds`, so
    /// that it ends) and compares the events received, as an array, with
    /// `project`.
    async fn watch(&mut self, label: &str, path: &str, project: impl Fn(&Value) -> Value) {
        self.watch_paths(label, (path, path), project).await;
    }

    /// [`Differ::watch`] with a path of each server's own.
    async fn watch_paths(
        &mut self,
        label: &str,
        paths: (&str, &str),
        project: impl Fn(&Value) -> Value,
    ) {
        self.steps += 1;
        let (fake, real) = tokio::join!(
            watch_events(&self.fake, paths.0),
            watch_events(&self.real, paths.1)
        );
        self.compare(label, &fake, &real, project);
    }

    /// `resourceVersion` of a list of `path` on each server.
    async fn list_rv_each(&self, path: &str) -> (String, String) {
        let (fake, real) = self.get_each(path).await;
        let rv = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        (rv(&fake), rv(&real))
    }

    /// The uid of `path` on each server.
    async fn uid_each(&self, path: &str) -> (Value, Value) {
        let (fake, real) = self.get_each(path).await;
        (
            fake["metadata"]["uid"].clone(),
            real["metadata"]["uid"].clone(),
        )
    }
}

/// The events of a watch that ends by itself (`timeoutSeconds`, or an
/// `ERROR`), as a JSON array; a refused watch answers its `Status`.
async fn watch_events(client: &kube::Client, path: &str) -> Answer {
    let (status, body) = call_raw(client, path).await;
    if status != 200 {
        return (status, serde_json::from_slice(&body).unwrap_or(Value::Null));
    }
    let events: Vec<Value> = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    (status, Value::Array(events))
}

/// A GET's status and raw body.
async fn call_raw(client: &kube::Client, path: &str) -> (u16, Vec<u8>) {
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .body(kube::client::Body::from(Vec::new()))
        .expect("request");
    let resp = client.send(req).await.expect("the server answers");
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    (status, bytes)
}

/// Watch events as `TYPE name`; an initial-events-end `BOOKMARK` as
/// `BOOKMARK initial-events-end` (its object must carry nothing but its
/// resourceVersion and that annotation), an `ERROR` as `ERROR code
/// reason`. Other `BOOKMARK`s are periodic, sent at times of each server's
/// own: left out. A refused watch: its reason.
fn events(v: &Value) -> Value {
    let Some(events) = v.as_array() else {
        return reason(v);
    };
    let seen: Vec<String> = events
        .iter()
        .filter_map(|e| {
            let (kind, obj) = (e["type"].as_str().unwrap_or(""), &e["object"]);
            match kind {
                "BOOKMARK" => {
                    let m = &obj["metadata"];
                    let end = m["annotations"]["k8s.io/initial-events-end"] == "true";
                    let keys: Vec<&String> = m
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, _)| k)
                        .collect();
                    end.then(|| format!("BOOKMARK initial-events-end {keys:?}"))
                }
                "ERROR" => Some(format!("ERROR {} {}", obj["code"], obj["reason"])),
                _ => Some(format!(
                    "{kind} {}",
                    obj["metadata"]["name"].as_str().unwrap_or("")
                )),
            }
        })
        .collect();
    json!(seen)
}

/// Every event type, periodic `BOOKMARK`s included.
fn event_types(v: &Value) -> Value {
    json!(v
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["type"].clone())
        .collect::<Vec<_>>())
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
        "add a finalizer while deleting",
        Method::PATCH,
        &cm("fin"),
        MERGE,
        json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
        |v| json!([reason(v), v["message"]]),
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
        |v| v["kind"].clone(),
    )
    .await;
    d.settle("child collected", &cm("child"), 404).await;
    foreground_deletion(&mut d, &cms).await;
    orphan_deletion(&mut d, &cms).await;
    deletion_answers(&mut d).await;

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

    defaulting(&mut d, &models).await;
    watches(&mut d).await;
    pages(&mut d).await;

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

/// A ConfigMap `name` owned by the ConfigMap `owner` (of `uid`), holding
/// the finalizer `example.com/hold`; `block`: `blockOwnerDeletion`.
fn dependent(name: &str, owner: &str, uid: &Value, block: bool) -> Value {
    json!({"metadata": {"name": name, "finalizers": ["example.com/hold"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner,
            "uid": uid, "blockOwnerDeletion": block}]}})
}

/// Creates the ConfigMap `owner` and its dependent `child` on both.
async fn owner_and_dependent(d: &mut Differ, cms: &str, owner: &str, child: &str, block: bool) {
    d.step(
        &format!("create {owner}"),
        Method::POST,
        cms,
        JSON,
        json!({"metadata": {"name": owner}}),
        |_| Value::Null,
    )
    .await;
    let uids = d.uid_each(&format!("{cms}/{owner}")).await;
    d.step_each(
        &format!("create {child}"),
        Method::POST,
        cms,
        (
            dependent(child, owner, &uids.0, block),
            dependent(child, owner, &uids.1, block),
        ),
        |v| v["metadata"]["ownerReferences"][0]["blockOwnerDeletion"].clone(),
    )
    .await;
}

/// Whether an object is marked for deletion, and its finalizers.
fn deletion(v: &Value) -> Value {
    json!([
        v["metadata"]["deletionTimestamp"].is_string(),
        v["metadata"]["finalizers"]
    ])
}

fn marked(a: &Answer) -> bool {
    a.1["metadata"]["deletionTimestamp"].is_string()
}

/// `propagationPolicy: Foreground`: the owner stays, marked with
/// `foregroundDeletion`, while a dependent that blocks its deletion
/// exists; one that does not block it does not hold it.
async fn foreground_deletion(d: &mut Differ, cms: &str) {
    let cm = |name: &str| format!("{cms}/{name}");
    let foreground = json!({"propagationPolicy": "Foreground"});
    owner_and_dependent(d, cms, "fg-owner", "fg-child", true).await;
    d.step(
        "delete owner (foreground)",
        Method::DELETE,
        &cm("fg-owner"),
        JSON,
        foreground.clone(),
        deletion,
    )
    .await;
    d.settle_on(
        "blocking dependent deleted",
        &cm("fg-child"),
        marked,
        deletion,
    )
    .await;
    d.step(
        "owner waits for its blocking dependent",
        Method::GET,
        &cm("fg-owner"),
        JSON,
        Value::Null,
        deletion,
    )
    .await;
    d.step(
        "release the blocking dependent",
        Method::PATCH,
        &cm("fg-child"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
        |_| Value::Null,
    )
    .await;
    d.settle("blocking dependent gone", &cm("fg-child"), 404)
        .await;
    d.settle("owner gone after its dependent", &cm("fg-owner"), 404)
        .await;

    owner_and_dependent(d, cms, "fg-owner2", "fg-free", false).await;
    d.step(
        "delete owner of a non-blocking dependent (foreground)",
        Method::DELETE,
        &cm("fg-owner2"),
        JSON,
        foreground.clone(),
        deletion,
    )
    .await;
    d.settle(
        "owner not held by a non-blocking dependent",
        &cm("fg-owner2"),
        404,
    )
    .await;
    d.settle_on(
        "non-blocking dependent deleted",
        &cm("fg-free"),
        marked,
        deletion,
    )
    .await;
    d.step(
        "release the non-blocking dependent",
        Method::PATCH,
        &cm("fg-free"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
        |_| Value::Null,
    )
    .await;

    // A second delete with another policy changes the finalizers.
    d.step(
        "create held",
        Method::POST,
        cms,
        JSON,
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        |_| Value::Null,
    )
    .await;
    d.step(
        "delete held",
        Method::DELETE,
        &cm("held"),
        JSON,
        Value::Null,
        deletion,
    )
    .await;
    d.step(
        "delete held again (foreground)",
        Method::DELETE,
        &cm("held"),
        JSON,
        foreground,
        deletion,
    )
    .await;
    d.step(
        "delete held again (orphan)",
        Method::DELETE,
        &cm("held"),
        JSON,
        json!({"propagationPolicy": "Orphan"}),
        deletion,
    )
    .await;
    d.settle_on(
        "orphan finalizer done",
        &cm("held"),
        |a| a.1["metadata"]["finalizers"] == json!(["example.com/hold"]),
        deletion,
    )
    .await;
    d.step(
        "release held",
        Method::PATCH,
        &cm("held"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
        |_| Value::Null,
    )
    .await;
    d.settle("held gone", &cm("held"), 404).await;
}

/// `propagationPolicy: Orphan`: the owner goes, its dependents stay
/// without their owner reference.
async fn orphan_deletion(d: &mut Differ, cms: &str) {
    let cm = |name: &str| format!("{cms}/{name}");
    owner_and_dependent(d, cms, "or-owner", "or-child", true).await;
    d.step(
        "delete owner (orphan)",
        Method::DELETE,
        &cm("or-owner"),
        JSON,
        json!({"propagationPolicy": "Orphan"}),
        deletion,
    )
    .await;
    d.settle("orphaning owner gone", &cm("or-owner"), 404).await;
    d.step(
        "orphan keeps no owner reference",
        Method::GET,
        &cm("or-child"),
        JSON,
        Value::Null,
        |v| json!([deletion(v), v["metadata"]["ownerReferences"]]),
    )
    .await;
    d.step(
        "release the orphan",
        Method::PATCH,
        &cm("or-child"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
        |_| Value::Null,
    )
    .await;
}

/// What a delete answers: the object for some types, a `Status` for
/// others; a `batch/v1` Job is orphaning by default.
async fn deletion_answers(d: &mut Differ) {
    let sas = format!("/api/v1/namespaces/{NS}/serviceaccounts");
    d.step(
        "create a ServiceAccount",
        Method::POST,
        &sas,
        JSON,
        json!({"metadata": {"name": "sa1"}}),
        |_| Value::Null,
    )
    .await;
    d.step(
        "delete a ServiceAccount",
        Method::DELETE,
        &format!("{sas}/sa1"),
        JSON,
        Value::Null,
        |v| v["kind"].clone(),
    )
    .await;
    let jobs = format!("/apis/batch/v1/namespaces/{NS}/jobs");
    d.step(
        "create a suspended Job",
        Method::POST,
        &jobs,
        JSON,
        json!({"metadata": {"name": "job"}, "spec": {"suspend": true, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        |_| Value::Null,
    )
    .await;
    d.step(
        "delete a Job without a policy",
        Method::DELETE,
        &format!("{jobs}/job"),
        JSON,
        Value::Null,
        |v| json!([v["kind"], deletion(v)]),
    )
    .await;
    d.settle("orphaned Job gone", &format!("{jobs}/job"), 404)
        .await;
}

/// CRD schema defaults, on create, on read and on update, in objects that
/// are present (defaults inside) or absent (none), after null pruning.
async fn defaulting(d: &mut Differ, models: &str) {
    let spec = |v: &Value| json!([v["spec"]["cache"], v["spec"]["serverless"]]);
    d.step(
        "create with defaults",
        Method::POST,
        models,
        JSON,
        json!({"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
            "metadata": {"name": "defaulted"},
            "spec": {"backend": "vllm", "source": "hf://org/m",
                "cache": {"bogus": true},
                "serverless": {"enabled": null, "minReplicas": 2}}}),
        spec,
    )
    .await;
    d.step(
        "defaults on read",
        Method::GET,
        &format!("{models}/defaulted"),
        JSON,
        Value::Null,
        spec,
    )
    .await;
    d.step(
        "defaults on update",
        Method::PATCH,
        &format!("{models}/defaulted"),
        MERGE,
        json!({"spec": {"serverless": {"enabled": null, "coldStartTimeout": null},
            "cache": {"compilationCache": {}, "size": null}}}),
        spec,
    )
    .await;
    d.step(
        "delete a Model",
        Method::DELETE,
        &format!("{models}/defaulted"),
        JSON,
        Value::Null,
        |v| v["kind"].clone(),
    )
    .await;
}

/// Watches from a resourceVersion (with and without a label selector),
/// with initial events and their end bookmark, refused parameters, and a
/// resourceVersion older than the type's history.
async fn watches(d: &mut Differ) {
    let ns = "differential-watch";
    d.step(
        "create the watch namespace",
        Method::POST,
        "/api/v1/namespaces",
        JSON,
        json!({"metadata": {"name": ns}}),
        |_| Value::Null,
    )
    .await;
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let cm = |name: &str| format!("{cms}/{name}");
    for (name, app) in [("w1", "x"), ("w2", "y")] {
        d.step(
            &format!("create {name}"),
            Method::POST,
            &cms,
            JSON,
            json!({"metadata": {"name": name, "labels": {"app": app}}}),
            |_| Value::Null,
        )
        .await;
    }
    let rv = d.list_rv_each(&cms).await;
    // Changes after `rv`: w3 created, w1 changed, w2 enters the selector
    // app=x, w3 leaves it, w1 deleted.
    let label = |app: &str| json!({"metadata": {"labels": {"app": app}}});
    d.step(
        "create w3",
        Method::POST,
        &cms,
        JSON,
        json!({"metadata": {"name": "w3", "labels": {"app": "x"}}}),
        |_| Value::Null,
    )
    .await;
    d.step(
        "change w1",
        Method::PATCH,
        &cm("w1"),
        MERGE,
        json!({"data": {"k": "v"}}),
        data,
    )
    .await;
    d.step(
        "relabel w2",
        Method::PATCH,
        &cm("w2"),
        MERGE,
        label("x"),
        |_| Value::Null,
    )
    .await;
    d.step(
        "relabel w3",
        Method::PATCH,
        &cm("w3"),
        MERGE,
        label("y"),
        |_| Value::Null,
    )
    .await;
    d.step(
        "delete w1",
        Method::DELETE,
        &cm("w1"),
        JSON,
        Value::Null,
        |_| Value::Null,
    )
    .await;
    let from = |rv: &str, query: &str| {
        format!("{cms}?watch=1&timeoutSeconds=1&resourceVersion={rv}{query}")
    };
    d.watch_paths(
        "watch from a resourceVersion",
        (&from(&rv.0, ""), &from(&rv.1, "")),
        events,
    )
    .await;
    let selected = "&labelSelector=app%3Dx";
    d.watch_paths(
        "watch from a resourceVersion with a label selector",
        (&from(&rv.0, selected), &from(&rv.1, selected)),
        events,
    )
    .await;
    let watch = |query: &str| format!("{cms}?watch=1&timeoutSeconds=1{query}{selected}");
    d.watch(
        "watch with initial events and bookmarks",
        &watch("&allowWatchBookmarks=true"),
        events,
    )
    .await;
    d.watch(
        "streaming list",
        &watch(
            "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        ),
        events,
    )
    .await;
    d.watch_paths(
        "streaming list from a resourceVersion",
        (
            &watch(&format!(
                "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={}",
                rv.0
            )),
            &watch(&format!(
                "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={}",
                rv.1
            )),
        ),
        events,
    )
    .await;
    d.watch(
        "initial events without bookmarks",
        &watch("&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
        events,
    )
    .await;
    d.watch(
        "no initial events",
        &watch(
            "&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        ),
        events,
    )
    .await;
    d.watch(
        "initial events without resourceVersionMatch",
        &watch("&sendInitialEvents=true"),
        events,
    )
    .await;
    d.watch(
        "resourceVersionMatch without initial events",
        &watch("&resourceVersionMatch=NotOlderThan&resourceVersion=0"),
        events,
    )
    .await;
    let now = d.list_rv_each(&cms).await;
    d.watch_paths(
        "periodic bookmarks",
        (
            &format!(
                "{cms}?watch=1&timeoutSeconds=2&allowWatchBookmarks=true&resourceVersion={}",
                now.0
            ),
            &format!(
                "{cms}?watch=1&timeoutSeconds=2&allowWatchBookmarks=true&resourceVersion={}",
                now.1
            ),
        ),
        event_types,
    )
    .await;

    // The watch cache of a custom resource begins when its CRD is
    // established: resourceVersion 1 is older than its history.
    let models = "/apis/ai.flexinfer/v1alpha2/namespaces/differential-watch/models";
    d.watch(
        "watch from before the history",
        &format!("{models}?watch=1&timeoutSeconds=1&resourceVersion=1"),
        events,
    )
    .await;
    for (label, query, project) in [
        (
            "list not older than an old resourceVersion",
            "resourceVersion=1&resourceVersionMatch=NotOlderThan",
            names as fn(&Value) -> Value,
        ),
        (
            "list with resourceVersionMatch and no resourceVersion",
            "resourceVersionMatch=NotOlderThan",
            reason,
        ),
        (
            "list exactly at resourceVersion 0",
            "resourceVersion=0&resourceVersionMatch=Exact",
            reason,
        ),
        (
            "list at an invalid resourceVersion",
            "resourceVersion=abc",
            reason,
        ),
    ] {
        d.step(
            label,
            Method::GET,
            &format!("{cms}?{query}"),
            JSON,
            Value::Null,
            project,
        )
        .await;
    }
}

/// Pages of a list: items, `continue` and `remainingItemCount` (only
/// without selectors); an invalid `continue` token.
async fn pages(d: &mut Differ) {
    let ns = "differential-pages";
    d.step(
        "create the pages namespace",
        Method::POST,
        "/api/v1/namespaces",
        JSON,
        json!({"metadata": {"name": ns}}),
        |_| Value::Null,
    )
    .await;
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    for i in 1..=5 {
        d.step(
            &format!("create p{i}"),
            Method::POST,
            &cms,
            JSON,
            json!({"metadata": {"name": format!("p{i}"), "labels": {"page": "yes"}}}),
            |_| Value::Null,
        )
        .await;
    }
    let page = |v: &Value| {
        json!([
            names(v),
            v["metadata"]["continue"].is_string(),
            v["metadata"]["remainingItemCount"]
        ])
    };
    let token = |a: &Answer| {
        a.1["metadata"]["continue"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for query in ["limit=2", "limit=2&labelSelector=page"] {
        let first = format!("{cms}?{query}");
        let (fake, real) = d
            .get_paths(&format!("first page ({query})"), (&first, &first), page)
            .await;
        let next = |a: &Answer| format!("{cms}?{query}&continue={}", token(a));
        let (fake, real) = d
            .get_paths(
                &format!("second page ({query})"),
                (&next(&fake), &next(&real)),
                page,
            )
            .await;
        d.get_paths(
            &format!("last page ({query})"),
            (&next(&fake), &next(&real)),
            page,
        )
        .await;
    }
    d.step(
        "invalid continue token",
        Method::GET,
        &format!("{cms}?limit=2&continue=garbage"),
        JSON,
        Value::Null,
        reason,
    )
    .await;
}
