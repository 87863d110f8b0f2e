//! Progress reporting: a bar (`indicatif`) when stderr is a terminal,
//! otherwise a log line every interval, so init-container logs show the copy
//! advancing without drowning in redraws. Workers only bump atomic counters;
//! a reporter thread reads them.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::units::{gigabytes_per_second, megabytes};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, log lines otherwise.
    Auto,
    /// Always a bar (on stderr).
    Bar,
    /// Always periodic log lines.
    Log,
    /// Nothing but the final line.
    Off,
}

/// Counters shared by the workers.
#[derive(Debug)]
pub struct Counters {
    /// Bytes to move in total.
    pub total_bytes: u64,
    /// Bytes moved so far.
    pub bytes: AtomicU64,
    /// Files finished so far.
    pub files: AtomicU64,
    /// When the work started.
    pub started: Instant,
}

impl Counters {
    /// Fresh counters for `total_bytes` of work.
    pub fn new(total_bytes: u64) -> Arc<Counters> {
        Arc::new(Counters {
            total_bytes,
            bytes: AtomicU64::new(0),
            files: AtomicU64::new(0),
            started: Instant::now(),
        })
    }

    /// Records `n` more bytes moved.
    pub fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Records one more finished file.
    pub fn add_file(&self) {
        self.files.fetch_add(1, Ordering::Relaxed);
    }
}

/// The running reporter; [`Reporter::finish`] stops it.
pub struct Reporter {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Starts reporting `what` (e.g. "copy") on `counters`.
    pub fn start(
        what: &'static str,
        counters: Arc<Counters>,
        mode: ProgressMode,
        interval: Duration,
    ) -> Reporter {
        let (stop, stopped) = mpsc::channel::<()>();
        let bar = match mode {
            ProgressMode::Bar => true,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Log | ProgressMode::Off => false,
        };
        let thread = (mode != ProgressMode::Off).then(|| {
            std::thread::spawn(move || {
                if bar {
                    draw_bar(what, &counters, &stopped);
                } else {
                    log_lines(what, &counters, &stopped, interval);
                }
            })
        });
        Reporter { stop, thread }
    }

    /// Stops the reporter and waits for it.
    pub fn finish(mut self) {
        self.join();
    }

    fn join(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.join();
    }
}

fn draw_bar(what: &str, counters: &Counters, stopped: &mpsc::Receiver<()>) {
    let bar = ProgressBar::with_draw_target(
        Some(counters.total_bytes),
        ProgressDrawTarget::stderr_with_hz(10),
    );
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{elapsed_precise}] [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_owned());
    loop {
        bar.set_position(counters.bytes.load(Ordering::Relaxed));
        match stopped.recv_timeout(Duration::from_millis(100)) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => break,
        }
    }
    bar.set_position(counters.bytes.load(Ordering::Relaxed));
    bar.finish_and_clear();
}

fn log_lines(what: &str, counters: &Counters, stopped: &mpsc::Receiver<()>, interval: Duration) {
    loop {
        match stopped.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let bytes = counters.bytes.load(Ordering::Relaxed);
        let percent = if counters.total_bytes == 0 {
            100.0
        } else {
            bytes as f64 * 100.0 / counters.total_bytes as f64
        };
        tracing::info!(
            "{what}: {} of {} ({percent:.0}%), {} files done, {}",
            megabytes(bytes),
            megabytes(counters.total_bytes),
            counters.files.load(Ordering::Relaxed),
            gigabytes_per_second(bytes, counters.started.elapsed()),
        );
    }
}
