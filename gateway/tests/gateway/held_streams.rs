//! Streaming requests held for their model (cold start, swap, queue): the
//! head and SSE progress comments go out while they wait, so that a proxy
//! that cuts idle connections keeps them; a failed start ends the stream
//! with an error event in the API's shape; a herd beyond the queue's cap is
//! told when to come back. Real gateway, real simulator processes, real
//! nginx in front, the official OpenAI and Anthropic SDKs as clients.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flexinfer_conformance::python;
use futures::StreamExt;
use serde_json::{json, Value};
use support::{free_port, local_sim_model, metric_value, Gateway};

const SETUP_HINT: &str = "run scripts/setup.sh (it installs the openai and anthropic SDKs into \
                          .venv) and set FLEXINFER_PYTHON=$PWD/.venv/bin/python";

/// nginx as users put it in front of a gateway, with an idle timeout of
/// `idle` towards the gateway (`proxy_read_timeout`), one server per
/// gateway address; stopped when dropped.
struct Nginx {
    child: Child,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(upstreams: &[&str], idle: &str) -> Option<Self> {
        let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())?;
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<u16> = upstreams.iter().map(|_| free_port()).collect();
        let servers: String = upstreams
            .iter()
            .zip(&ports)
            .map(|(upstream, port)| {
                format!(
                    "server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://{upstream}; \
                     proxy_http_version 1.1; proxy_set_header Connection \"\"; \
                     proxy_read_timeout {idle}; }} }}\n"
                )
            })
            .collect();
        let d = dir.path().display();
        let conf = format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
             {servers}}}\n"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).expect("nginx.conf");
        let child = Command::new(binary)
            .args(["-p", &d.to_string(), "-e", &format!("{d}/error.log"), "-c"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        while ports
            .iter()
            .any(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_err())
        {
            assert!(Instant::now() < deadline, "nginx did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Self {
            child,
            ports,
            _dir: dir,
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A model file of cold simulator models that take `delay` to start.
fn cold_models(names: &[&str], delay: &str) -> String {
    let models: String = names
        .iter()
        .map(|name| local_sim_model(name, free_port(), delay, ""))
        .collect();
    format!("models:\n{models}")
}

/// Acceptance: a stream held longer than the idle timeout of the proxy in
/// front completes with both SDKs when progress is on, and fails with it
/// off (as every release before it did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_streams_outlive_a_proxy_that_cuts_idle_connections() {
    let python = python::interpreter();
    python::require(&python, "openai", SETUP_HINT);
    python::require(&python, "anthropic", SETUP_HINT);
    // Starts take 7 s; nginx cuts after 3 s of silence.
    let on = Gateway::start_local(
        &cold_models(&["chat-on", "msg-on"], "7s"),
        &["--held-stream-progress-interval", "1s"],
    );
    let off = Gateway::start_local(
        &cold_models(&["chat-off", "msg-off"], "7s"),
        &["--held-stream-progress-interval", "0"],
    );
    let on_addr = on.addr.to_string();
    let off_addr = off.addr.to_string();
    let Some(nginx) = Nginx::start(&[&on_addr, &off_addr], "3s") else {
        panic!("nginx is not installed: run scripts/setup.sh (Debian: apt-get install nginx)");
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/held_stream_sdks.py");
    let run = |port: u16, chat: &'static str, msg: &'static str| {
        let python = python.clone();
        let script = script.clone();
        tokio::task::spawn_blocking(move || {
            python::run_json(
                &python,
                &script,
                &[&format!("http://127.0.0.1:{port}"), chat, msg],
            )
        })
    };
    let (with, without) = tokio::join!(
        run(nginx.ports[0], "chat-on", "msg-on"),
        run(nginx.ports[1], "chat-off", "msg-off")
    );
    let (with, without) = (with.unwrap(), without.unwrap());
    eprintln!("with progress: {with}\nwithout: {without}");

    for sdk in ["openai", "anthropic"] {
        let got = &with[sdk];
        assert!(
            got.get("error").is_none(),
            "{sdk} failed with progress: {got}"
        );
        assert!(
            !got["text"].as_str().unwrap_or_default().is_empty(),
            "{sdk}: {got}"
        );
        assert!(
            got["first_token_s"].as_f64().unwrap_or_default() > 6.0,
            "{sdk} was not held for the start: {got}"
        );
        let failed = &without[sdk];
        assert_eq!(failed["status"], 504, "{sdk} without progress: {failed}");
    }
    assert_eq!(with["anthropic"]["stop_reason"], "max_tokens", "{with}");

    let metrics = on.metrics().await;
    for model in ["chat-on", "msg-on"] {
        assert_eq!(
            metric_value(
                &metrics,
                &format!(
                    "flexinfer_proxy_held_streams_total{{model=\"{model}\",outcome=\"served\"}}"
                )
            ),
            1.0,
            "{metrics}"
        );
        assert!(
            metric_value(
                &metrics,
                &format!("flexinfer_proxy_held_progress_comments_total{{model=\"{model}\"}}")
            ) >= 5.0,
            "{metrics}"
        );
    }
}

/// What a raw client reads of a held stream: status, content type, body.
async fn read_stream(gw: &Gateway, path: &str, body: Value) -> (u16, String, String) {
    let resp = support::client()
        .post(gw.url(path))
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut text = Vec::new();
    let mut chunks = resp.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        text.extend_from_slice(&chunk.expect("the stream ends cleanly"));
    }
    (status, kind, String::from_utf8(text).expect("UTF-8"))
}

/// The JSON of the stream's last event, which must be an `error` event.
fn last_error_event(body: &str) -> Value {
    let event = body.trim_end().rsplit("\n\n").next().expect("an event");
    let data = event
        .strip_prefix("event: error\ndata: ")
        .unwrap_or_else(|| panic!("the stream does not end with an error event: {body:?}"));
    serde_json::from_str(data).expect("the event's data is JSON")
}

/// A start that fails after the head went out ends the stream with an
/// `error` event in the API's own shape (the SDKs raise it); a request that
/// does not stream still gets its status code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_after_the_head_ends_the_stream_with_an_error_event() {
    let port = free_port();
    let yaml = format!(
        "models:\n  - name: broken\n    command: /bin/sh\n    \
         args: [-c, \"sleep 2; exit 3\"]\n    port: {port}\n"
    );
    let gw = Gateway::start_local(&yaml, &["--held-stream-progress-interval", "300ms"]);
    let chat = json!({"model": "broken", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, kind, body) = read_stream(&gw, "/v1/chat/completions", chat).await;
    assert_eq!(
        (status, kind.as_str()),
        (200, "text/event-stream"),
        "{body}"
    );
    assert!(
        body.starts_with(": waiting phase="),
        "progress comes first: {body:?}"
    );
    let err = last_error_event(&body);
    assert_eq!(err["error"]["code"], "activation_failed", "{err}");
    assert!(err["error"]["message"].is_string(), "{err}");

    // Anthropic's Messages API: its own error shape.
    let messages = json!({"model": "broken", "stream": true, "max_tokens": 8,
                          "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, body) = read_stream(&gw, "/v1/messages", messages).await;
    assert_eq!(status, 200, "{body}");
    let err = last_error_event(&body);
    assert_eq!(err["type"], "error", "{err}");
    assert!(err["error"]["type"].is_string(), "{err}");

    // Not streaming: waits in silence and gets the status.
    let plain = json!({"model": "broken", "messages": [{"role": "user", "content": "hi"}]});
    let (status, kind, body) = read_stream(&gw, "/v1/chat/completions", plain).await;
    assert_eq!(status, 503, "{body}");
    assert!(kind.starts_with("application/json"), "{kind}");

    let metrics = gw.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            "flexinfer_proxy_held_streams_total{model=\"broken\",outcome=\"failed\"}"
        ),
        2.0,
        "{metrics}"
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Acceptance: a herd of 500 streams for one cold model gets at most the
/// cap queued (all of them served) and the rest `503` with a `Retry-After`
/// from the model's last start, not a fixed guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_beyond_the_cap_is_told_when_to_come_back() {
    const HERD: usize = 500;
    const CAP: usize = 50;
    let port = free_port();
    let yaml = format!(
        "models:\n{}",
        local_sim_model("herd", port, "4s", "    serverless: {idleTimeout: 1s}\n")
    );
    let cap = CAP.to_string();
    let gw = Gateway::start_local(
        &yaml,
        &[
            "--max-queue-size",
            &cap,
            "--held-stream-progress-interval",
            "1s",
        ],
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(HERD)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let body = json!({"model": "herd", "stream": true, "max_tokens": 4,
                      "messages": [{"role": "user", "content": "hi"}]});
    // A first start, timed by the gateway; then the model goes idle again.
    let first = client
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    first.bytes().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while support::admin_model(&gw.admin_models().await, "herd")["phase"] != "Idle" {
        assert!(Instant::now() < deadline, "the model did not go idle");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let before = rss_kib(gw.pid());
    let herd = (0..HERD).map(|_| {
        let client = client.clone();
        let url = gw.url("/v1/chat/completions");
        let body = body.clone();
        async move {
            let resp = client.post(url).json(&body).send().await.expect("answer");
            let status = resp.status().as_u16();
            let retry = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            let text = resp.text().await.unwrap_or_default();
            (status, retry, text)
        }
    });
    let sampler = {
        let pid = gw.pid();
        tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..60 {
                peak = peak.max(rss_kib(pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let answers = futures::future::join_all(herd).await;
    let peak = sampler.await.unwrap();
    let served: Vec<_> = answers.iter().filter(|(s, _, _)| *s == 200).collect();
    let refused: Vec<_> = answers.iter().filter(|(s, _, _)| *s == 503).collect();
    assert_eq!(served.len() + refused.len(), HERD, "{answers:?}");
    assert!(served.len() <= CAP, "{} served", served.len());
    assert!(
        served.len() >= CAP - 5,
        "the queue was not used: {}",
        served.len()
    );
    for (_, _, text) in &served {
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }
    // The last start took about 4 s: the herd is told to come back within it.
    for (_, retry, text) in &refused {
        let retry = retry.unwrap_or_else(|| panic!("no Retry-After: {text}"));
        assert!((1..=5).contains(&retry), "Retry-After {retry}");
        assert!(text.contains("queue_full"), "{text}");
    }
    let retries: Vec<u64> = refused.iter().filter_map(|(_, r, _)| *r).collect();
    eprintln!(
        "herd of {HERD}: {} served, {} refused with Retry-After {}–{} s; gateway RSS {} KiB before, {} KiB at peak",
        served.len(),
        refused.len(),
        retries.iter().min().unwrap_or(&0),
        retries.iter().max().unwrap_or(&0),
        before,
        peak
    );
}

/// A client that leaves a held stream (after its head and first comment)
/// gives its place in the queue back at once and is counted; the gateway
/// writes nothing more to it and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_a_held_stream_gives_its_place_back() {
    let gw = Gateway::start_local(
        &cold_models(&["slow"], "6s"),
        &["--held-stream-progress-interval", "300ms"],
    );
    let body = json!({"model": "slow", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let resp = support::client()
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("head");
    assert_eq!(resp.status(), 200);
    let mut chunks = resp.bytes_stream();
    let first = chunks.next().await.expect("a comment").expect("bytes");
    assert!(first.starts_with(b": waiting"), "{first:?}");
    drop(chunks);
    let gone = "flexinfer_proxy_held_streams_total{model=\"slow\",outcome=\"client_gone\"}";
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric_value(&gw.metrics().await, gone) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the leaving client was not noticed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waiting = support::admin_model(&gw.admin_models().await, "slow").clone();
    assert_eq!(waiting["queueDepth"], 0, "{waiting}");
    // The start goes on for the next request, which is served.
    let (status, _, text) = read_stream(&gw, "/v1/chat/completions", body).await;
    assert_eq!(status, 200);
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
}
