//! Checks that the documentation, the Helm chart and the container build
//! agree with the code (one test binary, so that the workspace links it
//! once):
//!
//! - [`drift`]: the generated references under `docs/` are current;
//! - [`helm_chart`]: the chart renders and validates, its flags and
//!   environment variables are those of the binaries, its RBAC matches the
//!   API calls the code makes;
//! - [`rbac`]: every ServiceAccount of the chart holds exactly the API
//!   calls of its component's code, for every values set;
//! - [`metrics_docs`]: the metrics list, alerts and dashboard name only
//!   metrics the code defines;
//! - [`alert_rules`]: the alert rules pass promtool's checks and unit tests;
//! - [`images`]: the Dockerfile builds every binary the chart runs;
//! - [`architecture`]: every path `ARCHITECTURE.md` names exists.

use std::path::{Path, PathBuf};

mod alert_rules;
mod architecture;
mod drift;
mod helm_chart;
mod images;
mod metrics_docs;
mod rbac;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}
