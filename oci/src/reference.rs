//! `oci://registry[:port]/repository[:tag][@sha256:<hex>]` references.
//!
//! The registry host is required (there is no implicit Docker Hub), the
//! tag defaults to `latest`, and a digest, when present, is what gets
//! pulled and verified (the tag is then only informative).

use std::fmt;
use std::str::FromStr;

use super::digest::Digest;
use super::error::OciError;

/// Tag used when a reference names none.
pub const DEFAULT_TAG: &str = "latest";

/// A parsed artifact reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// Repository path (`org/model`).
    pub repository: String,
    /// Tag (`latest` when neither tag nor digest was given).
    pub tag: Option<String>,
    /// Pinned manifest digest.
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses `oci://…`, `oras://…` or a bare `registry/repo:tag`.
    pub fn parse(text: &str) -> Result<Reference, OciError> {
        let fail = |reason: &str| OciError::InvalidReference {
            reference: text.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = text.trim();
        let rest = match trimmed.split_once("://") {
            Some((scheme, rest)) => {
                if !matches!(scheme.to_ascii_lowercase().as_str(), "oci" | "oras") {
                    return Err(fail("the scheme must be oci:// (or oras://)"));
                }
                rest
            }
            None => trimmed,
        };
        let (name, digest) =
            match rest.split_once('@') {
                Some((name, digest)) => (
                    name,
                    Some(digest.parse::<Digest>().map_err(|_| {
                        fail("the digest must be sha256:<64 lowercase hex digits>")
                    })?),
                ),
                None => (rest, None),
            };
        let (registry, path) = name.split_once('/').ok_or_else(|| {
            fail("expected oci://registry[:port]/repository[:tag] (no repository)")
        })?;
        if !looks_like_host(registry) {
            return Err(fail(
                "the first path element must be a registry host (a name with a dot or a port, or localhost)",
            ));
        }
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
            _ => (path, None),
        };
        if !valid_repository(repository) {
            return Err(fail(
                "the repository must be lowercase path components of [a-z0-9._-], each starting and ending with a letter or digit",
            ));
        }
        if let Some(tag) = tag {
            if !valid_tag(tag) {
                return Err(fail(
                    "the tag must be 1 to 128 characters of [A-Za-z0-9_.-], not starting with . or -",
                ));
            }
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_owned()),
            (None, None) => Some(DEFAULT_TAG.to_owned()),
            (None, Some(_)) => None,
        };
        Ok(Reference {
            registry: registry.to_ascii_lowercase(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// What the manifest endpoint is asked for: the digest when pinned,
    /// else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => DEFAULT_TAG.to_owned(),
        }
    }

    /// The registry host without its port.
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }

    /// The same reference pinned to `digest` (tag kept for display).
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            digest: Some(digest),
            ..self.clone()
        }
    }
}

impl FromStr for Reference {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Reference, OciError> {
        Reference::parse(text)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// `registry` without its `:port` (IPv6 literals keep their brackets).
pub fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        return registry
            .split_once(']')
            .map_or(registry, |(h, _)| &registry[..=h.len()]);
    }
    registry.split_once(':').map_or(registry, |(h, _)| h)
}

/// Whether plain HTTP is the default for `registry`: loopback addresses
/// and `localhost`, as the Docker and ORAS clients do.
pub fn is_loopback(registry: &str) -> bool {
    let host = host_of(registry);
    host == "localhost"
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn looks_like_host(text: &str) -> bool {
    !text.is_empty()
        && (text.contains('.') || text.contains(':') || text == "localhost")
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

fn valid_repository(repo: &str) -> bool {
    !repo.is_empty()
        && repo.len() <= 255
        && repo.split('/').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        })
}

fn valid_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    (1..=128).contains(&bytes.len())
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_tags_ports_and_digests() {
        let r = Reference::parse("oci://ghcr.io/org/models/qwen:v1.2").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("ghcr.io", "org/models/qwen", Some("v1.2"))
        );
        assert_eq!(r.manifest_ref(), "v1.2");
        let r = Reference::parse("oci://127.0.0.1:5000/tiny").unwrap();
        assert_eq!(r.tag.as_deref(), Some(DEFAULT_TAG));
        assert_eq!(r.host(), "127.0.0.1");
        assert!(is_loopback(&r.registry));
        let r = Reference::parse(&format!("oras://localhost:5000/a/b@sha256:{HEX}")).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.manifest_ref(), format!("sha256:{HEX}"));
        let r = Reference::parse(&format!("registry.lan/a:v1@sha256:{HEX}")).unwrap();
        assert_eq!(r.manifest_ref(), format!("sha256:{HEX}"), "digest wins");
        assert_eq!(
            r.to_string(),
            format!("oci://registry.lan/a:v1@sha256:{HEX}")
        );
        assert!(!is_loopback("registry.lan"));
    }

    #[test]
    fn refuses_malformed_references_with_a_reason() {
        for (bad, says) in [
            ("https://ghcr.io/a:v1", "scheme"),
            ("oci://ghcr.io", "no repository"),
            ("oci://library/ubuntu", "registry host"),
            ("oci://ghcr.io/Org/Model", "lowercase"),
            ("oci://ghcr.io/a//b", "lowercase"),
            ("oci://ghcr.io/a:-bad", "tag"),
            ("oci://ghcr.io/a@sha256:1234", "digest"),
        ] {
            let err = Reference::parse(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
