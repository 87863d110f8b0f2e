//! The chart scenario lane: the Helm chart installed as a user would,
//! without a cluster. `helm/flexinfer` is rendered offline, its FlexInfer
//! Deployments run as real processes with the rendered args and env against
//! the in-memory API server of `flexinfer-testkube`, whose simulated
//! Deployment controller, kubelet and EndpointSlice controller turn the
//! operator's model Deployments into `flexinfer-sim` processes on their own
//! loopback addresses. Each test is one user-visible scenario. A real
//! cluster remains the job of `operator/e2e/`.

#[path = "chart_scenarios/lane.rs"]
pub mod lane;

#[path = "chart_scenarios/cold_start.rs"]
mod cold_start;
#[path = "chart_scenarios/lifecycle.rs"]
mod lifecycle;
#[path = "chart_scenarios/restart.rs"]
mod restart;
#[path = "chart_scenarios/scheduler.rs"]
mod scheduler;
#[path = "chart_scenarios/shared_gpu.rs"]
mod shared_gpu;
#[path = "chart_scenarios/streaming.rs"]
mod streaming;
