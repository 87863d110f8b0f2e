//! The operator's integration tests in one binary, one module per area.

mod common;

mod backend_pods;
mod binary;
mod builders;
mod controller_e2e;
mod federation;
mod legacy;
mod local_actuator;
mod model_catalog;
mod oci_source;
mod reconcile;
