//! `flexinfer-sim`: a simulated OpenAI-compatible model server that behaves
//! like vLLM from the outside (endpoints, including the Responses API and
//! Anthropic's Messages API, error envelopes, SSE framing,
//! `/health`, `vllm:` metrics, runtime LoRA endpoints, automatic prefix
//! caching) with configurable load time, TTFT, prefill and token rate,
//! concurrency and faults, and a request recorder for tests of whatever sits
//! in front of it.
//!
//! Start it in-process with [`SimServer::start`] or [`serve`], or as a child
//! process with [`process::SimProcess`].

pub mod admission;
pub mod cli;
pub mod completion;
pub mod config;
pub mod continuation;
pub mod error;
pub mod generation;
pub mod handlers;
pub mod intake;
pub mod messages;
pub mod metrics;
pub mod models;
pub mod multipart;
pub mod prefix_cache;
pub mod process;
pub mod protocol;
pub mod recorder;
pub mod responses;
pub mod selftest;
pub mod server;
pub mod state;
pub mod streaming;
pub mod synth;
pub mod tools;

pub use config::{ConfigError, LoraModule, SimConfig};
pub use recorder::{RequestRecord, RequestRecorder};
pub use server::{router, serve, SimServer};
pub use state::SimState;

/// The line printed to stdout once the listener is bound, followed by the URL.
pub const LISTENING_PREFIX: &str = "flexinfer-sim listening on ";
