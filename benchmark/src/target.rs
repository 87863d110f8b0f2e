//! The endpoint under test: a base URL as OpenAI clients take it, turned
//! into the address to connect to and the request paths.

use std::fmt;

use anyhow::{bail, Context, Result};
use http::uri::{Authority, Uri};

/// Which completion API is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/chat/completions` with one user message.
    Chat,
    /// `POST /v1/completions` with a text prompt.
    Completions,
}

/// A parsed `http://host:port[/prefix]` base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    authority: Authority,
    host: String,
    port: u16,
    prefix: String,
}

impl Target {
    /// Parses a base URL. A path ending in `/v1` is used as given (as the
    /// OpenAI SDKs take it); any other path gets `/v1` appended, so both
    /// `http://h:8000` and `http://h:8000/v1` work, as does a gateway route
    /// such as `http://gw/model/llama`.
    pub fn parse(url: &str) -> Result<Target> {
        let uri: Uri = url
            .trim()
            .parse()
            .with_context(|| format!("invalid URL {url:?}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => bail!(
                "https is not supported: point --url at the plain-HTTP service (in-cluster address or a local port-forward)"
            ),
            _ => bail!("URL {url:?} must start with http://"),
        }
        let Some(authority) = uri.authority().cloned() else {
            bail!("URL {url:?} has no host");
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = authority.port_u16().unwrap_or(80);
        let mut prefix = uri.path().trim_end_matches('/').to_owned();
        if !prefix.ends_with("/v1") {
            prefix.push_str("/v1");
        }
        Ok(Target {
            authority,
            host,
            port,
            prefix,
        })
    }

    /// `host:port` to connect to.
    pub fn connect_addr(&self) -> (String, u16) {
        (self.host.clone(), self.port)
    }

    /// The `Host` header value.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Path of `api`, e.g. `/v1/chat/completions`.
    pub fn path(&self, api: Api) -> String {
        match api {
            Api::Chat => format!("{}/chat/completions", self.prefix),
            Api::Completions => format!("{}/completions", self.prefix),
        }
    }

    /// `/v1/models` below the base.
    pub fn models_path(&self) -> String {
        format!("{}/models", self.prefix)
    }

    /// `path` (starting with `/`) below the base without its `/v1`, for
    /// server probes such as `/health`.
    pub fn root_path(&self, path: &str) -> String {
        format!("{}{path}", self.prefix.trim_end_matches("/v1"))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_with_and_without_v1() {
        let t = Target::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!(t.path(Api::Chat), "/v1/chat/completions");
        assert_eq!(t.connect_addr(), ("127.0.0.1".into(), 8000));
        let t = Target::parse("http://gw/v1/").unwrap();
        assert_eq!(t.path(Api::Completions), "/v1/completions");
        assert_eq!(t.connect_addr().1, 80);
        let t = Target::parse("http://gw:8080/model/llama").unwrap();
        assert_eq!(t.path(Api::Chat), "/model/llama/v1/chat/completions");
        assert_eq!(t.models_path(), "/model/llama/v1/models");
        assert_eq!(t.root_path("/health"), "/model/llama/health");
        assert_eq!(t.to_string(), "http://gw:8080/model/llama/v1");
        let t = Target::parse("http://[::1]:9/").unwrap();
        assert_eq!(t.connect_addr(), ("::1".into(), 9));
    }

    #[test]
    fn unsupported_urls_are_refused() {
        assert!(Target::parse("https://api.example.com/v1")
            .unwrap_err()
            .to_string()
            .contains("https is not supported"));
        assert!(Target::parse("ftp://x").is_err());
        assert!(Target::parse("not a url").is_err());
    }
}
