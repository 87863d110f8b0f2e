//! What a client notices at the edges: an early refusal while it is still
//! sending its body, and shutdown timing.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{endpoints, pod, read_events, Gateway};

/// Writes `head` and then `body_len` bytes of body in full before reading
/// anything, as Python's `http.client` does, and returns the status line
/// of the answer; panics on a reset or a failed write.
fn write_everything_then_read(addr: SocketAddr, head: &str, body_len: usize) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).expect("write head");
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = body_len;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n])
            .unwrap_or_else(|e| panic!("body write failed with {left} bytes left: {e}"));
        left -= n;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "reading the answer failed ({e}) after {:?}",
                String::from_utf8_lossy(&answer)
            ),
        }
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_refusals_reach_clients_that_send_the_whole_body_first() {
    let sim = pod("pod-a", &["m"], &[]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(
        &yaml,
        &[
            "--max-body-bytes",
            "1048576",
            "--auth-enabled",
            "true",
            "--auth-token",
            "k",
        ],
    );
    let addr = gw.addr;
    let body_len = 6 * 1024 * 1024;
    let too_large = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k\r\n\
         Content-Type: application/json\r\nContent-Length: {body_len}\r\n\r\n"
    );
    let unauthorized = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\
         Content-Type: application/json\r\nContent-Length: {body_len}\r\n\r\n"
    );
    let header_too_large = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Padding: {}\r\n\
         Content-Length: {body_len}\r\n\r\n",
        "p".repeat(40 * 1024)
    );
    tokio::task::spawn_blocking(move || {
        for round in 0..5 {
            for (head, expected) in [
                (&too_large, "413"),
                (&unauthorized, "401"),
                (&header_too_large, "431"),
            ] {
                let status = write_everything_then_read(addr, head, body_len);
                assert!(
                    status.starts_with(&format!("HTTP/1.1 {expected}")),
                    "round {round}: expected {expected}, got {status:?}"
                );
            }
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nothing_in_flight_exits_within_a_second() {
    let sim = pod("pod-a", &["m"], &[]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    // No drain delay to serve through: nothing in flight means no wait.
    let mut gw = Gateway::start(&yaml, &["--shutdown-drain-delay", "0s"]);
    let body = serde_json::to_vec(&support::chat("m")).unwrap();
    let resp = support::post_json(&gw.url("/v1/chat/completions"), &body, &[]).await;
    assert_eq!(resp.status(), 200);
    let started = Instant::now();
    assert!(
        gw.terminate(Duration::from_secs(1)),
        "still running 1 s after SIGTERM"
    );
    println!("exited {:?} after SIGTERM", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_stream_in_flight_finish() {
    // 20 tokens at 10 per second: a stream of about 2 s.
    let sim = pod("pod-a", &["m"], &["--tokens-per-second", "10"]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let mut gw = Gateway::start(&yaml, &["--shutdown-drain-delay", "0s"]);
    let body = serde_json::to_vec(&json!({
        "model": "m",
        "messages": [{"role": "user", "content": "tell a story"}],
        "max_tokens": 20,
        "stream": true
    }))
    .unwrap();
    let started = Instant::now();
    let resp = support::post_json(&gw.url("/v1/chat/completions"), &body, &[]).await;
    assert_eq!(resp.status(), 200);
    let reading = tokio::spawn(read_events(resp, started));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = gw.pid();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let events = reading.await.expect("the stream ends normally");
    assert_eq!(
        events.last().map(|e| e.data.as_str()),
        Some("[DONE]"),
        "the stream was cut: {events:?}"
    );
    let content = events.iter().filter(|e| e.content().is_some()).count();
    assert!(content >= 20, "{content} content events");
    assert!(
        gw.terminate(Duration::from_secs(2)),
        "still running 2 s after the stream ended"
    );
}

/// A request still waiting for its model to start when SIGTERM comes is
/// served, not cut: a draining gateway counts queued requests as in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_serves_a_request_waiting_for_a_cold_start() {
    let port = support::free_port();
    let bin = flexinfer_conformance::sim::process::SimProcess::binary().expect("flexinfer-sim");
    let yaml = format!(
        "models:\n  - name: sleepy\n    command: \"{bin}\"\n    args: [--port, \"{port}\", --model, \
         sleepy, --startup-delay, 1500ms]\n    port: {port}\n    serverless: {{idleTimeout: 1m}}\n",
        bin = bin.display()
    );
    let mut gw = Gateway::start_local(&yaml, &["--shutdown-drain-delay", "0s"]);
    let body = serde_json::to_vec(&support::chat("sleepy")).unwrap();
    let url = gw.url("/v1/chat/completions");
    let waiting = tokio::spawn(async move { support::post_json(&url, &body, &[]).await });
    // The request is queued while the model process loads.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let resp = waiting.await.expect("the queued request was answered");
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert!(
        gw.terminate(Duration::from_secs(3)),
        "still running after the queued request was served"
    );
}
