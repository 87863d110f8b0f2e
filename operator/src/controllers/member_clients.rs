//! Clients for member clusters, built from the kubeconfig Secrets that
//! `Cluster` objects name, cached per cluster.
//!
//! The Cluster controller calls [`MemberClients::refresh`] before every
//! probe: it re-reads the Secret and rebuilds the client only when the
//! Secret (name or `resourceVersion`) changed, so a rotated kubeconfig is
//! picked up at the next probe. The FederatedModel controller takes the
//! cached client ([`MemberClients::client`]) and builds one only on a miss.

use std::collections::HashMap;
use std::sync::Mutex;

use flexinfer_crds::v1alpha2::Cluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::federation::kubeconfig::{self, KubeconfigProblem, MemberTimeouts};

/// Why no client for a member cluster could be had.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The Secret named by `spec.secretRef` does not exist.
    #[error("Secret {0} not found")]
    SecretNotFound(String),
    /// The Secret holds no usable kubeconfig.
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigProblem),
    /// kube could not build a client from the kubeconfig.
    #[error("cannot build a client from Secret {secret}: {message}")]
    Client {
        /// Secret name.
        secret: String,
        /// kube's error.
        message: String,
    },
    /// Reading the Secret from the hub failed.
    #[error("cannot read the kubeconfig Secret: {0}")]
    Hub(#[from] kube::Error),
}

impl MemberError {
    /// Condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            MemberError::SecretNotFound(_) => "SecretNotFound",
            MemberError::Kubeconfig(p) => p.reason(),
            MemberError::Client { .. } => "KubeconfigInvalid",
            MemberError::Hub(_) => "SecretUnreadable",
        }
    }
}

#[derive(Clone)]
struct Cached {
    secret: String,
    version: Option<String>,
    client: Client,
}

type Key = (String, String);

/// Cache of member-cluster clients, keyed by the `Cluster` object.
pub struct MemberClients {
    timeouts: MemberTimeouts,
    cache: Mutex<HashMap<Key, Cached>>,
}

impl std::fmt::Debug for MemberClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClients")
            .field("timeouts", &self.timeouts)
            .field("cached", &self.len())
            .finish()
    }
}

fn key(cluster: &Cluster) -> Key {
    (
        cluster.namespace().unwrap_or_else(|| "default".into()),
        cluster.name_any(),
    )
}

impl MemberClients {
    /// An empty cache; clients get `timeouts`.
    pub fn new(timeouts: MemberTimeouts) -> MemberClients {
        MemberClients {
            timeouts,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Clients held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no client is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cached>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the client of `namespace/name` (the Cluster is gone or its
    /// Secret no longer works).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// The cached client of `cluster`, else one built from its Secret.
    pub async fn client(&self, hub: &Client, cluster: &Cluster) -> Result<Client, MemberError> {
        let k = key(cluster);
        let secret = &cluster.spec.secret_ref.name;
        if let Some(c) = self.lock().get(&k).filter(|c| &c.secret == secret) {
            return Ok(c.client.clone());
        }
        Ok(self.refresh(hub, cluster).await?.0)
    }

    /// Re-reads `cluster`'s Secret and returns its client, rebuilt when
    /// the Secret changed (second value `true`). On an error the cached
    /// client is dropped.
    pub async fn refresh(
        &self,
        hub: &Client,
        cluster: &Cluster,
    ) -> Result<(Client, bool), MemberError> {
        let k = key(cluster);
        let result = self.load(hub, cluster, &k).await;
        if result.is_err() {
            self.lock().remove(&k);
        }
        result
    }

    async fn load(
        &self,
        hub: &Client,
        cluster: &Cluster,
        k: &Key,
    ) -> Result<(Client, bool), MemberError> {
        let name = cluster.spec.secret_ref.name.clone();
        let secrets: Api<Secret> = Api::namespaced(hub.clone(), &k.0);
        let secret = secrets
            .get_opt(&name)
            .await?
            .ok_or_else(|| MemberError::SecretNotFound(name.clone()))?;
        let version = secret.metadata.resource_version.clone();
        if let Some(c) = self.lock().get(k) {
            if c.secret == name && c.version == version && version.is_some() {
                return Ok((c.client.clone(), false));
            }
        }
        let kc = kubeconfig::parse(&secret)?;
        let config = kubeconfig::member_config(kc, &name, self.timeouts).await?;
        let client = Client::try_from(config).map_err(|e| MemberError::Client {
            secret: name.clone(),
            message: e.to_string(),
        })?;
        self.lock().insert(
            k.clone(),
            Cached {
                secret: name,
                version,
                client: client.clone(),
            },
        );
        Ok((client, true))
    }
}
