//! FlexInfer conformance suite and simulated model server.
//!
//! - [`sim`]: `flexinfer-sim`, a simulated OpenAI-compatible (vLLM-like)
//!   model server, usable in-process or as a process.
//! - [`cli`]: the `flexinfer-conformance` command line (`run` and `load`).
//! - [`conformance`]: the checks `flexinfer-conformance run` performs
//!   against a gateway, the `--local` stack, and their reports.
//! - [`loadgen`]: the keep-alive HTTP/1.1 load generator behind
//!   `flexinfer-conformance load` (open and closed loop) and
//!   `flexinfer-sim selftest`.
//! - [`python`]: the interpreter the SDK-driven tests of this and other
//!   crates run, and running a script that prints JSON.

pub mod cli;
pub mod conformance;
pub mod loadgen;
pub mod python;
pub mod sim;
