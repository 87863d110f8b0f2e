//! The Gateway API and Inference Extension resources, as far as FlexInfer
//! reads and writes them: `GatewayClass`, `Gateway`, `HTTPRoute`
//! (`gateway.networking.k8s.io/v1`) and `InferencePool`
//! (`inference.networking.k8s.io/v1`). Fields the gateway does not act on
//! are not declared; serde skips them, and status writes touch only the
//! fields named here.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Group of the Gateway API's resources.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// Group of the Inference Extension's `InferencePool`.
pub const INFERENCE_GROUP: &str = "inference.networking.k8s.io";

/// `GatewayClass.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "GatewayClass",
    status = "ConditionsStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// The controller that manages Gateways of this class.
    pub controller_name: String,
}

/// A status holding only conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConditionsStatus {
    /// The conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// `Gateway.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "Gateway",
    namespaced,
    status = "GatewayStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The class the Gateway belongs to.
    pub gateway_class_name: String,
    /// Where it accepts traffic.
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

/// One listener of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Its name, unique in the Gateway.
    pub name: String,
    /// The host it serves (`*.example.com` wildcards allowed); all when absent.
    #[serde(default)]
    pub hostname: Option<String>,
    /// The port clients reach it on.
    pub port: u16,
    /// `HTTP` (served), `HTTPS`, `TLS`, `TCP`, `UDP` (not served).
    pub protocol: String,
    /// Which routes may attach.
    #[serde(default)]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `Listener.allowedRoutes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// Namespaces routes may come from.
    #[serde(default)]
    pub namespaces: Option<RouteNamespaces>,
    /// Route kinds allowed; HTTPRoute when empty.
    #[serde(default)]
    pub kinds: Vec<GroupKind>,
}

/// `allowedRoutes.namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    #[serde(default)]
    pub from: Option<String>,
    /// The namespaces' labels, with `from: Selector`.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
}

/// A label selector (`matchLabels` and `matchExpressions`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be equal.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default)]
    pub match_expressions: Vec<LabelRequirement>,
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelRequirement {
    /// The label.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// The values for `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector (an empty one selects all).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let plain = self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        plain
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// A group and kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupKind {
    /// API group (`""` for the core group).
    #[serde(default)]
    pub group: Option<String>,
    /// Kind.
    pub kind: String,
}

/// `Gateway.status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// Where clients reach the Gateway.
    #[serde(default)]
    pub addresses: Vec<GatewayAddress>,
    /// `Accepted`, `Programmed`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Per listener.
    #[serde(default)]
    pub listeners: Vec<ListenerStatus>,
}

/// One address of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddress {
    /// `IPAddress` or `Hostname`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// The address.
    pub value: String,
}

/// One listener's status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The listener's name.
    pub name: String,
    /// Route kinds it takes.
    pub supported_kinds: Vec<GroupKind>,
    /// Routes attached to it.
    pub attached_routes: i32,
    /// `Accepted`, `Programmed`, `ResolvedRefs`.
    pub conditions: Vec<Condition>,
}

/// `HTTPRoute.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    namespaced,
    status = "RouteStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// The Gateways (or listeners) it attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Hosts it serves; all of its listeners' when empty.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Its rules.
    #[serde(default)]
    pub rules: Vec<RouteRule>,
}

/// A reference to a parent (a Gateway, or one of its listeners).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// `gateway.networking.k8s.io` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Gateway` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The route's namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The parent's name.
    pub name: String,
    /// One listener, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Listeners on this port only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// One rule of an HTTPRoute.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    /// Any of these matches the rule; `/` prefix when empty.
    #[serde(default)]
    pub matches: Vec<RouteMatch>,
    /// Where matched requests go, by weight.
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
    /// Filters (none is applied yet: a rule with any is refused).
    #[serde(default)]
    pub filters: Vec<serde_json::Value>,
}

/// One match of a rule: every part given must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    /// The path.
    #[serde(default)]
    pub path: Option<PathMatch>,
    /// Headers.
    #[serde(default)]
    pub headers: Vec<HeaderMatch>,
    /// The method.
    #[serde(default)]
    pub method: Option<String>,
}

/// A path match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathMatch {
    /// `PathPrefix` (the default), `Exact` or `RegularExpression`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// The path (`/` when absent).
    #[serde(default)]
    pub value: Option<String>,
}

/// A header match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// The header's name (any case).
    pub name: String,
    /// Its value.
    pub value: String,
}

/// A rule's backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// `""` (core) when absent.
    #[serde(default)]
    pub group: Option<String>,
    /// `Service` when absent.
    #[serde(default)]
    pub kind: Option<String>,
    /// The backend's name.
    pub name: String,
    /// The route's namespace when absent.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The Service port; ignored for an InferencePool (its target ports).
    #[serde(default)]
    pub port: Option<u16>,
    /// Share of the rule's requests (1 when absent; 0: none).
    #[serde(default)]
    pub weight: Option<u32>,
}

/// `HTTPRoute.status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// One entry per parent, per controller.
    #[serde(default)]
    pub parents: Vec<RouteParentStatus>,
}

/// A route's status on one parent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent.
    pub parent_ref: ParentReference,
    /// The controller that wrote the entry.
    pub controller_name: String,
    /// `Accepted`, `ResolvedRefs`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// `InferencePool.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    namespaced,
    status = "InferencePoolStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    /// The model-server pods (`matchLabels`).
    #[serde(default)]
    pub selector: LabelSelector,
    /// Ports served on each pod; each pod and port is one endpoint.
    #[serde(default)]
    pub target_ports: Vec<PoolPort>,
    /// `http` (the default) or `kubernetes.io/h2c`.
    #[serde(default)]
    pub app_protocol: Option<String>,
    /// The endpoint picker; FlexInfer's own picks when absent.
    #[serde(default)]
    pub endpoint_picker_ref: Option<EndpointPickerRef>,
}

/// A port number.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPort {
    /// The port.
    pub number: u16,
}

/// `InferencePool.spec.endpointPickerRef`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    /// Core (`""`) when absent.
    #[serde(default)]
    pub group: Option<String>,
    /// `Service` when absent.
    #[serde(default)]
    pub kind: Option<String>,
    /// The picker's Service.
    #[serde(default)]
    pub name: String,
    /// Its gRPC port.
    #[serde(default)]
    pub port: Option<PoolPort>,
    /// `FailClose` (the default) or `FailOpen`.
    #[serde(default)]
    pub failure_mode: Option<String>,
}

/// `InferencePool.status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InferencePoolStatus {
    /// One entry per Gateway whose routes use the pool.
    #[serde(default)]
    pub parents: Vec<PoolParentStatus>,
}

/// A pool's status under one Gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolParentStatus {
    /// `Accepted`, `ResolvedRefs`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The Gateway.
    pub parent_ref: ParentReference,
    /// The controller that wrote the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_name: Option<String>,
}
