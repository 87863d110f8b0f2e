//! FlexInfer's kube-scheduler extender.
//!
//! kube-scheduler calls an HTTP extender twice per scheduling cycle: once
//! to *filter* the feasible nodes and once to *prioritize* the survivors.
//! This crate answers both calls for model pods:
//!
//! - [`filter`]: hard gates — a GPU pod needs a node with a GPU vendor label,
//!   enough free VRAM for its estimate, and an architecture its backend
//!   supports.
//! - [`score`] and [`normalize`]: the weighted score (measured
//!   tokens/s, utilisation, cost, KV-cache pressure, free VRAM, tenant fair
//!   share), mapped into the extender's integer range `0..=10`.
//! - [`tps`]: where measured tokens/s come from (benchmark ConfigMaps).
//! - [`tenant`]: the optional fair-share adjustment.
//! - [`rbac`]: the Kubernetes API calls of the extender, as RBAC grants.
//!
//! The decision code is pure: it works on [`facts::PodFacts`] and
//! [`facts::NodeFacts`] parsed from the request, and reads cluster state only
//! through the [`tps::TpsSource`], [`extender::NodeSource`] and
//! [`tenant::TenantUsage`] traits. [`watch`] implements those traits over
//! kube reflectors (watched and cached, never fetched per request);
//! [`server`] is the thin axum layer; [`api`] holds the extender v1 wire
//! types, [`scan`] splits large requests (full Node objects) in one pass
//! without decoding what the extender does not read, and [`response`]
//! echoes the passing nodes as ranges of the request instead of copies.

#![warn(missing_docs)]

pub mod api;
pub mod body;
pub mod cli;
pub mod config;
pub mod extender;
pub mod facts;
pub mod filter;
pub mod metrics;
pub mod normalize;
pub mod rbac;
pub mod response;
pub mod scan;
pub mod score;
pub mod server;
pub mod tenant;
pub mod tps;
pub mod watch;

pub use extender::Extender;
