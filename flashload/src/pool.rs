//! A fixed pool of worker threads over a list of tasks: each worker takes the
//! next task from a shared counter and owns one page-aligned buffer; the
//! first error (or a SIGTERM/SIGINT) stops the others after their current
//! task.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, Result};

use crate::signal;

/// Page size the buffers are aligned to.
pub const ALIGN: usize = 4096;

/// A zero-initialised, page-aligned byte buffer.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` bytes (at least one page).
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.max(ALIGN);
        let storage = vec![0u8; len + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    /// The buffer.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Whether the run should stop: another worker failed or a signal arrived.
pub fn stop_requested(failed: &AtomicBool) -> bool {
    failed.load(Ordering::Relaxed) || signal::received().is_some()
}

/// Runs `work` over `tasks` on `jobs` threads, each with a buffer of
/// `buffer_bytes`. Returns the first error; a received signal is an error too.
pub fn run<T, F>(jobs: usize, buffer_bytes: usize, tasks: &[T], work: F) -> Result<()>
where
    T: Sync,
    F: Fn(&T, &mut [u8], &AtomicBool) -> Result<()> + Sync,
{
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let workers = jobs.clamp(1, tasks.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let mut buf = AlignedBuf::new(buffer_bytes);
                loop {
                    if stop_requested(&failed) {
                        return;
                    }
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(task) = tasks.get(index) else {
                        return;
                    };
                    if let Err(err) = work(task, buf.as_mut_slice(), &failed) {
                        let mut slot = first_error.lock().unwrap_or_else(|e| e.into_inner());
                        if slot.is_none() {
                            *slot = Some(err);
                        }
                        failed.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            });
        }
    });
    if let Some(err) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(err);
    }
    if let Some(sig) = signal::received() {
        return Err(anyhow!("interrupted by signal {sig}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn buffers_are_page_aligned() {
        let mut buf = AlignedBuf::new(10_000);
        let slice = buf.as_mut_slice();
        assert_eq!(slice.len(), 10_000);
        assert_eq!(slice.as_ptr() as usize % ALIGN, 0);
    }

    #[test]
    fn runs_every_task_once() {
        let sum = AtomicU64::new(0);
        let tasks: Vec<u64> = (1..=100).collect();
        run(3, ALIGN, &tasks, |t, _, _| {
            sum.fetch_add(*t, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert_eq!(sum.into_inner(), 5050);
    }

    #[test]
    fn returns_the_first_error() {
        let tasks: Vec<u64> = (0..50).collect();
        let err = run(2, ALIGN, &tasks, |t, _, _| {
            if *t == 7 {
                Err(anyhow!("task 7 broke"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "task 7 broke");
    }
}
