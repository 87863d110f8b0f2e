//! The manifest: what a preload consists of (directories, files with size,
//! mode and modification time, symlinks) and, optionally, per-chunk
//! checksums. It is what `--emit-manifest` writes, what `--manifest` reads
//! and what the completion marker stores.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::checksum::ChecksumSpec;

/// Version of the manifest format written by this build.
pub const FORMAT: u32 = 1;

/// A directory of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// Path relative to the root, `/`-separated.
    pub path: String,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// A regular file of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the root, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time in nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Hex digest of each chunk, when checksums were computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<String>>,
}

impl FileEntry {
    /// Whether `other` describes the same content by the quick check: path,
    /// size, mode and modification time.
    pub fn same_stat(&self, other: &FileEntry) -> bool {
        self.path == other.path
            && self.size == other.size
            && self.mode == other.mode
            && self.mtime_ns == other.mtime_ns
    }
}

/// A symbolic link of the tree, recreated as is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymlinkEntry {
    /// Path relative to the root, `/`-separated.
    pub path: String,
    /// The link's target, unchanged.
    pub target: String,
}

/// A tree of files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`FORMAT`]).
    pub format: u32,
    /// How `FileEntry::chunks` were computed; absent without checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<ChecksumSpec>,
    /// Directories, parents before children.
    pub dirs: Vec<DirEntry>,
    /// Regular files, sorted by path.
    pub files: Vec<FileEntry>,
    /// Symbolic links, sorted by path.
    #[serde(default)]
    pub symlinks: Vec<SymlinkEntry>,
}

impl Manifest {
    /// Total bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Whether `other` describes the same tree: the same directories,
    /// symlinks and files by the quick check (checksums are not compared).
    pub fn same_tree(&self, other: &Manifest) -> bool {
        self.dirs == other.dirs
            && self.symlinks == other.symlinks
            && self.files.len() == other.files.len()
            && self
                .files
                .iter()
                .zip(&other.files)
                .all(|(a, b)| a.same_stat(b))
    }

    /// Reads a manifest file.
    pub fn read(path: &Path) -> Result<Manifest> {
        let text =
            fs::read(path).with_context(|| format!("cannot read manifest {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid manifest {}", path.display()))
    }

    /// Parses and checks a manifest.
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        let manifest: Manifest = serde_json::from_slice(bytes)?;
        if manifest.format != FORMAT {
            bail!(
                "manifest format {} is not supported (expected {FORMAT})",
                manifest.format
            );
        }
        for file in &manifest.files {
            check_relative(&file.path)?;
            if let (Some(spec), Some(chunks)) = (&manifest.checksum, &file.chunks) {
                if spec.chunk_bytes == 0 {
                    bail!("checksum chunk_bytes must be positive");
                }
                if chunks.len() as u64 != spec.chunks(file.size) {
                    bail!(
                        "{}: {} chunk checksums for {} bytes, expected {}",
                        file.path,
                        chunks.len(),
                        file.size,
                        spec.chunks(file.size)
                    );
                }
            }
        }
        for dir in &manifest.dirs {
            check_relative(&dir.path)?;
        }
        for link in &manifest.symlinks {
            check_relative(&link.path)?;
        }
        Ok(manifest)
    }

    /// Serialises as pretty JSON with a trailing newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// Rejects paths that could escape the root: absolute, empty, `.` or `..` components.
pub fn check_relative(path: &str) -> Result<()> {
    if path.is_empty()
        || path.starts_with('/')
        || path
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        bail!("unsafe path {path:?} in manifest");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Algorithm;

    fn file(path: &str, size: u64) -> FileEntry {
        FileEntry {
            path: path.into(),
            size,
            mode: 0o644,
            mtime_ns: 1,
            chunks: None,
        }
    }

    fn manifest(files: Vec<FileEntry>) -> Manifest {
        Manifest {
            format: FORMAT,
            checksum: None,
            dirs: vec![],
            files,
            symlinks: vec![],
        }
    }

    #[test]
    fn same_tree_ignores_checksums_but_not_stats() {
        let a = manifest(vec![file("a", 1), file("b/c", 2)]);
        let mut b = a.clone();
        b.files[0].chunks = Some(vec!["00".into()]);
        assert!(a.same_tree(&b));
        b.files[1].mtime_ns = 2;
        assert!(!a.same_tree(&b));
        assert!(!a.same_tree(&manifest(vec![file("a", 1)])));
        assert_eq!(a.total_bytes(), 3);
    }

    #[test]
    fn round_trips_through_json() {
        let mut m = manifest(vec![file("a", 3)]);
        m.checksum = Some(ChecksumSpec {
            algorithm: Algorithm::Sha256,
            chunk_bytes: 2,
        });
        m.files[0].chunks = Some(vec!["aa".into(), "bb".into()]);
        assert_eq!(Manifest::parse(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn rejects_escaping_paths_and_wrong_chunk_counts() {
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            let m = manifest(vec![file(bad, 1)]);
            assert!(Manifest::parse(&m.to_json()).is_err(), "{bad}");
        }
        let mut m = manifest(vec![file("a", 3)]);
        m.checksum = Some(ChecksumSpec {
            algorithm: Algorithm::Xxh3,
            chunk_bytes: 2,
        });
        m.files[0].chunks = Some(vec!["aa".into()]);
        assert!(Manifest::parse(&m.to_json()).is_err());
        let mut m = manifest(vec![]);
        m.format = 99;
        assert!(Manifest::parse(&m.to_json()).is_err());
    }
}
