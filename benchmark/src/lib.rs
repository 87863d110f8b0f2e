//! `flexinfer-bench`: measures an OpenAI-compatible endpoint the way users
//! judge it — requests/s, output tokens/s, time to first token and
//! inter-token latency — and, in `tps` mode, produces the tokens/s figure the
//! scheduler extender ranks nodes by.
//!
//! Modules, one job each: [`target`] (the endpoint URL), [`workload`]
//! (length distributions and request bodies), [`client`] (one keep-alive
//! HTTP/1.1 connection), [`sse`] (server-sent event framing), [`measure`]
//! (timing one request), [`load`] (driving a concurrency level), [`stats`]
//! (percentiles), [`report`] (table and JSON), [`plot`] (the
//! PNG chart), [`tps`] (the scheduler's micro-benchmark) and [`publish`]
//! (writing results to ConfigMaps), and [`routing`] (prefix-cache use of
//! routing strategies, with its own workload, driver, metrics, process and
//! report modules).

pub mod cli;
pub mod client;
pub mod load;
pub mod measure;
pub mod plot;
pub mod publish;
pub mod report;
pub mod routing;
pub mod sse;
pub mod stats;
pub mod target;
pub mod tps;
pub mod workload;
