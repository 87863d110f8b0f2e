//! The gateway's integration tests in one binary: each module a lane or
//! area (the fault lane runs apart: `--test gateway fault_lane::`).

mod support;

mod activation;
mod bodies;
mod chart_scenarios;
mod client_edges;
mod errors;
mod extraction;
mod faults;
mod fleet_budgets;
mod fuzz_extract;
mod global;
mod held_streams;
mod hostile_bodies;
mod hostile_budgets;
mod hostile_lifecycle;
mod hostile_peers;
mod kube_mode;
mod openai_sdk;
mod parity;
mod peer_secret;
mod peers;
mod prometheus;
mod real_backend;
mod real_cluster;
mod real_node;
mod routing;
mod stream_failover;
mod streaming;
mod tenant_isolation;
mod tenants;
mod upstream;
