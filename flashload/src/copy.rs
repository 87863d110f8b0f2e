//! Moving bytes. Every file is written under a temporary name and renamed
//! into place once complete, with the source's mode and modification time,
//! so a name in the destination only ever holds a whole file. Large files
//! are split into chunk-sized ranges copied by different workers; the worker
//! finishing the last range renames the file.
//!
//! Methods: `copy_file_range` (in-kernel, same filesystem), `sendfile`
//! (in-kernel, any source file to any file), or `pread`/`pwrite` through a
//! page-aligned buffer, which is what checksum verification uses since it
//! needs the bytes in user space.

use std::fs::{self, File, FileTimes, Permissions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};

use crate::checksum::{ChecksumSpec, Hasher};
use crate::manifest::FileEntry;
use crate::plan::Task;
use crate::pool;
use crate::progress::Counters;
use crate::sys;

/// Ranges at least this long get a sequential read-ahead hint; for smaller
/// ones the extra system call costs more than it saves.
pub const READAHEAD_HINT_BYTES: u64 = 1 << 20;

/// How file contents are copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// `sendfile` without checksums (the fastest from a volume into tmpfs),
    /// `pread`/`pwrite` with checksums.
    Auto,
    /// `copy_file_range`, falling back to `sendfile` where the kernel refuses
    /// (different filesystems).
    CopyFileRange,
    /// `sendfile`.
    Sendfile,
    /// `pread`/`pwrite` through a page-aligned buffer.
    ReadWrite,
}

/// One file to copy.
#[derive(Debug)]
pub struct CopyJob {
    /// What the manifest says about it.
    pub entry: FileEntry,
    /// Source path.
    pub src: PathBuf,
    /// Final destination path.
    pub dst: PathBuf,
    /// Temporary path it is written under.
    pub tmp: PathBuf,
    /// Checksums the manifest given with `--manifest` expects, if any.
    pub expected: Option<Vec<String>>,
    chunks_left: AtomicU64,
    digests: Mutex<Vec<String>>,
}

impl CopyJob {
    /// A job for `entry`, split into chunks of `chunk_bytes`.
    pub fn new(
        entry: FileEntry,
        src: PathBuf,
        dst: PathBuf,
        tmp: PathBuf,
        expected: Option<Vec<String>>,
        chunk_bytes: u64,
    ) -> CopyJob {
        let chunks = entry.size.div_ceil(chunk_bytes.max(1)).max(1);
        CopyJob {
            entry,
            src,
            dst,
            tmp,
            expected,
            chunks_left: AtomicU64::new(chunks),
            digests: Mutex::new(vec![String::new(); usize::try_from(chunks).unwrap_or(0)]),
        }
    }

    /// The chunk digests computed while copying (empty strings without checksums).
    pub fn digests(&self) -> Vec<String> {
        self.digests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn single_chunk(&self, chunk_bytes: u64) -> bool {
        self.entry.size <= chunk_bytes
    }
}

/// How the copy runs.
#[derive(Debug, Clone, Copy)]
pub struct CopySettings {
    /// Worker threads.
    pub jobs: usize,
    /// Bytes per read/write (and per in-kernel copy call).
    pub buffer_bytes: usize,
    /// Range size large files are split into (the checksum chunk size).
    pub chunk_bytes: u64,
    /// Copy method.
    pub method: Method,
    /// Verify every chunk with this checksum.
    pub checksum: Option<ChecksumSpec>,
    /// `fsync` each file before renaming it.
    pub fsync: bool,
    /// Overall throughput cap in bytes per second.
    pub rate_limit: Option<u64>,
}

/// Creates the temporary files of multi-chunk jobs at full length, so their
/// ranges can be written by different workers.
pub fn prepare(jobs: &[CopyJob], chunk_bytes: u64) -> Result<()> {
    for job in jobs.iter().filter(|j| !j.single_chunk(chunk_bytes)) {
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&job.tmp)
            .with_context(|| format!("cannot create {}", job.tmp.display()))?;
        file.set_len(job.entry.size)
            .with_context(|| format!("cannot size {}", job.tmp.display()))?;
    }
    Ok(())
}

