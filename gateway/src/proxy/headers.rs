//! Header names the gateway reads, writes or strips.

/// Request id header, echoed to the client and passed upstream.
pub const REQUEST_ID: &str = "x-request-id";
/// Global mode: the member cluster that answered, on every proxied response.
pub const CLUSTER_HEADER: &str = "x-flexinfer-cluster";
/// Response header naming the endpoint a request went to and why, when
/// `--route-debug-header` is on.
pub const ROUTE_HEADER: &str = "x-flexinfer-route";
/// API key header of Anthropic clients, accepted like `Authorization: Bearer`.
pub const API_KEY: &str = "x-api-key";
/// Internal workload-class header (`background` requests never start a
/// model), never forwarded upstream.
pub const WORKLOAD_CLASS: &str = "x-flexinfer-internal-workload-class";
