//! [`TestApiServer`]: one in-memory API server on a loopback port, with
//! the helpers tests use to reach and steer it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::error::ApiError;
use crate::gc;
use crate::http::{self, AppState};
use crate::registry::{Registry, ResourceType};
use crate::requests::{RequestLog, Verb};
use crate::selector::LabelSelector;
use crate::sim;
use crate::sim::deployment::KubeletPods;
use crate::sim::kubelet::{KubeletPod, PodProcess};
use crate::store::{Store, WriteOpts};

/// Namespaces every server starts with.
pub const DEFAULT_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Default number of watch events kept per resource type.
pub const DEFAULT_WATCH_HISTORY: usize = 10_000;

/// Default interval between watch bookmarks.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// Configures a [`TestApiServer`] before it starts.
#[derive(Clone, Debug)]
pub struct TestApiServerBuilder {
    registry: Registry,
    watch_history: usize,
    bookmark_interval: Duration,
}

impl Default for TestApiServerBuilder {
    fn default() -> Self {
        TestApiServerBuilder {
            registry: Registry::standard(),
            watch_history: DEFAULT_WATCH_HISTORY,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
        }
    }
}

impl TestApiServerBuilder {
    /// Serves an extra type (or replaces a built-in one with the same
    /// group, version and plural).
    pub fn resource(mut self, rt: ResourceType) -> Self {
        self.registry.add(rt);
        self
    }

    /// Stops serving a type, as on a cluster where its CRD is not
    /// installed: discovery no longer lists it and requests for it get 404.
    pub fn without_resource(mut self, group: &str, version: &str, plural: &str) -> Self {
        self.registry.remove(group, version, plural);
        self
    }

    /// Keeps this many watch events per resource type; watches from older
    /// resourceVersions get 410 Gone.
    pub fn watch_history(mut self, events: usize) -> Self {
        self.watch_history = events.max(1);
        self
    }

    /// How often watches with `allowWatchBookmarks=true` get a bookmark.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// Binds an ephemeral loopback port and starts serving.
    pub async fn start(self) -> std::io::Result<TestApiServer> {
        let store = Arc::new(Store::new(self.registry, self.watch_history));
        seed(&store);
        store.begin_history();
        let requests = Arc::new(RequestLog::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let state = Arc::new(AppState {
            store: store.clone(),
            requests: requests.clone(),
            bookmark_interval: self.bookmark_interval,
            shutdown: shutdown_rx.clone(),
            address: addr.to_string(),
        });
        let app = http::router(state);
        let mut rx = shutdown_rx.clone();
        let server = tokio::spawn(async move {
            let stop = async move {
                let _ = rx.wait_for(|stop| *stop).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::warn!(error = %e, "test API server stopped");
            }
        });
        let collector = tokio::spawn(gc::run(store.clone(), shutdown_rx.clone()));

        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&format!("http://{addr}")))?;

        Ok(TestApiServer {
            store,
            requests,
            addr,
            _dir: dir,
            kubeconfig,
            shutdown: shutdown_tx,
            shutdown_rx,
            tasks: Mutex::new(vec![server, collector]),
            deployment_sim: Mutex::new(None),
            endpoints_sim: Mutex::new(None),
            kubelet_sim: Mutex::new(None),
            kubelet_pods: Arc::new(RwLock::new(None)),
            kubelet_running: Arc::default(),
        })
    }
}

/// Creates the default namespaces and the CustomResourceDefinition objects
/// of the registered custom resources.
fn seed(store: &Store) {
    let Some(ns_rt) = store.registry.lookup("", "v1", "namespaces").cloned() else {
        return;
    };
    for ns in DEFAULT_NAMESPACES {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        if let Err(e) = store.create(&ns_rt, "", obj, &WriteOpts::internal("testkube")) {
            tracing::warn!(error = %e, namespace = ns, "could not create a default namespace");
        }
    }
    for crd in flexinfer_crds::manifests::crds() {
        match serde_json::to_value(&crd) {
            Ok(v) => {
                if let Err(e) = store.insert(v) {
                    tracing::warn!(error = %e, "could not store a CustomResourceDefinition");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not serialize a CustomResourceDefinition"),
        }
    }
}

fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: testkube
  cluster:
    server: {server}
contexts:
- name: testkube
  context:
    cluster: testkube
    user: testkube
    namespace: default
current-context: testkube
users:
- name: testkube
  user: {{}}
"
    )
}