/// Copies every task of `jobs` (see [`crate::plan::tasks`]) with the settings.
pub fn run(
    jobs: &[CopyJob],
    tasks: &[Task],
    settings: &CopySettings,
    counters: &Arc<Counters>,
) -> Result<()> {
    let in_kernel_ok = AtomicBool::new(true);
    pool::run(
        settings.jobs,
        settings.buffer_bytes,
        tasks,
        |task, buf, failed| {
            let job = &jobs[task.job];
            copy_task(job, task, buf, settings, counters, &in_kernel_ok, failed)
                .with_context(|| format!("cannot copy {}", job.entry.path))
        },
    )
}

fn copy_task(
    job: &CopyJob,
    task: &Task,
    buf: &mut [u8],
    settings: &CopySettings,
    counters: &Counters,
    in_kernel_ok: &AtomicBool,
    failed: &AtomicBool,
) -> Result<()> {
    let src = File::open(&job.src).with_context(|| format!("cannot open {}", job.src.display()))?;
    if task.len >= READAHEAD_HINT_BYTES {
        sys::advise_sequential(&src);
    }
    let single = job.single_chunk(settings.chunk_bytes);
    let mut options = File::options();
    options.write(true).read(settings.checksum.is_some());
    if single {
        options.create(true).truncate(true).mode(0o600);
    }
    let dst = options
        .open(&job.tmp)
        .with_context(|| format!("cannot open {}", job.tmp.display()))?;

    let method = match (settings.method, settings.checksum) {
        (_, Some(_)) => Method::ReadWrite,
        (Method::Auto, None) => Method::Sendfile,
        (method, None) => method,
    };
    let copier = Copier {
        src: &src,
        dst: &dst,
        counters,
        rate_limit: settings.rate_limit,
        failed,
    };
    let end = task.offset + task.len;
    let source_digest = match method {
        Method::ReadWrite => Some(copier.read_write(task.offset, end, buf, settings.checksum)?),
        Method::Sendfile => {
            copier.sendfile(task.offset, end, buf.len())?;
            None
        }
        Method::CopyFileRange | Method::Auto => {
            copier.copy_file_range(task.offset, end, buf.len(), in_kernel_ok)?;
            None
        }
    };
    if let (Some(spec), Some(Some(source))) = (settings.checksum, source_digest) {
        check_chunk(job, task, spec, &dst, buf, source)?;
    }
    if job.chunks_left.fetch_sub(1, Ordering::AcqRel) == 1 {
        finalize(job, single.then_some(&dst), settings.fsync)?;
        counters.add_file();
    }
    Ok(())
}

/// Re-reads the chunk from the copy and compares digests: source vs copy,
/// and source vs the `--manifest` checksum when given.
fn check_chunk(
    job: &CopyJob,
    task: &Task,
    spec: ChecksumSpec,
    dst: &File,
    buf: &mut [u8],
    source: String,
) -> Result<()> {
    let range = format!("bytes {}..{}", task.offset, task.offset + task.len);
    if let Some(expected) = job
        .expected
        .as_ref()
        .and_then(|e| e.get(usize::try_from(task.chunk).unwrap_or(usize::MAX)))
    {
        if *expected != source {
            bail!(
                "checksum mismatch in {} ({range}): manifest has {} {expected}, source has {source}",
                job.entry.path,
                spec.algorithm
            );
        }
    }
    let copy = hash_range(dst, task.offset, task.len, buf, spec)?;
    if copy != source {
        bail!(
            "checksum mismatch in {} ({range}): source {} {source}, copy {copy}",
            job.entry.path,
            spec.algorithm
        );
    }
    let mut digests = job.digests.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot) = digests.get_mut(usize::try_from(task.chunk).unwrap_or(usize::MAX)) {
        *slot = source;
    }
    Ok(())
}

/// Hashes `len` bytes of `file` from `offset`.
pub fn hash_range(
    file: &File,
    offset: u64,
    len: u64,
    buf: &mut [u8],
    spec: ChecksumSpec,
) -> Result<String> {
    let mut hasher = Hasher::new(spec.algorithm);
    let mut pos = offset;
    let end = offset + len;
    while pos < end {
        let want = usize::try_from(end - pos)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            bail!("file ended at byte {pos}, expected {end}");
        }
        hasher.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(hasher.finish_hex())
}

