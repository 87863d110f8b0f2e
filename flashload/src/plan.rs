//! Deciding the work: which files must be copied and which already sit in
//! the destination unchanged, and how the copies split into tasks (one per
//! chunk, so large files are copied in parallel ranges).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::manifest::{FileEntry, Manifest};

/// The split between files to copy and files to keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Indexes into `Manifest::files` of the files to copy.
    pub copy: Vec<usize>,
    /// Indexes of files already in place (same size, mode and modification time).
    pub reuse: Vec<usize>,
    /// Bytes of the files to copy.
    pub bytes_to_copy: u64,
    /// Bytes of the files kept.
    pub bytes_reused: u64,
}

/// Splits `manifest`'s files. With `allow_reuse`, a destination file with
/// the source's size, mode and modification time is kept (this run or an
/// interrupted earlier one finished it: times are set only after the last
/// byte is written); otherwise everything is copied.
pub fn decide(manifest: &Manifest, dst: &Path, allow_reuse: bool) -> Plan {
    let mut plan = Plan::default();
    for (index, file) in manifest.files.iter().enumerate() {
        if allow_reuse && in_place(dst, file) {
            plan.reuse.push(index);
            plan.bytes_reused += file.size;
        } else {
            plan.copy.push(index);
            plan.bytes_to_copy += file.size;
        }
    }
    plan
}

fn in_place(dst: &Path, file: &FileEntry) -> bool {
    let Ok(meta) = fs::symlink_metadata(dst.join(&file.path)) else {
        return false;
    };
    let mtime_ns = meta
        .mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec());
    meta.is_file()
        && meta.size() == file.size
        && meta.permissions().mode() & 0o7777 == file.mode
        && mtime_ns == file.mtime_ns
}

/// One unit of copy work: a chunk of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// Index into the job list the tasks were built from.
    pub job: usize,
    /// Chunk number within the file.
    pub chunk: u64,
    /// First byte.
    pub offset: u64,
    /// Byte count (the whole file for a single-chunk file, possibly 0).
    pub len: u64,
}

/// Splits files of the given sizes into chunk tasks, largest first so the
/// long copies start early and the small ones fill the gaps at the end.
pub fn tasks(sizes: &[u64], chunk_bytes: u64) -> Vec<Task> {
    let chunk_bytes = chunk_bytes.max(1);
    let mut tasks = Vec::new();
    for (job, &size) in sizes.iter().enumerate() {
        let chunks = size.div_ceil(chunk_bytes).max(1);
        for chunk in 0..chunks {
            let offset = chunk * chunk_bytes;
            tasks.push(Task {
                job,
                chunk,
                offset,
                len: (size - offset).min(chunk_bytes),
            });
        }
    }
    tasks.sort_by(|a, b| {
        b.len
            .cmp(&a.len)
            .then(a.job.cmp(&b.job))
            .then(a.chunk.cmp(&b.chunk))
    });
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::FORMAT;
    use std::fs::{File, FileTimes};
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn large_files_split_into_chunks_largest_first() {
        let t = tasks(&[5, 25, 0], 10);
        let summary: Vec<_> = t
            .iter()
            .map(|t| (t.job, t.chunk, t.offset, t.len))
            .collect();
        assert_eq!(
            summary,
            [
                (1, 0, 0, 10),
                (1, 1, 10, 10),
                (0, 0, 0, 5),
                (1, 2, 20, 5),
                (2, 0, 0, 0)
            ]
        );
    }

    #[test]
    fn keeps_only_files_matching_size_mode_and_time() {
        let dir = tempfile::tempdir().unwrap();
        let mtime = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        for (name, bytes) in [
            ("same", &b"abc"[..]),
            ("resized", b"ab"),
            ("retimed", b"abc"),
        ] {
            let path = dir.path().join(name);
            fs::write(&path, bytes).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
            if name != "retimed" {
                let f = File::options().write(true).open(&path).unwrap();
                f.set_times(FileTimes::new().set_modified(mtime)).unwrap();
            }
        }
        let entry = |path: &str| FileEntry {
            path: path.into(),
            size: 3,
            mode: 0o644,
            mtime_ns: 1_700_000_000_123_456_789,
            chunks: None,
        };
        let manifest = Manifest {
            format: FORMAT,
            checksum: None,
            dirs: vec![],
            files: vec![
                entry("missing"),
                entry("resized"),
                entry("retimed"),
                entry("same"),
            ],
            symlinks: vec![],
        };
        let plan = decide(&manifest, dir.path(), true);
        assert_eq!(plan.reuse, [3]);
        assert_eq!(plan.copy, [0, 1, 2]);
        assert_eq!((plan.bytes_to_copy, plan.bytes_reused), (9, 3));
        let plan = decide(&manifest, dir.path(), false);
        assert_eq!(plan.copy.len(), 4);
    }
}
