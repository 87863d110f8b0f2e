//! A client of one registry's distribution API (v2): the auth handshake
//! on demand, tags and catalog listing with `Link` pagination, manifest
//! fetch with digest verification, and blob requests (with `Range`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, LINK};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::Deserialize;

use super::auth::{fetch_token, Challenge};
use super::credentials::{Credentials, RegistryKind};
use super::digest::Digest;
use super::error::{OciError, Result};
use super::manifest::{self, Manifest};
use super::reference::{is_loopback, Reference};

/// Page size asked of tags and catalog listings.
pub const PAGE_SIZE: usize = 1000;
/// Timeout of connecting to the registry.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How a [`RegistryClient`] is set up.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// Credentials (adapted to the registry's kind by the client).
    pub credentials: Option<Credentials>,
    /// Force plain HTTP (`Some(true)`) or HTTPS (`Some(false)`); `None`
    /// uses HTTP for loopback registries only.
    pub plain_http: Option<bool>,
    /// Registry flavour; `None` detects it from the host.
    pub kind: Option<RegistryKind>,
    /// Overall timeout of requests other than blob downloads.
    pub request_timeout: Option<Duration>,
    /// Entries asked per page of tags and catalog listings
    /// [default: [`PAGE_SIZE`]].
    pub page_size: Option<usize>,
}

#[derive(Default)]
struct AuthState {
    /// The registry asked for Basic auth: send it on every request.
    basic: bool,
    /// Bearer tokens by scope.
    tokens: HashMap<String, String>,
}

/// A manifest as fetched.
#[derive(Clone, Debug)]
pub struct FetchedManifest {
    /// The parsed manifest.
    pub manifest: Manifest,
    /// Digest of its bytes (verified against the reference's digest and
    /// the registry's `Docker-Content-Digest`).
    pub digest: Digest,
    /// The raw bytes.
    pub bytes: Vec<u8>,
}

