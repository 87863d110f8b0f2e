//! Registry credentials and the per-registry adapters that turn what a
//! Secret holds into the username/password the registry's token endpoint
//! (or Basic auth) expects.
//!
//! - **Harbor**: a robot account (`robot$project+name`) and its secret, sent
//!   as Basic credentials to Harbor's token service; nothing to adapt.
//! - **GHCR**: any username and a personal access token (`read:packages`);
//!   an empty username is replaced by a placeholder because GHCR ignores it
//!   but Basic auth needs one.
//! - **ECR**: the password is the token of `aws ecr get-login-password`
//!   (username `AWS`). A Secret may instead hold the raw
//!   `authorizationToken` of `GetAuthorizationToken`, which is
//!   `base64("AWS:<password>")`; it is decoded here. Such tokens expire
//!   after 12 hours; with AWS access keys instead, [`super::ecr`] asks ECR
//!   for a fresh token on every pull or sync.
//!
//! Credentials never appear in logs: `Debug` redacts the password.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;

use super::error::OciError;
use super::reference::host_of;

/// Username used for GHCR when the Secret holds only a token.
pub const GHCR_PLACEHOLDER_USER: &str = "flexinfer";
/// Username of ECR tokens.
pub const ECR_USER: &str = "AWS";

/// A username and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Account name (Harbor robot account, GitHub user, `AWS`).
    pub username: String,
    /// Password, robot secret, PAT or ECR token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Credentials from two environment variables (their names, not their
    /// values, are given on the command line).
    pub fn from_env(username_var: &str, password_var: &str) -> Result<Credentials, OciError> {
        let read = |name: &str| {
            std::env::var(name).map_err(|_| {
                OciError::Credentials(format!("environment variable {name} is not set"))
            })
        };
        Ok(Credentials {
            username: read(username_var)?,
            password: read(password_var)?,
        })
    }

    /// The `Authorization: Basic` value.
    pub fn basic_header(&self) -> String {
        format!(
            "Basic {}",
            STANDARD.encode(format!("{}:{}", self.username, self.password))
        )
    }

    /// Applies the adapter of `kind` (see the module documentation).
    pub fn adapted(self, kind: RegistryKind) -> Credentials {
        match kind {
            RegistryKind::Ghcr if self.username.is_empty() => Credentials {
                username: GHCR_PLACEHOLDER_USER.to_owned(),
                ..self
            },
            RegistryKind::Ecr => match decode_ecr_token(&self.password) {
                Some(password) => Credentials {
                    username: ECR_USER.to_owned(),
                    password,
                },
                None if self.username.is_empty() => Credentials {
                    username: ECR_USER.to_owned(),
                    ..self
                },
                None => self,
            },
            _ => self,
        }
    }
}

/// Registry flavours with credential quirks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryKind {
    /// Any OCI distribution registry (`docker-registry`, Zot, ...).
    Generic,
    /// Harbor (robot accounts; project listing API).
    Harbor,
    /// GitHub Container Registry.
    Ghcr,
    /// Amazon ECR.
    Ecr,
}

impl RegistryKind {
    /// The flavour a registry host implies: `ghcr.io` is GHCR,
    /// `<account>.dkr.ecr.<region>.amazonaws.com[.cn]` is ECR, everything
    /// else generic (Harbor cannot be told from its host name; declare it).
    pub fn detect(registry: &str) -> RegistryKind {
        let host = host_of(registry).to_ascii_lowercase();
        if host == "ghcr.io" {
            RegistryKind::Ghcr
        } else if host.contains(".dkr.ecr.")
            && (host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn"))
        {
            RegistryKind::Ecr
        } else {
            RegistryKind::Generic
        }
    }
}

/// `base64("AWS:<password>")` → `<password>`.
fn decode_ecr_token(token: &str) -> Option<String> {
    let bytes = STANDARD.decode(token.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.strip_prefix("AWS:").map(str::to_owned)
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default, rename = "identitytoken")]
    identity_token: Option<String>,
}

