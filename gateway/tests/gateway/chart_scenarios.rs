//! The chart scenario lane: the Helm chart installed as a user would,
//! without a cluster. `helm/flexinfer` is rendered offline, its FlexInfer
//! Deployments run as real processes with the rendered args and env against
//! the in-memory API server of `flexinfer-testkube`, whose simulated
//! Deployment controller, kubelet and EndpointSlice controller turn the
//! operator's model Deployments into `flexinfer-sim` processes on their own
//! loopback addresses. Each test is one user-visible scenario, written
//! once against [`cluster::Cluster`]; `real_cluster::scenarios` runs the
//! same scenarios on the real control plane.

#[path = "chart_scenarios/cluster.rs"]
pub mod cluster;
#[path = "chart_scenarios/lane.rs"]
pub mod lane;

#[path = "chart_scenarios/cold_start.rs"]
pub mod cold_start;
#[path = "chart_scenarios/lifecycle.rs"]
pub mod lifecycle;
#[path = "chart_scenarios/restart.rs"]
pub mod restart;
#[path = "chart_scenarios/scheduler.rs"]
mod scheduler;
#[path = "chart_scenarios/shared_gpu.rs"]
pub mod shared_gpu;
#[path = "chart_scenarios/streaming.rs"]
pub mod streaming;
