//! One preload from start to end: scan the source, skip when the marker says
//! an identical copy is complete, otherwise check space, copy, verify, write
//! the marker — and remove the partial copy when anything fails.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::checksum::{Algorithm, ChecksumSpec};
use crate::cleanup;
use crate::copy::{self, CopyJob, CopySettings, Method};
use crate::lock::DirLock;
use crate::manifest::Manifest;
use crate::marker;
use crate::plan;
use crate::progress::{Counters, ProgressMode, Reporter};
use crate::scan::{self, ScanOptions};
use crate::signal;
use crate::space::{self, SpaceProbe};
use crate::units::gigabytes_per_second;
use crate::TMP_SUFFIX;

/// Everything a preload needs to know, validated.
#[derive(Debug, Clone)]
pub struct Options {
    /// Source directory (the model volume).
    pub src: PathBuf,
    /// Destination directory (in tmpfs); created when missing.
    pub dst: PathBuf,
    /// Worker threads.
    pub jobs: usize,
    /// Bytes per read/write.
    pub buffer_bytes: usize,
    /// Range size large files are split into; also the checksum chunk size.
    pub chunk_bytes: u64,
    /// Verify chunk checksums of source and copy.
    pub verify: bool,
    /// Checksum algorithm for `verify`.
    pub algorithm: Algorithm,
    /// Expected manifest with checksums (implies `verify`).
    pub manifest: Option<PathBuf>,
    /// Exclusions and variant filter.
    pub scan: ScanOptions,
    /// The most the whole preload may occupy.
    pub max_bytes: Option<u64>,
    /// `fsync` files, directories and the marker.
    pub fsync: bool,
    /// Copy method.
    pub method: Method,
    /// Throughput cap in bytes per second.
    pub rate_limit: Option<u64>,
    /// Progress display.
    pub progress: ProgressMode,
    /// Interval of progress log lines.
    pub log_interval: Duration,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The destination already held a complete, identical copy.
    Skipped {
        /// Files in the preload.
        files: usize,
        /// Bytes in the preload.
        bytes: u64,
    },
    /// Files were copied.
    Copied {
        /// Files copied.
        files: usize,
        /// Bytes copied.
        bytes: u64,
        /// Files already in place and kept.
        reused_files: usize,
        /// Bytes already in place and kept.
        reused_bytes: u64,
    },
}

/// The result of a run, for the final line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// What happened.
    pub outcome: Outcome,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Checksum verified, if any.
    pub verified: Option<Algorithm>,
}

impl Summary {
    /// The final line: bytes, seconds and GB/s.
    pub fn line(&self, dst: &Path) -> String {
        let secs = self.elapsed.as_secs_f64();
        let verified = match self.verified {
            Some(a) => format!("sizes and {a} checksums"),
            None => "sizes".to_owned(),
        };
        match &self.outcome {
            Outcome::Skipped { files, bytes } => format!(
                "flashload: {} already holds a complete copy ({files} files, {bytes} bytes); \
                 nothing copied in {secs:.3} s (verified {verified})",
                dst.display()
            ),
            Outcome::Copied {
                files,
                bytes,
                reused_files,
                reused_bytes,
            } => format!(
                "flashload: copied {files} files, {bytes} bytes in {secs:.3} s ({}); \
                 kept {reused_files} files, {reused_bytes} bytes already in place; verified {verified}",
                gigabytes_per_second(*bytes, self.elapsed)
            ),
        }
    }
}

