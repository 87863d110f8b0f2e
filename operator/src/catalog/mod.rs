//! What a `ModelCatalog` lists: every `spec.syncInterval` its controller
//! ([`crate::controllers::model_catalog`]) lists the models (repositories
//! and tags) of each OCI registry of a catalog and writes them to
//! `status.entries`, with `totalModels`, `lastSyncTime` and a `Ready`
//! condition (False, with the error, when a registry fails).
//!
//! [`filter`] applies `spec.filter` (pure), [`sync`] lists one registry
//! through the OCI client of `flexinfer-flashload` (the same code the
//! prefetch Job pulls with), [`bounds`] keeps the status small (pure).

pub mod bounds;
pub mod filter;
pub mod sync;
