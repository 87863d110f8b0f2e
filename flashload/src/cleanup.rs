//! Removing preloads: leftovers of an interrupted run, the partial copy of a
//! failed one, files a changed source no longer has, and (`--cleanup`) a
//! whole preload.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::lock::DirLock;
use crate::manifest::Manifest;
use crate::{marker, TMP_SUFFIX};

fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes every `*.flash-tmp` file under `dir`; returns how many.
pub fn remove_tmp_files(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            removed += remove_tmp_files(&path)?;
        } else if entry.file_name().to_string_lossy().ends_with(TMP_SUFFIX) {
            ignore_missing(fs::remove_file(&path))
                .with_context(|| format!("cannot remove {}", path.display()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes from `dst` the files, links and (empty) directories that `old`
/// lists and `new` does not: what a previous preload left that the source no
/// longer has. Returns how many entries went.
pub fn remove_dropped(dst: &Path, old: &Manifest, new: &Manifest) -> Result<usize> {
    let keep: HashSet<&str> = new
        .files
        .iter()
        .map(|f| f.path.as_str())
        .chain(new.symlinks.iter().map(|l| l.path.as_str()))
        .chain(new.dirs.iter().map(|d| d.path.as_str()))
        .collect();
    let mut removed = 0;
    for path in old
        .files
        .iter()
        .map(|f| &f.path)
        .chain(old.symlinks.iter().map(|l| &l.path))
        .filter(|p| !keep.contains(p.as_str()))
    {
        let full = dst.join(path);
        if full.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
            fs::remove_file(&full).with_context(|| format!("cannot remove {}", full.display()))?;
            removed += 1;
        }
    }
    for dir in old
        .dirs
        .iter()
        .rev()
        .filter(|d| !keep.contains(d.path.as_str()))
    {
        if fs::remove_dir(dst.join(&dir.path)).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes what a failed run may have written: the marker, temporary files,
/// and every file, link and then-empty directory of `manifest`. Files that
/// are not part of the preload are left alone.
pub fn remove_partial(dst: &Path, manifest: &Manifest) -> Result<()> {
    marker::remove(dst)?;
    remove_tmp_files(dst)?;
    for path in manifest
        .files
        .iter()
        .map(|f| &f.path)
        .chain(manifest.symlinks.iter().map(|l| &l.path))
    {
        let full = dst.join(path);
        if full.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
            ignore_missing(fs::remove_file(&full))
                .with_context(|| format!("cannot remove {}", full.display()))?;
        }
    }
    for dir in manifest.dirs.iter().rev() {
        let full = dst.join(&dir.path);
        let _ = fs::set_permissions(&full, fs::Permissions::from_mode(0o700));
        let _ = fs::remove_dir(&full);
    }
    Ok(())
}

/// What [`remove_preload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The destination did not exist.
    Absent,
    /// Everything inside was removed; the directory stays (a mount point).
    Emptied,
    /// The directory and everything in it were removed.
    Removed,
}

/// `--cleanup`: removes the preload at `dst`, marker first (so a concurrent
/// reader sees it incomplete), then its contents, then the directory itself
/// unless it is a mount point (an `emptyDir` or a tmpfs of its own).
pub fn remove_preload(dst: &Path) -> Result<Removal> {
    if dst.parent().is_none() || !dst.is_absolute() {
        bail!(
            "refusing to clean up {}: give an absolute path below /",
            dst.display()
        );
    }
    let meta = match fs::symlink_metadata(dst) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removal::Absent),
        Err(e) => return Err(e).with_context(|| format!("cannot stat {}", dst.display())),
    };
    if !meta.is_dir() {
        bail!("refusing to clean up {}: not a directory", dst.display());
    }
    let _lock = DirLock::acquire(dst)?;
    marker::remove(dst)?;
    for entry in fs::read_dir(dst).with_context(|| format!("cannot list {}", dst.display()))? {
        let path = entry?.path();
        remove_any(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    let parent_dev = dst
        .parent()
        .and_then(|p| fs::metadata(p).ok())
        .map(|m| m.dev());
    if parent_dev != Some(meta.dev()) {
        return Ok(Removal::Emptied);
    }
    match fs::remove_dir(dst) {
        Ok(()) => Ok(Removal::Removed),
        // A bind mount on the same device, or busy: emptied is what matters.
        Err(_) => Ok(Removal::Emptied),
    }
}

fn remove_any(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return ignore_missing(fs::remove_file(path));
    }
    // Read-only directories (copied modes) must become writable to be emptied.
    if meta.permissions().mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    for entry in fs::read_dir(path)? {
        remove_any(&entry?.path())?;
    }
    ignore_missing(fs::remove_dir(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{DirEntry, FileEntry, FORMAT};

    fn manifest(files: &[&str], dirs: &[&str]) -> Manifest {
        Manifest {
            format: FORMAT,
            checksum: None,
            dirs: dirs
                .iter()
                .map(|d| DirEntry {
                    path: (*d).into(),
                    mode: 0o755,
                })
                .collect(),
            files: files
                .iter()
                .map(|p| FileEntry {
                    path: (*p).into(),
                    size: 1,
                    mode: 0o644,
                    mtime_ns: 0,
                    chunks: None,
                })
                .collect(),
            symlinks: vec![],
        }
    }

    #[test]
    fn removes_tmp_files_recursively() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        fs::write(dir.path().join("a/b/x.flash-tmp"), b"").unwrap();
        fs::write(dir.path().join("y.flash-tmp"), b"").unwrap();
        fs::write(dir.path().join("keep"), b"").unwrap();
        assert_eq!(remove_tmp_files(dir.path()).unwrap(), 2);
        assert!(dir.path().join("keep").exists());
    }

    #[test]
    fn partial_removal_spares_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("d")).unwrap();
        fs::write(dir.path().join("d/f"), b"1").unwrap();
        fs::write(dir.path().join("other"), b"1").unwrap();
        remove_partial(dir.path(), &manifest(&["d/f"], &["d"])).unwrap();
        assert!(!dir.path().join("d").exists());
        assert!(dir.path().join("other").exists());
    }

    #[test]
    fn dropped_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("old")).unwrap();
        fs::write(dir.path().join("old/f"), b"1").unwrap();
        fs::write(dir.path().join("kept"), b"1").unwrap();
        let old = manifest(&["kept", "old/f"], &["old"]);
        let new = manifest(&["kept"], &[]);
        assert_eq!(remove_dropped(dir.path(), &old, &new).unwrap(), 2);
        assert!(dir.path().join("kept").exists());
        assert!(!dir.path().join("old").exists());
    }

    #[test]
    fn whole_preload_removal() {
        let parent = tempfile::tempdir().unwrap();
        let dst = parent.path().join("preload");
        fs::create_dir_all(dst.join("ro")).unwrap();
        fs::write(dst.join("ro/f"), b"1").unwrap();
        fs::set_permissions(dst.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        assert_eq!(remove_preload(&dst).unwrap(), Removal::Removed);
        assert!(!dst.exists());
        assert_eq!(remove_preload(&dst).unwrap(), Removal::Absent);
        assert!(remove_preload(Path::new("/")).is_err());
        assert!(remove_preload(Path::new("relative")).is_err());
    }
}
