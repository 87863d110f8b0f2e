//! Current API version (`ai.flexinfer/v1alpha2`).

mod catalog;
mod cluster;
mod federation;
mod lora;
pub mod model;
mod model_status;
mod quantization;
mod source;

pub use catalog::{
    CatalogEntry, CatalogFilter, ModelCatalog, ModelCatalogSpec, ModelCatalogStatus, OciProvider,
    RegistrySource, RegistryType,
};
pub use cluster::{Cluster, ClusterModelStatus, ClusterPhase, ClusterSpec, ClusterStatus};
pub use federation::{
    ClusterRoutingStrategy, FederatedModel, FederatedModelClusterStatus, FederatedModelPlacement,
    FederatedModelRouting, FederatedModelSpec, FederatedModelStatus, GlobalProxy,
    GlobalProxyCluster, GlobalProxySpec, GlobalProxyStatus, GlobalProxyTls,
};
pub use lora::{
    LoRAAdapter, LoRAAdapterPhase, LoRAAdapterSource, LoRAAdapterSpec, LoRAAdapterStatus,
    LoRASourceType, VLLM_LOAD_LORA_PATH, VLLM_UNLOAD_LORA_PATH,
};
pub use model::{
    CacheSpec, CacheStrategy, CompilationCacheSpec, FlashLoaderSpec, GpuSpec, GpuVendor,
    KvCachePressurePolicy, KvCacheReconfigureStrategy, KvCacheSpec, LiteLlmSpec, Model,
    ModelCapabilities, ModelSpec, ServerlessSpec, WarmPolicy,
};
pub use model_status::{
    CacheStatus, GpuStatus, KvCacheStatus, LoadingSubstage, MetricsStatus, ModelPhase, ModelStatus,
    SharedGroupState, SharedGroupStatus, PREEMPTED_BY_GPU_LEASE_PREFIX,
    PREEMPTED_BY_PRIMARY_PREFIX,
};
pub use quantization::{
    CalibrationSpec, DenseModulePolicy, DynamicExclusion, QuantizationFormat, QuantizationSpec,
    QuantizationStatus,
};
pub use source::ModelSource;

/// A spec that fails the checks a controller runs before acting on it; the
/// message names the offending field (`spec.apiEndpoint must use https`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSpec(pub String);

impl InvalidSpec {
    fn new(message: &str) -> InvalidSpec {
        InvalidSpec(message.to_owned())
    }
}

/// Splits a URL into its lower-case scheme and its host (without user
/// info, port is kept, no path, query or fragment), the way Go's
/// `url.Parse` does for the inputs specs contain: `https:` has scheme
/// `https` and no host, `example.com` has neither.
fn split_url(url: &str) -> (String, &str) {
    let Some((scheme, rest)) = url.split_once(':') else {
        return (String::new(), "");
    };
    let valid_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return (String::new(), "");
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return (scheme.to_ascii_lowercase(), "");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    (scheme.to_ascii_lowercase(), host)
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn splits_urls_like_go() {
        assert_eq!(
            split_url("https://k8s.example.com:6443/x"),
            ("https".to_owned(), "k8s.example.com:6443")
        );
        assert_eq!(split_url("HTTP://user@host/"), ("http".to_owned(), "host"));
        assert_eq!(split_url("https:"), ("https".to_owned(), ""));
        assert_eq!(split_url("k8s.example.com"), (String::new(), ""));
        assert_eq!(split_url("1http://x"), (String::new(), ""));
    }
}
