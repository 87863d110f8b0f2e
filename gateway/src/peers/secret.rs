//! Where the replicas' shared secret comes from, and how a change reaches
//! the [`Keyring`]:
//!
//! - **fixed**: given on the command line, never changes;
//! - **a file** (a mounted Secret): re-read every [`FILE_REFRESH`];
//! - **a Kubernetes Secret** in the gateway's namespace, read and watched
//!   through the API, so every replica sees a change within moments of
//!   the others. With `generate`, an empty or missing key is filled with a
//!   random value by a patch conditioned on the Secret's resourceVersion:
//!   the first replica's write wins and the others read its value. The
//!   chart renders that Secret without data, so a render holds nothing
//!   random (`helm template` is a pure function of its values, as GitOps
//!   needs), the secret never leaves the cluster, and the Secret still
//!   belongs to the release (deleted with it). The gateway needs no right
//!   to create Secrets (which would let it mint any ServiceAccount's
//!   token): only to read, watch and patch this one, by name.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use prometheus::IntCounterVec;

use super::keyring::{Change, Keyring};
use crate::kube::rbac::RbacRule;

/// How often a secret file is re-read.
pub const FILE_REFRESH: Duration = Duration::from_secs(1);
/// Length of a generated secret, in alphanumeric characters (~285 bits).
pub const GENERATED_LEN: usize = 48;
/// Field manager of the gateway's write of a generated secret.
pub const FIELD_MANAGER: &str = "flexinfer-gateway";
/// Pause before the Secret is read again after a failed call.
const RETRY: Duration = Duration::from_secs(2);

/// The calls [`SecretSource::Kubernetes`] makes, in the gateway's own
/// namespace, on the one named Secret: read and watched (a field selector
/// on its name, which `resourceNames` matches).
pub const PEER_SECRET_READ_RULE: RbacRule = ("", "secrets", &["get", "list", "watch"]);

/// The call added with `generate`: the random secret written with a merge
/// patch, on the same one Secret.
pub const PEER_SECRET_GENERATE_RULE: RbacRule = ("", "secrets", &["patch"]);

/// A Secret of the gateway's namespace holding the shared secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeSecret {
    /// Namespace (the gateway's own).
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key of its `data` holding the secret.
    pub key: String,
    /// Fill an empty or missing key with a random secret.
    pub generate: bool,
    /// Kubeconfig to reach the API server with (else in-cluster).
    pub kubeconfig: Option<PathBuf>,
}

/// Where the shared secret comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// Given on the command line.
    Fixed(Vec<u8>),
    /// A file, re-read every [`FILE_REFRESH`].
    File(PathBuf),
    /// A Secret read and watched through the API.
    Kubernetes(KubeSecret),
}

impl SecretSource {
    /// The secret to start with: read now for a fixed or file secret
    /// (an unreadable file stops the start), `None` for a Kubernetes
    /// Secret (read by the watch).
    pub fn initial(&self) -> anyhow::Result<Option<Vec<u8>>> {
        match self {
            SecretSource::Fixed(secret) => Ok(Some(secret.clone())),
            SecretSource::File(path) => read_file(path).map(Some).map_err(anyhow::Error::msg),
            SecretSource::Kubernetes(_) => Ok(None),
        }
    }
}

fn read_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map(|bytes| bytes.trim_ascii().to_vec())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Keeps a [`Keyring`] on its source's current secret.
pub struct SecretWatch {
    source: SecretSource,
    keys: Arc<Keyring>,
    changes: IntCounterVec,
}

impl SecretWatch {
    /// Watches `source` into `keys`, counting changes in `changes`
    /// (by `result`).
    pub fn new(source: SecretSource, keys: Arc<Keyring>, changes: IntCounterVec) -> Self {
        SecretWatch {
            source,
            keys,
            changes,
        }
    }

    /// Applies one reading of the secret.
    fn apply(&self, secret: &[u8], origin: &str) {
        match self.keys.set(secret) {
            Ok(Change::Unchanged) => {}
            Ok(Change::Loaded) => {
                self.changes.with_label_values(&["loaded"]).inc();
                tracing::info!(origin, "peer shared secret loaded");
            }
            Ok(Change::Rotated) => {
                self.changes.with_label_values(&["rotated"]).inc();
                tracing::info!(
                    origin,
                    grace = ?self.keys.grace(),
                    "peer shared secret changed: signing with both secrets, and accepting both, \
                     until the grace period ends"
                );
            }
            Err(e) => {
                self.changes.with_label_values(&["refused"]).inc();
                tracing::error!(origin, error = %e, "peer shared secret refused; keeping the current one");
            }
        }
    }

