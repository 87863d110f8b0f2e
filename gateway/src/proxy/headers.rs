//! Header names the gateway reads, writes or strips.

/// Request id header, echoed to the client and passed upstream.
pub const REQUEST_ID: &str = "x-request-id";
/// Global mode: the member cluster that answered, on every proxied response.
pub const CLUSTER_HEADER: &str = "x-flexinfer-cluster";
/// Internal header never forwarded upstream.
pub const WORKLOAD_CLASS: &str = "x-flexinfer-internal-workload-class";
