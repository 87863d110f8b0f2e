//! Safe wrappers over the Linux system calls the copier needs and the
//! standard library does not expose: in-kernel copies (`copy_file_range`,
//! `sendfile`), read-ahead hints, free space (`statvfs`) and advisory locks.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Largest byte count passed to one in-kernel copy call (Linux caps a single
/// transfer at a little under 2 GiB anyway).
pub const MAX_KERNEL_COPY: usize = 0x7fff_f000;

fn offset(value: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(value)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset out of range"))
}

fn byte_count(result: isize) -> io::Result<usize> {
    usize::try_from(result).map_err(|_| io::Error::last_os_error())
}

/// Copies up to `len` bytes from `src` at `src_off` to `dst` at `dst_off`
/// inside the kernel, returning how many were copied (0 at end of file).
/// Fails with `EXDEV`, `EINVAL` or `ENOSYS` where the kernel cannot copy
/// between these two files; callers then fall back to [`sendfile`].
pub fn copy_file_range(
    src: &File,
    src_off: u64,
    dst: &File,
    dst_off: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off_in = offset(src_off)?;
    let mut off_out = offset(dst_off)?;
    // SAFETY: both descriptors are open files borrowed for the call, the
    // offsets point at live locals, and flags must be 0.
    let n = unsafe {
        libc::copy_file_range(
            src.as_raw_fd(),
            &mut off_in,
            dst.as_raw_fd(),
            &mut off_out,
            len.min(MAX_KERNEL_COPY),
            0,
        )
    };
    byte_count(n)
}

/// Copies up to `len` bytes from `src` at `src_off` to the current file
/// position of `dst` (which advances) inside the kernel; 0 means end of file.
pub fn sendfile(dst: &File, src: &File, src_off: u64, len: usize) -> io::Result<usize> {
    let mut off = offset(src_off)?;
    // SAFETY: both descriptors are open files borrowed for the call and the
    // offset points at a live local.
    let n = unsafe {
        libc::sendfile(
            dst.as_raw_fd(),
            src.as_raw_fd(),
            &mut off,
            len.min(MAX_KERNEL_COPY),
        )
    };
    byte_count(n)
}

/// Tells the kernel `file` will be read sequentially, so it reads ahead
/// aggressively. A hint only: errors are ignored.
pub fn advise_sequential(file: &File) {
    // SAFETY: posix_fadvise only reads the descriptor number and plain integers.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

/// Bytes an unprivileged writer may still allocate on the filesystem holding `path`.
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut stat = MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: c_path is a valid NUL-terminated string and stat points at
    // writable memory of the right type.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the structure.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between C libraries
    let bytes = (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64);
    Ok(bytes)
}

/// Result of [`try_lock_exclusive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockAttempt {
    /// The lock is ours.
    Acquired,
    /// Another process holds it.
    Busy,
}

/// Takes an exclusive advisory lock on `file` without waiting.
pub fn try_lock_exclusive(file: &File) -> io::Result<LockAttempt> {
    // SAFETY: flock only reads the descriptor number and flags.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(LockAttempt::Acquired);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(LockAttempt::Busy)
    } else {
        Err(err)
    }
}

/// Takes an exclusive advisory lock on `file`, waiting for other holders.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: flock only reads the descriptor number and flags.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Whether an in-kernel copy error means "this pair of files cannot be
/// copied that way" rather than a real I/O failure.
pub fn is_unsupported_copy(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EBADF)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    #[test]
    fn in_kernel_copies_move_the_requested_range() {
        let dir = tempfile::tempdir().unwrap();
        let src_path = dir.path().join("src");
        std::fs::write(&src_path, b"0123456789").unwrap();
        let src = File::open(&src_path).unwrap();
        let mut dst = tempfile::tempfile_in(dir.path()).unwrap();
        dst.write_all(b"..........").unwrap();

        match copy_file_range(&src, 2, &dst, 4, 3) {
            Ok(n) => assert_eq!(n, 3),
            Err(e) => assert!(is_unsupported_copy(&e), "{e}"),
        }
        dst.seek(SeekFrom::Start(0)).unwrap();
        let mut text = String::new();
        dst.read_to_string(&mut text).unwrap();
        assert!(text == "....234..." || text == "..........", "{text}");

        dst.seek(SeekFrom::Start(1)).unwrap();
        assert_eq!(sendfile(&dst, &src, 7, 10).unwrap(), 3);
        dst.seek(SeekFrom::Start(0)).unwrap();
        let mut text = String::new();
        dst.read_to_string(&mut text).unwrap();
        assert_eq!(&text[..4], ".789");
    }

    #[test]
    fn free_space_of_a_real_directory_is_known() {
        let dir = tempfile::tempdir().unwrap();
        assert!(available_bytes(dir.path()).is_ok());
        assert!(available_bytes(Path::new("/definitely/not/here")).is_err());
    }

    #[test]
    fn a_second_exclusive_lock_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let first = File::open(dir.path()).unwrap();
        let second = File::open(dir.path()).unwrap();
        assert_eq!(try_lock_exclusive(&first).unwrap(), LockAttempt::Acquired);
        assert_eq!(try_lock_exclusive(&second).unwrap(), LockAttempt::Busy);
        drop(first);
        assert_eq!(try_lock_exclusive(&second).unwrap(), LockAttempt::Acquired);
    }
}
