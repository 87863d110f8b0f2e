//! flashload's integration tests in one binary.

mod support;

mod oci_registry;
mod preload;
