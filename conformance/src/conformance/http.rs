//! A minimal HTTP/1.1 client for the checks: one connection per request, the
//! whole response body read into memory (or its frames timed as they
//! arrive), a timeout on every exchange.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// How long one request may take, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// A plain `http://host:port[/prefix]` base URL.
#[derive(Debug, Clone)]
pub struct Target {
    authority: String,
    prefix: String,
}

impl Target {
    /// Parses `http://host:port[/prefix]`; `https` is not supported.
    pub fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("only http:// URLs are supported, got {url:?}"))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            bail!("no host in {url:?}");
        }
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Self {
            authority,
            prefix: prefix.to_owned(),
        })
    }

    /// `host:port`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path prefix (`""` or `/something`, without a trailing slash).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `http://authority/prefix`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.authority, self.prefix)
    }
}

/// A response with its whole body.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Response {
    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// A header as text ("" when missing or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The first `limit` bytes of the body, as text, for evidence.
    pub fn body_excerpt(&self, limit: usize) -> String {
        let text = String::from_utf8_lossy(&self.body);
        if text.len() <= limit {
            return text.into_owned();
        }
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    }

    /// `status 404, body {...}`, for evidence.
    pub fn describe(&self) -> String {
        format!(
            "status {}, body {}",
            self.status.as_u16(),
            self.body_excerpt(300)
        )
    }
}

/// A response whose body has not been read yet (the connection stays open
/// while it is held; dropping it closes the connection).
#[derive(Debug)]
pub struct OpenResponse {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// When the request was sent.
    pub sent_at: Instant,
    body: Incoming,
}

impl OpenResponse {
    /// A header as text ("" when missing or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Reads the rest of the body, noting when each frame arrived (measured
    /// from when the request was sent), within `limit` from now.
    pub async fn timed_frames(mut self, limit: Duration) -> Result<Vec<(Duration, Bytes)>> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut frames = Vec::new();
        loop {
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .map_err(|_| anyhow!("body not complete within {limit:?}"))?;
            match frame {
                None => return Ok(frames),
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        frames.push((self.sent_at.elapsed(), data));
                    }
                }
            }
        }
    }

    /// Reads the rest of the body into a [`Response`].
    pub async fn collect(self) -> Result<Response> {
        let body = self.body.collect().await?.to_bytes();
        Ok(Response {
            status: self.status,
            headers: self.headers,
            body,
        })
    }
}

type SendBody = BoxBody<Bytes, Infallible>;

/// One request to send.
#[derive(Debug, Clone)]
pub struct Call {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Bytes,
    timeout: Duration,
}

impl Call {
    /// A request without a body.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Bytes::new(),
            timeout: REQUEST_TIMEOUT,
        }
    }

    /// Overrides [`REQUEST_TIMEOUT`] for this request.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `GET path`.
    pub fn get(path: impl Into<String>) -> Self {
        Self::new(Method::GET, path)
    }

    /// `POST path` with a JSON body.
    pub fn post_json(path: impl Into<String>, body: &Value) -> Self {
        Self::post_raw(path, "application/json", body.to_string())
    }

    /// `POST path` with a raw body and content type.
    pub fn post_raw(path: impl Into<String>, content_type: &str, body: impl Into<Bytes>) -> Self {
        let mut call = Self::new(Method::POST, path);
        call.body = body.into();
        call.header(CONTENT_TYPE.as_str(), content_type)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sends it to `target`, with `Authorization: Bearer <api_key>` when given.
    pub async fn send(self, target: &Target, api_key: Option<&str>) -> Result<Response> {
        let what = format!("{} {}{}", self.method, target.base_url(), self.path);
        let limit = self.timeout;
        tokio::time::timeout(limit, async {
            self.open(target, api_key).await?.collect().await
        })
        .await
        .map_err(|_| anyhow!("no complete answer within {limit:?}"))
        .and_then(|r| r)
        .with_context(|| what)
    }

    /// Sends it and returns as soon as the response head has arrived.
    pub async fn open(self, target: &Target, api_key: Option<&str>) -> Result<OpenResponse> {
        let what = format!("{} {}{}", self.method, target.base_url(), self.path);
        let limit = self.timeout;
        let body = Full::new(self.body.clone()).boxed();
        tokio::time::timeout(limit, self.exchange(target, api_key, body, None))
            .await
            .map_err(|_| anyhow!("no response head within {limit:?}"))
            .and_then(|r| r)
            .with_context(|| what)
    }

    /// Sends the head of a request declaring a body of `declared_len` bytes
    /// with `Expect: 100-continue`, and sends the body (`declared_len` bytes
    /// of `filler`) only when no answer came within `patience`, as clients
    /// of a server that ignores `Expect` do. Returns the final answer.
    pub async fn send_declared(
        self,
        target: &Target,
        api_key: Option<&str>,
        declared_len: usize,
        filler: u8,
        patience: Duration,
    ) -> Result<Response> {
        let what = format!("{} {}{}", self.method, target.base_url(), self.path);
        let limit = self.timeout;
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), rx))
        });
        let body = StreamBody::new(stream).boxed();
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(patience).await;
            const CHUNK: usize = 64 * 1024;
            let chunk = Bytes::from(vec![filler; CHUNK]);
            let mut left = declared_len;
            while left > 0 {
                let n = left.min(CHUNK);
                if tx.send(chunk.slice(..n)).await.is_err() {
                    return;
                }
                left -= n;
            }
        });
        let exchange = async {
            self.exchange(target, api_key, body, Some(declared_len))
                .await?
                .collect()
                .await
        };
        let result = tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| anyhow!("no complete answer within {limit:?}"))
            .and_then(|r| r)
            .with_context(|| what);
        feeder.abort();
        result
    }

    async fn exchange(
        self,
        target: &Target,
        api_key: Option<&str>,
        body: SendBody,
        declared_len: Option<usize>,
    ) -> Result<OpenResponse> {
        let stream = TcpStream::connect(&target.authority).await?;
        stream.set_nodelay(true)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, SendBody>(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(self.method)
            .uri(format!("{}{}", target.prefix, self.path))
            .header(HOST, target.authority.as_str());
        if let Some(key) = api_key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(len) = declared_len {
            request = request
                .header(CONTENT_LENGTH, len.to_string())
                .header("expect", "100-continue");
        }
        let request = request.body(body)?;
        let sent_at = Instant::now();
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        Ok(OpenResponse {
            status: parts.status,
            headers: parts.headers,
            sent_at,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let t = Target::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(t.base_url(), "http://127.0.0.1:8080");
        let t = Target::parse("http://gw.example/api/").unwrap();
        assert_eq!(t.base_url(), "http://gw.example:80/api");
        assert!(Target::parse("https://gw.example").is_err());
        assert!(Target::parse("http:///x").is_err());
    }
}