/// Credentials for `registry` from a Docker config (`config.json`, or the
/// `.dockerconfigjson` key of a `kubernetes.io/dockerconfigjson` Secret).
/// Keys match with or without a scheme and path, first on `host:port`,
/// then on the host alone. `None` when the file has no entry for it.
pub fn from_docker_config(json: &[u8], registry: &str) -> Result<Option<Credentials>, OciError> {
    let config: DockerConfig = serde_json::from_slice(json)
        .map_err(|e| OciError::Credentials(format!("docker config is not valid JSON: {e}")))?;
    let normalize = |key: &str| {
        let key = key.split_once("://").map_or(key, |(_, rest)| rest);
        key.split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    let registry = registry.to_ascii_lowercase();
    let entry = config
        .auths
        .iter()
        .find(|(k, _)| normalize(k) == registry)
        .or_else(|| {
            config
                .auths
                .iter()
                .find(|(k, _)| normalize(k) == host_of(&registry))
        });
    let Some((key, auth)) = entry else {
        return Ok(None);
    };
    if let Some(encoded) = auth.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                OciError::Credentials(format!(
                    "docker config entry {key:?}: \"auth\" is not base64 of user:password"
                ))
            })?;
        let (username, password) = decoded.split_once(':').ok_or_else(|| {
            OciError::Credentials(format!(
                "docker config entry {key:?}: \"auth\" is not base64 of user:password"
            ))
        })?;
        return Ok(Some(Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        }));
    }
    if let Some(token) = auth.identity_token.as_deref().filter(|t| !t.is_empty()) {
        return Ok(Some(Credentials {
            username: auth.username.clone().unwrap_or_default(),
            password: token.to_owned(),
        }));
    }
    match (&auth.username, &auth.password) {
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.clone(),
            password: p.clone(),
        })),
        _ => Err(OciError::Credentials(format!(
            "docker config entry {key:?} has neither \"auth\" nor username and password"
        ))),
    }
}

/// [`from_docker_config`] on a file.
pub fn from_docker_config_file(
    path: &Path,
    registry: &str,
) -> Result<Option<Credentials>, OciError> {
    let bytes = std::fs::read(path).map_err(OciError::io(path))?;
    from_docker_config(&bytes, registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let c = Credentials {
            username: "robot$models+puller".into(),
            password: "s3cr3t-value".into(),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("robot$models+puller"));
    }

    #[test]
    fn docker_config_entries_match_by_host() {
        let auth = STANDARD.encode("user:pa:ss");
        let json = format!(
            r#"{{"auths":{{"https://registry.lan:5000/v1/":{{"auth":"{auth}"}},"ghcr.io":{{"username":"u","password":"p"}}}}}}"#
        );
        let c = from_docker_config(json.as_bytes(), "registry.lan:5000")
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("user", "pa:ss")
        );
        let c = from_docker_config(json.as_bytes(), "ghcr.io")
            .unwrap()
            .unwrap();
        assert_eq!(c.password, "p");
        assert!(from_docker_config(json.as_bytes(), "quay.io")
            .unwrap()
            .is_none());
        assert!(from_docker_config(b"{", "x").is_err());
    }

    #[test]
    fn adapters_fix_up_ghcr_and_ecr() {
        assert_eq!(
            RegistryKind::detect("123456789012.dkr.ecr.us-east-1.amazonaws.com"),
            RegistryKind::Ecr
        );
        assert_eq!(RegistryKind::detect("ghcr.io"), RegistryKind::Ghcr);
        assert_eq!(
            RegistryKind::detect("127.0.0.1:5000"),
            RegistryKind::Generic
        );
        let raw = Credentials {
            username: String::new(),
            password: STANDARD.encode("AWS:eyJwYXlsb2Fk"),
        };
        let ecr = raw.adapted(RegistryKind::Ecr);
        assert_eq!(
            (ecr.username.as_str(), ecr.password.as_str()),
            ("AWS", "eyJwYXlsb2Fk")
        );
        let ghcr = Credentials {
            username: String::new(),
            password: "ghp_x".into(),
        }
        .adapted(RegistryKind::Ghcr);
        assert_eq!(ghcr.username, GHCR_PLACEHOLDER_USER);
    }
}
