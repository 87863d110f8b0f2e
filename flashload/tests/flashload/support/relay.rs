//! A loopback TCP relay in front of a registry that records the head of
//! every HTTP request it forwards (to see `Range` headers) and counts the
//! bytes the server sends back; optionally it strips `Range` headers, so
//! the server answers 200 with the whole blob.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the relay saw.
#[derive(Default)]
pub struct Seen {
    /// Request heads, in order.
    pub requests: Mutex<Vec<String>>,
    /// Bytes from the server to the client.
    pub bytes_down: AtomicU64,
    /// Strip `Range` request headers.
    pub strip_range: AtomicBool,
    /// Client connections open now.
    pub open: AtomicU64,
    /// Most client connections open at once.
    pub most_open: AtomicU64,
}

impl Seen {
    /// Request heads containing `needle` (case-insensitive).
    pub fn requests_with(&self, needle: &str) -> Vec<String> {
        let needle = needle.to_ascii_lowercase();
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.to_ascii_lowercase().contains(&needle))
            .cloned()
            .collect()
    }
}

/// Starts a relay to `upstream`; returns its address and what it sees.
pub async fn start(upstream: String) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                let now = seen.open.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most_open.fetch_max(now, Ordering::SeqCst);
                if let Ok(server) = TcpStream::connect(&upstream).await {
                    relay(client, server, seen.clone()).await;
                }
                seen.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

async fn relay(client: TcpStream, server: TcpStream, seen: Arc<Seen>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let seen_down = seen.clone();
    let down = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    seen_down.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = cw.shutdown().await;
    });
    // Requests to a registry pull are bodiless GETs: split the stream on
    // the blank line ending each head.
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match cr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            let text = String::from_utf8_lossy(&head).into_owned();
            seen.requests.lock().unwrap().push(text.clone());
            let forwarded = if seen.strip_range.load(Ordering::Relaxed) {
                text.split("\r\n")
                    .filter(|line| !line.to_ascii_lowercase().starts_with("range:"))
                    .collect::<Vec<_>>()
                    .join("\r\n")
            } else {
                text
            };
            if sw.write_all(forwarded.as_bytes()).await.is_err() {
                return;
            }
        }
    }
    let _ = sw.shutdown().await;
    let _ = down.await;
}
