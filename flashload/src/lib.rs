//! `flexinfer-flashload`: copies a model directory from a volume into tmpfs
//! before the model server starts, so the server loads its weights from
//! memory.
//!
//! The copy is parallel (files in parallel, large files in parallel ranges),
//! verified (sizes always, chunk checksums on request), restartable (a
//! `.flashload-complete` marker holding the manifest lets a restarted pod skip
//! an identical, complete copy and redo a partial one) and refuses to start
//! when the destination lacks room.
//!
//! Each module does one job: [`scan`] builds the [`manifest::Manifest`] of the
//! source, [`marker`] reads and writes the completion marker, [`plan`] decides
//! what to copy, [`space`] checks free space, [`copy`] moves bytes, [`verify`]
//! checks the result, [`preload`] ties them together and [`cleanup`] removes
//! preloads.
//!
//! [`artifact`] is the other job of the binary: `flexinfer-flashload pull
//! oci://…` ([`oci_pull`]) fetches a model artifact from an OCI registry
//! into the cache volume, verified and resumable, with the client of
//! `flexinfer-oci`.

pub mod artifact;
pub mod checksum;
pub mod cleanup;
pub mod cli;
pub mod copy;
pub mod lock;
pub mod manifest;
pub mod marker;
pub mod oci_pull;
pub mod plan;
pub mod pool;
pub mod preload;
pub mod progress;
pub mod scan;
pub mod signal;
pub mod space;
pub mod sys;
pub mod units;
pub mod verify;

/// Suffix of the temporary name a file is written under before it is
/// renamed into place; leftovers of an interrupted run are removed first.
pub const TMP_SUFFIX: &str = ".flash-tmp";

/// Name of the completion marker in the destination directory.
pub const MARKER_NAME: &str = ".flashload-complete";
