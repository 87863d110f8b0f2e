//! The `.flashload-complete` marker: written last, after every file is in
//! place and verified, holding the manifest of what was copied. A restarted
//! pod whose source still matches it skips the copy; without it (or when it
//! differs) the copy is redone.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, Result};

use crate::manifest::Manifest;
use crate::{MARKER_NAME, TMP_SUFFIX};

/// Reads the marker of `dst`: `None` when absent or unreadable as a
/// manifest (an unreadable marker counts as no marker: the copy is redone).
pub fn read(dst: &Path) -> Option<Manifest> {
    let bytes = fs::read(dst.join(MARKER_NAME)).ok()?;
    Manifest::parse(&bytes).ok()
}

/// Removes the marker, so a run that stops from here on leaves the
/// destination marked incomplete.
pub fn remove(dst: &Path) -> Result<()> {
    match fs::remove_file(dst.join(MARKER_NAME)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove marker in {}", dst.display())),
    }
}

/// Writes the marker atomically (temporary file, then rename); with `fsync`
/// the file and the directory are flushed to stable storage first.
pub fn write(dst: &Path, manifest: &Manifest, fsync: bool) -> Result<()> {
    let tmp = dst.join(format!("{MARKER_NAME}{TMP_SUFFIX}"));
    let write = || -> io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(&manifest.to_json())?;
        if fsync {
            file.sync_all()?;
        }
        fs::rename(&tmp, dst.join(MARKER_NAME))?;
        if fsync {
            File::open(dst)?.sync_all()?;
        }
        Ok(())
    };
    write().with_context(|| format!("cannot write completion marker in {}", dst.display()))
}

/// Whether the files `marker` lists are all present in `dst` with their
/// recorded sizes (a cheap check that nobody removed or truncated them).
pub fn files_present(dst: &Path, marker: &Manifest) -> bool {
    marker.files.iter().all(|f| {
        fs::symlink_metadata(dst.join(&f.path))
            .map(|m| m.is_file() && m.size() == f.size)
            .unwrap_or(false)
    }) && marker.dirs.iter().all(|d| {
        dst.join(&d.path)
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir())
    }) && marker
        .symlinks
        .iter()
        .all(|l| fs::read_link(dst.join(&l.path)).is_ok_and(|t| t.as_os_str() == l.target.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{FileEntry, FORMAT};

    #[test]
    fn write_read_remove() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest {
            format: FORMAT,
            checksum: None,
            dirs: vec![],
            files: vec![FileEntry {
                path: "a".into(),
                size: 2,
                mode: 0o644,
                mtime_ns: 5,
                chunks: None,
            }],
            symlinks: vec![],
        };
        assert!(read(dir.path()).is_none());
        write(dir.path(), &m, true).unwrap();
        assert_eq!(read(dir.path()), Some(m.clone()));
        assert!(!files_present(dir.path(), &m));
        fs::write(dir.path().join("a"), b"xy").unwrap();
        assert!(files_present(dir.path(), &m));
        remove(dir.path()).unwrap();
        remove(dir.path()).unwrap();
        assert!(read(dir.path()).is_none());
    }

    #[test]
    fn a_garbled_marker_counts_as_none() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(MARKER_NAME), b"{not json").unwrap();
        assert!(read(dir.path()).is_none());
    }
}