/// An in-memory Kubernetes API server on `127.0.0.1:<ephemeral port>`.
///
/// Start as many as a test needs (one per simulated cluster). Dropping the
/// server stops it; [`TestApiServer::shutdown`] does so and waits.
#[derive(Debug)]
pub struct TestApiServer {
    store: Arc<Store>,
    requests: Arc<RequestLog>,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    shutdown: tokio::sync::watch::Sender<bool>,
    shutdown_rx: tokio::sync::watch::Receiver<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    deployment_sim: Mutex<Option<JoinHandle<()>>>,
    endpoints_sim: Mutex<Option<JoinHandle<()>>>,
    kubelet_sim: Mutex<Option<JoinHandle<()>>>,
    kubelet_pods: KubeletPods,
    kubelet_running: sim::kubelet::Running,
}

impl TestApiServer {
    /// Starts a server with the default configuration.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or no temporary directory
    /// created; use [`TestApiServer::builder`] to handle that instead.
    pub async fn start() -> TestApiServer {
        match TestApiServerBuilder::default().start().await {
            Ok(server) => server,
            Err(e) => panic!("cannot start the test API server: {e}"),
        }
    }

    /// A builder for non-default configurations.
    pub fn builder() -> TestApiServerBuilder {
        TestApiServerBuilder::default()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube `Config` for this server, default namespace `default`.
    pub fn config(&self) -> kube::Config {
        let uri = self
            .url()
            .parse()
            .unwrap_or_else(|_| axum::http::Uri::from_static("http://127.0.0.1"));
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config
    }

    /// A new `kube::Client` for this server. Must be called inside a Tokio
    /// runtime.
    ///
    /// # Panics
    ///
    /// If kube cannot build a client for a plain `http://` URL, which would
    /// be a build configuration error.
    pub fn client(&self) -> kube::Client {
        match kube::Client::try_from(self.config()) {
            Ok(c) => c,
            Err(e) => panic!("cannot build a kube client for {}: {e}", self.url()),
        }
    }

    /// A kubeconfig file (context `testkube`) pointing at this server,
    /// removed when the server is dropped.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Requests seen with `verb` on `resource` (plural, e.g. `models`, or
    /// `models/status` for the subresource; any API group), including
    /// requests that failed or were failed by injection.
    pub fn requests(&self, verb: Verb, resource: &str) -> u64 {
        self.requests.count(verb, resource)
    }

    /// Like [`requests`](Self::requests), for write verbs only (0 for
    /// reads): the count behind "this reconcile made no write" assertions.
    pub fn writes(&self, verb: Verb, resource: &str) -> u64 {
        if verb.is_write() {
            self.requests.count(verb, resource)
        } else {
            0
        }
    }

    /// Write requests seen on all resources.
    pub fn total_writes(&self) -> u64 {
        self.requests.total_writes()
    }

    /// Every request counter as `(verb, resource, count)`, sorted.
    pub fn request_counts(&self) -> Vec<(Verb, String, u64)> {
        self.requests.snapshot()
    }

    /// Zeroes every request counter.
    pub fn reset_counters(&self) {
        self.requests.reset();
    }

    /// Answers the next `n` requests with `verb` on `resource` (`"*"` for
    /// any resource) with a `Status` of HTTP code `status` (reason as
    /// upstream: 409 Conflict, 429 TooManyRequests, 500 InternalError, 503
    /// ServiceUnavailable, ...), without serving them.
    pub fn fail_next(&self, verb: Verb, resource: &str, n: u32, status: u16) {
        self.requests.fail_next(verb, resource, n, status);
    }

    /// Starts the simulated Deployment controller (see
    /// [`crate::sim`]): Pods become ready `ready_after` after creation.
    /// Calling again restarts it with the new delay.
    pub fn enable_deployment_controller(&self, ready_after: Duration) {
        let task = tokio::spawn(sim::deployment::run(
            self.store.clone(),
            ready_after,
            self.kubelet_pods.clone(),
            self.shutdown_rx.clone(),
        ));
        if let Some(old) = self
            .deployment_sim
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task)
        {
            old.abort();
        }
    }