/// Runs a preload; `probe` tells the free space of the destination.
pub fn run(options: &Options, probe: &dyn SpaceProbe) -> Result<Summary> {
    let started = Instant::now();
    let (src, dst) = resolve_paths(&options.src, &options.dst)?;
    let (mut tree, skipped) = scan::scan(&src, &options.scan)?;
    tracing::info!(
        src = %src.display(),
        dst = %dst.display(),
        files = tree.files.len(),
        bytes = tree.total_bytes(),
        excluded = skipped.excluded,
        variant_dropped = skipped.variant,
        special_skipped = skipped.special,
        "scanned source"
    );
    let expected = match &options.manifest {
        Some(path) => Some(expected_manifest(path, &tree)?),
        None => None,
    };
    let spec = match &expected {
        Some(m) => m.checksum,
        None => options.verify.then_some(ChecksumSpec {
            algorithm: options.algorithm,
            chunk_bytes: options.chunk_bytes,
        }),
    };
    let chunk_bytes = spec.map_or(options.chunk_bytes, |s| s.chunk_bytes);
    tree.checksum = spec;

    let _lock = DirLock::acquire(&dst)?;
    let old = marker::read(&dst);
    if let Some(old) = &old {
        if complete_and_identical(old, &tree, &dst, expected.as_ref(), options)? {
            return Ok(Summary {
                outcome: Outcome::Skipped {
                    files: tree.files.len(),
                    bytes: tree.total_bytes(),
                },
                elapsed: started.elapsed(),
                verified: spec.map(|s| s.algorithm),
            });
        }
    }

    marker::remove(&dst)?;
    let stale = cleanup::remove_tmp_files(&dst)?;
    let dropped = match &old {
        Some(old) => cleanup::remove_dropped(&dst, old, &tree)?,
        None => 0,
    };
    if stale + dropped > 0 {
        tracing::info!(stale, dropped, "removed leftovers of an earlier preload");
    }

    // Nothing can be reused from an empty destination: skip the stat calls.
    let empty = fs::read_dir(&dst).map_or(true, |mut d| d.next().is_none());
    let work = plan::decide(&tree, &dst, spec.is_none() && !empty);
    let available = probe
        .available(&dst)
        .with_context(|| format!("cannot read free space of {}", dst.display()))?;
    space::check(
        work.bytes_to_copy,
        available,
        options.max_bytes,
        work.bytes_reused,
    )
    .map_err(|reason| anyhow!(reason))?;

    let copied = copy_tree(
        &src,
        &dst,
        &mut tree,
        &work,
        (chunk_bytes, spec),
        expected.as_ref(),
        options,
    );
    if let Err(err) = copied {
        let cleaned = cleanup::remove_partial(&dst, &tree);
        let note = match cleaned {
            Ok(()) => "partial copy removed".to_owned(),
            Err(e) => format!("removing the partial copy failed too: {e:#}"),
        };
        if let Some(sig) = signal::received() {
            bail!("interrupted by signal {sig}; {note}");
        }
        return Err(err.context(note));
    }
    Ok(Summary {
        outcome: Outcome::Copied {
            files: work.copy.len(),
            bytes: work.bytes_to_copy,
            reused_files: work.reuse.len(),
            reused_bytes: work.bytes_reused,
        },
        elapsed: started.elapsed(),
        verified: spec.map(|s| s.algorithm),
    })
}

fn resolve_paths(src: &Path, dst: &Path) -> Result<(PathBuf, PathBuf)> {
    let src = fs::canonicalize(src)
        .with_context(|| format!("cannot read source directory {}", src.display()))?;
    fs::create_dir_all(dst)
        .with_context(|| format!("cannot create destination {}", dst.display()))?;
    let dst = fs::canonicalize(dst)
        .with_context(|| format!("cannot resolve destination {}", dst.display()))?;
    if !dst.is_dir() {
        bail!("destination {} is not a directory", dst.display());
    }
    if dst.starts_with(&src) || src.starts_with(&dst) {
        bail!(
            "source {} and destination {} overlap",
            src.display(),
            dst.display()
        );
    }
    Ok((src, dst))
}

