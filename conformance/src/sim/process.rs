//! Running `flexinfer-sim` as a child process, as end-to-end tests do: start
//! it on an ephemeral port, read the address from its "listening on" line,
//! and stop it (SIGTERM, then SIGKILL) when done.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::LISTENING_PREFIX;

/// How long [`SimProcess::spawn`] waits for the "listening on" line.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Environment variable that overrides where [`SimProcess::binary`] looks.
pub const BINARY_ENV: &str = "FLEXINFER_SIM_BIN";

/// A running `flexinfer-sim` child. Dropping it kills the process.
#[derive(Debug)]
pub struct SimProcess {
    child: Child,
    addr: SocketAddr,
}

impl SimProcess {
    /// The simulator binary: `$FLEXINFER_SIM_BIN`, else `flexinfer-sim` in the
    /// Cargo target directory of the running test executable
    /// (`target/<profile>/deps/<test>` → `target/<profile>/flexinfer-sim`).
    /// Inside this crate's tests, prefer `env!("CARGO_BIN_EXE_flexinfer-sim")`;
    /// other crates must build it first (`cargo build -p flexinfer-conformance --bin flexinfer-sim`).
    pub fn binary() -> io::Result<PathBuf> {
        if let Some(path) = std::env::var_os(BINARY_ENV) {
            return Ok(PathBuf::from(path));
        }
        let exe = std::env::current_exe()?;
        let name = format!("flexinfer-sim{}", std::env::consts::EXE_SUFFIX);
        exe.ancestors()
            .skip(1)
            .take(3)
            .map(|dir| dir.join(&name))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{name} not found near {}; build it with `cargo build -p flexinfer-conformance \
                         --bin flexinfer-sim` or set {BINARY_ENV}",
                        exe.display()
                    ),
                )
            })
    }

    /// Starts `binary` with `args` on `127.0.0.1`, port 0 (unless `args` sets
    /// `--host`/`--port`), and waits for it to listen. Its stderr (logs) is
    /// inherited; unless `RUST_LOG` is set, it logs only warnings and errors.
    pub fn spawn<I, S>(binary: impl AsRef<Path>, args: I) -> io::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let mut command = Command::new(binary.as_ref());
        if !args.iter().any(|a| a == "--host") {
            command.args(["--host", "127.0.0.1"]);
        }
        if !args.iter().any(|a| a == "--port") {
            command.args(["--port", "0"]);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "warn");
        }
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        Self::spawn_command(command)
    }

    /// Starts a prepared command (stdout must be piped) and waits for its
    /// "listening on" line.
    pub fn spawn_command(mut command: Command) -> io::Result<Self> {
        let mut child = command.spawn()?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err(io::Error::other("the simulator's stdout must be piped"));
        };
        let (tx, rx) = mpsc::channel();
        // Reads the first line, then keeps draining stdout so the child never blocks on it.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            for _ in lines {}
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            Ok(Some(Err(e))) => return Err(fail(child, format!("reading stdout: {e}"))),
            Ok(None) => return Err(fail(child, "exited before listening".into())),
            Err(_) => {
                return Err(fail(
                    child,
                    format!("no listening line within {START_TIMEOUT:?}"),
                ))
            }
        };
        match parse_listening_line(&line) {
            Some(addr) => Ok(Self { child, addr }),
            None => Err(fail(child, format!("unexpected first line {line:?}"))),
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `timeout` for a graceful exit, then kills it.
    pub fn terminate(mut self, timeout: Duration) -> io::Result<ExitStatus> {
        send_sigterm(&self.child)?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The address in a `flexinfer-sim listening on http://<addr>` line.
pub fn parse_listening_line(line: &str) -> Option<SocketAddr> {
    line.trim()
        .strip_prefix(LISTENING_PREFIX)?
        .strip_prefix("http://")?
        .parse()
        .ok()
}

fn fail(mut child: Child, why: String) -> io::Error {
    let _ = child.kill();
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    io::Error::other(format!("flexinfer-sim failed to start: {why} ({status})"))
}

#[cfg(unix)]
fn send_sigterm(child: &Child) -> io::Result<()> {
    let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
    // SAFETY: kill(2) only sends a signal to the given process id, which is our own child.
    if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(unix))]
fn send_sigterm(_child: &Child) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SIGTERM needs a Unix system",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_listening_line() {
        assert_eq!(
            parse_listening_line("flexinfer-sim listening on http://127.0.0.1:4321\n"),
            Some(SocketAddr::from(([127, 0, 0, 1], 4321)))
        );
        assert_eq!(
            parse_listening_line("flexinfer-sim listening on http://[::1]:80").map(|a| a.port()),
            Some(80)
        );
        assert_eq!(parse_listening_line("hello"), None);
    }
}
