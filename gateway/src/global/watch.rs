//! The GlobalProxy from a Kubernetes object instead of a file: one object,
//! watched, each valid version handed to the monitor.

use std::path::PathBuf;

use flexinfer_crds::v1alpha2::GlobalProxy;
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::watch;

use super::config::GlobalConfig;
use super::status::{SpecVerdict, StatusDocument};
use crate::kube::rbac::RbacRule;

/// The permissions the global gateway needs to read its GlobalProxy (not
/// part of [`crate::kube::rbac::RBAC_RULES`]: the chart's gateway does not
/// run in global mode).
pub const GLOBAL_RBAC_RULES: &[RbacRule] = &[
    ("ai.flexinfer", "globalproxies", &["list", "watch"]),
    ("ai.flexinfer", "globalproxies/status", &["patch"]),
];

/// What the gateway writes into the object's `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStatus {
    /// The cluster first requests go to under the Failover strategy.
    pub active_cluster: Option<String>,
    /// Member gateways counted healthy.
    pub healthy_clusters: i32,
    /// Member gateways configured.
    pub total_clusters: i32,
}

/// Where the GlobalProxy object is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalObject {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Kubeconfig to use (default: in-cluster, then `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
}

impl GlobalObject {
    /// Parses `namespace/name`.
    pub fn parse(reference: &str, kubeconfig: Option<PathBuf>) -> Result<Self, String> {
        match reference.trim().split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(GlobalObject {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    kubeconfig,
                })
            }
            _ => Err(format!(
                "FLEXINFER_GLOBAL_OBJECT must be NAMESPACE/NAME (got {reference:?})"
            )),
        }
    }
}

/// Watches the object until the receiver is dropped, sending each version
/// that validates, and writes each new [`ProxyStatus`] into its `status`
/// with the `Ready` and `Accepted` conditions ([`super::status`]). An
/// invalid version is logged and reported in `Accepted`, and the previous
/// one stays in force; so does the last one when the object is deleted.
pub async fn run(
    object: GlobalObject,
    tx: watch::Sender<Option<GlobalConfig>>,
    status: watch::Receiver<Option<ProxyStatus>>,
) {
    let client = match crate::kube::startup::client(object.kubeconfig.as_deref()).await {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "global mode: no Kubernetes client; no GlobalProxy to route by");
            return;
        }
    };
    let api: Api<GlobalProxy> = Api::namespaced(client, &object.namespace);
    let (verdict_tx, verdict) = watch::channel(None);
    let writer = tokio::spawn(write_status(
        api.clone(),
        object.name.clone(),
        status,
        verdict,
    ));
    let config = watcher::Config::default().fields(&format!("metadata.name={}", object.name));
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let proxy = match event {
            Ok(Event::Apply(p) | Event::InitApply(p)) => p,
            Ok(Event::Delete(_)) => {
                tracing::warn!(namespace = %object.namespace, name = %object.name, "GlobalProxy deleted; keeping its last clusters");
                continue;
            }
            Ok(Event::Init | Event::InitDone) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "GlobalProxy watch failed; retrying");
                continue;
            }
        };
        if proxy.metadata.name.as_deref() != Some(object.name.as_str()) {
            continue;
        }
        let generation = proxy.metadata.generation;
        match GlobalConfig::from_spec(&proxy.spec) {
            Ok(config) => {
                verdict_tx.send_replace(Some(SpecVerdict {
                    generation,
                    refused: None,
                }));
                if tx.send(Some(config)).is_err() {
                    break;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, name = %object.name, "invalid GlobalProxy; keeping the previous clusters");
                verdict_tx.send_replace(Some(SpecVerdict {
                    generation,
                    refused: Some(e.to_string()),
                }));
            }
        }
    }
    writer.abort();
}

/// Patches `status` whenever the monitor reports a new one or a spec
/// version is accepted or refused; a failed write is logged and retried
/// with the next change.
async fn write_status(
    api: Api<GlobalProxy>,
    name: String,
    mut status: watch::Receiver<Option<ProxyStatus>>,
    mut verdict: watch::Receiver<Option<SpecVerdict>>,
) {
    let mut document = StatusDocument::default();
    loop {
        tokio::select! {
            changed = status.changed() => if changed.is_err() { break },
            changed = verdict.changed() => if changed.is_err() { break },
        }
        let seen = status.borrow_and_update().clone();
        let judged = verdict.borrow_and_update().clone();
        if seen.is_none() && judged.is_none() {
            continue;
        }
        let patch = document.patch(seen.as_ref(), judged.as_ref(), std::time::SystemTime::now());
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %e, name = %name, "cannot write the GlobalProxy status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_namespace_slash_name() {
        let o = GlobalObject::parse("edge/global", None).unwrap();
        assert_eq!((o.namespace.as_str(), o.name.as_str()), ("edge", "global"));
        for bad in ["global", "/global", "edge/", "a/b/c", ""] {
            assert!(GlobalObject::parse(bad, None).is_err(), "{bad}");
        }
    }
}
