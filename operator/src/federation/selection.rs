//! Which registered clusters a FederatedModel selects.
//!
//! A cluster is selected when it is named in `placement.clusters` **or**
//! its labels match `placement.clusterSelector` (the union of both). A
//! cluster's labels are its `metadata.labels` overlaid with `spec.labels`
//! (spec wins on the same key). Only selected clusters whose phase is
//! `Ready` receive replicas; that filter lives in [`super::distribution`].

use std::collections::{BTreeMap, BTreeSet};

use flexinfer_crds::v1alpha2::{Cluster, ClusterPhase, FederatedModelPlacement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

/// A label selector the federation cannot evaluate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.placement.clusterSelector: {0}")]
pub struct InvalidSelector(pub String);

/// Whether `labels` match `selector` (Kubernetes semantics: every
/// `matchLabels` pair and every `matchExpressions` requirement holds; an
/// empty selector matches everything).
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSelector> {
    if let Some(pairs) = &selector.match_labels {
        if pairs.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return Ok(false);
        }
    }
    for req in selector.match_expressions.iter().flatten() {
        let value = labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        let holds = match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "operator {} on key {:?} needs values",
                    req.operator, req.key
                )))
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => !value.is_some_and(|v| values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err(InvalidSelector(format!(
                    "unknown operator {other:?} on key {:?}",
                    req.key
                )))
            }
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The labels placement matches on: `metadata.labels` overlaid with
/// `spec.labels`.
pub fn cluster_labels(cluster: &Cluster) -> BTreeMap<String, String> {
    let mut labels = cluster.labels().clone();
    labels.extend(cluster.spec.labels.clone());
    labels
}

/// What placement needs to know about one registered cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    /// Name of the `Cluster` object.
    pub name: String,
    /// Labels placement matches on ([`cluster_labels`]).
    pub labels: BTreeMap<String, String>,
    /// Whether the cluster may receive replicas now: phase `Ready` and not
    /// being deleted.
    pub ready: bool,
}

impl ClusterView {
    /// The view of a `Cluster` object.
    pub fn of(cluster: &Cluster) -> ClusterView {
        let phase = cluster.status.as_ref().and_then(|s| s.phase);
        ClusterView {
            name: cluster.name_any(),
            labels: cluster_labels(cluster),
            ready: phase == Some(ClusterPhase::Ready)
                && cluster.metadata.deletion_timestamp.is_none(),
        }
    }
}

/// Result of [`select`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selection {
    /// Selected clusters that exist, sorted by name.
    pub selected: Vec<ClusterView>,
    /// Names in `placement.clusters` with no `Cluster` object, sorted.
    pub missing: Vec<String>,
}

/// The clusters `placement` selects among `clusters`.
pub fn select(
    placement: &FederatedModelPlacement,
    clusters: &[ClusterView],
) -> Result<Selection, InvalidSelector> {
    let named: BTreeSet<&str> = placement
        .clusters
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .collect();
    let mut selected = Vec::new();
    for cluster in clusters {
        let by_name = named.contains(cluster.name.as_str());
        let by_label = match &placement.cluster_selector {
            Some(selector) => selector_matches(selector, &cluster.labels)?,
            None => false,
        };
        if by_name || by_label {
            selected.push(cluster.clone());
        }
    }
    selected.sort_by(|a, b| a.name.cmp(&b.name));
    let existing: BTreeSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let missing = named
        .into_iter()
        .filter(|n| !existing.contains(n))
        .map(str::to_owned)
        .collect();
    Ok(Selection { selected, missing })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn view(name: &str, pairs: &[(&str, &str)], ready: bool) -> ClusterView {
        ClusterView {
            name: name.to_owned(),
            labels: labels(pairs),
            ready,
        }
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn selector_semantics() {
        let eu = labels(&[("region", "eu"), ("gpu", "nvidia")]);
        let us = labels(&[("region", "us")]);
        let by_region = LabelSelector {
            match_labels: Some(labels(&[("region", "eu")])),
            match_expressions: None,
        };
        assert_eq!(selector_matches(&by_region, &eu), Ok(true));
        assert_eq!(selector_matches(&by_region, &us), Ok(false));
        assert_eq!(selector_matches(&LabelSelector::default(), &us), Ok(true));

        let cases = [
            (expr("region", "In", &["eu", "ap"]), true, false),
            (expr("region", "NotIn", &["eu"]), false, true),
            (expr("gpu", "Exists", &[]), true, false),
            (expr("gpu", "DoesNotExist", &[]), false, true),
        ];
        for (req, on_eu, on_us) in cases {
            let s = LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![req.clone()]),
            };
            assert_eq!(selector_matches(&s, &eu), Ok(on_eu), "{req:?}");
            assert_eq!(selector_matches(&s, &us), Ok(on_us), "{req:?}");
        }
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr("gpu", "Near", &[])]),
        };
        assert_eq!(
            selector_matches(&bad, &eu).unwrap_err().to_string(),
            "spec.placement.clusterSelector: unknown operator \"Near\" on key \"gpu\""
        );
        let empty_in = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr("gpu", "In", &[])]),
        };
        assert!(selector_matches(&empty_in, &eu).is_err());
    }

    #[test]
    fn names_and_selector_are_a_union_and_missing_names_are_reported() {
        let clusters = [
            view("west", &[("region", "us")], true),
            view("east", &[("region", "eu")], false),
            view("north", &[("region", "eu")], true),
        ];
        let placement = FederatedModelPlacement {
            cluster_selector: Some(LabelSelector {
                match_labels: Some(labels(&[("region", "eu")])),
                match_expressions: None,
            }),
            clusters: vec!["west".into(), "gone".into(), " ".into()],
            ..Default::default()
        };
        let s = select(&placement, &clusters).unwrap();
        let names: Vec<&str> = s.selected.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["east", "north", "west"]);
        assert_eq!(s.missing, ["gone"]);

        let only_names = FederatedModelPlacement {
            clusters: vec!["north".into()],
            ..Default::default()
        };
        let s = select(&only_names, &clusters).unwrap();
        assert_eq!(s.selected, vec![clusters[2].clone()]);
        assert!(s.missing.is_empty());
    }

    #[test]
    fn spec_labels_override_metadata_labels() {
        let mut c = Cluster::new(
            "east",
            flexinfer_crds::v1alpha2::ClusterSpec {
                api_endpoint: "https://east.example.com".into(),
                secret_ref: Default::default(),
                labels: labels(&[("region", "eu-west")]),
                probe_interval: std::time::Duration::from_secs(30).into(),
            },
        );
        c.metadata.labels = Some(labels(&[("region", "eu"), ("tier", "prod")]));
        assert_eq!(
            cluster_labels(&c),
            labels(&[("region", "eu-west"), ("tier", "prod")])
        );
        // No status yet: not ready.
        assert!(!ClusterView::of(&c).ready);
        c.status = Some(flexinfer_crds::v1alpha2::ClusterStatus {
            phase: Some(ClusterPhase::Ready),
            ..Default::default()
        });
        assert!(ClusterView::of(&c).ready);
    }
}
