//! FlexInfer conformance suite and simulated model server.
//!
//! - [`sim`]: `flexinfer-sim`, a simulated OpenAI-compatible (vLLM-like)
//!   model server, usable in-process or as a process.
//! - [`conformance`]: the checks `flexinfer-conformance run` performs
//!   against a gateway, and their reports.
//! - [`loadgen`]: a keep-alive HTTP/1.1 load generator.

pub mod conformance;
pub mod loadgen;
pub mod sim;
