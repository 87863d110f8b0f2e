//! Content digests (`sha256:<hex>`): parsing, computing and comparing.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use super::error::OciError;

/// A `sha256:<64 lowercase hex>` content digest, the only algorithm
/// registries use in practice.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The digest a finished hasher holds.
    pub fn from_hasher(hasher: Sha256) -> Digest {
        Digest {
            hex: hex::encode(hasher.finalize()),
        }
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl FromStr for Digest {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Digest, OciError> {
        let hex = text
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or_else(|| OciError::InvalidDigest(text.to_owned()))?;
        Ok(Digest {
            hex: hex.to_owned(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computes_and_parses() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
    }

    #[test]
    fn refuses_other_forms() {
        for bad in [
            "sha256:abc",
            "sha512:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }
}
