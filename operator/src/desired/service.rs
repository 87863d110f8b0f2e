//! The model's Service: ClusterIP, one port `http` on the backend port,
//! named after the model so the gateway finds it and its EndpointSlices.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{routing_annotations, ModelPlan};

/// Name of the Service port the gateway routes to.
pub const PORT_NAME: &str = "http";

/// The desired Service of a model.
pub fn service(plan: &ModelPlan<'_>) -> Service {
    let mut meta = plan.meta(plan.child_name());
    meta.annotations = Some(routing_annotations(plan));
    Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(plan.selector_labels()),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_owned()),
                port: plan.backend.port,
                target_port: Some(IntOrString::Int(plan.backend.port)),
                protocol: Some("TCP".to_owned()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// In-cluster URL of a model's Service (`status.endpoint`); `name` is the
/// model's name.
pub fn endpoint(name: &str, namespace: &str, port: i32) -> String {
    let service = flexinfer_crds::names::service_name(name);
    format!("http://{service}.{namespace}.svc:{port}")
}
