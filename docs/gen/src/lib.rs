//! Reference documentation generated from the code.
//!
//! The configuration reference (`docs/configuration.md`) is rendered from
//! each binary's `clap::Command`, the CRD reference (`docs/crds.md`) from the
//! generated CustomResourceDefinition schemas, and the timing table of
//! `docs/scaling.md` from the policy and CLI defaults. The `drift` test
//! compares these renderings with the committed files and fails when they
//! differ; `FLEXINFER_BLESS=1 cargo test -p flexinfer-docs` rewrites them.

#![warn(missing_docs)]

pub mod cli_ref;
pub mod crd_ref;
pub mod markdown;
pub mod outputs;
pub mod region;
pub mod timing;

pub use outputs::{outputs, Output};
