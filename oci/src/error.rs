//! Errors of the OCI client. The messages are the one-line reasons the
//! `pull` command prints, so they name the registry, the layer and the
//! digests involved.

use std::path::PathBuf;

use super::digest::Digest;

/// Why an OCI operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The `oci://` reference does not parse.
    #[error("invalid reference {reference:?}: {reason}")]
    InvalidReference {
        /// The text given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A digest string does not parse or uses an unsupported algorithm.
    #[error("invalid digest {0:?}: expected sha256:<64 lowercase hex digits>")]
    InvalidDigest(String),
    /// The registry answered 401 even with the credentials (or with none
    /// when it requires some).
    #[error("registry {host} refused credentials (401)")]
    Unauthorized {
        /// Registry host.
        host: String,
    },
    /// The registry answered 403 for the repository.
    #[error("registry {host} denied access to {what} (403)")]
    Denied {
        /// Registry host.
        host: String,
        /// Repository or path.
        what: String,
    },
    /// The manifest, tag or blob does not exist.
    #[error("{what} not found on registry {host} (404)")]
    NotFound {
        /// Registry host.
        host: String,
        /// What was asked for.
        what: String,
    },
    /// A layer's content does not hash to its descriptor's digest.
    #[error("digest mismatch for layer {title}: expected {expected}, got {got}")]
    LayerDigestMismatch {
        /// File name of the layer.
        title: String,
        /// Digest of the descriptor.
        expected: Digest,
        /// Digest of the bytes received.
        got: Digest,
    },
    /// A layer has another size than its descriptor says.
    #[error("size mismatch for layer {title}: expected {expected} bytes, got {got}")]
    LayerSizeMismatch {
        /// File name of the layer.
        title: String,
        /// Size of the descriptor.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// The manifest's bytes do not hash to the digest asked for (or to the
    /// one the registry announced).
    #[error("digest mismatch for manifest {reference}: expected {expected}, got {got}")]
    ManifestDigestMismatch {
        /// The reference pulled.
        reference: String,
        /// Digest expected.
        expected: Digest,
        /// Digest of the bytes received.
        got: Digest,
    },
    /// A layer's file name would escape the destination directory or is
    /// missing.
    #[error("layer {digest} has an unsafe file name {title:?} (titles must be plain file names)")]
    UnsafeTitle {
        /// Digest of the layer.
        digest: Digest,
        /// The `org.opencontainers.image.title` annotation.
        title: String,
    },
    /// The manifest is of a kind this client does not pull.
    #[error("unsupported manifest {media_type:?} for {reference} (expected an OCI image manifest or a Docker v2 schema 2 manifest)")]
    UnsupportedManifest {
        /// The reference pulled.
        reference: String,
        /// Its media type.
        media_type: String,
    },
    /// The registry answered something the protocol does not allow.
    #[error("registry {host}: {reason}")]
    Protocol {
        /// Registry host.
        host: String,
        /// What was wrong.
        reason: String,
    },
    /// An HTTP status the client does not handle.
    #[error("registry {host} answered {status} for {what}: {body}")]
    Status {
        /// Registry host.
        host: String,
        /// HTTP status.
        status: u16,
        /// What was asked for.
        what: String,
        /// Start of the body.
        body: String,
    },
    /// The connection or the transfer failed.
    #[error("request to registry {host} failed: {}", chain(error))]
    Http {
        /// Registry host.
        host: String,
        /// The transport error (its causes are part of the message, so
        /// the one-line reason says why: refused, timed out, ...).
        error: reqwest::Error,
    },
    /// Credentials could not be read.
    #[error("credentials: {0}")]
    Credentials(String),
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl OciError {
    /// An [`OciError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> OciError {
        let path = path.into();
        move |source| OciError::Io { path, source }
    }
}

/// `error` and its causes, joined with `: `, skipping a cause that only
/// repeats its parent.
fn chain(error: &dyn std::error::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

/// Result of OCI operations.
pub type Result<T, E = OciError> = std::result::Result<T, E>;
