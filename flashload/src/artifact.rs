//! Pulling a whole artifact: resolve the reference to a manifest digest,
//! then fetch the layers into the destination under their titles, several
//! at once, verified, with retries that resume from what arrived. A marker
//! holding the manifest digest makes a second pull of the same digest a
//! no-op.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::progress::Counters;
use crate::units::{gigabytes_per_second, megabytes};
use flexinfer_oci::blob;
use flexinfer_oci::client::{FetchedManifest, RegistryClient};
use flexinfer_oci::digest::Digest;
use flexinfer_oci::error::{OciError, Result};
use flexinfer_oci::manifest::Descriptor;
use flexinfer_oci::reference::Reference;

/// Marker written into the destination after a complete pull.
pub use flexinfer_oci::manifest::PULL_MARKER_NAME as MARKER_NAME;
/// Attempts per layer when the transfer breaks (each resumes).
pub const ATTEMPTS: u32 = 3;
/// Delay before the first retry (doubled after each).
pub const RETRY_DELAY: Duration = Duration::from_secs(2);
/// Layers fetched at once by default: one connection each, so that a
/// registry that limits the throughput of one connection (object storage
/// behind it) is read in parallel.
pub const DEFAULT_JOBS: u16 = 4;

/// Content of the completion marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullMarker {
    /// The reference pulled, pinned to its digest.
    pub reference: String,
    /// Manifest digest.
    pub digest: Digest,
    /// Files written, with sizes.
    pub files: Vec<(String, u64)>,
}

/// Result of a pull.
#[derive(Clone, Debug)]
pub struct PullSummary {
    /// The reference pinned to the manifest digest.
    pub resolved: Reference,
    /// Files of the artifact (name, size), in manifest order.
    pub files: Vec<(String, u64)>,
    /// Bytes received over the network for layers.
    pub downloaded: u64,
    /// Bytes already present in partial files that downloads continued.
    pub resumed: u64,
    /// Layers already complete on disk.
    pub reused_files: usize,
    /// The marker said the same digest was pulled already.
    pub up_to_date: bool,
    /// Wall time.
    pub elapsed: Duration,
}

impl PullSummary {
    /// Total size of the artifact's files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|(_, s)| s).sum()
    }

    /// The final line of the `pull` command.
    pub fn line(&self, dest: &Path) -> String {
        let secs = self.elapsed.as_secs_f64();
        if self.up_to_date {
            return format!(
                "flashload: {} already holds {} ({} files, {} bytes); nothing pulled in {secs:.3} s",
                dest.display(),
                self.resolved,
                self.files.len(),
                self.total_bytes()
            );
        }
        format!(
            "flashload: pulled {} ({} files, {} bytes) into {} in {secs:.3} s ({}, {} received, {} resumed, {} files already in place); sha256 verified",
            self.resolved,
            self.files.len(),
            self.total_bytes(),
            dest.display(),
            gigabytes_per_second(self.downloaded, self.elapsed),
            megabytes(self.downloaded),
            megabytes(self.resumed),
            self.reused_files,
        )
    }
}

/// Resolves `reference` to its manifest digest (verified).
pub async fn resolve(client: &RegistryClient, reference: &Reference) -> Result<Digest> {
    Ok(client.manifest(reference).await?.digest)
}

/// Pulls `reference` into `dest` (created when missing). `counters`, when
/// given, count received bytes and finished files for a progress
/// reporter; their total is set by the caller from [`plan`] or left 0.
pub async fn pull(
    client: &RegistryClient,
    reference: &Reference,
    dest: &Path,
    counters: Option<Arc<Counters>>,
) -> Result<PullSummary> {
    let started = Instant::now();
    let fetched = client.manifest(reference).await?;
    pull_manifest(
        client,
        reference,
        fetched,
        dest,
        counters,
        started,
        DEFAULT_JOBS,
    )
    .await
}

