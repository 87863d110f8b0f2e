//! Test support: the real gateway binary and real simulator processes on loopback.
#![allow(dead_code)]

pub mod peer;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use flexinfer_conformance::sim::process::SimProcess;

/// An endpoint where nothing listens and no test process can start to: a
/// privileged loopback port below 10, which the ephemeral ports of
/// [`free_port`] (and every server a test starts) never include. `n`
/// (1 to 9) tells dead endpoints of one model apart.
pub fn dead_endpoint(n: u16) -> String {
    assert!((1..10).contains(&n), "dead endpoints are ports 1 to 9");
    format!("http://127.0.0.1:{n}")
}

/// A loopback port nothing listens on now (bound, then released).
pub fn free_port() -> u16 {
    // Below the kernel's ephemeral range (32768–60999 by default): a port
    // handed out for a `:0` bind or an outgoing connection of a concurrent
    // test can then never be the one this caller is about to bind.
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    for _ in 0..SPAN {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        let port = FIRST + (start + offset) % SPAN;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// Starts a simulator process with `args` (plus `--port 0`).
pub fn sim(args: &[&str]) -> SimProcess {
    let bin = SimProcess::binary().expect("flexinfer-sim binary (cargo build --workspace)");
    SimProcess::spawn(bin, args.iter().copied()).expect("start flexinfer-sim")
}

/// A running `flexinfer-gateway` process with its model file.
pub struct Gateway {
    child: Child,
    /// Proxy address.
    pub addr: SocketAddr,
    /// Admin (metrics) address.
    pub admin: SocketAddr,
    dir: tempfile::TempDir,
    /// Stop with SIGINT (which stops local model processes) when dropped.
    interrupt_on_drop: bool,
}

impl Gateway {
    /// Starts the gateway on `yaml` with extra flags, waiting until it answers.
    pub fn start(yaml: &str, extra: &[&str]) -> Self {
        Self::launch("--config", "models.yaml", yaml, extra)
    }

    /// Starts a global gateway (`--global`) on a GlobalProxy YAML.
    pub fn start_global(yaml: &str, extra: &[&str]) -> Self {
        Self::launch("--global", "global.yaml", yaml, extra)
    }

    /// Stops the gateway at once (SIGKILL), as a crashed or unreachable
    /// cluster gateway would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a gateway whose source the flags in `args` name (no file is
    /// written), e.g. `--global-object NAMESPACE/NAME`.
    pub fn start_args(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::spawn(dir, &[], args)
    }

    fn launch(flag: &str, file: &str, yaml: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join(file);
        std::fs::write(&config, yaml).expect("write model file");
        let source = [std::ffi::OsString::from(flag), config.into_os_string()];
        Self::spawn(dir, &source, extra)
    }

    /// [`Self::start`] with extra environment, the gateway's stderr written
    /// to a file ([`Self::log`]) instead of the test's.
    pub fn start_logged(yaml: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("models.yaml");
        std::fs::write(&config, yaml).expect("write model file");
        let log = std::fs::File::create(dir.path().join("gateway.log")).expect("log file");
        let source = [
            std::ffi::OsString::from("--config"),
            config.into_os_string(),
        ];
        let mut command = Command::new(env!("CARGO_BIN_EXE_flexinfer-gateway"));
        command.envs(env.iter().copied()).stderr(log);
        Self::spawn_command(command, dir, &source, extra)
    }

    /// What a gateway started with [`Self::start_logged`] wrote to stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }

    fn spawn(dir: tempfile::TempDir, source: &[std::ffi::OsString], extra: &[&str]) -> Self {
        let command = Command::new(env!("CARGO_BIN_EXE_flexinfer-gateway"));
        Self::spawn_command(command, dir, source, extra)
    }

    fn spawn_command(
        mut command: Command,
        dir: tempfile::TempDir,
        source: &[std::ffi::OsString],
        extra: &[&str],
    ) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        if !command.get_envs().any(|(k, _)| k == "RUST_LOG") {
            command.env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            );
        }
        let child = command
            .args(source)
            .args(["--listen", &addr.to_string()])
            .args(["--metrics-listen", &admin.to_string()])
            .args(["--threads", "2", "--reload-interval", "200ms"])
            .args(
                Some(["--shutdown-drain-delay", "0s"])
                    .filter(|_| !extra.contains(&"--shutdown-drain-delay"))
                    .into_iter()
                    .flatten(),
            )
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("start flexinfer-gateway");
        let gw = Self {
            child,
            addr,
            admin,
            dir,
            interrupt_on_drop: false,
        };
        gw.wait_ready();
        gw
    }

    /// [`Self::start`] for a model file with local models (`command`): when
    /// dropped, the gateway is stopped with SIGINT so that it stops its child
    /// processes, rather than killed (which would leave them running).
    pub fn start_local(yaml: &str, extra: &[&str]) -> Self {
        let mut gw = Self::start(yaml, extra);
        gw.interrupt_on_drop = true;
        gw
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGINT (fast shutdown: the gateway stops its local model
    /// processes, then exits) and waits up to `limit`; whether it exited.
    pub fn interrupt(&mut self, limit: Duration) -> bool {
        self.signal("-INT", limit)
    }

    /// Sends SIGTERM (graceful shutdown) and waits up to `limit`; whether
    /// it exited.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        self.signal("-TERM", limit)
    }

    /// Sends the signal `flag` (`-INT`, `-TERM`) and waits up to `limit`
    /// for the process to exit; whether it did.
    fn signal(&mut self, flag: &str, limit: Duration) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            return true;
        }
        let _ = Command::new("kill")
            .args([flag, &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `GET /admin/models` on the proxy port.
    pub async fn admin_models(&self) -> Value {
        let resp = client()
            .get(self.url("/admin/models"))
            .send()
            .await
            .expect("GET /admin/models");
        assert_eq!(resp.status(), 200, "GET /admin/models");
        resp.json().await.expect("/admin/models JSON")
    }

    /// Polls `/admin/models` every 20 ms until `done` holds for the report
    /// and returns that report; panics with the last one after `limit`.
    pub async fn wait_admin(
        &self,
        limit: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let report = self.admin_models().await;
            if done(&report) {
                return report;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {limit:?}; last /admin/models: {report:#}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `status.phase` of `model` in `GET /v1/models`.
    pub async fn listed_phase(&self, model: &str) -> String {
        let list: Value = client()
            .get(self.url("/v1/models"))
            .send()
            .await
            .expect("GET /v1/models")
            .json()
            .await
            .expect("/v1/models JSON");
        list["data"]
            .as_array()
            .and_then(|d| d.iter().find(|m| m["id"] == model))
            .and_then(|m| m["status"]["phase"].as_str())
            .unwrap_or_else(|| panic!("no status.phase for {model} in {list}"))
            .to_string()
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut s) = TcpStream::connect(self.addr) {
                let _ =
                    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let mut buf = [0u8; 64];
                use std::io::Read;
                if s.read(&mut buf)
                    .map(|n| buf[..n].starts_with(b"HTTP/1.1 200"))
                    .unwrap_or(false)
                {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("gateway did not become ready on {}", self.addr);
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The model file, for reload tests.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("models.yaml")
    }

    /// Replaces the model file and waits until the gateway has reloaded it.
    pub async fn reload(&self, yaml: &str) {
        let before = self.reload_count().await;
        let tmp = self.dir.path().join("models.yaml.tmp");
        std::fs::write(&tmp, yaml).expect("write model file");
        std::fs::rename(&tmp, self.config_path()).expect("replace model file");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.reload_count().await > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("gateway did not reload its model file");
    }

    async fn reload_count(&self) -> u64 {
        let text = client()
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        metric_value(
            &text,
            "flexinfer_proxy_config_reloads_total{result=\"success\"}",
        ) as u64
    }

    /// The proxy's /metrics text.
    pub async fn metrics(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.interrupt_on_drop {
            self.interrupt(Duration::from_secs(15));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The entry of `model` in an `/admin/models` report.
pub fn admin_model<'a>(report: &'a Value, model: &str) -> &'a Value {
    report["models"]
        .as_array()
        .and_then(|models| models.iter().find(|m| m["name"] == model))
        .unwrap_or_else(|| panic!("no model {model} in /admin/models: {report}"))
}

/// Whether something accepts TCP connections on `127.0.0.1:port` now.
pub async fn accepts(port: u16) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(("127.0.0.1", port)),
        )
        .await,
        Ok(Ok(_))
    )
}

/// Whether process `pid` is gone (or a zombie awaiting its parent).
pub fn process_gone(pid: u64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next());
    matches!(state, None | Some("Z") | Some("X"))
}

/// A model-file entry for `name`, run by the gateway as a `flexinfer-sim`
/// child on `port` that turns healthy after `startup_delay` and answers at
/// once; `extra` is YAML appended to the entry (indented by four spaces).
pub fn local_sim_model(name: &str, port: u16, startup_delay: &str, extra: &str) -> String {
    let bin = SimProcess::binary().expect("flexinfer-sim binary (cargo build --workspace)");
    format!(
        "  - name: {name}\n    command: \"{bin}\"\n    args: [--port, \"{port}\", --model, {name}, \
         --pod-name, {name}, --startup-delay, {startup_delay}, --ttft, 0s, --tokens-per-second, \"0\"]\n    \
         port: {port}\n{extra}",
        bin = bin.display()
    )
}

/// Sum of a metric line's value, 0 when absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A shared HTTP client without connection reuse surprises.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// A small chat body.
pub fn chat(model: &str) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 4
    })
}

