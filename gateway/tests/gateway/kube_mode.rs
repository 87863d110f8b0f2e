//! Kubernetes mode end to end: the real gateway binary against the
//! in-memory API server of `flexinfer-testkube`, with `flexinfer-sim`
//! processes as the pods. One test binary for all of it (each gateway test
//! binary is large).

#[path = "support/kube.rs"]
mod kube_support;

#[path = "kube_mode/activation.rs"]
mod activation;
#[path = "kube_mode/bench.rs"]
mod bench;
#[path = "kube_mode/label_groups.rs"]
mod label_groups;
#[path = "kube_mode/operator.rs"]
mod operator;
#[path = "kube_mode/routing.rs"]
mod routing;
#[path = "kube_mode/startup.rs"]
mod startup;
