//! The CRD crate's integration tests in one binary.

mod support;

mod defaults;
mod examples;
mod manifests;
mod yaml11;
