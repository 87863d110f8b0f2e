//! Authentication between replicas: every request and snapshot answer
//! carries the sender's id, a timestamp and an HMAC-SHA256 over both, the
//! method, the path and the body, keyed with the secret all replicas of a
//! deployment share. A missing or wrong signature, or a timestamp further
//! than [`MAX_SKEW`] from the receiver's clock, is refused.
//!
//! Replays inside the window re-apply records already applied, which the
//! prefix index absorbs (records are idempotent).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Header naming the sending replica.
pub const PEER_ID_HEADER: &str = "x-flexinfer-peer-id";
/// Header with the sender's clock, milliseconds since the Unix epoch.
pub const PEER_TIME_HEADER: &str = "x-flexinfer-peer-time";
/// Header with the hex HMAC-SHA256.
pub const PEER_SIGNATURE_HEADER: &str = "x-flexinfer-peer-signature";

/// Largest difference accepted between the sender's and the receiver's
/// clocks.
pub const MAX_SKEW: Duration = Duration::from_secs(30);

/// Shortest secret accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 16;

const BLOCK: usize = 64;

/// The shared secret, as HMAC key pads.
#[derive(Clone)]
pub struct Key {
    inner: [u8; BLOCK],
    outer: [u8; BLOCK],
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The three signature headers' values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// Sender id.
    pub id: String,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Hex HMAC.
    pub signature: String,
}

/// Why a signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A header is missing or unreadable.
    #[error("missing or malformed signature headers")]
    Missing,
    /// The timestamp is outside the accepted window.
    #[error("stale timestamp")]
    Stale,
    /// The HMAC does not match.
    #[error("bad signature")]
    Mismatch,
}

impl Key {
    /// The key for `secret` (RFC 2104: longer secrets are hashed first).
    pub fn new(secret: &[u8]) -> Self {
        let mut key = [0u8; BLOCK];
        if secret.len() > BLOCK {
            key[..32].copy_from_slice(&Sha256::digest(secret));
        } else {
            key[..secret.len()].copy_from_slice(secret);
        }
        let mut inner = [0x36u8; BLOCK];
        let mut outer = [0x5cu8; BLOCK];
        for i in 0..BLOCK {
            inner[i] ^= key[i];
            outer[i] ^= key[i];
        }
        Key { inner, outer }
    }

    /// HMAC-SHA256 of the concatenated `parts`.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut inner = Sha256::new();
        inner.update(self.inner);
        for part in parts {
            inner.update(part);
        }
        let mut outer = Sha256::new();
        outer.update(self.outer);
        outer.update(inner.finalize());
        outer.finalize().into()
    }

    fn message_mac(
        &self,
        method: &str,
        path: &str,
        id: &str,
        time_ms: u64,
        body: &[u8],
    ) -> [u8; 32] {
        let time = time_ms.to_string();
        self.mac(&[
            b"flexinfer-peer-v1\n",
            method.as_bytes(),
            b"\n",
            path.as_bytes(),
            b"\n",
            id.as_bytes(),
            b"\n",
            time.as_bytes(),
            b"\n",
            body,
        ])
    }

    /// Signs a message from `id` now.
    pub fn sign(&self, method: &str, path: &str, id: &str, body: &[u8]) -> Signed {
        self.sign_at(method, path, id, body, now_ms())
    }

    /// Signs a message from `id` as sent at `time_ms`.
    pub fn sign_at(&self, method: &str, path: &str, id: &str, body: &[u8], time_ms: u64) -> Signed {
        Signed {
            id: id.to_owned(),
            time_ms,
            signature: hex::encode(self.message_mac(method, path, id, time_ms, body)),
        }
    }

    /// Checks a message's headers (`None` where absent) against its body,
    /// at `now_ms`.
    pub fn verify(
        &self,
        method: &str,
        path: &str,
        headers: [Option<&str>; 3],
        body: &[u8],
        now_ms: u64,
    ) -> Result<String, Refused> {
        let [Some(id), Some(time), Some(signature)] = headers else {
            return Err(Refused::Missing);
        };
        let time_ms: u64 = time.trim().parse().map_err(|_| Refused::Missing)?;
        let mut given = [0u8; 32];
        hex::decode_to_slice(signature.trim(), &mut given).map_err(|_| Refused::Missing)?;
        if time_ms.abs_diff(now_ms) > MAX_SKEW.as_millis() as u64 {
            return Err(Refused::Stale);
        }
        let expected = self.message_mac(method, path, id, time_ms, body);
        if bool::from(expected.ct_eq(&given)) {
            Ok(id.to_owned())
        } else {
            Err(Refused::Mismatch)
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // Test case 2.
        let key = Key::new(b"Jefe");
        assert_eq!(
            hex::encode(key.mac(&[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        let key = Key::new(&[0xaa; 131]);
        assert_eq!(
            hex::encode(key.mac(&[b"Test Using Larger Than Block-Size Key - Hash Key First"])),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn signatures_verify_only_with_the_same_secret_body_and_fresh_time() {
        let key = Key::new(b"0123456789abcdef-shared");
        let signed = key.sign("POST", "/peer/v1/records", "replica-a", b"body");
        let headers = |s: &Signed| {
            [
                Some(s.id.clone()),
                Some(s.time_ms.to_string()),
                Some(s.signature.clone()),
            ]
        };
        let check = |key: &Key, h: &[Option<String>; 3], body: &[u8], now: u64| {
            let h = [h[0].as_deref(), h[1].as_deref(), h[2].as_deref()];
            key.verify("POST", "/peer/v1/records", h, body, now)
        };
        let h = headers(&signed);
        let now = signed.time_ms;
        assert_eq!(check(&key, &h, b"body", now), Ok("replica-a".into()));
        assert_eq!(check(&key, &h, b"bodz", now), Err(Refused::Mismatch));
        let other = Key::new(b"another secret of the same size");
        assert_eq!(check(&other, &h, b"body", now), Err(Refused::Mismatch));
        let skew = MAX_SKEW.as_millis() as u64 + 1;
        assert_eq!(check(&key, &h, b"body", now + skew), Err(Refused::Stale));
        assert_eq!(check(&key, &h, b"body", now - skew), Err(Refused::Stale));
        // The id and the time are signed too.
        let mut renamed = h.clone();
        renamed[0] = Some("replica-b".into());
        assert_eq!(check(&key, &renamed, b"body", now), Err(Refused::Mismatch));
        let mut moved = h.clone();
        moved[1] = Some((now + 1).to_string());
        assert_eq!(check(&key, &moved, b"body", now), Err(Refused::Mismatch));
        for missing in 0..3 {
            let mut partial = h.clone();
            partial[missing] = None;
            assert_eq!(check(&key, &partial, b"body", now), Err(Refused::Missing));
        }
        let mut garbage = h.clone();
        garbage[2] = Some("zz".into());
        assert_eq!(check(&key, &garbage, b"body", now), Err(Refused::Missing));
        // Another path or method is another message.
        let hh = [h[0].as_deref(), h[1].as_deref(), h[2].as_deref()];
        assert_eq!(
            key.verify("GET", "/peer/v1/records", hh, b"body", now),
            Err(Refused::Mismatch)
        );
    }
}