struct Copier<'a> {
    src: &'a File,
    dst: &'a File,
    counters: &'a Counters,
    rate_limit: Option<u64>,
    failed: &'a AtomicBool,
}

impl Copier<'_> {
    fn step(&self, n: usize) -> Result<()> {
        self.counters.add_bytes(n as u64);
        if let Some(rate) = self.rate_limit.filter(|r| *r > 0) {
            let done = self.counters.bytes.load(Ordering::Relaxed);
            let due = Duration::from_secs_f64(done as f64 / rate as f64);
            let elapsed = self.counters.started.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
        if pool::stop_requested(self.failed) {
            return Err(anyhow!("stopped"));
        }
        Ok(())
    }

    fn shrank(&self, pos: u64) -> anyhow::Error {
        anyhow!("the source ended at byte {pos}: it changed while being copied")
    }

    fn read_write(
        &self,
        start: u64,
        end: u64,
        buf: &mut [u8],
        checksum: Option<ChecksumSpec>,
    ) -> Result<Option<String>> {
        let mut hasher = checksum.map(|spec| Hasher::new(spec.algorithm));
        let mut pos = start;
        while pos < end {
            let want = usize::try_from(end - pos)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = self.src.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                return Err(self.shrank(pos));
            }
            self.dst.write_all_at(&buf[..n], pos)?;
            if let Some(h) = hasher.as_mut() {
                h.update(&buf[..n]);
            }
            pos += n as u64;
            self.step(n)?;
        }
        Ok(hasher.map(Hasher::finish_hex))
    }

    fn sendfile(&self, start: u64, end: u64, piece: usize) -> Result<()> {
        if start != 0 {
            let mut dst = self.dst;
            dst.seek(SeekFrom::Start(start))?;
        }
        let mut pos = start;
        while pos < end {
            let want = usize::try_from(end - pos).unwrap_or(usize::MAX).min(piece);
            let n = sys::sendfile(self.dst, self.src, pos, want)?;
            if n == 0 {
                return Err(self.shrank(pos));
            }
            pos += n as u64;
            self.step(n)?;
        }
        Ok(())
    }

    fn copy_file_range(
        &self,
        start: u64,
        end: u64,
        piece: usize,
        in_kernel_ok: &AtomicBool,
    ) -> Result<()> {
        let mut pos = start;
        while pos < end {
            if !in_kernel_ok.load(Ordering::Relaxed) {
                return self.sendfile(pos, end, piece);
            }
            let want = usize::try_from(end - pos).unwrap_or(usize::MAX).min(piece);
            match sys::copy_file_range(self.src, pos, self.dst, pos, want) {
                Ok(0) => return Err(self.shrank(pos)),
                Ok(n) => {
                    pos += n as u64;
                    self.step(n)?;
                }
                Err(e) if sys::is_unsupported_copy(&e) => {
                    in_kernel_ok.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// The modification time of a manifest entry.
pub fn mtime(entry: &FileEntry) -> SystemTime {
    let ns = entry.mtime_ns;
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn finalize(job: &CopyJob, open: Option<&File>, fsync: bool) -> Result<()> {
    let reopened;
    let file = match open {
        Some(file) => file,
        None => {
            reopened = File::options()
                .write(true)
                .open(&job.tmp)
                .with_context(|| format!("cannot reopen {}", job.tmp.display()))?;
            &reopened
        }
    };
    let when = mtime(&job.entry);
    file.set_times(FileTimes::new().set_accessed(when).set_modified(when))
        .with_context(|| format!("cannot set times of {}", job.tmp.display()))?;
    if fsync {
        file.sync_all()
            .with_context(|| format!("cannot fsync {}", job.tmp.display()))?;
    }
    file.set_permissions(Permissions::from_mode(job.entry.mode))
        .with_context(|| format!("cannot set mode of {}", job.tmp.display()))?;
    fs::rename(&job.tmp, &job.dst).with_context(|| {
        format!(
            "cannot rename {} to {}",
            job.tmp.display(),
            job.dst.display()
        )
    })
}