/// The `X-Served-By` header of a response.
pub fn served_by(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The requests a simulator recorded.
pub async fn recorded(sim: &SimProcess) -> Vec<serde_json::Value> {
    client()
        .get(format!("{}/sim/requests", sim.base_url()))
        .send()
        .await
        .expect("recorder")
        .json()
        .await
        .expect("recorder json")
}

/// Clears a simulator's recorder.
pub async fn clear(sim: &SimProcess) {
    client()
        .delete(format!("{}/sim/requests", sim.base_url()))
        .send()
        .await
        .expect("clear recorder");
}

/// Starts a simulator that names itself `pod` in `X-Served-By` and serves
/// `models` (the first is its default), plus any `extra` flags.
pub fn pod(pod: &str, models: &[&str], extra: &[&str]) -> SimProcess {
    let mut args = vec!["--pod-name", pod];
    for m in models {
        args.extend(["--model", m]);
    }
    args.extend_from_slice(extra);
    sim(&args)
}

/// A YAML flow list of the simulators' URLs, for a model's `endpoints`.
pub fn endpoints(sims: &[&SimProcess]) -> String {
    let urls: Vec<String> = sims
        .iter()
        .map(|s| format!("\"{}\"", s.base_url()))
        .collect();
    format!("[{}]", urls.join(", "))
}

/// Lower-case hex SHA-256, as the simulator's recorder reports `body_sha256`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// POSTs `body` as JSON to the gateway (or any base URL) with extra headers.
pub async fn post_json(url: &str, body: &[u8], headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request")
}

/// The last request a simulator recorded.
pub async fn last_recorded(sim: &SimProcess) -> Value {
    recorded(sim)
        .await
        .pop()
        .expect("the simulator recorded a request")
}

/// One part of a `multipart/form-data` body.
pub struct Part<'a> {
    /// Form field name.
    pub name: &'a str,
    /// File name, for file parts.
    pub filename: Option<&'a str>,
    /// Raw content.
    pub data: &'a [u8],
}

