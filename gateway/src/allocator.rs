//! Handing freed memory back to the system.
//!
//! The gateway binary allocates with mimalloc, built without transparent
//! huge pages (with them, a 2 MiB page stays resident while any byte of it
//! is used, and memory freed after a burst of streams never left). mimalloc
//! also frees lazily, on the owning thread's next allocations: a proxy
//! thread that goes quiet after a burst would keep what the burst freed.
//! Each proxy thread therefore tidies its heap once a second.

use std::cell::Cell;
use std::time::Duration;

/// How often a proxy thread returns its freed memory.
const TIDY_INTERVAL: Duration = Duration::from_secs(1);

thread_local! {
    static TIDYING: Cell<bool> = const { Cell::new(false) };
}

/// Starts, once per runtime thread, the task that tidies this thread's
/// heap. Call it from a task on the thread (the request path does, on every
/// request: after the first, it costs a thread-local read).
pub fn tidy_this_thread() {
    if TIDYING.with(|t| t.replace(true)) {
        return;
    }
    tokio::spawn(async {
        let mut tick = tokio::time::interval(TIDY_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // SAFETY: mi_collect only walks the calling thread's own heap.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}
