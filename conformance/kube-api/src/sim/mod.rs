//! Simulated cluster behaviour, each part opt-in: a Deployment controller
//! that creates Pods, a kubelet that runs them as local processes, and an
//! EndpointSlice controller that publishes them.
//!
//! Both react to every write (and, for readiness delays, to timers), run
//! inside the server process, and write through the same store as API
//! clients, so watches see their changes as ordinary events.

pub(crate) mod deployment;
pub(crate) mod endpoints;
pub(crate) mod kubelet;

pub use deployment::TEMPLATE_HASH_ANNOTATION;
pub use kubelet::{KubeletPod, PodProcess, PodRunner};
