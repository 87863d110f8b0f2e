//! A log writer that batches lines: the request path appends each line to
//! a shared buffer, and a writer thread writes the buffer out every
//! [`FLUSH_EVERY`], or as soon as [`WAKE_AT`] bytes are waiting. No thread is
//! woken per line (a wake-up costs more than formatting the line), and a
//! slow terminal or log collector never stalls a request: past
//! [`MAX_PENDING`] bytes waiting, lines are dropped and the number dropped
//! is reported in the log once it drains.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// The longest a line waits before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Bytes waiting that wake the writer early.
pub const WAKE_AT: usize = 64 * 1024;
/// Bytes waiting beyond which new lines are dropped.
pub const MAX_PENDING: usize = 8 * 1024 * 1024;

/// Hands out [`BatchLine`] writers to the log formatter.
#[derive(Clone)]
pub struct BatchWriter {
    shared: Arc<Shared>,
}

/// Keep until exit: dropping it writes what is waiting and stops the
/// writer thread.
pub struct BatchGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    dropped: u64,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Starts the writer thread writing to `out`.
pub fn batch_writer<W: Write + Send + 'static>(out: W) -> (BatchWriter, BatchGuard) {
    let shared = Arc::new(Shared::default());
    let thread = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn({
            let shared = shared.clone();
            move || write_batches(&shared, out)
        })
        .ok();
    (
        BatchWriter {
            shared: shared.clone(),
        },
        BatchGuard { shared, thread },
    )
}

/// The writer thread: swaps the waiting bytes out and writes them, until
/// closed and drained.
fn write_batches<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    loop {
        let (dropped, closed) = {
            let mut pending = shared.lock();
            if pending.bytes.len() < WAKE_AT && !pending.closed {
                pending = shared
                    .wake
                    .wait_timeout(pending, FLUSH_EVERY)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            std::mem::swap(&mut pending.bytes, &mut batch);
            (std::mem::take(&mut pending.dropped), pending.closed)
        };
        // A log that cannot be written has nowhere to report it.
        let _ = out.write_all(&batch);
        if dropped > 0 {
            let _ = writeln!(
                out,
                "flexinfer-gateway: {dropped} log lines dropped: the log output was too slow"
            );
        }
        let _ = out.flush();
        batch.clear();
        if batch.capacity() > 4 * WAKE_AT {
            batch.shrink_to(WAKE_AT);
        }
        if closed && shared.lock().bytes.is_empty() {
            return;
        }
    }
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Appends what the formatter writes (one whole line per event) to the
/// waiting bytes.
pub struct BatchLine<'a> {
    shared: &'a Shared,
}

impl Write for BatchLine<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut pending = self.shared.lock();
        if pending.bytes.len() + buf.len() > MAX_PENDING {
            pending.dropped += 1;
            return Ok(buf.len());
        }
        let before = pending.bytes.len();
        pending.bytes.extend_from_slice(buf);
        let crossed = before < WAKE_AT && pending.bytes.len() >= WAKE_AT;
        drop(pending);
        if crossed {
            self.shared.wake.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchWriter {
    type Writer = BatchLine<'a>;

    fn make_writer(&'a self) -> BatchLine<'a> {
        BatchLine {
            shared: &self.shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Write` whose bytes the test can read.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_is_written_in_order_by_exit() {
        let sink = Sink::default();
        let (writer, guard) = batch_writer(sink.clone());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        let line = format!("thread {t} line {i}\n");
                        writer.make_writer().write_all(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(guard);
        let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.lines().count(), 8000);
        for t in 0..4 {
            let mine: Vec<usize> = out
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("thread {t} line ")))
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(mine, (0..2000).collect::<Vec<_>>(), "thread {t}");
        }
    }

    #[test]
    fn lines_reach_the_output_without_exit() {
        let sink = Sink::default();
        let (writer, _guard) = batch_writer(sink.clone());
        writer.make_writer().write_all(b"one line\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while sink.0.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never written");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(&sink.0.lock().unwrap()[..], b"one line\n");
    }

    #[test]
    fn a_stalled_output_drops_lines_and_says_how_many() {
        /// Blocks every write until released.
        struct Stalled(Arc<(Mutex<bool>, Condvar)>, Sink);
        impl Write for Stalled {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                let (open, cv) = &*self.0;
                let mut open = open.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
                self.1.write(buf)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let sink = Sink::default();
        let (writer, guard) = batch_writer(Stalled(gate.clone(), sink.clone()));
        let line = vec![b'x'; 1023];
        let mut first = line.clone();
        first.push(b'\n');
        writer.make_writer().write_all(&first).unwrap();
        // Let the writer take the first line and block on it.
        std::thread::sleep(FLUSH_EVERY * 3);
        let lines = MAX_PENDING / 1024 + 100;
        for _ in 0..lines {
            writer.make_writer().write_all(&first).unwrap();
        }
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        drop(guard);
        let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let written = out.lines().filter(|l| l.starts_with('x')).count();
        let dropped = lines + 1 - written;
        assert!(dropped >= 100, "{dropped} dropped");
        assert!(
            out.contains(&format!("{dropped} log lines dropped")),
            "{}",
            &out[out.len().saturating_sub(200)..]
        );
    }
}
