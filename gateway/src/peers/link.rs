//! One signed HTTP exchange with a peer's listener over the gateway's
//! pooled client connections, bounded in time and answer size.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora_core::connectors::http::Connector;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::RequestHeader;

use super::signature::{Signed, PEER_ID_HEADER, PEER_SIGNATURE_HEADER, PEER_TIME_HEADER};

/// How long an idle connection to a peer is kept for the next batch.
const IDLE: Duration = Duration::from_secs(30);

/// A peer's answer.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The signature headers of the answer (id, time, signature).
    pub signed: [Option<String>; 3],
    /// The body.
    pub body: Bytes,
}

/// Sends `method path` with `body` signed as `signed` to `addr`; the whole
/// exchange is bounded by `timeout`, the answer's body by `max_answer`.
pub async fn exchange(
    connector: &Connector,
    addr: SocketAddr,
    (method, path): (&str, &str),
    signed: &Signed,
    body: Bytes,
    timeout: Duration,
    max_answer: usize,
) -> Result<Answer, String> {
    tokio::time::timeout(
        timeout,
        exchange_inner(
            connector, addr, method, path, signed, body, timeout, max_answer,
        ),
    )
    .await
    .map_err(|_| format!("no answer within {timeout:?}"))?
}

#[allow(clippy::too_many_arguments)]
async fn exchange_inner(
    connector: &Connector,
    addr: SocketAddr,
    method: &str,
    path: &str,
    signed: &Signed,
    body: Bytes,
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
    let mut req = RequestHeader::build(method, path.as_bytes(), None).map_err(text)?;
    let host = addr.to_string();
    let time = signed.time_ms.to_string();
    let length = body.len().to_string();
    for (name, value) in [
        ("host", host.as_str()),
        (PEER_ID_HEADER, signed.id.as_str()),
        (PEER_TIME_HEADER, time.as_str()),
        (PEER_SIGNATURE_HEADER, signed.signature.as_str()),
        ("content-type", "application/octet-stream"),
        ("content-length", length.as_str()),
    ] {
        req.insert_header(name, value).map_err(text)?;
    }
    session
        .write_request_header(Box::new(req))
        .await
        .map_err(text)?;
    if !body.is_empty() {
        session.write_request_body(body, true).await.map_err(text)?;
    }
    session.finish_request_body().await.map_err(text)?;
    session.read_response_header().await.map_err(text)?;
    let (status, signed) = match session.response_header() {
        Some(h) => {
            let get = |name: &str| {
                h.headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            (
                h.status.as_u16(),
                [
                    get(PEER_ID_HEADER),
                    get(PEER_TIME_HEADER),
                    get(PEER_SIGNATURE_HEADER),
                ],
            )
        }
        None => (0, [None, None, None]),
    };
    let mut answer = BytesMut::new();
    while let Some(chunk) = session.read_response_body().await.map_err(text)? {
        if answer.len() + chunk.len() > max_answer {
            session.shutdown().await;
            return Err(format!("answer larger than {max_answer} bytes"));
        }
        answer.extend_from_slice(&chunk);
    }
    connector
        .release_http_session(session, &peer, Some(IDLE))
        .await;
    Ok(Answer {
        status,
        signed,
        body: answer.freeze(),
    })
}
