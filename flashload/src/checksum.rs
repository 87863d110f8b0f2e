//! Chunk checksums. Files are hashed in fixed-size chunks rather than as a
//! whole so that the ranges of one large file can be copied and verified in
//! parallel; a manifest stores one hex digest per chunk.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

/// Default chunk size: also the size of the ranges a large file is split into.
pub const DEFAULT_CHUNK_BYTES: u64 = 64 << 20;

/// A checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Algorithm {
    /// XXH3, 128-bit: fast, non-cryptographic; catches corruption, not tampering.
    #[serde(rename = "xxh3-128")]
    #[value(name = "xxh3-128", alias = "fast", alias = "xxh3")]
    Xxh3,
    /// SHA-256: cryptographic, several times slower.
    #[serde(rename = "sha256")]
    #[value(name = "sha256", alias = "sha-256")]
    Sha256,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Xxh3 => "xxh3-128",
            Algorithm::Sha256 => "sha256",
        })
    }
}

impl FromStr for Algorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "xxh3-128" | "xxh3" | "fast" => Ok(Algorithm::Xxh3),
            "sha256" | "sha-256" => Ok(Algorithm::Sha256),
            other => Err(format!(
                "unknown checksum algorithm {other:?} (use xxh3-128 or sha256)"
            )),
        }
    }
}

/// How the chunk checksums of a manifest were computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumSpec {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Bytes per chunk; the last chunk of a file may be shorter.
    pub chunk_bytes: u64,
}

impl ChecksumSpec {
    /// Number of chunks of a file of `size` bytes (an empty file has one, empty, chunk).
    pub fn chunks(&self, size: u64) -> u64 {
        size.div_ceil(self.chunk_bytes).max(1)
    }
}

/// A running hash of one chunk.
#[derive(Clone)]
pub enum Hasher {
    /// XXH3-128 state.
    Xxh3(Box<Xxh3>),
    /// SHA-256 state.
    Sha256(Sha256),
}

impl Hasher {
    /// A fresh hasher for `algorithm`.
    pub fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Xxh3 => Hasher::Xxh3(Box::new(Xxh3::new())),
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Xxh3(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    /// The lower-case hex digest.
    pub fn finish_hex(self) -> String {
        match self {
            Hasher::Xxh3(h) => format!("{:032x}", h.digest128()),
            Hasher::Sha256(h) => hex::encode(h.finalize()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(algorithm: Algorithm, bytes: &[u8]) -> String {
        let mut h = Hasher::new(algorithm);
        h.update(bytes);
        h.finish_hex()
    }

    #[test]
    fn sha256_matches_the_known_vector() {
        assert_eq!(
            digest(Algorithm::Sha256, b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn xxh3_is_128_bit_and_incremental() {
        let whole = digest(Algorithm::Xxh3, b"hello world");
        assert_eq!(whole.len(), 32);
        let mut h = Hasher::new(Algorithm::Xxh3);
        h.update(b"hello ");
        h.update(b"world");
        assert_eq!(h.finish_hex(), whole);
        assert_ne!(digest(Algorithm::Xxh3, b"hello worle"), whole);
    }

    #[test]
    fn chunk_counts() {
        let spec = ChecksumSpec {
            algorithm: Algorithm::Xxh3,
            chunk_bytes: 10,
        };
        assert_eq!(spec.chunks(0), 1);
        assert_eq!(spec.chunks(10), 1);
        assert_eq!(spec.chunks(11), 2);
    }

    #[test]
    fn names_round_trip() {
        for a in [Algorithm::Xxh3, Algorithm::Sha256] {
            assert_eq!(a.to_string().parse::<Algorithm>(), Ok(a));
        }
        assert_eq!("fast".parse::<Algorithm>(), Ok(Algorithm::Xxh3));
        assert!("md5".parse::<Algorithm>().is_err());
    }
}
