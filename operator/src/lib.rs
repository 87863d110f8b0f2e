//! FlexInfer operator: the scale-to-zero and GPU-sharing policies, and the
//! actuators that apply them.
//!
//! Policies are pure functions of observed state and an injected `now`, so the
//! same decision code drives Kubernetes workloads and local processes, and
//! tests step a clock instead of sleeping.

pub mod local;
pub mod policy;
