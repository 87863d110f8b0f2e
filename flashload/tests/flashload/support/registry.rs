//! A real OCI registry on loopback for tests: Debian's `docker-registry`
//! (CNCF distribution) with a temporary storage directory, optionally
//! behind htpasswd Basic auth, and artifacts pushed with the `oras` Python
//! package, as users push models.
//!
//! Without `/usr/bin/docker-registry` (or `oras` in the Python
//! environment) [`Registry::start`] returns `None` after printing
//! "skipped: …", unless `FLEXINFER_REQUIRE_REGISTRY=1`, which turns the
//! skip into a failure (CI sets it).
#![allow(dead_code)]

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the registry binary.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// A running registry; killed when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// Storage root (`docker/registry/v2/...` below it).
    pub storage: PathBuf,
    /// htpasswd credentials, when auth is on.
    pub credentials: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

fn required() -> bool {
    std::env::var("FLEXINFER_REQUIRE_REGISTRY").is_ok_and(|v| v == "1")
}

fn skip(reason: &str) -> Option<Registry> {
    if required() {
        panic!("{reason}, and FLEXINFER_REQUIRE_REGISTRY=1 forbids skipping");
    }
    eprintln!("skipped: {reason}");
    None
}

/// The Python with `oras`: `$FLEXINFER_PYTHON`, else the repository's
/// `.venv/bin/python`.
pub fn python() -> PathBuf {
    match std::env::var_os("FLEXINFER_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"),
    }
}

fn oras_available() -> bool {
    Command::new(python())
        .args(["-c", "import oras.client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

impl Registry {
    /// Starts a registry; with `auth`, behind htpasswd Basic auth for that
    /// user and password. `None` when skipped.
    pub fn start(auth: Option<(&str, &str)>) -> Option<Registry> {
        if !Path::new(REGISTRY_BIN).exists() {
            return skip("docker-registry not installed");
        }
        if !oras_available() {
            return skip(&format!(
                "the oras Python package is not installed in {} (scripts/setup.sh installs it)",
                python().display()
            ));
        }
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        let mut auth_section = String::new();
        if let Some((user, pass)) = auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, pass])
                .output()
                .expect("htpasswd (apache2-utils) is needed for the auth registry");
            assert!(out.status.success(), "htpasswd failed");
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, &out.stdout).unwrap();
            auth_section = format!(
                "auth:\n  htpasswd:\n    realm: flexinfer-test\n    path: {}\n",
                htpasswd.display()
            );
        }
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  secret: flexinfer-test-secret\n{auth_section}",
                    storage.display()
                ),
            )
            .unwrap();
            let child = Command::new(REGISTRY_BIN)
                .arg("serve")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start docker-registry");
            let mut registry = Registry {
                child,
                addr: addr.clone(),
                storage: storage.clone(),
                credentials: auth.map(|(u, p)| (u.to_owned(), p.to_owned())),
                _dir: tempfile::tempdir().unwrap(),
            };
            if registry.wait_ready() {
                registry._dir = dir;
                return Some(registry);
            }
        }
        panic!("docker-registry did not start on loopback");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut s) = std::net::TcpStream::connect(&self.addr) {
                let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
                let mut buf = [0u8; 12];
                if std::io::Read::read(&mut s, &mut buf).is_ok_and(|n| n >= 12)
                    && (buf.starts_with(b"HTTP/1.0 200") || buf.starts_with(b"HTTP/1.0 401"))
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Pushes `files` (name, content) as `repository:tag` with `oras`
    /// (one layer per file, titled by its name).
    pub fn push(&self, repository: &str, tag: &str, files: &[(&str, &[u8])]) {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
        let script = "import json, sys, oras.client\n\
            addr, target, user, password, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])\n\
            c = oras.client.OrasClient(hostname=addr, insecure=True, auth_backend='basic' if user else 'token')\n\
            if user: c.auth.set_basic_auth(user, password)\n\
            c.push(files=files, target=target)\n";
        let (user, pass) = self.credentials.clone().unwrap_or_default();
        let out = Command::new(python())
            .current_dir(dir.path())
            .arg("-c")
            .arg(script)
            .arg(&self.addr)
            .arg(format!("{}/{repository}:{tag}", self.addr))
            .arg(user)
            .arg(pass)
            .arg(serde_json::to_string(&names).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "oras push failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Path of a blob's data in the registry's storage.
    pub fn blob_path(&self, hex: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic pseudo-random bytes (xorshift), so files are not
/// compressible and differ between seeds.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
