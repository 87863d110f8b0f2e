//! One model server as a child process: spawned in its own process group,
//! its output forwarded to `tracing` with secrets redacted, stopped with
//! SIGTERM then SIGKILL, and its exit reported once with the last lines it
//! wrote to stderr (redacted too).

use std::collections::VecDeque;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::redact::redact;
use super::spec::LocalModelSpec;
use super::stray::MANAGED_MODEL_ENV;

/// Stderr lines kept for the `Failed` message.
pub const STDERR_TAIL_LINES: usize = 20;
/// Longest output line forwarded; the rest of a longer line is dropped.
const MAX_LINE_BYTES: usize = 8 * 1024;
/// How long, after the exit, the output readers may take to drain.
const OUTPUT_DRAIN: Duration = Duration::from_millis(250);

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitReport {
    /// Its exit status, or why waiting for it failed.
    pub status: Result<ExitStatus, String>,
    /// The last lines it wrote to stderr, oldest first.
    pub stderr_tail: Vec<String>,
}

impl ExitReport {
    /// `exit status: 3` (or `signal: 9 (SIGKILL)`), followed by the stderr tail.
    pub fn describe(&self) -> String {
        let mut text = match &self.status {
            Ok(status) => status.to_string(),
            Err(e) => format!("exit status unknown: {e}"),
        };
        if !self.stderr_tail.is_empty() {
            text.push_str("; last stderr lines:\n");
            text.push_str(&self.stderr_tail.join("\n"));
        }
        text
    }
}

/// A running child. Dropping the handle kills the child's process group.
#[derive(Debug)]
pub struct ChildProcess {
    pid: u32,
    stop: Option<oneshot::Sender<Duration>>,
}

impl ChildProcess {
    /// Starts the spec's command in a new process group (so that stopping it
    /// reaches its own children too) and supervises it on the current Tokio
    /// runtime. `on_exit` runs exactly once, after the child has exited and
    /// its output has drained.
    pub fn spawn(
        spec: &LocalModelSpec,
        on_exit: impl FnOnce(ExitReport) + Send + 'static,
    ) -> io::Result<Self> {
        let mut command = tokio::process::Command::new(&spec.command);
        command
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            // Lets a later gateway recognise this server if it outlives us.
            .env(MANAGED_MODEL_ENV, &spec.name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        die_with_parent(&mut command);
        let mut child = command.spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the child has no process id"))?;
        let model: Arc<str> = Arc::from(spec.name.as_str());
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_LINES)));
        let mut readers = Vec::with_capacity(2);
        if let Some(stdout) = child.stdout.take() {
            readers.push(tokio::spawn(forward_lines(
                stdout,
                model.clone(),
                "stdout",
                None,
            )));
        }
        if let Some(stderr) = child.stderr.take() {
            readers.push(tokio::spawn(forward_lines(
                stderr,
                model.clone(),
                "stderr",
                Some(tail.clone()),
            )));
        }
        let (stop, stop_rx) = oneshot::channel();
        tokio::spawn(async move {
            let mut group = GroupGuard { pgid: pid };
            let status = supervise(&mut child, pid, stop_rx).await;
            // The leader is gone; whatever it left behind in its group goes too.
            group.kill();
            drop(child);
            drain(readers).await;
            let stderr_tail = tail
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
                .collect();
            on_exit(ExitReport {
                status: status.map_err(|e| e.to_string()),
                stderr_tail,
            });
        });
        Ok(Self {
            pid,
            stop: Some(stop),
        })
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Asks the child to exit: SIGTERM to its process group, SIGKILL after
    /// `grace`. Later calls do nothing; the exit is reported through
    /// `on_exit`.
    pub fn stop(&mut self, grace: Duration) {
        if let Some(stop) = self.stop.take() {
            // The supervising task is gone only after the child exited.
            let _ = stop.send(grace);
        }
    }
}

/// Waits for the child's exit, or for a stop request and then its exit.
/// A dropped handle counts as a stop request without grace.
async fn supervise(
    child: &mut tokio::process::Child,
    pid: u32,
    stop: oneshot::Receiver<Duration>,
) -> io::Result<ExitStatus> {
    tokio::select! {
        status = child.wait() => status,
        request = stop => {
            let grace = request.unwrap_or(Duration::ZERO);
            signal_group(pid, libc::SIGTERM);
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(pid, libc::SIGKILL);
                    child.wait().await
                }
            }
        }
    }
}

/// Gives the output readers a moment to reach end of file after the exit.
async fn drain(readers: Vec<JoinHandle<()>>) {
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout(OUTPUT_DRAIN, reader).await.is_err() {
            abort.abort();
        }
    }
}

/// SIGKILLs a process group when dropped, unless already done: covers the
/// supervising task being dropped with its runtime.
struct GroupGuard {
    pgid: u32,
}

impl GroupGuard {
    fn kill(&mut self) {
        signal_group(self.pgid, libc::SIGKILL);
        self.pgid = 0;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.pgid, libc::SIGKILL);
    }
}

/// Asks the kernel to send SIGTERM to the child when the thread that spawns
/// it dies, so that a gateway killed without a chance to stop its models
/// (SIGKILL, the OOM killer, a crash) does not leave them running. The
/// supervisor spawns from a runtime worker thread, which lives as long as
/// the actuator. A child whose parent is already gone exits at once.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: between fork and exec only async-signal-safe calls are made:
    // prctl(2) and getppid(2) touch no memory of ours and do not allocate.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // The gateway is gone already (no allocation here: ESRCH).
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut tokio::process::Command) {}

