//! Connecting to the cluster and checking, before serving, that the CRDs
//! are installed and RBAC lets the gateway read what it watches, so that a
//! misconfigured install fails at start-up with a message saying what to fix.

use std::path::Path;

use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::reflect::Kinds;
use super::scope::Scope;

/// API group of the FlexInfer CRDs.
pub const GROUP: &str = "ai.flexinfer";

/// A client from `kubeconfig`, else the in-cluster config, else
/// `~/.kube/config` (kube's `Config::infer`).
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display())
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("invalid kubeconfig {}: {e}", path.display()))?
        }
        None => Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "no Kubernetes configuration: not running in a cluster and no kubeconfig found ({e}); \
                 pass --kubeconfig or set KUBECONFIG"
            )
        })?,
    };
    Client::try_from(config).map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client: {e}"))
}

/// Whether `plural` is served under `group_version`; `Err` when the API
/// server cannot be reached.
pub(crate) async fn served(
    client: &Client,
    group_version: &str,
    plural: &str,
) -> anyhow::Result<bool> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(anyhow::anyhow!(
            "cannot reach the Kubernetes API server: {e}"
        )),
    }
}

fn missing_crd(kind: &str, plural: &str, version: &str) -> String {
    format!(
        "the {kind} CRD ({plural}.{GROUP}, version {version}) is not installed in the cluster: \
         install the FlexInfer CRDs (the Helm chart's crds/, or `flexinfer-crdgen | kubectl apply -f -`)"
    )
}

/// Checks the CRDs and list permissions; returns which optional kinds to
/// watch. `Model` (v1alpha2) is required; ModelDeployment, GPUGroup and
/// LoRAAdapter are watched when installed (a warning names a missing one).
pub async fn check(client: &Client, scope: &Scope) -> anyhow::Result<Kinds> {
    if !served(client, "ai.flexinfer/v1alpha2", "models").await? {
        anyhow::bail!(missing_crd("Model", "models", "v1alpha2"));
    }
    let kinds = Kinds {
        deployments: served(client, "ai.flexinfer/v1alpha1", "modeldeployments").await?,
        adapters: served(client, "ai.flexinfer/v1alpha2", "loraadapters").await?,
        groups: served(client, "ai.flexinfer/v1alpha1", "gpugroups").await?,
    };
    for (on, kind, plural, version) in [
        (
            kinds.deployments,
            "ModelDeployment",
            "modeldeployments",
            "v1alpha1",
        ),
        (kinds.adapters, "LoRAAdapter", "loraadapters", "v1alpha2"),
        (kinds.groups, "GPUGroup", "gpugroups", "v1alpha1"),
    ] {
        if !on {
            tracing::warn!(
                "{}; not watching {kind}s",
                missing_crd(kind, plural, version)
            );
        }
    }

    use flexinfer_crds::v1alpha1::{GPUGroup, ModelDeployment};
    use flexinfer_crds::v1alpha2::{LoRAAdapter, Model};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let namespaces: Vec<Option<&str>> = match scope.namespaces() {
        Some(list) => list.iter().map(|n| Some(n.as_str())).collect(),
        None => vec![None],
    };
    for ns in namespaces {
        can_list::<Model>(client, ns, GROUP, "models").await?;
        if kinds.deployments {
            can_list::<ModelDeployment>(client, ns, GROUP, "modeldeployments").await?;
        }
        if kinds.adapters {
            can_list::<LoRAAdapter>(client, ns, GROUP, "loraadapters").await?;
        }
        if kinds.groups {
            can_list::<GPUGroup>(client, ns, GROUP, "gpugroups").await?;
        }
        can_list::<EndpointSlice>(client, ns, "discovery.k8s.io", "endpointslices").await?;
        can_list::<k8s_openapi::api::core::v1::Service>(client, ns, "", "services").await?;
    }
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    list_one(&nodes, None, "", "nodes").await?;
    Ok(kinds)
}

async fn can_list<K>(
    client: &Client,
    namespace: Option<&str>,
    group: &str,
    plural: &str,
) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    list_one(&api, namespace, group, plural).await
}

async fn list_one<K>(
    api: &Api<K>,
    namespace: Option<&str>,
    group: &str,
    plural: &str,
) -> anyhow::Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let resource = if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    };
    let place = namespace.map_or("cluster-wide".to_string(), |ns| {
        format!("in namespace {ns}")
    });
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 403 => anyhow::bail!(
            "RBAC denies listing {resource} {place}: grant the gateway's service account the \
             rules of flexinfer_gateway::kube::RBAC_RULES (docs/gateway.md, \"Kubernetes mode\"); \
             the API server said: {}",
            s.message
        ),
        Err(kube::Error::Api(s)) if s.code == 404 && namespace.is_some() => anyhow::bail!(
            "cannot list {resource} {place}: {} (does the namespace exist?)",
            s.message
        ),
        Err(e) => anyhow::bail!("cannot list {resource} {place}: {e}"),
    }
}
