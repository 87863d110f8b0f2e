//! One signed HTTP exchange with a peer's listener over the gateway's
//! pooled client connections, bounded in time and answer size. The
//! answer's signature is checked on its headers before its body is read:
//! an answer that is not signed for this request is reported as such and
//! its body left unread.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora_core::connectors::http::Connector;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::RequestHeader;

use super::answer;
use super::envelope::SignedRequest;
use super::keyring::KeySet;

/// How long an idle connection to a peer is kept for the next batch.
const IDLE: Duration = Duration::from_secs(30);

/// A peer's answer.
#[derive(Debug)]
pub enum Answer {
    /// Signed with the shared secret, for this very request.
    Authentic {
        /// HTTP status.
        status: u16,
        /// The answering replica instance.
        responder: String,
        /// The body.
        body: Bytes,
    },
    /// Not signed, or not for this request: never acted upon.
    Unauthentic {
        /// HTTP status, as claimed.
        status: u16,
    },
}

/// What to send: method, path, the signed envelope and the body it signs.
pub struct Request<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path on the peer listener.
    pub path: &'a str,
    /// The signature.
    pub signed: &'a SignedRequest,
    /// The body.
    pub body: Bytes,
}

/// Sends `request` to `addr`; the whole exchange is bounded by `timeout`,
/// the answer's body by `max_answer`.
pub async fn exchange(
    connector: &Connector,
    addr: SocketAddr,
    keys: &KeySet,
    request: Request<'_>,
    timeout: Duration,
    max_answer: usize,
) -> Result<Answer, String> {
    tokio::time::timeout(
        timeout,
        exchange_inner(connector, addr, keys, request, timeout, max_answer),
    )
    .await
    .map_err(|_| format!("no answer within {timeout:?}"))?
}

async fn exchange_inner(
    connector: &Connector,
    addr: SocketAddr,
    keys: &KeySet,
    request: Request<'_>,
    timeout: Duration,
    max_answer: usize,
) -> Result<Answer, String> {
    let mut peer = HttpPeer::new(addr, false, String::new());
    peer.options.connection_timeout = Some(timeout);
    peer.options.read_timeout = Some(timeout);
    peer.options.write_timeout = Some(timeout);
    peer.options.idle_timeout = Some(IDLE);
    let text = |e: Box<pingora_error::Error>| e.to_string();
    let (mut session, _) = connector.get_http_session(&peer).await.map_err(text)?;
    let mut req =
        RequestHeader::build(request.method, request.path.as_bytes(), None).map_err(text)?;
    req.insert_header("host", addr.to_string()).map_err(text)?;
    req.insert_header("content-type", "application/octet-stream")
        .map_err(text)?;
    for (name, value) in request.signed.headers() {
        req.insert_header(name, value).map_err(text)?;
    }
    session
        .write_request_header(Box::new(req))
        .await
        .map_err(text)?;
    if !request.body.is_empty() {
        session
            .write_request_body(request.body, true)
            .await
            .map_err(text)?;
    }
    session.finish_request_body().await.map_err(text)?;
    session.read_response_header().await.map_err(text)?;
    let Some(header) = session.response_header() else {
        return Err("no answer header".into());
    };
    let status = header.status.as_u16();
    let get = |name: &str| header.headers.get(name).and_then(|v| v.to_str().ok());
    let length = get("content-length").and_then(|v| v.trim().parse::<u64>().ok());
    let head = request
        .signed
        .pairs(keys)
        .find_map(|(key, mac)| answer::open(key, mac, status, get, length));
    let Some(head) = head else {
        session.shutdown().await;
        return Ok(Answer::Unauthentic { status });
    };
    if head.length > max_answer as u64 {
        session.shutdown().await;
        return Err(format!("answer larger than {max_answer} bytes"));
    }
    let mut body = BytesMut::with_capacity(head.length as usize);
    while let Some(chunk) = session.read_response_body().await.map_err(text)? {
        if (body.len() + chunk.len()) as u64 > head.length {
            session.shutdown().await;
            return Ok(Answer::Unauthentic { status });
        }
        body.extend_from_slice(&chunk);
    }
    if !head.matches(&body) {
        session.shutdown().await;
        return Ok(Answer::Unauthentic { status });
    }
    connector
        .release_http_session(session, &peer, Some(IDLE))
        .await;
    Ok(Answer::Authentic {
        status,
        responder: head.responder,
        body: body.freeze(),
    })
}
