//! Header names the gateway reads, writes or strips.

/// Request id header, echoed to the client and passed upstream.
pub const REQUEST_ID: &str = "x-request-id";
/// Global mode: the member cluster that answered, on every proxied response.
pub const CLUSTER_HEADER: &str = "x-flexinfer-cluster";
/// Response header naming the endpoint a request went to and why, when
/// `--route-debug-header` is on.
pub const ROUTE_HEADER: &str = "x-flexinfer-route";
/// Internal header never forwarded upstream.
pub const WORKLOAD_CLASS: &str = "x-flexinfer-internal-workload-class";