    async fn watch_file(&self, path: &std::path::Path, mut shutdown: ShutdownWatch) {
        let origin = path.display().to_string();
        let mut tick = tokio::time::interval(FILE_REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut unreadable = false;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => match read_file(path) {
                    Ok(secret) => {
                        unreadable = false;
                        self.apply(&secret, &origin);
                    }
                    Err(e) => {
                        if !std::mem::replace(&mut unreadable, true) {
                            tracing::warn!(error = %e, "peer shared secret unreadable; keeping the current one");
                        }
                    }
                },
            }
        }
    }

    async fn watch_kube(&self, secret: &KubeSecret, mut shutdown: ShutdownWatch) {
        tokio::select! {
            _ = shutdown.changed() => {}
            _ = self.watch_kube_inner(secret) => {}
        }
    }

    async fn watch_kube_inner(&self, source: &KubeSecret) {
        let client = loop {
            match crate::kube::startup::client(source.kubeconfig.as_deref()).await {
                Ok(client) => break client,
                Err(e) => {
                    tracing::error!(error = %e, "no Kubernetes client for the peer secret; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        };
        let secrets: Api<Secret> = Api::namespaced(client, &source.namespace);
        let origin = format!("Secret {}/{}", source.namespace, source.name);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", source.name));
        let mut events = watcher(secrets.clone(), config).default_backoff().boxed();
        let mut told_missing = false;
        let mut seen = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(s) | Event::InitApply(s)) => {
                    seen = true;
                    match value_of(&s, &source.key) {
                        Some(value) => {
                            told_missing = false;
                            self.apply(&value, &origin);
                        }
                        None if source.generate => generate(&secrets, &s, source).await,
                        None => {
                            if !std::mem::replace(&mut told_missing, true) {
                                tracing::error!(%origin, key = %source.key, "the peer Secret holds no such key; keeping the current secret");
                            }
                        }
                    }
                }
                Ok(Event::Delete(_)) => {
                    tracing::warn!(%origin, "peer Secret deleted; keeping the current secret");
                }
                Ok(Event::InitDone) if !seen && !told_missing => {
                    told_missing = true;
                    tracing::error!(%origin, "the peer Secret does not exist; sharing waits for it");
                }
                Ok(Event::Init | Event::InitDone) => {}
                Err(e) => tracing::warn!(%origin, error = %e, "peer Secret watch failed; retrying"),
            }
        }
    }
}

/// The secret under `key` of `secret`, trimmed; `None` when missing or
/// empty.
fn value_of(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    let data = secret.data.as_ref().and_then(|data| data.get(key));
    let value = data.map(|v| v.0.trim_ascii().to_vec()).or_else(|| {
        secret
            .string_data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|v| v.trim().as_bytes().to_vec())
    })?;
    (!value.is_empty()).then_some(value)
}

/// The merge patch writing a random secret under `key`, conditioned on
/// `resource_version`: a replica that wrote first makes it fail (409).
fn generated_patch(key: &str, resource_version: Option<&str>) -> serde_json::Value {
    use rand::distr::{Alphanumeric, SampleString};
    let value = Alphanumeric.sample_string(&mut rand::rng(), GENERATED_LEN);
    serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "data": {key: k8s_openapi::ByteString(value.into_bytes())},
    })
}

/// Writes a random secret into `secret` (as last seen), until written or
/// another replica wrote first (a conflict: its value arrives through the
/// watch). Failed calls are retried on a fresh reading.
async fn generate(secrets: &Api<Secret>, secret: &Secret, source: &KubeSecret) {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let mut rv = secret.metadata.resource_version.clone();
    loop {
        let patch = generated_patch(&source.key, rv.as_deref());
        match secrets
            .patch(&source.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(name = %source.name, "wrote a random shared secret into the peer Secret");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(name = %source.name, "another replica wrote the peer secret first");
                return;
            }
            Err(e) => {
                tracing::warn!(name = %source.name, error = %e, "cannot write the peer secret; trying again");
                tokio::time::sleep(RETRY).await;
                match secrets.get_opt(&source.name).await {
                    Ok(Some(fresh)) if value_of(&fresh, &source.key).is_none() => {
                        rv = fresh.metadata.resource_version;
                    }
                    // Written meanwhile (or gone): the watch tells.
                    Ok(_) => return,
                    Err(_) => {}
                }
            }
        }
    }
}

#[async_trait]
impl BackgroundService for SecretWatch {
    async fn start(&self, shutdown: ShutdownWatch) {
        match &self.source {
            SecretSource::Fixed(_) => {}
            SecretSource::File(path) => self.watch_file(path, shutdown).await,
            SecretSource::Kubernetes(secret) => self.watch_kube(secret, shutdown).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> KubeSecret {
        KubeSecret {
            namespace: "ns".into(),
            name: "gw-peers".into(),
            key: "secret".into(),
            generate: true,
            kubeconfig: None,
        }
    }

    #[test]
    fn a_generated_secret_is_random_long_and_conditioned_on_the_version() {
        use base64::Engine as _;
        let read = |patch: &serde_json::Value| {
            base64::engine::general_purpose::STANDARD
                .decode(patch["data"]["secret"].as_str().unwrap())
                .unwrap()
        };
        let a = generated_patch("secret", Some("41"));
        let b = generated_patch("secret", Some("41"));
        let (va, vb) = (read(&a), read(&b));
        assert_eq!(va.len(), GENERATED_LEN);
        assert!(va.iter().all(u8::is_ascii_alphanumeric));
        assert_ne!(va, vb, "each write draws a new secret");
        assert_eq!(a["metadata"]["resourceVersion"], "41");
    }

    #[test]
    fn an_empty_or_missing_key_has_no_value() {
        use k8s_openapi::ByteString;
        let mut secret = Secret::default();
        assert!(value_of(&secret, "secret").is_none());
        secret.data = Some([("secret".to_owned(), ByteString(b" \n".to_vec()))].into());
        assert!(value_of(&secret, "secret").is_none());
        secret.data = Some([("secret".to_owned(), ByteString(b"abc\n".to_vec()))].into());
        assert_eq!(value_of(&secret, "secret").unwrap(), b"abc");
        assert!(value_of(&secret, "other").is_none());
    }

    #[test]
    fn a_file_secret_is_read_trimmed_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "  0123456789abcdef-shared\n").unwrap();
        let source = SecretSource::File(path.clone());
        assert_eq!(
            source.initial().unwrap().unwrap(),
            b"0123456789abcdef-shared".to_vec()
        );
        let missing = SecretSource::File(dir.path().join("none"));
        assert!(missing.initial().is_err());
        assert_eq!(
            SecretSource::Kubernetes(self::source()).initial().unwrap(),
            None
        );
    }
}