/// [`pull`] of a manifest already fetched (and verified) for `reference`,
/// with up to `jobs` layers in flight; `started` is when the pull began,
/// for the summary's elapsed time. The first layer that fails ends the
/// pull (the others' partial files stay, to be resumed).
pub async fn pull_manifest(
    client: &RegistryClient,
    reference: &Reference,
    fetched: FetchedManifest,
    dest: &Path,
    counters: Option<Arc<Counters>>,
    started: Instant,
    jobs: u16,
) -> Result<PullSummary> {
    let resolved = reference.with_digest(fetched.digest.clone());
    let names = fetched.manifest.file_names()?;
    let files: Vec<(String, u64)> = names
        .iter()
        .cloned()
        .zip(fetched.manifest.layers.iter().map(|l| l.size))
        .collect();
    std::fs::create_dir_all(dest).map_err(OciError::io(dest))?;
    let marker_path = dest.join(MARKER_NAME);
    if let Some(marker) = read_marker(&marker_path) {
        let intact = marker.digest == fetched.digest
            && files.iter().all(|(name, size)| {
                std::fs::metadata(dest.join(name)).is_ok_and(|m| m.is_file() && m.len() == *size)
            });
        if intact {
            return Ok(PullSummary {
                resolved,
                files,
                downloaded: 0,
                resumed: 0,
                reused_files: names.len(),
                up_to_date: true,
                elapsed: started.elapsed(),
            });
        }
    }
    // A marker of another digest is stale from here on.
    let _ = std::fs::remove_file(&marker_path);
    let mut summary = PullSummary {
        resolved: resolved.clone(),
        files: files.clone(),
        downloaded: 0,
        resumed: 0,
        reused_files: 0,
        up_to_date: false,
        elapsed: Duration::ZERO,
    };
    let progress = |n: u64| {
        if let Some(c) = &counters {
            c.add_bytes(n);
        }
    };
    let repository = reference.repository.as_str();
    let mut fetches = futures::stream::iter(fetched.manifest.layers.iter().zip(&names))
        .map(|(layer, name)| async move {
            fetch_with_retries(client, repository, layer, name, dest, &progress)
                .await
                .map(|outcome| (layer, outcome))
        })
        .buffer_unordered(usize::from(jobs.max(1)));
    while let Some(fetched_layer) = fetches.next().await {
        let (layer, outcome) = fetched_layer?;
        summary.downloaded += outcome.downloaded;
        summary.resumed += outcome.resumed_from;
        if outcome.reused {
            summary.reused_files += 1;
            if let Some(c) = &counters {
                c.add_bytes(layer.size);
            }
        }
        if let Some(c) = &counters {
            c.add_file();
        }
    }
    let marker = PullMarker {
        reference: resolved.to_string(),
        digest: fetched.digest,
        files,
    };
    write_marker(&marker_path, &marker)?;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// Fetches one layer, retrying broken transfers (each retry resumes).
async fn fetch_with_retries(
    client: &RegistryClient,
    repository: &str,
    layer: &Descriptor,
    name: &str,
    dest: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<blob::BlobOutcome> {
    let mut delay = RETRY_DELAY;
    let mut attempt = 1;
    loop {
        match blob::fetch(client, repository, layer, name, dest, progress).await {
            Ok(outcome) => return Ok(outcome),
            Err(err @ OciError::Http { .. }) if attempt < ATTEMPTS => {
                tracing::warn!(
                    "{name}: {err}; retrying in {delay:?} (attempt {attempt} of {ATTEMPTS})"
                );
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

fn read_marker(path: &Path) -> Option<PullMarker> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn write_marker(path: &Path, marker: &PullMarker) -> Result<()> {
    let tmp: PathBuf = blob::partial_path(path);
    let bytes = serde_json::to_vec_pretty(marker).map_err(|e| OciError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(&tmp, bytes).map_err(OciError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(OciError::io(path))
}