/// Builds a `multipart/form-data` body with `boundary` byte by byte, so a
/// test knows exactly which bytes it sent.
pub fn multipart(boundary: &str, parts: &[Part<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match p.filename {
            Some(f) => out.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"; filename=\"{f}\"\r\n\
                     Content-Type: image/png\r\n\r\n",
                    p.name
                )
                .as_bytes(),
            ),
            None => out.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"\r\n\r\n",
                    p.name
                )
                .as_bytes(),
            ),
        }
        out.extend_from_slice(p.data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    out
}

/// A small but real PNG-like payload holding every byte value, CR/LF runs
/// and fake boundaries, so that any re-encoding would show.
pub fn binary_image(len: usize) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut i = 0u32;
    while out.len() < len {
        match i % 97 {
            0 => out.extend_from_slice(b"\r\n--not-the-boundary\r\n"),
            1 => out.extend_from_slice(b"name=\"model\"\r\n\r\nother"),
            _ => out.push((i.wrapping_mul(2_654_435_761) >> 24) as u8),
        }
        i += 1;
    }
    out.truncate(len);
    out
}

/// Checks that `body` is an OpenAI-shaped error with this `code` and
/// returns its `error` object.
pub fn assert_openai_error(body: &Value, code: &str) -> Value {
    let err = body
        .get("error")
        .unwrap_or_else(|| panic!("no `error` object in {body}"));
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "error.message: {body}"
    );
    assert!(
        err["type"].as_str().is_some_and(|t| !t.is_empty()),
        "error.type: {body}"
    );
    assert_eq!(err["code"], code, "error.code: {body}");
    err.clone()
}

