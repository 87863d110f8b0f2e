//! Downloading one layer into a file: streamed into `<name>.partial`,
//! hashed while it arrives, resumed with `Range: bytes=N-` when a partial
//! file is there (a registry that answers 200 instead of 206 restarts it),
//! checked against the descriptor's size and SHA-256, then renamed into
//! place. A transfer cut short keeps the partial file for the next try.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use sha2::{Digest as _, Sha256};

use super::client::RegistryClient;
use super::digest::Digest;
use super::error::{OciError, Result};
use super::manifest::Descriptor;

/// Suffix of a layer file being downloaded.
pub const PARTIAL_SUFFIX: &str = ".partial";
/// Buffer size of hashing existing files.
const HASH_BUFFER: usize = 1 << 20;

/// What happened to one layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobOutcome {
    /// Final path of the file.
    pub path: PathBuf,
    /// Bytes received over the network.
    pub downloaded: u64,
    /// Bytes of a partial file that the download continued from.
    pub resumed_from: u64,
    /// The file was already complete and verified; nothing was fetched.
    pub reused: bool,
}

/// Path of the partial download of `final_path`.
pub fn partial_path(final_path: &Path) -> PathBuf {
    let mut name = final_path.as_os_str().to_owned();
    name.push(PARTIAL_SUFFIX);
    PathBuf::from(name)
}

/// SHA-256 and length of the first bytes of `file` (all of it).
fn hash_file(file: &mut std::fs::File, path: &Path) -> Result<(Sha256, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; HASH_BUFFER];
    let mut total = 0u64;
    file.seek(SeekFrom::Start(0)).map_err(OciError::io(path))?;
    loop {
        let n = file.read(&mut buf).map_err(OciError::io(path))?;
        if n == 0 {
            return Ok((hasher, total));
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
}

/// Downloads `layer` of `repository` to `dest/title`. `progress` is told
/// of every chunk received (bytes).
pub async fn fetch(
    client: &RegistryClient,
    repository: &str,
    layer: &Descriptor,
    title: &str,
    dest: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<BlobOutcome> {
    let final_path = dest.join(title);
    let partial = partial_path(&final_path);
    if let Ok(meta) = std::fs::metadata(&final_path) {
        if meta.is_file() && meta.len() == layer.size {
            let mut file = std::fs::File::open(&final_path).map_err(OciError::io(&final_path))?;
            let (hasher, _) = hash_file(&mut file, &final_path)?;
            if Digest::from_hasher(hasher) == layer.digest {
                return Ok(BlobOutcome {
                    path: final_path,
                    downloaded: 0,
                    resumed_from: 0,
                    reused: true,
                });
            }
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&partial)
        .map_err(OciError::io(&partial))?;
    let (mut hasher, mut have) = hash_file(&mut file, &partial)?;
    if have > layer.size {
        file.set_len(0).map_err(OciError::io(&partial))?;
        (hasher, have) = (Sha256::new(), 0);
    }
    if have == layer.size && have > 0 {
        // Complete but not renamed (the previous run stopped in between).
        if Digest::from_hasher(hasher.clone()) == layer.digest {
            file.sync_all().map_err(OciError::io(&partial))?;
            drop(file);
            std::fs::rename(&partial, &final_path).map_err(OciError::io(&final_path))?;
            return Ok(BlobOutcome {
                path: final_path,
                downloaded: 0,
                resumed_from: have,
                reused: false,
            });
        }
        file.set_len(0).map_err(OciError::io(&partial))?;
        (hasher, have) = (Sha256::new(), 0);
    }
    let mut response = match client.blob(repository, &layer.digest, have).await {
        Ok(response) => response,
        Err(err) => {
            if have == 0 {
                drop(file);
                let _ = std::fs::remove_file(&partial);
            }
            return Err(err);
        }
    };
    let restart = match response.status() {
        StatusCode::PARTIAL_CONTENT if have > 0 => {
            let start = content_range_start(response.headers());
            if start != Some(have) {
                return Err(OciError::Protocol {
                    host: client.registry().to_owned(),
                    reason: format!(
                        "blob {} answered 206 from byte {start:?}, asked from {have}",
                        layer.digest
                    ),
                });
            }
            false
        }
        StatusCode::RANGE_NOT_SATISFIABLE => {
            response = client.blob(repository, &layer.digest, 0).await?;
            true
        }
        _ => true,
    };
    if restart && have > 0 {
        tracing::info!(
            "registry {} ignored the range request for {title}: downloading it again from the start",
            client.registry()
        );
        file.set_len(0).map_err(OciError::io(&partial))?;
        (hasher, have) = (Sha256::new(), 0);
    }
    let resumed_from = have;
    file.seek(SeekFrom::Start(have))
        .map_err(OciError::io(&partial))?;
    let mut downloaded = 0u64;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => {
                // Keep what arrived: the next try resumes from it.
                let _ = file.flush();
                return Err(OciError::Http {
                    host: client.registry().to_owned(),
                    error,
                });
            }
        };
        if have + chunk.len() as u64 > layer.size {
            drop(file);
            let _ = std::fs::remove_file(&partial);
            return Err(OciError::LayerSizeMismatch {
                title: title.to_owned(),
                expected: layer.size,
                got: have + chunk.len() as u64,
            });
        }
        file.write_all(&chunk).map_err(OciError::io(&partial))?;
        hasher.update(&chunk);
        have += chunk.len() as u64;
        downloaded += chunk.len() as u64;
        progress(chunk.len() as u64);
    }
    if have != layer.size {
        return Err(OciError::LayerSizeMismatch {
            title: title.to_owned(),
            expected: layer.size,
            got: have,
        });
    }
    let got = Digest::from_hasher(hasher);
    if got != layer.digest {
        drop(file);
        let _ = std::fs::remove_file(&partial);
        return Err(OciError::LayerDigestMismatch {
            title: title.to_owned(),
            expected: layer.digest.clone(),
            got,
        });
    }
    file.sync_all().map_err(OciError::io(&partial))?;
    drop(file);
    std::fs::rename(&partial, &final_path).map_err(OciError::io(&final_path))?;
    Ok(BlobOutcome {
        path: final_path,
        downloaded,
        resumed_from,
        reused: false,
    })
}

/// First byte of a `Content-Range: bytes <start>-<end>/<size>` header.
fn content_range_start(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let value = headers.get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    let range = value.trim().strip_prefix("bytes")?.trim();
    range.split('-').next()?.trim().parse().ok()
}
