//! FlexInfer's node agent: hardware discovery and node labelling.
//!
//! Every pass (`--interval`, 30 s) the agent:
//!
//! 1. discovers the node's hardware: NVIDIA GPUs through NVML
//!    ([`nvidia`], library loaded at run time), AMD GPUs through sysfs and
//!    the KFD topology ([`amd`]), CPU features ([`cpu`]);
//! 2. exports per-GPU metrics ([`metrics`]) and reads the KV-cache usage
//!    of the model servers on the node ([`kv_cache`]);
//! 3. computes the labels and annotations the node should carry
//!    ([`labels`], pure);
//! 4. compares them with the Node object and patches only what changed
//!    ([`patch`] decides, pure; [`publish`] talks to the API server with a
//!    server-side-apply patch).
//!
//! [`rbac`] lists its Kubernetes API calls as the RBAC grants the chart gives.
//!
//! Discovery reads files under configurable roots (`--sysfs-root`,
//! `--proc-root`) so that it is tested on fixture trees.

#![warn(missing_docs)]

pub mod agent;
pub mod amd;
pub mod cli;
pub mod config;
pub mod cpu;
pub mod inventory;
pub mod kv_cache;
pub mod labels;
pub mod metrics;
pub mod nvidia;
pub mod patch;
pub mod publish;
pub mod rbac;
