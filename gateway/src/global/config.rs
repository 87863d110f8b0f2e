//! The global mode's configuration: a `GlobalProxy` object (or its `spec`)
//! read from YAML and validated into the member clusters in locality order.

use std::path::Path;

use flexinfer_crds::v1alpha2::{ClusterRoutingStrategy, GlobalProxySpec};

/// A problem with the GlobalProxy file.
#[derive(Debug, thiserror::Error)]
pub enum GlobalConfigError {
    /// The file could not be read.
    #[error("cannot read GlobalProxy file {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The YAML does not parse as a GlobalProxy or its spec.
    #[error("invalid GlobalProxy YAML: {0}")]
    Parse(String),
    /// The spec fails validation.
    #[error("invalid GlobalProxy: {0}")]
    Invalid(String),
}

/// One member cluster's gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberCluster {
    /// Logical cluster name (metrics label, `X-Flexinfer-Cluster`).
    pub name: String,
    /// The gateway's base URL, as configured.
    pub endpoint: String,
    /// `host:port` to resolve and connect to.
    pub authority: String,
    /// Host name sent in `Host` by the health probe.
    pub host: String,
    /// Share of requests under the Weighted strategy (1 when unset).
    pub weight: u32,
}

/// A validated GlobalProxy: how to spread requests and the member
/// clusters, nearest first. The default has no cluster (nothing read yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalConfig {
    /// Routing mode across clusters.
    pub strategy: ClusterRoutingStrategy,
    /// Member clusters in locality order: `spec.failoverOrder` first (with
    /// the Failover strategy), then the rest in `spec.clusters` order.
    pub clusters: Vec<MemberCluster>,
}

impl GlobalConfig {
    /// Reads and validates a GlobalProxy file.
    pub fn load(path: &Path) -> Result<Self, GlobalConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| GlobalConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    /// Parses a `GlobalProxy` manifest (`kind: GlobalProxy`, the object
    /// `kubectl get globalproxy -o yaml` prints) or a bare spec.
    pub fn from_yaml(text: &str) -> Result<Self, GlobalConfigError> {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| GlobalConfigError::Parse(e.to_string()))?;
        let kind = doc.get("kind").and_then(serde_yaml::Value::as_str);
        if let Some(kind) = kind.filter(|k| *k != "GlobalProxy") {
            return Err(GlobalConfigError::Parse(format!(
                "expected kind GlobalProxy, found {kind}"
            )));
        }
        let spec = match (kind, doc.get("spec")) {
            (Some(_), Some(spec)) => spec.clone(),
            (Some(_), None) => {
                return Err(GlobalConfigError::Parse(
                    "GlobalProxy without spec".to_string(),
                ))
            }
            (None, _) => doc,
        };
        let spec: GlobalProxySpec =
            serde_yaml::from_value(spec).map_err(|e| GlobalConfigError::Parse(e.to_string()))?;
        Self::from_spec(&spec)
    }

    /// Validates a spec with the CRD's own checks, then what this gateway
    /// needs: plain-HTTP endpoints without a path.
    pub fn from_spec(spec: &GlobalProxySpec) -> Result<Self, GlobalConfigError> {
        spec.validate_basic()
            .map_err(|e| GlobalConfigError::Invalid(e.to_string()))?;
        let mut members = Vec::with_capacity(spec.clusters.len());
        for cluster in &spec.clusters {
            let name = cluster.name.trim().to_string();
            let (authority, host) = parse_endpoint(&name, cluster.endpoint.trim())?;
            let weight = match cluster.weight {
                None => 1,
                Some(w) if w >= 1 => w as u32,
                Some(w) => {
                    return Err(GlobalConfigError::Invalid(format!(
                        "spec.clusters[{name:?}].weight must be >= 1 (got {w})"
                    )))
                }
            };
            members.push(MemberCluster {
                name,
                endpoint: cluster.endpoint.trim().to_string(),
                authority,
                host,
                weight,
            });
        }
        let mut ordered = Vec::with_capacity(members.len());
        if spec.strategy == ClusterRoutingStrategy::Failover {
            for name in &spec.failover_order {
                if let Some(pos) = members.iter().position(|m| m.name == name.trim()) {
                    ordered.push(members.remove(pos));
                }
            }
        }
        ordered.append(&mut members);
        Ok(GlobalConfig {
            strategy: spec.strategy,
            clusters: ordered,
        })
    }
}

