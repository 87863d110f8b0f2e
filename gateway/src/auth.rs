//! Bearer-token authentication with constant-time comparison.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The accepted API keys, stored as SHA-256 digests so that comparison time
/// reveals neither the keys nor their lengths.
#[derive(Clone, Default)]
pub struct Auth {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({} keys)", self.digests.len())
    }
}

impl Auth {
    /// Accepts any of `tokens` (empty entries ignored).
    pub fn new<I, S>(tokens: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let digests = tokens
            .into_iter()
            .filter(|t| !t.as_ref().trim().is_empty())
            .map(|t| Sha256::digest(t.as_ref().trim().as_bytes()).into())
            .collect();
        Self { digests }
    }

    /// Reads tokens from a file: one per line, `#` comments allowed.
    pub fn from_file(path: &std::path::Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        Ok(Self::new(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#')),
        ))
    }

    /// Number of accepted keys.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Checks an `Authorization` header value (`Bearer <key>`; the scheme
    /// is case-insensitive and may be followed by several spaces, as RFC
    /// 9110 allows).
    pub fn check(&self, authorization: Option<&[u8]>) -> bool {
        authorization
            .and_then(bearer_token)
            .is_some_and(|token| self.check_key(token))
    }

    /// Checks a bare key.
    pub fn check_key(&self, token: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut ok = subtle::Choice::from(0);
        for d in &self.digests {
            ok |= d.ct_eq(&digest);
        }
        ok.into()
    }
}

/// The token of a `Bearer` credential, if the value is one.
pub fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"Bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_exact_bearer_tokens() {
        let a = Auth::new(["s3cret", "other"]);
        assert!(a.check(Some(b"Bearer s3cret")));
        assert!(a.check(Some(b"Bearer other")));
        assert!(!a.check(Some(b"Bearer s3cret ")));
        assert!(
            a.check(Some(b"bearer s3cret")),
            "the scheme is case-insensitive"
        );
        assert!(a.check(Some(b"BEARER  s3cret")), "several spaces");
        assert!(!a.check(Some(b"Bearers3cret")));
        assert!(!a.check(Some(b"Bearer")));
        assert!(!a.check(Some(b"Basic s3cret")));
        assert!(!a.check(Some(b"Bearer ")));
        assert!(!a.check(None));
    }
}
