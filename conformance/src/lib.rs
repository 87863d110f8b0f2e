//! FlexInfer conformance suite and simulated model server.
//!
//! - [`sim`]: `flexinfer-sim`, a simulated OpenAI-compatible (vLLM-like)
//!   model server, usable in-process or as a process.
//! - [`loadgen`]: a keep-alive HTTP/1.1 load generator.

pub mod loadgen;
pub mod sim;