/// `http://host[:port][/]` → (`host:port`, `host`).
fn parse_endpoint(name: &str, endpoint: &str) -> Result<(String, String), GlobalConfigError> {
    let invalid =
        |why: &str| GlobalConfigError::Invalid(format!("spec.clusters[{name:?}].endpoint {why}"));
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| invalid(&format!("is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(invalid(
                "uses https, which this gateway does not speak to member clusters: \
                 use the member gateway's plain-HTTP address (e.g. over a private network or mesh)",
            ))
        }
        _ => return Err(invalid("must use http")),
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(invalid("must not have a path: give the gateway's base URL"));
    }
    let host = uri.host().unwrap_or_default();
    if host.is_empty() {
        return Err(invalid("host is required"));
    }
    let port = uri.port_u16().unwrap_or(80);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let authority = if bare.contains(':') {
        format!("[{bare}]:{port}")
    } else {
        format!("{bare}:{port}")
    };
    Ok((authority, host.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "\
apiVersion: ai.flexinfer/v1alpha2
kind: GlobalProxy
metadata:
  name: global
spec:
  externalEndpoint: llm.example.com
  strategy: Failover
  failoverOrder: [west, east]
  clusters:
  - name: east
    endpoint: http://gw.east.example.com:8080
  - name: west
    endpoint: http://10.1.2.3/
    weight: 3
  - name: south
    endpoint: http://[fd00::1]:9000
";

    #[test]
    fn manifest_orders_clusters_by_failover_order() {
        let config = GlobalConfig::from_yaml(MANIFEST).unwrap();
        assert_eq!(config.strategy, ClusterRoutingStrategy::Failover);
        let names: Vec<_> = config.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["west", "east", "south"]);
        let west = &config.clusters[0];
        assert_eq!(
            (west.authority.as_str(), west.host.as_str(), west.weight),
            ("10.1.2.3:80", "10.1.2.3", 3)
        );
        assert_eq!(config.clusters[1].authority, "gw.east.example.com:8080");
        assert_eq!(config.clusters[1].weight, 1);
        assert_eq!(config.clusters[2].authority, "[fd00::1]:9000");
    }

    #[test]
    fn the_shipped_example_loads() {
        let config =
            GlobalConfig::from_yaml(include_str!("../../../examples/global.yaml")).unwrap();
        assert_eq!(config.strategy, ClusterRoutingStrategy::Failover);
        let names: Vec<_> = config.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["eu-west", "eu-central", "us-east"]);
    }

    #[test]
    fn bare_spec_keeps_list_order() {
        let config = GlobalConfig::from_yaml(
            "externalEndpoint: llm\nclusters:\n- {name: a, endpoint: 'http://a:1'}\n- {name: b, endpoint: 'http://b:2'}\n",
        )
        .unwrap();
        assert_eq!(config.strategy, ClusterRoutingStrategy::RoundRobin);
        let names: Vec<_> = config.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn errors_name_the_problem() {
        let error = |yaml: &str| GlobalConfig::from_yaml(yaml).unwrap_err().to_string();
        let e = error("kind: Model\nspec: {}\n");
        assert!(e.contains("expected kind GlobalProxy"), "{e}");
        let e = error("clusters: []\n");
        assert!(e.contains("externalEndpoint"), "{e}");
        let e = error("externalEndpoint: x\nclusters: []\n");
        assert!(
            e.contains("spec.clusters must include at least one cluster endpoint"),
            "{e}"
        );
        let e = error("externalEndpoint: x\nclusters: [{name: a, endpoint: 'https://a'}]\n");
        assert!(e.contains("uses https"), "{e}");
        let e = error("externalEndpoint: x\nclusters: [{name: a, endpoint: 'http://a/v1'}]\n");
        assert!(e.contains("must not have a path"), "{e}");
        let e =
            error("externalEndpoint: x\nclusters: [{name: a, endpoint: 'http://a', weight: 0}]\n");
        assert!(e.contains("weight must be >= 1"), "{e}");
        let e = error(
            "externalEndpoint: x\nstrategy: Failover\nfailoverOrder: [z]\nclusters: [{name: a, endpoint: 'http://a'}]\n",
        );
        assert!(e.contains("references unknown cluster \"z\""), "{e}");
    }
}
