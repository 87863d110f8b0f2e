//! The floor of the proxy benchmark set up as the gateway is, without its
//! logic: the same proxy as `pingora_floor` with the gateway's allocator
//! (mimalloc) and its default upstream timeouts. Pingora arms the read
//! timeout again at every read that waits, a cost per streamed chunk that
//! `pingora_floor` does not pay; and with the system allocator the floor's
//! cost for megabyte bodies depends on the heap's state (glibc maps, unmaps
//! and trims their buffers, paying page faults). What FlexInfer spends
//! beyond this floor is its logic.
//!
//! cargo run --release -p flexinfer-gateway --example pingora_floor_configured -- LISTEN UPSTREAM [THREADS]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "floor/proxy.rs"]
mod proxy;

use std::time::Duration;

fn main() {
    // The gateway's defaults.
    let timeouts = proxy::Timeouts {
        connect: Duration::from_secs(5),
        read: Duration::from_secs(600),
        keepalive: Duration::from_secs(4),
    };
    proxy::run("pingora_floor_configured", Some(timeouts));
}
