//! The local actuator: model servers as child processes on one machine.
//!
//! It applies the same policies as the Kubernetes actuator
//! ([`crate::policy::replicas`] for scale-to-zero,
//! [`crate::policy::shared_gpu`] for shared-GPU groups) to processes instead
//! of Deployments: a model starts on its first activation, stops after its
//! idle timeout, and at most one member of a shared group runs at a time,
//! the old leader stopped (SIGTERM, grace, SIGKILL) before the new one
//! starts. The gateway embeds it in local mode.
//!
//! Layout: [`spec`] (what to run), [`crate::lifecycle`] (what waiters see), `process`
//! (one child; its output goes through [`redact`]), `health` (its readiness probe), `group` (a shared group's
//! decisions and history), `supervisor` (the task that owns everything:
//! `model` its per-model state, `publish` what it tells the outside),
//! `shared` (what handles and supervisor share), [`report`] (the admin
//! view), and the [`LocalActuator`] handle.

mod actuator;
mod group;
mod health;
mod process;
pub mod redact;
pub mod report;
mod shared;
pub mod spec;
pub mod stray;
mod supervisor;

pub use crate::lifecycle::{ModelStatus, Phase};
pub use actuator::{ActuatorError, LocalActuator};
pub use report::{ActuatorReport, GroupReport, ModelReport, SwapRecord};
pub use spec::{ActuatorConfig, LocalModelSpec, StartError};