/// Reads an error response: status, headers and parsed body.
pub async fn error_of(resp: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Value) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    assert!(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json")),
        "error content-type: {headers:?}"
    );
    let body: Value = resp.json().await.expect("error body is JSON");
    (status, headers, body)
}

/// One server-sent event and when it arrived.
#[derive(Debug, Clone)]
pub struct Event {
    /// Time since the request was sent.
    pub at: Duration,
    /// The `data:` payload.
    pub data: String,
}

impl Event {
    /// The content delta of a chat or text completion chunk, if any.
    pub fn content(&self) -> Option<String> {
        let v: Value = serde_json::from_str(&self.data).ok()?;
        let choice = &v["choices"][0];
        choice["delta"]["content"]
            .as_str()
            .or_else(|| choice["text"].as_str())
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
    }
}

/// Reads a whole event stream, stamping each event with its arrival time
/// relative to `start`.
pub async fn read_events(resp: reqwest::Response, start: Instant) -> Vec<Event> {
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("stream chunk");
        let at = start.elapsed();
        buf.push_str(std::str::from_utf8(&chunk).expect("UTF-8 stream"));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    events.push(Event {
                        at,
                        data: data.to_owned(),
                    });
                }
            }
        }
    }
    assert!(buf.trim().is_empty(), "stream ended mid-event: {buf:?}");
    events
}

/// Median of a non-empty list.
pub fn median(values: &[Duration]) -> Duration {
    let mut v = values.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// Sends raw bytes on a fresh connection and reads until the peer closes,
/// `until` appears in the answer, or `limit` passes.
pub async fn raw_exchange(
    addr: SocketAddr,
    request: &[u8],
    until: &str,
    limit: Duration,
) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("write request");
    read_until(&mut s, until, limit).await
}

/// Reads from `s` until `until` appears, the peer closes, or `limit` passes.
pub async fn read_until(s: &mut tokio::net::TcpStream, until: &str, limit: Duration) -> String {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = [0u8; 8192];
    loop {
        if String::from_utf8_lossy(&out).contains(until) {
            break;
        }
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One response read off a raw connection.
#[derive(Debug)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// The header block, as received.
    pub head: String,
    /// The body (framed by Content-Length).
    pub body: String,
}

/// Sends `requests` one after another on a single connection, reading each
/// response (framed by Content-Length) before sending the next: proves the
/// connection stays usable. Panics when the connection closes early.
pub async fn keepalive_exchange(addr: SocketAddr, requests: &[Vec<u8>]) -> Vec<RawResponse> {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        s.write_all(request).await.expect("write request");
        let mut buf = [0u8; 8192];
        let head_end = loop {
            if let Some(p) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = read_some(&mut s, &mut buf).await;
            assert!(
                n > 0,
                "connection closed before response {i}: {:?}",
                String::from_utf8_lossy(&pending)
            );
            pending.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&pending[..head_end]).into_owned();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line: {head}"));
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no Content-Length: {head}"));
        while pending.len() < head_end + len {
            let n = read_some(&mut s, &mut buf).await;
            assert!(
                n > 0,
                "connection closed inside body {i}: {:?}",
                String::from_utf8_lossy(&pending)
            );
            pending.extend_from_slice(&buf[..n]);
        }
        let body = String::from_utf8_lossy(&pending[head_end..head_end + len]).into_owned();
        pending.drain(..head_end + len);
        out.push(RawResponse { status, head, body });
    }
    out
}

/// Sends `request` on a fresh connection and reads the answer, which must
/// say `Connection: close` and be followed by the gateway closing the
/// connection (within 5 s). Returns the status and the body.
pub async fn answered_then_closed(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let started = tokio::time::Instant::now();
    let limit = Duration::from_secs(5);
    let text = raw_exchange(addr, request, "\u{0}never", limit).await;
    assert!(
        started.elapsed() < limit,
        "the connection stayed open: {text}"
    );
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer: {text}"));
    assert!(
        head.to_ascii_lowercase().contains("\r\nconnection: close"),
        "the answer does not announce the close: {head}"
    );
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    (status, body.to_string())
}

/// Reads what is there within 10 s; 0 on close, error or timeout.
async fn read_some(s: &mut tokio::net::TcpStream, buf: &mut [u8]) -> usize {
    match tokio::time::timeout(Duration::from_secs(10), s.read(buf)).await {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

/// A raw HTTP/1.1 POST of a JSON body, keep-alive.
pub fn raw_post(path: &str, body: &[u8], extra_headers: &str) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{extra_headers}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}
