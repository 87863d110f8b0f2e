//! One keep-alive HTTP/1.1 connection per load worker, on hyper's
//! connection API directly: no pool, no per-request allocation beyond the
//! request itself, so the load generator costs the endpoint's machine as
//! little CPU as possible.

use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::target::Target;

/// Header the gateway reads to treat a request as background work that
/// must never trigger a cold start.
pub const WORKLOAD_CLASS_HEADER: &str = "x-flexinfer-internal-workload-class";

/// What every request carries besides its body.
#[derive(Debug, Clone)]
pub struct Client {
    target: Target,
    host: HeaderValue,
    authorization: Option<HeaderValue>,
    workload_class: Option<HeaderValue>,
    connect_timeout: Duration,
}

impl Client {
    /// A client for `target`, with an optional bearer token and workload class.
    pub fn new(
        target: Target,
        api_key: Option<&str>,
        workload_class: Option<&str>,
        connect_timeout: Duration,
    ) -> Result<Client> {
        let host = HeaderValue::from_str(target.authority().as_str())
            .context("the URL's host is not a valid header value")?;
        let authorization = api_key
            .filter(|k| !k.is_empty())
            .map(|k| HeaderValue::from_str(&format!("Bearer {k}")))
            .transpose()
            .context("the API key is not a valid header value")?;
        let workload_class = workload_class
            .filter(|c| !c.is_empty())
            .map(HeaderValue::from_str)
            .transpose()
            .context("the workload class is not a valid header value")?;
        Ok(Client {
            target,
            host,
            authorization,
            workload_class,
            connect_timeout,
        })
    }

    /// The endpoint.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Opens a connection.
    pub async fn connect(&self) -> Result<Connection> {
        let (host, port) = self.target.connect_addr();
        let stream = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect((host.as_str(), port)),
        )
        .await
        .with_context(|| format!("connecting to {host}:{port} timed out"))?
        .with_context(|| format!("cannot connect to {host}:{port}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP handshake failed")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection { sender })
    }

    /// Sends `request` on a new connection and reads the whole answer, all
    /// within `timeout` (probes, metrics scrapes).
    pub async fn fetch(
        &self,
        request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes)> {
        tokio::time::timeout(timeout, async {
            let mut connection = self.connect().await?;
            connection.fetch(request).await
        })
        .await
        .with_context(|| format!("no answer from {} within {timeout:?}", self.target))?
    }

    /// A `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: Bytes) -> Request<Full<Bytes>> {
        self.request(Method::POST, path, body)
    }

    /// A `GET path`.
    pub fn get(&self, path: &str) -> Request<Full<Bytes>> {
        self.request(Method::GET, path, Bytes::new())
    }

    fn request(&self, method: Method, path: &str, body: Bytes) -> Request<Full<Bytes>> {
        let has_body = !body.is_empty();
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = path.parse().unwrap_or_default();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        if has_body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(auth) = &self.authorization {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        if let Some(class) = &self.workload_class {
            headers.insert(WORKLOAD_CLASS_HEADER, class.clone());
        }
        request
    }
}

/// An open connection.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    /// Sends a request once the connection is free; the response body must
    /// be read to the end before the next request.
    pub async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper::Error> {
        self.sender.ready().await?;
        self.sender.send_request(request).await
    }

    /// Sends a request and reads the whole answer.
    pub async fn fetch(&mut self, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes)> {
        let response = self.send(request).await.context("request failed")?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .context("reading the answer failed")?
            .to_bytes();
        Ok((status, body))
    }

    /// Whether the server closed it (or it failed).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}
