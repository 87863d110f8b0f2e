//! A test replica speaking the peer protocol to a gateway's peer listener
//! over raw HTTP/1.1, so that tests can capture a request's exact bytes
//! and send them again from another connection.

use std::net::SocketAddr;
use std::time::Duration;

use flexinfer_gateway::peers::answer;
use flexinfer_gateway::peers::envelope::SignedRequest;
use flexinfer_gateway::peers::keyring::KeySet;
use flexinfer_gateway::peers::signature::Key;
use flexinfer_gateway::peers::{HELLO_PATH, RECORDS_PATH, SNAPSHOT_PATH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A peer's answer, as read off the wire.
#[derive(Debug)]
pub struct PeerReply {
    /// Status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body (framed by Content-Length).
    pub body: Vec<u8>,
}

impl PeerReply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the answer is signed with one of `keys` for the request
    /// `signed` (signed with the same keys).
    pub fn signed_for(&self, keys: &KeySet, signed: &SignedRequest) -> bool {
        let length = self
            .header("content-length")
            .and_then(|v| v.trim().parse().ok());
        signed.pairs(keys).any(|(key, mac)| {
            answer::open(key, mac, self.status, |n| self.header(n), length)
                .is_some_and(|head| head.matches(&self.body))
        })
    }

    /// The OpenAI-style error code of the body.
    pub fn error_code(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// One request: its exact bytes and the signature they carry.
#[derive(Clone, Debug)]
pub struct Captured {
    /// What was written on the connection.
    pub bytes: Vec<u8>,
    /// Its signature.
    pub signed: SignedRequest,
}

/// A replica instance holding the shared secret.
pub struct TestPeer {
    /// The shared secret(s) it signs with.
    pub key: KeySet,
    /// This instance's id.
    pub id: String,
    /// The gateway's peer listener.
    pub listen: SocketAddr,
    /// The gateway's instance, once `hello` named it.
    pub receiver: String,
    seq: u64,
}

impl TestPeer {
    /// An instance `id` talking to the listener at `listen`.
    pub fn new(listen: &str, secret: &str, id: &str) -> Self {
        TestPeer {
            key: KeySet::from_keys(vec![Key::new(secret.as_bytes())]),
            id: id.to_owned(),
            listen: listen.parse().expect("listen address"),
            receiver: String::new(),
            seq: 0,
        }
    }

    /// The next request of this instance to the gateway, signed.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> Captured {
        self.seq += 1;
        let signed = SignedRequest::new(
            &self.key,
            (method, path),
            (&self.id, &self.receiver),
            self.seq,
            body,
        );
        Captured {
            bytes: raw_request(method, path, &signed.headers(), body),
            signed,
        }
    }

    /// Sends `request` on a fresh connection and reads the answer.
    pub async fn send(&self, request: &Captured) -> PeerReply {
        exchange(self.listen, &request.bytes).await
    }

    /// Asks the gateway which instance it is, and addresses it from now on.
    pub async fn hello(&mut self) -> String {
        let request = self.request("GET", HELLO_PATH, b"");
        let reply = self.send(&request).await;
        assert_eq!(reply.status, 200, "hello: {reply:?}");
        assert!(reply.signed_for(&self.key, &request.signed), "{reply:?}");
        self.receiver = reply.header("x-flexinfer-peer-id").unwrap().to_owned();
        self.receiver.clone()
    }

    /// Posts a records body; returns the request and the answer.
    pub async fn post_records(&mut self, body: &[u8]) -> (Captured, PeerReply) {
        let request = self.request("POST", RECORDS_PATH, body);
        let reply = self.send(&request).await;
        (request, reply)
    }

    /// Asks for the snapshot; returns the request and the answer.
    pub async fn snapshot(&mut self) -> (Captured, PeerReply) {
        let request = self.request("GET", SNAPSHOT_PATH, b"");
        let reply = self.send(&request).await;
        (request, reply)
    }
}

/// An HTTP/1.1 request with `headers` (Content-Length among them) and
/// `body`.
pub fn raw_request(method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: peer\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Writes `request` on a fresh connection to `addr` and reads one answer.
pub async fn exchange(addr: SocketAddr, request: &[u8]) -> PeerReply {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("write request");
    read_reply(&mut s).await
}

/// Reads one answer (header, then a body framed by Content-Length) within
/// 10 s; panics when the connection closes first.
pub async fn read_reply(s: &mut tokio::net::TcpStream) -> PeerReply {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut data = Vec::new();
    let head_end = loop {
        if let Some(p) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        assert!(
            read_more(s, &mut data, deadline).await,
            "no answer: {:?}",
            String::from_utf8_lossy(&data)
        );
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        assert!(
            read_more(s, &mut data, deadline).await,
            "connection closed inside the body"
        );
    }
    PeerReply {
        status,
        headers,
        body: data[head_end..head_end + length].to_vec(),
    }
}

/// Reads what comes next into `data`; false on close, error or deadline.
async fn read_more(
    s: &mut tokio::net::TcpStream,
    data: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> bool {
    let mut buf = [0u8; 8192];
    match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => {
            data.extend_from_slice(&buf[..n]);
            true
        }
        _ => false,
    }
}