/// Reads `--manifest` and checks the scanned source has exactly its files and sizes.
fn expected_manifest(path: &Path, tree: &Manifest) -> Result<Manifest> {
    let mut expected = Manifest::read(path)?;
    expected.files.sort_by(|a, b| a.path.cmp(&b.path));
    if expected.checksum.is_none() || expected.files.iter().any(|f| f.chunks.is_none()) {
        bail!(
            "manifest {} has no checksums (write one with --emit-manifest)",
            path.display()
        );
    }
    let mut problems = Vec::new();
    let mut theirs = expected.files.iter().peekable();
    let mut ours = tree.files.iter().peekable();
    loop {
        match (ours.peek(), theirs.peek()) {
            (None, None) => break,
            (Some(o), Some(t)) if o.path == t.path => {
                if o.size != t.size {
                    problems.push(format!(
                        "{}: size {} but manifest says {}",
                        o.path, o.size, t.size
                    ));
                }
                ours.next();
                theirs.next();
            }
            (Some(o), Some(t)) if o.path < t.path => {
                problems.push(format!("{}: not in manifest", o.path));
                ours.next();
            }
            (Some(o), None) => {
                problems.push(format!("{}: not in manifest", o.path));
                ours.next();
            }
            (_, Some(t)) => {
                problems.push(format!("{}: missing in source", t.path));
                theirs.next();
            }
        }
    }
    if !problems.is_empty() {
        let count = problems.len();
        problems.truncate(3);
        bail!(
            "source does not match manifest {}: {count} difference(s): {}",
            path.display(),
            problems.join("; ")
        );
    }
    Ok(expected)
}

/// Whether `old` (the marker) describes this source and the destination
/// still holds it; with checksums, the copy is re-hashed and compared.
fn complete_and_identical(
    old: &Manifest,
    tree: &Manifest,
    dst: &Path,
    expected: Option<&Manifest>,
    options: &Options,
) -> Result<bool> {
    if !old.same_tree(tree) || !marker::files_present(dst, old) {
        tracing::info!("destination holds a different or incomplete preload; redoing it");
        return Ok(false);
    }
    let Some(spec) = tree.checksum else {
        return Ok(true);
    };
    if old.checksum != Some(spec) || old.files.iter().any(|f| f.chunks.is_none()) {
        tracing::info!(
            "the marker has no {} checksums; redoing the copy",
            spec.algorithm
        );
        return Ok(false);
    }
    if let Some(expected) = expected {
        let agree = old
            .files
            .iter()
            .zip(&expected.files)
            .all(|(a, b)| a.chunks == b.chunks);
        if !agree {
            tracing::info!("the marker's checksums differ from --manifest; redoing the copy");
            return Ok(false);
        }
    }
    let counters = Counters::new(old.total_bytes());
    let reporter = Reporter::start(
        "verify",
        counters.clone(),
        options.progress,
        options.log_interval,
    );
    let actual = crate::verify::hash_tree(
        dst,
        old,
        spec,
        options.jobs,
        options.buffer_bytes,
        &counters,
    );
    reporter.finish();
    let bad = crate::verify::mismatches(old, &actual?);
    if bad.is_empty() {
        return Ok(true);
    }
    tracing::warn!(
        files = bad.len(),
        first = %bad[0],
        "checksum mismatch in the existing copy; redoing it"
    );
    Ok(false)
}

