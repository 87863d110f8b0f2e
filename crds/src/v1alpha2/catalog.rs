//! `ModelCatalog` (v1alpha2): models discovered in OCI (Harbor, GHCR, ECR),
//! HuggingFace or Ollama registries.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defaults;

/// Desired state of a [`ModelCatalog`].
// kube's `printcolumn(...)` arguments repeat `type_ = ...` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ai.flexinfer",
    version = "v1alpha2",
    kind = "ModelCatalog",
    plural = "modelcatalogs",
    singular = "modelcatalog",
    namespaced,
    status = "ModelCatalogStatus",
    shortname = "mcat",
    category = "flexinfer",
    derive = "PartialEq",
    doc = "ModelCatalog syncs model metadata from registries into a browsable list.",
    printcolumn(name = "Models", type_ = "integer", json_path = ".status.totalModels"),
    printcolumn(name = "LastSync", type_ = "date", json_path = ".status.lastSyncTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelCatalogSpec {
    /// Registries to sync from.
    #[schemars(length(min = 1))]
    pub registries: Vec<RegistrySource>,
    /// Time between syncs.
    #[serde(default = "default_sync_interval")]
    #[schemars(extend("default" = defaults::CATALOG_SYNC_INTERVAL_LITERAL))]
    pub sync_interval: kube::core::Duration,
    /// Which models to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<CatalogFilter>,
}

impl ModelCatalogSpec {
    /// Time between syncs.
    pub fn sync_interval(&self) -> Duration {
        self.sync_interval.into()
    }
}

/// Registry protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum RegistryType {
    /// OCI distribution registry: Harbor, GHCR, ECR, ...
    #[serde(rename = "OCI")]
    Oci,
    /// HuggingFace Hub.
    HuggingFace,
    /// Ollama library.
    Ollama,
}

/// One registry endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySource {
    /// Registry protocol.
    #[serde(rename = "type")]
    pub type_: RegistryType,
    /// Registry host (`registry.harbor.lan`, `ghcr.io`,
    /// `123456789.dkr.ecr.us-east-1.amazonaws.com`); required for OCI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Secret with credentials: `kubernetes.io/dockerconfigjson` for OCI,
    /// key `HF_TOKEN` for HuggingFace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// OCI registry flavour; detected from the host when unset (`ghcr.io`
    /// is GHCR, `*.dkr.ecr.*.amazonaws.com` ECR, anything else generic).
    /// Harbor lists the repositories of the project named by the first
    /// path element of `url` (`harbor.lan/models`) through its API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<OciProvider>,
    /// OCI repositories to list, for registries that refuse `/v2/_catalog`
    /// (GHCR, ECR); when empty, generic registries are listed through
    /// `/v2/_catalog`, restricted to the path of `url` when it has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
}

/// OCI registry flavour of a [`RegistrySource`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::without_description)]
pub enum OciProvider {
    /// Any OCI distribution registry.
    Generic,
    /// Harbor: robot accounts, project listing API.
    Harbor,
    /// GitHub Container Registry: any username and a personal access token.
    #[serde(rename = "GHCR")]
    Ghcr,
    /// Amazon ECR: user `AWS` and a login token.
    #[serde(rename = "ECR")]
    Ecr,
}

/// Which models a catalog includes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogFilter {
    /// Models must carry all these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Glob on model names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_pattern: Option<String>,
}

/// One discovered model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// Model name.
    pub name: String,
    /// Registry type it came from.
    pub registry: String,
    /// Fully qualified reference to pull.
    pub reference: String,
    /// Approximate size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
}

/// Observed state of a [`ModelCatalog`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCatalogStatus {
    /// Discovered models.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<CatalogEntry>,
    /// Number of discovered models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_models: Option<i32>,
    /// When the last sync finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    /// Latest observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

fn default_sync_interval() -> kube::core::Duration {
    defaults::CATALOG_SYNC_INTERVAL.into()
}
