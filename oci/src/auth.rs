//! The registry auth handshake: parsing `WWW-Authenticate` challenges and
//! fetching Bearer tokens from the realm they name.
//!
//! A client first tries anonymously; a 401 names either `Basic` (send the
//! credentials on every request) or `Bearer realm=..,service=..,scope=..`
//! (ask the realm for a token, with the credentials as Basic auth when
//! there are some, and send the token).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::credentials::Credentials;
use super::error::OciError;

/// A parsed `WWW-Authenticate` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// `Basic realm=".."`.
    Basic,
    /// `Bearer realm="..",service="..",scope=".."`.
    Bearer {
        /// Token endpoint URL.
        realm: String,
        /// `service` parameter, when given.
        service: Option<String>,
        /// `scope` parameter, when given.
        scope: Option<String>,
    },
}

impl Challenge {
    /// Parses one challenge header value; `None` for schemes other than
    /// Basic and Bearer or a Bearer challenge without a realm.
    pub fn parse(header: &str) -> Option<Challenge> {
        let header = header.trim();
        let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => Some(Challenge::Basic),
            "bearer" => {
                let mut params = parse_params(params);
                Some(Challenge::Bearer {
                    realm: params.remove("realm").filter(|r| !r.is_empty())?,
                    service: params.remove("service"),
                    scope: params.remove("scope"),
                })
            }
            _ => None,
        }
    }
}

/// `key="value", key2=value2` → map (keys lowercased; quoted values may
/// hold commas and `\"`).
fn parse_params(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    other => value.push(other),
                }
            }
            (value, &quoted[end.min(quoted.len())..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        out.insert(key, value);
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    out
}

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// Fetches a Bearer token from `realm` for `scope`, sending `credentials`
/// as Basic auth when given. A 401 or 403 from the token endpoint means
/// the credentials were refused.
pub async fn fetch_token(
    http: &reqwest::Client,
    host: &str,
    realm: &str,
    service: Option<&str>,
    scope: Option<&str>,
    credentials: Option<&Credentials>,
) -> Result<String, OciError> {
    let mut query: Vec<(&str, &str)> = Vec::new();
    if let Some(service) = service {
        query.push(("service", service));
    }
    if let Some(scope) = scope {
        query.push(("scope", scope));
    }
    let mut request = http.get(realm).query(&query);
    if let Some(c) = credentials {
        request = request.header(reqwest::header::AUTHORIZATION, c.basic_header());
    }
    let response = request.send().await.map_err(|error| OciError::Http {
        host: host.to_owned(),
        error,
    })?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(OciError::Unauthorized {
            host: host.to_owned(),
        });
    }
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(OciError::Status {
            host: host.to_owned(),
            status: status.as_u16(),
            what: "the token endpoint".to_owned(),
            body: body.chars().take(200).collect(),
        });
    }
    let body: TokenResponse = response.json().await.map_err(|error| OciError::Http {
        host: host.to_owned(),
        error,
    })?;
    body.token
        .or(body.access_token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| OciError::Protocol {
            host: host.to_owned(),
            reason: "the token endpoint returned no token".to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_and_basic_challenges() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:org/m:pull,push""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:org/m:pull,push".into()),
            }
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            Challenge::parse("bearer realm=https://a/t, service=x"),
            Some(Challenge::Bearer {
                realm: "https://a/t".into(),
                service: Some("x".into()),
                scope: None,
            })
        );
        assert_eq!(Challenge::parse("Bearer service=x"), None);
        assert_eq!(Challenge::parse("Negotiate abc"), None);
    }
}
