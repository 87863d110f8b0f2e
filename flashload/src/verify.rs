//! Checking a copy: sizes of every file (always), and chunk checksums of a
//! whole tree (for `--emit-manifest` on the source, and for re-checking a
//! complete destination against its marker with `--verify`).

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::checksum::ChecksumSpec;
use crate::copy::hash_range;
use crate::manifest::Manifest;
use crate::plan::{self, Task};
use crate::pool;
use crate::progress::Counters;

/// Most mismatches listed in one error line.
const LISTED: usize = 3;

/// Checks that every file of `manifest` exists in `root` with its size.
pub fn sizes(root: &Path, manifest: &Manifest) -> Result<()> {
    let mut problems = Vec::new();
    for file in &manifest.files {
        match fs::symlink_metadata(root.join(&file.path)) {
            Ok(meta) if meta.is_file() && meta.size() == file.size => {}
            Ok(meta) => problems.push(format!(
                "{}: size mismatch (src={} dst={})",
                file.path,
                file.size,
                meta.size()
            )),
            Err(_) => problems.push(format!("{}: missing in destination", file.path)),
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let count = problems.len();
    problems.truncate(LISTED);
    bail!(
        "verification failed: {count} file(s): {}{}",
        problems.join("; "),
        if count > LISTED { "; ..." } else { "" }
    )
}

/// Computes the chunk checksums of every file of `manifest` under `root`,
/// in parallel; returns them in `manifest.files` order.
pub fn hash_tree(
    root: &Path,
    manifest: &Manifest,
    spec: ChecksumSpec,
    jobs: usize,
    buffer_bytes: usize,
    counters: &Arc<Counters>,
) -> Result<Vec<Vec<String>>> {
    let sizes: Vec<u64> = manifest.files.iter().map(|f| f.size).collect();
    let tasks = plan::tasks(&sizes, spec.chunk_bytes);
    let digests: Vec<std::sync::Mutex<Vec<String>>> = sizes
        .iter()
        .map(|&size| {
            let chunks = usize::try_from(spec.chunks(size)).unwrap_or(0);
            std::sync::Mutex::new(vec![String::new(); chunks])
        })
        .collect();
    pool::run(jobs, buffer_bytes, &tasks, |task: &Task, buf, _| {
        let entry = &manifest.files[task.job];
        let path = root.join(&entry.path);
        let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
        let digest = hash_range(&file, task.offset, task.len, buf, spec)
            .with_context(|| format!("cannot read {}", path.display()))?;
        counters.add_bytes(task.len);
        let mut slot = digests[task.job].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = slot.get_mut(usize::try_from(task.chunk).unwrap_or(usize::MAX)) {
            *d = digest;
        }
        Ok(())
    })?;
    Ok(digests
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect())
}

/// Paths of `manifest`'s files whose digests in `actual` differ from the
/// recorded ones (files without recorded digests count as differing).
pub fn mismatches(manifest: &Manifest, actual: &[Vec<String>]) -> Vec<String> {
    manifest
        .files
        .iter()
        .zip(actual)
        .filter(|(f, a)| f.chunks.as_ref() != Some(*a))
        .map(|(f, _)| f.path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Algorithm;
    use crate::manifest::{FileEntry, FORMAT};

    fn manifest(files: &[(&str, u64)]) -> Manifest {
        Manifest {
            format: FORMAT,
            checksum: None,
            dirs: vec![],
            files: files
                .iter()
                .map(|(p, s)| FileEntry {
                    path: (*p).into(),
                    size: *s,
                    mode: 0o644,
                    mtime_ns: 0,
                    chunks: None,
                })
                .collect(),
            symlinks: vec![],
        }
    }

    #[test]
    fn size_check_lists_missing_and_short_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("ok"), b"abc").unwrap();
        fs::write(dir.path().join("short"), b"a").unwrap();
        assert!(sizes(dir.path(), &manifest(&[("ok", 3)])).is_ok());
        let err = sizes(
            dir.path(),
            &manifest(&[("ok", 3), ("short", 3), ("gone", 1)]),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "verification failed: 2 file(s): short: size mismatch (src=3 dst=1); gone: missing in destination"
        );
    }

    #[test]
    fn tree_hashes_are_per_chunk_and_detect_changes() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), b"0123456789").unwrap();
        fs::write(dir.path().join("b"), b"").unwrap();
        let spec = ChecksumSpec {
            algorithm: Algorithm::Xxh3,
            chunk_bytes: 4,
        };
        let mut m = manifest(&[("a", 10), ("b", 0)]);
        let counters = Counters::new(10);
        let digests = hash_tree(dir.path(), &m, spec, 2, 4096, &counters).unwrap();
        assert_eq!(digests[0].len(), 3);
        assert_eq!(digests[1].len(), 1);
        assert_eq!(mismatches(&m, &digests), ["a", "b"]);
        for (f, d) in m.files.iter_mut().zip(&digests) {
            f.chunks = Some(d.clone());
        }
        assert!(mismatches(&m, &digests).is_empty());
        fs::write(dir.path().join("a"), b"0123456780").unwrap();
        let again = hash_tree(dir.path(), &m, spec, 2, 4096, &counters).unwrap();
        assert_eq!(mismatches(&m, &again), ["a"]);
        assert_eq!(again[0][..2], digests[0][..2]);
    }
}
