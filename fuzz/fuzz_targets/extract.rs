//! Fuzzes model extraction (head, JSON view, multipart) and the `model`
//! rewrite with one input: see `oracle.rs` for the encoding and the
//! properties checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../oracle.rs"]
mod oracle;

fuzz_target!(|data: &[u8]| oracle::check(data));
