//! Service labels of models and the label groups they form.
//!
//! A model's service labels come from its Service (same name and namespace)
//! and from the model itself. `ai.flexinfer/active-services` decides when
//! the key is present, even empty, the Service's first: the operator writes
//! it on the Services of shared-GPU groups, the active member's value being
//! its labels and the others' empty. Otherwise the labels are those of
//! `flexinfer.ai/service-labels` (Service, then model) and of
//! `spec.serviceLabels`. A label claimed by one model is an alias of it; one
//! claimed by two or more is a label group ([`crate::label_groups`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flexinfer_crds::labels;
use flexinfer_operator::lifecycle::Phase;
use k8s_openapi::api::core::v1::Service;

use super::models::ClusterModel;
use crate::label_groups::LabelGroupSpec;

/// Annotations of the watched Services by namespace and name.
pub struct ServiceAnnotations<'a>(HashMap<(&'a str, &'a str), &'a BTreeMap<String, String>>);

impl<'a> ServiceAnnotations<'a> {
    /// Indexes `services`.
    pub fn collect(services: &'a [Arc<Service>]) -> Self {
        let mut out = HashMap::with_capacity(services.len());
        for s in services {
            let meta = &s.metadata;
            if let (Some(name), Some(annotations)) = (&meta.name, &meta.annotations) {
                let ns = meta.namespace.as_deref().unwrap_or("default");
                out.insert((ns, name.as_str()), annotations);
            }
        }
        Self(out)
    }

    /// The annotations of Service `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&'a BTreeMap<String, String>> {
        self.0.get(&(namespace, name)).copied()
    }
}

/// The service labels of a model: its Service's annotations, its own, and
/// its spec's list; trimmed, without empty items and repeats.
pub fn service_labels(
    service: Option<&BTreeMap<String, String>>,
    model: &BTreeMap<String, String>,
    spec: &[String],
) -> Vec<String> {
    let sources = [service, Some(model)];
    if let Some(active) = sources
        .iter()
        .flatten()
        .find_map(|a| a.get(labels::ACTIVE_SERVICES))
    {
        return unique(labels::split_list(active));
    }
    let annotated = sources
        .iter()
        .flatten()
        .filter_map(|a| a.get(labels::SERVICE_LABELS))
        .flat_map(|v| labels::split_list(v));
    let listed = spec.iter().map(|s| s.trim().to_string());
    unique(annotated.chain(listed).filter(|s| !s.is_empty()))
}

fn unique(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The label groups of `models` (each model lists the groups it is in),
/// by label, members with whether each is Ready.
pub fn group_specs(models: &[ClusterModel]) -> Vec<LabelGroupSpec> {
    let mut groups: BTreeMap<&str, Vec<(String, bool)>> = BTreeMap::new();
    for m in models {
        for label in &m.group_labels {
            groups
                .entry(label.as_str())
                .or_default()
                .push((m.config.name.clone(), m.phase == Phase::Ready));
        }
    }
    groups
        .into_iter()
        .map(|(label, mut members)| {
            members.sort();
            LabelGroupSpec {
                label: label.to_string(),
                members,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn active_services_decides_when_present_even_empty() {
        let service = map(&[
            ("flexinfer.ai/service-labels", "chat"),
            ("ai.flexinfer/active-services", ""),
        ]);
        let spec = vec!["chat".to_string()];
        assert!(service_labels(Some(&service), &BTreeMap::new(), &spec).is_empty());
        let service = map(&[("ai.flexinfer/active-services", " chat , code ")]);
        assert_eq!(
            service_labels(Some(&service), &BTreeMap::new(), &[]),
            ["chat", "code"]
        );
        // The model's own annotation counts when the Service has none.
        let model = map(&[("ai.flexinfer/active-services", "")]);
        assert!(service_labels(None, &model, &spec).is_empty());
    }

    #[test]
    fn otherwise_every_source_counts_once() {
        let service = map(&[("flexinfer.ai/service-labels", "chat,code")]);
        let model = map(&[("flexinfer.ai/service-labels", "code, fast")]);
        let spec = vec![" chat ".to_string(), "".to_string(), "draw".to_string()];
        assert_eq!(
            service_labels(Some(&service), &model, &spec),
            ["chat", "code", "fast", "draw"]
        );
    }
}
