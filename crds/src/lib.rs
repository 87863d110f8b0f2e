//! FlexInfer API contract.
//!
//! This crate is the single source of truth for everything that crosses a
//! process boundary between FlexInfer components and the Kubernetes API:
//!
//! - [`v1alpha2`] and [`v1alpha1`]: the Rust types of every custom resource
//!   in the `ai.flexinfer` API group, with their OpenAPI schemas, printer
//!   columns, short names and spec defaults.
//! - [`defaults`]: every spec default, named once.
//! - [`labels`]: well-known label, annotation, finalizer and resource keys.
//! - [`backend`]: the catalog of inference backends (image, port, args,
//!   probes, supported GPU vendors and architectures).
//! - [`gpu`]: GPU vendors and their Kubernetes extended resources.
//! - [`routing`]: the per-model routing strategy read from the
//!   `flexinfer.ai/routing` annotation.
//! - [`conditions`] and [`quantity`]: reading `status.conditions` and
//!   Kubernetes quantities.
//! - [`rbac`]: the shape of the components' API-call tables (RBAC).
//! - [`manifests`]: rendering of the CustomResourceDefinition YAML that the
//!   `flexinfer-crdgen` binary writes and the Helm chart ships.
//! - [`yaml11`]: which plain YAML scalars a YAML 1.1 reader takes for
//!   something other than a string (what the manifests quote).
//!
//! Everything here is pure data and pure functions: no I/O, no clients.

#![warn(missing_docs)]

pub mod backend;
pub mod benchmark;
pub mod conditions;
pub mod defaults;
pub mod gpu;
pub mod labels;
pub mod manifests;
pub mod names;
pub mod quantity;
pub mod rbac;
pub mod routing;
pub mod v1alpha1;
pub mod v1alpha2;
pub mod yaml11;

mod schema;

/// The API group of every FlexInfer custom resource.
pub const GROUP: &str = "ai.flexinfer";

pub use backend::{Backend, UnknownBackend};
pub use routing::RoutingStrategy;