/// Sends `signal` to process group `pgid`; does nothing for ids 0 and 1
/// (which would address our own group or every process). When `pgid` leads
/// no group (a server some other program started), the process alone gets
/// the signal.
pub(super) fn signal_group(pgid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // negative pid addresses the process group the child leads. The group id
    // stays reserved while any member lives, so it names our child's group.
    unsafe {
        if libc::kill(-pgid, signal) != 0 {
            libc::kill(pgid, signal);
        }
    }
}

/// The last stderr lines of a child.
type Tail = Arc<Mutex<VecDeque<String>>>;

/// Forwards each output line, secrets redacted ([`redact`]), to `tracing`
/// (target `flexinfer_operator::local::process`, fields `model` and
/// `stream`), keeping the last lines in `tail` if given.
async fn forward_lines(
    output: impl AsyncRead + Unpin,
    model: Arc<str>,
    stream: &'static str,
    tail: Option<Tail>,
) {
    let mut reader = BufReader::new(output);
    let mut raw = Vec::new();
    while let Ok(true) = next_line(&mut reader, &mut raw).await {
        let line = String::from_utf8_lossy(&raw);
        let line = redact(line.trim_end_matches(['\r', '\n']));
        tracing::info!(model = %model, stream, "{line}");
        if let Some(tail) = &tail {
            let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.into_owned());
        }
    }
}

/// Reads one line (up to and including `\n`) into `line`, keeping at most
/// [`MAX_LINE_BYTES`] of it. Returns `false` at end of file with nothing read.
async fn next_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> io::Result<bool> {
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let (take, complete) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&available[..take.min(room)]);
        reader.consume(take);
        if complete {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn splits_lines_and_caps_long_ones() {
        let long = "x".repeat(MAX_LINE_BYTES + 100);
        let input = format!("one\r\ntwo\n{long}\nlast");
        let mut reader = BufReader::with_capacity(16, input.as_bytes());
        let mut line = Vec::new();
        let mut lines = Vec::new();
        while next_line(&mut reader, &mut line).await.unwrap() {
            lines.push(String::from_utf8_lossy(&line).into_owned());
        }
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], "one\r\n");
        assert_eq!(lines[1], "two\n");
        assert_eq!(lines[2].len(), MAX_LINE_BYTES);
        assert_eq!(lines[3], "last");
    }

    #[tokio::test]
    async fn keeps_the_last_stderr_lines() {
        let input: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let tail = Tail::default();
        forward_lines(
            input.as_bytes(),
            Arc::from("m"),
            "stderr",
            Some(tail.clone()),
        )
        .await;
        let tail = tail.lock().unwrap();
        assert_eq!(tail.len(), STDERR_TAIL_LINES);
        assert_eq!(tail.front().map(String::as_str), Some("line 10"));
        assert_eq!(tail.back().map(String::as_str), Some("line 29"));
    }

    #[tokio::test]
    async fn kept_lines_are_redacted() {
        let input = "starting\nHF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123 in env\n";
        let tail = Tail::default();
        forward_lines(
            input.as_bytes(),
            Arc::from("m"),
            "stderr",
            Some(tail.clone()),
        )
        .await;
        let tail = tail.lock().unwrap();
        assert_eq!(
            tail.iter().map(String::as_str).collect::<Vec<_>>(),
            ["starting", "HF_TOKEN=[REDACTED] in env"]
        );
    }

    #[tokio::test]
    async fn reports_exit_status_and_stderr() {
        let mut spec = LocalModelSpec::new("m", "sh", 1);
        spec.args = vec!["-c".into(), "echo hello; echo boom >&2; exit 3".into()];
        let (tx, rx) = oneshot::channel();
        let _child = ChildProcess::spawn(&spec, move |report| {
            let _ = tx.send(report);
        })
        .unwrap();
        let report = rx.await.unwrap();
        assert_eq!(report.status.as_ref().unwrap().code(), Some(3));
        assert_eq!(report.stderr_tail, ["boom"]);
        assert_eq!(
            report.describe(),
            "exit status: 3; last stderr lines:\nboom"
        );
    }

    #[tokio::test]
    async fn stop_terminates_the_whole_group() {
        // The shell ignores SIGTERM; its background child is a grandchild of ours.
        let mut spec = LocalModelSpec::new("m", "sh", 1);
        spec.args = vec![
            "-c".into(),
            "trap '' TERM; sleep 30 & echo $! >&2; wait".into(),
        ];
        let (tx, rx) = oneshot::channel();
        let tail = Arc::new(Mutex::new(None));
        let seen = tail.clone();
        let mut child = ChildProcess::spawn(&spec, move |report| {
            *seen.lock().unwrap() = report.stderr_tail.first().cloned();
            let _ = tx.send(report.status);
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        child.stop(Duration::from_millis(100));
        let status = rx.await.unwrap().unwrap();
        assert!(!status.success());
        let grandchild: i32 = tail.lock().unwrap().as_deref().unwrap().parse().unwrap();
        // Dead means gone or a zombie; SIGKILL takes effect asynchronously.
        let dead = || {
            let stat =
                std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            matches!(state, None | Some("Z") | Some("X"))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !dead() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(dead(), "grandchild {grandchild} survived");
    }
}
