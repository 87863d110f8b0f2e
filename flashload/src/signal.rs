//! SIGTERM/SIGINT handling: the first signal asks the copy to stop so the
//! partial copy can be removed before exiting; it does not kill the process.

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// Installs the handler for SIGTERM and SIGINT.
pub fn install() {
    let handler = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only performs an atomic store, which is
        // async-signal-safe; signal() has no other preconditions.
        unsafe {
            libc::signal(signal, handler);
        }
    }
}

/// The signal received so far, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// The conventional exit status of a process stopped by `signal` (128 + n).
pub fn exit_status(signal: i32) -> i32 {
    128 + signal
}
