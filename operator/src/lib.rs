//! FlexInfer operator: the scale-to-zero and GPU-sharing policies, the
//! desired objects of a model, and the actuators that apply them.
//!
//! Policies are pure functions of observed state and an injected `now`, so the
//! same decision code drives Kubernetes workloads and local processes, and
//! tests step a clock instead of sleeping.
//!
//! - [`policy`]: replicas, shared-GPU leader choice, GPUGroup anti-thrashing.
//! - [`placement`]: GPU detection from node labels and compatibility checks.
//! - [`desired`]: the desired Deployments, Services, PVCs and Jobs of a model (pure builders).
//! - [`controllers`]: the Kubernetes controllers (kube-runtime), with the
//!   library entry point [`controllers::run`].
//! - [`lifecycle`]: a model's phase as the request path waits on it, in
//!   either actuator.
//! - [`local`]: the local-process actuator.
//! - [`cli`]: the `flexinfer-operator` command line and the controller
//!   settings it describes.
//! - [`settings`]: the controllers' options, shared by the operator and the
//!   gateway's embedded operator, and their [`controllers::ControllerSettings`].
//! - [`rbac`]: every Kubernetes API call of the controllers, as the RBAC
//!   grants the Helm chart gives them.
//! - [`federation`]: cluster selection, replica split and capacity for the
//!   federation controllers.
//! - [`text`]: text cut to the API server's length limits.

pub mod catalog;
pub mod cli;
pub mod controllers;
pub mod desired;
pub mod federation;
pub mod lifecycle;
pub mod local;
pub mod placement;
pub mod policy;
pub mod rbac;
pub mod settings;
pub mod text;
