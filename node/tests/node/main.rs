//! The node agent's integration tests in one binary.

mod support;

mod discovery;
mod kv_cache;
mod publish;
