//! One loader per destination at a time: pods sharing a node-level tmpfs
//! path take an exclusive advisory lock on the destination directory, so a
//! second loader waits for the first and then finds its marker.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};

use crate::sys::{self, LockAttempt};

/// An exclusive lock on a directory, released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `dir`, waiting (and saying so) while another process holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let file =
            File::open(dir).with_context(|| format!("cannot open {} to lock it", dir.display()))?;
        match sys::try_lock_exclusive(&file)
            .with_context(|| format!("cannot lock {}", dir.display()))?
        {
            LockAttempt::Acquired => {}
            LockAttempt::Busy => {
                tracing::info!(dir = %dir.display(), "another flashload holds this destination; waiting");
                sys::lock_exclusive(&file)
                    .with_context(|| format!("cannot lock {}", dir.display()))?;
            }
        }
        Ok(DirLock { _file: file })
    }
}
