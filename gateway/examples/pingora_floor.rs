//! The floor of the proxy benchmark: a Pingora proxy with no logic at all
//! (one fixed upstream, Pingora's keep-alive pool, bodies passed through
//! unread), with Pingora's and Rust's defaults: no upstream timeouts, the
//! system allocator. What FlexInfer spends beyond it is its own doing or
//! its settings' (`pingora_floor_configured` has those);
//! `benchmark/proxy/compare.py` reports the ratio.
//!
//! cargo run --release -p flexinfer-gateway --example pingora_floor -- LISTEN UPSTREAM [THREADS]

#[path = "floor/proxy.rs"]
mod proxy;

fn main() {
    proxy::run("pingora_floor", None);
}
