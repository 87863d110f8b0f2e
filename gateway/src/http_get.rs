//! A plain `GET` on a fresh connection, for the gateway's own probes
//! (member gateways in global mode, endpoint health checks).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora_core::connectors::http::Connector;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::RequestHeader;

/// Why a `GET` failed.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// Connecting, writing or reading failed, or the answer was malformed.
    #[error("{0}")]
    Http(String),
    /// The body was larger than allowed.
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
}

/// `GET path` on `addr` with `Host: host`, each step bounded by `timeout`;
/// returns the status and up to `max_body` bytes of body (`0`: the body is
/// not read). A fresh connection every time, so that the answer always
/// proves a connect works.
pub async fn get(
    connector: &Connector,
    addr: SocketAddr,
    host: &str,
    path: &str,
    authorization: Option<&str>,
    timeout: Duration,
    max_body: usize,
) -> Result<(u16, Bytes), GetError> {
    let mut peer = HttpPeer::new(addr, false, String::new());
    peer.options.connection_timeout = Some(timeout);
    peer.options.read_timeout = Some(timeout);
    peer.options.write_timeout = Some(timeout);
    let http = |e: Box<pingora_error::Error>| GetError::Http(e.to_string());
    let (mut session, _) = connector.get_http_session(&peer).await.map_err(http)?;
    let mut req = RequestHeader::build("GET", path.as_bytes(), None).map_err(http)?;
    req.insert_header(http::header::HOST, host).map_err(http)?;
    req.insert_header(http::header::ACCEPT, "application/json")
        .map_err(http)?;
    req.insert_header(http::header::CONNECTION, "close")
        .map_err(http)?;
    if let Some(value) = authorization {
        req.insert_header(http::header::AUTHORIZATION, value)
            .map_err(http)?;
    }
    session
        .write_request_header(Box::new(req))
        .await
        .map_err(http)?;
    session.finish_request_body().await.map_err(http)?;
    session.read_response_header().await.map_err(http)?;
    let status = session
        .response_header()
        .map(|h| h.status.as_u16())
        .unwrap_or(0);
    let mut body = BytesMut::new();
    if max_body > 0 {
        while let Some(chunk) = session.read_response_body().await.map_err(http)? {
            if body.len() + chunk.len() > max_body {
                return Err(GetError::TooLarge(max_body));
            }
            body.extend_from_slice(&chunk);
        }
    }
    session.shutdown().await;
    Ok((status, body.freeze()))
}
