//! A minimal HTTP/1.1 client for the checks: one connection per request, the
//! whole response body read into memory, a timeout on every exchange.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
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

/// One request to send.
#[derive(Debug, Clone)]
pub struct Call {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl Call {
    /// A request without a body.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
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
        tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(target, api_key))
            .await
            .map_err(|_| anyhow!("no complete answer within {REQUEST_TIMEOUT:?}"))
            .and_then(|r| r)
            .with_context(|| what)
    }

    async fn exchange(self, target: &Target, api_key: Option<&str>) -> Result<Response> {
        let stream = TcpStream::connect(&target.authority).await?;
        stream.set_nodelay(true)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
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
        let request = request.body(Full::new(self.body))?;
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
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