    /// Starts the simulated EndpointSlice controller (see [`crate::sim`]).
    pub fn enable_endpoint_slices(&self) {
        let mut slot = self.endpoints_sim.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(tokio::spawn(sim::endpoints::run(
                self.store.clone(),
                self.shutdown_rx.clone(),
            )));
        }
    }

    /// Starts the simulated kubelet (see [`sim::kubelet`](crate::sim)): every
    /// Pod matching `selector` (label selector syntax, e.g.
    /// `app.kubernetes.io/name=sim`; empty matches all) is run as the
    /// process `runner` returns for it and its address, and becomes `Ready`
    /// when its readiness probe answers; deleting the Pod kills the
    /// process. Pods the Deployment controller creates for a matching
    /// template are left to the kubelet. Calling again replaces the
    /// previous kubelet (its processes are killed).
    ///
    /// # Panics
    ///
    /// If `selector` does not parse.
    pub fn enable_kubelet(
        &self,
        selector: &str,
        runner: impl Fn(&Value, std::net::Ipv4Addr) -> Option<PodProcess> + Send + Sync + 'static,
    ) {
        let parsed = match LabelSelector::parse(selector) {
            Ok(s) => s,
            Err(e) => panic!("invalid kubelet selector {selector:?}: {e}"),
        };
        *self.kubelet_pods.write().unwrap_or_else(|e| e.into_inner()) = Some(parsed.clone());
        let task = tokio::spawn(sim::kubelet::run(
            self.store.clone(),
            parsed,
            Arc::new(runner),
            self.kubelet_running.clone(),
            self.shutdown_rx.clone(),
        ));
        if let Some(old) = self
            .kubelet_sim
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task)
        {
            old.abort();
        }
    }

    /// The Pods the simulated kubelet runs now, sorted by namespace and
    /// name.
    pub fn kubelet_pods(&self) -> Vec<KubeletPod> {
        let mut pods: Vec<KubeletPod> = self
            .kubelet_running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// Stores a fixture as given, bypassing the API: `status` is kept,
    /// server fields (`uid`, `creationTimestamp`, `generation`,
    /// `resourceVersion`) are filled where missing, the namespace defaults
    /// to `default` and need not exist. Replaces an object with the same
    /// name. Not counted as a request. Returns the stored object.
    ///
    /// As on a real cluster, the garbage collector deletes a fixture whose
    /// `ownerReferences` all name UIDs that do not exist: insert owners
    /// first and copy their UIDs.
    pub fn insert<K: Serialize>(&self, obj: &K) -> Result<Value, ApiError> {
        let value = serde_json::to_value(obj)
            .map_err(|e| ApiError::bad_request(format!("fixture does not serialize: {e}")))?;
        self.store.insert(value)
    }

    /// The stored object, read without going through the API (not counted).
    pub fn object(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let rt = self.store.registry.by_kind(api_version, kind)?.clone();
        let ns = if rt.namespaced { namespace } else { "" };
        self.store.get(&rt, ns, name).ok()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store.resource_version()
    }

    /// Forgets every type's watch history: every open watch, and every
    /// watch resuming from an earlier resourceVersion, gets 410 Gone, so
    /// reflectors and `kube::runtime::watcher`s relist.
    pub fn expire_watch_history(&self) {
        self.store.expire_history();
    }

    /// Stops serving: open watches end, background tasks stop.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        let tasks: Vec<JoinHandle<()>> = {
            let mut all =
                std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
            all.extend(
                self.deployment_sim
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
            all.extend(
                self.endpoints_sim
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
            all.extend(
                self.kubelet_sim
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
            all
        };
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
        for slot in [
            &mut self.deployment_sim,
            &mut self.endpoints_sim,
            &mut self.kubelet_sim,
        ] {
            if let Some(t) = slot.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
                t.abort();
            }
        }
    }
}
