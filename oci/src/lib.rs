//! A client of OCI distribution (v2) registries, used by
//! `flexinfer-flashload pull` (model artifacts into the cache volume) and
//! by the operator's `ModelCatalog` controller (listing repositories and
//! tags).
//!
//! One module per job: [`reference`] parses `oci://` references,
//! [`digest`] computes and compares digests, [`credentials`] reads
//! credentials and adapts them per registry (Harbor, GHCR, ECR), [`auth`]
//! does the token handshake, [`client`] speaks the API (tags, catalog,
//! manifests, blobs), [`manifest`] parses manifests and layer file names,
//! [`blob`] downloads one verified, resumable layer, [`ecr`] logs in to
//! Amazon ECR with AWS keys (SigV4) and [`catalog`] lists what a registry
//! holds. Pulling a whole artifact into a directory is flashload's
//! (`flexinfer_flashload::artifact`).

pub mod auth;
pub mod blob;
pub mod catalog;
pub mod client;
pub mod credentials;
pub mod digest;
pub mod ecr;
pub mod error;
pub mod manifest;
pub mod reference;

pub use client::{ClientOptions, RegistryClient};
pub use credentials::{Credentials, RegistryKind};
pub use digest::Digest;
pub use error::OciError;
pub use reference::Reference;
