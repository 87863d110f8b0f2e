//! Readiness probe of a loading child: one HTTP/1.1 `GET` of its health path
//! over a fresh loopback connection, answered 2xx or not.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a single probe may take (connect, write, read the status line).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Most bytes read while looking for the status line.
const STATUS_LINE_LIMIT: usize = 1024;

/// Whether `GET http://<addr><path>` answers with a 2xx status within
/// [`PROBE_TIMEOUT`]. Any error (refused, reset, timeout, garbage) is "not
/// healthy yet".
pub async fn probe(addr: SocketAddr, path: &str) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, status_code(addr, path)).await,
        Ok(Some(200..=299))
    )
}

async fn status_code(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: flexinfer-local-actuator\r\n\
         Accept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while buf.len() < STATUS_LINE_LIMIT {
        if let Some(code) = parse_status_line(&buf) {
            return Some(code);
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    parse_status_line(&buf)
}

/// The status code of a complete `HTTP/1.x NNN reason\r\n` line at the start
/// of `buf`, or `None` while the line is incomplete or malformed.
fn parse_status_line(buf: &[u8]) -> Option<u16> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[..end]).ok()?;
    let mut parts = line.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn parses_status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            parse_status_line(b"HTTP/1.0 503 Service Unavailable\r\nx: y\r\n"),
            Some(503)
        );
        assert_eq!(parse_status_line(b"HTTP/1.1 204\r\n"), Some(204));
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK"), None);
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1 2000 OK\r\n"), None);
    }

    async fn answer_once(status: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let n = conn.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"GET /health HTTP/1.1\r\n"));
            let body = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
            conn.write_all(body.as_bytes()).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn healthy_only_on_2xx() {
        assert!(probe(answer_once("200 OK").await, "/health").await);
        assert!(!probe(answer_once("503 Service Unavailable").await, "/health").await);
        // Nothing listening.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(!probe(closed, "/health").await);
    }
}