/// A client of one registry.
pub struct RegistryClient {
    http: reqwest::Client,
    registry: String,
    base: String,
    kind: RegistryKind,
    credentials: Option<Credentials>,
    request_timeout: Duration,
    page_size: usize,
    auth: Mutex<AuthState>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.base)
            .field("kind", &self.kind)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct TagList {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Catalog {
    #[serde(default)]
    repositories: Option<Vec<String>>,
}

impl RegistryClient {
    /// A client for `registry` (`host[:port]`).
    pub fn new(registry: &str, options: ClientOptions) -> Result<RegistryClient> {
        let kind = options
            .kind
            .unwrap_or_else(|| RegistryKind::detect(registry));
        let plain = options.plain_http.unwrap_or_else(|| is_loopback(registry));
        let scheme = if plain { "http" } else { "https" };
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("flexinfer-flashload/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| OciError::Http {
                host: registry.to_owned(),
                error,
            })?;
        Ok(RegistryClient {
            http,
            registry: registry.to_owned(),
            base: format!("{scheme}://{registry}"),
            kind,
            credentials: options.credentials.map(|c| c.adapted(kind)),
            request_timeout: options.request_timeout.unwrap_or(Duration::from_secs(60)),
            page_size: options.page_size.filter(|n| *n > 0).unwrap_or(PAGE_SIZE),
            auth: Mutex::new(AuthState::default()),
        })
    }

    /// `host[:port]` of the registry.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// `http(s)://host[:port]`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The registry flavour in use.
    pub fn kind(&self) -> RegistryKind {
        self.kind
    }

    /// The underlying HTTP client (for registry-specific APIs).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The (adapted) credentials, if any.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.credentials.as_ref()
    }

    fn http_error(&self, error: reqwest::Error) -> OciError {
        OciError::Http {
            host: self.registry.clone(),
            error,
        }
    }

    fn authorize(&self, request: RequestBuilder, scope: &str) -> RequestBuilder {
        let state = self.auth.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(token) = state.tokens.get(scope) {
            return request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        match (&self.credentials, state.basic) {
            (Some(c), true) => request.header(AUTHORIZATION, c.basic_header()),
            _ => request,
        }
    }

    /// Sends the request `build` makes, answering a 401 challenge once
    /// (Basic, or a Bearer token for `scope`) and retrying. A second 401
    /// is [`OciError::Unauthorized`]; 403 and 404 become their errors
    /// naming `what`; other statuses are returned as they are.
    pub async fn send(
        &self,
        scope: &str,
        what: &str,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Response> {
        let response = self
            .authorize(build(), scope)
            .send()
            .await
            .map_err(|e| self.http_error(e))?;
        let response = if response.status() == StatusCode::UNAUTHORIZED {
            self.answer_challenge(&response, scope).await?;
            self.authorize(build(), scope)
                .send()
                .await
                .map_err(|e| self.http_error(e))?
        } else {
            response
        };
        match response.status() {
            StatusCode::UNAUTHORIZED => Err(OciError::Unauthorized {
                host: self.registry.clone(),
            }),
            StatusCode::FORBIDDEN => Err(OciError::Denied {
                host: self.registry.clone(),
                what: what.to_owned(),
            }),
            StatusCode::NOT_FOUND => Err(OciError::NotFound {
                host: self.registry.clone(),
                what: what.to_owned(),
            }),
            _ => Ok(response),
        }
    }

    async fn answer_challenge(&self, response: &Response, scope: &str) -> Result<()> {
        let challenges: Vec<Challenge> = response
            .headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(Challenge::parse)
            .collect();
        let bearer = challenges
            .iter()
            .find(|c| matches!(c, Challenge::Bearer { .. }));
        match (bearer, challenges.first()) {
            (
                Some(Challenge::Bearer {
                    realm,
                    service,
                    scope: challenge_scope,
                }),
                _,
            ) => {
                let wanted = challenge_scope.as_deref().unwrap_or(scope);
                let token = fetch_token(
                    &self.http,
                    &self.registry,
                    realm,
                    service.as_deref(),
                    Some(wanted),
                    self.credentials.as_ref(),
                )
                .await?;
                let mut state = self.auth.lock().unwrap_or_else(|e| e.into_inner());
                state.tokens.insert(scope.to_owned(), token);
                Ok(())
            }
            (_, Some(Challenge::Basic)) if self.credentials.is_some() => {
                let mut state = self.auth.lock().unwrap_or_else(|e| e.into_inner());
                if state.basic {
                    // Basic credentials were sent already and refused.
                    return Err(OciError::Unauthorized {
                        host: self.registry.clone(),
                    });
                }
                state.basic = true;
                Ok(())
            }
            _ => Err(OciError::Unauthorized {
                host: self.registry.clone(),
            }),
        }
    }

    /// `repository:<name>:pull`.
    pub fn pull_scope(repository: &str) -> String {
        format!("repository:{repository}:pull")
    }

    /// Every tag of `repository`, following `Link` pagination.
    pub async fn tags(&self, repository: &str) -> Result<Vec<String>> {
        let first = format!(
            "{}/v2/{repository}/tags/list?n={}",
            self.base, self.page_size
        );
        let scope = Self::pull_scope(repository);
        let what = format!("repository {repository}");
        let mut out = Vec::new();
        self.paginate(&first, &scope, &what, |bytes| {
            let page: TagList = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
            out.extend(page.tags.unwrap_or_default());
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Every repository `/v2/_catalog` lists (registries may refuse it:
    /// GHCR and ECR do), following `Link` pagination.
    pub async fn catalog(&self) -> Result<Vec<String>> {
        let first = format!("{}/v2/_catalog?n={}", self.base, self.page_size);
        let mut out = Vec::new();
        self.paginate(&first, "registry:catalog:*", "the catalog", |bytes| {
            let page: Catalog = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
            out.extend(page.repositories.unwrap_or_default());
            Ok(())
        })
        .await?;
        Ok(out)
    }

    async fn paginate(
        &self,
        first: &str,
        scope: &str,
        what: &str,
        mut page: impl FnMut(&[u8]) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let mut url = first.to_owned();
        // A registry looping its Link headers must not hang the caller.
        for _ in 0..10_000 {
            let response = self
                .send(scope, what, || {
                    self.http.get(&url).timeout(self.request_timeout)
                })
                .await?;
            let response = self.expect_success(response, what).await?;
            let next = next_link(response.headers()).map(|l| self.resolve(&l));
            let bytes = response.bytes().await.map_err(|e| self.http_error(e))?;
            page(&bytes).map_err(|reason| OciError::Protocol {
                host: self.registry.clone(),
                reason: format!("bad listing of {what}: {reason}"),
            })?;
            match next {
                Some(n) if n != url => url = n,
                _ => return Ok(()),
            }
        }
        Err(OciError::Protocol {
            host: self.registry.clone(),
            reason: format!("listing of {what} does not end"),
        })
    }

    fn resolve(&self, link: &str) -> String {
        if link.starts_with("http://") || link.starts_with("https://") {
            link.to_owned()
        } else if link.starts_with('/') {
            format!("{}{link}", self.base)
        } else {
            format!("{}/{link}", self.base)
        }
    }

    /// Fails with [`OciError::Status`] unless `response` is a success.
    pub async fn expect_success(&self, response: Response, what: &str) -> Result<Response> {
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Err(OciError::Status {
            host: self.registry.clone(),
            status,
            what: what.to_owned(),
            body: body.chars().take(300).collect(),
        })
    }

    /// Fetches the manifest `reference` names and checks its digest: the
    /// sha256 of the bytes must equal the reference's digest when pinned,
    /// and the registry's `Docker-Content-Digest` when it sends one.
    pub async fn manifest(&self, reference: &Reference) -> Result<FetchedManifest> {
        let url = format!(
            "{}/v2/{}/manifests/{}",
            self.base,
            reference.repository,
            reference.manifest_ref()
        );
        let what = format!("manifest {reference}");
        let response = self
            .send(&Self::pull_scope(&reference.repository), &what, || {
                self.http
                    .get(&url)
                    .header(ACCEPT, manifest::ACCEPT)
                    .timeout(self.request_timeout)
            })
            .await?;
        let response = self.expect_success(response, &what).await?;
        let announced = header_str(response.headers(), "docker-content-digest")
            .map(|d| d.parse::<Digest>())
            .transpose()
            .map_err(|_| OciError::Protocol {
                host: self.registry.clone(),
                reason: "Docker-Content-Digest is not a sha256 digest".to_owned(),
            })?;
        let content_type = header_str(response.headers(), CONTENT_TYPE.as_str()).map(str::to_owned);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.http_error(e))?
            .to_vec();
        let digest = Digest::of(&bytes);
        for expected in [reference.digest.as_ref(), announced.as_ref()]
            .into_iter()
            .flatten()
        {
            if *expected != digest {
                return Err(OciError::ManifestDigestMismatch {
                    reference: reference.to_string(),
                    expected: expected.clone(),
                    got: digest,
                });
            }
        }
        let manifest = Manifest::parse(&bytes, content_type.as_deref(), &reference.to_string())?;
        Ok(FetchedManifest {
            manifest,
            digest,
            bytes,
        })
    }

    /// Requests blob `digest` of `repository`, from byte `offset` on when
    /// non-zero (`Range: bytes=<offset>-`). The caller checks whether the
    /// registry answered 206 or the whole blob (200).
    pub async fn blob(&self, repository: &str, digest: &Digest, offset: u64) -> Result<Response> {
        let url = format!("{}/v2/{repository}/blobs/{digest}", self.base);
        let what = format!("blob {digest} of {repository}");
        let response = self
            .send(&Self::pull_scope(repository), &what, || {
                let request = self.http.get(&url);
                if offset > 0 {
                    request.header(reqwest::header::RANGE, format!("bytes={offset}-"))
                } else {
                    request
                }
            })
            .await?;
        if response.status() == StatusCode::RANGE_NOT_SATISFIABLE {
            return Ok(response);
        }
        self.expect_success(response, &what).await
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
}

/// The `rel="next"` target of a `Link` header.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|part| {
            let (target, params) = part.split_once(';')?;
            let is_next = params.split(';').any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
            is_next.then(|| target.to_owned())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_next_link() {
        let mut headers = HeaderMap::new();
        headers.insert(
            LINK,
            HeaderValue::from_static("</v2/m/tags/list?last=b&n=2>; rel=\"next\""),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("/v2/m/tags/list?last=b&n=2")
        );
        headers.insert(LINK, HeaderValue::from_static("</x>; rel=\"prev\""));
        assert_eq!(next_link(&headers), None);
    }

    #[test]
    fn loopback_registries_default_to_plain_http() {
        let c = RegistryClient::new("127.0.0.1:5000", ClientOptions::default()).unwrap();
        assert_eq!(c.base_url(), "http://127.0.0.1:5000");
        let c = RegistryClient::new("ghcr.io", ClientOptions::default()).unwrap();
        assert_eq!(c.base_url(), "https://ghcr.io");
        assert_eq!(c.kind(), RegistryKind::Ghcr);
    }
}
