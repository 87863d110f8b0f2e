//! Walking the source tree into a [`Manifest`]: which directories, files and
//! symlinks a preload consists of, after exclusions and the weight-variant
//! filter.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::manifest::{DirEntry, FileEntry, Manifest, SymlinkEntry, FORMAT};
use crate::{MARKER_NAME, TMP_SUFFIX};

/// Prefixes always excluded (merged with `--exclude`), as the operator expects.
pub const DEFAULT_EXCLUDES: [&str; 2] = [".cache/", ".git/"];

/// Weight variant to keep when a model ships several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// Drop `X.safetensors` when `X.fp16.safetensors` exists beside it.
    Fp16,
}

/// What to leave out of the scan.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// Relative-path prefixes to skip (a directory is skipped when
    /// `<dir>/` starts with one; a file when its path or its name does).
    pub excludes: Vec<String>,
    /// Weight variant filter.
    pub variant: Option<Variant>,
}

impl ScanOptions {
    /// Options with the default exclusions plus `extra` (empty items ignored).
    pub fn with_excludes<I, S>(extra: I, variant: Option<Variant>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut excludes: Vec<String> = DEFAULT_EXCLUDES.iter().map(|s| s.to_string()).collect();
        for item in extra {
            let item = item.as_ref().trim().trim_start_matches("./");
            if !item.is_empty() && !excludes.iter().any(|e| e == item) {
                excludes.push(item.to_owned());
            }
        }
        ScanOptions { excludes, variant }
    }

    fn excludes_dir(&self, rel: &str) -> bool {
        let with_slash = format!("{rel}/");
        self.excludes
            .iter()
            .any(|e| with_slash.starts_with(e.as_str()))
    }

    fn excludes_file(&self, rel: &str) -> bool {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        self.excludes
            .iter()
            .any(|e| rel.starts_with(e.as_str()) || name.starts_with(e.as_str()))
    }
}

/// Counts of what the scan left out, for the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Files and directories excluded by prefix.
    pub excluded: usize,
    /// Files dropped by the variant filter.
    pub variant: usize,
    /// Sockets, FIFOs and device nodes.
    pub special: usize,
}

/// Scans `root` into a manifest (without checksums).
pub fn scan(root: &Path, options: &ScanOptions) -> Result<(Manifest, Skipped)> {
    let meta = fs::metadata(root)
        .with_context(|| format!("cannot read source directory {}", root.display()))?;
    if !meta.is_dir() {
        bail!("source {} is not a directory", root.display());
    }
    let mut manifest = Manifest {
        format: FORMAT,
        checksum: None,
        dirs: Vec::new(),
        files: Vec::new(),
        symlinks: Vec::new(),
    };
    let mut skipped = Skipped::default();
    walk(root, "", options, &mut manifest, &mut skipped)?;
    if options.variant == Some(Variant::Fp16) {
        skipped.variant = drop_non_fp16(&mut manifest.files);
    }
    manifest.files.sort_by(|a, b| a.path.cmp(&b.path));
    manifest.symlinks.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((manifest, skipped))
}

fn walk(
    root: &Path,
    rel_dir: &str,
    options: &ScanOptions,
    manifest: &mut Manifest,
    skipped: &mut Skipped,
) -> Result<()> {
    let dir = root.join(rel_dir);
    let mut entries = fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    entries.sort();
    for name in entries {
        let name = name
            .into_string()
            .map_err(|n| anyhow!("file name {n:?} in {} is not UTF-8", dir.display()))?;
        if (rel_dir.is_empty() && name == MARKER_NAME) || name.ends_with(TMP_SUFFIX) {
            continue;
        }
        let rel = if rel_dir.is_empty() {
            name.clone()
        } else {
            format!("{rel_dir}/{name}")
        };
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path)
            .with_context(|| format!("cannot stat {}", path.display()))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            if options.excludes_dir(&rel) {
                skipped.excluded += 1;
                continue;
            }
            manifest.dirs.push(DirEntry {
                path: rel.clone(),
                mode: meta.permissions().mode() & 0o7777,
            });
            walk(root, &rel, options, manifest, skipped)?;
        } else if options.excludes_file(&rel) {
            skipped.excluded += 1;
        } else if kind.is_file() {
            manifest.files.push(FileEntry {
                path: rel,
                size: meta.len(),
                mode: meta.permissions().mode() & 0o7777,
                mtime_ns: meta
                    .mtime()
                    .saturating_mul(1_000_000_000)
                    .saturating_add(meta.mtime_nsec()),
                chunks: None,
            });
        } else if kind.is_symlink() {
            let target = fs::read_link(&path)
                .with_context(|| format!("cannot read link {}", path.display()))?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|t| anyhow!("link target {t:?} of {} is not UTF-8", path.display()))?;
            manifest.symlinks.push(SymlinkEntry { path: rel, target });
        } else {
            skipped.special += 1;
        }
    }
    Ok(())
}

/// Removes `X.safetensors` when `X.fp16.safetensors` exists in the same directory.
fn drop_non_fp16(files: &mut Vec<FileEntry>) -> usize {
    let present: HashSet<String> = files.iter().map(|f| f.path.clone()).collect();
    let before = files.len();
    files.retain(|f| {
        let Some(stem) = f.path.strip_suffix(".safetensors") else {
            return true;
        };
        stem.ends_with(".fp16") || !present.contains(&format!("{stem}.fp16.safetensors"))
    });
    before - files.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn touch(root: &Path, rel: &str, bytes: &[u8]) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn lists_files_dirs_and_links_with_default_exclusions() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "config.json", b"{}");
        touch(root, "weights/model.bin", b"12345");
        touch(root, ".git/HEAD", b"ref");
        touch(root, ".cache/huggingface/x", b"x");
        touch(root, "stale.bin.flash-tmp", b"half");
        touch(root, MARKER_NAME, b"{}");
        symlink("weights/model.bin", root.join("link.bin")).unwrap();

        let (m, skipped) = scan(root, &ScanOptions::with_excludes([""; 0], None)).unwrap();
        let paths: Vec<_> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["config.json", "weights/model.bin"]);
        assert_eq!(
            m.dirs.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(),
            ["weights"]
        );
        assert_eq!(m.symlinks[0].target, "weights/model.bin");
        assert_eq!(m.total_bytes(), 7);
        assert_eq!(skipped.excluded, 2);
    }

    #[test]
    fn extra_excludes_match_path_or_name_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "a/optimizer.pt", b"1");
        touch(root, "a/model.bin", b"1");
        touch(root, "logs/x", b"1");
        let options = ScanOptions::with_excludes(["optimizer", "logs/", " "], None);
        let (m, _) = scan(root, &options).unwrap();
        let paths: Vec<_> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a/model.bin"]);
    }

    #[test]
    fn fp16_variant_drops_full_precision_twins() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "unet/model.safetensors", b"1");
        touch(root, "unet/model.fp16.safetensors", b"1");
        touch(root, "vae/model.safetensors", b"1");
        let (m, skipped) = scan(
            root,
            &ScanOptions::with_excludes([""; 0], Some(Variant::Fp16)),
        )
        .unwrap();
        let paths: Vec<_> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["unet/model.fp16.safetensors", "vae/model.safetensors"]
        );
        assert_eq!(skipped.variant, 1);
    }

    #[test]
    fn a_missing_source_is_a_clear_error() {
        let err = scan(Path::new("/no/such/dir"), &ScanOptions::default()).unwrap_err();
        assert!(format!("{err:#}").contains("cannot read source directory /no/such/dir"));
    }
}
