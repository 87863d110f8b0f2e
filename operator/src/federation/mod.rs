//! Federation across clusters: the pure decisions behind the `Cluster` and
//! `FederatedModel` controllers ([`crate::controllers::cluster`],
//! [`crate::controllers::federated_model`]).
//!
//! - [`selection`]: which registered clusters a FederatedModel selects
//!   (label selector on the cluster's labels, and/or names).
//! - [`distribution`]: how many replicas each selected cluster gets from
//!   the routing weights, and where an unhealthy cluster's share goes.
//! - [`capacity`]: a member cluster's capacity and free capacity from its
//!   Nodes and Pods.
//! - [`kubeconfig`]: reading and vetting the kubeconfig Secret of a
//!   member cluster.
//!
//! The names below are the contract between the hub (where Cluster and
//! FederatedModel objects live) and the member clusters (where the
//! federation writes Models).

pub mod capacity;
pub mod distribution;
pub mod kubeconfig;
pub mod selection;

use std::collections::BTreeMap;

/// Field manager of every Model the federation writes in a member cluster.
pub const MANAGER: &str = "flexinfer-federation";
/// Field manager of Cluster and FederatedModel status in the hub.
pub const STATUS_MANAGER: &str = "flexinfer-federation-controller";
/// Finalizer of FederatedModels: deletes the member Models.
pub const FINALIZER: &str = "flexinfer.ai/federation-cleanup";

/// Label on a member Model: name of the FederatedModel it comes from.
pub const FEDERATED_MODEL: &str = "flexinfer.ai/federated-model";
/// Label on a member Model: namespace of that FederatedModel in the hub.
pub const FEDERATED_MODEL_NAMESPACE: &str = "flexinfer.ai/federated-model-namespace";
/// Label on a member Model: name of the hub's `Cluster` object it was
/// placed through.
pub const FEDERATION_CLUSTER: &str = "flexinfer.ai/federation-cluster";
/// Model annotation: replicas the model runs while active (the share of a
/// federated model on this cluster). The Model controller reads it; absent
/// or invalid means one replica.
pub const REPLICAS_ANNOTATION: &str = "flexinfer.ai/replicas";
/// Upper bound of [`REPLICAS_ANNOTATION`], so that a typo cannot ask for
/// thousands of pods.
pub const MAX_ANNOTATED_REPLICAS: u32 = 1000;

/// Labels that tie a member Model to its FederatedModel and cluster.
pub fn member_labels(namespace: &str, name: &str, cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (FEDERATED_MODEL.to_owned(), name.to_owned()),
        (FEDERATED_MODEL_NAMESPACE.to_owned(), namespace.to_owned()),
        (FEDERATION_CLUSTER.to_owned(), cluster.to_owned()),
        (
            flexinfer_crds::labels::APP_MANAGED_BY.to_owned(),
            flexinfer_crds::labels::MANAGED_BY_FLEXINFER.to_owned(),
        ),
    ])
}

/// Label selector (`k=v,...`) of the member Models of one FederatedModel.
pub fn member_selector(namespace: &str, name: &str) -> String {
    format!("{FEDERATED_MODEL}={name},{FEDERATED_MODEL_NAMESPACE}={namespace}")
}

/// Whether a member object's labels say it belongs to FederatedModel
/// `namespace/name`.
pub fn is_member_of(
    labels: Option<&BTreeMap<String, String>>,
    namespace: &str,
    name: &str,
) -> bool {
    labels.is_some_and(|l| {
        l.get(FEDERATED_MODEL).map(String::as_str) == Some(name)
            && l.get(FEDERATED_MODEL_NAMESPACE).map(String::as_str) == Some(namespace)
    })
}

/// Replicas asked for by [`REPLICAS_ANNOTATION`]: a whole number from 1 to
/// [`MAX_ANNOTATED_REPLICAS`], else `None`.
pub fn annotated_replicas(annotations: Option<&BTreeMap<String, String>>) -> Option<u32> {
    annotations?
        .get(REPLICAS_ANNOTATION)?
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_ANNOTATED_REPLICAS).contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_annotation_accepts_only_sane_counts() {
        let with = |v: &str| BTreeMap::from([(REPLICAS_ANNOTATION.to_owned(), v.to_owned())]);
        assert_eq!(annotated_replicas(Some(&with("3"))), Some(3));
        assert_eq!(annotated_replicas(Some(&with(" 2 "))), Some(2));
        assert_eq!(annotated_replicas(Some(&with("0"))), None);
        assert_eq!(annotated_replicas(Some(&with("-1"))), None);
        assert_eq!(annotated_replicas(Some(&with("two"))), None);
        assert_eq!(annotated_replicas(Some(&with("1001"))), None);
        assert_eq!(annotated_replicas(Some(&BTreeMap::new())), None);
        assert_eq!(annotated_replicas(None), None);
    }

    #[test]
    fn member_labels_round_trip() {
        let labels = member_labels("team-a", "llama", "east");
        assert!(is_member_of(Some(&labels), "team-a", "llama"));
        assert!(!is_member_of(Some(&labels), "team-b", "llama"));
        assert!(!is_member_of(Some(&labels), "team-a", "qwen"));
        assert!(!is_member_of(None, "team-a", "llama"));
        assert_eq!(labels[FEDERATION_CLUSTER], "east");
        assert_eq!(
            member_selector("team-a", "llama"),
            "flexinfer.ai/federated-model=llama,flexinfer.ai/federated-model-namespace=team-a"
        );
    }
}