fn copy_tree(
    src: &Path,
    dst: &Path,
    tree: &mut Manifest,
    work: &plan::Plan,
    (chunk_bytes, spec): (u64, Option<ChecksumSpec>),
    expected: Option<&Manifest>,
    options: &Options,
) -> Result<()> {
    make_dirs(dst, tree)?;
    let jobs: Vec<CopyJob> = work
        .copy
        .iter()
        .map(|&i| {
            let entry = tree.files[i].clone();
            let dst_path = dst.join(&entry.path);
            clear_dir_in_the_way(&dst_path)?;
            let expected = expected.and_then(|m| {
                m.files
                    .binary_search_by(|f| f.path.as_str().cmp(&entry.path))
                    .ok()
                    .and_then(|i| m.files[i].chunks.clone())
            });
            Ok(CopyJob::new(
                entry.clone(),
                src.join(&entry.path),
                dst_path,
                dst.join(format!("{}{TMP_SUFFIX}", entry.path)),
                expected,
                chunk_bytes,
            ))
        })
        .collect::<Result<_>>()?;
    copy::prepare(&jobs, chunk_bytes)?;
    let sizes: Vec<u64> = jobs.iter().map(|j| j.entry.size).collect();
    let tasks = plan::tasks(&sizes, chunk_bytes);
    let counters = Counters::new(work.bytes_to_copy);
    let reporter = Reporter::start(
        "copy",
        counters.clone(),
        options.progress,
        options.log_interval,
    );
    let settings = CopySettings {
        jobs: options.jobs,
        buffer_bytes: options.buffer_bytes,
        chunk_bytes,
        method: options.method,
        checksum: spec,
        fsync: options.fsync,
        rate_limit: options.rate_limit,
    };
    let result = copy::run(&jobs, &tasks, &settings, &counters);
    reporter.finish();
    result?;

    make_symlinks(dst, tree)?;
    crate::verify::sizes(dst, tree)?;
    set_dir_modes(dst, tree, options.fsync)?;
    if spec.is_some() {
        for (job, &i) in jobs.iter().zip(&work.copy) {
            tree.files[i].chunks = Some(job.digests());
        }
    }
    marker::write(dst, tree, options.fsync)
}

fn clear_dir_in_the_way(path: &Path) -> Result<()> {
    if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        fs::remove_dir_all(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

/// Creates the directories, writable by us until [`set_dir_modes`] runs.
fn make_dirs(dst: &Path, tree: &Manifest) -> Result<()> {
    for dir in &tree.dirs {
        let path = dst.join(&dir.path);
        match path.symlink_metadata() {
            Ok(m) if m.is_dir() => {}
            Ok(_) => fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?,
            Err(_) => {}
        }
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(dir.mode | 0o700))
            .with_context(|| format!("cannot set mode of {}", path.display()))?;
    }
    Ok(())
}

fn make_symlinks(dst: &Path, tree: &Manifest) -> Result<()> {
    for link in &tree.symlinks {
        let path = dst.join(&link.path);
        if let Ok(meta) = path.symlink_metadata() {
            if meta.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            }
            .with_context(|| format!("cannot remove {}", path.display()))?;
        }
        symlink(&link.target, &path)
            .with_context(|| format!("cannot create link {}", path.display()))?;
    }
    Ok(())
}

fn set_dir_modes(dst: &Path, tree: &Manifest, fsync: bool) -> Result<()> {
    for dir in tree.dirs.iter().rev() {
        let path = dst.join(&dir.path);
        if fsync {
            fs::File::open(&path)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("cannot fsync {}", path.display()))?;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(dir.mode))
            .with_context(|| format!("cannot set mode of {}", path.display()))?;
    }
    Ok(())
}

/// `--emit-manifest`: scans `src`, hashes every file and writes the manifest
/// to `out` (`-` for stdout).
pub fn emit_manifest(options: &Options, out: &Path) -> Result<Summary> {
    let started = Instant::now();
    let (mut tree, _) = scan::scan(&options.src, &options.scan)?;
    let spec = ChecksumSpec {
        algorithm: options.algorithm,
        chunk_bytes: options.chunk_bytes,
    };
    let counters = Counters::new(tree.total_bytes());
    let reporter = Reporter::start(
        "hash",
        counters.clone(),
        options.progress,
        options.log_interval,
    );
    let digests = crate::verify::hash_tree(
        &options.src,
        &tree,
        spec,
        options.jobs,
        options.buffer_bytes,
        &counters,
    );
    reporter.finish();
    for (file, d) in tree.files.iter_mut().zip(digests?) {
        file.chunks = Some(d);
    }
    tree.checksum = Some(spec);
    let json = tree.to_json();
    if out == Path::new("-") {
        io::stdout()
            .write_all(&json)
            .context("cannot write the manifest to stdout")?;
    } else {
        fs::write(out, json).with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(Summary {
        outcome: Outcome::Skipped {
            files: tree.files.len(),
            bytes: tree.total_bytes(),
        },
        elapsed: started.elapsed(),
        verified: Some(spec.algorithm),
    })
}
